//! A walk over the pages of a state that reads each page's slots without building the page: what the pruner's
//! base files and value-log GC's accounting need of the state, for less than a trie walk costs (no branch is
//! hashed, and in every index file the records are read in the order they are stored).

use super::*;

/// How many pages a walk handles per hold of the engine: small, so that a commit waiting to publish waits for
/// little.
pub(super) const PAGES_PER_HOLD: usize = 64;

/// One page as a walk visits it.
pub(super) struct Visit<'a> {
    pub(super) tid: TrieId,
    pub(super) id: PageId,
    /// The page's version (as its parent names it).
    pub(super) version: Version,
    /// Its slots at that version.
    pub(super) cells: &'a [(page::SlotNo, Cell)],
    /// The key version of its newest record at or below `version`, when known without a lookup.
    pub(super) head: Option<Version>,
}

/// The most `(page, version)` pairs one level of a walk collects before it walks them (see [`Shared::walk_pages`]).
const MAX_LEVEL_PAGES: usize = 1 << 20;

/// What a walk passes down its levels.
struct Walk<'a> {
    tid: TrieId,
    skip: Version,
    visit: &'a mut dyn FnMut(&Engine, Visit<'_>) -> Result<()>,
    held: &'a mut dyn FnMut(&PruneProgress),
    pages: u64,
}

impl Shared {
    /// Visits the pages reachable from `roots` (a trie and the version of its root page) whose versions are above
    /// `skip` (a page at or below `skip` is skipped with its whole subtree: a page's version is at least its
    /// children's). Returns the pages visited.
    ///
    /// The walk goes one level of the trie after another, each level in prefix order, so that in every index
    /// file the records come in the order they are stored: it runs in a [`crate::lsvps::Sequential`] scope,
    /// which reads them ahead and leaves the block cache to the commits. A page in the page cache is used as it
    /// is; one read from disk is not built (building would hash every inline branch). The engine is held for
    /// [`PAGES_PER_HOLD`] pages at a time, after any waiting writer, and `held` is told how far the walk is after
    /// each hold: the pages visited so far, and of the level being walked, its depth, its pages done and its
    /// pages (a level is known whole before it is walked).
    ///
    /// Memory: a level's children are collected up to [`MAX_LEVEL_PAGES`] (48 bytes each); then those are walked,
    /// down to the leaves, before the level goes on. The pages of each depth are still visited in prefix order,
    /// and a state of any size holds at most that many per level of the trie.
    pub(super) fn walk_pages(
        &self,
        roots: &[(TrieId, Version)],
        skip: Version,
        visit: &mut dyn FnMut(&Engine, Visit<'_>) -> Result<()>,
        held: &mut dyn FnMut(&PruneProgress),
    ) -> Result<u64> {
        let _sequential = crate::lsvps::Sequential::begin();
        let mut pages = 0u64;
        for &(tid, root_version) in roots.iter().filter(|(_, v)| *v > skip) {
            let mut w = Walk {
                tid,
                skip,
                visit: &mut *visit,
                held: &mut *held,
                pages,
            };
            self.walk_level(&mut w, &[(PageId::ROOT, root_version)], MAX_LEVEL_PAGES)?;
            pages = w.pages;
        }
        Ok(pages)
    }

    /// Visits `level`'s pages and, level by level, everything under them, collecting at most about `max` pages
    /// of the next level before walking those.
    fn walk_level(&self, w: &mut Walk<'_>, level: &[(PageId, Version)], max: usize) -> Result<()> {
        let (tid, skip) = (w.tid, w.skip);
        let mut next = Vec::new();
        let mut done = 0u64;
        for batch in level.chunks(PAGES_PER_HOLD) {
            let e = self.engine_after_writers();
            for &(id, version) in batch {
                let slots = trie::SlotSource::slots(&ScanSource(&e), tid, id, version)?;
                let (cells, head) = (&slots[..], slots.head_version());
                for (slot, cell) in cells {
                    match cell {
                        Cell::Page { version, .. } if *version > skip => {
                            let (c, g) = trie::slot_nibbles(*slot);
                            next.push((id.child(c, g), *version));
                        }
                        _ => {}
                    }
                }
                (w.visit)(
                    &e,
                    Visit {
                        tid,
                        id,
                        version,
                        cells,
                        head,
                    },
                )?;
            }
            drop(e);
            w.pages += batch.len() as u64;
            done += batch.len() as u64;
            (w.held)(&PruneProgress {
                pages: w.pages,
                depth: batch.first().map_or(0, |(id, _)| id.depth),
                level_done: done,
                level_pages: level.len() as u64,
            });
            if next.len() >= max {
                self.walk_level(w, &std::mem::take(&mut next), max)?;
            }
        }
        if !next.is_empty() {
            self.walk_level(w, &next, max)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page of the state at `version`, as `walk_level` visits them with levels of at most `max` pages, with
    /// the leaves found.
    fn visited(s: &Store, version: Version, max: usize) -> (Vec<(TrieId, PageId, Version)>, usize) {
        let roots: Vec<(TrieId, Version)> = {
            let e = s.shared.engine();
            e.tries
                .iter()
                .filter_map(|(tid, t)| Some((*tid, *t.page_versions.get(t.index_at(version)?)?)))
                .collect()
        };
        let (mut pages, mut leaves) = (Vec::new(), 0);
        let mut visit = |_: &Engine, p: Visit<'_>| {
            pages.push((p.tid, p.id, p.version));
            leaves += p
                .cells
                .iter()
                .filter(|(_, c)| matches!(c, Cell::Leaf(_)))
                .count();
            Ok(())
        };
        let mut held = |_: &PruneProgress| {};
        let _sequential = crate::lsvps::Sequential::begin();
        for &(tid, v) in &roots {
            let mut w = Walk {
                tid,
                skip: 0,
                visit: &mut visit,
                held: &mut held,
                pages: 0,
            };
            s.shared
                .walk_level(&mut w, &[(PageId::ROOT, v)], max)
                .unwrap();
        }
        (pages, leaves)
    }

    #[test]
    fn a_walk_in_bounded_levels_visits_every_page_once_each_depth_in_prefix_order() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(d.path(), Options::default()).unwrap();
        let keys = 3000u64;
        for v in 1..=3u64 {
            for i in (0..keys).filter(|i| v == 1 || i % 7 == v) {
                s.put(i as u32 % 2, &i.to_be_bytes(), &v.to_le_bytes())
                    .unwrap();
            }
            s.commit(v).unwrap();
            if v == 2 {
                s.flush().unwrap();
            }
        }
        let (all, leaves) = visited(&s, 3, MAX_LEVEL_PAGES);
        assert_eq!(leaves, keys as usize);
        for max in [1, 3, 40] {
            let (pages, l) = visited(&s, 3, max);
            assert_eq!(l, leaves, "max {max}");
            // The same pages, none twice.
            let mut a = pages.clone();
            a.sort();
            a.dedup();
            let mut b = all.clone();
            b.sort();
            assert_eq!(a, b, "max {max}");
            assert_eq!(pages.len(), all.len(), "max {max}");
            // Within a trie and a depth, in prefix order (the order of the index files).
            for tid in [0, 1] {
                for depth in (0..=64).step_by(2) {
                    let seq: Vec<PageId> = pages
                        .iter()
                        .filter(|(t, id, _)| *t == tid && id.depth == depth)
                        .map(|(_, id, _)| *id)
                        .collect();
                    assert!(
                        seq.windows(2).all(|w| w[0] < w[1]),
                        "max {max} depth {depth}"
                    );
                }
            }
        }
        // The bound was reached: with levels of one page, the walk went deeper before finishing a level.
        let (small, _) = visited(&s, 3, 1);
        assert_ne!(small, all);
    }
}
