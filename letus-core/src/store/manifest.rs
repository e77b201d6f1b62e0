//! A snapshot manifest (SPEC.md §12.1 of `letus-verify`) from page slots and the hashes pages keep.
//!
//! An entry is a subtree at depth [`SNAPSHOT_TOP_DEPTH`] or deeper with its pair count and its hash. The hash of
//! a subtree whose top is a page's top is in its parent's slot, and a leaf's is one hash of what its slot holds,
//! so the walk hashes only the branches inside a page that become entries (one nibble below a page's top, where
//! a subtree above `max_pairs` is split) and reads no value. What it must read is every page below an entry,
//! to count its leaves. The entries are those `letus_verify::snapshot::ManifestBuilder` makes from every leaf
//! (a test compares the two), which is how the manifest was computed before: hashing every leaf and every branch
//! of the state.

use letus_verify::fold::fold;
use letus_verify::snapshot::{prefix_of, Manifest, SnapshotItem};

use super::state_sync::SNAPSHOT_TOP_DEPTH;
use super::*;
use crate::trie::page::{child_slot, grand_slot, SlotNo};
use crate::trie::{slot_nibbles, SlotSource};

/// A subtree the walk has still to turn into entries, at its depth.
enum Node {
    /// A single leaf: an entry of one pair.
    Leaf(Leaf),
    /// A page (its top at `id.depth`), with the hash its parent keeps for it and its size when known.
    Page {
        id: PageId,
        version: Version,
        hash: Hash,
        size: Option<Size>,
    },
    /// The branch below child nibble `c` of page `page`: its grandchild slots, each with its size.
    Branch {
        page: PageId,
        c: u8,
        cells: Vec<(SlotNo, Cell, Size)>,
    },
}

impl Node {
    /// The node `cell` in slot `slot` of page `page` stands for; `size`: its size, when known.
    fn of(page: PageId, slot: SlotNo, cell: Cell, size: Option<Size>) -> Node {
        match cell {
            Cell::Leaf(l) => Node::Leaf(l),
            Cell::Page { hash, version } => {
                let (c, g) = slot_nibbles(slot);
                Node::Page {
                    id: page.child(c, g),
                    version,
                    hash,
                    size,
                }
            }
        }
    }
}

/// A subtree's leaves, and a bound on the bytes of its chunk's records: each leaf's value-log record, which holds
/// its key and value behind a longer header than a chunk record's.
#[derive(Clone, Copy, Default)]
struct Size {
    pairs: u64,
    bytes: u64,
}

impl Size {
    fn of_leaf(l: &Leaf) -> Size {
        Size {
            pairs: 1,
            bytes: u64::from(l.loc.len),
        }
    }

    fn sum<'a>(sizes: impl Iterator<Item = &'a Size>) -> Size {
        sizes.fold(Size::default(), |a, b| Size {
            pairs: a.pairs + b.pairs,
            bytes: a.bytes.saturating_add(b.bytes),
        })
    }
}

impl Snapshot {
    /// The manifest of trie `tid` at `version` (SPEC.md §12.1): the subtrees at depth [`SNAPSHOT_TOP_DEPTH`],
    /// each split one nibble at a time while it holds more than `max_pairs` pairs or its chunk's records could
    /// pass `max_chunk_bytes` (bounded by the leaves' value-log records; a chunk above it would be refused, and a
    /// join could never finish). Reads every page of the state (no value), holding the engine for one page at a
    /// time. More than `max_entries` entries (a `max_pairs`
    /// too small for the state; a verifier refuses a manifest above its `max_snapshot_items`) is
    /// [`Error::TooLarge`], found as soon as the manifest passes it.
    pub fn snapshot_manifest(
        &self,
        tid: TrieId,
        version: Version,
        max_pairs: u64,
        max_chunk_bytes: u64,
        max_entries: usize,
    ) -> Result<Manifest> {
        let root = self.digest(tid, version)?.root;
        let max_pairs = max_pairs.max(1);
        let fits = |s: &Size| s.pairs <= max_pairs && s.bytes <= max_chunk_bytes;
        let top = self.shared.walk_view(Some(self.version), |v| {
            v.engine
                .root_page(tid, v.at(version))
                .map(|p| p.cells().to_vec())
        })?;
        // The root page's grandchildren are at the manifest's top depth; a leaf above them is an entry there.
        let mut stack: Vec<(u8, Node)> = Vec::new();
        for (slot, cell) in page::slots_in_path_order(&top) {
            stack.push((
                SNAPSHOT_TOP_DEPTH,
                Node::of(PageId::ROOT, *slot, *cell, None),
            ));
        }
        stack.reverse();
        let mut items = Vec::new();
        while let Some((depth, node)) = stack.pop() {
            let at = stack.len();
            match node {
                Node::Leaf(l) => items.push(SnapshotItem {
                    depth,
                    prefix: prefix_of(&l.path, depth),
                    count: 1,
                    hash: l.hash(),
                }),
                Node::Page {
                    id,
                    hash,
                    size: Some(size),
                    ..
                } if fits(&size) => items.push(SnapshotItem {
                    depth,
                    prefix: id.prefix,
                    count: size.pairs,
                    hash,
                }),
                Node::Page {
                    id,
                    version: pv,
                    hash,
                    ..
                } => {
                    let cells = self.counted_slots(tid, version, id, pv)?;
                    let size = Size::sum(cells.iter().map(|(_, _, n)| n));
                    if fits(&size) || depth >= 64 {
                        items.push(SnapshotItem {
                            depth,
                            prefix: id.prefix,
                            count: size.pairs,
                            hash,
                        });
                    } else {
                        // More than one leaf, so no lone root leaf: each child is a leaf or a branch.
                        self.push_children(&mut stack, depth + 1, id, &cells);
                    }
                }
                Node::Branch { page, c, cells } => {
                    let size = Size::sum(cells.iter().map(|(_, _, n)| n));
                    if fits(&size) {
                        let mut children = [EMPTY; 16];
                        for (slot, cell, _) in &cells {
                            children[usize::from(slot_nibbles(*slot).1)] = cell.hash();
                        }
                        let mut prefix = page.prefix;
                        prefix[usize::from(page.depth / 2)] = c << 4;
                        items.push(SnapshotItem {
                            depth,
                            prefix,
                            count: size.pairs,
                            hash: fold(&children),
                        });
                    } else {
                        for (slot, cell, n) in cells {
                            stack.push((depth + 1, Node::of(page, slot, cell, Some(n))));
                        }
                    }
                }
            }
            // Children were pushed in path order; the first must come off the stack first.
            stack[at..].reverse();
            if items.len() > max_entries {
                return Err(Error::TooLarge {
                    what: "snapshot manifest (entries; ask for more pairs per chunk)",
                    size: items.len(),
                    limit: max_entries,
                });
            }
        }
        Ok(Manifest {
            tid,
            version,
            root,
            items,
        })
    }

    /// Pushes the children one nibble below page `id`'s top (`cells`: its slots with their counts), at `depth`:
    /// a child leaf as itself, grandchildren as the branch above them.
    fn push_children(
        &self,
        stack: &mut Vec<(u8, Node)>,
        depth: u8,
        id: PageId,
        cells: &[(SlotNo, Cell, Size)],
    ) {
        for c in 0..16u8 {
            let lo = grand_slot(c, 0);
            if let Some((_, Cell::Leaf(l), _)) = cells.iter().find(|(s, _, _)| *s == child_slot(c))
            {
                stack.push((depth, Node::Leaf(*l)));
                continue;
            }
            let below: Vec<(SlotNo, Cell, Size)> = cells
                .iter()
                .filter(|(s, _, _)| (lo..lo + 16).contains(s))
                .cloned()
                .collect();
            if !below.is_empty() {
                stack.push((
                    depth,
                    Node::Branch {
                        page: id,
                        c,
                        cells: below,
                    },
                ));
            }
        }
    }

    /// The slots of page `id` (its version `pv`) of trie `tid` at `version`, each with the size of what is below
    /// it (a walk of every page below). A page whose count was known and is split is counted again here,
    /// once per depth it is split at.
    fn counted_slots(
        &self,
        tid: TrieId,
        version: Version,
        id: PageId,
        pv: Version,
    ) -> Result<Vec<(SlotNo, Cell, Size)>> {
        self.page_slots(tid, version, id, pv)?
            .iter()
            .map(|(slot, cell)| {
                let n = match cell {
                    Cell::Leaf(l) => Size::of_leaf(l),
                    Cell::Page { version: cv, .. } => {
                        let (c, g) = slot_nibbles(*slot);
                        Size::sum(
                            self.counted_slots(tid, version, id.child(c, g), *cv)?
                                .iter()
                                .map(|(_, _, n)| n),
                        )
                    }
                };
                Ok((*slot, *cell, n))
            })
            .collect()
    }

    /// One page's slots, read through the scan source (not built, not cached) in a hold of the engine of its own,
    /// after checking that `version` is still held (a prune may pass it between two holds).
    fn page_slots(
        &self,
        tid: TrieId,
        version: Version,
        id: PageId,
        pv: Version,
    ) -> Result<ScanSlots> {
        self.shared.walk_view(Some(self.version), |v| {
            v.engine.check_not_pruned(version)?;
            ScanSource(v.engine).slots(tid, id, pv)
        })
    }
}

#[cfg(test)]
mod tests {
    use letus_verify::snapshot::ManifestBuilder;

    use super::*;

    /// The reference: the builder fed every leaf of the trie (a walk of built pages) with its hash.
    fn by_every_leaf(
        s: &Store,
        tid: TrieId,
        version: Version,
        max_pairs: u64,
    ) -> Vec<SnapshotItem> {
        let e = s.shared.engine();
        let root = e.root_page(tid, version).unwrap();
        let mut b = ManifestBuilder::new(SNAPSHOT_TOP_DEPTH, max_pairs);
        trie::walk(&ScanSource(&e), tid, &root, &mut |l| {
            b.push_leaf(l.path, l.hash()).unwrap();
            Ok(())
        })
        .unwrap();
        b.finish()
    }

    #[test]
    fn the_entries_are_those_of_every_leaf_hashed() {
        let opts = Options {
            delta_threshold: 4,
            base_threshold: 9,
            memtable_bytes: 16 * 1024,
            memory_budget_bytes: 128 * 1024,
            ..Options::default()
        };
        // One key (a lone root leaf), a few (leaves in the root page), and states whose subtrees are split at
        // depth 3, 4 and deeper; then deletes, so that pages shrink back to leaves, and a flush and cleared caches,
        // so that slots come from cached pages, the MemIndexTable and index files.
        for keys in [1u32, 2, 5, 40, 700, 6000, 40_000] {
            let d = tempfile::tempdir().unwrap();
            let mut s = Store::open(d.path(), opts.clone()).unwrap();
            for i in 0..keys {
                s.put(0, format!("key-{i}").as_bytes(), &i.to_le_bytes())
                    .unwrap();
            }
            s.commit(1).unwrap();
            for i in (0..keys).filter(|i| i % 3 == 0) {
                s.delete(0, format!("key-{i}").as_bytes()).unwrap();
            }
            s.put(0, b"one more", b"v").unwrap();
            s.commit(2).unwrap();
            s.flush().unwrap();
            s.clear_caches();
            let snap = s.snapshot();
            for version in [1, 2] {
                let root = snap.digest(0, version).unwrap().root;
                for max_pairs in [1u64, 2, 3, 10, 100, 1000, 1 << 20] {
                    let m = snap
                        .snapshot_manifest(0, version, max_pairs, u64::MAX, usize::MAX)
                        .unwrap();
                    assert_eq!(
                        m.items,
                        by_every_leaf(&s, 0, version, max_pairs),
                        "{keys} keys at {version}, max {max_pairs}"
                    );
                    m.verify(0, version, &root).unwrap();
                }
            }
        }
    }
}
