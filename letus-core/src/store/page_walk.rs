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

/// The most `(page, version)` pairs of one level a walk keeps in memory (48 bytes each); past that they go to a
/// spill file (see [`Level`]).
const MAX_LEVEL_PAGES: usize = 1 << 20;

/// The bytes of one spilled `(page, version)`: depth, prefix, version.
const SPILLED: usize = 1 + 32 + 8;

/// Numbers the spill files of the walks of this process (two walks may run at once: a prune's and GC's).
static SPILLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The pages of one level of a walk, in the order they were found (prefix order): the first ones in a spill file
/// once more than `max` were found, the rest in memory. A level of any size costs at most `max` entries of
/// memory (plus one batch's children), and the walk still finishes a level before it starts the next, which is
/// what makes its visits come in the order of the index files' keys: depth, then prefix (a base file is written
/// in the walk's order).
struct Level {
    mem: Vec<(PageId, Version)>,
    spill: Option<Spill>,
    max: usize,
}

/// A level's spilled pages: `lsvps/walk-N.tmp` (an open removes `.tmp` files there, so a crash leaves none for
/// good), removed when the level is dropped.
struct Spill {
    fs: crate::storage::SharedStorage,
    file: fsutil::AppendFile,
    path: PathBuf,
    pages: u64,
}

impl Drop for Spill {
    fn drop(&mut self) {
        // A file left by a failed removal is removed by the next open (it ends in `.tmp`).
        let _ = self.fs.remove_file(&self.path);
    }
}

impl Level {
    fn new(max: usize) -> Level {
        Level {
            mem: Vec::new(),
            spill: None,
            max,
        }
    }

    fn len(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.pages) + self.mem.len() as u64
    }

    /// Moves the pages in memory to the spill file once there are more than `max` (called between holds of the
    /// engine, so that no commit waits for the write).
    fn spill_if_full(&mut self, place: &(crate::storage::SharedStorage, PathBuf)) -> Result<()> {
        if self.mem.len() <= self.max {
            return Ok(());
        }
        let spill = match &mut self.spill {
            Some(s) => s,
            None => {
                let (fs, dir) = place;
                let n = SPILLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = dir.join(format!("walk-{n}.tmp"));
                let file = fsutil::AppendFile {
                    file: fsutil::create_new(&**fs, &path)?,
                    end: 0,
                };
                self.spill.insert(Spill {
                    fs: fs.clone(),
                    file,
                    path,
                    pages: 0,
                })
            }
        };
        let mut bytes = Vec::with_capacity(self.mem.len() * SPILLED);
        for (id, version) in self.mem.drain(..) {
            bytes.push(id.depth);
            bytes.extend_from_slice(&id.prefix);
            bytes.extend_from_slice(&version.to_le_bytes());
        }
        spill
            .file
            .append(&bytes)
            .map_err(|e| Error::io(&spill.path, e))?;
        spill.pages += (bytes.len() / SPILLED) as u64;
        Ok(())
    }

    /// Calls `f` with the level's pages in order, [`PAGES_PER_HOLD`] at a time.
    fn for_each_batch(&self, mut f: impl FnMut(&[(PageId, Version)]) -> Result<()>) -> Result<()> {
        if let Some(s) = &self.spill {
            let corrupt = |why: &str| Error::corrupt(&s.path, 0, why.to_string());
            let seq =
                crate::storage::SeqReader::new(&*s.file.file).map_err(|e| Error::io(&s.path, e))?;
            let mut r = std::io::BufReader::with_capacity(1 << 20, seq);
            let mut batch = Vec::with_capacity(PAGES_PER_HOLD);
            let mut entry = [0u8; SPILLED];
            let mut left = s.pages;
            while left > 0 {
                std::io::Read::read_exact(&mut r, &mut entry).map_err(|e| Error::io(&s.path, e))?;
                left -= 1;
                let mut prefix = [0u8; 32];
                prefix.copy_from_slice(&entry[1..33]);
                let version = fsutil::u64_at(&entry, 33).ok_or_else(|| corrupt("a short entry"))?;
                batch.push((
                    PageId {
                        depth: entry[0],
                        prefix,
                    },
                    version,
                ));
                if batch.len() == PAGES_PER_HOLD || left == 0 {
                    f(&batch)?;
                    batch.clear();
                }
            }
        }
        self.mem.chunks(PAGES_PER_HOLD).try_for_each(f)
    }
}

/// What a walk passes down its levels.
struct Walk<'a> {
    tid: TrieId,
    skip: Version,
    visit: &'a mut dyn FnMut(&Engine, Visit<'_>) -> Result<()>,
    held: &'a mut dyn FnMut(&PruneProgress) -> Result<()>,
    pages: u64,
}

impl Shared {
    /// Visits the pages reachable from `roots` (a trie and the version of its root page) whose versions are above
    /// `skip` (a page at or below `skip` is skipped with its whole subtree: a page's version is at least its
    /// children's). Returns the pages visited.
    ///
    /// The walk goes one level of the trie after another, each level in prefix order, so that the pages come in
    /// the order of the index files' keys (a prune's base file is written in this order): it runs in a
    /// [`crate::lsvps::Sequential`] scope, which reads them ahead and leaves the block cache to the commits. A
    /// page in the page cache is used as it is; one read from disk is not built (building would hash every inline
    /// branch). The engine is held for [`PAGES_PER_HOLD`] pages at a time, after any waiting writer, and `held` is
    /// told how far the walk is after each hold: the pages visited so far, and of the level being walked, its
    /// depth, its pages done and its pages (a level is known whole before it is walked).
    ///
    /// Memory: a level keeps at most [`MAX_LEVEL_PAGES`] pages in memory and spills the rest to a file
    /// ([`Level`]).
    pub(super) fn walk_pages(
        &self,
        roots: &[(TrieId, Version)],
        skip: Version,
        visit: &mut dyn FnMut(&Engine, Visit<'_>) -> Result<()>,
        held: &mut dyn FnMut(&PruneProgress) -> Result<()>,
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
            self.walk_trie(&mut w, root_version, MAX_LEVEL_PAGES)?;
            pages = w.pages;
        }
        Ok(pages)
    }

    /// Visits the pages of one trie from its root page at `root_version`, level by level, keeping at most about
    /// `max` pages of a level in memory.
    fn walk_trie(&self, w: &mut Walk<'_>, root_version: Version, max: usize) -> Result<()> {
        let (tid, skip) = (w.tid, w.skip);
        // Where a level spills (`lsvps/`, on the store's storage).
        let place = {
            let e = self.engine();
            (e.block_cache.shared_storage(), e.dir.join("lsvps"))
        };
        let mut level = Level::new(max);
        level.mem.push((PageId::ROOT, root_version));
        while level.len() > 0 {
            let mut next = Level::new(max);
            let (mut done, total) = (0u64, level.len());
            level.for_each_batch(|batch| {
                let e = self.engine_after_writers();
                for &(id, version) in batch {
                    let slots = trie::SlotSource::slots(&ScanSource(&e), tid, id, version)?;
                    let (cells, head) = (&slots[..], slots.head_version());
                    for (slot, cell) in cells {
                        match cell {
                            Cell::Page { version, .. } if *version > skip => {
                                let (c, g) = trie::slot_nibbles(*slot);
                                next.mem.push((id.child(c, g), *version));
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
                next.spill_if_full(&place)?;
                w.pages += batch.len() as u64;
                done += batch.len() as u64;
                (w.held)(&PruneProgress {
                    pages: w.pages,
                    depth: batch.first().map_or(0, |(id, _)| id.depth),
                    level_done: done,
                    level_pages: total,
                })
            })?;
            level = next;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page of the state at `version`, as `walk_trie` visits them keeping at most `max` pages of a level in
    /// memory, with the leaves found.
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
        let mut held = |_: &PruneProgress| Ok(());
        let _sequential = crate::lsvps::Sequential::begin();
        for &(tid, v) in &roots {
            let mut w = Walk {
                tid,
                skip: 0,
                visit: &mut visit,
                held: &mut held,
                pages: 0,
            };
            s.shared.walk_trie(&mut w, v, max).unwrap();
        }
        (pages, leaves)
    }

    /// Found by review: past its bound a level used to be walked down to the leaves before the level above was
    /// finished, so a prune's base file got its keys out of order ("index file keys out of order") on any state
    /// with more than 2^20 pages at one depth (about 10M keys).
    #[test]
    fn a_walk_in_bounded_levels_visits_every_page_once_in_the_order_of_the_index_files() {
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
        // Trie by trie, depth by depth, each depth in prefix order: the order of the index files' keys.
        assert!(
            all.windows(2)
                .all(|w| (w[0].0, w[0].1.depth, w[0].1.prefix)
                    < (w[1].0, w[1].1.depth, w[1].1.prefix)),
            "not in key order"
        );
        assert!(all.iter().any(|(_, id, _)| id.depth >= 4), "too shallow");
        // Levels spilled to files (one page of a level in memory, three, forty) change nothing.
        for max in [0, 1, 3, 40] {
            let (pages, l) = visited(&s, 3, max);
            assert_eq!(l, leaves, "max {max}");
            assert_eq!(pages, all, "max {max}");
        }
        // The spill files are gone.
        let left: Vec<String> = std::fs::read_dir(d.path().join("lsvps"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
