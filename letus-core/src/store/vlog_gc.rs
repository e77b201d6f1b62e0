//! Value-log garbage collection: deleting the data files of the value log that no retained version reads, and
//! moving the live records out of files that are mostly garbage so that those can be deleted too (FORMAT.md
//! §1.6).
//!
//! **Accounting.** GC keeps, per data file, its live bytes: the bytes of the records that the newest state refers
//! to (leaves and tombstones). The first pass after an open walks the state once to find them; from then on each
//! commit adjusts them by what it changed (the record a write replaces stops being live, the record it appends
//! starts), under the engine's exclusive hold while it publishes, so the figures are exact at every version.
//!
//! **Retiring and deleting.** A sealed file whose live bytes are zero at a version `v` is retired at `v`, and
//! deleted once the prune boundary `B` reaches `v` (the background pruner raises `B` to its window for that as
//! soon as the window passes `v`, [`Shared::raise_boundary`]). Why no read needs it then: a read at a version `x >= B` needs
//! a record that is the key's state at `x` (a leaf), at `B` (the last entry of a pruned history) or newer than
//! `B`. The file is sealed, so every record in it is older than `v`; a record that is the state at some `x >= v`
//! is also the state at `v`, and `v` refers to none of them.
//!
//! **Moving.** A sealed file whose garbage is at least [`Options::vlog_gc_garbage`] of its bytes is a victim: a
//! pass reads it record by record, keeps those the newest state still refers to, and queues them; the next
//! commits copy them to the log's end as *moved* records (the same bytes, version and history link, under another
//! kind) and point the leaves (or tombstones) at the copies. Nothing hashed changes, so roots stay the same; replay
//! moves the leaves again from the moved records. The commit that moves a victim's last live record brings it to
//! zero, which retires it. Moves are queued in key order, so that a commit's moves are neighbours in the trie and
//! rewrite few pages. A queued record was live when checked; from before that check until the queue is drained,
//! the keys every commit writes are recorded, and a move of a key written since is dropped, so a queue is never
//! wrong, only partly stale.
//!
//! What GC costs: one walk of the state per open, a read of each victim file, and the moves. The state is in
//! memory only (live bytes, retired files, the queue): an open starts over from a walk.

use std::collections::{BTreeSet, HashSet, VecDeque};

use super::*;
use crate::vdls::HEADER_LEN;

/// A live record queued to leave a file GC is emptying.
#[derive(Clone, Copy, Debug)]
pub(super) struct Move {
    tid: TrieId,
    path: KeyPath,
    loc: Location,
    /// A tombstone's Delete record (else a leaf's Put).
    delete: bool,
}

/// A move that is still valid, with the record it copies.
pub(super) struct Moving {
    pub(super) tid: TrieId,
    pub(super) path: KeyPath,
    pub(super) rec: Record,
    /// Where the record is now.
    pub(super) from: Location,
}

/// Changes of live bytes per data file: `(file id, bytes added (+) or no longer referred to (-))`.
pub(super) type LiveDelta = Vec<(u32, i64)>;

/// What one GC pass does.
#[derive(Clone, Copy, Debug)]
pub(super) struct GcPass {
    /// [`Options::vlog_gc_garbage`].
    pub(super) garbage: f64,
    /// The window of the background pruner: the boundary may be raised to it when that lets a retired file go.
    pub(super) keep: Option<u64>,
    /// Whether to walk the state (when its live bytes are not known) and read victims; without, the pass only
    /// deletes and retires, which costs a few lock holds.
    pub(super) scan: bool,
}

impl GcPass {
    /// Every step, the boundary as it is.
    pub(super) fn full(garbage: f64) -> GcPass {
        GcPass {
            garbage,
            keep: None,
            scan: true,
        }
    }
}

/// What GC keeps (memory only).
#[derive(Default)]
pub(super) struct GcState {
    /// Live bytes per data file, exact at the version given (`None` until the first walk after the open).
    live: Option<(Version, HashMap<u32, u64>)>,
    /// A walk in progress at the version given, and the changes of the commits after it.
    walking: Option<(Version, Vec<(Version, LiveDelta)>)>,
    /// Data files the state did not refer to at the version given: deleted once it is pruned.
    retired: BTreeMap<u32, Version>,
    /// Victims already read and queued (not chosen again).
    scanned: BTreeSet<u32>,
    /// Records waiting to be moved by the next commits.
    moves: VecDeque<Move>,
    /// The keys committed since the records queued (or being queued) were checked: a move of one of them is
    /// stale. Recorded only while there is a queue.
    written: Option<HashSet<(TrieId, KeyPath)>>,
}

impl GcState {
    fn apply(map: &mut HashMap<u32, u64>, delta: &LiveDelta) -> bool {
        for &(id, d) in delta {
            let e = map.entry(id).or_default();
            match e.checked_add_signed(d) {
                Some(v) => *e = v,
                None => return false,
            }
        }
        true
    }
}

/// What one GC pass found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this pass walked the state (the first after an open does, to find the live bytes).
    pub walked: bool,
    /// The version the live bytes are exact at.
    pub version: Version,
    /// Committed bytes of every data file.
    pub log_bytes: u64,
    /// Of those, the record bytes that version refers to.
    pub live_bytes: u64,
    /// Data files deleted by this pass.
    pub files_deleted: u64,
    /// Their bytes.
    pub bytes_deleted: u64,
    /// Files waiting for the prune boundary to reach their retirement version.
    pub files_retired: u64,
    /// Victim files read by this pass.
    pub files_scanned: u64,
    /// Records queued for moving by this pass.
    pub moves_queued: u64,
    /// Every data file as this pass left it, by id (the last is the active one).
    pub files: Vec<VlogFileStatus>,
}

/// One value-log data file, as a GC pass saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VlogFileStatus {
    /// Its id (`vdls/NNNNNN.vdl`).
    pub id: u32,
    /// Committed bytes, header included.
    pub bytes: u64,
    /// Record bytes the newest state refers to.
    pub live_bytes: u64,
    /// The version it was retired at (nothing live since), waiting for the boundary to reach it.
    pub retired_at: Option<Version>,
    /// Whether its live records have been queued for moving (a victim).
    pub victim: bool,
}

/// The most records one pass queues (about 40 bytes of memory each); the rest wait for a later pass.
const MAX_MOVES_PER_PASS: usize = 1 << 18;
/// Leaves an accounting walk, and records a victim scan, check per hold of the engine.
const PER_HOLD: usize = 4096;
/// The least record bytes a commit moves when moves are waiting; otherwise it moves at most what it writes, so
/// that GC at most doubles what a commit appends.
const MIN_MOVE_BYTES_PER_COMMIT: u64 = 64 << 10;

impl View<'_> {
    /// Up to `max` leaves of trie `tid` at this view's version above `after`, in path order.
    fn leaf_batch(&self, tid: TrieId, after: Option<&KeyPath>, max: usize) -> Result<Vec<Leaf>> {
        let Some(version) = self.latest else {
            return Ok(Vec::new());
        };
        let root = self.engine.root_page(tid, version)?;
        let mut out = Vec::new();
        trie::walk_after(&ScanSource(self.engine), tid, &root, after, &mut |leaf| {
            out.push(*leaf);
            Ok(out.len() < max)
        })?;
        Ok(out)
    }
}

impl Shared {
    /// Calls `f` with every leaf of every trie at `version`, a batch per hold of the engine (after any waiting
    /// writer).
    fn for_each_leaf(&self, version: Version, f: &mut dyn FnMut(TrieId, &Leaf)) -> Result<()> {
        let tries: Vec<TrieId> = self.engine().tries.keys().copied().collect();
        for tid in tries {
            let mut after: Option<KeyPath> = None;
            loop {
                let batch = self.walk_view(Some(Some(version)), |v| {
                    v.leaf_batch(tid, after.as_ref(), PER_HOLD)
                });
                let batch = match batch {
                    Ok(b) => b,
                    // A trie created after `version` has nothing there.
                    Err(Error::UnknownTrie(_)) => break,
                    Err(e) => return Err(e),
                };
                for l in &batch {
                    f(tid, l);
                }
                match batch.last() {
                    Some(l) if batch.len() == PER_HOLD => after = Some(l.path),
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// Finds the live bytes per data file by a walk of the state at the newest version, and installs them: the
    /// commits that publish meanwhile are recorded (see [`Shared::gc_committed`]) and applied after it, in the
    /// same hold of the GC state that installs the figures, so none is missed. Returns whether there was a state.
    fn walk_live(&self) -> Result<bool> {
        let (version, tombstones) = {
            let e = self.engine();
            let Some(&v) = e.versions.last() else {
                return Ok(false);
            };
            let t: Vec<Location> = e.tombstones.values().copied().collect();
            // Under the engine, so that no commit publishes between the version read and the recording start.
            self.gc
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .walking = Some((v, Vec::new()));
            (v, t)
        };
        let dir = self.engine_dir_vdls();
        let mut live: HashMap<u32, u64> = HashMap::new();
        let walked = self.for_each_leaf(version, &mut |_, l| {
            *live.entry(l.loc.file_id).or_default() += u64::from(l.loc.len);
        });
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, after) = st.walking.take().unwrap_or((version, Vec::new()));
        walked?;
        for l in tombstones {
            *live.entry(l.file_id).or_default() += u64::from(l.len);
        }
        let mut at = version;
        for (v, d) in &after {
            if !GcState::apply(&mut live, d) {
                return Err(Error::corrupt(
                    dir,
                    0,
                    "value-log accounting went below zero",
                ));
            }
            at = at.max(*v);
        }
        st.live = Some((at, live));
        Ok(true)
    }

    fn engine_dir_vdls(&self) -> PathBuf {
        self.engine().dir.join("vdls")
    }

    /// One GC pass (see the module): delete the retired files the boundary has passed; find the live bytes (a
    /// walk, the first time after an open); retire the sealed files with none; and, when no move is queued, read
    /// victims and queue their live records.
    pub(super) fn vlog_gc(&self, pass: GcPass) -> Result<GcReport> {
        let held = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let counters = self.engine().counters.clone();
        let mut report = GcReport::default();

        // 1. Delete what the boundary has passed, raising it to the window first if that lets a file go.
        if let Some(keep) = pass.keep {
            if self.deletion_due(keep) {
                self.raise_boundary(&held, keep)?;
            }
        }
        let boundary = self.engine().pruned_below;
        let due: BTreeSet<u32> = {
            let st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            st.retired
                .iter()
                .filter(|(_, v)| boundary.is_some_and(|b| b >= **v))
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
            st.scanned.retain(|id| !due.contains(id));
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
        let files = self.vdls.file_lengths();
        let active = files.last().map_or(0, |(id, _)| *id);
        let mut victims: Vec<(u64, u32)> = Vec::new();
        let queue_empty = {
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            let GcState {
                live,
                retired,
                scanned,
                moves,
                ..
            } = &mut *st;
            let Some((version, map)) = live.as_ref() else {
                return Ok(report);
            };
            report.version = *version;
            report.log_bytes = files.iter().map(|(_, len)| len).sum();
            report.live_bytes = map.values().sum();
            for &(id, len) in files.iter().filter(|(id, _)| *id != active) {
                let total = len.saturating_sub(HEADER_LEN);
                let l = map.get(&id).copied().unwrap_or(0);
                if l == 0 {
                    retired.entry(id).or_insert(*version);
                } else if pass.garbage < 1.0
                    && !scanned.contains(&id)
                    && total.saturating_sub(l) as f64 >= pass.garbage * total as f64
                {
                    victims.push((total.saturating_sub(l), id));
                }
            }
            report.files_retired = retired.len() as u64;
            report.files = files
                .iter()
                .map(|&(id, bytes)| VlogFileStatus {
                    id,
                    bytes,
                    live_bytes: map.get(&id).copied().unwrap_or(0),
                    retired_at: retired.get(&id).copied(),
                    victim: scanned.contains(&id),
                })
                .collect();
            moves.is_empty()
        };
        if !pass.scan || !queue_empty || victims.is_empty() {
            return Ok(report);
        }
        // From here every key a commit writes is recorded, so that the records checked below and found live need
        // no second look when a commit moves them: a key not written since is still where it was checked.
        self.gc
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .written = Some(HashSet::new());

        // 4. Read the victims, most garbage first, and queue what the state still refers to.
        victims.sort_unstable_by(|a, b| b.cmp(a));
        let mut queued: Vec<Move> = Vec::new();
        let mut scanned = Vec::new();
        for (_, id) in victims {
            if queued.len() >= MAX_MOVES_PER_PASS {
                break;
            }
            let mut batch: Vec<Move> = Vec::with_capacity(PER_HOLD);
            let check = |batch: &mut Vec<Move>, queued: &mut Vec<Move>| -> Result<()> {
                let e = self.engine_after_writers();
                for m in batch.drain(..) {
                    let current = if m.delete {
                        e.tombstones.get(&(m.tid, m.path)).copied()
                    } else {
                        e.latest_leaf(m.tid, &m.path)?.map(|l| l.loc)
                    };
                    if current == Some(m.loc) {
                        queued.push(m);
                    }
                }
                Ok(())
            };
            self.vdls.scan_file(id, &mut |loc, rec| {
                let (tid, key, delete) = match rec {
                    Record::Put { tid, key, .. } => (*tid, key, false),
                    Record::Delete { tid, key, .. } => (*tid, key, true),
                    Record::Commit { .. } => return Ok(()),
                };
                batch.push(Move {
                    tid,
                    path: KeyPath::of(key),
                    loc,
                    delete,
                });
                if batch.len() >= PER_HOLD {
                    check(&mut batch, &mut queued)?;
                }
                Ok(())
            })?;
            check(&mut batch, &mut queued)?;
            scanned.push(id);
        }
        report.files_scanned = scanned.len() as u64;
        report.moves_queued = queued.len() as u64;
        // In key order: the moves a commit takes are neighbours in the trie, so they rewrite a few pages, not one
        // page per move (in log order a commit's moves were scattered over the whole state, and the pages they
        // rewrote doubled the index files written).
        queued.sort_by_key(|m| (m.tid, m.path));
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        st.scanned.extend(scanned);
        st.moves.extend(queued);
        if st.moves.is_empty() {
            st.written = None;
        }
        Ok(report)
    }

    /// Whether a retired file waits for a boundary that the window `keep` allows (see
    /// [`Shared::raise_boundary`]): cheap enough for the pruner to ask after every commit.
    pub(super) fn deletion_due(&self, keep: u64) -> bool {
        let Some(target) = self.engine().window_boundary(keep) else {
            return false;
        };
        let st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        st.retired.values().any(|v| *v <= target)
    }

    /// The queued moves a commit that puts `put_bytes` of records takes, minus those no longer valid (the key
    /// was committed since it was checked, or is written by this commit, per `staged`), with the records they
    /// copy.
    pub(super) fn take_moves(
        &self,
        put_bytes: u64,
        staged: &dyn Fn(TrieId, &KeyPath) -> bool,
    ) -> Result<Vec<Moving>> {
        let budget = put_bytes.max(MIN_MOVE_BYTES_PER_COMMIT);
        let valid: Vec<Move> = {
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            if st.moves.is_empty() {
                return Ok(Vec::new());
            }
            let mut bytes = 0u64;
            let mut out = Vec::new();
            while bytes < budget {
                let Some(m) = st.moves.pop_front() else { break };
                bytes += u64::from(m.loc.len);
                let written = st
                    .written
                    .as_ref()
                    .is_some_and(|w| w.contains(&(m.tid, m.path)));
                if !written && !staged(m.tid, &m.path) {
                    out.push(m);
                }
            }
            if st.moves.is_empty() {
                // Drained: nothing is left to check (the next scan starts a new record before its checks).
                st.written = None;
            }
            out
        };
        let mut out = Vec::with_capacity(valid.len());
        for m in valid {
            let rec = self.vdls.read(m.loc)?;
            let fits = match &rec {
                Record::Put { tid, key, .. } => {
                    !m.delete && *tid == m.tid && KeyPath::of(key) == m.path
                }
                Record::Delete { tid, key, .. } => {
                    m.delete && *tid == m.tid && KeyPath::of(key) == m.path
                }
                Record::Commit { .. } => false,
            };
            if !fits {
                return Err(Error::corrupt(
                    self.engine_dir_vdls(),
                    m.loc.offset,
                    "a leaf's value record is of another key",
                ));
            }
            out.push(Moving {
                tid: m.tid,
                path: m.path,
                rec,
                from: m.loc,
            });
        }
        Ok(out)
    }

    /// Called by the writer while it holds the engine exclusively to publish `version` (durable by then), with
    /// the live bytes the commit changed and the keys it wrote: the figures advance to `version`, a sealed file
    /// (below `active`) they bring to zero is retired at it, and the keys are recorded while moves are queued or
    /// being checked. If the figures ever went below zero (a bug), they are dropped and the next pass walks
    /// again.
    pub(super) fn gc_committed(
        &self,
        version: Version,
        active: u32,
        delta: LiveDelta,
        keys: &mut dyn Iterator<Item = (TrieId, KeyPath)>,
    ) {
        if delta.is_empty() {
            return;
        }
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        let GcState {
            live,
            walking,
            retired,
            written,
            ..
        } = &mut *st;
        if let Some(w) = written {
            w.extend(keys);
        }
        if let Some((s, after)) = walking {
            if version > *s {
                after.push((version, delta.clone()));
            }
        }
        let mut dropped = false;
        if let Some((v, map)) = live {
            if version > *v {
                if GcState::apply(map, &delta) {
                    *v = version;
                    for &(id, _) in &delta {
                        if id < active && map.get(&id) == Some(&0) {
                            retired.entry(id).or_insert(version);
                        }
                    }
                } else {
                    dropped = true;
                }
            }
        }
        if dropped {
            st.live = None;
        }
    }
}

impl Store {
    /// Runs one value-log GC pass now (the background pruner of [`Options::keep_versions`] runs one after each
    /// prune): deletes the value-log files retired earlier that the prune boundary
    /// has passed, reports the live bytes of the value log (a walk of the state the first time after an open),
    /// retires the sealed files with none, and queues the live records of files at least
    /// [`Options::vlog_gc_garbage`] garbage for the next commits to move. See the module docs
    /// (`store/vlog_gc.rs`) and FORMAT.md §1.6.
    pub fn vlog_gc(&self) -> Result<GcReport> {
        self.shared
            .vlog_gc(GcPass::full(self.limits.vlog_gc_garbage))
    }
}

impl Reader {
    /// [`Store::vlog_gc`] from a reader handle.
    pub fn vlog_gc(&self) -> Result<GcReport> {
        let garbage = self.shared.engine().opts.vlog_gc_garbage;
        self.shared.vlog_gc(GcPass::full(garbage))
    }
}
