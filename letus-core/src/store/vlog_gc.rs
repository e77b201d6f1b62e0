//! Value-log garbage collection: deleting the data files of the value log that no retained version reads, and
//! moving the live records out of files that are mostly garbage so that those can be deleted too (FORMAT.md
//! §1.6).
//!
//! **Accounting.** GC keeps, per data file, its live records: those the newest state refers to (leaves and
//! tombstones), as a bitmap with a bit per 32 bytes of the file (no two records start within 32 bytes: the
//! shortest is 33; so 1/256 of the log's size in memory), and their bytes. The first pass after an open walks
//! the state once to find them; from then on each commit adjusts them by what it changed (the record a write
//! replaces stops being live, the record it appends starts), under the engine's exclusive hold while it
//! publishes, so they are exact at every version.
//!
//! **Retiring and deleting.** A sealed file whose live bytes are zero at a version `v` is retired at `v`, and
//! deleted once the prune boundary `B` reaches `v` (the background pruner raises `B` to its window for that as
//! soon as the window passes `v`, [`Shared::raise_boundary`]). Why no read needs it then: a read at a version `x >= B` needs
//! a record that is the key's state at `x` (a leaf), at `B` (the last entry of a pruned history) or newer than
//! `B`. The file is sealed, so every record in it is older than `v`; a record that is the state at some `x >= v`
//! is also the state at `v`, and `v` refers to none of them.
//!
//! **Moving.** A sealed file whose garbage is at least [`Options::vlog_gc_garbage`] of its bytes is a victim: a
//! pass reads it record by record, keeps those whose bit is set (no lookup in the trie: reading a victim takes no
//! hold of the engine), and queues them; the next
//! commits copy them to the log's end as *moved* records (the same bytes, version and history link, under another
//! kind) and point the leaves (or tombstones) at the copies. Nothing hashed changes, so roots stay the same; replay
//! moves the leaves again from the moved records. The commit that moves a victim's last live record brings it to
//! zero, which retires it. A queued record was live when read; a commit takes a move only if its bit is still set
//! and it does not write the key itself, so a queue is never wrong, only partly stale.
//!
//! **Which moves a commit takes.** A move rewrites the pages on its key's path, as a write does; a victim's live
//! records are spread over the whole state, so moves taken in any order rewrite about one more bottom page each,
//! and at 1M keys that cost the commits a third of their rate. So a commit first takes the queued moves under the
//! same depth-4 prefix (the first two path bytes) as one of its own writes: their pages down to depth 4 are
//! rewritten anyway, and a move there costs its record's copy and at most a small page below. A block of 2,000
//! writes covers about 3% of the 65,536 prefixes, so most of a queue goes that way within a few dozen commits.
//! When the neighbours come to less than a quarter of what the commit writes (at least
//! [`MIN_MOVE_BYTES_PER_COMMIT`]), it takes more in key order, oldest pass first (neighbours of each other, so
//! they share the upper pages), up to that, so that a victim empties in bounded time whatever the commits write
//! (a store of small blocks has few neighbours).
//!
//! What GC costs: one walk of the state per open, a read of each victim file, and the moves. The state is in
//! memory only (live records, retired files, the queue): an open starts over from a walk.

use std::collections::BTreeSet;

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

/// A queued move (its key is that of the queue it is in).
#[derive(Clone, Copy, Debug)]
struct Queued {
    loc: Location,
    delete: bool,
}

/// The queued moves of each GC pass, by pass ([`GcState::passes`]), each in key order (empty passes are
/// removed).
type Queue = BTreeMap<u64, BTreeMap<(TrieId, KeyPath), Queued>>;

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
    /// The live records per data file, exact at the version given (`None` until the first walk after the open).
    live: Option<(Version, HashMap<u32, FileLive>)>,
    /// A walk in progress at the version given, and the changes of the commits after it.
    walking: Option<(Version, Vec<(Version, LiveDelta)>)>,
    /// Data files the state did not refer to at the version given: deleted once it is pruned.
    retired: BTreeMap<u32, Version>,
    /// Victims already read and queued (not chosen again).
    scanned: BTreeSet<u32>,
    /// Records waiting to be moved by the next commits.
    moves: Queue,
    /// Passes that queued moves.
    passes: u64,
}

impl GcState {
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
/// The least record bytes a commit moves when moves are waiting (see the module); otherwise it moves at most
/// twice what it writes (neighbours), and a quarter of it in any order.
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
        let mut live: HashMap<u32, FileLive> = HashMap::new();
        let mut twice = false;
        let walked = self.for_each_leaf(version, &mut |_, l| {
            twice |= !live.entry(l.loc.file_id).or_default().set(l.loc, true);
        });
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, after) = st.walking.take().unwrap_or((version, Vec::new()));
        walked?;
        for l in tombstones {
            twice |= !live.entry(l.file_id).or_default().set(l, true);
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
        let queue_room = {
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
            report.live_bytes = map.values().map(|f| f.bytes).sum();
            for &(id, len) in files.iter().filter(|(id, _)| *id != active) {
                let total = len.saturating_sub(HEADER_LEN);
                let l = map.get(&id).map_or(0, |f| f.bytes);
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
                    live_bytes: map.get(&id).map_or(0, |f| f.bytes),
                    retired_at: retired.get(&id).copied(),
                    victim: scanned.contains(&id),
                })
                .collect();
            moves.values().map(BTreeMap::len).sum::<usize>() < MAX_MOVES_PER_PASS
        };
        if !pass.scan || !queue_room || victims.is_empty() {
            return Ok(report);
        }
        // 4. Read the victims, most garbage first, and queue their live records. A victim is sealed, so its bits
        // only ever clear: a copy taken now can only call live a record that a commit has replaced since, and a
        // commit checks the bit again before it moves one.
        victims.sort_unstable_by(|a, b| b.cmp(a));
        let mut queued: Vec<Move> = Vec::new();
        let mut scanned = Vec::new();
        for (_, id) in victims {
            if queued.len() >= MAX_MOVES_PER_PASS {
                break;
            }
            let bits = {
                let st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
                match st.live.as_ref().and_then(|(_, m)| m.get(&id)) {
                    Some(f) => f.clone(),
                    None => continue,
                }
            };
            self.vdls.scan_file(id, &mut |loc, rec| {
                if !bits.is_live(loc.offset) {
                    return Ok(());
                }
                let (tid, key, delete) = match rec {
                    Record::Put { tid, key, .. } => (*tid, key, false),
                    Record::Delete { tid, key, .. } => (*tid, key, true),
                    Record::Commit { .. } => return Ok(()),
                };
                queued.push(Move {
                    tid,
                    path: KeyPath::of(key),
                    loc,
                    delete,
                });
                Ok(())
            })?;
            scanned.push(id);
        }
        report.files_scanned = scanned.len() as u64;
        report.moves_queued = queued.len() as u64;
        let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
        st.scanned.extend(scanned);
        if !queued.is_empty() {
            st.passes += 1;
            let at = st.passes;
            st.moves
                .entry(at)
                .or_default()
                .extend(queued.into_iter().map(|m| {
                    (
                        (m.tid, m.path),
                        Queued {
                            loc: m.loc,
                            delete: m.delete,
                        },
                    )
                }));
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

    /// The queued moves a commit that puts `put_bytes` of records and writes the keys `writes` (in key order)
    /// takes (see the module), minus those no longer valid (the key was committed since it was checked, or is
    /// written by this commit, per `staged`), with the records they copy.
    pub(super) fn take_moves(
        &self,
        put_bytes: u64,
        writes: &mut dyn Iterator<Item = (TrieId, KeyPath)>,
        staged: &dyn Fn(TrieId, &KeyPath) -> bool,
    ) -> Result<Vec<Moving>> {
        let valid: Vec<Move> = {
            let mut st = self.gc.lock().unwrap_or_else(PoisonError::into_inner);
            if st.moves.is_empty() {
                return Ok(Vec::new());
            }
            let GcState { moves, live, .. } = &mut *st;
            let mut taken: Vec<Move> = Vec::new();
            let take = |q: &mut BTreeMap<(TrieId, KeyPath), Queued>,
                        k: (TrieId, KeyPath),
                        taken: &mut Vec<Move>|
             -> u64 {
                match q.remove(&k) {
                    Some(m) => {
                        taken.push(Move {
                            tid: k.0,
                            path: k.1,
                            loc: m.loc,
                            delete: m.delete,
                        });
                        u64::from(m.loc.len)
                    }
                    None => 0,
                }
            };
            // 1. The neighbours of this commit's writes: under the same depth-4 prefix.
            let near_budget = put_bytes.saturating_mul(2).max(MIN_MOVE_BYTES_PER_COMMIT);
            let mut bytes = 0u64;
            let mut last: Option<(TrieId, [u8; 2])> = None;
            for (tid, path) in writes {
                if bytes >= near_budget {
                    break;
                }
                let prefix = [path.0[0], path.0[1]];
                if last == Some((tid, prefix)) {
                    continue;
                }
                last = Some((tid, prefix));
                let (mut lo, mut hi) = ([0u8; 32], [0xffu8; 32]);
                lo[..2].copy_from_slice(&prefix);
                hi[..2].copy_from_slice(&prefix);
                let range = (tid, KeyPath(lo))..=(tid, KeyPath(hi));
                for q in moves.values_mut() {
                    while bytes < near_budget {
                        let Some(k) = q.range(range.clone()).next().map(|(k, _)| *k) else {
                            break;
                        };
                        bytes += take(q, k, &mut taken);
                    }
                }
            }
            // 2. Up to a quarter of what it writes in all, in key order, oldest pass first.
            let far_budget = (put_bytes / 4).max(MIN_MOVE_BYTES_PER_COMMIT);
            for q in moves.values_mut() {
                while bytes < far_budget {
                    let Some(k) = q.keys().next().copied() else {
                        break;
                    };
                    bytes += take(q, k, &mut taken);
                }
            }
            moves.retain(|_, q| !q.is_empty());
            // Still live (not replaced since it was read: the bits are exact as of the last commit), and not
            // written by this commit.
            let map = live.as_ref().map(|(_, map)| map);
            taken
                .into_iter()
                .filter(|m| {
                    map.and_then(|map| map.get(&m.loc.file_id))
                        .is_some_and(|f| f.is_live(m.loc.offset))
                        && !staged(m.tid, &m.path)
                })
                .collect()
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
    /// the records the commit made live or replaced: the live records advance to `version`, and a sealed file
    /// (below `active`) they bring to zero is retired at it. If they ever disagree with a change (a record replaced
    /// that was not live: a bug), they are dropped, with the queued moves, and the next pass walks again.
    pub(super) fn gc_committed(&self, version: Version, active: u32, delta: LiveDelta) {
        if delta.is_empty() {
            return;
        }
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
        if let Some((v, map)) = live {
            if version > *v {
                if GcState::apply(map, &delta) {
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
        if dropped {
            st.live = None;
            st.moves.clear();
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
}
