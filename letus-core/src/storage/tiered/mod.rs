//! [`Tiered`]: a [`Storage`] that keeps a store's sealed files on a hot disk, a warm directory or an object store
//! (the cold tier), moves them between tiers in the background, and serves every read wherever the file is.
//!
//! What is tiered: the immutable files of the layout (FORMAT.md): LSVPS index files (`*.idx`, immutable once
//! named), value-log files (`*.vdl`) and block-store segments (`*.seg`) other than the last of their directory
//! (only the last is ever written). Everything else (the logs, the lock, temporary files) stays on the hot disk
//! and passes straight through to it.
//!
//! Where a file is: the manifest (`manifest.rs`) is the one authority. A file is moved by copying it, verifying
//! the copy's CRC-32 against the source's, switching the manifest durably, and only then deleting the source (see
//! `mover.rs` for each crash point). Open handles follow a moved file: every handle reads through its file's entry,
//! which names the current place, and a move closes the handles' descriptors of the old place.
//!
//! The cold tier is read by ranged GETs of fixed-size blocks behind a bounded cache (`cold.rs`). Nothing is polled:
//! the mover runs only when [`Tiered::note_version`] reports new versions, so an idle store sends no request.

mod cold;
mod manifest;
mod mover;
mod warm_owner;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};

pub use cold::{is_cold_unavailable, ColdCounters, ColdStore, ColdUnavailable};
pub use manifest::{FileRecord, Manifest, Tier, MANIFEST_NAME};
pub use mover::TierPolicy;

use super::{EntryKind, FileRef, LockGuard, OpenMode, SharedStorage, Storage, StorageFile};
use crate::error::{Error, Result};
use cold::ColdTier;

/// How a [`Tiered`] storage is set up.
#[derive(Clone)]
pub struct TierConfig {
    /// The hot root: the directory holding the store (a node's data directory). Files outside it pass through.
    pub root: PathBuf,
    /// The hot disk (the local file system by default).
    pub hot: SharedStorage,
    /// The warm tier's directory, if there is one.
    pub warm_dir: Option<PathBuf>,
    /// The cold tier's object store, if there is one.
    pub cold: Option<Arc<dyn ColdStore>>,
    /// The prefix of every object this store writes (one writer per prefix).
    pub cold_prefix: String,
    /// Bytes of cold blocks cached in memory.
    pub cold_cache_bytes: u64,
    /// Size of one ranged GET (the cache's block).
    pub cold_block_bytes: u64,
    /// When files move.
    pub policy: TierPolicy,
    /// The byte ranges of a file that stay on the hot disk when it goes cold (kept in `tier-pins/` under the hot
    /// root and read from there): by default, for index files, their top-of-trie page records and their index
    /// ([`crate::lsvps::tier_pins`]), which nearly every read of an old version needs.
    pub pins: Option<PinFn>,
}

/// Given the file name of an index file about to move to the cold tier (`000012.idx`), replaces it with another
/// file of the same directory and returns that one's name (which then moves instead), or `None` to move the file
/// as it is. The store's [`crate::Reader::cold_preparer`] consolidates the file there.
pub type PrepareFn = Arc<dyn Fn(&str) -> Result<Option<String>> + Send + Sync>;

/// Given a file's storage and path, the `(start, len)` ranges of it to keep on the hot disk when it goes cold.
pub type PinFn = Arc<dyn Fn(&SharedStorage, &Path) -> Result<Vec<(u64, u64)>> + Send + Sync>;

/// The pins of the engine's files: of an index file (`*.idx`) its index blocks, lookup block and footer, and the
/// records of pages shallower than `depth` (0: none; 2: the root page; 4: the root and the pages below it); of a
/// value-log file (`*.vdl`) its header, which opening the store reads. Other files: none.
pub fn index_pins(depth: u8) -> PinFn {
    Arc::new(move |fs: &SharedStorage, path: &Path| {
        match path.extension().and_then(|e| e.to_str()) {
            Some("idx") => crate::lsvps::tier_pins(fs, path, depth),
            Some("vdl") => {
                let len = fs
                    .open(path, OpenMode::Read)
                    .and_then(|f| f.size())
                    .map_err(|e| io_err(path, e))?;
                Ok(vec![(0, len.min(crate::vdls::HEADER_LEN))])
            }
            _ => Ok(Vec::new()),
        }
    })
}

/// The lock file of a hot root's tiers.
const LOCK_NAME: &str = "tiers.lock";

/// `p` with symlinks resolved where it exists (as given otherwise).
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Whether `name` is one a tiered file or its temporary copy may have: the only names recovery ever deletes in
/// the warm directory (anything else there is not the store's).
fn tier_owned_name(name: &str) -> bool {
    kind_of(name).is_some()
        || name
            .strip_suffix(".tmp")
            .is_some_and(|n| kind_of(n).is_some())
}

/// The directory under the hot root that holds the pinned ranges of cold files (`tier-pins/<path of the file>`).
pub const PIN_DIR: &str = "tier-pins";

impl fmt::Debug for TierConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierConfig")
            .field("root", &self.root)
            .field("warm_dir", &self.warm_dir)
            .field("cold", &self.cold.as_ref().map(|c| c.describe()))
            .field("cold_prefix", &self.cold_prefix)
            .field("cold_cache_bytes", &self.cold_cache_bytes)
            .field("cold_block_bytes", &self.cold_block_bytes)
            .field("policy", &self.policy)
            .field("pins", &self.pins.is_some())
            .finish()
    }
}

impl TierConfig {
    /// A configuration for hot root `root`: no warm or cold tier yet, a 64 MiB cold cache of 256 KiB blocks.
    pub fn new(root: impl Into<PathBuf>) -> TierConfig {
        TierConfig {
            root: root.into(),
            hot: super::local(),
            warm_dir: None,
            cold: None,
            cold_prefix: "letus".into(),
            cold_cache_bytes: 64 << 20,
            cold_block_bytes: 256 << 10,
            policy: TierPolicy::default(),
            pins: Some(index_pins(crate::lsvps::TIER_PIN_DEPTH)),
        }
    }
}

/// The kinds of file that are tiered, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `NNNNNN.idx`: sealed once it has this name.
    Index,
    /// `NNNNNN.vdl` / `NNNNNN.seg`: sealed once a higher number exists in its directory.
    Numbered,
}

fn kind_of(name: &str) -> Option<(Kind, u64)> {
    if let Some((n, _)) = crate::lsvps::parse_index_file_name(name) {
        return Some((Kind::Index, n));
    }
    let (stem, ext) = name.rsplit_once('.')?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = stem.parse().ok()?;
    match ext {
        "idx" => Some((Kind::Index, n)),
        "vdl" | "seg" => Some((Kind::Numbered, n)),
        _ => None,
    }
}

/// Where a tiered file's bytes are now.
#[derive(Clone, Debug)]
enum Place {
    Hot,
    Warm,
    /// In the object store as `key`; `pins` are the ranges `(start, len, offset in the pin file)` kept locally.
    Cold {
        key: String,
        size: u64,
        pins: Arc<[(u64, u64, u64)]>,
    },
}

/// A cold file's pinned ranges with their offsets in its pin file (the ranges' bytes back to back).
fn pin_table(pins: &[(u64, u64)]) -> Arc<[(u64, u64, u64)]> {
    let mut at = 0;
    pins.iter()
        .map(|&(start, len)| {
            let row = (start, len, at);
            at += len;
            row
        })
        .collect()
}

/// One tiered file: its place, and the open handles that must let go of a place it leaves.
#[derive(Debug)]
struct Entry {
    /// Cache id of its cold blocks (never reused).
    id: u64,
    place: RwLock<Place>,
    handles: Mutex<Vec<Weak<Slot>>>,
    /// Reads since the mover last looked (its heat).
    reads: AtomicU64,
}

/// A handle's descriptor of its file in the hot or warm tier (opened lazily, closed by a move).
#[derive(Debug, Default)]
struct Slot(RwLock<Option<FileRef>>);

/// Counters of a [`Tiered`] storage.
#[derive(Debug, Default)]
pub struct TierCounters {
    /// Files moved, per destination tier (warm, cold).
    pub moved_warm: AtomicU64,
    /// Files moved to the cold tier.
    pub moved_cold: AtomicU64,
    /// Bytes moved.
    pub moved_bytes: AtomicU64,
    /// Moves that failed (and are retried later).
    pub move_failures: AtomicU64,
    /// Reads served by each tier (hot, warm, cold).
    pub reads: [AtomicU64; 3],
    /// Reads of cold files served from their pinned ranges on the hot disk.
    pub pinned_reads: AtomicU64,
}

/// Tests: what a pass calls after each file.
#[cfg(test)]
type AfterMove = Box<dyn Fn(&Inner) + Send>;

pub(crate) struct Inner {
    /// The hot root's tiers lock, held for the instance's life.
    _lock: LockGuard,
    /// The warm directory's lock, held for the instance's life (`warm_owner.rs`).
    _warm_lock: Option<LockGuard>,
    cfg: TierConfig,
    warm: SharedStorage,
    cold: Option<ColdTier>,
    manifest: Mutex<Manifest>,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    next_id: AtomicU64,
    counters: TierCounters,
    /// The version clock the mover waits on (shared with it: it holds `Inner` only weakly).
    signal: Arc<Signal>,
    /// Serializes moves (the mover thread, [`Tiered::migrate_now`]).
    moving: Mutex<()>,
    /// Serializes passes (the mover thread, [`Tiered::migrate_now`]): a pass takes `moving` one file at a time, so
    /// that the engine's removal of a moved file waits for one move, not a whole pass.
    passes: Mutex<()>,
    /// The thread holding `moving` during a pass: the engine's removal of a warm file while the pass consolidates
    /// it (on that thread, through [`PrepareFn`]) must not wait for the pass.
    moving_thread: Mutex<Option<std::thread::ThreadId>>,
    last_error: Mutex<Option<String>>,
    /// Called before an index file moves to the cold tier ([`Tiered::set_before_cold`]).
    before_cold: Mutex<Option<PrepareFn>>,
    /// Tests: called by a pass after each file it moved or tried to.
    #[cfg(test)]
    after_each_move: Mutex<Option<AfterMove>>,
}

/// The newest version reported and whether the mover should stop, and the condition variable it waits on.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    clock: Mutex<(u64, bool)>,
    wake: Condvar,
}

impl Signal {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, bool)> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A tiered storage; clone it freely (clones share everything). Pass it as the store's
/// [`crate::Options::storage`] (and a node's block store's).
#[derive(Clone)]
pub struct Tiered {
    inner: Arc<Inner>,
    mover: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl fmt::Debug for Tiered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tiered")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

/// A file's place in a [`TierStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierUse {
    /// Files.
    pub files: u64,
    /// Bytes.
    pub bytes: u64,
}

/// What [`Tiered::status`] reports.
#[derive(Clone, Debug)]
pub struct TierStatus {
    /// Sealed files and their bytes per tier (hot, warm, cold).
    pub tiers: [TierUse; 3],
    /// Bytes on the hot disk that are not tiered (active files, logs).
    pub hot_other_bytes: u64,
    /// Files the policy wants moved that are not yet.
    pub backlog: TierUse,
    /// Moves done and failed.
    pub moved_files: u64,
    /// Bytes moved.
    pub moved_bytes: u64,
    /// Moves that failed.
    pub move_failures: u64,
    /// Reads served per tier.
    pub reads: [u64; 3],
    /// Reads of cold files served by their pinned ranges on the hot disk (part of `reads[2]`).
    pub pinned_reads: u64,
    /// Object-store requests: GETs, PUTs, DELETEs, LISTs, errors.
    pub cold_requests: [u64; 5],
    /// Bytes received from and sent to the object store.
    pub cold_bytes: [u64; 2],
    /// Cold block cache: hits, misses, bytes held.
    pub cold_cache: [u64; 3],
    /// The object-store epoch held, and whether another writer fenced this one.
    pub epoch: u64,
    /// Fenced by another writer.
    pub fenced: bool,
    /// Where the cold tier is (no credentials).
    pub cold_store: Option<String>,
    /// The newest version reported to the mover.
    pub version: u64,
    /// The last move failure.
    pub last_error: Option<String>,
}

fn io_err(path: &Path, e: io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

impl Tiered {
    /// Opens the tiers of `cfg.root`: reads the manifest, finishes or undoes a move a crash interrupted (a source
    /// whose copy the manifest already names is deleted; a copy the manifest does not name is deleted), and
    /// claims the cold prefix. Starts no thread: see [`Tiered::start_mover`].
    pub fn open(cfg: TierConfig) -> Result<Tiered> {
        let hot = cfg.hot.clone();
        hot.create_dir_all(&cfg.root)
            .map_err(|e| io_err(&cfg.root, e))?;
        // One instance per hot root: recovery deletes copies and claims the prefix, which must never happen
        // under a running node (a tool opened on its data directory, a second node).
        let lock = hot.lock(&cfg.root, LOCK_NAME).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => Error::Locked(cfg.root.clone()),
            _ => io_err(&cfg.root, e),
        })?;
        let warm = super::local();
        if let Some(w) = &cfg.warm_dir {
            crate::fsutil::ensure_dir(&*warm, w)?;
            let (a, b) = (canonical(&cfg.root), canonical(w));
            if a.starts_with(&b) || b.starts_with(&a) {
                return Err(io_err(
                    w,
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the warm directory must not contain, or be inside, the store's directory",
                    ),
                ));
            }
        }
        // Before recovery looks at the warm directory: it deletes what this store's manifest does not name.
        let warm_lock = match &cfg.warm_dir {
            Some(w) => Some(warm_owner::claim(&*warm, w, &cfg.root)?),
            None => None,
        };
        let manifest = Manifest::load(&*hot, &cfg.root)?;
        let cold = cfg.cold.as_ref().map(|store| {
            ColdTier::new(
                store.clone(),
                cfg.cold_prefix.trim_end_matches('/').to_string(),
                cfg.cold_cache_bytes,
                cfg.cold_block_bytes,
            )
        });
        let inner = Inner {
            _lock: lock,
            _warm_lock: warm_lock,
            warm,
            cold,
            manifest: Mutex::new(manifest),
            entries: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            counters: TierCounters::default(),
            signal: Arc::new(Signal::default()),
            moving: Mutex::new(()),
            passes: Mutex::new(()),
            moving_thread: Mutex::new(None),
            last_error: Mutex::new(None),
            before_cold: Mutex::new(None),
            #[cfg(test)]
            after_each_move: Mutex::new(None),
            cfg,
        };
        inner.recover()?;
        let t = Tiered {
            inner: Arc::new(inner),
            mover: Arc::new(Mutex::new(None)),
        };
        if t.inner.cold.is_some() {
            // Claimed now if the object store answers; if it cannot be reached the store opens all the same (hot
            // reads and commits need no object store) and the first move to the cold tier claims it.
            match t.inner.claim_cold() {
                Ok(()) => {}
                Err(Error::Io { source, .. }) if is_cold_unavailable(&source) => {
                    *t.inner.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                        "the object store could not be reached at open ({source}); cold reads fail until it \
                         answers, and the first move to it claims the prefix"
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(t)
    }

    /// Starts the background mover: it wakes when [`Tiered::note_version`] reports versions (never on a timer)
    /// and moves what the policy says. Stopped by [`Tiered::stop_mover`] or when the last clone is dropped.
    pub fn start_mover(&self) {
        let mut m = self.mover.lock().unwrap_or_else(|e| e.into_inner());
        if m.is_some() {
            return;
        }
        self.inner.signal.lock().1 = false;
        let weak = Arc::downgrade(&self.inner);
        let signal = self.inner.signal.clone();
        *m = Some(
            std::thread::Builder::new()
                .name("letus-tier-mover".into())
                .spawn(move || mover::run(weak, signal))
                .expect("spawning the tier mover"),
        );
    }

    /// Stops the mover and waits for its current move to end.
    pub fn stop_mover(&self) {
        {
            let mut c = self.inner.signal.lock();
            c.1 = true;
        }
        self.inner.signal.wake.notify_all();
        if let Some(h) = self.mover.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }

    /// Sets what runs before an index file moves to the cold tier (see [`PrepareFn`]): a store's
    /// [`crate::Reader::cold_preparer`] consolidates the file so that a page read from the cold tier costs one
    /// ranged GET instead of one per record of its DeltaPage chain.
    pub fn set_before_cold(&self, f: PrepareFn) {
        *self
            .inner
            .before_cold
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    /// Reports that version `v` is committed: the age of sealed files is counted in versions.
    pub fn note_version(&self, v: u64) {
        let mut c = self.inner.signal.lock();
        if v > c.0 {
            c.0 = v;
            drop(c);
            self.inner.signal.wake.notify_all();
        }
    }

    /// Runs the policy once now, in this thread: records newly sealed files and moves what is due. Returns the
    /// number of files moved.
    pub fn migrate_now(&self) -> Result<usize> {
        self.inner.migrate_once(u64::MAX)
    }

    /// What is where, and what the tiers did.
    pub fn status(&self) -> TierStatus {
        self.inner.status()
    }

    /// The counters.
    pub fn counters(&self) -> &TierCounters {
        &self.inner.counters
    }

    /// The object-store counters, if there is a cold tier.
    pub fn cold_counters(&self) -> Option<Arc<ColdCounters>> {
        self.inner.cold.as_ref().map(|c| c.counters.clone())
    }

    /// Drops every cached cold block (benchmarks of cold reads).
    pub fn clear_cold_cache(&self) {
        if let Some(c) = &self.inner.cold {
            let entries = self.inner.lock_entries();
            for e in entries.values() {
                if let Place::Cold { size, .. } =
                    &*e.place.read().unwrap_or_else(|e| e.into_inner())
                {
                    c.forget(e.id, *size);
                }
            }
        }
    }

    /// This storage as the engine takes it.
    pub fn shared(&self) -> SharedStorage {
        Arc::new(self.clone())
    }
}

impl Drop for Tiered {
    fn drop(&mut self) {
        // The mover holds only a weak reference; the last clone stops it.
        if Arc::strong_count(&self.inner) == 1 {
            self.stop_mover();
        }
    }
}

/// The body of manifest object `n`: the epoch line and the cold files with their sizes and CRCs (for people and
/// tools looking at the bucket; the local manifest is the authority).
fn cold_set_body(n: u64, m: &Manifest) -> Vec<u8> {
    let mut s = format!("letus tier manifest {n}\n");
    for (rel, f) in &m.files {
        if f.tier == Tier::Cold {
            s.push_str(&format!("{} {} {:08x} {rel}\n", f.key, f.size, f.crc));
        }
    }
    s.into_bytes()
}

impl Inner {
    /// Removes hot file `rel` and its manifest record; if a move switched the record meanwhile (the copy it made
    /// is now the file), removes the file where it went.
    fn remove_hot(&self, rel: &str) -> io::Result<()> {
        self.cfg.hot.remove_file(&self.cfg.root.join(rel))?;
        let mut m = self.lock_manifest();
        match m.files.get(rel) {
            Some(f) if f.tier != Tier::Hot => {
                drop(m);
                return self.forget_moved(rel);
            }
            Some(_) => {
                m.files.remove(rel);
                m.store(&*self.cfg.hot, &self.cfg.root)
                    .map_err(|e| io::Error::other(e.to_string()))?;
            }
            None => {}
        }
        drop(m);
        self.lock_entries().remove(rel);
        Ok(())
    }

    fn lock_manifest(&self) -> std::sync::MutexGuard<'_, Manifest> {
        self.manifest.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `path` relative to the hot root, if it is a tiered file's.
    fn rel(&self, path: &Path) -> Option<String> {
        let rel = path.strip_prefix(&self.cfg.root).ok()?;
        if rel.starts_with(PIN_DIR) {
            return None;
        }
        let s = rel.to_str()?;
        kind_of(rel.file_name()?.to_str()?)?;
        (!s.is_empty() && s.len() < 4096).then(|| s.to_string())
    }

    /// Where cold file `rel` keeps its pinned ranges.
    fn pin_path(&self, rel: &str) -> PathBuf {
        self.cfg.root.join(PIN_DIR).join(rel)
    }

    fn warm_path(&self, rel: &str) -> Option<PathBuf> {
        self.cfg.warm_dir.as_ref().map(|w| w.join(rel))
    }

    fn place_of(&self, rel: &str) -> Place {
        match self.lock_manifest().files.get(rel) {
            Some(f) if f.tier == Tier::Warm => Place::Warm,
            Some(f) if f.tier == Tier::Cold => Place::Cold {
                key: f.key.clone(),
                size: f.size,
                pins: pin_table(&f.pins),
            },
            _ => Place::Hot,
        }
    }

    fn entry(&self, rel: &str) -> Arc<Entry> {
        let mut entries = self.lock_entries();
        if let Some(e) = entries.get(rel) {
            return e.clone();
        }
        let e = Arc::new(Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            place: RwLock::new(self.place_of(rel)),
            handles: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
        });
        entries.insert(rel.to_string(), e.clone());
        e
    }

    /// After a crash: every file in exactly one place, the one the manifest names.
    fn recover(&self) -> Result<()> {
        let hot = &*self.cfg.hot;
        // A hot record whose file is gone: the engine removed the file (a consolidated index file replaced it,
        // FORMAT.md §2.8) and the crash came before the manifest forgot it. A move never deletes its source
        // before the manifest names the copy, so no other copy exists.
        let gone: Vec<String> = {
            let m = self.lock_manifest();
            let mut gone = Vec::new();
            for (rel, _) in m.files.iter().filter(|(_, f)| f.tier == Tier::Hot) {
                let p = self.cfg.root.join(rel);
                if hot.kind(&p).map_err(|e| io_err(&p, e))?.is_none() {
                    gone.push(rel.clone());
                }
            }
            gone
        };
        if !gone.is_empty() {
            let mut m = self.lock_manifest();
            let mut next = m.clone();
            for rel in &gone {
                next.files.remove(rel);
            }
            next.store(hot, &self.cfg.root)?;
            *m = next;
        }
        let m = self.lock_manifest().clone();
        for (rel, f) in &m.files {
            if f.tier == Tier::Hot {
                continue;
            }
            // A move switched the manifest but did not delete its source.
            let src = self.cfg.root.join(rel);
            if hot.kind(&src).map_err(|e| io_err(&src, e))? == Some(EntryKind::File) {
                hot.remove_file(&src).map_err(|e| io_err(&src, e))?;
                if let Some(d) = src.parent() {
                    hot.sync_dir(d).map_err(|e| io_err(d, e))?;
                }
            }
            if f.tier == Tier::Cold {
                if let Some(w) = self.warm_path(rel) {
                    if self.warm.kind(&w).ok().flatten() == Some(EntryKind::File) {
                        self.warm.remove_file(&w).map_err(|e| io_err(&w, e))?;
                    }
                }
            }
        }
        // Copies the manifest does not name (a move interrupted before its switch).
        if let Some(w) = &self.cfg.warm_dir {
            for p in files_under(&*self.warm, w).map_err(|e| io_err(w, e))? {
                if !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(tier_owned_name)
                {
                    continue;
                }
                let rel = p.strip_prefix(w).ok().and_then(|r| r.to_str());
                let named =
                    rel.is_some_and(|r| m.files.get(r).is_some_and(|f| f.tier == Tier::Warm));
                if !named {
                    self.warm.remove_file(&p).map_err(|e| io_err(&p, e))?;
                }
            }
        }
        // Pin files of files that are not cold with pins (a move interrupted before its switch).
        let pins = self.cfg.root.join(PIN_DIR);
        for p in files_under(hot, &pins).map_err(|e| io_err(&pins, e))? {
            if !p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(tier_owned_name)
            {
                continue;
            }
            let rel = p.strip_prefix(&pins).ok().and_then(|r| r.to_str());
            let named = rel.is_some_and(|r| {
                m.files
                    .get(r)
                    .is_some_and(|f| f.tier == Tier::Cold && !f.pins.is_empty())
            });
            if !named {
                hot.remove_file(&p).map_err(|e| io_err(&p, e))?;
            }
        }
        Ok(())
    }

    /// Claims the cold prefix if this instance has not yet: the epoch is made durable in the local manifest before
    /// any object of it is written, then the objects of this store's earlier epochs that the manifest does not
    /// name (uploads a crash interrupted before their switch) are deleted.
    fn claim_cold(&self) -> Result<()> {
        let Some(c) = &self.cold else { return Ok(()) };
        if c.epoch() != 0 {
            return Ok(());
        }
        let snapshot = self.lock_manifest().clone();
        let epoch = c
            .claim(|n| cold_set_body(n, &snapshot))
            .map_err(|e| io_err(Path::new(&c.prefix), e))?;
        let m = {
            let mut m = self.lock_manifest();
            let mut next = m.clone();
            next.epoch = epoch;
            next.epochs.push(epoch);
            next.store(&*self.cfg.hot, &self.cfg.root)?;
            *m = next.clone();
            next
        };
        let used: std::collections::HashSet<&str> = m
            .files
            .values()
            .filter(|f| f.tier == Tier::Cold)
            .map(|f| f.key.as_str())
            .collect();
        let keys = c.list_data().map_err(|e| io_err(Path::new(&c.prefix), e))?;
        for k in keys {
            let ours = c
                .epoch_of(&k)
                .is_some_and(|e| e != epoch && m.epochs.contains(&e));
            if ours && !used.contains(k.as_str()) {
                c.delete(&k).map_err(|e| io_err(Path::new(&k), e))?;
            }
        }
        Ok(())
    }

    fn status(&self) -> TierStatus {
        let m = self.lock_manifest().clone();
        let mut tiers = [
            TierUse { files: 0, bytes: 0 },
            TierUse { files: 0, bytes: 0 },
            TierUse { files: 0, bytes: 0 },
        ];
        for f in m.files.values() {
            let i = Tier::ALL.iter().position(|t| *t == f.tier).unwrap_or(0);
            tiers[i].files += 1;
            tiers[i].bytes += f.size;
        }
        let version = self.signal.lock().0;
        let backlog = self.backlog(&m, version);
        let hot_total = dir_bytes(&*self.cfg.hot, &self.cfg.root);
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (cold_requests, cold_bytes, cold_cache) = match &self.cold {
            Some(cold) => {
                let k = &cold.counters;
                (
                    [
                        r(&k.gets),
                        r(&k.puts),
                        r(&k.deletes),
                        r(&k.lists),
                        r(&k.errors),
                    ],
                    [r(&k.get_bytes), r(&k.put_bytes)],
                    [r(&k.cache_hits), r(&k.cache_misses), cold.cached_bytes()],
                )
            }
            None => ([0; 5], [0; 2], [0; 3]),
        };
        TierStatus {
            hot_other_bytes: hot_total.saturating_sub(tiers[0].bytes),
            tiers,
            backlog,
            moved_files: r(&c.moved_warm) + r(&c.moved_cold),
            moved_bytes: r(&c.moved_bytes),
            move_failures: r(&c.move_failures),
            reads: [r(&c.reads[0]), r(&c.reads[1]), r(&c.reads[2])],
            pinned_reads: r(&c.pinned_reads),
            cold_requests,
            cold_bytes,
            cold_cache,
            epoch: m.epoch,
            fenced: self.cold.as_ref().is_some_and(|c| c.is_fenced()),
            cold_store: self.cold.as_ref().map(|c| c.store.describe()),
            version,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

/// Every file under `dir`, recursively (none if `dir` does not exist).
fn files_under(fs: &dyn Storage, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let names = match fs.list(&d) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for name in names {
            let p = d.join(name);
            match fs.kind(&p)? {
                Some(EntryKind::Dir) => stack.push(p),
                Some(EntryKind::File) => files.push(p),
                _ => {}
            }
        }
    }
    Ok(files)
}

/// Bytes of the files under `dir` (recursively), as the hot disk reports them; a status report, so a file that
/// vanishes while it is counted counts nothing.
fn dir_bytes(fs: &dyn Storage, dir: &Path) -> u64 {
    files_under(fs, dir)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            fs.open(p, OpenMode::Read)
                .and_then(|f| f.size())
                .unwrap_or(0)
        })
        .sum()
}

/// A handle of a tiered file.
struct TieredFile {
    inner: Arc<Inner>,
    rel: String,
    entry: Arc<Entry>,
    slot: Arc<Slot>,
    writable: bool,
}

impl fmt::Debug for TieredFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TieredFile({})", self.rel)
    }
}

/// A cold file's pinned ranges `(start, len, offset in the pin file)` and its pin file, if it has any.
type Pinned<'a> = Option<(&'a [(u64, u64, u64)], &'a dyn StorageFile)>;

/// What an operation on a [`TieredFile`] runs against.
enum Target<'a> {
    /// The hot or warm copy.
    File(&'a dyn StorageFile),
    /// The cold object: its key and size, and its pinned ranges with the pin file that holds them.
    Cold(&'a str, u64, Pinned<'a>),
}

fn moved() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "the file was moved to a colder tier: it is sealed and can no longer be written",
    )
}

impl TieredFile {
    /// Runs `op` on this handle's descriptor of the file's hot or warm copy (opened on first use), or, for a cold
    /// file, returns `cold(key, size)`. The place is read-locked for the whole operation, so a move (which
    /// write-locks it) never deletes a copy under a running read.
    fn with<T>(&self, op: impl FnOnce(Target<'_>) -> io::Result<T>) -> io::Result<T> {
        let place = self.entry.place.read().unwrap_or_else(|e| e.into_inner());
        let (fs, path, mode) = match &*place {
            Place::Cold { key, size, pins } if pins.is_empty() => {
                return op(Target::Cold(key, *size, None))
            }
            Place::Cold { key, size, pins } => {
                let side = self.pin_file();
                return op(Target::Cold(
                    key,
                    *size,
                    side.as_deref().map(|f| (&pins[..], f)),
                ));
            }
            Place::Hot => (
                &self.inner.cfg.hot,
                self.inner.cfg.root.join(&self.rel),
                if self.writable {
                    OpenMode::ReadWrite
                } else {
                    OpenMode::Read
                },
            ),
            Place::Warm => {
                let p = self.inner.warm_path(&self.rel).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, "no warm tier is configured")
                })?;
                (&self.inner.warm, p, OpenMode::Read)
            }
        };
        if let Some(f) = &*self.slot.0.read().unwrap_or_else(|e| e.into_inner()) {
            return op(Target::File(&**f));
        }
        let mut s = self.slot.0.write().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some(fs.open(&path, mode)?);
        }
        let f = s
            .clone()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        drop(s);
        op(Target::File(&*f))
    }

    /// This handle's descriptor of its cold file's pin file, opened on first use; `None` if it cannot be opened
    /// (reads then go to the object store).
    fn pin_file(&self) -> Option<FileRef> {
        if let Some(f) = &*self.slot.0.read().unwrap_or_else(|e| e.into_inner()) {
            return Some(f.clone());
        }
        let mut s = self.slot.0.write().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = self
                .inner
                .cfg
                .hot
                .open(&self.inner.pin_path(&self.rel), OpenMode::Read)
                .ok();
        }
        s.clone()
    }

    fn tier_index(&self) -> usize {
        match &*self.entry.place.read().unwrap_or_else(|e| e.into_inner()) {
            Place::Hot => 0,
            Place::Warm => 1,
            Place::Cold { .. } => 2,
        }
    }

    fn writing<T>(&self, op: impl FnOnce(&dyn StorageFile) -> io::Result<T>) -> io::Result<T> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(9)); // EBADF, as a read-only descriptor answers
        }
        self.with(|t| match t {
            Target::File(f) => op(f),
            Target::Cold(..) => Err(moved()),
        })
    }
}

impl StorageFile for TieredFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.entry.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.counters.reads[self.tier_index()].fetch_add(1, Ordering::Relaxed);
        let id = self.entry.id;
        self.with(|t| match (t, &self.inner.cold) {
            (Target::File(f), _) => f.read_exact_at(buf, offset),
            (Target::Cold(key, size, pinned), Some(c)) => {
                let end = offset.saturating_add(buf.len() as u64);
                let local = pinned.and_then(|(pins, side)| {
                    let &(start, _, at) = pins
                        .iter()
                        .find(|&&(s, l, _)| offset >= s && end <= s + l)?;
                    side.read_exact_at(buf, at + (offset - start)).ok()
                });
                match local {
                    Some(()) => {
                        self.inner
                            .counters
                            .pinned_reads
                            .fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                    None => c.read(id, key, size, buf, offset),
                }
            }
            (Target::Cold(..), None) => Err(ColdUnavailable::io("no cold tier is configured")),
        })
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.writing(|f| f.write_all_at(buf, offset))
    }
    fn sync_data(&self) -> io::Result<()> {
        self.writing(|f| f.sync_data())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.writing(|f| f.sync_all())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.writing(|f| f.set_len(len))
    }
    fn size(&self) -> io::Result<u64> {
        self.with(|t| match t {
            Target::File(f) => f.size(),
            Target::Cold(_, size, _) => Ok(size),
        })
    }
}

impl Storage for Tiered {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let inner = &self.inner;
        let Some(rel) = inner.rel(path) else {
            return inner.cfg.hot.open(path, mode);
        };
        let entry = inner.entry(&rel);
        let slot = Arc::new(Slot::default());
        {
            let place = entry.place.read().unwrap_or_else(|e| e.into_inner());
            match (&*place, mode) {
                (Place::Hot, _) => {
                    // Opened now, so that a missing file or a taken name is reported by open itself.
                    *slot.0.write().unwrap_or_else(|e| e.into_inner()) =
                        Some(inner.cfg.hot.open(path, mode)?);
                }
                (_, OpenMode::CreateNew) => {
                    return Err(io::Error::from(io::ErrorKind::AlreadyExists))
                }
                _ => {}
            }
            // Registered while the place is read-locked: a move (which write-locks it) either happened before
            // this open, or will find this handle and close its descriptor.
            let mut handles = entry.handles.lock().unwrap_or_else(|e| e.into_inner());
            handles.retain(|w| w.strong_count() > 0);
            handles.push(Arc::downgrade(&slot));
        }
        Ok(Arc::new(TieredFile {
            inner: inner.clone(),
            rel,
            entry,
            slot,
            writable: mode != OpenMode::Read,
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let inner = &self.inner;
        let Some(rel) = inner.rel(path) else {
            return inner.cfg.hot.remove_file(path);
        };
        let moved = |i: &Inner| {
            i.lock_manifest()
                .files
                .get(&rel)
                .is_some_and(|f| f.tier != Tier::Hot)
        };
        if moved(inner) {
            return inner.forget_moved(&rel);
        }
        match inner.remove_hot(&rel) {
            // Moved meanwhile (the mover switched it and deleted the hot copy): removed where it is now.
            Err(e) if e.kind() == io::ErrorKind::NotFound && moved(inner) => {
                inner.forget_moved(&rel)
            }
            r => r,
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let inner = &self.inner;
        let (rf, rt) = (inner.rel(from), inner.rel(to));
        let m = inner.lock_manifest();
        let managed_away = |r: &Option<String>| {
            r.as_ref()
                .is_some_and(|r| m.files.get(r).is_some_and(|f| f.tier != Tier::Hot))
        };
        if managed_away(&rf) || managed_away(&rt) {
            return Err(moved());
        }
        drop(m);
        inner.cfg.hot.rename(from, to)?;
        let mut entries = inner.lock_entries();
        let moved_entry = rf.and_then(|r| entries.remove(&r));
        if let Some(rt) = rt {
            entries.remove(&rt);
            if let Some(e) = moved_entry {
                entries.insert(rt, e);
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let inner = &self.inner;
        let mut names = match inner.cfg.hot.list(dir) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut found = !names.is_empty() || inner.cfg.hot.kind(dir)?.is_some();
        if let Ok(rel_dir) = dir.strip_prefix(&inner.cfg.root) {
            let m = inner.lock_manifest();
            for (rel, f) in &m.files {
                if f.tier == Tier::Hot {
                    continue;
                }
                let p = Path::new(rel);
                if p.parent() == Some(rel_dir) {
                    if let Some(n) = p.file_name() {
                        names.push(n.to_os_string());
                        found = true;
                    }
                }
            }
        }
        if !found {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        // Between a move's switch and its delete a file is in both listings: once is what it is.
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.cfg.hot.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.cfg.hot.sync_dir(dir)
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        let inner = &self.inner;
        if let Some(rel) = inner.rel(path) {
            if inner
                .lock_manifest()
                .files
                .get(&rel)
                .is_some_and(|f| f.tier != Tier::Hot)
            {
                return Ok(Some(EntryKind::File));
            }
        }
        inner.cfg.hot.kind(path)
    }

    fn lock(&self, dir: &Path, name: &str) -> io::Result<LockGuard> {
        self.inner.cfg.hot.lock(dir, name)
    }
}

#[cfg(test)]
mod tests;
