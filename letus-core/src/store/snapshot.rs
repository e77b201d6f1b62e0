//! Readers: the state shared with the writer, [`Snapshot`]s pinned to a version, and the [`Reader`] handle.

use super::*;

/// The part of a store that readers share with the writer.
pub(super) struct Shared {
    pub(super) engine: RwLock<Engine>,
    pub(super) vdls: VdlsReader,
    /// The pool `get_many` issues its reads on (see [`Options::read_threads`]).
    pub(super) read_pool: rayon::ThreadPool,
    /// Held by what replaces index files (consolidations, prunes), so that one never replaces a file another is
    /// rewriting. Taken through [`Shared::maintenance`], which refuses once the store closed.
    pub(super) maintenance: std::sync::Mutex<()>,
    /// Set (under `maintenance`) when the [`Store`](super::Store) that owns the directory lock lets it go: a
    /// prune, GC pass or consolidation started through a [`Reader`] after that would work in a directory that
    /// another opener may own by then.
    pub(super) closed: std::sync::atomic::AtomicBool,
    /// Taken by the writer while it waits for the engine exclusively, and passed through by background walks
    /// (prunes, consolidations) before each hold: a walk that takes the engine again and again would otherwise
    /// keep a commit from publishing for as long as it runs (measured: 100-220 ms waits behind a prune).
    pub(super) turnstile: std::sync::Mutex<()>,
    /// Value-log GC's live records, retired files and victims (`vlog_gc.rs`).
    pub(super) gc: std::sync::Mutex<vlog_gc::GcState>,
    /// The prune running now: when it started, whether it merges, how far it is (`prune.rs`).
    pub(super) prune_status: std::sync::Mutex<Option<(Instant, bool, prune::PruneProgress)>>,
    /// Set while a value-log GC pass runs.
    pub(super) gc_running: std::sync::atomic::AtomicBool,
    /// Set when a prune failed after its manifest was written (its commit point): the manifest names a base file
    /// that this process has not swapped in, and another prune would write that same file again while the
    /// manifest names it. Only an open finishes it, so prunes answer [`crate::Error::Poisoned`] until then.
    pub(super) prune_unfinished: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The maintenance lock (prunes, GC passes, consolidations), or [`Error::Poisoned`] once the store closed.
    pub(super) fn maintenance(&self) -> Result<std::sync::MutexGuard<'_, ()>> {
        let held = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        Ok(held)
    }

    /// Waits for the maintenance running now and refuses any after it: the store is letting its directory go.
    pub(super) fn close_maintenance(&self) {
        let _held = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The engine for reading. A panic while the writer held the lock leaves it poisoned; readers go on reading
    /// what was published (the writer refuses further commits, see [`Store::commit`]).
    pub(super) fn engine(&self) -> RwLockReadGuard<'_, Engine> {
        self.engine.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The engine exclusively, ahead of background walks (see `turnstile`).
    pub(super) fn engine_write(&self) -> Result<std::sync::RwLockWriteGuard<'_, Engine>> {
        let _turn = self
            .turnstile
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.engine.write().map_err(|_| Error::Poisoned)
    }

    /// The engine for a background walk's next hold: after any writer waiting for it. Never while holding the
    /// engine already.
    pub(super) fn engine_after_writers(&self) -> RwLockReadGuard<'_, Engine> {
        drop(
            self.turnstile
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.engine()
    }

    pub(super) fn memory(&self) -> MemoryUse {
        let e = self.engine();
        MemoryUse {
            page_cache_bytes: e.page_cache.weight(),
            page_cache_pages: e.page_cache.len() as u64,
            block_cache_bytes: e.block_cache.weight(),
            latest_index_bytes: e.latest.bytes(),
            memtable_bytes: (e.mem.bytes() + e.flushing.as_ref().map_or(0, |f| f.table.bytes()))
                as u64,
            // Key (tid, path), location and the hash map's own slot and control byte.
            tombstone_bytes: (e.tombstones.capacity()
                * (std::mem::size_of::<((TrieId, KeyPath), Location)>() + 1))
                as u64,
            budget_bytes: e.opts.memory_budget_bytes,
        }
    }

    pub(super) fn disk_bytes(&self) -> u64 {
        let e = self.engine();
        self.vdls.disk_bytes()
            + e.files.iter().map(|f| f.size()).sum::<u64>()
            + e.roots_log.disk_bytes()
            + e.tombstone_log.as_ref().map_or(0, TombstoneLog::disk_bytes)
    }

    pub(super) fn view<R>(
        &self,
        pinned: Option<Option<Version>>,
        f: impl FnOnce(&View<'_>) -> R,
    ) -> R {
        self.view_of(self.engine(), pinned, f)
    }

    /// [`Shared::view`] for one batch of a long walk (exports, snapshot manifests and chunks): taken after any
    /// writer waiting for the engine, so that a walk taking it batch after batch does not keep commits from
    /// publishing. Not from inside another view.
    pub(super) fn walk_view<R>(
        &self,
        pinned: Option<Option<Version>>,
        f: impl FnOnce(&View<'_>) -> R,
    ) -> R {
        self.view_of(self.engine_after_writers(), pinned, f)
    }

    fn view_of<R>(
        &self,
        e: RwLockReadGuard<'_, Engine>,
        pinned: Option<Option<Version>>,
        f: impl FnOnce(&View<'_>) -> R,
    ) -> R {
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
    pub(super) shared: Arc<Shared>,
    pub(super) version: Option<Version>,
}

/// A handle that takes [`Snapshot`]s of a store's latest version from any thread, without access to the
/// [`Store`] (which the writer owns).
#[derive(Clone)]
pub struct Reader {
    pub(super) shared: Arc<Shared>,
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

impl Snapshot {
    read_api!();

    pub(super) fn view<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
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
            let chunk = self.shared.walk_view(Some(self.version), |v| {
                v.pairs_after(tid, version, after.as_ref(), PAIRS_PER_CHUNK)
            })?;
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
pub(super) const PAIRS_PER_CHUNK: usize = 1024;
