//! Pruning the pages of old versions: the index files of the versions up to a boundary `B` are replaced, as a
//! whole, by one **base file** holding what reads at `B` and later need of them (FORMAT.md §2.9).
//!
//! Why this is enough: a read at a version `v >= B` only ever needs, of the records of versions `<= B`, the newest
//! record at or below `B` of each page reachable at `B`.
//! - A parent at `v` names a child page by its version `c`. If `c <= B`, the child did not change in `(c, v]`, so it
//!   existed unchanged at `B` (a page that goes away and comes back starts again with a BasePage at a new
//!   version), hence is reachable at `B`, and its newest record at or below `B` is its newest at or below `c`.
//! - A record of a version above `B` whose predecessor is at or below `B` names the page's newest record at or
//!   below `B` (a predecessor is the page's record just before).
//!
//! The base file keeps each of those records under its key, so both kinds of lookup find it where they did: a
//! BasePage is copied as it is; a DeltaPage `D` at `(page, p)` is replaced by one BasePage at `(page, p, Base)`
//! holding the page as of its version `c` at the boundary, `D`'s last entry (base files hold BasePages only:
//! index-file format 4, store format 9; a DeltaPage key routed to one is answered by the BasePage of the same key
//! version). A later record's chain applies its own entries on top of it as it did on top of `D`'s page. Nothing
//! that is hashed changes, so every root, proof and digest at `v >= B` is the same.
//!
//! Incremental: after a first prune at `B0`, the next one at `B1` replaces only the files after the base files,
//! and its base file covers `(B0, B1]` with the pages changed there. A page at or below `B0` is unchanged since
//! (with its whole subtree: a page's version is at least its children's), and the older base file, which the
//! version routing sends its lookups to, still holds it. The walk visits the changed pages only, so a prune costs
//! what the versions it prunes changed, not the state. The older base files hold pages changed since (garbage);
//! when the later base files together outweigh the first, a prune merges them all by a full walk of the state.
//!
//! A prune's base boundary is always the last version of an index file; the boundary reads see is then raised to
//! the window (`latest - keep`, no higher than the newest flushed version) without touching the files, and again
//! between prunes when value-log GC can delete a file by it ([`Shared::raise_boundary`]).
//!
//! Order of writes (the crash argument is in FORMAT.md §2.9): the base file is written as `NNNNNN.G.prune.tmp`,
//! fsynced, renamed to `NNNNNN.G.prune` (directory fsynced); the prune manifest naming it is written (the commit
//! point); it is renamed to `NNNNNN.G.idx` (directory fsynced); the engine swaps it in under its write lock;
//! the replaced files are deleted.

use super::vlog_gc::GcPass;
use super::*;
use crate::prune_manifest::{self, PruneManifest};

/// What one prune did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneReport {
    /// The oldest version whose state the store now holds: versions below it answer [`Error::Pruned`].
    pub boundary: Version,
    /// Index files replaced by the base file.
    pub files_removed: u64,
    /// Their bytes on disk.
    pub bytes_removed: u64,
    /// The base file's bytes.
    pub base_bytes: u64,
    /// Pages written to the base file (of a merge, every page at the boundary; else those changed since the
    /// previous boundary).
    pub pages: u64,
}

impl PruneReport {
    /// Bytes the prune gave back (the replaced files less the base file; negative is possible only for a store
    /// whose files held little history).
    pub fn bytes_reclaimed(&self) -> i64 {
        self.bytes_removed as i64 - self.base_bytes as i64
    }
}

/// How far a prune is: what [`Reader::prune_with_progress`] reports as it walks, and [`Store::prune_status`]
/// answers while one runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneProgress {
    /// Pages written to the base file so far.
    pub pages: u64,
    /// The depth of the pages being walked now (the walk goes one depth of the trie after another, each in
    /// prefix order; most of its time goes to the deepest levels).
    pub depth: u8,
    /// Of the pages of that level, how many are done...
    pub level_done: u64,
    /// ... and how many there are (known before the level is walked; a level of more than about a million pages
    /// is walked in parts, each part reported as a level of its own).
    pub level_pages: u64,
}

/// A prune running now ([`Store::prune_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PruneStatus {
    /// Whether it merges the base files (a full walk of the state) or writes the pages changed since the last one.
    pub merge: bool,
    /// How long it has run.
    pub elapsed: std::time::Duration,
    /// How far it is.
    pub progress: PruneProgress,
}

/// The least a background prune replaces (see [`Shared::prune_due`]).
const MIN_PRUNE_BYTES: u64 = 1 << 20;

/// Base files a store keeps before a prune merges them all into one.
const MAX_BASE_FILES: usize = 32;

/// `(number, generation)` of an index file, from its name.
fn file_number(f: &IndexFile) -> Result<(u64, u32)> {
    f.path()
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(crate::lsvps::parse_index_file_name)
        .ok_or_else(|| Error::corrupt(f.path(), 0, "an index file with an unexpected name"))
}

impl Shared {
    /// Whether the background pruner should prune now: the index files a prune would replace hold at least
    /// `ratio` times the bytes of the first base file (the last merge's: one copy of the state's pages), and at least
    /// [`MIN_PRUNE_BYTES`]; with `ratio` 0, whenever an index file lies wholly below the window. A prune writes about what the pruned versions changed, up to a copy of the state, so
    /// pruning only once that much has accumulated bounds the pruner's work to `1 / ratio` of what the commits
    /// write; pruning after every flush cost a third of the commit rate on two cores (docs/BENCHMARKS.md).
    pub(super) fn prune_due(&self, keep: u64, ratio: f64) -> bool {
        let e = self.engine();
        let Some(&latest) = e.versions.last() else {
            return false;
        };
        let target = latest.saturating_sub(keep);
        let n = e.files.partition_point(|f| f.meta().max_version <= target);
        if n <= e.base_files {
            return false;
        }
        if ratio <= 0.0 {
            return true;
        }
        let prunable: u64 = e.files[e.base_files..n].iter().map(|f| f.size()).sum();
        // The first base file is the last merge's: every page of the state then.
        let state = e.files[..e.base_files].first().map_or(0, |f| f.size());
        prunable >= MIN_PRUNE_BYTES && prunable as f64 >= ratio * state as f64
    }

    /// Prunes every version older than the newest `keep` ones (see the module): `keep = 0` keeps only the state
    /// of the newest flushed version. Returns `None` when neither the index files nor the boundary moved (no index
    /// file lies wholly below the window beyond the base files, and the boundary is there already). With `merge`, every
    /// base file is merged into one (see [`Store::prune_merged`]). `progress` gets the number of pages written so far.
    pub(super) fn prune(
        &self,
        keep: u64,
        merge: bool,
        progress: &mut dyn FnMut(&PruneProgress),
    ) -> Result<Option<PruneReport>> {
        let held = self.maintenance()?;
        let started = std::time::Instant::now();
        let status = |p: Option<PruneProgress>| {
            *self
                .prune_status
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = p.map(|p| (started, merge, p));
        };
        /// Clears the status however the prune ends, a panic included.
        struct Clear<'a>(&'a Shared);
        impl Drop for Clear<'_> {
            fn drop(&mut self) {
                *self
                    .0
                    .prune_status
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
            }
        }
        status(Some(PruneProgress::default()));
        let clear = Clear(self);
        let files = self.prune_files(&held, keep, merge, &mut |p| {
            status(Some(*p));
            progress(p)
        });
        drop(clear);
        let files = files?;
        let raised = self.raise_boundary(&held, keep)?;
        let boundary = self.engine().pruned_below.unwrap_or(0);
        Ok(match files {
            Some(r) => Some(PruneReport { boundary, ..r }),
            None if raised => Some(PruneReport {
                boundary,
                files_removed: 0,
                bytes_removed: 0,
                base_bytes: 0,
                pages: 0,
            }),
            None => None,
        })
    }

    /// Raises the boundary (not the base files) to the newest version `keep` below the latest, or to the newest
    /// flushed version if that is lower: so that every commit group of a version below the boundary is in index
    /// files, and replay never needs a value-log file GC deletes once the boundary passes it (FORMAT.md §1.6).
    /// The pages of the versions between the base boundary and the new one stay until the next prune; reads there
    /// answer `Pruned` from now on. Only a pruned store's boundary is raised (its manifest lists the base files).
    /// Written to the manifest before it is published, so no GC deletion relies on a boundary a crash can lower.
    /// Returns whether it moved.
    pub(super) fn raise_boundary(
        &self,
        _maintenance: &std::sync::MutexGuard<'_, ()>,
        keep: u64,
    ) -> Result<bool> {
        // A manifest written now would not name the base file of a prune that failed past its commit point.
        if self
            .prune_unfinished
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(Error::Poisoned);
        }
        let (manifest, dir, fs) = {
            let e = self.engine();
            let (Some(target), Some(current), Some(base_boundary)) =
                (e.window_boundary(keep), e.pruned_below, e.base_boundary)
            else {
                return Ok(false);
            };
            if target <= current {
                return Ok(false);
            }
            let bases = e.files[..e.base_files]
                .iter()
                .map(|f| file_number(f))
                .collect::<Result<Vec<_>>>()?;
            (
                PruneManifest {
                    boundary: target,
                    base_boundary,
                    bases,
                },
                e.dir.clone(),
                e.block_cache.shared_storage(),
            )
        };
        prune_manifest::write(&*fs, &dir, &manifest)?;
        self.engine_write()?.pruned_below = Some(manifest.boundary);
        Ok(true)
    }

    /// The index-file half of [`Shared::prune`]: replaces the index files wholly below `latest - keep` by a base
    /// file (with `merge`, always by a merge of every base file: one copy of the state's pages). `None` when there
    /// are none beyond the base files (with `merge`, and only one base file).
    fn prune_files(
        &self,
        _maintenance: &std::sync::MutexGuard<'_, ()>,
        keep: u64,
        merge: bool,
        progress: &mut dyn FnMut(&PruneProgress),
    ) -> Result<Option<PruneReport>> {
        let (
            current,
            from,
            skip,
            old_bases,
            boundary,
            roots,
            dir,
            counters,
            block_cache,
            meta_from,
            read_boundary,
        ) = {
            let e = self.engine();
            let Some(&latest) = e.versions.last() else {
                return Ok(None);
            };
            let target = latest.saturating_sub(keep);
            let n = e.files.partition_point(|f| f.meta().max_version <= target);
            let Some(last) = n.checked_sub(1).map(|i| &e.files[i]) else {
                return Ok(None);
            };
            let boundary = last.meta().max_version;
            // Asked to merge, a store whose base files are several is merged even if nothing new lies below
            // the window (the boundary stays where it is).
            let merge_only = merge && n == e.base_files && e.base_files > 1;
            if e.base_boundary.is_some_and(|b| b >= boundary) && !merge_only {
                return Ok(None);
            }
            // Incremental: a new base file of the pages changed since the last prune's boundary, after the base files
            // there are (which hold the others). When the later base files outweigh the first (the pages of a
            // whole state), most of the first is garbage: all of them are merged into one by a full walk.
            let later: u64 = e.files[..e.base_files]
                .iter()
                .skip(1)
                .map(|f| f.size())
                .sum();
            let full = merge
                || e.base_files == 0
                || e.base_files >= MAX_BASE_FILES
                || later > e.files[0].size();
            let (from, skip) = if full {
                (0, 0)
            } else {
                (e.base_files, e.base_boundary.unwrap_or(0))
            };
            let old_bases = e.files[..from]
                .iter()
                .map(|f| file_number(f))
                .collect::<Result<Vec<_>>>()?;
            let roots: Vec<(TrieId, Version)> = e
                .tries
                .iter()
                .filter_map(|(tid, t)| {
                    let i = t.index_at(boundary)?;
                    Some((*tid, *t.page_versions.get(i)?))
                })
                .collect();
            (
                e.files[..n].to_vec(),
                from,
                skip,
                old_bases,
                boundary,
                roots,
                e.dir.clone(),
                e.counters.clone(),
                e.block_cache.clone(),
                *last.meta(),
                e.pruned_below,
            )
        };
        let replaced = &current[from..];
        let last = replaced.last().ok_or(Error::Poisoned)?;
        let (no, generation) = file_number(last)?;
        let base_generation = generation + 1;
        let lsvps = dir.join("lsvps");
        let fin = lsvps.join(crate::lsvps::index_file_name(no, base_generation));
        let staged = lsvps.join(staged_name(no, base_generation));
        let tmp = lsvps.join(format!("{}.tmp", staged_name(no, base_generation)));
        if self
            .prune_unfinished
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(Error::Poisoned);
        }
        let fs = block_cache.shared_storage();
        for stale in [&tmp, &staged] {
            if fs.kind(stale).map_err(|e| Error::io(stale, e))?.is_some() {
                fsutil::remove_file(&*fs, stale)?;
            }
        }

        let written = self.write_base(
            &roots, skip, boundary, meta_from, &tmp, &counters, &fs, progress,
        );
        let (meta, pages) = match written {
            Ok(m) => m,
            Err(e) => {
                let _ = fs.remove_file(&tmp);
                return Err(e);
            }
        };
        fsutil::rename(&*fs, &tmp, &staged)?;
        sync_dir(&*fs, &lsvps)?;
        // From the manifest's write on, a failure before the swap may leave the manifest naming a file this
        // process does not use: no prune runs again until an open has finished this one (`prune_unfinished`).
        let swapped = (|| {
            // The commit point: from here an open finishes the prune.
            prune_manifest::write(
                &*fs,
                &dir,
                &PruneManifest {
                    // GC may have raised the boundary above this prune's (`maintenance` keeps it from moving now).
                    boundary: boundary.max(read_boundary.unwrap_or(0)),
                    base_boundary: boundary,
                    bases: old_bases
                        .into_iter()
                        .chain([(no, base_generation)])
                        .collect(),
                },
            )?;
            fsutil::rename(&*fs, &staged, &fin)?;
            sync_dir(&*fs, &lsvps)?;
            let base = Arc::new(IndexFile::open(
                &fin,
                crate::lsvps::cache_id(no, base_generation),
                counters.clone(),
                block_cache,
            )?);
            if base.meta().max_version != meta.max_version {
                return Err(Error::corrupt(&fin, 0, "the base file's versions differ"));
            }
            let base_bytes = base.size();
            let mut e = self.engine_write()?;
            // Flushes only append files, and consolidations and prunes hold `maintenance`.
            let same = e.files.len() >= current.len()
                && e.files.iter().zip(&current).all(|(a, b)| Arc::ptr_eq(a, b));
            if !same {
                return Err(Error::corrupt(
                    &lsvps,
                    0,
                    "the index files changed while a prune ran",
                ));
            }
            e.files.splice(from..current.len(), [base]);
            e.base_files = from + 1;
            e.base_boundary = Some(boundary);
            e.pruned_below = Some(boundary.max(e.pruned_below.unwrap_or(0)));
            Ok(base_bytes)
        })();
        let base_bytes = swapped.inspect_err(|_| {
            self.prune_unfinished
                .store(true, std::sync::atomic::Ordering::Release);
        })?;
        let mut bytes_removed = 0;
        for f in replaced {
            f.evict_from_cache();
            bytes_removed += f.size();
        }
        let paths: Vec<PathBuf> = replaced.iter().map(|f| f.path().to_path_buf()).collect();
        let files_removed = paths.len() as u64;
        drop(current);
        for p in &paths {
            fsutil::remove_file(&*fs, p)?;
        }
        sync_dir(&*fs, &lsvps)?;
        Counters::add(&counters.prunes, 1);
        Counters::add(&counters.pruned_files, files_removed);
        Counters::add(&counters.pruned_bytes, bytes_removed);
        Counters::add(&counters.bytes_written, base_bytes);
        Ok(Some(PruneReport {
            boundary,
            files_removed,
            bytes_removed,
            base_bytes,
            pages,
        }))
    }

    /// Writes the base file of `boundary` to `tmp` (fsynced by `finish`): for each trie, its pages above version
    /// `skip` level by level (a level's pages in prefix order, so the keys come in file order) with the newest
    /// record of each at or below `boundary`. Returns its meta and the number of pages.
    #[allow(clippy::too_many_arguments)]
    fn write_base(
        &self,
        roots: &[(TrieId, Version)],
        skip: Version,
        boundary: Version,
        meta_from: FileMeta,
        tmp: &Path,
        counters: &Arc<Counters>,
        fs: &crate::storage::SharedStorage,
        progress: &mut dyn FnMut(&PruneProgress),
    ) -> Result<(FileMeta, u64)> {
        let mut w = IndexFileWriter::create_bases_only(fs, tmp, counters.clone())?;
        let (mut records, mut min_version, mut counted) = (0u64, boundary, 0u64);
        // A hold's records are written after it: the writer fsyncs as it goes, and a commit waiting to publish
        // must not wait for that.
        let held_records = std::cell::RefCell::new(Vec::new());
        let pages = self.walk_pages(
            roots,
            skip,
            &mut |e, p| {
                let (key, bytes) = base_record(e, p.tid, p.id, p.version, p.cells, p.head)?;
                min_version = min_version.min(key.version);
                held_records.borrow_mut().push((key, bytes));
                records += 1;
                Ok(())
            },
            &mut |p| {
                for (key, bytes) in held_records.borrow_mut().drain(..) {
                    w.add(&key, &bytes)?;
                }
                Counters::add(&counters.pruned_pages, p.pages - counted);
                counted = p.pages;
                progress(p);
                Ok(())
            },
        )?;
        let meta = FileMeta {
            min_version: min_version.min(skip + 1),
            max_version: boundary,
            replay_from: meta_from.replay_from,
            records,
        };
        w.finish(&meta)?;
        Ok((meta, pages))
    }
}

/// The one record of page `id` (whose slots at `version`, its version at the boundary, are `cells`) that the base
/// file holds: a BasePage of `cells` with record version `version`, under the key version of the page's newest
/// record at or below `version` (`head`, when the caller knows it). A later record naming that one as its
/// predecessor (a DeltaPage's `prev`) is answered by this BasePage (§2.9, [`Engine::exact`]): the page as of its
/// last entry, which is `version`, as every entry of that record is at or below the boundary (a flush freezes
/// every DeltaPage, and the boundary is an index file's last version).
fn base_record(
    e: &Engine,
    tid: TrieId,
    id: PageId,
    version: Version,
    cells: &[(page::SlotNo, Cell)],
    head: Option<Version>,
) -> Result<(PageKey, Vec<u8>)> {
    let key_version = match head {
        Some(v) => v,
        None => {
            let probe = PageKey::new(tid, id, version, PageKind::Delta);
            e.floor_key(&probe)?
                .ok_or_else(|| {
                    Error::corrupt(
                        e.dir.join("lsvps"),
                        0,
                        format!("page {id:?} of trie {tid} has no record at version {version}"),
                    )
                })?
                .version
        }
    };
    if key_version > version {
        return Err(Error::corrupt(
            e.dir.join("lsvps"),
            0,
            format!("page {id:?} of trie {tid} at version {version} has its newest record at {key_version}"),
        ));
    }
    Ok((
        PageKey::new(tid, id, key_version, PageKind::Base),
        page::encode_base(version, 0, cells),
    ))
}

/// The name of a base file between its write and the manifest that commits it (FORMAT.md §2.9).
pub(super) fn staged_name(no: u64, generation: u32) -> String {
    format!("{no:06}.{generation}.prune")
}

/// `(number, generation)` of a staged base file's name.
pub(super) fn parse_staged_name(name: &str) -> Option<(u64, u32)> {
    let rest = name.strip_suffix(".prune")?;
    let (no, generation) = rest.split_once('.')?;
    if no.len() != 6 || !no.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let generation: u32 = generation.parse().ok()?;
    (generation > 0 && staged_name(no.parse().ok()?, generation) == name)
        .then(|| Some((no.parse().ok()?, generation)))
        .flatten()
}

impl Reader {
    /// Prunes the pages of every version older than the newest `keep` (see [`Store::prune`]); runs beside
    /// commits and reads, holding the engine exclusively only to swap the files.
    pub fn prune(&self, keep: u64) -> Result<Option<PruneReport>> {
        self.shared.prune(keep, false, &mut |_: &PruneProgress| {})
    }

    /// [`Store::prune_merged`] from a reader handle.
    pub fn prune_merged(&self, keep: u64) -> Result<Option<PruneReport>> {
        self.shared.prune(keep, true, &mut |_: &PruneProgress| {})
    }

    /// [`Reader::prune`] (or with `merge`, [`Reader::prune_merged`]) telling `progress` how far it is after
    /// every few dozen pages.
    pub fn prune_with_progress(
        &self,
        keep: u64,
        merge: bool,
        progress: &mut dyn FnMut(&PruneProgress),
    ) -> Result<Option<PruneReport>> {
        self.shared.prune(keep, merge, progress)
    }

    /// [`Store::prune_status`] from a reader handle.
    pub fn prune_status(&self) -> Option<PruneStatus> {
        self.shared.prune_status()
    }

    /// [`Store::vlog_gc_running`] from a reader handle.
    pub fn vlog_gc_running(&self) -> bool {
        self.shared.vlog_gc_running()
    }

    /// The oldest version whose state the store holds after pruning (`None`: never pruned).
    pub fn pruned_below(&self) -> Option<Version> {
        self.shared.engine().pruned_below
    }
}

impl Store {
    /// Prunes the pages of every version older than the newest `keep`: afterwards reads, proofs and history at
    /// a version below the boundary (`latest - keep`, or the newest flushed version if that is lower) answer
    /// [`Error::Pruned`]; at and above it everything is as before, byte for byte. Digests and history-commitment
    /// proofs of every version still answer. The space of the index files below the boundary comes back; the
    /// value-log files no kept version reads go by [`Store::vlog_gc`]. `None` when there is nothing to prune.
    pub fn prune(&self, keep: u64) -> Result<Option<PruneReport>> {
        self.shared.prune(keep, false, &mut |_: &PruneProgress| {})
    }

    /// [`Store::prune`], and the base files merged into one whatever they weigh: the index files come down to one
    /// copy of the state's pages at the boundary plus the versions after it. An incremental prune writes only the
    /// pages changed since the last one and merges once the later base files outweigh the first, so between
    /// merges a store can hold up to about two copies of its pages; this costs a full walk of the state (what
    /// `letus prune --merge` runs).
    pub fn prune_merged(&self, keep: u64) -> Result<Option<PruneReport>> {
        self.shared.prune(keep, true, &mut |_: &PruneProgress| {})
    }

    /// The oldest version whose state the store holds after pruning (`None`: never pruned).
    pub fn pruned_below(&self) -> Option<Version> {
        self.shared.engine().pruned_below
    }

    /// The prune running now, if any (the background pruner's, or one asked for through any handle), and how far
    /// it is: its page walk and the swap of its files (the value-log GC pass that usually follows is
    /// [`Store::vlog_gc_running`]).
    pub fn prune_status(&self) -> Option<PruneStatus> {
        self.shared.prune_status()
    }

    /// Whether a value-log GC pass is running now (the background pruner's, or one asked for).
    pub fn vlog_gc_running(&self) -> bool {
        self.shared.vlog_gc_running()
    }
}

impl Shared {
    fn vlog_gc_running(&self) -> bool {
        self.gc_running.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn prune_status(&self) -> Option<PruneStatus> {
        self.prune_status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|(started, merge, progress)| PruneStatus {
                merge,
                elapsed: started.elapsed(),
                progress,
            })
    }
}

/// The background pruner of [`Options::keep_versions`]: woken after every commit, it prunes when an index file
/// lies wholly below the window (most wake-ups find nothing to do, which costs two lock acquisitions). It holds
/// the store weakly; the store joins it when dropped, before its directory lock is released.
pub(super) struct Pruner {
    wake: Option<std::sync::mpsc::SyncSender<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Pruner {
    pub(super) fn start(
        shared: &Arc<Shared>,
        keep: u64,
        ratio: f64,
        gc_garbage: f64,
    ) -> Result<Pruner> {
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        let weak = Arc::downgrade(shared);
        let handle = std::thread::Builder::new()
            .name("letus-prune".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
                    // Nothing is lost when a GC pass fails: a deletion is committed by its list before any
                    // unlink, and a compaction by its rename (FORMAT.md §1.6).
                    let gc = |scan: bool| {
                        let pass = GcPass {
                            garbage: gc_garbage,
                            keep: Some(keep),
                            scan,
                            refresh: false,
                        };
                        if shared.vlog_gc(pass).is_err() {
                            Counters::add(&shared.engine().counters.vlog_gc_errors, 1);
                        }
                    };
                    if !shared.prune_due(keep, ratio) {
                        // Between prunes, only value-log files emptied since, or victims chosen, that the window
                        // has passed: the boundary is raised to let them go or be compacted.
                        if shared.deletion_due(keep) {
                            gc(false);
                        }
                        continue;
                    }
                    match shared.prune(keep, false, &mut |_| {}) {
                        // A new boundary: value-log files retired before it can go, and victims are read.
                        Ok(Some(_)) => gc(true),
                        Ok(None) => {}
                        // Nothing was lost: a failed prune leaves the files it would have replaced (FORMAT.md
                        // §2.9). The next commit wakes it to try again.
                        Err(_) => Counters::add(&shared.engine().counters.prune_errors, 1),
                    }
                }
            })
            .map_err(|e| Error::io("letus-prune", e))?;
        Ok(Pruner {
            wake: Some(wake),
            handle: Some(handle),
        })
    }

    pub(super) fn wake(&self) {
        if let Some(w) = &self.wake {
            let _ = w.try_send(());
        }
    }
}

impl Drop for Pruner {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_names_round_trip_and_others_do_not_parse() {
        assert_eq!(staged_name(12, 1), "000012.1.prune");
        assert_eq!(parse_staged_name("000012.1.prune"), Some((12, 1)));
        assert_eq!(parse_staged_name("000012.3.prune"), Some((12, 3)));
        for bad in [
            "000012.0.prune",
            "000012.prune",
            "12.1.prune",
            "000012.01.prune",
            "000012.1.prune.tmp",
            "000012.1.idx",
            "00001a.1.prune",
        ] {
            assert_eq!(parse_staged_name(bad), None, "{bad}");
        }
    }
}
