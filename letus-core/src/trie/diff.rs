//! The difference between two versions of a trie, found by walking both tries together and skipping every subtree
//! whose hash did not change: the cost follows the number of changed keys, not the size of the state.

use letus_verify::TrieId;

use super::page::{grand_slot, Child, Root};
use super::{Cell, Leaf, Page, PageSource};
use crate::error::Result;

/// A key whose leaf differs: `(old, new)`; `None` on the side where the key is absent. Never both `None`.
pub type LeafChange = (Option<Leaf>, Option<Leaf>);

/// Appends the leaves that differ between `old` and `new` (the same page of two versions, or `None` for an empty
/// trie), in path order.
pub fn diff<S: PageSource>(
    src: &S,
    tid: TrieId,
    old: Option<&Page>,
    new: Option<&Page>,
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
    // The same page version, or the same stored root hash: nothing below differs. Pages without a stored hash
    // are not hashed here (that would hash all their leaves): their children are compared one by one below.
    if o.version == n.version
        || matches!((o.stored_hash(), n.stored_hash()), (Some(a), Some(b)) if a == b)
    {
        return Ok(());
    }
    if !matches!((o.root(), n.root()), (Root::Branch, Root::Branch)) {
        // One side holds at most one key here: collecting both sides costs what changed.
        let mut a = Vec::new();
        let mut b = Vec::new();
        page_leaves(src, tid, o, &mut a)?;
        page_leaves(src, tid, n, &mut b)?;
        merge(a, b, out);
        return Ok(());
    }
    for c in 0..16u8 {
        let (oc, nc) = (o.child(c), n.child(c));
        if same_child(&oc, &nc) {
            continue;
        }
        if let (Child::Branch(_), Child::Branch(_)) = (&oc, &nc) {
            for g in 0..16u8 {
                let slot = grand_slot(c, g);
                let (ocell, ncell) = (o.cell(slot), n.cell(slot));
                if same_cell(ocell, ncell) {
                    continue;
                }
                let id = o.id.child(c, g);
                match (ocell, ncell) {
                    (
                        Some(Cell::Page { version: ov, .. }),
                        Some(Cell::Page { version: nv, .. }),
                    ) => {
                        let op = src.load(tid, id, *ov)?;
                        let np = src.load(tid, id, *nv)?;
                        diff(src, tid, Some(&op), Some(&np), out)?;
                    }
                    _ => {
                        let mut a = Vec::new();
                        let mut b = Vec::new();
                        cell_leaves(src, tid, o, c, g, ocell, &mut a)?;
                        cell_leaves(src, tid, n, c, g, ncell, &mut b)?;
                        merge(a, b, out);
                    }
                }
            }
        } else {
            let mut a = Vec::new();
            let mut b = Vec::new();
            child_leaves(src, tid, o, c, &mut a)?;
            child_leaves(src, tid, n, c, &mut b)?;
            merge(a, b, out);
        }
    }
    Ok(())
}

// The comparisons below stand for comparing node hashes without computing any: a leaf's hash is a function of
// its path and value hash, and a branch's or a child page's hash is stored. "Same" implies equal hashes; a pair
// they call different with equal hashes (which canonical leaf compression rules out) would only be expanded to
// its leaves and merged, which drops leaves with equal values, so the answer stays exact either way.

/// Whether two leaves stand for the same node: same path, same value.
fn same_leaf(a: &Leaf, b: &Leaf) -> bool {
    a.path == b.path && a.value_hash == b.value_hash
}

/// Whether two children of a page root stand for the same node.
fn same_child(a: &Child<'_>, b: &Child<'_>) -> bool {
    match (a, b) {
        (Child::Empty, Child::Empty) => true,
        (Child::Leaf(x), Child::Leaf(y)) => same_leaf(x, y),
        (Child::Branch(x), Child::Branch(y)) => x == y,
        _ => false,
    }
}

/// Whether two grandchild cells stand for the same node.
fn same_cell(a: Option<&Cell>, b: Option<&Cell>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(Cell::Leaf(x)), Some(Cell::Leaf(y))) => same_leaf(x, y),
        (Some(Cell::Page { hash: x, .. }), Some(Cell::Page { hash: y, .. })) => x == y,
        _ => false,
    }
}

fn page_leaves<S: PageSource>(src: &S, tid: TrieId, p: &Page, out: &mut Vec<Leaf>) -> Result<()> {
    super::walk(src, tid, p, &mut |l| {
        out.push(*l);
        Ok(())
    })
}

fn child_leaves<S: PageSource>(
    src: &S,
    tid: TrieId,
    p: &Page,
    c: u8,
    out: &mut Vec<Leaf>,
) -> Result<()> {
    match p.child(c) {
        Child::Empty => Ok(()),
        Child::Leaf(l) => {
            out.push(*l);
            Ok(())
        }
        Child::Branch(_) => {
            for (slot, cell) in p.grandchildren(c) {
                let (_, g) = super::slot_nibbles(*slot);
                cell_leaves(src, tid, p, c, g, Some(cell), out)?;
            }
            Ok(())
        }
    }
}

fn cell_leaves<S: PageSource>(
    src: &S,
    tid: TrieId,
    p: &Page,
    c: u8,
    g: u8,
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
            let child = src.load(tid, p.id.child(c, g), *version)?;
            page_leaves(src, tid, &child, out)
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
