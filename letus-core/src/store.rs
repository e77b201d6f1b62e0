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
//! version reproduces the roots its Commit record names.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use letus_verify::hash::{leaf_hash, value_hash};
use letus_verify::history::{ConsistencyProof, InclusionProof};
use letus_verify::{Digest, Hash, HistoryTree, KeyPath, Proof, TrieId, Version, EMPTY};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::fsutil::{lock_dir, sync_dir};
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

/// One trie's history: its root and root-page version after every commit since it was created.
#[derive(Default)]
struct TrieState {
    versions: Vec<Version>,
    roots: Vec<Hash>,
    page_versions: Vec<Version>,
    history: HistoryTree,
    history_roots: Vec<Hash>,
}

impl TrieState {
    fn push(&mut self, tid: TrieId, version: Version, root: Hash, page_version: Version) {
        self.versions.push(version);
        self.roots.push(root);
        self.page_versions.push(page_version);
        self.history
            .push(letus_verify::hash::history_leaf(tid, version, &root));
        self.history_roots.push(self.history.root());
    }

    /// Index of the newest commit at or below `version`.
    fn index_at(&self, version: Version) -> Option<usize> {
        self.versions
            .partition_point(|v| *v <= version)
            .checked_sub(1)
    }
}

/// The Base/Delta schedule of one page since the last flush.
struct PageState {
    /// The page's newest stored record (key version and kind).
    last: (Version, PageKind),
    /// Slot updates since the last BasePage.
    since_base: u32,
    /// Stored records from `last` back to its BasePage, both included.
    chain: u32,
    /// The DeltaPage still growing in the MemIndexTable, if any.
    active: Option<ActiveDelta>,
}

/// The DeltaPage still growing in the MemIndexTable (its bytes live only there).
struct ActiveDelta {
    first_version: Version,
    updates: u32,
}

type PageCache = quick_cache::sync::Cache<(TrieId, PageId, Version), Arc<Page>, PageWeighter>;

#[derive(Clone)]
struct PageWeighter;

impl quick_cache::Weighter<(TrieId, PageId, Version), Arc<Page>> for PageWeighter {
    fn weight(&self, _: &(TrieId, PageId, Version), page: &Arc<Page>) -> u64 {
        u64::from(page.weight()).max(1)
    }
}

/// Everything but the value log: LSVPS, caches, trie states. Split from [`Store`] so that recovery can replay
/// the value log into it.
struct Engine {
    dir: PathBuf,
    opts: Options,
    /// The MemIndexTable's share of the memory budget: it is flushed when it holds more.
    memtable_limit: usize,
    counters: Arc<Counters>,
    files: Vec<Arc<IndexFile>>,
    mem: MemIndexTable,
    mem_min_version: Option<Version>,
    /// The MemIndexTable being written as the next index file, if any.
    flushing: Option<Flushing>,
    next_file_no: u64,
    block_cache: Arc<BlockCache>,
    page_cache: PageCache,
    pages: HashMap<(TrieId, PageId), PageState>,
    tries: BTreeMap<TrieId, TrieState>,
    versions: Vec<Version>,
    roots_log: RootsLog,
    /// Keys deleted at the latest version, with their Delete records: a later Put links to it.
    tombstones: Tombstones,
    /// `None` only while `open` rebuilds the table of a store written without the log.
    tombstone_log: Option<TombstoneLog>,
}

/// A change to the tombstone table made by one commit: `Some(loc)` for a key deleted by the Delete record at
/// `loc`, `None` for a key put.
type TombstoneChange = (TrieId, KeyPath, Option<Location>);

/// Applies one commit's tombstone changes to the table and, when given, logs the ones that change it.
fn apply_tombstones(
    table: &mut Tombstones,
    mut log: Option<&mut TombstoneLog>,
    version: Version,
    changes: Vec<TombstoneChange>,
) {
    for (tid, path, loc) in changes {
        match loc {
            Some(loc) => {
                table.insert((tid, path), loc);
                if let Some(log) = log.as_deref_mut() {
                    log.set(version, tid, &path, loc);
                }
            }
            None => {
                if table.remove(&(tid, path)).is_some() {
                    if let Some(log) = log.as_deref_mut() {
                        log.clear(version, tid, &path);
                    }
                }
            }
        }
    }
}

/// Where the records of a version are looked up.
enum Segment<'a> {
    File(&'a Arc<IndexFile>),
    Table(&'a MemIndexTable),
}

/// A computed but not yet published commit.
struct Plan {
    version: Version,
    tries: Vec<(TrieId, Updated)>,
    /// What the commit's records change in the tombstone table (filled in by the caller, who has the records).
    tombstones: Vec<TombstoneChange>,
}

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
    /// Page records not yet flushed to an index file.
    pub memtable_bytes: u64,
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
    dir: PathBuf,
    counters: Arc<Counters>,
    vdls: Vdls,
    staged: Staged,
    poisoned: bool,
    _lock: File,
}

/// The part of a store that readers share with the writer.
struct Shared {
    engine: RwLock<Engine>,
    vdls: VdlsReader,
    /// The pool `get_many` issues its reads on (see [`Options::read_threads`]).
    read_pool: rayon::ThreadPool,
}

impl Shared {
    /// The engine for reading. A panic while the writer held the lock leaves it poisoned; readers go on reading
    /// what was published (the writer refuses further commits, see [`Store::commit`]).
    fn engine(&self) -> RwLockReadGuard<'_, Engine> {
        self.engine.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn memory(&self) -> MemoryUse {
        let e = self.engine();
        MemoryUse {
            page_cache_bytes: e.page_cache.weight(),
            page_cache_pages: e.page_cache.len() as u64,
            block_cache_bytes: e.block_cache.weight(),
            memtable_bytes: e.mem.bytes() as u64,
            budget_bytes: e.opts.memory_budget_bytes,
        }
    }

    fn disk_bytes(&self) -> u64 {
        let e = self.engine();
        self.vdls.disk_bytes()
            + e.files.iter().map(|f| f.size()).sum::<u64>()
            + e.roots_log.disk_bytes()
            + e.tombstone_log.as_ref().map_or(0, TombstoneLog::disk_bytes)
    }

    fn view<R>(&self, pinned: Option<Option<Version>>, f: impl FnOnce(&View<'_>) -> R) -> R {
        let e = self.engine();
        let latest = pinned.unwrap_or_else(|| e.versions.last().copied());
        f(&View {
            engine: &e,
            vdls: &self.vdls,
            read_pool: &self.read_pool,
            latest,
        })
    }
}

/// A read-only view of a store pinned to one committed version: every read sees the state of that version (or
/// an older one it names) however many commits happen meanwhile. Cheap to take and to clone, `Send + Sync`; it
/// never waits for a commit's trie update or fsync, or for an index flush, only (for a moment) for a commit to
/// publish its pages. Long walks ([`Snapshot::for_each_pair`]) release the engine between chunks.
#[derive(Clone)]
pub struct Snapshot {
    shared: Arc<Shared>,
    version: Option<Version>,
}

/// A handle that takes [`Snapshot`]s of a store's latest version from any thread, without access to the
/// [`Store`] (which the writer owns).
#[derive(Clone)]
pub struct Reader {
    shared: Arc<Shared>,
}

impl Reader {
    /// Engine counters.
    pub fn metrics(&self) -> metrics::Snapshot {
        self.shared.engine().counters.snapshot()
    }

    /// What the engine holds in memory now, against its budget.
    pub fn memory(&self) -> MemoryUse {
        self.shared.memory()
    }

    /// Bytes on disk: value log, index files, roots log, tombstone log.
    pub fn disk_bytes(&self) -> u64 {
        self.shared.disk_bytes()
    }

    /// A snapshot of the latest committed version.
    pub fn snapshot(&self) -> Snapshot {
        let version = self.shared.engine().versions.last().copied();
        Snapshot {
            shared: self.shared.clone(),
            version,
        }
    }
}

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
        }
    };
}

impl Snapshot {
    read_api!();

    fn view<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        self.shared.view(Some(self.version), f)
    }

    /// The version this snapshot reads (`None` for a store that had no commit).
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// Every `(key, value)` of trie `tid` at `version` in path order; returns the count. The engine is held only
    /// while a chunk of pairs is read, never while `f` runs: a slow consumer (a client reading an export) does
    /// not hold up commits.
    pub fn for_each_pair(
        &self,
        tid: TrieId,
        version: Version,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let mut after: Option<KeyPath> = None;
        let mut n = 0u64;
        loop {
            let chunk =
                self.view(|v| v.pairs_after(tid, version, after.as_ref(), PAIRS_PER_CHUNK))?;
            let done = chunk.len() < PAIRS_PER_CHUNK;
            for (k, val) in &chunk {
                f(k, val)?;
            }
            n += chunk.len() as u64;
            match chunk.last() {
                Some((k, _)) if !done => after = Some(KeyPath::of(k)),
                _ => return Ok(n),
            }
        }
    }
}

/// Pairs a snapshot's walk reads per hold of the engine.
const PAIRS_PER_CHUNK: usize = 1024;

const LOCK_FILE: &str = "LOCK";

impl Store {
    /// Opens the store in `dir` (created if missing), recovering from any crash: the store comes back at its last
    /// committed version with exactly its roots.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let lock = lock_dir(&dir, LOCK_FILE)?;
        let counters = Arc::new(Counters::default());
        let split = opts.memory_split();
        let block_cache = Arc::new(BlockCache::new(split.block_cache_bytes));

        // LSVPS: every complete index file; temporary files are flushes that never finished.
        let lsvps_dir = dir.join("lsvps");
        std::fs::create_dir_all(&lsvps_dir).map_err(|e| Error::io(&lsvps_dir, e))?;
        let mut numbered = Vec::new();
        for entry in std::fs::read_dir(&lsvps_dir).map_err(|e| Error::io(&lsvps_dir, e))? {
            let path = entry.map_err(|e| Error::io(&lsvps_dir, e))?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if name.ends_with(".tmp") {
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                continue;
            }
            if let Some(no) = name
                .strip_suffix(".idx")
                .and_then(|n| n.parse::<u64>().ok())
            {
                numbered.push((no, path));
            }
        }
        sync_dir(&lsvps_dir)?;
        numbered.sort();
        let mut files: Vec<Arc<IndexFile>> = Vec::new();
        for (i, (no, path)) in numbered.iter().enumerate() {
            // Flushes number their files 1, 2, 3, ... (a flush that never finished leaves only a `.tmp`, and its
            // number is used again), and each file holds the versions after the previous one's: a gap or an
            // overlap means a file was lost or put back, and its versions would be looked up in the wrong file.
            if *no != i as u64 + 1 {
                return Err(Error::corrupt(
                    &lsvps_dir,
                    0,
                    format!(
                        "index file {:06}.idx is missing (the next one present is {no:06}.idx)",
                        i + 1
                    ),
                ));
            }
            let file = IndexFile::open(path, *no, counters.clone(), block_cache.clone())?;
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
        let flushed = files.last().map(|f| f.meta().max_version);
        let replay_from = files.last().map_or(Position::START, |f| Position {
            file_id: f.meta().replay_from.0,
            offset: f.meta().replay_from.1,
        });

        let (roots_log, entries) = RootsLog::open(&dir, flushed)?;
        // A store written before the tombstone log existed has its table rebuilt from the whole value log: the
        // groups up to `flushed` only update the table, the later ones are replayed as usual.
        let (tombstone_log, tombstones, replay_from) = match TombstoneLog::open(&dir, flushed)? {
            Some((log, table)) => (Some(log), table, replay_from),
            None => (None, Tombstones::new(), Position::START),
        };
        let mut tries: BTreeMap<TrieId, TrieState> = BTreeMap::new();
        for (tid, (size, peaks)) in history_base::read(&dir)? {
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
            next_file_no: numbered.last().map_or(1, |(n, _)| n + 1),
            opts: opts.clone(),
            memtable_limit: split.memtable_bytes,
            counters: counters.clone(),
            files,
            mem: MemIndexTable::new(),
            mem_min_version: None,
            flushing: None,
            block_cache,
            page_cache,
            pages: HashMap::new(),
            tries,
            versions,
            roots_log,
            tombstones,
            tombstone_log,
        };

        // Replay the value log's complete commits after the flushed state.
        let mut pending: BTreeMap<TrieId, Vec<Write>> = BTreeMap::new();
        let mut pending_tombstones: Vec<TombstoneChange> = Vec::new();
        let vdls_opts = VdlsOptions {
            file_bytes: opts.vdls_file_bytes,
            sync: opts.sync,
        };
        let vdls = Vdls::open(
            &dir.join("vdls"),
            vdls_opts,
            counters,
            replay_from,
            |loc, rec| {
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
                            engine.tombstone_log =
                                Some(TombstoneLog::create(&dir, flushed, &engine.tombstones)?);
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
                        engine.apply(plan, end)?;
                    }
                }
                Ok(())
            },
        )?;
        if engine.tombstone_log.is_none() {
            engine.tombstone_log = Some(TombstoneLog::create(&dir, flushed, &engine.tombstones)?);
        }
        let read_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.read_threads.max(1))
            .thread_name(|i| format!("letus-read-{i}"))
            .build()
            .map_err(|e| Error::io(&dir, std::io::Error::other(e)))?;
        Ok(Store {
            dir: engine.dir.clone(),
            counters: engine.counters.clone(),
            shared: Arc::new(Shared {
                engine: RwLock::new(engine),
                vdls: vdls.reader().clone(),
                read_pool,
            }),
            vdls,
            staged: BTreeMap::new(),
            poisoned: false,
            _lock: lock,
        })
    }

    read_api!();

    fn view<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        self.shared.view(None, f)
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

    /// Every `(key, value)` of trie `tid` at `version`, in path order; returns the count.
    pub fn for_each_pair(
        &self,
        tid: TrieId,
        version: Version,
        f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        self.view(|v| v.for_each_pair(tid, version, f))
    }

    /// The engine for the writer: a panic in an earlier publish poisoned it, and the store must be reopened.
    fn engine_mut(&self) -> Result<RwLockWriteGuard<'_, Engine>> {
        self.shared.engine.write().map_err(|_| Error::Poisoned)
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

    /// Whether a failed commit left the store unusable until it is reopened. A commit that fails this way may
    /// already be durable (it failed after its Commit record was fsynced, e.g. in an index flush): reopening
    /// recovers exactly what is on disk. A commit refused before anything was written (a version not above the
    /// last one) does not poison.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
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
        let e = self.shared.engine();
        let o = &e.opts;
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
        }
        plan.tombstones = tombstones;
        // Written and fsynced without holding the engine: readers go on.
        let end = self.vdls.commit(version, &payload)?;
        // Publishing is memory work; readers wait for it only.
        let mut engine = self.engine_mut()?;
        engine.apply(plan, end)?;
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
        let mut base = history_base::read(&self.dir)?;
        base.insert(tid, (size, peaks));
        history_base::write(&self.dir, &base)?;
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
        engine.flush(end)?;
        engine.finish_flush()
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
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// What reads need, borrowed from the engine's read lock: the engine, the value log's read side, the read pool,
/// and the newest version the reads may see (the latest commit, or a snapshot's version).
struct View<'a> {
    engine: &'a Engine,
    vdls: &'a VdlsReader,
    read_pool: &'a rayon::ThreadPool,
    latest: Option<Version>,
}

impl View<'_> {
    /// `version` for an as-of read: a version above the view's latest reads the latest.
    fn at(&self, version: Version) -> Version {
        self.latest.map_or(version, |l| version.min(l))
    }

    /// `version` for an exact read: it must not be above the view's latest.
    fn exact(&self, version: Version) -> Result<Version> {
        match self.latest {
            Some(l) if version <= l => Ok(version),
            _ => Err(Error::VersionNotFound(version)),
        }
    }

    fn latest_version(&self) -> Option<Version> {
        self.latest
    }

    fn has_version(&self, version: Version) -> bool {
        self.exact(version).is_ok() && self.engine.versions.binary_search(&version).is_ok()
    }

    fn versions(&self) -> Vec<Version> {
        let n = self
            .latest
            .map_or(0, |l| self.engine.versions.partition_point(|v| *v <= l));
        self.engine.versions[..n].to_vec()
    }

    fn tries(&self) -> Vec<TrieId> {
        self.engine
            .tries
            .iter()
            .filter(|(_, t)| {
                t.versions
                    .first()
                    .is_some_and(|v| self.latest.is_some_and(|l| *v <= l))
            })
            .map(|(tid, _)| *tid)
            .collect()
    }

    /// The value of `key` in trie `tid` as of `version` (the newest commit at or below it).
    fn get(&self, tid: TrieId, version: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Counters::add(&self.engine.counters.gets, 1);
        let root = self.engine.root_page(tid, self.at(version))?;
        let path = KeyPath::of(key);
        match trie::get(self.engine, tid, &root, &path)? {
            Some(leaf) => Ok(Some(self.read_value(&leaf, Some(key))?.1)),
            None => Ok(None),
        }
    }

    /// The value of `key` at the latest version.
    fn get_latest(&self, tid: TrieId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.latest_version().ok_or(Error::UnknownTrie(tid))?;
        self.get(tid, v, key)
    }

    /// The values of many keys (a block's access list) at `version`, loading pages and values in parallel.
    fn get_many(
        &self,
        tid: TrieId,
        version: Version,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let root = self.engine.root_page(tid, self.at(version))?;
        Counters::add(&self.engine.counters.gets, keys.len() as u64);
        // Pages, then values, each fetched by many reads in flight at once on the read pool.
        let (leaves, records) = self.read_pool.install(|| -> Result<_> {
            let leaves: Vec<Option<Leaf>> = keys
                .par_iter()
                .map(|k| trie::get(self.engine, tid, &root, &KeyPath::of(k)))
                .collect::<Result<_>>()?;
            let locs: Vec<Location> = leaves.iter().flatten().map(|l| l.loc).collect();
            Ok((leaves, self.vdls.read_many(&locs)))
        })?;
        let mut records = records.into_iter();
        let mut out = Vec::with_capacity(keys.len());
        for (leaf, key) in leaves.iter().zip(keys) {
            match leaf {
                Some(l) => {
                    let rec = records
                        .next()
                        .ok_or_else(|| Error::corrupt(&self.engine.dir, 0, "missing record"))??;
                    out.push(Some(self.check_value(l, rec, Some(key))?.1));
                }
                None => out.push(None),
            }
        }
        Ok(out)
    }

    fn read_value(&self, leaf: &Leaf, key: Option<&[u8]>) -> Result<(Vec<u8>, Vec<u8>)> {
        let rec = self.vdls.read(leaf.loc)?;
        self.check_value(leaf, rec, key)
    }

    /// Checks that a value record is the one the leaf names: same key path, same value hash.
    fn check_value(
        &self,
        leaf: &Leaf,
        rec: Record,
        key: Option<&[u8]>,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let where_ = || self.engine.dir.join("vdls");
        match rec {
            Record::Put { key: k, value, .. } => {
                // With the key asked for, byte equality is the check (its path led to this leaf); without it the
                // record's key must hash to the leaf's path.
                let wrong = match key {
                    Some(key) => key != k.as_slice(),
                    None => KeyPath::of(&k) != leaf.path,
                };
                if wrong {
                    return Err(Error::corrupt(
                        where_(),
                        leaf.loc.offset,
                        "value record belongs to another key",
                    ));
                }
                if value_hash(&value) != leaf.value_hash {
                    return Err(Error::corrupt(
                        where_(),
                        leaf.loc.offset,
                        "value record does not match the hash in its leaf",
                    ));
                }
                Ok((k, value))
            }
            _ => Err(Error::corrupt(
                where_(),
                leaf.loc.offset,
                "leaf points at a record that is not a put",
            )),
        }
    }

    /// The value of `key` at `version` and its inclusion or exclusion proof (SPEC.md §5).
    fn get_proof(
        &self,
        tid: TrieId,
        version: Version,
        key: &[u8],
    ) -> Result<(Option<Vec<u8>>, Proof)> {
        let (mut values, proof) = self.get_multi_proof(tid, version, &[key])?;
        Ok((values.pop().flatten(), proof))
    }

    /// The values of `keys` at `version` and one multi-proof for all of them.
    fn get_multi_proof(
        &self,
        tid: TrieId,
        version: Version,
        keys: &[&[u8]],
    ) -> Result<(Vec<Option<Vec<u8>>>, Proof)> {
        // One key needs no read pool: handing a single read to other threads only adds latency.
        let values = match keys {
            [one] => vec![self.get(tid, version, one)?],
            _ => self.get_many(tid, version, keys)?,
        };
        let root = self.engine.root_page(tid, self.at(version))?;
        let mut paths: Vec<KeyPath> = keys.iter().map(|k| KeyPath::of(k)).collect();
        paths.sort();
        paths.dedup();
        let proof = trie::prove(self.engine, tid, &root, &paths)?;
        Ok((values, proof))
    }

    /// The digest of trie `tid` at exactly the committed `version`.
    fn digest(&self, tid: TrieId, version: Version) -> Result<Digest> {
        self.engine.digest(tid, self.exact(version)?)
    }

    /// Digests of every trie at the latest version.
    fn latest_digests(&self) -> Result<Vec<Digest>> {
        match self.latest_version() {
            Some(v) => self
                .tries()
                .into_iter()
                .map(|t| self.engine.digest(t, v))
                .collect(),
            None => Ok(Vec::new()),
        }
    }

    /// Proof that trie `tid`'s entry at `version` is in its history as of `at` (SPEC.md §8.2).
    fn history_inclusion_proof(
        &self,
        tid: TrieId,
        version: Version,
        at: Version,
    ) -> Result<InclusionProof> {
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let base = t.history.base();
        let i = base + self.engine.exact_index(t, self.exact(version)?)? as u64;
        let n = base + self.engine.exact_index(t, self.exact(at)?)? as u64 + 1;
        t.history
            .inclusion_proof(i, n)
            .ok_or(Error::VersionNotFound(version))
    }

    /// Proof that trie `tid`'s history at `from` is a prefix of its history at `to` (SPEC.md §8.3).
    fn history_consistency_proof(
        &self,
        tid: TrieId,
        from: Version,
        to: Version,
    ) -> Result<ConsistencyProof> {
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let base = t.history.base();
        let m = base + self.engine.exact_index(t, self.exact(from)?)? as u64 + 1;
        let n = base + self.engine.exact_index(t, self.exact(to)?)? as u64 + 1;
        t.history
            .consistency_proof(m, n)
            .ok_or(Error::VersionNotFound(from))
    }

    /// The frontier of trie `tid`'s history just before its entry at `version` (size and peaks, SPEC.md §8): what
    /// a store that imports the state of `version` needs ([`Store::set_history_base`]) so that its digests carry
    /// this store's history commitment.
    fn history_frontier(&self, tid: TrieId, version: Version) -> Result<Frontier> {
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = t.history.base() + self.engine.exact_index(t, self.exact(version)?)? as u64;
        t.history
            .frontier_at(i)
            .map_err(|e| Error::InvalidHistoryBase(e.to_string()))
    }

    /// Full verification: reads every value of trie `tid` at `version`, recomputes every node hash up to the root,
    /// checks every stored page hash on the way, and compares the root with `comm`. The first mismatch is reported
    /// as an error naming where it is.
    fn verify_full(&self, tid: TrieId, version: Version, comm: &Hash) -> Result<FullVerification> {
        self.verify_full_with_progress(tid, version, comm, &mut |_| {})
    }

    /// [`Store::verify_full`], calling `progress` with the number of keys verified so far (every 4096 keys and
    /// at the end).
    fn verify_full_with_progress(
        &self,
        tid: TrieId,
        version: Version,
        comm: &Hash,
        progress: &mut dyn FnMut(u64),
    ) -> Result<FullVerification> {
        let root = self.engine.root_page(tid, self.at(version))?;
        let mut stats = FullVerification {
            root: EMPTY,
            keys: 0,
            pages: 0,
        };
        let computed = self.verify_page(tid, &root, &mut stats, progress)?;
        progress(stats.keys);
        if computed != *comm {
            return Err(Error::Mismatch {
                at: format!("root of trie {tid} at version {version}"),
                expected: *comm,
                computed,
            });
        }
        stats.root = computed;
        Ok(stats)
    }

    /// Up to `max` pairs of trie `tid` at `version` whose paths are above `after`, in path order.
    fn pairs_after(
        &self,
        tid: TrieId,
        version: Version,
        after: Option<&KeyPath>,
        max: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let root = self.engine.root_page(tid, self.at(version))?;
        let mut out = Vec::new();
        trie::walk_after(self.engine, tid, &root, after, &mut |leaf| {
            out.push(self.read_value(leaf, None)?);
            Ok(out.len() < max)
        })?;
        Ok(out)
    }

    /// Recomputes the hash of a leaf from its value record.
    fn verify_leaf(
        &self,
        l: &Leaf,
        stats: &mut FullVerification,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Hash> {
        let rec = self.vdls.read(l.loc)?;
        let Record::Put { key, value, .. } = rec else {
            return Err(Error::corrupt(
                self.engine.dir.join("vdls"),
                l.loc.offset,
                "leaf points at a non-put record",
            ));
        };
        let path = KeyPath::of(&key);
        let computed = leaf_hash(&path, &value_hash(&value));
        if computed != l.hash() || path != l.path {
            return Err(Error::Mismatch {
                at: format!(
                    "leaf of key {} (value record at file {} offset {})",
                    letus_verify::hex::encode(&key),
                    l.loc.file_id,
                    l.loc.offset
                ),
                expected: l.hash(),
                computed,
            });
        }
        stats.keys += 1;
        if stats.keys.is_multiple_of(4096) {
            progress(stats.keys);
        }
        Ok(computed)
    }

    /// Recomputes the hash of `page` from the values below it, checking every child page's stored hash.
    fn verify_page(
        &self,
        tid: TrieId,
        page: &Page,
        stats: &mut FullVerification,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Hash> {
        stats.pages += 1;
        match page.root() {
            Root::Empty => return Ok(EMPTY),
            Root::Leaf(l) => return self.verify_leaf(l, stats, progress),
            Root::Branch => {}
        }
        let mut children = [EMPTY; 16];
        for (c, h) in children.iter_mut().enumerate() {
            let c = c as u8;
            *h = match page.child(c) {
                Child::Empty => EMPTY,
                Child::Leaf(l) => self.verify_leaf(l, stats, progress)?,
                Child::Branch(_) => {
                    let mut grand = [EMPTY; 16];
                    for (slot, cell) in page.grandchildren(c) {
                        let (_, g) = trie::slot_nibbles(*slot);
                        grand[usize::from(g)] = match cell {
                            Cell::Leaf(l) => self.verify_leaf(l, stats, progress)?,
                            Cell::Page { hash, version } => {
                                let id = page.id.child(c, g);
                                let child = self.engine.load(tid, id, *version)?;
                                let computed = self.verify_page(tid, &child, stats, progress)?;
                                if computed != *hash {
                                    return Err(Error::Mismatch {
                                        at: format!(
                                            "page at depth {} (prefix {}) version {version}",
                                            id.depth,
                                            letus_verify::hex::encode(
                                                &id.prefix[..usize::from(id.depth) / 2]
                                            )
                                        ),
                                        expected: *hash,
                                        computed,
                                    });
                                }
                                computed
                            }
                        };
                    }
                    letus_verify::fold::fold(&grand)
                }
            };
        }
        Ok(letus_verify::fold::fold(&children))
    }

    /// Calls `f` with every `(key, value)` of trie `tid` at `version`, in path order (the order of a state export).
    fn for_each_pair(
        &self,
        tid: TrieId,
        version: Version,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let root = self.engine.root_page(tid, self.at(version))?;
        let mut n = 0u64;
        trie::walk(self.engine, tid, &root, &mut |leaf| {
            let (k, v) = self.read_value(leaf, None)?;
            n += 1;
            f(&k, &v)
        })?;
        Ok(n)
    }

    /// The writes of `key` in trie `tid` (newest first): every Put, and every Delete of the key while it existed,
    /// walking the value log's back-links from the key's leaf at the latest version, or from its Delete record
    /// when it is deleted now. A Put of the value the key already had is a write and is listed; a delete of an
    /// absent key writes nothing and is not.
    ///
    /// At most `limit` entries. `before` continues an earlier answer: pass its [`HistoryPage::next`] to get the
    /// entries older than the last one it returned. Anything else that is not the version of one of the key's
    /// entries is [`Error::InvalidCursor`].
    fn history(
        &self,
        tid: TrieId,
        key: &[u8],
        before: Option<Version>,
        limit: usize,
    ) -> Result<HistoryPage> {
        let path = KeyPath::of(key);
        let start = match before {
            // From the key's state at the engine's newest version; a snapshot pinned below it skips the entries
            // written after its version (few: only those since the snapshot was taken).
            None => {
                let mut start = match self.engine.latest_leaf(tid, &path)? {
                    Some(leaf) => Some(leaf.loc),
                    None => self.engine.tombstones.get(&(tid, path)).copied(),
                };
                while let Some(loc) = start {
                    let rec = self.vdls.read(loc)?;
                    if self.latest.is_some_and(|l| rec.version() <= l) {
                        break;
                    }
                    start = rec.prev();
                }
                start
            }
            Some(u) => self.history_link_before(
                tid,
                key,
                &path,
                self.exact(u).map_err(|_| Error::InvalidCursor(u))?,
            )?,
        };
        let Some(start) = start else {
            return Ok(HistoryPage {
                entries: Vec::new(),
                next: None,
            });
        };
        let recs = self.vdls.history(start, limit)?;
        let more = recs.last().is_some_and(|(_, r)| r.prev().is_some());
        let mut entries = Vec::with_capacity(recs.len());
        for (loc, rec) in recs {
            match rec {
                Record::Put {
                    version,
                    key: k,
                    value,
                    ..
                } if k == key => entries.push(HistoryEntry {
                    version,
                    value: Some(value),
                }),
                Record::Delete {
                    version, key: k, ..
                } if k == key => entries.push(HistoryEntry {
                    version,
                    value: None,
                }),
                _ => {
                    return Err(Error::corrupt(
                        self.engine.dir.join("vdls"),
                        loc.offset,
                        "history link leads to another key",
                    ))
                }
            }
        }
        let next = if more {
            entries.last().map(|e| e.version)
        } else {
            None
        };
        Ok(HistoryPage { entries, next })
    }

    /// The record before `key`'s entry at version `u`, found from the tries (never from anything the caller
    /// supplies but `u`): a Put at `u` is the leaf at `u` and names its predecessor; a Delete at `u` is the key
    /// being absent at `u` and present at the commit before, whose leaf is exactly the Delete's predecessor.
    fn history_link_before(
        &self,
        tid: TrieId,
        key: &[u8],
        path: &KeyPath,
        u: Version,
    ) -> Result<Option<Location>> {
        let invalid = || Error::InvalidCursor(u);
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = self.engine.exact_index(t, u).map_err(|_| invalid())?;
        let leaf_at = |v: Version| -> Result<Option<Leaf>> {
            let root = self.engine.root_page(tid, v)?;
            trie::get(self.engine, tid, &root, path)
        };
        match leaf_at(u)? {
            Some(leaf) if leaf.version == u => {
                let rec = self.vdls.read(leaf.loc)?;
                let prev = rec.prev();
                self.check_value(&leaf, rec, Some(key))?;
                Ok(prev)
            }
            Some(_) => Err(invalid()),
            None => {
                let before = i.checked_sub(1).ok_or_else(invalid)?;
                match leaf_at(t.versions[before])? {
                    Some(leaf) => Ok(Some(leaf.loc)),
                    None => Err(invalid()),
                }
            }
        }
    }
}

impl PageSource for Engine {
    fn load(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>> {
        let key = (tid, id, version);
        if let Some(p) = self.page_cache.get(&key) {
            Counters::add(&self.counters.page_cache_hits, 1);
            return Ok(p);
        }
        Counters::add(&self.counters.page_cache_misses, 1);
        let page = Arc::new(self.read_page(tid, id, version)?);
        self.page_cache.insert(key, page.clone());
        Ok(page)
    }

    fn take(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>> {
        if let Some((_, p)) = self.page_cache.remove(&(tid, id, version)) {
            Counters::add(&self.counters.page_cache_hits, 1);
            return Ok(p);
        }
        Counters::add(&self.counters.page_cache_misses, 1);
        Ok(Arc::new(self.read_page(tid, id, version)?))
    }

    fn give_back(&self, tid: TrieId, page: Arc<Page>) {
        self.page_cache.insert((tid, page.id, page.version), page);
    }
}

impl Engine {
    /// Where records of `version` live: an index file, the table being flushed, or the MemIndexTable. Every
    /// record of index file `k` has its version in `(max_version of file k-1, max_version of file k]`, the frozen
    /// table's come after the last file's, the MemIndexTable's after those.
    fn segment(&self, version: Version) -> Segment<'_> {
        let i = self
            .files
            .partition_point(|f| f.meta().max_version < version);
        match (self.files.get(i), &self.flushing) {
            (Some(f), _) => Segment::File(f),
            (None, Some(fl)) if version <= fl.max_version => Segment::Table(&fl.table),
            (None, _) => Segment::Table(&self.mem),
        }
    }

    fn floor(&self, key: &PageKey) -> Result<Option<(PageKey, Vec<u8>, PathBuf)>> {
        match self.segment(key.version) {
            Segment::File(f) => Ok(f.floor(key)?.map(|(k, v)| (k, v, f.path().to_path_buf()))),
            Segment::Table(t) => Ok(t
                .floor(key)
                .map(|(k, v)| (k, v.to_vec(), self.dir.join("lsvps/memtable")))),
        }
    }

    fn exact(&self, key: &PageKey) -> Result<Option<(Vec<u8>, PathBuf)>> {
        match self.segment(key.version) {
            Segment::File(f) => Ok(f.get(key)?.map(|v| (v, f.path().to_path_buf()))),
            Segment::Table(t) => Ok(t
                .get(key)
                .map(|v| (v.to_vec(), self.dir.join("lsvps/memtable")))),
        }
    }

    /// Loads page `id` at exactly `version`: the newest record at or below it, then back along the DeltaPage chain
    /// to a BasePage, replaying entries up to `version`.
    fn read_page(&self, tid: TrieId, id: PageId, version: Version) -> Result<Page> {
        let probe = PageKey::new(tid, id, version, PageKind::Delta);
        let (head_key, bytes, path) = self.floor(&probe)?.ok_or_else(|| {
            Error::corrupt(
                self.dir.join("lsvps"),
                0,
                format!("page {id:?} of trie {tid} has no record at version {version}"),
            )
        })?;
        let bad = |path: &Path, why: &str| {
            Error::corrupt(path, 0, format!("page record {id:?} of trie {tid}: {why}"))
        };
        let head_rec = PageRecord::decode(&bytes).map_err(|w| bad(&path, w))?;
        let mut head = match &head_rec {
            PageRecord::Base { since_base, .. } => Head {
                key_version: head_key.version,
                kind: PageKind::Base,
                since_base: *since_base,
                delta_updates: 0,
                chain: 1,
            },
            PageRecord::Delta {
                since_base,
                entries,
                ..
            } => Head {
                key_version: head_key.version,
                kind: PageKind::Delta,
                since_base: *since_base,
                delta_updates: entries.iter().map(|(_, c)| c.len() as u32).sum(),
                chain: 1,
            },
        };
        // Walk back to the base; the writer bounds the chain (Tb updates, max_delta_chain records), and a cycle
        // would be corruption.
        let mut chain = vec![head_rec];
        let mut guard = 0u32;
        let base_slots = loop {
            let Some(last) = chain.last() else {
                return Err(bad(&path, "empty chain"));
            };
            let prev = match last {
                PageRecord::Base { slots, .. } => break slots.clone(),
                PageRecord::Delta { prev: Some(p), .. } => *p,
                PageRecord::Delta { prev: None, .. } => {
                    return Err(bad(&path, "delta page without a predecessor"))
                }
            };
            guard += 1;
            if guard > 1_000_000 {
                return Err(bad(&path, "delta chain does not end"));
            }
            let key = PageKey::new(tid, id, prev.0, prev.1);
            let (b, p) = self
                .exact(&key)?
                .ok_or_else(|| bad(&path, "delta page points at a missing record"))?;
            chain.push(PageRecord::decode(&b).map_err(|w| bad(&p, w))?);
        };
        let mut slots: Vec<(page::SlotNo, Cell)> = base_slots;
        let mut newest = match chain.last() {
            Some(PageRecord::Base { version, .. }) => *version,
            _ => 0,
        };
        for rec in chain.iter().rev() {
            if let PageRecord::Delta { entries, .. } = rec {
                for (v, changes) in entries {
                    if *v <= version {
                        page::apply(&mut slots, changes);
                        newest = newest.max(*v);
                    }
                }
            }
        }
        if newest != version {
            return Err(bad(
                &path,
                &format!("records reach version {newest}, the parent refers to {version}"),
            ));
        }
        head.chain = u32::try_from(chain.len()).unwrap_or(u32::MAX);
        Page::build(id, version, Some(head), slots).map_err(|w| bad(&path, w))
    }

    fn root_page(&self, tid: TrieId, version: Version) -> Result<Arc<Page>> {
        if self.versions.last().is_none_or(|l| *l < version) {
            return Err(Error::VersionNotFound(version));
        }
        let t = self.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = t.index_at(version).ok_or(Error::UnknownTrie(tid))?;
        let pv = *t.page_versions.get(i).ok_or(Error::UnknownTrie(tid))?;
        self.load(tid, PageId::ROOT, pv)
    }

    fn latest_leaf(&self, tid: TrieId, path: &KeyPath) -> Result<Option<Leaf>> {
        let Some(&v) = self.versions.last() else {
            return Ok(None);
        };
        if !self.tries.contains_key(&tid) {
            return Ok(None);
        }
        let root = self.root_page(tid, v)?;
        trie::get(self, tid, &root, path)
    }

    fn exact_index(&self, t: &TrieState, version: Version) -> Result<usize> {
        t.versions
            .binary_search(&version)
            .map_err(|_| Error::VersionNotFound(version))
    }

    fn digest(&self, tid: TrieId, version: Version) -> Result<Digest> {
        let t = self.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = self.exact_index(t, version)?;
        Ok(Digest {
            tid,
            version,
            root: t.roots[i],
            history_len: t.history.base() + i as u64 + 1,
            history_root: t.history_roots[i],
        })
    }

    /// Computes the trie updates of a commit without publishing anything.
    fn plan(&self, version: Version, writes: &BTreeMap<TrieId, Vec<Write>>) -> Result<Plan> {
        let mut tries = Vec::new();
        for (&tid, ws) in writes {
            if ws.is_empty() {
                continue;
            }
            let root = match self.tries.get(&tid).and_then(|t| t.page_versions.last()) {
                Some(&pv) => Some(self.take(tid, PageId::ROOT, pv)?),
                None => None,
            };
            tries.push((tid, trie::update(self, tid, root, ws, version)?));
        }
        Ok(Plan {
            version,
            tries,
            tombstones: Vec::new(),
        })
    }

    /// The Commit record's payload: every trie's root after the plan. Replay recomputes and compares it.
    fn payload(&self, plan: &Plan) -> Vec<u8> {
        let mut roots: BTreeMap<TrieId, Hash> = self
            .tries
            .iter()
            .filter_map(|(t, s)| s.roots.last().map(|r| (*t, *r)))
            .collect();
        for (tid, u) in &plan.tries {
            roots.insert(*tid, u.root);
        }
        let mut out = Vec::with_capacity(4 + roots.len() * 36);
        out.extend_from_slice(&(roots.len() as u32).to_le_bytes());
        for (tid, root) in roots {
            out.extend_from_slice(&tid.to_le_bytes());
            out.extend_from_slice(&root.0);
        }
        out
    }

    /// Publishes a durable commit: page records, caches, roots, history; flushes when the MemIndexTable is full.
    fn apply(&mut self, plan: Plan, end: Position) -> Result<()> {
        self.poll_flush()?;
        let version = plan.version;
        let mut new_roots: BTreeMap<TrieId, (Hash, Version)> = BTreeMap::new();
        for (tid, u) in plan.tries {
            let mut root_version = None;
            for pw in u.pages {
                let is_root = pw.new.id == PageId::ROOT;
                let v = self.persist_page(tid, pw, version)?;
                if is_root {
                    root_version = Some(v);
                }
            }
            // An unchanged root page keeps its version.
            let pv = match root_version {
                Some(v) => v,
                None => self
                    .tries
                    .get(&tid)
                    .and_then(|t| t.page_versions.last().copied())
                    .unwrap_or(version),
            };
            new_roots.insert(tid, (u.root, pv));
        }
        for tid in new_roots.keys() {
            self.tries.entry(*tid).or_default();
        }
        let tids: Vec<TrieId> = self.tries.keys().copied().collect();
        for tid in tids {
            let (root, pv) = match new_roots.get(&tid) {
                Some(x) => *x,
                None => {
                    let t = &self.tries[&tid];
                    match (t.roots.last(), t.page_versions.last()) {
                        (Some(r), Some(p)) => (*r, *p),
                        _ => continue,
                    }
                }
            };
            if let Some(t) = self.tries.get_mut(&tid) {
                t.push(tid, version, root, pv);
            }
            self.roots_log.push(&RootEntry {
                version,
                tid,
                root,
                page_version: pv,
            });
        }
        self.versions.push(version);
        let mut n = self.roots_log.write()?;
        apply_tombstones(
            &mut self.tombstones,
            self.tombstone_log.as_mut(),
            version,
            plan.tombstones,
        );
        if let Some(log) = &mut self.tombstone_log {
            n += log.write()?;
        }
        Counters::add(&self.counters.bytes_written, n);
        if self.mem.bytes() >= self.memtable_limit {
            self.flush(end)?;
        }
        Ok(())
    }

    /// Stores one page write as a BasePage or DeltaPage in the MemIndexTable; returns the page's version after
    /// it (the old version when nothing changed).
    fn persist_page(&mut self, tid: TrieId, pw: PageWrite, version: Version) -> Result<Version> {
        let PageWrite {
            old,
            new: mut page,
            changes,
        } = pw;
        if let Some(old) = &old {
            if changes.is_empty() {
                return Ok(old.version);
            }
        }
        let id = page.id;
        let key = (tid, id);
        // A page that did not exist before (or reappears after collapsing) always starts with a BasePage: a delta
        // must apply to exactly the previous state of the same page.
        let previous = self.pages.remove(&key);
        let state = match &old {
            None => None,
            Some(old) => previous.or_else(|| {
                old.head.map(|h| PageState {
                    last: (h.key_version, h.kind),
                    since_base: h.since_base,
                    chain: h.chain,
                    active: None,
                })
            }),
        };
        let n = changes.len() as u32;
        let head;
        // A delta continues the active DeltaPage while it has room for Td updates, or starts a new one while the
        // chain has room; otherwise (and for a new page, or Tb updates after the last BasePage) a BasePage.
        let delta = match state {
            Some(mut s) if s.since_base + n < self.opts.base_threshold => match s.active.take() {
                Some(mut a) if a.updates + n <= self.opts.delta_threshold => {
                    a.updates += n;
                    Some((s, a, None))
                }
                _ if s.chain <= self.opts.max_delta_chain => {
                    let a = ActiveDelta {
                        first_version: version,
                        updates: n,
                    };
                    let prev = Some(s.last);
                    s.chain += 1;
                    Some((s, a, Some(prev)))
                }
                _ => None,
            },
            _ => None,
        };
        let new_state = match delta {
            Some((s, active, start)) => {
                let since = s.since_base + n;
                let key = PageKey::new(tid, id, active.first_version, PageKind::Delta);
                let bytes = match start {
                    Some(prev) => {
                        page::encode_delta(active.first_version, since, prev, &[(version, changes)])
                    }
                    None => {
                        let current = self.mem.get(&key).ok_or_else(|| {
                            Error::corrupt(
                                self.dir.join("lsvps/memtable"),
                                0,
                                "the growing DeltaPage is missing",
                            )
                        })?;
                        page::extend_delta(&current, since, version, &changes)
                            .map_err(|w| Error::corrupt(self.dir.join("lsvps/memtable"), 0, w))?
                    }
                };
                self.mem_insert(key, bytes, version);
                head = Head {
                    key_version: active.first_version,
                    kind: PageKind::Delta,
                    since_base: since,
                    delta_updates: active.updates,
                    chain: s.chain,
                };
                PageState {
                    last: (active.first_version, PageKind::Delta),
                    since_base: since,
                    chain: s.chain,
                    active: Some(active),
                }
            }
            // A new page, or Tb updates since the last checkpoint: write a BasePage.
            _ => {
                self.mem_insert(
                    PageKey::new(tid, id, version, PageKind::Base),
                    page::encode_base(version, 0, page.cells()),
                    version,
                );
                head = Head {
                    key_version: version,
                    kind: PageKind::Base,
                    since_base: 0,
                    delta_updates: 0,
                    chain: 1,
                };
                PageState {
                    last: (version, PageKind::Base),
                    since_base: 0,
                    chain: 1,
                    active: None,
                }
            }
        };
        self.pages.insert(key, new_state);
        page.head = Some(head);
        // The superseded version is rarely read again (only by historical reads, which reload it); keeping the cache
        // for latest versions is what makes the next commits and reads cheap.
        if let Some(old) = &old {
            self.page_cache.remove(&(tid, id, old.version));
        }
        self.page_cache.insert((tid, id, version), Arc::new(page));
        Ok(version)
    }

    fn mem_insert(&mut self, key: PageKey, bytes: Vec<u8>, version: Version) {
        self.mem_min_version = Some(self.mem_min_version.map_or(version, |m| m.min(version)));
        self.mem.insert(key, bytes);
    }

    /// Freezes the MemIndexTable and writes it as index file `next_file_no` on a background thread: roots log
    /// fsync (here, before anything else), then, in the background, write + fsync a temporary file, rename,
    /// directory fsync. Every active DeltaPage is frozen by this. Until the file is installed, reads find its records
    /// in the frozen table; a previous flush still running is waited for first, so at most one runs (the commit
    /// that fills a second MemIndexTable before the first is written waits: backpressure, not unbounded memory).
    fn flush(&mut self, end: Position) -> Result<()> {
        self.finish_flush()?;
        let (Some(min), Some(&max)) = (self.mem_min_version, self.versions.last()) else {
            return Ok(());
        };
        let mut n = self.roots_log.sync()?;
        if let Some(log) = &mut self.tombstone_log {
            n += log.sync_flushed(max)?;
        }
        Counters::add(&self.counters.bytes_written, n);
        let table = Arc::new(std::mem::take(&mut self.mem));
        self.mem_min_version = None;
        self.pages.clear();
        let no = self.next_file_no;
        self.next_file_no += 1;
        let meta = FileMeta {
            min_version: min,
            max_version: max,
            replay_from: (end.file_id, end.offset),
            records: table.len() as u64,
        };
        let dir = self.dir.join("lsvps");
        let (counters, block_cache, frozen) = (
            self.counters.clone(),
            self.block_cache.clone(),
            table.clone(),
        );
        let handle = std::thread::Builder::new()
            .name(format!("letus-flush-{no}"))
            .spawn(move || write_index_file(&dir, no, &frozen, &meta, counters, block_cache))
            .map_err(|e| Error::io(&self.dir, e))?;
        self.flushing = Some(Flushing {
            table,
            max_version: max,
            handle,
        });
        Ok(())
    }

    /// Waits for the background flush, if any, and installs its index file.
    fn finish_flush(&mut self) -> Result<()> {
        let Some(f) = self.flushing.take() else {
            return Ok(());
        };
        let file = f.handle.join().map_err(|_| {
            Error::io(
                &self.dir,
                std::io::Error::other("the flush thread panicked"),
            )
        })??;
        self.files.push(Arc::new(file));
        Ok(())
    }

    /// Installs the background flush's index file if it is done (never waits).
    fn poll_flush(&mut self) -> Result<()> {
        if self
            .flushing
            .as_ref()
            .is_some_and(|f| f.handle.is_finished())
        {
            self.finish_flush()?;
        }
        Ok(())
    }
}

/// Writes `table` as index file `no` in `dir`: a temporary file written and fsynced, renamed, the directory
/// fsynced; then opens it. A crash before the rename leaves a `.tmp` file that the next open deletes; the value
/// log still holds everything the file would have (its `replay_from` is not yet the newest).
fn write_index_file(
    dir: &Path,
    no: u64,
    table: &MemIndexTable,
    meta: &FileMeta,
    counters: Arc<Counters>,
    block_cache: Arc<BlockCache>,
) -> Result<IndexFile> {
    let tmp = dir.join(format!("{no:06}.idx.tmp"));
    let fin = dir.join(format!("{no:06}.idx"));
    let mut w = IndexFileWriter::create(&tmp, counters.clone())?;
    table.write_to(&mut w)?;
    w.finish(meta)?;
    std::fs::rename(&tmp, &fin).map_err(|e| Error::io(&fin, e))?;
    sync_dir(dir)?;
    IndexFile::open(&fin, no, counters, block_cache)
}

/// A MemIndexTable being written as an index file by a background thread.
struct Flushing {
    /// The frozen table, read by lookups until the file is installed.
    table: Arc<MemIndexTable>,
    /// The highest version its records may have.
    max_version: Version,
    handle: std::thread::JoinHandle<Result<IndexFile>>,
}

impl Drop for Engine {
    /// A store dropped while a flush runs waits for it: the directory lock is released with the store, and another
    /// opener must not find a half-written temporary file it would delete under the writer.
    fn drop(&mut self) {
        if let Some(f) = self.flushing.take() {
            let _ = f.handle.join();
        }
    }
}
