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
pub fn diff<S: SlotSource>(
    src: &S,
    tid: TrieId,
    old: Option<PageSlots<'_>>,
    new: Option<PageSlots<'_>>,
    out: &mut Vec<LeafChange>,
) -> Result<()> {
    let (Some(o), Some(n)) = (old, new) else {
        let mut a = Vec::new();
        let mut b = Vec::new();
        if let Some(p) = old {
            page_leaves(src, tid, p, &mut a)?;
        }
        if let Some(p) = new {
            page_leaves(src, tid, p, &mut b)?;
        }
        merge(a, b, out);
        return Ok(());
    };
    // The same page version: nothing below differs.
    if o.1 == n.1 {
        return Ok(());
    }
    // A page root that is not a branch (empty, or the root page's lone leaf at slot 0) holds at most one key:
    // collecting both sides costs what changed.
    let branch = |p: &PageSlots<'_>| p.2.first().is_some_and(|(s, _)| *s != 0);
    if !branch(&o) || !branch(&n) {
        let mut a = Vec::new();
        let mut b = Vec::new();
        page_leaves(src, tid, o, &mut a)?;
        page_leaves(src, tid, n, &mut b)?;
        merge(a, b, out);
        return Ok(());
    }
    for c in 0..16u8 {
        let (ol, nl) = (cell(o.2, child_slot(c)), cell(n.2, child_slot(c)));
        let (og, ng) = (grandchildren(o.2, c), grandchildren(n.2, c));
        // A child is a leaf, or a branch of grandchildren, or empty; a branch on both sides is compared cell by
        // cell, anything else by its leaves.
        if ol.is_none() && nl.is_none() && !og.is_empty() && !ng.is_empty() {
            for g in 0..16u8 {
                let slot = grand_slot(c, g);
                let (ocell, ncell) = (cell(og, slot), cell(ng, slot));
                if same_cell(ocell, ncell) {
                    continue;
                }
                let id = o.0.child(c, g);
                match (ocell, ncell) {
                    (
                        Some(Cell::Page { version: ov, .. }),
                        Some(Cell::Page { version: nv, .. }),
                    ) => {
                        let op = src.slots(tid, id, *ov)?;
                        let np = src.slots(tid, id, *nv)?;
                        diff(src, tid, Some((id, *ov, &op)), Some((id, *nv, &np)), out)?;
                    }
                    _ => {
                        let mut a = Vec::new();
                        let mut b = Vec::new();
                        cell_leaves(src, tid, id, ocell, &mut a)?;
                        cell_leaves(src, tid, id, ncell, &mut b)?;
                        merge(a, b, out);
                    }
                }
            }
        } else if !(same_cell(ol, nl) && og.is_empty() && ng.is_empty()) {
            let mut a = Vec::new();
            let mut b = Vec::new();
            child_leaves(src, tid, o.0, c, ol, og, &mut a)?;
            child_leaves(src, tid, n.0, c, nl, ng, &mut b)?;
            merge(a, b, out);
        }
    }
    Ok(())
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
    out: &mut Vec<Leaf>,
) -> Result<()> {
    super::walk_slots_after(src, tid, id, cells, None, &mut |l| {
        out.push(*l);
        Ok(true)
    })
    .map(|_| ())
}

/// The leaves of child `c` of page `id`: its leaf `leaf`, or below its grandchildren `grand`.
fn child_leaves<S: SlotSource>(
    src: &S,
    tid: TrieId,
    id: PageId,
    c: u8,
    leaf: Option<&Cell>,
    grand: &[(SlotNo, Cell)],
    out: &mut Vec<Leaf>,
) -> Result<()> {
    if let Some(Cell::Leaf(l)) = leaf {
        out.push(*l);
    }
    for (slot, cell) in grand {
        let (_, g) = super::slot_nibbles(*slot);
        cell_leaves(src, tid, id.child(c, g), Some(cell), out)?;
    }
    Ok(())
}

/// The leaves below grandchild `cell`, whose page (when it is one) is `id`.
fn cell_leaves<S: SlotSource>(
    src: &S,
    tid: TrieId,
    id: PageId,
    cell: Option<&Cell>,
    out: &mut Vec<Leaf>,
) -> Result<()> {
    match cell {
        None => Ok(()),
        Some(Cell::Leaf(l)) => {
            out.push(*l);
            Ok(())
        }
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
