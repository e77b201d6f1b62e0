//! The node: one letus store and one block store, and the operations the HTTP API exposes, as plain blocking
//! functions (the server runs them on tokio's blocking pool).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use letus_core::{Options, Reader, Snapshot, Store};
use letus_verify::hex::encode as hex;
use letus_verify::{Digest, KeyPath, Version};

use crate::api::*;
use crate::blockstore::{BlockLocation, BlockStore, BlockStoreOptions};
use crate::error::{hex_field, ApiError};

/// Limits on what a client may ask for.
#[derive(Clone, Debug)]
pub struct NodeLimits {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Most bytes of request bodies held at once (at least `max_body_bytes`), over all public reads, and again
    /// over all requests with the write token: a request reserves its body's announced length (or
    /// `max_body_bytes`) before reading it and holds it until it is answered; past it `503 too_many_bodies` (see
    /// `body_budget`).
    pub max_buffered_body_bytes: usize,
    /// Most keys in one multi-proof request.
    pub max_proof_keys: usize,
    /// Most writes in one block, and most keys in its access list.
    pub max_block_writes: usize,
    /// Most history entries returned.
    pub max_history: usize,
    /// A request body must have fully arrived this long after its head (`408 body_timeout` otherwise).
    pub body_timeout: Duration,
    /// Most streams (exports) served at once; past it `503 too_many_streams`. Each holds a blocking thread (and a
    /// snapshot, never a lock a commit needs) while its client reads.
    pub max_streams: usize,
    /// Most read requests computed at once (the others wait their turn without a thread). Reads and commits
    /// share the cores: more reads at once than cores only slows every one of them and starves the writer.
    pub max_concurrent_reads: usize,
    /// Keep the raw blocks of only the newest this many versions: after each block, the block store's sealed
    /// segments wholly older than that are deleted (its tail is cut; `None`, the default, keeps every block).
    /// Older blocks then answer `410 pruned`. The state is pruned separately (`Options::keep_versions`).
    pub max_traceable_blocks: Option<u64>,
    /// Size after which the block store seals its segment and starts a new one (default 64 MiB): the unit in
    /// which its tail is cut and its files move between tiers.
    pub block_segment_bytes: u64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_body_bytes: 32 << 20,
            max_buffered_body_bytes: 256 << 20,
            max_proof_keys: 1_000,
            max_block_writes: 100_000,
            max_history: 1_000,
            body_timeout: Duration::from_secs(60),
            max_streams: 8,
            max_concurrent_reads: default_concurrent_reads(),
            max_traceable_blocks: None,
            block_segment_bytes: BlockStoreOptions::default().segment_bytes,
        }
    }
}

/// One read at a time per core, less one core kept for commits (at least one read).
pub fn default_concurrent_reads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .saturating_sub(1)
        .max(1)
}

/// A running node's state.
pub struct Node {
    /// The writer: block writes take it one at a time. Reads never do.
    store: Mutex<Store>,
    /// Snapshots of the latest version for every read: a read never waits for a commit's trie update, fsync or
    /// index flush (only, for a moment, for a commit to publish its pages).
    /// Takes the snapshots of every read; replaced when the store is reopened after an I/O failure.
    reader: std::sync::RwLock<Reader>,
    blocks: Mutex<BlockStore>,
    /// The bearer token writes must carry.
    pub token: String,
    /// Request limits.
    pub limits: NodeLimits,
    /// Permits for the streams running now, `limits.max_streams` in all.
    pub(crate) streams: Arc<tokio::sync::Semaphore>,
    /// Permits for the read requests being computed, `limits.max_concurrent_reads` in all.
    pub(crate) reads: Arc<tokio::sync::Semaphore>,
    /// The bytes of request bodies held at once (`limits.max_buffered_body_bytes`): public reads'.
    pub(crate) bodies: crate::body_budget::BodyBudget,
    /// The same for requests that carry the write token, apart, so that readers cannot keep writes out.
    pub(crate) write_bodies: crate::body_budget::BodyBudget,
    /// Reads being computed on async worker threads now (bounded by `server::InlineRead`).
    pub(crate) inline_reads: std::sync::atomic::AtomicUsize,
    /// Set when a panic left a write half-done in a state the node cannot repair in place (inside the block
    /// append or the commit): writes are refused (`503 unavailable`) until a restart recovers from disk, and the
    /// store is not flushed at shutdown. Reads go on.
    wedged: OnceLock<String>,
    /// The tiers under the data directory, when the node runs tiered: told of every commit (the mover's clock).
    tiers: Option<letus_core::storage::tiered::Tiered>,
    /// The last snapshot manifests computed, newest last (a joining node asks for the same one several times;
    /// computing one walks every leaf of the trie).
    manifests: Mutex<std::collections::VecDeque<(ManifestKey, Arc<Vec<u8>>)>>,
    /// The subtrees this node holds as a shard behind a router (all 256 otherwise): writes outside them are
    /// refused. A move changes them at the version it hands a subtree over.
    shard: std::sync::RwLock<crate::sharding::PrefixSet>,
    /// Where a shard keeps its subtrees (`DATA/shard.json`); `None` when the node is not a shard.
    shard_file: Option<std::path::PathBuf>,
    /// Sealed block-store segments deleted by cutting the tail (`max_traceable_blocks`), and their bytes.
    tail_cut: (std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64),
    /// Test-only: the write stage at which `write_block` panics.
    #[cfg(test)]
    pub(crate) panic_at: Mutex<Option<WriteStage>>,
}

/// What `/metrics` reports of a node besides its request metrics.
pub struct NodeStats {
    /// The engine's counters.
    pub engine: letus_core::metrics::Snapshot,
    /// Bytes on disk of the state.
    pub state_bytes: u64,
    /// Bytes on disk of the block store.
    pub block_bytes: u64,
    /// The latest committed version.
    pub latest: Option<Version>,
    /// The prune running now, if any.
    pub prune: Option<letus_core::PruneStatus>,
    /// Whether a value-log GC pass is running now.
    pub vlog_gc_running: bool,
    /// Block-store segments deleted by cutting the tail, and their bytes.
    pub tail_cut: (u64, u64),
}

/// What a shard's block part changes or breaks about the subtrees it holds, checked once the version is known
/// to be new.
struct ShardChange {
    /// The first write outside the subtrees the shard holds at this version.
    misrouted: Option<String>,
    /// The subtrees it holds from this version on, when they change.
    holds: Option<crate::sharding::PrefixSet>,
}

/// `(tid, version, max_pairs)` of a cached manifest.
type ManifestKey = (u32, Version, u64);

/// Manifests kept in memory: each is 73 bytes per chunk (a few hundred KB for 10M keys).
const MANIFESTS_CACHED: usize = 4;

/// The largest `max_pairs` a manifest request may ask for, so that a chunk stays below the verifier's
/// `max_chunk_bytes` for small pairs.
pub const MAX_SNAPSHOT_PAIRS: u64 = 1 << 20;

/// The default pairs per chunk: about 1-2 MB per chunk for account-sized values.
pub const DEFAULT_SNAPSHOT_PAIRS: u64 = 16_384;

/// Most key changes one `changes` answer carries.
pub const MAX_CHANGES: usize = 1_000_000;

/// History entries read from the store at a time by `GET .../history` (the body limit is checked between reads,
/// so one answer holds at most this many values past it).
const HISTORY_READ_AHEAD: usize = 16;

/// The least bytes of keys and values (value-log records) one changes answer may carry; more when blocks may be
/// larger (`max_body_bytes`).
pub const MIN_CHANGE_BYTES: u64 = 32 << 20;

/// The writer's lock is only ever poisoned by a panic outside `write_block` (which catches its own, see there):
/// there is none, so this answers what cannot happen with a 500 rather than a panic.
fn lock_err<T>(_: T) -> ApiError {
    ApiError::Internal("a lock was poisoned by a panic".into())
}

/// Where a write was when it panicked: what is half-done, and so what the node can undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteStage {
    /// Checking the version, prefetching and staging: nothing outside the staged set changed yet.
    Staging,
    /// Appending the raw block: the block store's file may hold part of it.
    Block,
    /// Inside the state commit: the engine's memory may be half-updated.
    Commit,
}

/// The message a panic was raised with.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// A write with its hex decoded: `(tid, key, value or None for a delete)`.
/// A block write decoded from its request: trie, key, value (`None`: delete).
pub type DecodedWrite = (u32, Vec<u8>, Option<Vec<u8>>);

/// Write `i` of the request's list `field`, its hex decoded (errors name the field).
pub(crate) fn decode_write(w: &WriteOp, field: &str, i: usize) -> Result<DecodedWrite, ApiError> {
    let key = hex_field(&w.key, &format!("{field}[{i}].key"))?;
    let value = w
        .value
        .as_deref()
        .map(|v| hex_field(v, &format!("{field}[{i}].value")))
        .transpose()?;
    Ok((w.tid, key, value))
}

/// The most bytes of records a snapshot chunk carries: a verifier with SPEC.md's default limits takes the chunk.
fn max_chunk_body() -> usize {
    letus_verify::Limits::default().max_chunk_bytes - letus_verify::snapshot::CHUNK_HEAD_LEN
}

/// The fingerprint of a block request, stored with the block so that a repeated POST can be told from a
/// different block for the same version.
pub fn request_hash(version: Version, writes: &[DecodedWrite], block: &[u8]) -> [u8; 32] {
    let mut h = Vec::new();
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(&(writes.len() as u64).to_le_bytes());
    for (tid, k, v) in writes {
        h.extend_from_slice(&tid.to_le_bytes());
        h.extend_from_slice(&(k.len() as u64).to_le_bytes());
        h.extend_from_slice(k);
        match v {
            Some(v) => {
                h.push(1);
                h.extend_from_slice(&(v.len() as u64).to_le_bytes());
                h.extend_from_slice(v);
            }
            None => h.push(0),
        }
    }
    h.extend_from_slice(&(block.len() as u64).to_le_bytes());
    h.extend_from_slice(block);
    letus_verify::hash::value_hash(&h).0
}

impl Node {
    /// Opens the store and the block store under `data`, dropping blocks whose state commit never happened.
    pub fn open(
        data: &Path,
        opts: Options,
        token: String,
        limits: NodeLimits,
    ) -> Result<Node, letus_core::Error> {
        let block_storage = opts.storage.clone();
        let store = Store::open(data.join("state"), opts)?;
        let mut blocks = BlockStore::open(
            &data.join("blocks"),
            BlockStoreOptions {
                storage: block_storage,
                segment_bytes: limits.block_segment_bytes,
                segment_blocks: limits
                    .max_traceable_blocks
                    .map(crate::blockstore::segment_blocks_for),
                ..BlockStoreOptions::default()
            },
        )?;
        // The block is appended before its state commit; a crash in between leaves a block without state.
        blocks.truncate_after(store.latest_version().unwrap_or(0))?;
        // The other direction cannot be repaired here: raw blocks that the state has but the block store lost (a
        // deleted segment file) are reported, and `GET /v1/blocks/{v}` answers `block_not_found` for them.
        if blocks.latest_version() < store.latest_version() {
            tracing::warn!(
                blocks = ?blocks.latest_version(),
                state = ?store.latest_version(),
                "the block store ends before the state: some raw blocks are missing"
            );
        }
        Ok(Node {
            reader: std::sync::RwLock::new(store.reader()),
            store: Mutex::new(store),
            blocks: Mutex::new(blocks),
            token,
            streams: Arc::new(tokio::sync::Semaphore::new(limits.max_streams)),
            reads: Arc::new(tokio::sync::Semaphore::new(
                limits.max_concurrent_reads.max(1),
            )),
            inline_reads: std::sync::atomic::AtomicUsize::new(0),
            bodies: crate::body_budget::BodyBudget::new(
                limits.max_buffered_body_bytes,
                limits.max_body_bytes,
            ),
            write_bodies: crate::body_budget::BodyBudget::new(
                limits.max_buffered_body_bytes,
                limits.max_body_bytes,
            ),
            limits,
            wedged: OnceLock::new(),
            tiers: None,
            manifests: Mutex::new(Default::default()),
            shard: std::sync::RwLock::new(crate::sharding::PrefixSet::ALL),
            shard_file: None,
            tail_cut: Default::default(),
            #[cfg(test)]
            panic_at: Mutex::new(None),
        })
    }

    /// The node with its store's tiers (the `Tiered` storage the store was opened on): every commit is reported
    /// to the mover, and `/v1/tiers` and `/metrics` report them.
    pub fn with_tiers(mut self, tiers: letus_core::storage::tiered::Tiered) -> Node {
        if let Some(v) = self.reader().snapshot().latest_version() {
            tiers.note_version(v);
        }
        // An index file is consolidated just before it goes cold (FORMAT.md §2.8), so that a page at an old
        // version is read from one object.
        tiers.set_before_cold(self.reader().cold_preparer());
        tiers.start_mover();
        self.tiers = Some(tiers);
        self
    }

    /// The node as a shard holding the subtrees `prefixes` (SPEC.md §3.4's first page level): writes of keys
    /// outside them are refused with `wrong_shard`, so that a misrouted write never lands in the wrong store.
    /// `prefixes` is the first start's set: once a move changed it, the set saved in `dir/shard.json` is the
    /// shard's (a warning names the difference).
    pub fn with_shard(
        mut self,
        prefixes: crate::sharding::PrefixSet,
        dir: &std::path::Path,
    ) -> Result<Node, String> {
        let file = dir.join(crate::sharding::SHARD_FILE);
        let held = match crate::sharding::read_held(&file)? {
            Some(saved) => {
                if saved != prefixes {
                    tracing::warn!(
                        flag = %prefixes,
                        held = %saved,
                        "subtree moves changed this shard's subtrees since its first start: it holds {saved}"
                    );
                }
                saved
            }
            None => {
                crate::sharding::write_held(&file, &prefixes)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                prefixes
            }
        };
        self.shard = std::sync::RwLock::new(held);
        self.shard_file = Some(file);
        Ok(self)
    }

    fn held(&self) -> crate::sharding::PrefixSet {
        *self
            .shard
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The non-empty subtrees at depth 2 of every trie at `version` (default latest), with the subtrees this
    /// node holds.
    pub fn shard_tops(&self, version: Option<Version>) -> Result<ShardTopsResponse, ApiError> {
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, version)?;
        let mut tries = Vec::new();
        for tid in store.tries() {
            if let Some(tops) = store.subtree_tops(tid, v)? {
                tries.push(TrieTops {
                    tid,
                    tops: crate::sharding::tops_json(&tops),
                });
            }
        }
        Ok(ShardTopsResponse {
            prefixes: self.held().to_string(),
            version: v,
            tries,
        })
    }

    /// The tiers' status, if the node is tiered.
    pub fn tier_status(&self) -> Option<letus_core::storage::tiered::TierStatus> {
        self.tiers.as_ref().map(|t| t.status())
    }

    /// Prunes the state of every version older than the newest `keep` (see `letus_core::Store::prune`); runs
    /// beside commits and reads.
    pub fn prune(&self, keep: u64, merge: bool) -> Result<crate::api::PruneResponse, ApiError> {
        let reader = self.reader();
        let done = if merge {
            reader.prune_merged(keep)?
        } else {
            reader.prune(keep)?
        };
        // Then value-log GC: files retired by earlier passes that the boundary has passed are deleted; with merge,
        // every file with garbage is compacted as far as the boundary allows (the least disk).
        let gc = if merge {
            reader.vlog_gc_all()?
        } else {
            reader.vlog_gc()?
        };
        Ok(crate::api::PruneResponse {
            pruned: done.is_some(),
            oldest: reader.pruned_below(),
            files_removed: done.as_ref().map_or(0, |r| r.files_removed),
            bytes_removed: done.as_ref().map_or(0, |r| r.bytes_removed),
            base_bytes: done.as_ref().map_or(0, |r| r.base_bytes),
            pages: done.as_ref().map_or(0, |r| r.pages),
            vlog_bytes: gc.log_bytes,
            vlog_live_bytes: gc.live_bytes,
            vlog_files_deleted: gc.files_deleted,
            vlog_bytes_deleted: gc.bytes_deleted,
        })
    }

    /// The reader of the store as it is now.
    fn reader(&self) -> Reader {
        self.reader
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// After an I/O failure (a full disk, a failed fsync) the store or the block store refuses writes: the next
    /// write reopens both (recovery of what is on disk), so writes resume by themselves once the device works;
    /// until then each write answers `unavailable` with the reason.
    fn recover_after_io_failure(&self, store: &mut Store) -> Result<(), ApiError> {
        let mut blocks = self.blocks();
        if !store.is_poisoned() && !blocks.is_poisoned() {
            return Ok(());
        }
        let failed = |what: &str, e: letus_core::Error| {
            tracing::warn!(%e, "{what} could not be reopened after an I/O failure");
            ApiError::Unavailable(format!(
                "{what} could not be reopened after an I/O failure: {e}"
            ))
        };
        if store.is_poisoned() {
            store.reopen().map_err(|e| failed("the store", e))?;
            *self
                .reader
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = store.reader();
        }
        if blocks.is_poisoned() {
            blocks.reopen().map_err(|e| failed("the block store", e))?;
        }
        // As at open: a block whose state commit failed goes.
        blocks
            .truncate_after(store.latest_version().unwrap_or(0))
            .map_err(|e| failed("the block store", e))?;
        tracing::info!(version = ?store.latest_version(), "store reopened after an I/O failure; writes resume");
        Ok(())
    }

    /// The block store. A panic under this lock poisons it; it comes from an append (a read changes nothing), and
    /// `write_block` then refuses writes until restart, so the lock is taken over as it is: the blocks before the
    /// half-done append are intact, and open() drops whatever follows the state's latest version.
    fn blocks(&self) -> MutexGuard<'_, BlockStore> {
        self.blocks.lock().unwrap_or_else(|e| {
            self.blocks.clear_poison();
            e.into_inner()
        })
    }

    /// Test-only fault injection: panics if a test asked for a panic at `stage`.
    #[cfg(test)]
    fn fail_point(&self, stage: WriteStage) {
        let mut at = self.panic_at.lock().unwrap();
        if *at == Some(stage) {
            *at = None;
            drop(at);
            panic!("injected panic at {stage:?}");
        }
    }

    #[cfg(not(test))]
    #[inline(always)]
    fn fail_point(&self, _: WriteStage) {}

    /// Flushes and closes the store (graceful shutdown). A node whose writes were wedged by a panic is closed
    /// without a flush, as after a crash: the next open recovers from what is durable.
    pub fn close(mut self) -> Result<(), letus_core::Error> {
        if let Some(t) = self.tiers.take() {
            // A move in progress finishes first; the next one would run after the store is gone.
            t.stop_mover();
        }
        if let Some(why) = self.wedged.get() {
            tracing::warn!(%why, "closing without a flush");
            return Ok(());
        }
        let store = self
            .store
            .into_inner()
            .map_err(|_| letus_core::Error::Poisoned)?;
        if store.is_poisoned() {
            // An I/O failure that no write has recovered from yet: nothing to flush that recovery would not
            // rebuild.
            tracing::warn!(
                "closing a store that an I/O failure left unusable; the next open recovers it"
            );
            return Ok(());
        }
        store.close()
    }

    /// Writes one block (SPEC of `POST /v1/blocks` in the README).
    pub fn write_block(&self, req: BlockRequest) -> Result<DigestsResponse, ApiError> {
        self.write_shard_block(ShardBlockRequest {
            block: req,
            moving: Vec::new(),
            holds: None,
        })
    }

    /// Writes a sharding router's part of a block (`POST /v1/shard/blocks`): the block's writes in this shard's
    /// subtrees, then the `moving` ones, with the subtrees it holds from this version on when a move hands one
    /// over. A node that is not a shard takes only a plain block.
    pub fn write_shard_block(&self, part: ShardBlockRequest) -> Result<DigestsResponse, ApiError> {
        let ShardBlockRequest {
            block: req,
            moving,
            holds,
        } = part;
        if self.shard_file.is_none() && (!moving.is_empty() || holds.is_some()) {
            return Err(ApiError::BadRequest(
                "`moving` and `holds` are for a shard (letus serve --shard-prefixes)".into(),
            ));
        }
        let holds = holds
            .as_deref()
            .map(crate::sharding::PrefixSet::parse)
            .transpose()
            .map_err(|e| ApiError::BadRequest(format!("holds: {e}")))?;
        let held = holds.unwrap_or_else(|| self.held());
        if req.writes.len() > self.limits.max_block_writes
            || moving.len() > self.limits.max_block_writes
        {
            return Err(ApiError::TooLarge(format!(
                "{} writes; at most {} per block",
                req.writes.len(),
                self.limits.max_block_writes
            )));
        }
        let mut writes = Vec::with_capacity(req.writes.len() + moving.len());
        let mut misrouted = None;
        for (i, w) in req.writes.iter().enumerate() {
            let (tid, key, value) = decode_write(w, "writes", i)?;
            let path = letus_verify::KeyPath::of(&key);
            if misrouted.is_none() && !held.holds(&path) {
                misrouted = Some(format!(
                    "writes[{i}]: its key is in subtree {:02x}; this shard holds {held}",
                    path.0[0]
                ));
            }
            writes.push((tid, key, value));
        }
        // The fingerprint is the client's block alone: a retry of a finished version, split again by the router
        // without the move that rode along, is still recognized.
        let client_writes = writes.len();
        for (i, w) in moving.iter().enumerate() {
            writes.push(decode_write(w, "moving", i)?);
        }
        let block = req
            .block
            .as_deref()
            .map(|b| hex_field(b, "block"))
            .transpose()?
            .unwrap_or_default();
        // The access list is read in parallel under the store's lock: bounded like the writes.
        if req.access_list.len() > self.limits.max_block_writes {
            return Err(ApiError::TooLarge(format!(
                "{} access-list keys; at most {} per block",
                req.access_list.len(),
                self.limits.max_block_writes
            )));
        }
        let mut access = Vec::with_capacity(req.access_list.len());
        for (i, a) in req.access_list.iter().enumerate() {
            access.push((a.tid, hex_field(&a.key, &format!("access_list[{i}].key"))?));
        }
        let fingerprint = request_hash(req.version, &writes[..client_writes], &block);
        let shard_change = ShardChange {
            misrouted,
            holds: holds.filter(|h| *h != self.held()),
        };

        // A retry of a version already published is answered without the writer's lock: its block is read (from
        // the cold tier, maybe) while commits go on. Anything else, including a retry whose block is not found
        // here, takes the lock and is decided there.
        if let Some(answer) = self.published_retry(req.version, fingerprint)? {
            return Ok(answer);
        }
        let mut store = self.store.lock().map_err(lock_err)?;
        // Checked under the lock: a writer that waited for it behind the one that wedged the node sees it.
        if let Some(why) = self.wedged.get() {
            return Err(ApiError::Unavailable(why.clone()));
        }
        self.recover_after_io_failure(&mut store)?;
        let version = req.version;
        let mut stage = WriteStage::Staging;
        // A panic is caught here, while the write guard is still alive, so the store's lock is never poisoned; what
        // it left half-done is undone below, or, where the node cannot know what it left, writes stop.
        let r = catch_unwind(AssertUnwindSafe(|| {
            self.write_locked(
                &mut store,
                &mut stage,
                version,
                &writes,
                &block,
                &access,
                fingerprint,
                shard_change,
            )
        }));
        match r {
            Ok(r) => r,
            Err(panic) => {
                let what = panic_message(&*panic).to_string();
                tracing::error!(version, ?stage, panic = %what, "a block write panicked");
                if stage == WriteStage::Staging {
                    // Only the staged set changed: the same state as a write refused before its block.
                    store.discard_staged();
                } else {
                    let _ = self.wedged.set(format!(
                        "a panic left the write of version {version} half-done ({stage:?})"
                    ));
                }
                Err(ApiError::Internal(format!(
                    "the write of version {version} panicked: {what}"
                )))
            }
        }
    }

    /// The answer to a write of `version` when that version is published and its stored block is found: the same
    /// block (by `fingerprint`) gets the version's digests, another `409 version_conflict`. `None` otherwise.
    /// The block is located under the block store's lock and read after it, as `GET /v1/blocks/{v}` does.
    fn published_retry(
        &self,
        version: Version,
        fingerprint: [u8; 32],
    ) -> Result<Option<DigestsResponse>, ApiError> {
        let snap = self.reader().snapshot();
        if snap.version().is_none_or(|latest| version > latest) {
            return Ok(None);
        }
        let at = self.blocks().locate(version);
        // A read that fails (the tail cut meanwhile, the cold tier down) is left to the locked path to answer.
        let Some(stored) = at.and_then(|at| at.read().ok()) else {
            return Ok(None);
        };
        if stored.request_hash != fingerprint {
            return Err(ApiError::Conflict(version));
        }
        Ok(Some(DigestsResponse {
            version,
            digests: digests_at(&snap, version)?,
            tops: None,
        }))
    }

    /// The part of [`Node::write_block`] under the store's write lock; `stage` tracks what may be half-done.
    #[allow(clippy::too_many_arguments)]
    fn write_locked(
        &self,
        store: &mut Store,
        stage: &mut WriteStage,
        req_version: Version,
        writes: &[DecodedWrite],
        block: &[u8],
        access: &[(u32, Vec<u8>)],
        fingerprint: [u8; 32],
        shard_change: ShardChange,
    ) -> Result<DigestsResponse, ApiError> {
        let latest = store.latest_version();
        if let Some(latest) = latest {
            // The version after the last one; none after u64::MAX (a chain may start there, then it is full).
            let not_next = || match latest.checked_add(1) {
                Some(expected) => ApiError::NotNext {
                    got: req_version,
                    expected,
                },
                None => ApiError::BadRequest(format!(
                    "the last version is {latest}: no version can follow it"
                )),
            };
            if req_version <= latest {
                let stored = self.blocks().get(req_version)?;
                return match stored {
                    Some(b) if b.request_hash == fingerprint => Ok(DigestsResponse {
                        version: req_version,
                        digests: digests_at(&store.snapshot(), req_version)?,
                        tops: None,
                    }),
                    Some(_) => Err(ApiError::Conflict(req_version)),
                    None if store.has_version(req_version) => Err(ApiError::Conflict(req_version)),
                    None => Err(not_next()),
                };
            }
            if latest.checked_add(1) != Some(req_version) {
                return Err(not_next());
            }
        } else if req_version == 0 {
            return Err(ApiError::BadRequest("versions start at 1".into()));
        }
        // Only a new version is checked against the subtrees: a retry of a committed one, which a router splits
        // by the map of its version, may name a subtree handed over since.
        if let Some(m) = shard_change.misrouted {
            return Err(ApiError::WrongShard(m));
        }
        if let (Some(h), Some(file)) = (shard_change.holds, &self.shard_file) {
            // Saved before the version commits: a crash in between leaves the new set and an uncommitted version,
            // which the router's decision sends again with the same set.
            crate::sharding::write_held(file, &h)
                .map_err(|e| ApiError::Unavailable(format!("saving the shard's subtrees: {e}")))?;
            tracing::info!(version = req_version, held = %h, "this shard's subtrees changed");
            *self
                .shard
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = h;
        }
        // Prefetch the access list: pages and values load in parallel, so applying the writes finds them cached.
        if let Some(v) = latest {
            let mut by_tid: std::collections::BTreeMap<u32, Vec<&[u8]>> = Default::default();
            for (tid, k) in access {
                by_tid.entry(*tid).or_default().push(k);
            }
            for (tid, keys) in by_tid {
                match store.get_many(tid, v, &keys) {
                    Ok(_) | Err(letus_core::Error::UnknownTrie(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        for (tid, k, v) in writes {
            match v {
                Some(v) => store.put(*tid, k, v),
                None => store.delete(*tid, k),
            }
            .inspect_err(|_| store.discard_staged())?;
        }
        self.fail_point(WriteStage::Staging);
        // The block first (fsynced), then the state commit: a crash in between leaves a block that open() drops.
        *stage = WriteStage::Block;
        {
            let mut blocks = self.blocks();
            self.fail_point(WriteStage::Block);
            blocks
                .append(req_version, fingerprint, block)
                .map_err(|e| {
                    store.discard_staged();
                    ApiError::from_write(e)
                })?;
        }
        *stage = WriteStage::Commit;
        self.fail_point(WriteStage::Commit);
        match store.commit(req_version) {
            Ok(digests) => {
                if let Some(t) = &self.tiers {
                    t.note_version(req_version);
                }
                if let Some(n) = self.limits.max_traceable_blocks {
                    // Whole segments only, so this is a few unlinks now and then. A failure leaves the block
                    // store poisoned, and the next write reopens it, as after a failed append.
                    let below = req_version.saturating_add(1).saturating_sub(n.max(1));
                    match self.blocks().cut_tail(below) {
                        Ok((segments, bytes)) => {
                            use std::sync::atomic::Ordering::Relaxed;
                            self.tail_cut.0.fetch_add(segments, Relaxed);
                            self.tail_cut.1.fetch_add(bytes, Relaxed);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cutting the block store's tail failed")
                        }
                    }
                }
                Ok(DigestsResponse {
                    version: req_version,
                    digests,
                    tops: None,
                })
            }
            Err(e) => {
                // A commit refused before anything was written leaves the store usable: its block goes. One that
                // poisoned the store may already be durable, so its block stays: the next open keeps it if the
                // state has that version and drops it otherwise (removing it here made a durable version
                // impossible to resubmit or to serve as a block).
                if !store.is_poisoned() {
                    let _ = self.blocks().truncate_after(latest.unwrap_or(0));
                }
                Err(ApiError::from_write(e))
            }
        }
    }

    /// Digests of every trie at `version` (default latest).
    pub fn digests(&self, version: Option<Version>) -> Result<DigestsResponse, ApiError> {
        let store = self.reader().snapshot();
        let v = match version {
            Some(v) => v,
            None => store.latest_version().ok_or(ApiError::Empty)?,
        };
        if !store.has_version(v) {
            return Err(not_held(&store, v));
        }
        Ok(DigestsResponse {
            version: v,
            digests: digests_at(&store, v)?,
            tops: None,
        })
    }

    fn resolve(store: &Snapshot, version: Option<Version>) -> Result<Version, ApiError> {
        let latest = store.latest_version().ok_or(ApiError::Empty)?;
        match version {
            None => Ok(latest),
            Some(v) if store.has_version(v) => Ok(v),
            Some(v) => Err(not_held(store, v)),
        }
    }

    /// The snapshot manifest of trie `tid` at `version` (default latest) with chunks of at most `max_pairs`
    /// pairs (SPEC.md §12.1), encoded; computed from a snapshot (commits go on) and kept for the next asker.
    pub fn snapshot_manifest(
        &self,
        tid: u32,
        version: Option<Version>,
        max_pairs: u64,
    ) -> Result<Arc<Vec<u8>>, ApiError> {
        if !(1..=MAX_SNAPSHOT_PAIRS).contains(&max_pairs) {
            return Err(ApiError::BadRequest(format!(
                "max_pairs must be between 1 and {MAX_SNAPSHOT_PAIRS}"
            )));
        }
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, version)?;
        trie_digest(&store, tid, v)?;
        let key = (tid, v, max_pairs);
        if let Some((_, m)) = self
            .manifests
            .lock()
            .map_err(lock_err)?
            .iter()
            .find(|(k, _)| *k == key)
        {
            return Ok(m.clone());
        }
        let max_entries = letus_verify::Limits::default().max_snapshot_items;
        let m = Arc::new(
            store
                .snapshot_manifest(tid, v, max_pairs, max_chunk_body() as u64, max_entries)?
                .encode(),
        );
        let mut cache = self.manifests.lock().map_err(lock_err)?;
        if cache.len() >= MANIFESTS_CACHED {
            cache.pop_front();
        }
        cache.push_back((key, m.clone()));
        Ok(m)
    }

    /// The chunk of manifest entry `index` (`depth`, `prefix`) of trie `tid` at `version` (SPEC.md §12.3).
    pub fn snapshot_chunk(
        &self,
        tid: u32,
        version: Version,
        index: u32,
        depth: u8,
        prefix: &[u8; 32],
    ) -> Result<Vec<u8>, ApiError> {
        if depth > 64 {
            return Err(ApiError::BadRequest("depth must be at most 64".into()));
        }
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, Some(version))?;
        trie_digest(&store, tid, v)?;
        Ok(store.snapshot_chunk(tid, v, index, depth, prefix, max_chunk_body())?)
    }

    /// Puts pages a bulk load of this node's store built in its page cache ([`letus_core::Store::warm`]);
    /// returns how many.
    pub fn warm(&self, pages: letus_core::CachedPages) -> usize {
        self.store.lock().map_or(0, |s| s.warm(pages))
    }

    /// The keys of trie `tid` whose values differ between versions `from` and `to`, with their values at `to`.
    pub fn changes(
        &self,
        tid: u32,
        from: Version,
        to: Version,
    ) -> Result<ChangesResponse, ApiError> {
        if from > to {
            return Err(ApiError::BadRequest("`from` must not be above `to`".into()));
        }
        let store = self.reader().snapshot();
        let (from, to) = (
            Self::resolve(&store, Some(from))?,
            Self::resolve(&store, Some(to))?,
        );
        trie_digest(&store, tid, to)?;
        // A version's changes are at most one block's writes: the bytes allowed follow the block size allowed.
        let max_bytes = (self.limits.max_body_bytes as u64).max(MIN_CHANGE_BYTES);
        let changes = store.changes(tid, from, to, MAX_CHANGES, max_bytes)?;
        Ok(ChangesResponse {
            tid,
            from,
            to,
            changes: changes
                .into_iter()
                .map(|(k, v)| WriteOp {
                    tid,
                    key: hex(&k),
                    value: v.map(|v| hex(&v)),
                })
                .collect(),
        })
    }

    /// A value and its proof.
    pub fn value(
        &self,
        tid: u32,
        key_hex: &str,
        version: Option<Version>,
    ) -> Result<ValueResponse, ApiError> {
        let key = hex_field(key_hex, "key")?;
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, version)?;
        let digest = trie_digest(&store, tid, v)?;
        let (value, proof) = store.get_proof(tid, v, &key)?;
        Ok(ValueResponse::new(
            tid,
            v,
            &key,
            value.as_deref(),
            &proof,
            digest,
        ))
    }

    /// A batch multi-proof.
    pub fn multi_proof(
        &self,
        tid: u32,
        req: MultiProofRequest,
    ) -> Result<MultiProofResponse, ApiError> {
        let keys = proof_keys(&req, &self.limits)?;
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, req.version)?;
        let digest = trie_digest(&store, tid, v)?;
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let (values, proof) = store.get_multi_proof(tid, v, &refs)?;
        // One proof cannot be paged: an answer whose values would pass the body limit as hex is refused.
        let bytes: usize = values.iter().flatten().map(Vec::len).sum();
        if bytes.saturating_mul(2) > self.limits.max_body_bytes {
            return Err(ApiError::TooLarge(format!(
                "the values of these keys are {bytes} bytes, above max_body_bytes ({}) as hex: ask for fewer keys",
                self.limits.max_body_bytes
            )));
        }
        Ok(MultiProofResponse::new(
            tid, v, &keys, &values, &proof, digest,
        ))
    }

    /// A key's history, newest first, optionally with a proof for each entry: at most `limit` entries, fewer
    /// when their values and proofs pass `max_body_bytes` as hex (the answer's `next` goes on from there).
    pub fn history(
        &self,
        tid: u32,
        key_hex: &str,
        proofs: bool,
        limit: Option<usize>,
        before: Option<Version>,
    ) -> Result<HistoryResponse, ApiError> {
        let key = hex_field(key_hex, "key")?;
        let limit = limit
            .unwrap_or(self.limits.max_history)
            .min(self.limits.max_history);
        let store = self.reader().snapshot();
        if !store.tries().contains(&tid) {
            return Err(ApiError::UnknownTrie(tid));
        }
        // Read a few entries at a time, each read bounded to the value-log bytes whose hex still fits the body
        // limit, and the page ends (with its cursor) once it passes that limit: a key rewritten often with large
        // values would otherwise make one answer (and one read) of `limit` large values.
        let budget = self.limits.max_body_bytes;
        let (mut entries, mut bytes, mut cursor) = (Vec::new(), 0usize, before);
        let next = loop {
            let want = limit.saturating_sub(entries.len()).min(HISTORY_READ_AHEAD);
            let room = (budget.saturating_sub(bytes) / 2) as u64;
            let page = store.history_within(tid, &key, cursor, want, room)?;
            for h in page.entries {
                let (proof_hex, digest) = if proofs {
                    let (_, p) = store.get_proof(tid, h.version, &key)?;
                    (Some(hex(&p.encode())), Some(store.digest(tid, h.version)?))
                } else {
                    (None, None)
                };
                let value = h.value.as_deref().map(hex);
                bytes += value.as_ref().map_or(0, String::len)
                    + proof_hex.as_ref().map_or(0, String::len);
                entries.push(HistoryItem {
                    version: h.version,
                    value,
                    proof_hex,
                    digest,
                });
            }
            if page.next.is_none() || entries.len() >= limit || bytes >= budget {
                break page.next;
            }
            cursor = page.next;
        };
        Ok(HistoryResponse {
            tid,
            key: hex(&key),
            entries,
            next,
        })
    }

    /// The stored raw block.
    pub fn block(&self, version: Version) -> Result<BlockResponse, ApiError> {
        // Located under the lock, read after it: commits append under the same lock, and a read from the cold
        // tier can take as long as the object store does.
        let cut_below = |blocks: &BlockStore| {
            blocks
                .first_version()
                .filter(|&first| blocks.tail_cut() && version < first)
        };
        let (at, cut) = {
            let blocks = self.blocks();
            (blocks.locate(version), cut_below(&blocks))
        };
        let got = match at.map(BlockLocation::read).transpose() {
            Ok(got) => got,
            // The tail was cut past it while it was read: as if it had been cut before.
            Err(_) if cut_below(&self.blocks()).is_some() => None,
            Err(e) => return Err(e.into()),
        };
        let Some(b) = got else {
            if let Some(oldest) = cut.or_else(|| cut_below(&self.blocks())) {
                return Err(ApiError::Pruned { version, oldest });
            }
            return match self.reader().snapshot().oldest_version() {
                Some(oldest) if version < oldest => {
                    Err(ApiError::BeforeSnapshot { version, oldest })
                }
                _ => Err(ApiError::BlockNotFound(version)),
            };
        };
        // A block is appended before its state commit: until that commit is published (and if it never is: a
        // failed commit, a wedged node) it is not the block of `version`.
        if self
            .reader()
            .snapshot()
            .version()
            .is_none_or(|latest| version > latest)
        {
            return Err(ApiError::BlockNotFound(version));
        }
        Ok(BlockResponse {
            version,
            block: hex(&b.block),
        })
    }

    /// History consistency proof between two versions of a trie.
    pub fn consistency(
        &self,
        tid: u32,
        from: Version,
        to: Option<Version>,
    ) -> Result<ConsistencyResponse, ApiError> {
        let store = self.reader().snapshot();
        let to = Self::resolve(&store, to)?;
        if from > to {
            return Err(ApiError::BadRequest("`from` must not be above `to`".into()));
        }
        let proof = store.history_consistency_proof(tid, from, to)?;
        ConsistencyResponse::new(tid, store.digest(tid, from)?, store.digest(tid, to)?, proof)
            .map_err(ApiError::Internal)
    }

    /// History inclusion proof: (version, root) is in the history at `at`.
    pub fn inclusion(
        &self,
        tid: u32,
        version: Version,
        at: Option<Version>,
    ) -> Result<InclusionResponse, ApiError> {
        let store = self.reader().snapshot();
        let at = Self::resolve(&store, at)?;
        if version > at {
            return Err(ApiError::BadRequest(
                "`version` must not be above `at`".into(),
            ));
        }
        let proof = store.history_inclusion_proof(tid, version, at)?;
        InclusionResponse::new(
            tid,
            version,
            store.digest(tid, version)?.root,
            store.digest(tid, at)?,
            proof,
        )
        .map_err(ApiError::Internal)
    }

    /// The frontier of trie `tid`'s history just before `version` (default latest): what `letus import` needs
    /// to carry the history commitment of an export of `version`.
    pub fn frontier(
        &self,
        tid: u32,
        version: Option<Version>,
    ) -> Result<FrontierResponse, ApiError> {
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, version)?;
        trie_digest(&store, tid, v)?;
        Ok(FrontierResponse::new(
            tid,
            v,
            store.history_frontier(tid, v)?,
        ))
    }

    /// Streams the state export of `tid` at `version` into `sink`, in chunks.
    pub fn export(
        &self,
        tid: u32,
        version: Option<Version>,
        mut sink: impl FnMut(Vec<u8>) -> bool,
    ) -> Result<u64, ApiError> {
        let store = self.reader().snapshot();
        let v = Self::resolve(&store, version)?;
        let root = trie_digest(&store, tid, v)?.root;
        // A client that went away ended the stream: nothing to report.
        Ok(crate::export::write_export(&store, tid, v, root, &mut sink)?.unwrap_or(0))
    }

    /// Engine counters and sizes for `/metrics`.
    pub fn stats(&self) -> Result<NodeStats, ApiError> {
        use std::sync::atomic::Ordering::Relaxed;
        let reader = self.reader();
        let block_bytes = self.blocks().disk_bytes();
        Ok(NodeStats {
            engine: reader.metrics(),
            state_bytes: reader.disk_bytes(),
            block_bytes,
            latest: reader.snapshot().latest_version(),
            prune: reader.prune_status(),
            vlog_gc_running: reader.vlog_gc_running(),
            tail_cut: (self.tail_cut.0.load(Relaxed), self.tail_cut.1.load(Relaxed)),
        })
    }

    /// The prune running now, if any, and the oldest version held (`GET /v1/admin/prune`).
    pub fn prune_status(&self) -> crate::api::PruneStatusResponse {
        let reader = self.reader();
        let st = reader.prune_status();
        crate::api::PruneStatusResponse {
            running: st.is_some(),
            merge: st.is_some_and(|s| s.merge),
            elapsed_secs: st.map_or(0.0, |s| s.elapsed.as_secs_f64()),
            pages: st.map_or(0, |s| s.progress.pages),
            depth: st.map_or(0, |s| s.progress.depth),
            level_done: st.map_or(0, |s| s.progress.level_done),
            level_pages: st.map_or(0, |s| s.progress.level_pages),
            vlog_gc_running: reader.vlog_gc_running(),
            oldest: reader.pruned_below(),
        }
    }
}

/// The keys of a multi-proof request, decoded and checked: 1 to `max_proof_keys` of them, each once.
pub(crate) fn proof_keys(
    req: &MultiProofRequest,
    limits: &NodeLimits,
) -> Result<Vec<Vec<u8>>, ApiError> {
    if req.keys.is_empty() {
        return Err(ApiError::BadRequest("`keys` is empty".into()));
    }
    if req.keys.len() > limits.max_proof_keys {
        return Err(ApiError::TooLarge(format!(
            "{} keys; a multi-proof takes 1 to {}",
            req.keys.len(),
            limits.max_proof_keys
        )));
    }
    let keys: Vec<Vec<u8>> = req
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| hex_field(k, &format!("keys[{i}]")))
        .collect::<Result<_, _>>()?;
    let mut seen: Vec<KeyPath> = keys.iter().map(|k| KeyPath::of(k)).collect();
    seen.sort();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(ApiError::BadRequest("the same key appears twice".into()));
    }
    Ok(keys)
}

/// Why `v` is not a version of `store`: before the oldest it holds (it joined from a snapshot), or never written.
fn not_held(store: &Snapshot, v: Version) -> ApiError {
    match store.oldest_version() {
        Some(oldest) if v < oldest => ApiError::BeforeSnapshot { version: v, oldest },
        _ => ApiError::VersionNotFound(v),
    }
}

/// The digest of `tid` at an existing version `v`; a trie that did not exist yet at `v` is `unknown_trie`.
fn trie_digest(store: &Snapshot, tid: u32, v: Version) -> Result<Digest, ApiError> {
    match store.digest(tid, v) {
        Ok(d) => Ok(d),
        Err(letus_core::Error::VersionNotFound(_)) | Err(letus_core::Error::UnknownTrie(_)) => {
            Err(ApiError::UnknownTrie(tid))
        }
        Err(e) => Err(e.into()),
    }
}

fn digests_at(store: &Snapshot, v: Version) -> Result<Vec<Digest>, ApiError> {
    let mut out = Vec::new();
    for tid in store.tries() {
        match store.digest(tid, v) {
            Ok(d) => out.push(d),
            // A trie created after `v` has no digest there.
            Err(letus_core::Error::VersionNotFound(_)) | Err(letus_core::Error::UnknownTrie(_)) => {
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod history_tests {
    use letus_core::Options;

    use super::{Node, NodeLimits};
    use crate::api::{BlockRequest, WriteOp};

    /// A key rewritten with large values is read in several answers once their hex passes the body limit, and
    /// following `next` gives every entry once, newest first.
    /// A node whose body limit is 64 KiB.
    fn small_bodied(dir: &std::path::Path) -> Node {
        let limits = NodeLimits {
            max_body_bytes: 64 << 10,
            ..NodeLimits::default()
        };
        Node::open(dir, Options::default(), "t".into(), limits).unwrap()
    }

    #[test]
    fn history_answers_end_at_the_body_limit_and_next_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let node = small_bodied(dir.path());
        for v in 1..=100u64 {
            let value = letus_verify::hex::encode(&[v as u8; 4096]);
            node.write_block(BlockRequest {
                version: v,
                writes: vec![WriteOp {
                    tid: 0,
                    key: "6b".into(),
                    value: Some(value),
                }],
                block: None,
                access_list: vec![],
            })
            .unwrap();
        }
        let (mut seen, mut answers, mut before) = (Vec::new(), 0, None);
        loop {
            let h = node.history(0, "6b", false, None, before).unwrap();
            answers += 1;
            // 8 KiB of hex a value: each read stops at the records whose hex fits the 64 KiB limit, and the
            // answer ends once it reaches that limit, so at most one entry past it (16, a whole read-ahead, before
            // the reads were bounded).
            assert!(h.entries.len() <= 9, "{}", h.entries.len());
            seen.extend(h.entries.iter().map(|e| e.version));
            match h.next {
                Some(n) => before = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (1..=100).rev().collect::<Vec<_>>());
        assert!(answers >= 7, "{answers}");
    }

    /// A retry of a published version is answered while the writer's lock is held (by a commit, say): the same
    /// block gets its digests, another block 409; a version not yet published still waits for the lock.
    #[test]
    fn a_retry_of_a_published_version_does_not_wait_for_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let node = small_bodied(dir.path());
        let block = |v: u64, value: &str| BlockRequest {
            version: v,
            writes: vec![WriteOp {
                tid: 0,
                key: "6b".into(),
                value: Some(value.into()),
            }],
            block: Some("00".into()),
            access_list: vec![],
        };
        let first = node.write_block(block(1, "01")).unwrap();
        node.write_block(block(2, "02")).unwrap();
        let held = node.store.lock().unwrap();
        std::thread::scope(|s| {
            let retry = s.spawn(|| node.write_block(block(1, "01")));
            let other = s.spawn(|| node.write_block(block(1, "ff")));
            let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !(retry.is_finished() && other.is_finished()) && std::time::Instant::now() < until
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if !(retry.is_finished() && other.is_finished()) {
                drop(held);
                panic!("a retry of a published version waited for the writer's lock");
            }
            let same = retry.join().unwrap().unwrap();
            assert_eq!(same.digests, first.digests);
            assert!(matches!(
                other.join().unwrap(),
                Err(crate::error::ApiError::Conflict(1))
            ));
            let next = s.spawn(|| node.write_block(block(3, "03")));
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!next.is_finished(), "a new version waits for the writer");
            drop(held);
            next.join().unwrap().unwrap();
        });
    }

    /// A multi-proof cannot be paged: one whose values pass the body limit as hex is refused with `too_large`.
    #[test]
    fn a_multi_proof_whose_values_pass_the_body_limit_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let node = small_bodied(dir.path());
        let keys: Vec<String> = (0..10u8).map(|i| format!("{i:02x}")).collect();
        node.write_block(BlockRequest {
            version: 1,
            writes: keys
                .iter()
                .map(|k| WriteOp {
                    tid: 0,
                    key: k.clone(),
                    value: Some(letus_verify::hex::encode(&[7u8; 4096])),
                })
                .collect(),
            block: None,
            access_list: vec![],
        })
        .unwrap();
        let ask = |n: usize| {
            node.multi_proof(
                0,
                crate::api::MultiProofRequest {
                    keys: keys[..n].to_vec(),
                    version: None,
                },
            )
        };
        // 5 values: 40 KiB of hex; 10: 80 KiB.
        assert!(ask(5).is_ok());
        match ask(10) {
            Err(crate::error::ApiError::TooLarge(m)) => assert!(m.contains("fewer keys"), "{m}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
