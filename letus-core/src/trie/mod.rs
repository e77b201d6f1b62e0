//! The DMM-Trie over pages: batch updates that produce new page versions, reads, proofs and leaf walks at any
//! version. Pages come from a [`PageSource`] (the store: page cache in front of LSVPS); this module never does I/O.
//!
//! Every walk works on [`Page`]s directly (slots plus the hashes of the inline branches): an update touches only
//! the children its keys fall in, rebuilds the slot list of each page it changes once, and knows the slot changes
//! it made (the DeltaPage) without comparing trees.

pub mod diff;
pub mod node;
pub mod page;

use std::sync::Arc;

use letus_verify::fold::{fold, fold_range, Frontier};
use letus_verify::proof::Record as ProofRecord;
use letus_verify::{Hash, KeyPath, Proof, TrieId, Version};

use crate::error::{Error, Result};
use crate::lsvps::PageId;
use crate::vdls::Location;
pub use node::{Cell, Leaf};
use page::{child_slot, grand_hashes, grand_slot, Change, Child, Lookup, Root, SlotNo};
pub use page::{Head, Page};

/// Where pages come from: `load` returns page `id` of trie `tid` exactly as it was at `version` (a version at
/// which that page was written).
pub trait PageSource: Sync {
    /// Loads one page version.
    fn load(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>>;

    /// Loads a page version that an update is about to replace. A source with a cache may drop its copy: the
    /// update builds the new version while the old one is still held only by the update, so that a large commit
    /// never keeps both versions of every page it touches in memory. The update gives unchanged pages back
    /// through [`PageSource::give_back`].
    fn take(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>> {
        self.load(tid, id, version)
    }

    /// Returns a page taken with [`PageSource::take`] that the update did not change.
    fn give_back(&self, _tid: TrieId, _page: Arc<Page>) {}
}

/// Where a walk that only reads leaves gets its pages: the slots of page `id` of trie `tid` at `version`, sorted by
/// slot, without the page being built (no branch hashed).
pub trait SlotSource {
    /// A page's slots, sorted by slot.
    type Slots: std::ops::Deref<Target = [(SlotNo, Cell)]>;

    /// Reads one page version's slots.
    fn slots(&self, tid: TrieId, id: PageId, version: Version) -> Result<Self::Slots>;
}

/// The id of the page whose root sits at `depth` (even) on `path`.
pub fn page_id(path: &KeyPath, depth: usize) -> PageId {
    let mut prefix = [0u8; 32];
    let full = depth / 2;
    if let (Some(dst), Some(src)) = (prefix.get_mut(..full), path.0.get(..full)) {
        dst.copy_from_slice(src);
    }
    PageId {
        depth: depth as u8,
        prefix,
    }
}

/// Splits `items` (sorted by path) into the runs whose paths share nibble `depth`: `(nibble, first path, run)`,
/// in order. Every walk that descends with a sorted batch (updates, builds, proofs) groups it this way.
pub(crate) fn nibble_groups<'a, T>(
    items: &'a [T],
    depth: usize,
    path: impl Fn(&T) -> &KeyPath + 'a,
) -> impl Iterator<Item = (u8, &'a KeyPath, &'a [T])> + 'a {
    let mut rest = items;
    std::iter::from_fn(move || {
        let first = path(rest.first()?);
        let c = first.nibble(depth);
        let n = rest
            .iter()
            .take_while(|x| path(x).nibble(depth) == c)
            .count();
        let (group, tail) = rest.split_at(n);
        rest = tail;
        Some((c, first, group))
    })
}

/// One staged change of a key: its new leaf, or `None` to delete it.
#[derive(Clone, Debug)]
pub struct Write {
    /// The key path.
    pub path: KeyPath,
    /// The new leaf, or `None` for a delete.
    pub leaf: Option<Leaf>,
}

/// What a [`PageWrite`] keeps of the page version it replaces.
#[derive(Clone, Copy, Debug)]
pub struct Prior {
    /// Its version.
    pub version: Version,
    /// Its newest stored record, if it has been stored.
    pub head: Option<Head>,
}

/// A page written by an update.
#[derive(Clone, Debug)]
pub struct PageWrite {
    /// The page as it was before, `None` for a page that did not exist.
    pub old: Option<Prior>,
    /// The page at the new version (`head` not yet set: the store chooses the record).
    pub new: Page,
    /// The slot changes from `old` (or from nothing) to `new`, in slot order; never empty for a page that existed.
    pub changes: Vec<Change>,
}

/// The result of [`update`].
#[derive(Debug)]
pub struct Updated {
    /// The trie's new root hash.
    pub root: Hash,
    /// Every page written, child pages before their parents; the root page last, when it changed.
    pub pages: Vec<PageWrite>,
    /// For every write whose key had a leaf before: the path and the location of that leaf's value record.
    pub prevs: Vec<(KeyPath, Location)>,
}

struct Updater<'a, S: PageSource> {
    src: &'a S,
    tid: TrieId,
    version: Version,
    pages: Vec<PageWrite>,
    prevs: Vec<(KeyPath, Location)>,
    /// The children a parallel worker updated (see [`Updater::update_page`]).
    outs: Vec<ChildOut>,
}

/// The new content of one child `c` of a page: its leaf (slot `1 + c`), or its grandchild slots and the hash of
/// the branch they form.
struct ChildOut {
    c: u8,
    leaf: Option<Leaf>,
    grand: Vec<(SlotNo, Cell)>,
    hash: Option<Hash>,
}

impl ChildOut {
    fn leaf(c: u8, leaf: Option<Leaf>) -> ChildOut {
        ChildOut {
            c,
            leaf,
            grand: Vec::new(),
            hash: None,
        }
    }

    /// A child that is a branch over `grand` (non-empty); hashes the branch.
    fn branch(c: u8, grand: Vec<(SlotNo, Cell)>) -> ChildOut {
        let hash = Some(fold(&grand_hashes(&grand)));
        ChildOut {
            c,
            leaf: None,
            grand,
            hash,
        }
    }
}

/// A page's content before normalization: slots and inline branch hashes.
type Parts = (Vec<(SlotNo, Cell)>, Vec<(u8, Hash)>);

/// Applies `writes` (sorted by path, unique) to the trie whose root page is `root` (`None` for a new trie).
pub fn update<S: PageSource>(
    src: &S,
    tid: TrieId,
    root: Option<Arc<Page>>,
    writes: &[Write],
    version: Version,
) -> Result<Updated> {
    // Two writes of one path would never be separated by any nibble: the walk below needs them unique and sorted.
    if writes.windows(2).any(|w| w[0].path >= w[1].path) {
        return Err(internal("trie writes out of order or repeated"));
    }
    let mut u = Updater {
        src,
        tid,
        version,
        pages: Vec::new(),
        prevs: Vec::new(),
        outs: Vec::new(),
    };
    let cell = match root {
        // The 16 subtrees below the root are independent: they are updated on all cores. The root page never
        // disappears (an empty trie has an empty root page).
        Some(old) => u
            .update_page(old, writes, true)?
            .ok_or_else(|| internal("the root page vanished"))?,
        None => {
            let leaves = u.puts(None, writes);
            let parts = u.build_page_cells(0, &leaves)?;
            u.finish_page(PageId::ROOT, None, parts)?
                .ok_or_else(|| internal("a new root page vanished"))?
        }
    };
    Ok(Updated {
        root: cell.hash(),
        pages: u.pages,
        prevs: u.prevs,
    })
}

fn internal(what: &str) -> Error {
    Error::corrupt("trie", 0, what)
}

impl<S: PageSource> Updater<'_, S> {
    /// Updates the existing page `old` with `writes` (all below it); returns what its parent holds in its place:
    /// nothing, a leaf that moved up, or the page reference (the old one when nothing changed).
    fn update_page(
        &mut self,
        old: Arc<Page>,
        writes: &[Write],
        parallel: bool,
    ) -> Result<Option<Cell>> {
        let d = usize::from(old.id.depth);
        match old.root() {
            // Only the root page is ever empty or a single leaf: rebuild it.
            Root::Empty | Root::Leaf(_) => {
                let existing = match old.root() {
                    Root::Leaf(l) => Some(*l),
                    _ => None,
                };
                let leaves = self.puts(existing.as_ref(), writes);
                let parts = self.build_page_cells(d, &leaves)?;
                let id = old.id;
                self.finish_page(id, Some(old), parts)
            }
            Root::Branch => {
                let groups: Vec<(u8, &[Write])> = nibble_groups(writes, d, |w| &w.path)
                    .map(|(c, _, g)| (c, g))
                    .collect();
                let outs: Vec<ChildOut> = if parallel && groups.len() > 1 {
                    use rayon::prelude::*;
                    let done: Vec<Result<Updater<'_, S>>> = groups
                        .into_par_iter()
                        .map(|(c, group)| {
                            let mut u = Updater {
                                src: self.src,
                                tid: self.tid,
                                version: self.version,
                                pages: Vec::new(),
                                prevs: Vec::new(),
                                outs: Vec::new(),
                            };
                            let out = u.update_child(&old, c, group)?;
                            u.outs.push(out);
                            Ok(u)
                        })
                        .collect();
                    let mut outs = Vec::with_capacity(done.len());
                    for u in done {
                        let u = u?;
                        self.pages.extend(u.pages);
                        self.prevs.extend(u.prevs);
                        outs.extend(u.outs);
                    }
                    outs
                } else {
                    groups
                        .into_iter()
                        .map(|(c, group)| self.update_child(&old, c, group))
                        .collect::<Result<_>>()?
                };
                if !collapses(&old, &outs) {
                    return self.replace_children(old, outs);
                }
                // The page collapses into its parent, or (the root page) into a leaf or nothing.
                let parts = splice_children(&old, outs);
                let id = old.id;
                self.finish_page(id, Some(old), parts)
            }
        }
    }

    /// The new content of child `c` of the branch page `page` after `writes` (all below that child).
    fn update_child(&mut self, page: &Page, c: u8, writes: &[Write]) -> Result<ChildOut> {
        let d = usize::from(page.id.depth);
        match page.child(c) {
            Child::Empty => {
                let leaves = self.puts(None, writes);
                self.build_child(c, d + 1, &leaves)
            }
            Child::Leaf(l) => {
                let l = *l;
                let leaves = self.puts(Some(&l), writes);
                self.build_child(c, d + 1, &leaves)
            }
            Child::Branch(_) => {
                let old = page.grandchildren(c);
                let mut grand: Vec<(SlotNo, Cell)> = Vec::with_capacity(old.len() + 2);
                let mut rest = old;
                for (g, first, group) in nibble_groups(writes, d + 1, |w| &w.path) {
                    let slot = grand_slot(c, g);
                    let before = rest.partition_point(|(s, _)| *s < slot);
                    grand.extend_from_slice(&rest[..before]);
                    rest = &rest[before..];
                    let existing = match rest.first() {
                        Some((s, cell)) if *s == slot => {
                            rest = &rest[1..];
                            Some(*cell)
                        }
                        _ => None,
                    };
                    let new = match existing {
                        None => {
                            let leaves = self.puts(None, group);
                            self.build_cell(d + 2, &leaves)?
                        }
                        Some(Cell::Leaf(l)) => {
                            let leaves = self.puts(Some(&l), group);
                            self.build_cell(d + 2, &leaves)?
                        }
                        Some(Cell::Page { version, .. }) => {
                            let child = self.src.take(self.tid, page_id(first, d + 2), version)?;
                            self.update_page(child, group, false)?
                        }
                    };
                    if let Some(cell) = new {
                        grand.push((slot, cell));
                    }
                }
                grand.extend_from_slice(rest);
                Ok(normalize_child(c, grand))
            }
        }
    }

    /// Child `c` (at odd `depth`) holding exactly `leaves` (sorted by path).
    fn build_child(&mut self, c: u8, depth: usize, leaves: &[Leaf]) -> Result<ChildOut> {
        match leaves {
            [] => Ok(ChildOut::leaf(c, None)),
            [one] => Ok(ChildOut::leaf(c, Some(*one))),
            _ => {
                let mut grand = Vec::new();
                for (g, _, group) in nibble_groups(leaves, depth, |l| &l.path) {
                    if let Some(cell) = self.build_cell(depth + 1, group)? {
                        grand.push((grand_slot(c, g), cell));
                    }
                }
                Ok(ChildOut::branch(c, grand))
            }
        }
    }

    /// The node at even `depth` > 0 holding exactly `leaves`: nothing, a leaf, or a new page.
    fn build_cell(&mut self, depth: usize, leaves: &[Leaf]) -> Result<Option<Cell>> {
        match leaves {
            [] => Ok(None),
            [one] => Ok(Some(Cell::Leaf(*one))),
            [first, ..] => {
                let parts = self.build_page_cells(depth, leaves)?;
                self.finish_page(page_id(&first.path, depth), None, parts)
            }
        }
    }

    /// The slots of a page at even `depth` holding exactly `leaves` (before the page-root normalization).
    fn build_page_cells(&mut self, depth: usize, leaves: &[Leaf]) -> Result<Parts> {
        let mut outs = Vec::new();
        for (c, _, group) in nibble_groups(leaves, depth, |l| &l.path) {
            outs.push(self.build_child(c, depth + 1, group)?);
        }
        Ok(assemble(outs))
    }

    /// Normalizes a page's new slots (SPEC.md §3.2: a branch with a single leaf below is that leaf), and writes
    /// the page if it changed. Returns what the parent holds.
    fn finish_page(
        &mut self,
        id: PageId,
        old: Option<Arc<Page>>,
        (mut cells, mut branches): Parts,
    ) -> Result<Option<Cell>> {
        let single_leaf = match cells.as_slice() {
            [(s, Cell::Leaf(l))] if (1..=16).contains(s) || *s == 0 => Some(*l),
            _ => None,
        };
        if id.depth > 0 {
            // A page below the root is always a branch: with one leaf or nothing left, it disappears.
            if cells.is_empty() {
                return Ok(None);
            }
            if let Some(l) = single_leaf {
                return Ok(Some(Cell::Leaf(l)));
            }
        } else if let Some(l) = single_leaf {
            cells = vec![(0, Cell::Leaf(l))];
            branches = Vec::new();
        }
        // Pages that stay branches go through `replace_children`; what comes here is new or changes kind.
        let changes = page::diff(old.as_ref().map_or(&[][..], |o| o.cells()), &cells);
        if let Some(o) = old.as_ref().filter(|_| changes.is_empty()) {
            let cell = Cell::Page {
                hash: o.hash(),
                version: o.version,
            };
            if let Some(o) = old {
                self.src.give_back(self.tid, o);
            }
            return Ok(Some(cell));
        }
        let prior = old.map(|o| Prior {
            version: o.version,
            head: o.head,
        });
        let (new, hash) = Page::from_parts(id, self.version, cells, branches);
        self.pages.push(PageWrite {
            old: prior,
            new,
            changes,
        });
        Ok(Some(Cell::Page {
            hash,
            version: self.version,
        }))
    }

    /// A branch page that stays a branch, with its touched children replaced by `outs`. The changes are found
    /// child by child; the page is then rewritten in place when the update holds the only reference to it (the
    /// usual case: the cache gave it up in [`PageSource::take`]), so that an update of one slot does not copy the
    /// other 255.
    fn replace_children(&mut self, old: Arc<Page>, outs: Vec<ChildOut>) -> Result<Option<Cell>> {
        let mut changes = Vec::new();
        for o in &outs {
            let before: Vec<(SlotNo, Cell)> = match old.child(o.c) {
                Child::Leaf(l) => vec![(child_slot(o.c), Cell::Leaf(*l))],
                _ => Vec::new(),
            };
            let after: Vec<(SlotNo, Cell)> = o
                .leaf
                .map(|l| vec![(child_slot(o.c), Cell::Leaf(l))])
                .unwrap_or_default();
            changes.extend(page::diff(&before, &after));
        }
        for o in &outs {
            changes.extend(page::diff(old.grandchildren(o.c), &o.grand));
        }
        if changes.is_empty() {
            let cell = Cell::Page {
                hash: old.hash(),
                version: old.version,
            };
            self.src.give_back(self.tid, old);
            return Ok(Some(cell));
        }
        let prior = Prior {
            version: old.version,
            head: old.head,
        };
        let id = old.id;
        let (new, hash) = match Arc::try_unwrap(old) {
            Ok(page) => page.with_children(
                self.version,
                outs.iter().map(|o| (o.c, o.leaf, &o.grand[..], o.hash)),
            ),
            Err(shared) => {
                let (cells, branches) = splice_children(&shared, outs);
                Page::from_parts(id, self.version, cells, branches)
            }
        };
        self.pages.push(PageWrite {
            old: Some(prior),
            new,
            changes,
        });
        Ok(Some(Cell::Page {
            hash,
            version: self.version,
        }))
    }

    /// The leaves below a node after the writes: the existing leaf (unless overwritten or deleted) plus new puts.
    /// Records the existing leaf's location as the previous record of the write that replaces it.
    fn puts(&mut self, existing: Option<&Leaf>, writes: &[Write]) -> Vec<Leaf> {
        let mut out: Vec<Leaf> = writes.iter().filter_map(|w| w.leaf).collect();
        if let Some(l) = existing {
            if writes.iter().any(|w| w.path == l.path) {
                self.prevs.push((l.path, l.loc));
            } else {
                let at = out.partition_point(|x| x.path < l.path);
                out.insert(at, *l);
            }
        }
        out
    }
}

/// A child's content after an update, normalized: no grandchildren → empty; one grandchild that is a leaf →
/// that leaf moves up into the child slot.
fn normalize_child(c: u8, grand: Vec<(SlotNo, Cell)>) -> ChildOut {
    match grand.as_slice() {
        [] => ChildOut::leaf(c, None),
        [(_, Cell::Leaf(l))] => ChildOut::leaf(c, Some(*l)),
        _ => ChildOut::branch(c, grand),
    }
}

/// The slots of a page from the content of its children (in child order): child leaves first (slots 1..=16),
/// then the grandchildren, which is slot order.
fn assemble(outs: Vec<ChildOut>) -> Parts {
    let mut cells: Vec<(SlotNo, Cell)> = outs
        .iter()
        .filter_map(|o| o.leaf.map(|l| (child_slot(o.c), Cell::Leaf(l))))
        .collect();
    let branches = outs
        .iter()
        .filter_map(|o| o.hash.map(|h| (o.c, h)))
        .collect();
    for o in outs {
        cells.extend(o.grand);
    }
    (cells, branches)
}

/// Whether `page` with the children in `outs` replaced would hold nothing or a single leaf (and so collapse into
/// its parent, or for the root page become a leaf root).
fn collapses(page: &Page, outs: &[ChildOut]) -> bool {
    let mut nonempty = 0;
    let mut leaves = 0;
    for c in 0..16u8 {
        let (empty, leaf) = match outs.iter().find(|o| o.c == c) {
            Some(o) => (o.leaf.is_none() && o.grand.is_empty(), o.leaf.is_some()),
            None => match page.child(c) {
                Child::Empty => (true, false),
                Child::Leaf(_) => (false, true),
                Child::Branch(_) => (false, false),
            },
        };
        if !empty {
            nonempty += 1;
            leaves += usize::from(leaf);
        }
    }
    nonempty == 0 || (nonempty == 1 && leaves == 1)
}

/// The slots of `page` with the children in `outs` (sorted by child) replaced by their new content; untouched
/// children keep their slots and branch hashes.
fn splice_children(page: &Page, outs: Vec<ChildOut>) -> Parts {
    let extra: usize = outs.iter().map(|o| o.grand.len() + 1).sum();
    let mut cells = Vec::with_capacity(page.cells().len() + extra);
    let mut branches = Vec::with_capacity(16);
    let mut by_child: [Option<ChildOut>; 16] = Default::default();
    for o in outs {
        let c = usize::from(o.c);
        by_child[c] = Some(o);
    }
    for (c, o) in by_child.iter().enumerate() {
        let c = c as u8;
        let leaf = match o {
            Some(o) => o.leaf,
            None => match page.child(c) {
                Child::Leaf(l) => Some(*l),
                _ => None,
            },
        };
        if let Some(l) = leaf {
            cells.push((child_slot(c), Cell::Leaf(l)));
        }
    }
    for (c, o) in by_child.into_iter().enumerate() {
        let c = c as u8;
        match o {
            Some(o) => {
                cells.extend(o.grand);
                if let Some(h) = o.hash {
                    branches.push((c, h));
                }
            }
            None => {
                cells.extend_from_slice(page.grandchildren(c));
                if let Some(h) = page.branch_hash(c) {
                    branches.push((c, h));
                }
            }
        }
    }
    (cells, branches)
}

/// The leaf of `path` below the page `root`, if any.
pub fn get<S: PageSource>(
    src: &S,
    tid: TrieId,
    root: &Arc<Page>,
    path: &KeyPath,
) -> Result<Option<Leaf>> {
    let mut cur = root.clone();
    loop {
        let next = match cur.lookup(path) {
            Lookup::Absent => return Ok(None),
            Lookup::Leaf(l) => return Ok(Some(*l)),
            Lookup::Page(v) => (page_id(path, usize::from(cur.id.depth) + 2), v),
        };
        cur = src.load(tid, next.0, next.1)?;
    }
}

/// The proof (SPEC.md §5) for `paths` (sorted, unique) below the root page `root`.
pub fn prove<S: PageSource>(src: &S, tid: TrieId, root: &Page, paths: &[KeyPath]) -> Result<Proof> {
    let mut records = Vec::new();
    if !paths.is_empty() {
        prove_page(src, tid, root, paths, &mut records)?;
    }
    Ok(Proof { records })
}

fn leaf_record(l: &Leaf, q: &[KeyPath]) -> ProofRecord {
    if q.contains(&l.path) {
        ProofRecord::Leaf
    } else {
        ProofRecord::OtherLeaf {
            path: l.path,
            value_hash: l.value_hash,
        }
    }
}

/// The Branch record of a node with children `hashes` for the queries `q` (which expand the children they fall in).
pub(crate) fn branch_record(hashes: &[Hash; 16], depth: usize, q: &[KeyPath]) -> ProofRecord {
    let expanded = q.iter().fold(0u16, |m, p| m | 1 << p.nibble(depth));
    let mut mask = 0u8;
    let mut frontier = Vec::new();
    for (i, &(lo, hi)) in Frontier::of(expanded).ranges().iter().enumerate() {
        let h = fold_range(hashes, lo.into(), hi.into());
        if !h.is_empty() {
            mask |= 1 << i;
            frontier.push(h);
        }
    }
    ProofRecord::Branch {
        mask,
        hashes: frontier,
    }
}

fn prove_page<S: PageSource>(
    src: &S,
    tid: TrieId,
    page: &Page,
    q: &[KeyPath],
    out: &mut Vec<ProofRecord>,
) -> Result<()> {
    let d = usize::from(page.id.depth);
    match page.root() {
        Root::Empty => out.push(ProofRecord::Empty),
        Root::Leaf(l) => out.push(leaf_record(l, q)),
        Root::Branch => {
            out.push(branch_record(&page.child_hashes(), d, q));
            for (c, _, group) in nibble_groups(q, d, |p| p) {
                match page.child(c) {
                    Child::Empty => out.push(ProofRecord::Empty),
                    Child::Leaf(l) => out.push(leaf_record(l, group)),
                    Child::Branch(_) => {
                        let grand = page.grandchildren(c);
                        out.push(branch_record(&grand_hashes(grand), d + 1, group));
                        for (g, first, gq) in nibble_groups(group, d + 1, |p| p) {
                            match page.cell(grand_slot(c, g)) {
                                None => out.push(ProofRecord::Empty),
                                Some(Cell::Leaf(l)) => out.push(leaf_record(l, gq)),
                                Some(Cell::Page { version, .. }) => {
                                    let child = src.load(tid, page_id(first, d + 2), *version)?;
                                    prove_page(src, tid, &child, gq, out)?;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Calls `f` for every leaf below the page `page`, in path order (built pages: tests compare the slot walks
/// with it).
#[cfg(test)]
pub fn walk<S: PageSource>(
    src: &S,
    tid: TrieId,
    page: &Page,
    f: &mut dyn FnMut(&Leaf) -> Result<()>,
) -> Result<()> {
    for (slot, cell) in page.cells_in_path_order() {
        match cell {
            Cell::Leaf(l) => f(l)?,
            Cell::Page { version, .. } => {
                let (c, g) = slot_nibbles(*slot);
                let child = src.load(tid, page.id.child(c, g), *version)?;
                walk(src, tid, &child, f)?;
            }
        }
    }
    Ok(())
}

/// Calls `f` for every leaf below page `id` (`cells`: its slots, sorted by slot) whose path is above `after` (all
/// of them without it), in path order, until `f` returns `false`; returns whether the walk went to the end.
/// Pages come from `src` as slots, never built when the source does not build them. Subtrees entirely at or
/// below `after` are not loaded, so resuming a walk after the last path it reported costs only the pages on that
/// path.
pub fn walk_slots_after<S: SlotSource>(
    src: &S,
    tid: TrieId,
    id: PageId,
    cells: &[(SlotNo, Cell)],
    after: Option<&KeyPath>,
    f: &mut dyn FnMut(&Leaf) -> Result<bool>,
) -> Result<bool> {
    for (slot, cell) in page::slots_in_path_order(cells) {
        match cell {
            Cell::Leaf(l) => {
                if after.is_none_or(|a| l.path > *a) && !f(l)? {
                    return Ok(false);
                }
            }
            Cell::Page { version, .. } => {
                let (c, g) = slot_nibbles(*slot);
                let child = id.child(c, g);
                // Page depths are even, so the child's prefix is whole bytes of every path below it.
                let n = usize::from(child.depth / 2);
                let below = match after {
                    None => None,
                    Some(a) => match child.prefix[..n].cmp(&a.0[..n]) {
                        std::cmp::Ordering::Less => continue,
                        std::cmp::Ordering::Greater => None,
                        std::cmp::Ordering::Equal => Some(a),
                    },
                };
                let slots = src.slots(tid, child, *version)?;
                if !walk_slots_after(src, tid, child, &slots, below, f)? {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

/// The two nibbles below the page of grandchild slot `slot` (`17..=272`).
pub fn slot_nibbles(slot: SlotNo) -> (u8, u8) {
    let i = slot.saturating_sub(17);
    (((i / 16) & 0x0f) as u8, (i % 16) as u8)
}
