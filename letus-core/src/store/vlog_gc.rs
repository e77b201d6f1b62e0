//! Value-log garbage collection: deleting the data files of the value log that no retained version reads, and
//! moving the live records out of files that are mostly garbage so that those can be deleted too (FORMAT.md
//! §1.6).
//!
//! A pass (after each background prune, or [`Store::vlog_gc`]):
//! 1. **Delete** the files retired by an earlier pass whose retirement version the prune boundary has reached.
//! 2. **Account**: walk the leaves of every trie at the newest version `s`, and the tombstones, summing the
//!    record bytes each data file holds that `s` refers to (its live bytes; exact, from the state itself).
//! 3. A sealed file with no live byte is **retired at `s`**. Why it can go once the boundary `B` reaches `s`: a
//!    read at a version `x >= B` needs a record that is the key's state at `x` (a leaf), at `B` (the last entry of
//!    a pruned history) or newer than `B`. The file is sealed, so every record in it is older than `s`; a record
//!    that is the state at some `x >= s` is also the state at `s`, and `s` refers to none of them.
//! 4. A sealed file whose garbage is at least [`Options::vlog_gc_garbage`] of its bytes is a **victim**: the next
//!    pass's walk collects its live records (one walk per pass), they are queued, and the next commits copy them
//!    to the log's end as *moved* records (the same bytes, version and history link, under another kind) and
//!    point the leaves (or tombstones) at the copies. Nothing hashed changes, so roots stay the same; replay
//!    moves the leaves again from the moved records. Once the commit that took the last move is durable, the
//!    victims are retired at its version. Moves are queued in key order, so that a commit's moves are neighbours
//!    and rewrite few pages.
//!
//! A move is checked when it is committed (the key still has that record), so a queue taken from an older state
//! is never wrong, only partly stale. The retired list is memory only: after a restart the first pass finds the
//! same files empty again.

use std::collections::{BTreeSet, VecDeque};

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
    pub(super) len: u32,
}

/// What GC keeps between passes.
#[derive(Default)]
pub(super) struct GcState {
    /// Data files the newest state did not refer to at the version given: deleted once it is pruned.
    retired: BTreeMap<u32, Version>,
    /// Records waiting to be moved by the next commits.
    pub(super) moves: VecDeque<Move>,
    /// The victims whose every live record is in `moves` (or was taken from it): once a commit that took the last
    /// move is durable, none of them holds a record that commit's state refers to, and they are retired at it.
    draining: BTreeSet<u32>,
    /// Sealed files the last pass found at least `vlog_gc_garbage` garbage: the next pass queues their records.
    next_victims: BTreeSet<u32>,
    /// The value log's committed bytes and live bytes at the last walk.
    last_walk: Option<(u64, u64)>,
}

/// What one GC pass found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this pass walked the state (a background pass between which and the last walk the value log grew
    /// little only deletes; then `version`, `live_bytes` and `moves_queued` are 0).
    pub accounted: bool,
    /// The version whose state was accounted.
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
    /// Records queued for moving by this pass.
    pub moves_queued: u64,
}

/// The most records one pass queues (about 40 bytes of memory each); the rest wait for a later pass.
const MAX_MOVES_PER_PASS: usize = 1 << 18;
/// Leaves an accounting walk reads per hold of the engine.
const LEAVES_PER_HOLD: usize = 4096;
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
                    v.leaf_batch(tid, after.as_ref(), LEAVES_PER_HOLD)
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
                    Some(l) if batch.len() == LEAVES_PER_HOLD => after = Some(l.path),
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// One GC pass (see the module). Unless `always_walk`, the walk is skipped when the value log grew, since the
    /// last one, by less than an eighth of the live bytes then or less than one file of `file_bytes` (a walk
    /// reads the whole state: at 1M accounts, a walk after every prune cost about a tenth of the commit rate), or
    /// while moves are still queued; deleting what the boundary passed needs no walk and always runs.
    pub(super) fn vlog_gc(
        &self,
        garbage: f64,
        always_walk: bool,
        file_bytes: u64,
    ) -> Result<GcReport> {
        let _one_at_a_time = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let counters = self.engine().counters.clone();
        let mut report = GcReport::default();

        // 1. Delete what the boundary has passed.
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
            Counters::add(&counters.vlog_files_deleted, report.files_deleted);
            Counters::add(&counters.vlog_bytes_deleted, report.bytes_deleted);
        }

        if !always_walk {
            let st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            let now: u64 = self.vdls.file_lengths().iter().map(|(_, l)| l).sum();
            let grew =
                |(log, live): (u64, u64)| now.saturating_sub(log) >= (live / 8).max(file_bytes);
            if !st.moves.is_empty() || !st.last_walk.is_none_or(grew) {
                report.files_retired = st.retired.len() as u64;
                report.log_bytes = now;
                return Ok(report);
            }
        }

        // 2. Account at the newest version, and collect, in the same walk, the live records of the victims the
        // previous pass chose (garbage only grows in a sealed file, so they still are): one walk per pass.
        let (version, tombstones) = {
            let e = self.engine();
            let Some(&v) = e.versions.last() else {
                return Ok(report);
            };
            let t: Vec<((TrieId, KeyPath), Location)> =
                e.tombstones.iter().map(|(k, l)| (*k, *l)).collect();
            (v, t)
        };
        report.version = version;
        let chosen: BTreeSet<u32> = {
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            // A queue still draining was taken from an older state; it is finished before another is taken.
            if st.moves.is_empty() {
                std::mem::take(&mut st.next_victims)
            } else {
                BTreeSet::new()
            }
        };
        let files = self.vdls.file_lengths();
        let mut live: HashMap<u32, u64> = HashMap::new();
        let mut moves = Vec::new();
        self.for_each_leaf(version, &mut |tid, l| {
            *live.entry(l.loc.file_id).or_default() += u64::from(l.loc.len);
            if moves.len() < MAX_MOVES_PER_PASS && chosen.contains(&l.loc.file_id) {
                moves.push(Move {
                    tid,
                    path: l.path,
                    loc: l.loc,
                    delete: false,
                });
            }
        })?;
        for ((tid, path), l) in &tombstones {
            *live.entry(l.file_id).or_default() += u64::from(l.len);
            if moves.len() < MAX_MOVES_PER_PASS && chosen.contains(&l.file_id) {
                moves.push(Move {
                    tid: *tid,
                    path: *path,
                    loc: *l,
                    delete: true,
                });
            }
        }
        report.log_bytes = files.iter().map(|(_, len)| len).sum();
        report.live_bytes = live.values().sum();
        report.accounted = true;

        // 3. Retire the empty sealed files; choose the next pass's victims.
        let active = files.last().map_or(0, |(id, _)| *id);
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        for &(id, len) in files.iter().filter(|(id, _)| *id != active) {
            let total = len.saturating_sub(HEADER_LEN);
            let l = live.get(&id).copied().unwrap_or(0);
            if l == 0 {
                st.retired.entry(id).or_insert(version);
            } else if garbage < 1.0
                && !chosen.contains(&id)
                && total.saturating_sub(l) as f64 >= garbage * total as f64
            {
                st.next_victims.insert(id);
            }
        }
        report.files_retired = st.retired.len() as u64;
        st.last_walk = Some((report.log_bytes, report.live_bytes));
        Counters::add(&counters.vlog_gc_passes, 1);

        // 4. Queue this pass's moves.
        report.moves_queued = moves.len() as u64;
        if moves.is_empty() {
            return Ok(report);
        }
        // Every live record of the chosen victims is queued, unless the cap cut the walk short.
        let complete: BTreeSet<u32> = if moves.len() < MAX_MOVES_PER_PASS {
            chosen
        } else {
            BTreeSet::new()
        };
        // In key order (the walk's order, tombstones last): the moves a commit takes are neighbours in the trie,
        // so they rewrite a few pages, not one page per move (in log order a commit's moves were scattered over
        // the whole state, and the pages they rewrote doubled the index files written).
        moves.sort_by_key(|m| (m.tid, m.path));
        st.moves.extend(moves);
        st.draining = complete;
        Ok(report)
    }

    /// The queued moves a commit that puts `put_bytes` of records takes, minus those no longer valid (the key
    /// was written or deleted since, or is written by this commit, per `staged`), with the records they copy.
    /// Returns, besides, the files that the commit empties if it becomes durable (see [`Shared::moves_committed`]).
    pub(super) fn take_moves(
        &self,
        put_bytes: u64,
        staged: &dyn Fn(TrieId, &KeyPath) -> bool,
    ) -> Result<(Vec<Moving>, BTreeSet<u32>)> {
        let budget = put_bytes.max(MIN_MOVE_BYTES_PER_COMMIT);
        let (batch, emptied) = {
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            let mut bytes = 0u64;
            let mut out = Vec::new();
            while bytes < budget {
                let Some(m) = st.moves.pop_front() else { break };
                bytes += u64::from(m.loc.len);
                out.push(m);
            }
            let emptied = if st.moves.is_empty() && !out.is_empty() {
                std::mem::take(&mut st.draining)
            } else {
                BTreeSet::new()
            };
            (out, emptied)
        };
        if batch.is_empty() {
            return Ok((Vec::new(), emptied));
        }
        let valid: Vec<Move> = {
            let e = self.engine();
            let mut out = Vec::with_capacity(batch.len());
            for m in batch {
                if staged(m.tid, &m.path) {
                    continue;
                }
                let current = if m.delete {
                    e.tombstones.get(&(m.tid, m.path)).copied()
                } else {
                    e.latest_leaf(m.tid, &m.path)?.map(|l| l.loc)
                };
                if current == Some(m.loc) {
                    out.push(m);
                }
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
                    self.engine().dir.join("vdls"),
                    m.loc.offset,
                    "a leaf's value record is of another key",
                ));
            }
            out.push(Moving {
                tid: m.tid,
                path: m.path,
                rec,
                len: m.loc.len,
            });
        }
        Ok((out, emptied))
    }

    /// After the commit of `version` that took the last queued moves is durable: the files they emptied hold
    /// nothing `version` refers to (each of their live records was moved by a commit up to it, or had been
    /// replaced), so they are retired at it. (A commit that fails poisons the store, which is reopened with an
    /// empty GC state, so no file is ever retired by a commit that did not happen.)
    pub(super) fn moves_committed(&self, version: Version, emptied: BTreeSet<u32>) {
        if emptied.is_empty() {
            return;
        }
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        for id in emptied {
            st.retired.entry(id).or_insert(version);
        }
    }
}

impl Store {
    /// Runs one value-log GC pass now (the background pruner of [`Options::keep_versions`] runs one after each
    /// prune): deletes the value-log files retired by an earlier pass that the prune boundary has passed, accounts
    /// the live bytes of every file at the newest version, retires the files with none, and queues the live
    /// records of files at least [`Options::vlog_gc_garbage`] garbage for the next commits to move. See the
    /// module docs (`store/vlog_gc.rs`) and FORMAT.md §1.6.
    pub fn vlog_gc(&self) -> Result<GcReport> {
        self.shared.vlog_gc(
            self.limits.vlog_gc_garbage,
            true,
            self.limits.vdls_file_bytes,
        )
    }
}

impl Reader {
    /// [`Store::vlog_gc`] from a reader handle.
    pub fn vlog_gc(&self) -> Result<GcReport> {
        let (garbage, file_bytes) = {
            let e = self.shared.engine();
            (e.opts.vlog_gc_garbage, e.opts.vdls_file_bytes)
        };
        self.shared.vlog_gc(garbage, true, file_bytes)
    }
}
