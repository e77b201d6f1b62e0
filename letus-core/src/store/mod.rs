//! The store: staging, durable commits, recovery, and reads, proofs, digests and verification at any version.
//!
//! ## Commit protocol (details and the crash argument in FORMAT.md)
//! 1. Every staged put/delete is appended to the value log (VDLS) as a record carrying the location of the key's
//!    previous record.
//! 2. The trie update is computed in memory (new page versions, new roots); nothing is published yet.
//! 3. A Commit record with every trie's new root is appended and the log is fsynced: from here the version is
//!    durable, and `commit` may return.
//! 4. Page changes go to the MemIndexTable as DeltaPages/BasePages, the new pages to the page cache, the roots to
//!    the roots log; when the MemIndexTable is large it is flushed as an immutable index file.
//!
//! Recovery opens the index files, takes the roots log up to the newest flushed version, and replays the value
//! log's complete commit groups after that point through the same code path, checking that every replayed
//! version reproduces the roots its Commit record names. What it replays is bounded by
//! [`Options::max_replay_millis`] of commit work.
//!
//! ## Readers and the writer
//! The engine sits behind a lock that readers ([`Snapshot`], the store's `&self` methods) share. A commit reads
//! it for step 2 (beside readers), holds nothing for step 3 (the value log's read side is shared, and a file's
//! committed length is published only after its fsync), and takes it exclusively for step 4 only, which is
//! memory work. A snapshot pins a version; everything it reads at or below that version is immutable (records
//! are only added, a growing DeltaPage only gains newer versions), so reads need no more than that.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use letus_verify::hash::{leaf_hash, value_hash};
use letus_verify::history::{ConsistencyProof, InclusionProof};
use letus_verify::{Digest, Hash, HistoryTree, KeyPath, Proof, TrieId, Version, EMPTY};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::fsutil::{self, lock_dir, sync_dir};
use crate::history_base::{self, Frontier};
use crate::lsvps::{
    BlockCache, FileMeta, IndexFile, IndexFileWriter, MemIndexTable, PageId, PageKey, PageKind,
};
use crate::metrics::{self, Counters};
use crate::options::Options;
use crate::roots_log::{RootEntry, RootsLog};
use crate::tombstones::{TombstoneLog, Tombstones};
use crate::trie::page::{self, Child, Head, Page, Record as PageRecord, Root};
use crate::trie::{self, Cell, Leaf, PageSource, PageWrite, Updated, Write};
use crate::vdls::{put_record_len, Location, Position, Record, Vdls, VdlsOptions, VdlsReader};

/// The read API, the same on [`Store`] (latest version) and [`Snapshot`] (its version).
macro_rules! reads {
    ($($(#[$m:meta])* fn $name:ident(&self $(, $arg:ident : $ty:ty)*) -> $ret:ty;)*) => {
        $( $(#[$m])* pub fn $name(&self $(, $arg: $ty)*) -> $ret { self.view(|v| v.$name($($arg),*)) } )*
    };
}

macro_rules! read_api {
    () => {
        reads! {
            /// The last committed version (of a snapshot: its version).
            fn latest_version(&self) -> Option<Version>;
            /// Whether `version` was committed (and, for a snapshot, is not above its version).
            fn has_version(&self, version: Version) -> bool;
            /// Every committed version, oldest first.
            fn versions(&self) -> Vec<Version>;
            /// The first committed version (of a store seeded from a snapshot: the snapshot's version).
            fn oldest_version(&self) -> Option<Version>;
            /// The tries that exist at the latest version.
            fn tries(&self) -> Vec<TrieId>;
            /// The value of `key` in trie `tid` as of `version` (the newest commit at or below it).
            fn get(&self, tid: TrieId, version: Version, key: &[u8]) -> Result<Option<Vec<u8>>>;
            /// The value of `key` at the latest version.
            fn get_latest(&self, tid: TrieId, key: &[u8]) -> Result<Option<Vec<u8>>>;
            /// The values of many keys (a block's access list) at `version`, loading pages and values in parallel.
            fn get_many(&self, tid: TrieId, version: Version, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>>;
            /// The value of `key` at `version` and its inclusion or exclusion proof (SPEC.md §5).
            fn get_proof(&self, tid: TrieId, version: Version, key: &[u8]) -> Result<(Option<Vec<u8>>, Proof)>;
            /// The values of `keys` at `version` and one multi-proof for all of them.
            fn get_multi_proof(&self, tid: TrieId, version: Version, keys: &[&[u8]]) -> Result<(Vec<Option<Vec<u8>>>, Proof)>;
            /// The non-empty subtrees at depth 2 of trie `tid` at exactly the committed `version`, from its root
            /// page alone (`None`: the trie did not exist then): what a router composes the root of a trie sharded
            /// over several stores from ([`crate::shard`]).
            fn subtree_tops(&self, tid: TrieId, version: Version) -> Result<Option<crate::shard::Tops>>;
            /// The digest of trie `tid` at exactly the committed `version`.
            fn digest(&self, tid: TrieId, version: Version) -> Result<Digest>;
            /// Digests of every trie at the latest version.
            fn latest_digests(&self) -> Result<Vec<Digest>>;
            /// Proof that trie `tid`'s entry at `version` is in its history as of `at` (SPEC.md §8.2).
            fn history_inclusion_proof(&self, tid: TrieId, version: Version, at: Version) -> Result<InclusionProof>;
            /// Proof that trie `tid`'s history at `from` is a prefix of its history at `to` (SPEC.md §8.3).
            fn history_consistency_proof(&self, tid: TrieId, from: Version, to: Version) -> Result<ConsistencyProof>;
            /// The frontier of trie `tid`'s history just before its entry at `version` (size and peaks, SPEC.md
            /// §8): what a store that imports the state of `version` needs ([`Store::set_history_base`]) so that
            /// its digests carry this store's history commitment.
            fn history_frontier(&self, tid: TrieId, version: Version) -> Result<Frontier>;
            /// Full verification: reads every value of trie `tid` at `version`, recomputes every node hash up to
            /// the root, checks every stored page hash on the way, and compares the root with `comm`. The first
            /// mismatch is reported as an error naming where it is.
            fn verify_full(&self, tid: TrieId, version: Version, comm: &Hash) -> Result<FullVerification>;
            /// `verify_full`, calling `progress` with the number of keys verified so far (every 4096 keys and at
            /// the end).
            fn verify_full_with_progress(&self, tid: TrieId, version: Version, comm: &Hash, progress: &mut dyn FnMut(u64)) -> Result<FullVerification>;
            /// The writes of `key` in trie `tid` (newest first): every Put, and every Delete of the key while it
            /// existed, walking the value log's back-links from the key's leaf at the latest version, or from its
            /// Delete record when it is deleted now. A Put of the value the key already had is a write and is
            /// listed; a delete of an absent key writes nothing and is not.
            ///
            /// At most `limit` entries. `before` continues an earlier answer: pass its [`HistoryPage::next`] to get
            /// the entries older than the last one it returned. Anything else that is not the version of one of the
            /// key's entries is [`Error::InvalidCursor`].
            fn history(&self, tid: TrieId, key: &[u8], before: Option<Version>, limit: usize) -> Result<HistoryPage>;
            /// [`Self::history`] whose page also ends before an entry that would take the value-log records read
            /// past `max_bytes` (at least one entry is read): a key rewritten often with large values answers in
            /// pages of bounded size, each with its cursor ([`HistoryPage::next`]).
            fn history_within(&self, tid: TrieId, key: &[u8], before: Option<Version>, limit: usize, max_bytes: u64) -> Result<HistoryPage>;
        }
    };
}

mod bulk;
mod consolidate;
mod engine;
mod latest_index;
mod manifest;
mod page_walk;
mod prune;
mod snapshot;
mod state_sync;
mod trie_state;
mod view;
mod vlog_gc;

pub use bulk::{BulkPair, CachedPages};
use engine::*;
use latest_index::LatestIndex;
pub use prune::{PruneProgress, PruneReport, PruneStatus};
use snapshot::*;
pub use snapshot::{Reader, Snapshot};
pub use state_sync::{KeyChange, SNAPSHOT_TOP_DEPTH};
use trie_state::*;
use view::*;
pub use vlog_gc::{GcReport, VlogFileStatus};

/// The result of [`Store::verify_full`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullVerification {
    /// The recomputed root, equal to the trusted one.
    pub root: Hash,
    /// Keys whose values were read and hashed.
    pub keys: u64,
    /// Pages whose stored hashes were checked.
    pub pages: u64,
}

/// The engine's memory by use (see [`Store::memory`]). The caches are bounded by their shares of the budget; the
/// MemIndexTable is flushed when it passes its share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// Decoded pages in the page cache, by their cache weight (their heap footprint).
    pub page_cache_bytes: u64,
    /// Pages in the page cache.
    pub page_cache_pages: u64,
    /// Index blocks in the block cache.
    pub block_cache_bytes: u64,
    /// The latest-value index's table (its full size; the parts never written cost no resident memory).
    pub latest_index_bytes: u64,
    /// Page records not yet flushed to an index file: the MemIndexTable and the one being flushed, if any.
    pub memtable_bytes: u64,
    /// The tombstone table (keys deleted at the latest version), estimated. It is outside the budget: it holds
    /// what the history of deleted keys needs, however many there are.
    pub tombstone_bytes: u64,
    /// The budget.
    pub budget_bytes: u64,
}

/// One entry of a key's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The version that wrote it.
    pub version: Version,
    /// The value, or `None` for a delete.
    pub value: Option<Vec<u8>>,
}

/// One answer of [`Store::history`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryPage {
    /// Newest first.
    pub entries: Vec<HistoryEntry>,
    /// Set when older entries exist: pass it as `before` to get them.
    pub next: Option<Version>,
}

/// Staged changes of the next version: `(tid, path) -> (key, value or None for a delete)`.
type Staged = BTreeMap<(TrieId, KeyPath), (Vec<u8>, Option<Vec<u8>>)>;

/// A letus store: several tries, every version kept, durable commits.
///
/// One writer (`&mut Store`: staging and commits) and any number of readers: the store's own `&self` methods, and
/// [`Snapshot`]s ([`Store::snapshot`], [`Reader`]) that other threads hold while commits go on. A commit computes
/// its trie update and writes and fsyncs its value-log group while readers read; it takes the engine exclusively
/// only to publish the result (page records, caches, roots), which is memory work.
pub struct Store {
    shared: Arc<Shared>,
    /// The options the engine was opened with (for the size checks of staging).
    limits: Options,
    replayed: Replayed,
    dir: PathBuf,
    counters: Arc<Counters>,
    vdls: Vdls,
    staged: Staged,
    poisoned: bool,
    /// Dropped (and joined) before the lock: it writes in the store's directory.
    pruner: Option<prune::Pruner>,
    /// Fills the latest-value index after the open (when it is on).
    filler: Option<latest_index::Filler>,
    _lock: crate::storage::LockGuard,
}

impl Drop for Store {
    /// The directory lock goes with the store, but the engine lives on in its readers ([`Reader`], [`Snapshot`]),
    /// and with it a background flush that may still be writing. It ends first: another opener must not work in
    /// the directory beside it (its open cuts the roots and tombstone logs at the newest index file, and the
    /// flush's index file, renamed after that, would then name versions those logs no longer hold). The pruner and
    /// the filler, which also work in the directory, are joined before, and a prune, GC pass or consolidation
    /// running through a [`Reader`] is waited for; none starts after.
    fn drop(&mut self) {
        self.stop_directory_work();
    }
}

/// What [`Store::open`] replayed from the value log (the commits after the newest index file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Commits replayed.
    pub versions: u64,
    /// Their puts and deletes.
    pub updates: u64,
}

const LOCK_FILE: &str = "LOCK";

impl Store {
    /// Opens the store in `dir` (created if missing), recovering from any crash: the store comes back at its last
    /// committed version with exactly its roots.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        Store::open_up_to(dir, opts, None)
    }

    /// [`Store::open`] whose recovery takes the value log to end at `up_to` at the latest (see
    /// `VdlsOptions::up_to`): what [`Store::reopen`] passes, the end of the last group this process wrote and
    /// fsynced.
    fn open_up_to(dir: impl AsRef<Path>, opts: Options, up_to: Option<Position>) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let fs = opts.storage.clone();
        // Created with every missing ancestor's entry fsynced: later directory fsyncs cover the entries inside
        // the store, not the store's own name.
        fsutil::ensure_dir(&*fs, &dir)?;
        let lock = lock_dir(&*fs, &dir, LOCK_FILE)?;
        let counters = Arc::new(Counters::default());
        let split = opts.memory_split();
        let block_cache = Arc::new(BlockCache::with_open_files(
            fs.clone(),
            split.block_cache_bytes,
            opts.open_index_files(),
        ));

        // LSVPS: every complete index file; temporary files are flushes that never finished.
        let lsvps_dir = dir.join("lsvps");
        fsutil::ensure_dir(&*fs, &lsvps_dir)?;
        // A prune's manifest names the base files and the boundary (FORMAT.md §2.9): a staged base file it names
        // is renamed into place, one it does not name is a prune that never reached its commit point.
        let pruned = crate::prune_manifest::read(&*fs, &dir)?;
        let mut numbered = Vec::new();
        let mut renamed = false;
        for name in fsutil::list(&*fs, &lsvps_dir)? {
            let path = lsvps_dir.join(&name);
            if name.ends_with(".tmp") {
                fsutil::remove_file(&*fs, &path)?;
                continue;
            }
            if let Some((no, generation)) = prune::parse_staged_name(&name) {
                if pruned
                    .as_ref()
                    .is_some_and(|m| m.newest() == (no, generation))
                {
                    let fin = lsvps_dir.join(crate::lsvps::index_file_name(no, generation));
                    fsutil::rename(&*fs, &path, &fin)?;
                    renamed = true;
                    numbered.push((no, generation, fin));
                } else {
                    fsutil::remove_file(&*fs, &path)?;
                }
                continue;
            }
            if let Some((no, generation)) = crate::lsvps::parse_index_file_name(&name) {
                numbered.push((no, generation, path));
            }
        }
        if renamed {
            sync_dir(&*fs, &lsvps_dir)?;
        }
        // Of a pruned store: its base files, then the files after the newest one. Anything else numbered up to the
        // newest base file is what a prune replaced (its removal may not have happened before a crash).
        let bases: Vec<(u64, u32)> = pruned.as_ref().map_or(Vec::new(), |m| m.bases.clone());
        // Every base file the manifest names must be here before anything it replaced is removed: without one,
        // the files it replaced hold the only copy of its pages.
        if let Some(&(b, g)) = bases.iter().find(|&&(b, g)| {
            !numbered
                .iter()
                .any(|(no, generation, _)| (*no, *generation) == (b, g))
        }) {
            return Err(Error::corrupt(
                &lsvps_dir,
                0,
                format!(
                    "the base file {} that the prune manifest names is missing",
                    crate::lsvps::index_file_name(b, g)
                ),
            ));
        }
        if let Some(&(last, _)) = bases.last() {
            let mut replaced = Vec::new();
            numbered.retain(|(no, generation, path)| {
                let keep = *no > last || bases.contains(&(*no, *generation));
                if !keep {
                    replaced.push(path.clone());
                }
                keep
            });
            for path in replaced {
                fsutil::remove_file(&*fs, &path)?;
            }
        }
        // Of two generations of one file the newer replaces the older (a consolidation whose removal of the old
        // one did not happen before a crash): both are whole, the newer holds every record of the older.
        numbered.sort();
        let mut superseded = Vec::new();
        numbered.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                superseded.push(std::mem::replace(earlier, later.clone()).2);
            }
            same
        });
        for path in superseded {
            fsutil::remove_file(&*fs, &path)?;
        }
        sync_dir(&*fs, &lsvps_dir)?;
        let mut files: Vec<Arc<IndexFile>> = Vec::new();
        let after_bases = bases.last().map_or(1, |(no, _)| no + 1);
        for (i, (no, generation, path)) in numbered.iter().enumerate() {
            // Flushes number their files 1, 2, 3, ... (a flush that never finished leaves only a `.tmp`, and its
            // number is used again), and each file holds the versions after the previous one's: a gap or an
            // overlap means a file was lost or put back, and its versions would be looked up in the wrong file.
            // A pruned store's base files come first, then the files numbered from the newest one's on.
            let expected = match bases.get(i) {
                Some(&(b, g)) => {
                    if (*no, *generation) != (b, g) {
                        return Err(Error::corrupt(
                            &lsvps_dir,
                            0,
                            format!(
                                "the base file {} that the prune manifest names is missing",
                                crate::lsvps::index_file_name(b, g)
                            ),
                        ));
                    }
                    b
                }
                None => after_bases + (i - bases.len()) as u64,
            };
            if *no != expected {
                return Err(Error::corrupt(
                    &lsvps_dir,
                    0,
                    format!(
                        "index file {expected:06}.idx is missing (the next one present is {no:06}.idx)"
                    ),
                ));
            }
            let file = IndexFile::open(
                path,
                crate::lsvps::cache_id(*no, *generation),
                counters.clone(),
                block_cache.clone(),
            )?;
            if let Some(prev) = files.last() {
                if file.meta().max_version <= prev.meta().max_version {
                    return Err(Error::corrupt(
                        path,
                        0,
                        format!(
                            "index file {no:06}.idx ends at version {}, not after the previous file's {}",
                            file.meta().max_version,
                            prev.meta().max_version
                        ),
                    ));
                }
            }
            files.push(Arc::new(file));
        }
        if let Some(m) = &pruned {
            if files.len() < bases.len()
                || files[bases.len() - 1].meta().max_version != m.base_boundary
            {
                return Err(Error::corrupt(
                    dir.join(crate::prune_manifest::FILE_NAME),
                    0,
                    "the prune boundary is not the last version of the newest base file",
                ));
            }
        }
        let flushed = files.last().map(|f| f.meta().max_version);
        let replay_from = files.last().map_or(Position::START, |f| Position {
            file_id: f.meta().replay_from.0,
            offset: f.meta().replay_from.1,
        });

        let (roots_log, entries) = RootsLog::open(&*fs, &dir, flushed)?;
        // A store written before the tombstone log existed has its table rebuilt from the whole value log: the
        // groups up to `flushed` only update the table, the later ones are replayed as usual.
        let (tombstone_log, tombstones, replay_from) =
            match TombstoneLog::open(&*fs, &dir, flushed)? {
                Some((log, table)) => (Some(log), table, replay_from),
                None => (None, Tombstones::new(), Position::START),
            };
        let mut tries: BTreeMap<TrieId, TrieState> = BTreeMap::new();
        for (tid, (size, peaks)) in history_base::read(&*fs, &dir)? {
            let history = HistoryTree::from_frontier(size, peaks).map_err(|e| {
                Error::corrupt(dir.join("history_base"), 0, format!("trie {tid}: {e}"))
            })?;
            tries.insert(
                tid,
                TrieState {
                    history,
                    ..TrieState::default()
                },
            );
        }
        let mut versions: Vec<Version> = Vec::new();
        for e in &entries {
            tries
                .entry(e.tid)
                .or_default()
                .push(e.tid, e.version, e.root, e.page_version);
            if versions.last() != Some(&e.version) {
                versions.push(e.version);
            }
        }
        let page_cache = PageCache::with_weighter(
            (split.page_cache_bytes / 4096).max(16) as usize,
            split.page_cache_bytes.max(1),
            PageWeighter,
        );
        let mut engine = Engine {
            dir: dir.clone(),
            next_file_no: numbered.last().map_or(1, |(n, _, _)| n + 1),
            opts: opts.clone(),
            memtable_limit: split.memtable_bytes,
            counters: counters.clone(),
            files,
            mem: MemIndexTable::new(),
            mem_min_version: None,
            flushing: None,
            block_cache,
            page_cache,
            latest: LatestIndex::new(split.latest_index_bytes),
            pages: HashMap::new(),
            rebases: HashMap::new(),
            tries,
            versions,
            roots_log,
            tombstones,
            tombstone_log,
            pruned_below: pruned.as_ref().map(|m| m.boundary),
            base_boundary: pruned.as_ref().map(|m| m.base_boundary),
            base_files: bases.len(),
            unflushed_work: std::time::Duration::ZERO,
        };

        // Replay the value log's complete commits after the flushed state.
        let mut pending: BTreeMap<TrieId, Vec<Write>> = BTreeMap::new();
        let mut pending_tombstones: Vec<TombstoneChange> = Vec::new();
        // (versions, updates) replayed from the value log.
        let mut replayed = (0u64, 0u64);
        let vdls_opts = VdlsOptions {
            file_bytes: opts.vdls_file_bytes,
            sync: opts.sync,
            up_to,
        };
        let vdls = Vdls::open(
            &fs,
            &dir.join("vdls"),
            vdls_opts,
            counters,
            replay_from,
            |loc, rec, moved| {
                match rec {
                    Record::Put {
                        version,
                        tid,
                        key,
                        value,
                        ..
                    } => {
                        let path = KeyPath::of(key);
                        let leaf = Leaf::new(path, value_hash(value), *version, loc);
                        pending.entry(*tid).or_default().push(Write {
                            path,
                            leaf: Some(leaf),
                        });
                        pending_tombstones.push((*tid, path, None));
                    }
                    // A moved Delete only moves the tombstone (the key is absent either way).
                    Record::Delete { tid, key, .. } if moved => {
                        pending_tombstones.push((*tid, KeyPath::of(key), Some(loc)));
                    }
                    Record::Delete { tid, key, .. } => {
                        pending.entry(*tid).or_default().push(Write {
                            path: KeyPath::of(key),
                            leaf: None,
                        });
                        pending_tombstones.push((*tid, KeyPath::of(key), Some(loc)));
                    }
                    Record::Commit { version, payload } => {
                        let changes = std::mem::take(&mut pending_tombstones);
                        if engine.tombstone_log.is_none() {
                            if flushed.is_some_and(|f| *version <= f) {
                                // Rebuilding the table: this version's pages and roots are already flushed.
                                pending.clear();
                                apply_tombstones(&mut engine.tombstones, None, *version, changes);
                                return Ok(());
                            }
                            engine.tombstone_log = Some(TombstoneLog::create(
                                &*fs,
                                &dir,
                                flushed,
                                &engine.tombstones,
                            )?);
                        }
                        let mut writes = std::mem::take(&mut pending);
                        for w in writes.values_mut() {
                            w.sort_by_key(|w| w.path);
                            // A commit never logs a key twice; the trie update relies on unique paths (two leaves
                            // with one path would never separate), so a group that does is corrupt.
                            if w.windows(2).any(|p| p[0].path == p[1].path) {
                                return Err(Error::corrupt(
                                    dir.join("vdls"),
                                    loc.offset,
                                    format!(
                                        "the commit group of version {version} writes a key twice"
                                    ),
                                ));
                            }
                        }
                        if engine.versions.last().is_some_and(|l| *l >= *version) {
                            return Err(Error::corrupt(
                            dir.join("vdls"),
                            loc.offset,
                            format!("commit record for version {version} is not above the previous one"),
                        ));
                        }
                        let started = Instant::now();
                        let mut plan = engine.plan(*version, &writes)?;
                        plan.tombstones = changes;
                        let expected = engine.payload(&plan);
                        if expected != *payload {
                            return Err(Error::corrupt(
                            dir.join("vdls"),
                            loc.offset,
                            format!("replaying version {version} does not reproduce the roots its commit record names"),
                        ));
                        }
                        let end = Position {
                            file_id: loc.file_id,
                            offset: loc.offset + u64::from(loc.len),
                        };
                        engine.apply(plan, end, started)?;
                        replayed.0 += 1;
                        replayed.1 += writes.values().map(|w| w.len() as u64).sum::<u64>();
                    }
                }
                Ok(())
            },
        )?;
        if engine.tombstone_log.is_none() {
            engine.tombstone_log = Some(TombstoneLog::create(
                &*fs,
                &dir,
                flushed,
                &engine.tombstones,
            )?);
        }
        let read_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.read_threads.max(1))
            .thread_name(|i| format!("letus-read-{i}"))
            .build()
            .map_err(|e| Error::io(&dir, std::io::Error::other(e)))?;
        let keep_versions = engine.opts.keep_versions;
        let prune_ratio = engine.opts.prune_garbage_ratio;
        let gc_garbage = engine.opts.vlog_gc_garbage;
        let mut store = Store {
            limits: engine.opts.clone(),
            replayed: Replayed {
                versions: replayed.0,
                updates: replayed.1,
            },
            dir: engine.dir.clone(),
            counters: engine.counters.clone(),
            shared: Arc::new(Shared {
                engine: RwLock::new(engine),
                vdls: vdls.reader().clone(),
                read_pool,
                maintenance: std::sync::Mutex::new(()),
                closed: std::sync::atomic::AtomicBool::new(false),
                turnstile: std::sync::Mutex::new(()),
                gc: std::sync::Mutex::default(),
                prune_status: std::sync::Mutex::default(),
                gc_running: std::sync::atomic::AtomicBool::new(false),
                prune_unfinished: std::sync::atomic::AtomicBool::new(false),
            }),
            vdls,
            staged: BTreeMap::new(),
            poisoned: false,
            pruner: None,
            filler: None,
            _lock: lock,
        };
        if store.limits.latest_index_bytes > 0 {
            store.filler = Some(latest_index::Filler::start(&store.shared)?);
        }
        if let Some(keep) = keep_versions {
            let pruner = prune::Pruner::start(&store.shared, keep, prune_ratio, gc_garbage)?;
            // A store opened with a window it is already past prunes at once.
            pruner.wake();
            store.pruner = Some(pruner);
        }
        Ok(store)
    }

    read_api!();

    fn view<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        self.shared.view(None, f)
    }

    /// What this open replayed from the value log: bounded by [`Options::max_replay_millis`] of commit work.
    pub fn replayed(&self) -> Replayed {
        self.replayed
    }

    /// A snapshot of the latest committed version, for reads on other threads while this store commits.
    pub fn snapshot(&self) -> Snapshot {
        self.reader().snapshot()
    }

    /// A handle that takes snapshots from any thread.
    pub fn reader(&self) -> Reader {
        Reader {
            shared: self.shared.clone(),
        }
    }

    /// Every `(key, value)` of trie `tid` at `version`, in path order; returns the count. Read from a snapshot a
    /// chunk at a time ([`Snapshot::for_each_pair`]): `f` never runs while the engine is held, so it may read the
    /// store itself, and a background prune or GC waiting for the engine does not stall behind the whole walk.
    pub fn for_each_pair(
        &self,
        tid: TrieId,
        version: Version,
        f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        self.snapshot().for_each_pair(tid, version, f)
    }

    /// The engine for the writer: a panic in an earlier publish poisoned it, and the store must be reopened.
    fn engine_mut(&self) -> Result<RwLockWriteGuard<'_, Engine>> {
        self.shared.engine_write()
    }

    /// Stages `key = value` in trie `tid` for the next commit.
    pub fn put(&mut self, tid: TrieId, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_sizes(key, Some(value))?;
        self.staged.insert(
            (tid, KeyPath::of(key)),
            (key.to_vec(), Some(value.to_vec())),
        );
        Ok(())
    }

    /// Stages the deletion of `key` in trie `tid` for the next commit.
    pub fn delete(&mut self, tid: TrieId, key: &[u8]) -> Result<()> {
        self.check_sizes(key, None)?;
        self.staged
            .insert((tid, KeyPath::of(key)), (key.to_vec(), None));
        Ok(())
    }

    /// Reopens the store in place after a failure (what `is_poisoned` reports): waits for a background flush,
    /// releases the directory lock and opens the directory again, which runs the recovery of `FORMAT.md §4` on
    /// what is on disk. Staged writes are dropped. [`Reader`]s and [`Snapshot`]s taken before hold the old engine
    /// (its caches and threads, outside the new one's memory budget) and are not told of what the reopened store
    /// does: once it prunes, consolidates or collects files they can answer I/O errors for versions they held.
    /// Drop them and take a new [`Store::reader`] after a reopen. If the device still fails, the error is
    /// returned and the store stays poisoned (the call can be repeated); in between, the lock is not held.
    pub fn reopen(&mut self) -> Result<()> {
        // Nothing of the old engine may still write in the directory when it is opened again (the open deletes
        // `.tmp` files and cuts the logs). A running flush's result is the failure being recovered from, or one
        // the reopen will meet again.
        self.stop_directory_work();
        self.poisoned = true;
        self._lock = Box::new(());
        // The log is taken back to the end of the last group this process wrote and fsynced: after a failed
        // fsync the kernel may have marked the pages of the failed commit's group clean, so that they are in the
        // page cache (and would be replayed and served) but never reach the disk.
        let durable = self.vdls.end();
        *self = Store::open_up_to(&self.dir, self.limits.clone(), Some(durable))?;
        Ok(())
    }

    /// Ends everything of this engine that writes in the directory, before the directory lock goes (a drop or a
    /// reopen): the pruner and the filler are joined, a prune, GC pass or consolidation running through a
    /// [`Reader`] is waited for and none starts after, and a background flush is finished.
    fn stop_directory_work(&mut self) {
        self.pruner = None;
        self.filler = None;
        self.shared.close_maintenance();
        let _ = self
            .shared
            .engine
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .finish_flush();
    }

    /// Whether a failed commit left the store unusable until it is reopened. A commit that fails this way may
    /// already be durable (it failed after its Commit record was fsynced, e.g. in an index flush): reopening
    /// recovers exactly what is on disk. A commit refused before anything was written (a version not above the
    /// last one) does not poison. A background index flush that failed counts too.
    pub fn is_poisoned(&self) -> bool {
        // A background flush that failed poisons the store at the next commit; it is reported now, so that the
        // caller can reopen before that commit fails too.
        self.poisoned || self.shared.engine().flush_failed()
    }

    /// Drops every staged change.
    pub fn discard_staged(&mut self) {
        self.staged.clear();
    }

    /// Number of staged changes.
    pub fn staged_len(&self) -> usize {
        self.staged.len()
    }

    fn check_sizes(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        // The limits are copied at open: staging takes no lock.
        let o = &self.limits;
        if key.len() > o.max_key_bytes {
            return Err(Error::TooLarge {
                what: "key",
                size: key.len(),
                limit: o.max_key_bytes,
            });
        }
        if let Some(v) = value {
            if v.len() > o.max_value_bytes {
                return Err(Error::TooLarge {
                    what: "value",
                    size: v.len(),
                    limit: o.max_value_bytes,
                });
            }
        }
        Ok(())
    }

    /// Commits the staged changes as `version` (strictly above the last one). When this returns `Ok`, the version
    /// survives any crash. Returns the digest of every trie at `version`.
    pub fn commit(&mut self, version: Version) -> Result<Vec<Digest>> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if let Some(last) = self.latest_version() {
            if version <= last {
                return Err(Error::VersionNotIncreasing {
                    requested: version,
                    last,
                });
            }
        }
        let started = Instant::now();
        let staged = std::mem::take(&mut self.staged);
        let updates = staged.len() as u64;
        let result = self.commit_staged(version, staged);
        if result.is_err() {
            // The log may hold records of this failed commit, or an fsync may have failed: the only safe state is
            // the one recovery reconstructs from disk.
            self.vdls.abort();
            self.poisoned = true;
        }
        let digests = result?;
        if let Some(p) = &self.pruner {
            p.wake();
        }
        Counters::add(&self.counters.commits, 1);
        Counters::add(&self.counters.updates, updates);
        Counters::add(
            &self.counters.commit_micros,
            started.elapsed().as_micros() as u64,
        );
        Ok(digests)
    }

    fn commit_staged(&mut self, version: Version, staged: Staged) -> Result<Vec<Digest>> {
        // A record's length does not depend on its link to the key's previous record, so every Put gets its
        // value-log location before the trie is walked: one walk then both builds the new leaves and finds the
        // previous records (a separate lookup walk per key cost as much as the update itself).
        let put_lens: Vec<u32> = staged
            .iter()
            .filter_map(|(_, (k, v))| v.as_ref().map(|v| put_record_len(k.len(), v.len())))
            .collect();
        let locs = self.vdls.next_locations(&put_lens)?;
        let shared = self.shared.clone();
        let started = Instant::now();
        // The trie update is computed while readers read (the engine is only read here; nothing else writes it:
        // this store is the one writer).
        let (mut plan, prevs, payload, dir) = {
            let engine = shared.engine();
            let dir = engine.dir.clone();
            let mut next_loc = locs.iter();
            let mut writes: BTreeMap<TrieId, Vec<Write>> = BTreeMap::new();
            for ((tid, path), (_, value)) in &staged {
                let leaf = match value {
                    Some(v) => {
                        let loc = *next_loc.next().ok_or_else(|| {
                            Error::corrupt(dir.join("vdls"), 0, "too few locations")
                        })?;
                        Some(Leaf::new(*path, value_hash(v), version, loc))
                    }
                    // Deleting in a trie that does not exist changes nothing (and must not create the trie).
                    None if !engine.tries.contains_key(tid) => continue,
                    None => None,
                };
                writes
                    .entry(*tid)
                    .or_default()
                    .push(Write { path: *path, leaf });
            }
            let plan = engine.plan(version, &writes)?;
            let mut prevs: HashMap<(TrieId, KeyPath), (Location, bool)> = HashMap::new();
            for (tid, u) in &plan.tries {
                prevs.extend(u.prevs.iter().map(|(p, l)| ((*tid, *p), (*l, false))));
            }
            // A key put again after a delete links to its Delete record, so its history goes on past it.
            for ((tid, path), (_, value)) in &staged {
                if value.is_some() && !prevs.contains_key(&(*tid, *path)) {
                    if let Some(l) = engine.tombstones.get(&(*tid, *path)) {
                        prevs.insert((*tid, *path), (*l, true));
                    }
                }
            }
            let payload = engine.payload(&plan);
            (plan, prevs, payload, dir)
        };
        // Puts in the order their locations were given, then the deletes of keys that existed (deleting an
        // absent key changes nothing and is not logged).
        let mut deletes = Vec::new();
        let mut tombstones = Vec::new();
        let mut expected = locs.into_iter();
        // Value-log GC's accounting (vlog_gc.rs): each record appended is live, each record it replaces (a
        // leaf's or a tombstone's) no longer is.
        let mut live_delta: vlog_gc::LiveDelta = Vec::new();
        let mut live = |added: Location, replaced: Option<Location>| {
            live_delta.push((added, true));
            if let Some(r) = replaced {
                live_delta.push((r, false));
            }
        };
        for ((tid, path), (key, value)) in staged {
            let link = prevs.get(&(tid, path)).copied();
            let prev = link.map(|(l, _)| l);
            if value.is_some() && link.is_some_and(|(_, from_tombstone)| from_tombstone) {
                tombstones.push((tid, path, None));
            }
            match value {
                Some(value) => {
                    let loc = self.vdls.append(&Record::Put {
                        version,
                        tid,
                        key,
                        value,
                        prev,
                    })?;
                    if expected.next() != Some(loc) {
                        return Err(Error::corrupt(
                            dir.join("vdls"),
                            loc.offset,
                            "a value record did not land where the trie leaf points",
                        ));
                    }
                    live(loc, prev);
                }
                None if prev.is_some() => deletes.push((
                    path,
                    Record::Delete {
                        version,
                        tid,
                        key,
                        prev,
                    },
                )),
                None => {}
            }
        }
        for (path, rec) in &deletes {
            let loc = self.vdls.append(rec)?;
            if let Record::Delete { tid, .. } = rec {
                tombstones.push((*tid, *path, Some(loc)));
            }
            live(loc, rec.prev());
        }
        plan.tombstones = tombstones;
        let work = started.elapsed();
        // Written and fsynced without holding the engine: readers go on.
        let end = self.vdls.commit(version, &payload)?;
        // A publish that would start a flush while the previous one is still being written waits for it here,
        // beside readers, instead of under the exclusive lock (backpressure, not unbounded memory).
        while shared.engine().flush_backpressure() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Publishing is memory work; readers wait for it only. What a recovery would redo is the trie update and
        // the publish, not the fsync: the clock restarts after it.
        let mut engine = self.engine_mut()?;
        engine.apply(plan, end, Instant::now() - work)?;
        // Under the exclusive hold: a GC walk that reads the newest version misses no commit's changes.
        self.shared.gc_committed(version, end.file_id, live_delta);
        engine
            .tries
            .keys()
            .map(|&t| engine.digest(t, version))
            .collect()
    }

    /// Makes trie `tid`'s history continue one of `size` entries whose frontier is `peaks` (from
    /// [`Store::history_frontier`] of the store an export came from): the first commit of this store is then
    /// entry `size` of that history, and its digests equal the source's. Only on a store with no commit yet;
    /// durable when it returns.
    pub fn set_history_base(
        &mut self,
        tid: TrieId,
        size: u64,
        peaks: Vec<(u32, Hash)>,
    ) -> Result<()> {
        if self.latest_version().is_some() {
            return Err(Error::InvalidHistoryBase(
                "the store already has commits; a history base is set before the first one".into(),
            ));
        }
        let history = HistoryTree::from_frontier(size, peaks.clone())
            .map_err(|e| Error::InvalidHistoryBase(e.to_string()))?;
        let fs = &*self.limits.storage;
        let mut base = history_base::read(fs, &self.dir)?;
        base.insert(tid, (size, peaks));
        history_base::write(fs, &self.dir, &base)?;
        self.engine_mut()?.tries.insert(
            tid,
            TrieState {
                history,
                ..TrieState::default()
            },
        );
        Ok(())
    }

    /// Flushes the MemIndexTable to an index file now (also done automatically when it is full).
    pub fn flush(&mut self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let end = self.vdls.end();
        let mut engine = self.engine_mut()?;
        let r = engine.flush(end).and_then(|()| engine.finish_flush());
        drop(engine);
        // As a failed commit does: the index file of those versions is not written, and only an open (which
        // replays the value log) writes it again.
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Flushes and closes. Dropping a store without `close` loses nothing either: the value log is replayed.
    pub fn close(mut self) -> Result<()> {
        // Also waits for a flush still running in the background.
        self.flush()?;
        Ok(())
    }

    /// Engine counters.
    pub fn metrics(&self) -> metrics::Snapshot {
        self.counters.snapshot()
    }

    /// What the engine holds in memory now, against its budget ([`Options::memory_budget_bytes`]).
    pub fn memory(&self) -> MemoryUse {
        self.shared.memory()
    }

    /// Bytes on disk: value log, index files, roots log, tombstone log.
    pub fn disk_bytes(&self) -> u64 {
        self.shared.disk_bytes()
    }

    /// Drops every cached page and index block (to measure cold reads).
    pub fn clear_caches(&self) {
        let e = self.shared.engine();
        e.page_cache.clear();
        e.block_cache.clear();
        e.latest.clear();
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
