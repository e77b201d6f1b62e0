//! A page of the DMM-Trie (two levels: the node at depth `2j` and its children at `2j+1`, with the nodes at
//! `2j+2` as leaves or references to child pages), held compactly in memory, and its two stored forms, the
//! BasePage and the DeltaPage.
//!
//! ## Slots
//! A page is a sparse, sorted list of **slots**: slot 0 is the page root when it is a leaf (root page only),
//! slot `1 + c` is child `c` when it is a leaf, slot `17 + 16c + g` is grandchild `(c, g)` (a leaf or a child-page
//! reference). Branches are implied: child `c` is a branch iff some grandchild `(c, _)` is non-empty, and the
//! page root is a branch iff some child is non-empty.
//!
//! ## In memory
//! A [`Page`] is its slot list (88-byte leaves, 40-byte page references), a bitmap of the slots it holds (so that
//! finding a slot reads no other slot) and the hashes of its inline branches (at most 16 children and the root),
//! computed once when the page is built or loaded. It is close to its encoded size: at tens of millions of keys
//! the decoded pages are the engine's memory, and node trees with a pointer per child took about four times more.
//! Pages are immutable once built and shared (`Arc`) between the cache, the commit that replaces them and any
//! reader.
//!
//! ## Format (inside an LSVPS page record, which carries its own checksum)
//! ```text
//! BasePage:  u8 1 (format) | u8 0 (base)  | u64 version | u32 since_base | u16 n | n × slot_entry
//! DeltaPage: u8 1 (format) | u8 1 (delta) | u64 first_version | u32 since_base | u8 has_prev (0, 1 or 2)
//!            | [u64 prev_version | u8 prev_kind] | [u64 rebase_version, when has_prev = 2]
//!            | u16 entries | entries × (u64 version | u16 n | n × slot_entry)
//! slot_entry: u16 slot | u8 tag | payload       tag 0 empty (deltas only) | tag 1 leaf (88 bytes) | tag 2 page (40 bytes)
//!                                                 | tag 3 compact leaf | tag 4 compact page (written since format 6)
//! leaf:  path[32] | value_hash[32] | u64 version | u32 file_id | u64 offset | u32 len
//! page:  hash[32] | u64 version
//! compact leaf: path[32] | value_hash[32] | varint version | varint file_id | varint offset | varint len
//! compact page: hash[32] | varint version          (varint: unsigned LEB128, at most 10 bytes)
//! ```
//! A BasePage lists its slots in increasing order. `since_base` counts slot updates since the page's last
//! BasePage, so that a reopened store continues the Base/Delta schedule where it stopped.
//!
//! A **rebase** DeltaPage (`has_prev` 2) is written instead of a BasePage when a large page's chain is full but few
//! of its slots changed since its BasePage at `rebase_version`: its first entry holds every slot changed since
//! that BasePage, with its content as of the entry's version. Applied over the page at *any* version from
//! `rebase_version` up to the entry's, it gives the page at the entry's version (the slots it names are
//! assigned, and the others did not change since the BasePage), so a load may skip the records between it and
//! that BasePage, or, where that BasePage is gone (pruned), follow `prev` as for any DeltaPage.

use letus_verify::fold::fold;
use letus_verify::hash::inner;
use letus_verify::{Hash, KeyPath, Version, EMPTY};

pub use super::node::{Cell, Leaf};
use crate::lsvps::{PageId, PageKind};
use crate::vdls::Location;

/// A slot number (`0..=272`).
pub type SlotNo = u16;

/// A slot change: the new content, `None` for emptied.
pub type Change = (SlotNo, Option<Cell>);

/// Highest slot number.
pub const MAX_SLOT: SlotNo = 272;

/// The slot of child `c` when it is a leaf.
pub fn child_slot(c: u8) -> SlotNo {
    1 + SlotNo::from(c)
}

/// The slot of grandchild `(c, g)`.
pub fn grand_slot(c: u8, g: u8) -> SlotNo {
    17 + 16 * SlotNo::from(c) + SlotNo::from(g)
}

/// Bytes a cached page costs beyond [`Page`] and its two slot arrays: the `Arc` header (16), the page cache's
/// entry (key 48, value 8, the cache's own bookkeeping and hash table, about 64) and allocator rounding of three
/// allocations (about 32). Measured: the process's RSS against the cache's weight at 3M-10M keys.
pub const CACHED_PAGE_OVERHEAD: usize = 160;

const FORMAT: u8 = 1;
const LEAF_LEN: usize = 32 + 32 + 8 + 4 + 8 + 4;
const PAGE_LEN: usize = 32 + 8;

/// A page at one version, with the hashes of its inline branches.
///
/// Invariants (established by [`Page::build`], the only constructor): `cells` is sorted by slot without
/// duplicates and has the page shape (slot 0 only alone and only in the root page; a child is a leaf or has
/// grandchildren, never both; a non-root page is a branch); `occupied` has bit `s` set exactly for the slots `s`
/// in `cells`; `hashes` holds `fold` of the grandchild hashes of exactly the children that have grandchildren,
/// sorted by child, then, when there are at least [`FOLD_NODES_MIN_BRANCHES`] of them, the root fold's 14 inner
/// nodes ([`fold_nodes`], keys `FOLD_NODE..FOLD_NODE + 14`), then, if there was any branch, `(ROOT_HASH, the hash
/// of the page's root node)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Which page.
    pub id: PageId,
    /// The version the page was written at (the newest data in it).
    pub version: Version,
    /// The newest stored record of this page at `version`, if the page was loaded from or written to storage.
    pub head: Option<Head>,
    // Which slots are in `cells`: a slot's position there is the number of set bits below it, so that a lookup
    // reads this header and the one cell it needs. A search of the sorted slots cost three or four cache misses a
    // page (the entries are 104 bytes apart), and at 10M keys a warm get's four pages lie in 2 GB of memory: the
    // page lookups were 39% of a get's time. Nine 32-bit words (288 bits for 273 slots) keep the page at 136
    // bytes, where five 64-bit words would take it to 144.
    occupied: [u32; 9],
    // Boxed slices, not vectors: no capacity word, and no spare capacity. At 10M keys there are 2.1M cached pages,
    // most of them holding two or three leaves, and the 16 bytes took the `Arc<Page>` allocation across a size
    // class of the allocator (168 to 152 bytes: 192-byte blocks to 160). The page's own hash is the last entry of
    // `hashes` rather than a field for the same reason: that made room for `occupied`, and a get never needs it.
    // A page without inline branches (all its children leaves: most pages at 10M keys hold two or three) does not
    // store it at all, which would cost an allocation; [`Page::hash`] computes it from those few leaves.
    cells: Box<[(SlotNo, Cell)]>,
    hashes: Box<[(u8, Hash)]>,
}

/// The key of the page hash's entry in [`Page`]'s `hashes`, after the 16 children's.
const ROOT_HASH: u8 = 16;

/// The key of the first of the root fold's 14 inner nodes in [`Page`]'s `hashes` (`FOLD_NODE + i` for node `i`
/// of [`fold_nodes`]).
const FOLD_NODE: u8 = 17;

/// A page with at least this many inline branches keeps its root fold's inner nodes ([`fold_nodes`]), so that an
/// update of one child rehashes the four nodes above it rather than all fifteen. Such pages are the few, large,
/// upper ones (at 10M keys the 65,536 depth-4 pages, each with all 16 children branches: 462 bytes each, 30 MB),
/// and they are the ones every commit rewrites: their root fold was 30 of the ~75 BLAKE3 compressions of a
/// depth-4 page update late in a 10M-key load. The many small pages below them have no inline branch.
const FOLD_NODES_MIN_BRANCHES: usize = 8;

/// The inner nodes of `fold(children)` below its root, level by level: nodes `0..8` hash children `(2i, 2i+1)`,
/// nodes `8..12` nodes `(2j, 2j+1)`, nodes `12..14` nodes `(8 + 2k, 9 + 2k)`; the fold is
/// `inner(node 12, node 13)` (SPEC.md §3.3, the same tree as [`fold`]).
fn fold_nodes(children: &[Hash; 16]) -> [Hash; 14] {
    let mut n = [EMPTY; 14];
    for i in 0..8 {
        n[i] = inner(&children[2 * i], &children[2 * i + 1]);
    }
    fold_upper_nodes(&mut n, 0xffff);
    n
}

/// Recomputes the nodes above level one of `n` whose range of children meets `changed` (bit `c` for child `c`).
fn fold_upper_nodes(n: &mut [Hash; 14], changed: u16) {
    for j in 0..4 {
        if changed >> (4 * j) & 0xf != 0 {
            n[8 + j] = inner(&n[2 * j], &n[2 * j + 1]);
        }
    }
    for k in 0..2 {
        if changed >> (8 * k) & 0xff != 0 {
            n[12 + k] = inner(&n[8 + 2 * k], &n[9 + 2 * k]);
        }
    }
}

/// Bit `s` set for every slot `s` of `cells` (sorted, each at most [`MAX_SLOT`]).
fn occupancy(cells: &[(SlotNo, Cell)]) -> [u32; 9] {
    let mut bits = [0u32; 9];
    for (s, _) in cells {
        set_occupied(&mut bits, *s, true);
    }
    bits
}

/// Sets or clears bit `slot` of an occupancy bitmap (a slot above [`MAX_SLOT`] is left alone).
fn set_occupied(bits: &mut [u32; 9], slot: SlotNo, occupied: bool) {
    if let Some(w) = bits.get_mut(usize::from(slot / 32)) {
        if occupied {
            *w |= 1 << (slot % 32);
        } else {
            *w &= !(1 << (slot % 32));
        }
    }
}

/// Where `slot` is in the sorted slots whose occupancy bitmap is `bits` (`Err`: where it would go), like a binary
/// search of them, from the bitmap alone (no slot is read).
fn rank(bits: &[u32; 9], slot: SlotNo) -> Result<usize, usize> {
    let w = usize::from(slot / 32);
    let Some(&word) = bits.get(w) else {
        return Err(bits.iter().map(|x| x.count_ones() as usize).sum());
    };
    let bit = slot % 32;
    let below = bits[..w]
        .iter()
        .map(|x| x.count_ones() as usize)
        .sum::<usize>()
        + (word & ((1u32 << bit) - 1)).count_ones() as usize;
    if word >> bit & 1 == 1 {
        Ok(below)
    } else {
        Err(below)
    }
}

/// The slots of a page (`cells`, sorted by slot) in the order of the paths below them: the lone root leaf (slot
/// 0), then for each child its leaf or its grandchildren. `Page::cells_in_path_order` (tests) for slots not built
/// into a page.
pub fn slots_in_path_order(cells: &[(SlotNo, Cell)]) -> impl Iterator<Item = &(SlotNo, Cell)> + '_ {
    let root_leaf = cells.first().filter(|(s, _)| *s == 0);
    root_leaf.into_iter().chain((0..16u8).flat_map(move |c| {
        let slot = child_slot(c);
        let leaf = cells
            .binary_search_by_key(&slot, |(s, _)| *s)
            .ok()
            .map(|i| &cells[i]);
        let lo = grand_slot(c, 0);
        let a = cells.partition_point(|(s, _)| *s < lo);
        let b = cells.partition_point(|(s, _)| *s < lo + 16);
        leaf.into_iter().chain(cells[a..b].iter())
    }))
}

/// The stored record a page was loaded from, which the next update chains to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The record's key version (a BasePage's version or a DeltaPage's first version).
    pub key_version: Version,
    /// Base or Delta.
    pub kind: PageKind,
    /// Slot updates since the last BasePage, including this record's.
    pub since_base: u32,
    /// Slot updates in this record when it is a DeltaPage.
    pub delta_updates: u32,
    /// Stored records from this one back to its BasePage, both included: what a load of the page reads.
    pub chain: u32,
}

/// The page's root node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root<'a> {
    /// An empty trie (root page only).
    Empty,
    /// A trie of one key (root page only).
    Leaf(&'a Leaf),
    /// A branch: the usual case, and the only one for pages below the root.
    Branch,
}

/// One child of the page's root branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child<'a> {
    /// Nothing below.
    Empty,
    /// One key below.
    Leaf(&'a Leaf),
    /// An inline branch with this hash; its grandchildren are in [`Page::grandchildren`].
    Branch(Hash),
}

impl Page {
    /// Builds page `id` from its slots (sorted by slot, unique), checking the page shape and computing the
    /// hashes of its inline branches. `Err` names what is inconsistent.
    pub fn build(
        id: PageId,
        version: Version,
        head: Option<Head>,
        cells: Vec<(SlotNo, Cell)>,
    ) -> Result<Page, &'static str> {
        if cells.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("page slots out of order");
        }
        if cells.last().is_some_and(|(s, _)| *s > MAX_SLOT) {
            return Err("slot number out of range");
        }
        let mut page = Page {
            id,
            version,
            head,
            occupied: occupancy(&cells),
            cells: cells.into_boxed_slice(),
            hashes: Box::default(),
        };
        match &page.cells[..] {
            [] if id.depth != 0 => return Err("a non-root page with no content"),
            [] => return Ok(page),
            [(0, Cell::Leaf(_))] if id.depth == 0 => return Ok(page),
            [(0, _), ..] => return Err("slot 0 holds a page reference or shares its page"),
            _ => {}
        }
        let mut branches = Vec::with_capacity(17);
        for c in 0..16u8 {
            let grand = page.grandchildren(c);
            let leaf_child = page.cell(child_slot(c));
            match (leaf_child, grand.is_empty()) {
                (Some(Cell::Page { .. }), _) => return Err("a child slot holds a page reference"),
                (Some(_), false) => return Err("a child is both a leaf and a branch"),
                (_, false) => branches.push((c, fold(&grand_hashes(grand)))),
                (_, true) => {}
            }
        }
        page.seal_hash(branches, None);
        Ok(page)
    }

    /// Builds page `id` from slots and the hashes of its inline branches computed by the caller (an update knows
    /// them for the children it did not touch, and computed them for the ones it did). Only the page root is hashed
    /// here, and returned with the page. The caller guarantees the invariants of [`Page`]; debug builds check them
    /// against [`Page::build`].
    pub fn from_parts(
        id: PageId,
        version: Version,
        cells: Vec<(SlotNo, Cell)>,
        branches: Vec<(u8, Hash)>,
    ) -> (Page, Hash) {
        let mut page = Page {
            id,
            version,
            head: None,
            occupied: occupancy(&cells),
            cells: cells.into_boxed_slice(),
            hashes: Box::default(),
        };
        let hash = page.seal_hash(branches, None);
        debug_assert_eq!(
            Page::build(id, version, None, page.cells.to_vec()).as_ref(),
            Ok(&page),
            "an update built an inconsistent page"
        );
        (page, hash)
    }

    /// This page at `version` with the given children replaced: `(c, leaf, grandchild slots, branch hash)` each,
    /// in child order, rewritten in place (the slots of the other children are not copied). The result must stay
    /// a branch page (the caller checked that it does not collapse). The head is cleared: the store sets it.
    /// Returns the page and its hash.
    pub fn with_children<'a>(
        mut self,
        version: Version,
        children: impl Iterator<Item = (u8, Option<Leaf>, &'a [(SlotNo, Cell)], Option<Hash>)>,
    ) -> (Page, Hash) {
        // Back to vectors for the edits (no copy), and boxed again at the end (a copy only if the length changed).
        let mut cells = std::mem::take(&mut self.cells).into_vec();
        let nodes = self.fold_nodes_held();
        let mut branches = std::mem::take(&mut self.hashes).into_vec();
        // The fold nodes and the page hash are computed again below.
        branches.truncate(branches.partition_point(|(c, _)| *c < ROOT_HASH));
        // Kept in step with `cells`, so that positions come from the bitmap and no slot outside the edits is read
        // (at 10M keys a depth-4 page is ~270 slots in ~27 KB, and scanning them was most of an update's cost).
        let mut occupied = self.occupied;
        let mut changed = 0u16;
        for (c, leaf, grand, hash) in children {
            changed |= 1 << c;
            let slot = child_slot(c);
            match (rank(&occupied, slot), leaf) {
                (Ok(i), Some(l)) => cells[i].1 = Cell::Leaf(l),
                (Err(i), Some(l)) => {
                    cells.reserve_exact(1);
                    cells.insert(i, (slot, Cell::Leaf(l)));
                    set_occupied(&mut occupied, slot, true);
                }
                (Ok(i), None) => {
                    cells.remove(i);
                    set_occupied(&mut occupied, slot, false);
                }
                (Err(_), None) => {}
            }
            let lo = grand_slot(c, 0);
            let (Ok(a) | Err(a)) = rank(&occupied, lo);
            let (Ok(b) | Err(b)) = rank(&occupied, lo + 16);
            if b - a == grand.len() {
                cells[a..b].copy_from_slice(grand);
            } else {
                // Grow by exactly what is added (boxing drops any spare capacity with a copy).
                cells.reserve_exact(grand.len().saturating_sub(b - a));
                cells.splice(a..b, grand.iter().copied());
            }
            for s in lo..lo + 16 {
                set_occupied(&mut occupied, s, false);
            }
            for (s, _) in grand {
                set_occupied(&mut occupied, *s, true);
            }
            match (branches.binary_search_by_key(&c, |(b, _)| *b), hash) {
                (Ok(i), Some(h)) => branches[i].1 = h,
                (Err(i), Some(h)) => {
                    branches.reserve_exact(1);
                    branches.insert(i, (c, h));
                }
                (Ok(i), None) => {
                    branches.remove(i);
                }
                (Err(_), None) => {}
            }
        }
        debug_assert_eq!(occupied, occupancy(&cells));
        self.occupied = occupied;
        self.cells = cells.into_boxed_slice();
        self.version = version;
        self.head = None;
        let hash = self.seal_hash(branches, nodes.map(|n| (n, changed)));
        debug_assert_eq!(
            Page::build(self.id, version, None, self.cells.to_vec())
                .map(|p| (p.occupied, p.hashes)),
            Ok((self.occupied, self.hashes.clone())),
            "an update rewrote a page inconsistently"
        );
        (self, hash)
    }

    /// Sets `hashes` to the branch hashes `branches` (sorted by child), then the root fold's inner nodes when the
    /// page has [`FOLD_NODES_MIN_BRANCHES`] branches, then the page hash, computed here from the root node, when
    /// there is any branch hash (a page without one stores no hash). One allocation. `prior`: the fold nodes of
    /// this page before an update, with the children it changed (bit `c` for child `c`); only the nodes above
    /// those are hashed again.
    fn seal_hash(
        &mut self,
        mut branches: Vec<(u8, Hash)>,
        prior: Option<([Hash; 14], u16)>,
    ) -> Hash {
        // A page with a branch is a branch page (slot 0 is only ever a lone leaf).
        if branches.len() < FOLD_NODES_MIN_BRANCHES {
            let hash = self.root_hash(&branches);
            if !branches.is_empty() {
                branches.reserve_exact(1);
                branches.push((ROOT_HASH, hash));
            }
            self.hashes = branches.into_boxed_slice();
            return hash;
        }
        let nodes = match prior {
            Some((mut n, changed)) => {
                let child = |c: usize| self.child_hash_with(c as u8, &branches);
                for (i, node) in n[..8].iter_mut().enumerate() {
                    if changed >> (2 * i) & 3 != 0 {
                        *node = inner(&child(2 * i), &child(2 * i + 1));
                    }
                }
                fold_upper_nodes(&mut n, changed);
                n
            }
            None => fold_nodes(&self.child_hashes_with(&branches)),
        };
        let hash = inner(&nodes[12], &nodes[13]);
        branches.reserve_exact(nodes.len() + 1);
        branches.extend((FOLD_NODE..).zip(nodes));
        branches.push((ROOT_HASH, hash));
        self.hashes = branches.into_boxed_slice();
        hash
    }

    /// The root fold's inner nodes, when the page keeps them.
    fn fold_nodes_held(&self) -> Option<[Hash; 14]> {
        let nb = self.branches().len();
        let held = self.hashes.get(nb..self.hashes.len().saturating_sub(1))?;
        let mut n = [EMPTY; 14];
        if held.len() != n.len() {
            return None;
        }
        for (slot, (_, h)) in n.iter_mut().zip(held) {
            *slot = *h;
        }
        Some(n)
    }

    /// The page hash, with the branch hashes `branches`.
    fn root_hash(&self, branches: &[(u8, Hash)]) -> Hash {
        match self.root() {
            Root::Empty => EMPTY,
            Root::Leaf(l) => l.hash(),
            Root::Branch => fold(&self.child_hashes_with(branches)),
        }
    }

    /// The hashes of the 16 children of the root branch, with the branch hashes `branches` (sorted by child).
    fn child_hashes_with(&self, branches: &[(u8, Hash)]) -> [Hash; 16] {
        std::array::from_fn(|c| self.child_hash_with(c as u8, branches))
    }

    /// The hash of child `c` of the root branch, with the branch hashes `branches` (sorted by child).
    fn child_hash_with(&self, c: u8, branches: &[(u8, Hash)]) -> Hash {
        match self.cell(child_slot(c)) {
            Some(Cell::Leaf(l)) => l.hash(),
            _ => match branches.binary_search_by_key(&c, |(b, _)| *b) {
                Ok(i) => branches[i].1,
                Err(_) => EMPTY,
            },
        }
    }

    /// The branch hashes: the entries of `hashes` before the fold nodes and the page hash.
    fn branches(&self) -> &[(u8, Hash)] {
        let n = self.hashes.partition_point(|(c, _)| *c < ROOT_HASH);
        &self.hashes[..n]
    }

    /// The hash of inline child branch `c`, if child `c` is a branch.
    pub fn branch_hash(&self, c: u8) -> Option<Hash> {
        let b = self.branches();
        b.binary_search_by_key(&c, |(b, _)| *b).ok().map(|i| b[i].1)
    }

    /// The hash of the page's root node (`EMPTY` for an empty root page). Stored when the page has inline
    /// branches; otherwise computed from its at most 16 leaves (commits take the hash [`Page::from_parts`] and
    /// [`Page::with_children`] return instead).
    pub fn hash(&self) -> Hash {
        match self.hashes.last() {
            Some((ROOT_HASH, h)) => *h,
            _ => self.root_hash(self.branches()),
        }
    }

    /// Where `slot` is in `cells` (`Err`: where it would go), like a binary search, from `occupied` alone.
    fn position(&self, slot: SlotNo) -> Result<usize, usize> {
        rank(&self.occupied, slot)
    }

    /// The slots, sorted.
    pub fn cells(&self) -> &[(SlotNo, Cell)] {
        &self.cells
    }

    /// The content of `slot`.
    pub fn cell(&self, slot: SlotNo) -> Option<&Cell> {
        self.position(slot).ok().map(|i| &self.cells[i].1)
    }

    /// The page's root node.
    pub fn root(&self) -> Root<'_> {
        match self.cells.first() {
            None => Root::Empty,
            Some((0, Cell::Leaf(l))) => Root::Leaf(l),
            Some(_) => Root::Branch,
        }
    }

    /// Child `c` of the root branch.
    pub fn child(&self, c: u8) -> Child<'_> {
        if let Some(Cell::Leaf(l)) = self.cell(child_slot(c)) {
            return Child::Leaf(l);
        }
        match self.branch_hash(c) {
            Some(h) => Child::Branch(h),
            None => Child::Empty,
        }
    }

    /// The hashes of the 16 children of the root branch.
    pub fn child_hashes(&self) -> [Hash; 16] {
        self.child_hashes_with(self.branches())
    }

    /// The grandchild slots of child `c` (empty unless the child is a branch), sorted.
    pub fn grandchildren(&self, c: u8) -> &[(SlotNo, Cell)] {
        let lo = grand_slot(c, 0);
        let (Ok(a) | Err(a)) = self.position(lo);
        let (Ok(b) | Err(b)) = self.position(lo + 16);
        &self.cells[a..b]
    }

    /// The cache weight of the page: its memory footprint, with what holding it in a cache costs besides (the
    /// `Arc`, the cache's entry, allocator rounding: [`CACHED_PAGE_OVERHEAD`]). At ten million keys most pages hold
    /// two or three keys, so the fixed part is a third of the engine's memory and must be counted for the memory
    /// budget to hold.
    pub fn weight(&self) -> u32 {
        let bytes = std::mem::size_of::<Page>()
            + CACHED_PAGE_OVERHEAD
            + self.cells.len() * std::mem::size_of::<(SlotNo, Cell)>()
            + self.hashes.len() * std::mem::size_of::<(u8, Hash)>();
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// Every leaf of the page in path order, with the child-page references in between: `f` sees the cells in
    /// the order of the paths below them.
    #[cfg(test)]
    pub fn cells_in_path_order(&self) -> impl Iterator<Item = &(SlotNo, Cell)> + '_ {
        (0..16u8).flat_map(move |c| {
            let leaf = self.position(child_slot(c)).ok().map(|i| &self.cells[i]);
            let root_leaf = (c == 0 && self.occupied[0] & 1 == 1).then(|| &self.cells[0]);
            root_leaf
                .into_iter()
                .chain(leaf)
                .chain(self.grandchildren(c).iter())
        })
    }
}

/// The 16 hashes below one child, from its grandchild slots.
pub fn grand_hashes(grand: &[(SlotNo, Cell)]) -> [Hash; 16] {
    let mut h = [EMPTY; 16];
    for (s, cell) in grand {
        h[usize::from((s - 17) % 16)] = cell.hash();
    }
    h
}

/// The leaf of `path` in a page, the reference to descend into, or neither.
pub enum Lookup<'a> {
    /// No such key.
    Absent,
    /// The key's leaf.
    Leaf(&'a Leaf),
    /// The key is below this child page (at depth `page depth + 2`).
    Page(Version),
}

impl Page {
    /// Where `path` leads inside this page: the read path of every get, proof and update, so it reads no slot but
    /// the one it returns (positions come from the slot bitmap; a child that is neither a leaf nor a branch simply
    /// has no grandchild slot).
    pub fn lookup(&self, path: &KeyPath) -> Lookup<'_> {
        let leaf = |i: usize| match &self.cells[i].1 {
            Cell::Leaf(l) if l.path == *path => Lookup::Leaf(l),
            _ => Lookup::Absent,
        };
        if self.occupied[0] & 1 == 1 {
            // Slot 0: the root page holding one key.
            return leaf(0);
        }
        let d = usize::from(self.id.depth);
        let c = path.nibble(d);
        if let Ok(i) = self.position(child_slot(c)) {
            return leaf(i);
        }
        match self.position(grand_slot(c, path.nibble(d + 1))) {
            Err(_) => Lookup::Absent,
            Ok(i) => match &self.cells[i].1 {
                Cell::Page { version, .. } => Lookup::Page(*version),
                Cell::Leaf(_) => leaf(i),
            },
        }
    }
}

/// Applies changes to a sorted slot list.
pub fn apply(cells: &mut Vec<(SlotNo, Cell)>, changes: &[Change]) {
    for (slot, cell) in changes {
        match (cells.binary_search_by_key(slot, |(s, _)| *s), cell) {
            (Ok(i), Some(c)) => cells[i].1 = *c,
            (Err(i), Some(c)) => cells.insert(i, (*slot, *c)),
            (Ok(i), None) => {
                cells.remove(i);
            }
            (Err(_), None) => {}
        }
    }
}

/// The changes that turn the sorted slot list `old` into `new` (both sorted), in slot order.
pub fn diff(old: &[(SlotNo, Cell)], new: &[(SlotNo, Cell)]) -> Vec<Change> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    loop {
        match (old.get(i), new.get(j)) {
            (None, None) => break,
            (Some((s, _)), None) => {
                out.push((*s, None));
                i += 1;
            }
            (None, Some((s, c))) => {
                out.push((*s, Some(*c)));
                j += 1;
            }
            (Some((so, co)), Some((sn, cn))) => {
                if so < sn {
                    out.push((*so, None));
                    i += 1;
                } else if sn < so {
                    out.push((*sn, Some(*cn)));
                    j += 1;
                } else {
                    if co != cn {
                        out.push((*sn, Some(*cn)));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
    }
    out
}

/// A stored page record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A full page.
    Base {
        /// The page version.
        version: Version,
        /// Updates since the previous base (0 for a base itself; kept for format symmetry).
        since_base: u32,
        /// All slots, sorted.
        slots: Vec<(SlotNo, Cell)>,
    },
    /// Changes since the previous record.
    Delta {
        /// Version of the first entry (the record's key version).
        first_version: Version,
        /// Slot updates since the last base, including this record's entries.
        since_base: u32,
        /// The previous record of this page (key version and kind); `None` never happens for a stored delta but
        /// is representable so that decoding can report it.
        prev: Option<(Version, PageKind)>,
        /// For a rebase DeltaPage: the version of the BasePage its first entry is relative to (see the module
        /// documentation).
        rebase: Option<Version>,
        /// Per-version changes, in increasing version order.
        entries: Vec<(Version, Vec<Change>)>,
    },
}

/// The bytes of a DeltaPage record, from borrowed entries (the store encodes its growing active delta at every
/// commit without copying the entries into a [`Record`]).
pub fn encode_delta(
    first_version: Version,
    since_base: u32,
    prev: Option<(Version, PageKind)>,
    entries: &[(Version, Vec<Change>)],
) -> Vec<u8> {
    let cells: usize = entries.iter().map(|(_, c)| c.len() + 1).sum();
    let mut out = Vec::with_capacity(32 + cells * (3 + LEAF_LEN));
    out.push(FORMAT);
    encode_delta_into(&mut out, first_version, since_base, prev, None, entries);
    out
}

/// The bytes of a rebase DeltaPage (see the module documentation): `changes` are every slot changed since the
/// BasePage at `rebase_version`, as of `version`, the record's first entry.
pub fn encode_rebase(
    version: Version,
    since_base: u32,
    prev: (Version, PageKind),
    rebase_version: Version,
    changes: &[Change],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + changes.len() * (3 + LEAF_LEN));
    out.push(FORMAT);
    let entries = [(version, changes.to_vec())];
    encode_delta_into(
        &mut out,
        version,
        since_base,
        Some(prev),
        Some(rebase_version),
        &entries,
    );
    out
}

fn encode_delta_into(
    out: &mut Vec<u8>,
    first_version: Version,
    since_base: u32,
    prev: Option<(Version, PageKind)>,
    rebase: Option<Version>,
    entries: &[(Version, Vec<Change>)],
) {
    out.push(1);
    out.extend_from_slice(&first_version.to_le_bytes());
    out.extend_from_slice(&since_base.to_le_bytes());
    match (prev, rebase) {
        (Some((v, k)), rebase) => {
            out.push(if rebase.is_some() { 2 } else { 1 });
            out.extend_from_slice(&v.to_le_bytes());
            out.push(k as u8);
            if let Some(b) = rebase {
                out.extend_from_slice(&b.to_le_bytes());
            }
        }
        (None, _) => out.push(0),
    }
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (v, changes) in entries {
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&(changes.len() as u16).to_le_bytes());
        for (s, c) in changes {
            put_cell(out, *s, c.as_ref());
        }
    }
}

/// The bytes of DeltaPage record `record` with one more entry `(version, changes)` and its `since_base` set to
/// `since_base`. The engine keeps a growing DeltaPage only in its encoded form (in the MemIndexTable), so that
/// unflushed page records are held once, not also decoded. `Err` if `record` is not a DeltaPage.
pub fn extend_delta(
    record: &[u8],
    since_base: u32,
    version: Version,
    changes: &[Change],
) -> Result<Vec<u8>, &'static str> {
    if record.get(..2) != Some(&[FORMAT, 1][..]) {
        return Err("not a DeltaPage record");
    }
    let count_at = match record.get(14) {
        Some(0) => 15,
        Some(1) => 24,
        Some(2) => 32,
        _ => return Err("bad previous-record flag"),
    };
    let count = record
        .get(count_at..count_at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or("page record ends early")?
        .checked_add(1)
        .ok_or("too many delta entries")?;
    let mut out = Vec::with_capacity(record.len() + 10 + changes.len() * (3 + LEAF_LEN));
    out.extend_from_slice(record);
    out[10..14].copy_from_slice(&since_base.to_le_bytes());
    out[count_at..count_at + 2].copy_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(changes.len() as u16).to_le_bytes());
    for (s, c) in changes {
        put_cell(&mut out, *s, c.as_ref());
    }
    Ok(out)
}

/// The bytes of a BasePage record of `cells` (sorted), from borrowed cells.
pub fn encode_base(version: Version, since_base: u32, cells: &[(SlotNo, Cell)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + cells.len() * (3 + LEAF_LEN));
    out.push(FORMAT);
    encode_base_into(&mut out, version, since_base, cells);
    out
}

fn encode_base_into(
    out: &mut Vec<u8>,
    version: Version,
    since_base: u32,
    cells: &[(SlotNo, Cell)],
) {
    out.push(0);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&since_base.to_le_bytes());
    out.extend_from_slice(&(cells.len() as u16).to_le_bytes());
    for (s, c) in cells {
        put_cell(out, *s, Some(c));
    }
}

/// Writes a slot entry in its compact form (tags 3 and 4: the integers as LEB128 varints, about 15 bytes less
/// a leaf than tags 1 and 2, which older stores hold and every reader still reads).
fn put_cell(out: &mut Vec<u8>, slot: u16, cell: Option<&Cell>) {
    out.extend_from_slice(&slot.to_le_bytes());
    match cell {
        None => out.push(0),
        Some(Cell::Leaf(l)) => {
            out.push(3);
            out.extend_from_slice(&l.path.0);
            out.extend_from_slice(&l.value_hash.0);
            crate::varint::put(out, l.version);
            crate::varint::put(out, l.loc.file_id.into());
            crate::varint::put(out, l.loc.offset);
            crate::varint::put(out, l.loc.len.into());
        }
        Some(Cell::Page { hash, version }) => {
            out.push(4);
            out.extend_from_slice(&hash.0);
            crate::varint::put(out, *version);
        }
    }
}

impl Record {
    /// Decodes a record; `Err` says what is malformed (the caller adds file and offset).
    pub fn decode(b: &[u8]) -> Result<Record, &'static str> {
        let mut r = Cursor { b };
        if r.u8()? != FORMAT {
            return Err("unknown page record format");
        }
        match r.u8()? {
            0 => {
                let version = r.u64()?;
                let since_base = r.u32()?;
                let n = r.u16()?;
                let mut slots: Vec<(SlotNo, Cell)> = Vec::with_capacity(usize::from(n).min(273));
                for _ in 0..n {
                    let (s, c) = r.cell()?;
                    if slots.last().is_some_and(|(l, _)| *l >= s) {
                        return Err("base page slots out of order");
                    }
                    slots.push((s, c.ok_or("empty slot in a base page")?));
                }
                r.end()?;
                Ok(Record::Base {
                    version,
                    since_base,
                    slots,
                })
            }
            1 => {
                let first_version = r.u64()?;
                let since_base = r.u32()?;
                let flag = r.u8()?;
                let prev = match flag {
                    0 => None,
                    1 | 2 => {
                        let v = r.u64()?;
                        let k = match r.u8()? {
                            0 => PageKind::Base,
                            1 => PageKind::Delta,
                            _ => return Err("unknown previous record kind"),
                        };
                        Some((v, k))
                    }
                    _ => return Err("bad previous-record flag"),
                };
                // The predecessor is older: a BasePage of the same version at most (a consolidated file's), a
                // DeltaPage of an earlier one.
                if prev.is_some_and(|(p, k)| {
                    p > first_version || (p == first_version && k == PageKind::Delta)
                }) {
                    return Err("previous record not older than the delta page");
                }
                let rebase = match flag {
                    2 => {
                        let b = r.u64()?;
                        // The BasePage it rebases on is older than the record's predecessor or is it.
                        if prev.is_some_and(|(p, _)| b > p) || b >= first_version {
                            return Err("rebase version out of order");
                        }
                        Some(b)
                    }
                    _ => None,
                };
                let n = r.u16()?;
                let mut entries = Vec::with_capacity(usize::from(n).min(1024));
                let mut last = None;
                for _ in 0..n {
                    let v = r.u64()?;
                    if last.is_some_and(|l| v <= l) || v < first_version {
                        return Err("delta entries out of version order");
                    }
                    last = Some(v);
                    let m = r.u16()?;
                    let mut changes = Vec::with_capacity(usize::from(m).min(512));
                    for _ in 0..m {
                        changes.push(r.cell()?);
                    }
                    entries.push((v, changes));
                }
                r.end()?;
                Ok(Record::Delta {
                    first_version,
                    since_base,
                    prev,
                    rebase,
                    entries,
                })
            }
            _ => Err("unknown page record kind"),
        }
    }
}

struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.b.len() < n {
            return Err("page record ends early");
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| "page record ends early")
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.arr::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// An unsigned LEB128 varint of at most 10 bytes whose value fits a `u64` (`crate::varint`).
    fn varint(&mut self) -> Result<u64, &'static str> {
        let (v, n) = crate::varint::get(self.b).map_err(|e| {
            if e == "varint ends early" {
                "page record ends early"
            } else {
                e
            }
        })?;
        self.b = &self.b[n..];
        Ok(v)
    }
    fn varint_u32(&mut self) -> Result<u32, &'static str> {
        u32::try_from(self.varint()?).map_err(|_| "varint overflows 32 bits")
    }
    fn end(&self) -> Result<(), &'static str> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes in page record")
        }
    }
    fn cell(&mut self) -> Result<(u16, Option<Cell>), &'static str> {
        let slot = self.u16()?;
        if slot > MAX_SLOT {
            return Err("slot number out of range");
        }
        let cell = match self.u8()? {
            0 => None,
            1 => {
                let b = self.take(LEAF_LEN)?;
                let mut c = Cursor { b };
                let path = KeyPath(c.arr()?);
                let value_hash = Hash(c.arr()?);
                let version = c.u64()?;
                let loc = Location {
                    file_id: c.u32()?,
                    offset: c.u64()?,
                    len: c.u32()?,
                };
                Some(Cell::Leaf(Leaf::new(path, value_hash, version, loc)))
            }
            2 => {
                let b = self.take(PAGE_LEN)?;
                let mut c = Cursor { b };
                Some(Cell::Page {
                    hash: Hash(c.arr()?),
                    version: c.u64()?,
                })
            }
            3 => {
                let path = KeyPath(self.arr()?);
                let value_hash = Hash(self.arr()?);
                let version = self.varint()?;
                let loc = Location {
                    file_id: self.varint_u32()?,
                    offset: self.varint()?,
                    len: self.varint_u32()?,
                };
                Some(Cell::Leaf(Leaf::new(path, value_hash, version, loc)))
            }
            4 => Some(Cell::Page {
                hash: Hash(self.arr()?),
                version: self.varint()?,
            }),
            _ => return Err("unknown slot tag"),
        };
        Ok((slot, cell))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsvps::PageKind;

    /// An `Arc<Page>` (two counters and the page) fits a 160-byte allocator block; at 10M keys there are 2.1M of
    /// them, and a field more would move each to the next size class (192 bytes: 67 MB more at 10M keys).
    #[test]
    fn a_cached_page_fits_a_160_byte_block() {
        assert!(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Page>() <= 160);
        // The slot bitmap took the place of the page hash: a page costs no more memory than before it.
        assert!(std::mem::size_of::<Page>() <= 136);
    }

    /// Found by review: a DeltaPage naming itself (or a later record) as its predecessor decoded, and a load
    /// then read it again and again, a decoded copy each time, until memory ran out.
    #[test]
    fn a_delta_page_whose_predecessor_is_not_older_is_refused() {
        let entries = [(2, vec![(1, None)])];
        for prev in [
            (2, PageKind::Delta),
            (3, PageKind::Base),
            (3, PageKind::Delta),
        ] {
            let b = encode_delta(2, 1, Some(prev), &entries);
            assert!(Record::decode(&b).is_err(), "{prev:?}");
        }
        // A consolidated file's DeltaPage follows the BasePage of its own version; others an older record.
        for prev in [
            (2, PageKind::Base),
            (1, PageKind::Delta),
            (1, PageKind::Base),
        ] {
            let b = encode_delta(2, 1, Some(prev), &entries);
            assert!(Record::decode(&b).is_ok(), "{prev:?}");
        }
    }

    fn leaf(b: u8) -> Cell {
        Cell::Leaf(Leaf::new(
            KeyPath([b; 32]),
            Hash([b; 32]),
            u64::from(b),
            Location {
                file_id: 1,
                offset: u64::from(b) * 100,
                len: 50,
            },
        ))
    }

    #[test]
    fn page_position_agrees_with_binary_search() {
        let mut seed = 7u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            let density = 1 + next() % 100;
            let mut cells = Vec::new();
            for s in 0..=MAX_SLOT {
                if next() % 100 < density {
                    cells.push((s, leaf(1)));
                }
            }
            let page = Page {
                id: PageId::ROOT,
                version: 0,
                head: None,
                occupied: occupancy(&cells),
                cells: cells.clone().into_boxed_slice(),
                hashes: Box::default(),
            };
            for slot in 0..=MAX_SLOT + 1 {
                assert_eq!(
                    page.position(slot),
                    cells.binary_search_by_key(&slot, |(s, _)| *s),
                    "slot {slot} in {:?}",
                    cells.iter().map(|(s, _)| *s).collect::<Vec<_>>()
                );
            }
            for c in 0..16u8 {
                let lo = grand_slot(c, 0);
                let want: Vec<SlotNo> = cells
                    .iter()
                    .map(|(s, _)| *s)
                    .filter(|s| (lo..lo + 16).contains(s))
                    .collect();
                let got: Vec<SlotNo> = page.grandchildren(c).iter().map(|(s, _)| *s).collect();
                assert_eq!(got, want, "grandchildren of {c}");
            }
        }
    }

    #[test]
    fn compact_slot_entries_round_trip_and_the_fixed_width_ones_still_decode() {
        let cells = vec![
            (
                17u16,
                Cell::Leaf(Leaf::new(
                    KeyPath([3; 32]),
                    Hash([4; 32]),
                    u64::MAX,
                    Location {
                        file_id: u32::MAX,
                        offset: 1 << 40,
                        len: 0,
                    },
                )),
            ),
            (
                18,
                Cell::Page {
                    hash: Hash([5; 32]),
                    version: 127,
                },
            ),
            (19, leaf(128)),
        ];
        let b = encode_base(9, 0, &cells);
        assert_eq!(
            Record::decode(&b),
            Ok(Record::Base {
                version: 9,
                since_base: 0,
                slots: cells.clone()
            })
        );
        // The same base with tags 1 and 2 (fixed-width integers, as stores before format 6 wrote them).
        let mut old = vec![FORMAT, 0];
        old.extend_from_slice(&9u64.to_le_bytes());
        old.extend_from_slice(&0u32.to_le_bytes());
        old.extend_from_slice(&3u16.to_le_bytes());
        for (s, c) in &cells {
            old.extend_from_slice(&s.to_le_bytes());
            match c {
                Cell::Leaf(l) => {
                    old.push(1);
                    old.extend_from_slice(&l.path.0);
                    old.extend_from_slice(&l.value_hash.0);
                    old.extend_from_slice(&l.version.to_le_bytes());
                    old.extend_from_slice(&l.loc.file_id.to_le_bytes());
                    old.extend_from_slice(&l.loc.offset.to_le_bytes());
                    old.extend_from_slice(&l.loc.len.to_le_bytes());
                }
                Cell::Page { hash, version } => {
                    old.push(2);
                    old.extend_from_slice(&hash.0);
                    old.extend_from_slice(&version.to_le_bytes());
                }
            }
        }
        assert!(b.len() < old.len());
        assert_eq!(Record::decode(&old), Record::decode(&b));
        // Varints: overlong and overflowing ones are malformed.
        for (bytes, want) in [
            (vec![0x80; 11], Err("varint overflows 64 bits")),
            (vec![0x80; 3], Err("page record ends early")),
            (
                [vec![0xff; 9], vec![0x02]].concat(),
                Err("varint overflows 64 bits"),
            ),
            ([vec![0xff; 9], vec![0x01]].concat(), Ok(u64::MAX)),
            (vec![0x80, 0x01], Ok(128)),
        ] {
            assert_eq!(Cursor { b: &bytes }.varint(), want);
        }
        assert_eq!(
            Cursor {
                b: &[0x80, 0x80, 0x80, 0x80, 0x10]
            }
            .varint_u32(),
            Err("varint overflows 32 bits")
        );
    }

    #[test]
    fn page_extend_delta_equals_encoding_all_entries() {
        let e1: Vec<Change> = vec![(17, Some(leaf(1))), (20, None)];
        let e2: Vec<Change> = vec![(
            33,
            Some(Cell::Page {
                hash: Hash([9; 32]),
                version: 7,
            }),
        )];
        for prev in [None, Some((3, PageKind::Base))] {
            let one = encode_delta(5, 2, prev, &[(5, e1.clone())]);
            let grown = extend_delta(&one, 3, 6, &e2).unwrap();
            assert_eq!(
                grown,
                encode_delta(5, 3, prev, &[(5, e1.clone()), (6, e2.clone())])
            );
            assert!(matches!(
                Record::decode(&grown),
                Ok(Record::Delta { since_base: 3, ref entries, .. }) if entries.len() == 2
            ));
        }
        let base = encode_base(5, 0, &[(17, leaf(1))]);
        assert!(extend_delta(&base, 1, 6, &e2).is_err());
        // A rebase DeltaPage grows the same way and keeps the BasePage it rebases on.
        let one = encode_rebase(5, 9, (4, PageKind::Delta), 2, &e1);
        let grown = extend_delta(&one, 10, 6, &e2).unwrap();
        assert_eq!(
            Record::decode(&grown),
            Ok(Record::Delta {
                first_version: 5,
                since_base: 10,
                prev: Some((4, PageKind::Delta)),
                rebase: Some(2),
                entries: vec![(5, e1.clone()), (6, e2.clone())],
            })
        );
        // Rebasing on a BasePage newer than the predecessor is malformed.
        let bad = encode_rebase(5, 9, (3, PageKind::Delta), 4, &e1);
        assert_eq!(Record::decode(&bad), Err("rebase version out of order"));
    }

    /// The fold nodes a page keeps agree with the fold of its children (SPEC.md §3.3), and a page rewritten by
    /// [`Page::with_children`], which rehashes only the nodes above the children it changed, equals the same
    /// page built from scratch, as pages move across [`FOLD_NODES_MIN_BRANCHES`] in both directions.
    #[test]
    fn fold_nodes_kept_through_updates_equal_a_page_built_from_scratch() {
        let children: [Hash; 16] = std::array::from_fn(|c| {
            if c % 5 == 3 {
                EMPTY
            } else {
                Hash([c as u8 + 1; 32])
            }
        });
        let n = fold_nodes(&children);
        assert_eq!(inner(&n[12], &n[13]), fold(&children));

        let mut seed = 11u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let grand_leaf = |c: u8, g: u8, salt: u8| {
            let mut path = [salt; 32];
            path[0] = 0x10 * c + g; // depth-0 page: nibbles 0 and 1 pick the slot
            Cell::Leaf(Leaf::new(
                KeyPath(path),
                Hash([salt; 32]),
                u64::from(salt),
                Location {
                    file_id: 1,
                    offset: u64::from(salt),
                    len: 50,
                },
            ))
        };
        let mut kept = 0;
        for round in 0..300u32 {
            // A random page: each child empty, a leaf, or a branch of two or more grandchildren.
            let mut cells = Vec::new();
            let mut grands: Vec<Vec<(SlotNo, Cell)>> = vec![Vec::new(); 16];
            for c in 0..16u8 {
                match next() % 4 {
                    0 => {}
                    1 => cells.push((child_slot(c), grand_leaf(c, 0, 1))),
                    _ => {
                        for g in 0..16u8 {
                            if g < 2 || next() % 3 == 0 {
                                grands[usize::from(c)]
                                    .push((grand_slot(c, g), grand_leaf(c, g, 2)));
                            }
                        }
                    }
                }
            }
            for g in &grands {
                cells.extend_from_slice(g);
            }
            cells.sort_by_key(|(s, _)| *s);
            let Ok(mut page) = Page::build(PageId::ROOT, 1, None, cells) else {
                continue;
            };
            if page.fold_nodes_held().is_some() {
                kept += 1;
            }
            // A few updates of random children: new grandchildren, a leaf, or emptied, keeping a branch page.
            for step in 0..4u8 {
                let salt = 3 + step + (round % 100) as u8;
                // (child, its leaf, its grandchildren, their fold), as `with_children` takes them.
                type ChildUpdate = (u8, Option<Leaf>, Vec<(SlotNo, Cell)>, Option<Hash>);
                let mut outs: Vec<ChildUpdate> = Vec::new();
                for c in 0..16u8 {
                    if next() % 4 != 0 {
                        continue;
                    }
                    match next() % 3 {
                        0 => outs.push((c, None, Vec::new(), None)),
                        1 => {
                            let Cell::Leaf(l) = grand_leaf(c, 0, salt) else {
                                unreachable!()
                            };
                            outs.push((c, Some(l), Vec::new(), None));
                        }
                        _ => {
                            let g: Vec<(SlotNo, Cell)> = (0..16u8)
                                .filter(|g| *g < 2 || next() % 2 == 0)
                                .map(|g| (grand_slot(c, g), grand_leaf(c, g, salt)))
                                .collect();
                            let h = fold(&grand_hashes(&g));
                            outs.push((c, None, g, Some(h)));
                        }
                    }
                }
                // The page must stay a branch page with two children or more (what `with_children` is given).
                let mut trial = page.clone();
                let (updated, hash) = trial.clone().with_children(
                    2 + u64::from(step),
                    outs.iter().map(|(c, l, g, h)| (*c, *l, &g[..], *h)),
                );
                let Ok(built) = Page::build(
                    PageId::ROOT,
                    2 + u64::from(step),
                    None,
                    updated.cells.to_vec(),
                ) else {
                    continue; // collapsed: not a case `with_children` is used for
                };
                if built.cells.len() < 2 {
                    continue;
                }
                assert_eq!(updated, built, "round {round} step {step}");
                assert_eq!(hash, built.hash());
                trial = updated;
                page = trial;
            }
        }
        assert!(kept > 20, "only {kept} pages kept fold nodes");
    }
}
