//! Value-log garbage collection: deleting the data files of the value log that no retained version reads, and
//! compacting the files that are mostly garbage (FORMAT.md §1.6).
//!
//! **Accounting.** GC keeps, per data file, its live records: those the newest state refers to (leaves and
//! tombstones), as a bitmap with a bit per 32 bytes of the file's original offsets (no two records start within
//! 32 bytes: the shortest is 33; so 1/256 of the log's size in memory), and their bytes. The first pass after an
//! open walks the state once to find them; from then on each commit adjusts them by what it changed (the record
//! a write replaces stops being live, the record it appends starts), under the engine's exclusive hold while it
//! publishes, so they are exact at every version.
//!
//! **Retiring and deleting.** A sealed file whose live bytes are zero at a version `v` is retired at `v`, and
//! deleted once the prune boundary `B` reaches `v` (the background pruner raises `B` to its window for that as
//! soon as the window passes `v`, [`Shared::raise_boundary`]). Why no read needs it then: a read at a version
//! `x >= B` needs a record that is the key's state at `x` (a leaf), at `B` (the last entry of a pruned history)
//! or newer than `B`. The file is sealed, so every record in it is older than `v`; a record that is the state at
//! some `x >= v` is also the state at `v`, and `v` refers to none of them.
//!
//! **Compacting.** A sealed file whose garbage a compaction can give back is at least
//! [`Options::vlog_gc_garbage`] of its record bytes is a victim (its records not live, less those that died
//! above `B` while `recent` holds them, which an early compaction keeps: see below and `GcState::held_back`): a
//! pass takes a copy of its live bits at the version `s` they stand at, and rewrites the file with only the
//! records it keeps, at new offsets, with a table from their original offsets (`vdls/compacted.rs`):
//! locations keep naming the original offsets, so no leaf, page or root changes and the commits do nothing for
//! GC. What it keeps: once `B >= s`, the records the bits name. By the argument above, a record no version `>= s`
//! refers to is read by no version `>= B`; the bits of a sealed file only ever clear, so the copy taken at `s`
//! names every record needed and a few that died since (garbage for a later compaction of the same file). Before
//! that, while `B < s`, the bits and the records that stopped being live at a version above `B`: GC keeps those
//! of the recent versions (`GcState::recent`, about a window's worth, bounded; after an open, read from the value
//! log's tail, where each record names the one it replaced), and a record some version
//! `x` in `[B, s)` refers to is either still live at `s` or stopped being live at a version in `(x, s]`. That
//! early compaction also needs the file to lie wholly before the data file a recovery starts replaying from (a
//! compacted file has no commit records; with `B >= s` that holds anyway, as `B` is at most the newest flushed
//! version). So a victim is mostly compacted in the pass that chose it, without waiting a window for the boundary
//! (at the end of a run at window 10, the files chosen at the last prune waited with all their garbage).
//!
//! What GC costs: one walk of the state per open, and per victim one sequential read of it and one write of its
//! live records, on the pruner's thread. The state is in memory only (live records, retired files, victims, the
//! recent versions' dead records): an open starts over from a walk.

use std::collections::{BTreeSet, VecDeque};

use super::*;

/// Changes of the live records: `(record, whether it was added (else it is no longer referred to))`.
pub(super) type LiveDelta = Vec<(Location, bool)>;

/// No two records start within this many bytes of a data file (the shortest record is longer).
const GRANULE: u64 = 32;
const _: () = assert!(crate::vdls::record::MIN_RECORD_LEN as u64 > GRANULE);

/// The live records of one data file.
#[derive(Clone, Debug, Default)]
struct FileLive {
    /// Their bytes.
    bytes: u64,
    /// Bit `offset / GRANULE` set for each.
    bits: Vec<u64>,
}

impl FileLive {
    fn is_live(&self, offset: u64) -> bool {
        let g = offset / GRANULE;
        usize::try_from(g / 64)
            .ok()
            .and_then(|w| self.bits.get(w))
            .is_some_and(|w| w & (1 << (g % 64)) != 0)
    }

    /// Adds (`live`) or removes a record; `false` if it already was (or was not) live: the accounting is wrong.
    fn set(&mut self, loc: Location, live: bool) -> bool {
        let g = loc.offset / GRANULE;
        let Ok(w) = usize::try_from(g / 64) else {
            return false;
        };
        if w >= self.bits.len() {
            if !live {
                return false;
            }
            self.bits.resize(w + 1, 0);
        }
        let bit = 1u64 << (g % 64);
        if (self.bits[w] & bit != 0) == live {
            return false;
        }
        let len = u64::from(loc.len);
        let bytes = if live {
            self.bytes.checked_add(len)
        } else {
            self.bytes.checked_sub(len)
        };
        let Some(bytes) = bytes else {
            return false;
        };
        self.bits[w] ^= bit;
        self.bytes = bytes;
        true
    }
}

/// What one GC pass does.
#[derive(Clone, Copy, Debug)]
pub(super) struct GcPass {
    /// [`Options::vlog_gc_garbage`].
    pub(super) garbage: f64,
    /// The window of the background pruner: the boundary may be raised to it when that lets a retired file go
    /// or a victim be compacted.
    pub(super) keep: Option<u64>,
    /// Whether to walk the state (when its live bytes are not known) and choose victims; without, the pass only
    /// deletes, retires and compacts the victims chosen before.
    pub(super) scan: bool,
    /// Whether victims chosen before are chosen again at the newest version when the boundary has passed it (so
    /// that they are compacted to what is live now, not then): for the least disk ([`Store::vlog_gc_all`]).
    pub(super) refresh: bool,
}

impl GcPass {
    /// Every step, the boundary as it is.
    pub(super) fn full(garbage: f64) -> GcPass {
        GcPass {
            garbage,
            keep: None,
            scan: true,
            refresh: false,
        }
    }

    /// Every sealed file with any garbage is a victim, compacted at once if the boundary allows.
    pub(super) fn all() -> GcPass {
        GcPass {
            garbage: f64::MIN_POSITIVE,
            refresh: true,
            ..GcPass::full(0.0)
        }
    }
}

/// What GC keeps (memory only).
#[derive(Default)]
pub(super) struct GcState {
    /// The live records per data file, exact at the version given (`None` until the first walk after the open).
    live: Option<(Version, HashMap<u32, FileLive>)>,
    /// A walk in progress at the version given, and the changes of the commits after it.
    walking: Option<(Version, Vec<(Version, LiveDelta)>)>,
    /// Data files the state did not refer to at the version given: deleted once it is pruned.
    retired: BTreeMap<u32, Version>,
    /// Victims: their live records at the version given, compacted to those once it is pruned (before, see
    /// `recent`).
    victims: BTreeMap<u32, (Version, FileLive)>,
    /// The records that stopped being live at each version above `recent_after`, oldest first (`None`: not known
    /// since the open or since the accounting was dropped). Versions at or below the boundary are dropped by each
    /// pass, and the oldest beyond [`MAX_RECENT_RECORDS`].
    recent: VecDeque<(Version, Vec<Location>)>,
    recent_after: Option<Version>,
    recent_records: usize,
}

impl GcState {
    /// Whether `recent` holds every record that died above `boundary`.
    fn recent_covers(&self, boundary: Option<Version>) -> bool {
        boundary.is_some_and(|b| self.recent_after.is_some_and(|r| r <= b))
    }

    /// Whether victim `id`, its bits standing at `s`, can be compacted with the boundary at `boundary`: once
    /// `boundary >= s`; before, with the records that died above the boundary, if `recent` holds them and the file
    /// lies wholly before `replay_file`, the data file where a recovery would start replaying (with `B >= s` that
    /// holds already: `B` is at most the newest flushed version).
    fn compactable(
        &self,
        id: u32,
        s: Version,
        boundary: Option<Version>,
        replay_file: Option<u32>,
    ) -> bool {
        boundary.is_some_and(|b| b >= s)
            || (self.recent_covers(boundary) && replay_file.is_some_and(|r| id < r))
    }

    /// What a compaction of file `id` keeps: `bits` (at a version `s`), and when the boundary is below `s`, the
    /// records of the file that stopped being live above the boundary (`recent` holds only those after a pass
    /// dropped the older ones).
    ///
    /// `file_len` bounds the locations taken from `recent` (read from the log's tail after an open, so from
    /// disk): one past the file's end is not a record of it and must not size the bitmap.
    fn kept(
        &self,
        id: u32,
        s: Version,
        bits: &FileLive,
        boundary: Version,
        file_len: u64,
    ) -> FileLive {
        let mut kept = bits.clone();
        if boundary < s {
            for (_, dead) in self.recent.iter().filter(|(v, _)| *v > boundary) {
                let within = |l: &&Location| l.offset.saturating_add(u64::from(l.len)) <= file_len;
                for loc in dead.iter().filter(|l| l.file_id == id).filter(within) {
                    // Already there when it died after `s`. A record live at `s` has its word in the bitmap
                    // (which never shrinks): one outside it was not live then, and is not kept (nor may a
                    // damaged location grow the bitmap).
                    kept.set(*loc, true);
                }
            }
        }
        kept
    }

    /// For each file, the bytes of its records that stopped being live above `boundary`, when `recent` holds them
    /// all (else none): a compaction before the boundary passes the victim's version keeps those (`kept`), so
    /// they are not garbage it can give back. Choosing victims by what they give back keeps a file whose garbage
    /// is still inside the window from being compacted for nothing, and again once the window has passed (at
    /// window 100, that made up most of the value log's write amplification).
    fn held_back(&self, boundary: Option<Version>) -> HashMap<u32, u64> {
        let mut held = HashMap::new();
        let Some(b) = boundary.filter(|_| self.recent_covers(boundary)) else {
            return held;
        };
        for (_, dead) in self.recent.iter().filter(|(v, _)| *v > b) {
            for loc in dead {
                *held.entry(loc.file_id).or_insert(0) += u64::from(loc.len);
            }
        }
        held
    }

    /// Records `version`'s dead records in `recent`, dropping the oldest versions beyond the bound.
    fn remember(&mut self, version: Version, delta: &LiveDelta) {
        if self.recent_after.is_none() {
            return;
        }
        let dead: Vec<Location> = delta
            .iter()
            .filter(|(_, added)| !added)
            .map(|(l, _)| *l)
            .collect();
        if dead.is_empty() {
            return;
        }
        self.recent_records += dead.len();
        self.recent.push_back((version, dead));
        while self.recent_records > MAX_RECENT_RECORDS {
            let Some((v, d)) = self.recent.pop_front() else {
                break;
            };
            self.recent_records -= d.len();
            self.recent_after = Some(v);
        }
    }

    /// Drops the versions at or below the boundary from `recent`.
    fn forget_through(&mut self, boundary: Version) {
        while self.recent.front().is_some_and(|(v, _)| *v <= boundary) {
            if let Some((_, d)) = self.recent.pop_front() {
                self.recent_records -= d.len();
            }
        }
        if let Some(r) = &mut self.recent_after {
            *r = (*r).max(boundary);
        }
    }

    fn forget_recent(&mut self) {
        self.recent.clear();
        self.recent_records = 0;
        self.recent_after = None;
    }

    fn apply(map: &mut HashMap<u32, FileLive>, delta: &LiveDelta) -> bool {
        delta
            .iter()
            .all(|&(loc, added)| map.entry(loc.file_id).or_default().set(loc, added))
    }
}

/// What one GC pass found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this pass walked the state (the first after an open does, to find the live bytes).
    pub walked: bool,
    /// The version the live bytes are exact at.
    pub version: Version,
    /// Bytes on disk of every data file.
    pub log_bytes: u64,
    /// Of those, the record bytes that version refers to.
    pub live_bytes: u64,
    /// Data files deleted by this pass.
    pub files_deleted: u64,
    /// Their bytes.
    pub bytes_deleted: u64,
    /// Files waiting for the prune boundary to reach their retirement version.
    pub files_retired: u64,
    /// Files this pass chose to compact (compacted by a pass once the boundary reaches the version they were
    /// chosen at).
    pub victims_chosen: u64,
    /// Files waiting for the boundary to be compacted.
    pub victims_waiting: u64,
    /// Files this pass compacted.
    pub files_compacted: u64,
    /// Bytes those compactions gave back (size before less size after).
    pub bytes_reclaimed: u64,
    /// Live record bytes they copied.
    pub bytes_copied: u64,
    /// Every data file as this pass left it, by id (the last is the active one).
    pub files: Vec<VlogFileStatus>,
}

/// One value-log data file, as a GC pass saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VlogFileStatus {
    /// Its id (`vdls/NNNNNN.vdl`, or `NNNNNN.vdc` once compacted).
    pub id: u32,
    /// Bytes on disk.
    pub bytes: u64,
    /// Record bytes the newest state refers to.
    pub live_bytes: u64,
    /// The version it was retired at (nothing live since), waiting for the boundary to reach it.
    pub retired_at: Option<Version>,
    /// Whether it is a victim waiting for the boundary to be compacted.
    pub victim: bool,
    /// Whether it has been compacted.
    pub compacted: bool,
}

/// The most records [`GcState::recent`] holds (16 bytes each): beyond, its oldest versions are dropped and a victim
/// chosen at a version `s` waits for the boundary to reach `s` instead.
const MAX_RECENT_RECORDS: usize = 1 << 20;
/// The most bytes of value log the first pass after an open reads to find the records that died above the
/// boundary (beyond, its victims wait for the boundary as before).
const MAX_SEED_SCAN_BYTES: u64 = 1 << 30;
/// The most bytes of victims one pass compacts (the rest wait for the next pass, so that a prune never waits
/// long for the pruner's thread).
const MAX_COMPACT_BYTES_PER_PASS: u64 = 256 << 20;

impl Shared {
    /// Each data file's committed length (a compacted file's is its original's): what bounds the locations read
    /// from disk before they size anything.
    fn file_lens(&self) -> HashMap<u32, u64> {
        self.vdls
            .file_sizes()
            .into_iter()
            .map(|f| (f.id, f.len))
            .collect()
    }

    /// Finds the live bytes per data file by a walk of the state at the newest version, and installs them: the
    /// commits that publish meanwhile are recorded (see [`Shared::gc_committed`]) and applied after it, in the
    /// same hold of the GC state that installs the figures, so none is missed. Returns whether there was a state.
    fn walk_live(&self) -> Result<bool> {
        let (version, tombstones, roots) = {
            let e = self.engine();
            let Some(&v) = e.versions.last() else {
                return Ok(false);
            };
            let t: Vec<Location> = e.tombstones.values().copied().collect();
            let roots: Vec<(TrieId, Version)> = e
                .tries
                .iter()
                .filter_map(|(tid, t)| Some((*tid, *t.page_versions.get(t.index_at(v)?)?)))
                .collect();
            // Under the engine, so that no commit publishes between the version read and the recording start.
            self.gc
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .walking = Some((v, Vec::new()));
            (v, t, roots)
        };
        let dir = self.engine_dir_vdls();
        let mut live: HashMap<u32, FileLive> = HashMap::new();
        let mut twice = false;
        // Locations come from index files and the tombstone log: one outside the value log's files (a damaged or
        // hostile file, checksum-valid) is corruption, and must not size a bitmap (an offset of 2^62 would ask
        // for petabytes and abort the process at every open). Files only grow, and a state refers to none that
        // GC has deleted.
        let lens = self.file_lens();
        let inside = |l: &Location| {
            lens.get(&l.file_id)
                .is_some_and(|&n| l.offset.saturating_add(u64::from(l.len)) <= n)
        };
        let mut outside: Option<Location> = None;
        let walked = self.walk_pages(
            &roots,
            0,
            &mut |_, p| {
                for (_, cell) in p.cells {
                    if let Cell::Leaf(l) = cell {
                        if !inside(&l.loc) {
                            outside.get_or_insert(l.loc);
                            continue;
                        }
                        twice |= !live.entry(l.loc.file_id).or_default().set(l.loc, true);
                    }
                }
                Ok(())
            },
            &mut |_: &PruneProgress| Ok(()),
        );
        let seed = match walked {
            Ok(_) => self.dead_above_boundary(version),
            Err(_) => Ok(None),
        };
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, after) = st.walking.take().unwrap_or((version, Vec::new()));
        walked?;
        let seed = seed?;
        for l in tombstones {
            if !inside(&l) {
                outside.get_or_insert(l);
                continue;
            }
            twice |= !live.entry(l.file_id).or_default().set(l, true);
        }
        if let Some(l) = outside {
            return Err(Error::corrupt(
                dir,
                l.offset,
                format!("a leaf or tombstone refers to {l:?}, outside the value log's files"),
            ));
        }
        if twice {
            return Err(Error::corrupt(
                dir,
                0,
                "two leaves or tombstones refer to one value record",
            ));
        }
        let mut at = version;
        for (v, d) in &after {
            if !GcState::apply(&mut live, d) {
                return Err(Error::corrupt(
                    dir,
                    0,
                    "value-log accounting went wrong (a record replaced twice)",
                ));
            }
            at = at.max(*v);
        }
        st.live = Some((at, live));
        st.forget_recent();
        // The records that died above the boundary up to `version`, when the log's tail was read for them;
        // otherwise from `version` on only (the victims of this pass then wait for the boundary).
        match seed {
            Some((after_version, dead)) => {
                st.recent_after = Some(after_version);
                for (v, locs) in dead {
                    let delta: LiveDelta = locs.into_iter().map(|l| (l, false)).collect();
                    st.remember(v, &delta);
                }
            }
            None => st.recent_after = Some(version),
        }
        for (v, d) in &after {
            st.remember(*v, d);
        }
        Ok(true)
    }

    /// The records that stopped being live at each version in `(b, version]`, for `b` at or below the prune
    /// boundary: read from the value log's tail, as each Put or Delete names the record it replaces (`prev`).
    /// `b` is the last version of the newest index file at or below the boundary, whose `replay_from` is where
    /// the records of the versions after it start. `None` when the store was never pruned, the tail is longer
    /// than [`MAX_SEED_SCAN_BYTES`], it holds moved records of an older build (their group's version is not in
    /// the record), or more than [`MAX_RECENT_RECORDS`] died.
    #[allow(clippy::type_complexity)]
    fn dead_above_boundary(
        &self,
        version: Version,
    ) -> Result<Option<(Version, BTreeMap<Version, Vec<Location>>)>> {
        let (b, start) = {
            let e = self.engine();
            let Some(boundary) = e.pruned_below else {
                return Ok(None);
            };
            let Some(f) = e
                .files
                .iter()
                .rev()
                .find(|f| f.meta().max_version <= boundary)
            else {
                return Ok(None);
            };
            (f.meta().max_version, f.meta().replay_from.0)
        };
        let files: Vec<u32> = {
            let sizes = self.vdls.file_sizes();
            if sizes
                .iter()
                .filter(|f| f.id >= start)
                .map(|f| f.bytes)
                .sum::<u64>()
                > MAX_SEED_SCAN_BYTES
            {
                return Ok(None);
            }
            sizes
                .iter()
                .filter(|f| f.id >= start)
                .map(|f| f.id)
                .collect()
        };
        let mut dead: BTreeMap<Version, Vec<Location>> = BTreeMap::new();
        let (mut n, mut moved) = (0usize, false);
        for id in files {
            self.vdls.scan_file(id, &mut |_, rec, is_moved| {
                moved |= is_moved;
                let w = rec.version();
                if w > b && w <= version {
                    if let Some(p) = rec.prev() {
                        dead.entry(w).or_default().push(p);
                        n += 1;
                    }
                }
                Ok(())
            })?;
            if moved || n > MAX_RECENT_RECORDS {
                return Ok(None);
            }
        }
        Ok(Some((b, dead)))
    }

    fn engine_dir_vdls(&self) -> PathBuf {
        self.engine().dir.join("vdls")
    }

    /// One GC pass (see the module): delete the retired files the boundary has passed; find the live bytes (a
    /// walk, the first time after an open); retire the sealed files with none; choose victims; and compact the
    /// victims the boundary has passed.
    pub(super) fn vlog_gc(&self, pass: GcPass) -> Result<GcReport> {
        let held = self.maintenance()?;
        /// Says a pass is running while it is held (passes run one at a time, under `maintenance`).
        struct Running<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.gc_running
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _running = Running(&self.gc_running);
        let counters = self.engine().counters.clone();
        let mut report = GcReport::default();

        // 1. Delete what the boundary has passed, raising it to the window first if that lets a file go.
        if let Some(keep) = pass.keep {
            if self.deletion_due(keep) {
                self.raise_boundary(&held, keep)?;
            }
        }
        let (boundary, replay_file) = {
            let e = self.engine();
            let replay_file = e.files.last().map(|f| f.meta().replay_from.0);
            (e.pruned_below, replay_file)
        };
        let due: BTreeSet<u32> = {
            let st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            st.retired
                .iter()
                // Also wholly before the data file where a recovery would start replaying: a replay start at the
                // very end of a retired file (the flushed version's group was its last) names that file.
                .filter(|(id, v)| {
                    boundary.is_some_and(|b| b >= **v) && replay_file.is_some_and(|r| **id < r)
                })
                .map(|(id, _)| *id)
                .collect()
        };
        if !due.is_empty() {
            // Views hold the engine while they read values; none that passed its pruned check can still be
            // reading when the files leave the list under the exclusive hold.
            report.bytes_deleted = self.vdls.delete_files(&due, || self.engine_write())?;
            report.files_deleted = due.len() as u64;
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            st.retired.retain(|id, _| !due.contains(id));
            st.victims.retain(|id, _| !due.contains(id));
            if let Some((_, map)) = &mut st.live {
                map.retain(|id, _| !due.contains(id));
            }
            Counters::add(&counters.vlog_files_deleted, report.files_deleted);
            Counters::add(&counters.vlog_bytes_deleted, report.bytes_deleted);
        }

        // 2. The live bytes: kept by the commits, found by a walk the first time.
        let known = self
            .gc
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live
            .is_some();
        if !known {
            if !pass.scan || !self.walk_live()? {
                return Ok(report);
            }
            report.walked = true;
        }
        Counters::add(&counters.vlog_gc_passes, 1);

        // 3. Retire the sealed files with nothing live; choose the victims.
        self.retire_and_choose(pass, boundary, replay_file, &mut report);

        // 4. Compact the victims: with their bits once the boundary has passed the version those stand at, with
        //    the records that died since the boundary as well before that.
        let lens = self.file_lens();
        let ready: Vec<(u32, FileLive)> = {
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(b) = boundary {
                st.forget_through(b);
            }
            st.victims
                .iter()
                .filter(|(id, (v, _))| st.compactable(**id, *v, boundary, replay_file))
                .map(|(id, (v, bits))| {
                    let len = lens.get(id).copied().unwrap_or(0);
                    (*id, st.kept(*id, *v, bits, boundary.unwrap_or(0), len))
                })
                .collect()
        };
        let mut budget = MAX_COMPACT_BYTES_PER_PASS;
        for (id, bits) in ready {
            if budget == 0 {
                break;
            }
            let c = self
                .vdls
                .compact(id, &|offset| bits.is_live(offset), bits.bytes)?;
            budget = budget.saturating_sub(c.before);
            report.files_compacted += 1;
            report.bytes_reclaimed += c.before.saturating_sub(c.after);
            report.bytes_copied += c.copied;
            Counters::add(&counters.vlog_files_compacted, 1);
            Counters::add(
                &counters.vlog_bytes_reclaimed,
                c.before.saturating_sub(c.after),
            );
            Counters::add(&counters.vlog_moved_records, c.records);
            Counters::add(&counters.vlog_moved_bytes, c.copied);
            self.gc
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .victims
                .remove(&id);
        }
        if report.files_compacted > 0 {
            self.retire_and_choose(
                GcPass {
                    garbage: 1.0,
                    refresh: false,
                    ..pass
                },
                boundary,
                replay_file,
                &mut report,
            );
        }
        Ok(report)
    }

    /// Retires the sealed files with nothing live, chooses victims (unless `pass.garbage >= 1` or the pass does
    /// not scan), and fills in the report's figures and file list.
    fn retire_and_choose(
        &self,
        pass: GcPass,
        boundary: Option<Version>,
        replay_file: Option<u32>,
        report: &mut GcReport,
    ) {
        let files = self.vdls.file_sizes();
        let active = files.last().map_or(0, |f| f.id);
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        let refresh = pass.refresh
            && st.live.as_ref().is_some_and(|(version, _)| {
                boundary.is_some_and(|b| b >= *version) || st.recent_covers(boundary)
            });
        let held_back = st.held_back(boundary);
        let GcState {
            live,
            retired,
            victims,
            ..
        } = &mut *st;
        let Some((version, map)) = live.as_ref() else {
            return;
        };
        report.version = *version;
        report.log_bytes = files.iter().map(|f| f.bytes).sum();
        report.live_bytes = map.values().map(|f| f.bytes).sum();
        for f in files.iter().filter(|f| f.id != active) {
            let live_here = map.get(&f.id);
            let l = live_here.map_or(0, |f| f.bytes);
            if l == 0 {
                retired.entry(f.id).or_insert(*version);
                victims.remove(&f.id);
            } else if pass.scan
                && pass.garbage < 1.0
                && (refresh || !victims.contains_key(&f.id))
                && f.records
                    .saturating_sub(l)
                    // Only a file that can be compacted before the boundary passes it keeps those records
                    // (`compactable`); any other waits for the boundary and gives them back as well.
                    .saturating_sub(if replay_file.is_some_and(|r| f.id < r) {
                        held_back.get(&f.id).copied().unwrap_or(0)
                    } else {
                        0
                    }) as f64
                    >= pass.garbage * f.records as f64
            {
                victims.insert(f.id, (*version, live_here.cloned().unwrap_or_default()));
                report.victims_chosen += 1;
            }
        }
        report.files_retired = retired.len() as u64;
        report.victims_waiting = victims.len() as u64;
        report.files = files
            .iter()
            .map(|f| VlogFileStatus {
                id: f.id,
                bytes: f.bytes,
                live_bytes: map.get(&f.id).map_or(0, |l| l.bytes),
                retired_at: retired.get(&f.id).copied(),
                victim: victims.contains_key(&f.id),
                compacted: f.compacted,
            })
            .collect();
    }

    /// Whether a retired file or a victim waits for a boundary that the window `keep` allows (see
    /// [`Shared::raise_boundary`]): cheap enough for the pruner to ask after every commit.
    pub(super) fn deletion_due(&self, keep: u64) -> bool {
        let Some(target) = self.engine().window_boundary(keep) else {
            return false;
        };
        let st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        st.retired.values().any(|v| *v <= target) || st.victims.values().any(|(v, _)| *v <= target)
    }

    /// Called by the writer while it holds the engine exclusively to publish `version` (durable by then), with
    /// the records the commit made live or replaced: the live records advance to `version`, and a sealed file
    /// (below `active`) they bring to zero is retired at it. If they ever disagree with a change (a record replaced
    /// that was not live: a bug), they are dropped, with the victims, and the next pass walks again.
    ///
    /// A commit with an empty delta (no record made live or replaced) advances the live version too: its commit
    /// group is in the active file all the same, and a file retired or chosen at a version below one of its
    /// groups could be compacted or deleted while a recovery still has to replay that group.
    pub(super) fn gc_committed(&self, version: Version, active: u32, delta: LiveDelta) {
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        let GcState {
            live,
            walking,
            retired,
            ..
        } = &mut *st;
        if let Some((s, after)) = walking {
            if version > *s {
                after.push((version, delta.clone()));
            }
        }
        let mut dropped = false;
        let mut applied = false;
        if let Some((v, map)) = live {
            if version > *v {
                if GcState::apply(map, &delta) {
                    applied = true;
                    *v = version;
                    for &(loc, _) in &delta {
                        let id = loc.file_id;
                        if id < active && map.get(&id).is_some_and(|f| f.bytes == 0) {
                            retired.entry(id).or_insert(version);
                        }
                    }
                } else {
                    dropped = true;
                }
            }
        }
        if applied {
            st.remember(version, &delta);
        }
        if dropped {
            st.live = None;
            st.victims.clear();
            st.forget_recent();
        }
    }
}

impl Store {
    /// Runs one value-log GC pass now (the background pruner of [`Options::keep_versions`] runs one after each
    /// prune): deletes the value-log files retired earlier that the prune boundary
    /// has passed, reports the live bytes of the value log (a walk of the state the first time after an open),
    /// retires the sealed files with none, chooses the files at least [`Options::vlog_gc_garbage`] garbage as
    /// victims, and compacts the victims chosen at a version the boundary has passed. See the module docs
    /// (`store/vlog_gc.rs`) and FORMAT.md §1.6.
    pub fn vlog_gc(&self) -> Result<GcReport> {
        self.shared
            .vlog_gc(GcPass::full(self.limits.vlog_gc_garbage))
    }

    /// [`Store::vlog_gc`] for the least disk (what `letus prune --merge` runs after the merge): every sealed file
    /// with any garbage is a victim, and when the prune boundary is at the newest version (a prune keeping only
    /// the latest, on a flushed store) each is compacted now to exactly the records live; with a window they are
    /// compacted once the boundary passes this version.
    pub fn vlog_gc_all(&self) -> Result<GcReport> {
        self.shared.vlog_gc(GcPass::all())
    }
}

impl Reader {
    /// [`Store::vlog_gc`] from a reader handle.
    pub fn vlog_gc(&self) -> Result<GcReport> {
        let garbage = self.shared.engine().opts.vlog_gc_garbage;
        self.shared.vlog_gc(GcPass::full(garbage))
    }

    /// [`Store::vlog_gc_all`] from a reader handle.
    pub fn vlog_gc_all(&self) -> Result<GcReport> {
        self.shared.vlog_gc(GcPass::all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(offset: u64, len: u32) -> Location {
        Location {
            file_id: 1,
            offset,
            len,
        }
    }

    #[test]
    fn live_records_are_exact_and_refuse_what_cannot_happen() {
        let mut f = FileLive::default();
        // Records as a file lays them out: the shortest (33 bytes) next to each other, then far away.
        let recs = [loc(32, 33), loc(65, 33), loc(98, 45), loc(1 << 20, 60)];
        for r in recs {
            assert!(!f.is_live(r.offset));
            assert!(f.set(r, true));
            assert!(f.is_live(r.offset));
        }
        assert_eq!(f.bytes, 33 + 33 + 45 + 60);
        // Made live twice, or replaced while not live: refused, nothing changed.
        assert!(!f.set(recs[1], true));
        assert!(f.set(recs[1], false));
        assert!(!f.set(recs[1], false));
        assert!(!f.set(loc(1 << 30, 40), false));
        assert_eq!(f.bytes, 33 + 45 + 60);
        assert!(
            f.is_live(recs[0].offset) && !f.is_live(recs[1].offset) && f.is_live(recs[2].offset)
        );
        for r in [recs[0], recs[2], recs[3]] {
            assert!(f.set(r, false));
        }
        assert_eq!(f.bytes, 0);
        assert!(f.bits.iter().all(|w| *w == 0));
    }

    #[test]
    fn applying_a_delta_stops_at_the_first_disagreement() {
        let mut map = HashMap::new();
        assert!(GcState::apply(
            &mut map,
            &vec![(loc(32, 40), true), (loc(72, 40), true)]
        ));
        assert!(GcState::apply(
            &mut map,
            &vec![(loc(100, 40), true), (loc(32, 40), false)]
        ));
        assert_eq!(map[&1].bytes, 80);
        assert!(!GcState::apply(&mut map, &vec![(loc(32, 40), false)]));
    }

    #[test]
    fn held_back_counts_the_records_that_died_above_the_boundary_per_file() {
        let in_file = |file_id: u32, offset: u64, len: u32| Location {
            file_id,
            offset,
            len,
        };
        let mut st = GcState::default();
        // Not known since the open: nothing is held back (a victim then waits for the boundary, and keeps only
        // its live records).
        st.remember(5, &vec![(in_file(1, 32, 40), false)]);
        assert!(st.held_back(Some(4)).is_empty());
        st.recent_after = Some(3);
        st.remember(
            5,
            &vec![(in_file(1, 32, 40), false), (in_file(9, 0, 50), true)],
        );
        st.remember(6, &vec![(in_file(2, 64, 70), false)]);
        st.remember(
            8,
            &vec![(in_file(1, 96, 45), false), (in_file(2, 0, 33), false)],
        );
        // Versions above the boundary only; the records added are not counted.
        let held = st.held_back(Some(5));
        assert_eq!(held.get(&1), Some(&45));
        assert_eq!(held.get(&2), Some(&(70 + 33)));
        assert_eq!(held.get(&9), None);
        assert_eq!(st.held_back(Some(4)).get(&1), Some(&(40 + 45)));
        assert!(st.held_back(Some(8)).is_empty());
        // A boundary below what `recent` covers, or none: nothing.
        assert!(st.held_back(Some(2)).is_empty());
        assert!(st.held_back(None).is_empty());
    }
}
