//! The difference between two versions of a trie, found by walking both tries together and skipping every subtree
//! whose hash did not change: the cost follows the number of changed keys, not the size of the state.

use letus_verify::{TrieId, Version};

use super::page::{child_slot, grand_slot, SlotNo};
use super::{Cell, Leaf, Page, SlotSource};
use crate::error::Result;
use crate::lsvps::PageId;

/// A key whose leaf differs: `(old, new)`; `None` on the side where the key is absent. Never both `None`.
pub type LeafChange = (Option<Leaf>, Option<Leaf>);

/// One version of a page as the diff reads it: its id, its version and its slots (sorted by slot).
pub type PageSlots<'a> = (PageId, Version, &'a [(SlotNo, Cell)]);

/// A built page's id, version and slots.
pub fn page_slots(p: &Page) -> PageSlots<'_> {
    (p.id, p.version, p.cells())
}

/// Appends the leaves that differ between `old` and `new` (the same page of two versions, or `None` for an empty
/// trie), in path order. Pages below are read as slots from a [`SlotSource`]: none is built and no hash computed
/// (where a built page holds an inline branch's hash, this compares the branch's at most 16 cells).
///
/// Returns `false`, with `out` incomplete, as soon as more than `max` changes are known: the walk then stops, so
/// neither its time nor `out` (nor the leaves collected on the way) grows past what `max` allows.
pub fn diff<S: SlotSource>(
    src: &S,
    tid: TrieId,
    old: Option<PageSlots<'_>>,
    new: Option<PageSlots<'_>>,
    max: usize,
    out: &mut Vec<LeafChange>,
) -> Result<bool> {
    diff_part(src, tid, old, new, None, max, out)
}

/// [`diff`] of one part of the pages' subtree: with `Some(c)`, only what lies under child `c` of `old` and `new`
/// (the keys whose paths have nibble `c` at the pages' depth). The 16 parts in order give what [`diff`] gives,
/// so that a caller can let go of the engine between them; each part walks only its child's pages, whatever the
/// other side is (a trie against an absent or one-key one included).
pub fn diff_part<S: SlotSource>(
    src: &S,
    tid: TrieId,
    old: Option<PageSlots<'_>>,
    new: Option<PageSlots<'_>>,
    part: Option<u8>,
    max: usize,
    out: &mut Vec<LeafChange>,
) -> Result<bool> {
    let (Some(o), Some(n)) = (old, new) else {
        return collect_and_merge(
            max,
            out,
            |a| old.map_or(Ok(true), |p| part_leaves(src, tid, p, part, a)),
            |b| new.map_or(Ok(true), |p| part_leaves(src, tid, p, part, b)),
        );
    };
    // The same page version: nothing below differs.
    if o.1 == n.1 {
        return Ok(true);
    }
    // A page root that is not a branch (empty, or the root page's lone leaf at slot 0) holds at most one key:
    // collecting both sides costs what changed.
    let branch = |p: &PageSlots<'_>| p.2.first().is_some_and(|(s, _)| *s != 0);
    if !branch(&o) || !branch(&n) {
        return collect_and_merge(
            max,
            out,
            |a| part_leaves(src, tid, o, part, a),
            |b| part_leaves(src, tid, n, part, b),
        );
    }
    for c in part.map_or(0..16u8, |c| c..c + 1) {
        let (ol, nl) = (cell(o.2, child_slot(c)), cell(n.2, child_slot(c)));
        let (og, ng) = (grandchildren(o.2, c), grandchildren(n.2, c));
        // A child is a leaf, or a branch of grandchildren, or empty; a branch on both sides is compared cell by
        // cell, anything else by its leaves.
        let complete = if ol.is_none() && nl.is_none() && !og.is_empty() && !ng.is_empty() {
            let mut complete = true;
            for g in 0..16u8 {
                let slot = grand_slot(c, g);
                let (ocell, ncell) = (cell(og, slot), cell(ng, slot));
                if same_cell(ocell, ncell) {
                    continue;
                }
                let id = o.0.child(c, g);
                complete = match (ocell, ncell) {
                    (
                        Some(Cell::Page { version: ov, .. }),
                        Some(Cell::Page { version: nv, .. }),
                    ) => {
                        let op = src.slots(tid, id, *ov)?;
                        let np = src.slots(tid, id, *nv)?;
                        diff(
                            src,
                            tid,
                            Some((id, *ov, &op)),
                            Some((id, *nv, &np)),
                            max,
                            out,
                        )?
                    }
                    _ => collect_and_merge(
                        max,
                        out,
                        |a| cell_leaves(src, tid, id, ocell, a),
                        |b| cell_leaves(src, tid, id, ncell, b),
                    )?,
                };
                if !complete {
                    break;
                }
            }
            complete
        } else if !(same_cell(ol, nl) && og.is_empty() && ng.is_empty()) {
            collect_and_merge(
                max,
                out,
                |a| child_leaves(src, tid, o.0, c, ol, og, a),
                |b| child_leaves(src, tid, n.0, c, nl, ng, b),
            )?
        } else {
            true
        };
        if !complete {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Leaves collected for a merge, at most `cap`.
struct Leaves {
    leaves: Vec<Leaf>,
    cap: usize,
}

impl Leaves {
    /// Adds `l`; `false` once the cap is reached (the caller stops).
    fn push(&mut self, l: Leaf) -> bool {
        self.leaves.push(l);
        self.leaves.len() < self.cap
    }
}

/// Collects both sides' leaves of a subtree whose structure differs and merges them into `out`.
///
/// Where the diff collects leaves, one side is at most one leaf (a leaf against a branch, or anything against
/// nothing), so the subtree holds at least `max(|a|, |b|) - 1` changes. A side that reaches `max - out.len() + 2`
/// leaves therefore means more than `max` changes, and its collection stops there.
fn collect_and_merge(
    max: usize,
    out: &mut Vec<LeafChange>,
    a: impl FnOnce(&mut Leaves) -> Result<bool>,
    b: impl FnOnce(&mut Leaves) -> Result<bool>,
) -> Result<bool> {
    let cap = max.saturating_sub(out.len()).saturating_add(2);
    let mut x = Leaves {
        leaves: Vec::new(),
        cap,
    };
    if !a(&mut x)? {
        return Ok(false);
    }
    let mut y = Leaves {
        leaves: Vec::new(),
        cap,
    };
    if !b(&mut y)? {
        return Ok(false);
    }
    merge(x.leaves, y.leaves, out);
    Ok(out.len() <= max)
}

// The comparisons below stand for comparing node hashes without computing any: a leaf's hash is a function of
// its path and value hash, and a child page's hash is stored. "Same" implies equal hashes; a pair they call
// different with equal hashes (which canonical leaf compression rules out) would only be expanded to its leaves
// and merged, which drops leaves with equal values, so the answer stays exact either way.

/// Whether two leaves stand for the same node: same path, same value.
fn same_leaf(a: &Leaf, b: &Leaf) -> bool {
    a.path == b.path && a.value_hash == b.value_hash
}

/// Whether two cells (or their absence) stand for the same node.
fn same_cell(a: Option<&Cell>, b: Option<&Cell>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(Cell::Leaf(x)), Some(Cell::Leaf(y))) => same_leaf(x, y),
        (Some(Cell::Page { hash: x, .. }), Some(Cell::Page { hash: y, .. })) => x == y,
        _ => false,
    }
}

/// The cell at `slot` of sorted slots.
fn cell(cells: &[(SlotNo, Cell)], slot: SlotNo) -> Option<&Cell> {
    cells
        .binary_search_by_key(&slot, |(s, _)| *s)
        .ok()
        .map(|i| &cells[i].1)
}

/// The grandchild slots of child `c`.
fn grandchildren(cells: &[(SlotNo, Cell)], c: u8) -> &[(SlotNo, Cell)] {
    let lo = grand_slot(c, 0);
    let a = cells.partition_point(|(s, _)| *s < lo);
    let b = cells.partition_point(|(s, _)| *s < lo + 16);
    &cells[a..b.max(a)]
}

fn page_leaves<S: SlotSource>(
    src: &S,
    tid: TrieId,
    (id, _, cells): PageSlots<'_>,
    out: &mut Leaves,
) -> Result<bool> {
    let mut more = true;
    super::walk_slots_after(src, tid, id, cells, None, &mut |l| {
        more = out.push(*l);
        Ok(more)
    })?;
    Ok(more)
}

/// The leaves of page `p`, or with `Some(c)` those below its child `c` alone.
fn part_leaves<S: SlotSource>(
    src: &S,
    tid: TrieId,
    p: PageSlots<'_>,
    part: Option<u8>,
    out: &mut Leaves,
) -> Result<bool> {
    let Some(c) = part else {
        return page_leaves(src, tid, p, out);
    };
    let (id, _, cells) = p;
    match cells.first() {
        // The root page's lone leaf: in the part of its path's first nibble (page depths are even).
        Some((0, Cell::Leaf(l))) => {
            if l.path.0[usize::from(id.depth / 2)] >> 4 == c {
                Ok(out.push(*l))
            } else {
                Ok(true)
            }
        }
        _ => child_leaves(
            src,
            tid,
            id,
            c,
            cell(cells, child_slot(c)),
            grandchildren(cells, c),
            out,
        ),
    }
}

/// The leaves of child `c` of page `id`: its leaf `leaf`, or below its grandchildren `grand`.
fn child_leaves<S: SlotSource>(
    src: &S,
    tid: TrieId,
    id: PageId,
    c: u8,
    leaf: Option<&Cell>,
    grand: &[(SlotNo, Cell)],
    out: &mut Leaves,
) -> Result<bool> {
    if let Some(Cell::Leaf(l)) = leaf {
        if !out.push(*l) {
            return Ok(false);
        }
    }
    for (slot, cell) in grand {
        let (_, g) = super::slot_nibbles(*slot);
        if !cell_leaves(src, tid, id.child(c, g), Some(cell), out)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The leaves below grandchild `cell`, whose page (when it is one) is `id`.
fn cell_leaves<S: SlotSource>(
    src: &S,
    tid: TrieId,
    id: PageId,
    cell: Option<&Cell>,
    out: &mut Leaves,
) -> Result<bool> {
    match cell {
        None => Ok(true),
        Some(Cell::Leaf(l)) => Ok(out.push(*l)),
        Some(Cell::Page { version, .. }) => {
            let slots = src.slots(tid, id, *version)?;
            page_leaves(src, tid, (id, *version, &slots), out)
        }
    }
}

/// Merges two path-sorted leaf lists into the changes between them.
fn merge(a: Vec<Leaf>, b: Vec<Leaf>, out: &mut Vec<LeafChange>) {
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return,
            (Some(_), None) => out.extend(a.by_ref().map(|l| (Some(l), None))),
            (None, Some(_)) => out.extend(b.by_ref().map(|l| (None, Some(l)))),
            (Some(x), Some(y)) => match x.path.cmp(&y.path) {
                std::cmp::Ordering::Less => out.push((a.next(), None)),
                std::cmp::Ordering::Greater => out.push((None, b.next())),
                std::cmp::Ordering::Equal => {
                    let (x, y) = (a.next(), b.next());
                    if x.map(|l| l.value_hash) != y.map(|l| l.value_hash) {
                        out.push((x, y));
                    }
                }
            },
        }
    }
}
