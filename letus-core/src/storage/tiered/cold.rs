//! The cold tier: an object store ([`ColdStore`]) holding whole sealed files as immutable objects, read back by
//! ranged GETs behind a bounded block cache, with a numbered manifest object that fences a second writer.
//!
//! Object names under the configured prefix `P`:
//!
//! ```text
//! P/manifest/NNNNNNNNNNNNNNNNNNNN   one per change of the cold set, written create-if-absent (the fence)
//! P/data/<epoch>/<relative path>     a file moved to the cold tier by the writer of that epoch
//! ```
//!
//! Fencing (as SlateDB does it): a writer that opens the store reads the highest manifest number `N` and claims
//! epoch `N + 1` by creating manifest `N + 1`; every later change of its cold set creates the next number. A
//! create that finds the name taken means another writer claimed the prefix since: this one is fenced, stops
//! uploading and deleting, and reports it. Objects carry the epoch of their writer in their names, so two writers
//! never overwrite each other's data; the local manifest, not the bucket, says which objects a store uses.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::storage::FileRef;

/// An object store as the cold tier uses it. Implementations: [`crate::storage::s3::S3`] (feature `s3`).
///
/// Every method blocks until the request is done; errors are `io::Error`s (a store that cannot be reached is
/// [`ColdUnavailable`]).
pub trait ColdStore: Send + Sync + fmt::Debug {
    /// Uploads the first `len` bytes of `src` as object `key`, replacing one of that name.
    fn upload(&self, key: &str, src: FileRef, len: u64) -> io::Result<()>;
    /// Bytes `start..end` of object `key`.
    fn get_range(&self, key: &str, start: u64, end: u64) -> io::Result<Vec<u8>>;
    /// The whole object `key`, `None` if there is none.
    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// Creates object `key` if no object has that name: `false` if one has (a conditional put).
    fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> io::Result<bool>;
    /// Deletes object `key` (no error if there is none).
    fn delete(&self, key: &str) -> io::Result<()>;
    /// The keys of every object whose name starts with `prefix/`.
    fn list(&self, prefix: &str) -> io::Result<Vec<String>>;
    /// Where the store is (endpoint and bucket), for status reports: never a credential.
    fn describe(&self) -> String;
}

/// The error inside an `io::Error` when the cold tier cannot serve a request (unreachable, timed out, refused):
/// the node answers `503 tier_unavailable` for it, distinct from a corrupt or missing file.
#[derive(Debug)]
pub struct ColdUnavailable(pub String);

impl fmt::Display for ColdUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the cold tier is unavailable: {}", self.0)
    }
}

impl std::error::Error for ColdUnavailable {}

impl ColdUnavailable {
    /// An `io::Error` carrying a `ColdUnavailable`.
    pub fn io(why: impl Into<String>) -> io::Error {
        io::Error::other(ColdUnavailable(why.into()))
    }
}

/// Whether `e` (or the error it wraps) is a [`ColdUnavailable`].
pub fn is_cold_unavailable(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<ColdUnavailable>().is_some())
}

/// The error when this writer was fenced by another on the same prefix.
pub(crate) fn fenced() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "fenced: another writer claimed this object-store prefix; this store no longer writes to it",
    )
}

/// Requests sent to the object store, by kind, and the block cache's use.
#[derive(Debug, Default)]
pub struct ColdCounters {
    /// Ranged GETs (block reads and verification reads).
    pub gets: AtomicU64,
    /// Bytes received by GETs.
    pub get_bytes: AtomicU64,
    /// Uploads (whole files) and manifest puts.
    pub puts: AtomicU64,
    /// Bytes uploaded.
    pub put_bytes: AtomicU64,
    /// Deletes.
    pub deletes: AtomicU64,
    /// Lists.
    pub lists: AtomicU64,
    /// Failed requests.
    pub errors: AtomicU64,
    /// Block reads served by the cache.
    pub cache_hits: AtomicU64,
    /// Block reads that went to the store.
    pub cache_misses: AtomicU64,
}

impl ColdCounters {
    /// Every request sent so far.
    pub fn requests(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
            + self.puts.load(Ordering::Relaxed)
            + self.deletes.load(Ordering::Relaxed)
            + self.lists.load(Ordering::Relaxed)
    }
}

type BlockKey = (u64, u64);

#[derive(Clone, Copy, Debug, Default)]
struct BlockWeighter;

impl Weighter<BlockKey, Arc<[u8]>> for BlockWeighter {
    fn weight(&self, _: &BlockKey, b: &Arc<[u8]>) -> u64 {
        // Never zero (zero-weight entries are never evicted); the key and the Arc's header count too.
        b.len() as u64 + 48
    }
}

/// One read's fetch of the blocks it claimed: done once they are cached, or the fetch failed.
#[derive(Debug, Default)]
struct Flight {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Flight {
    fn wait(&self) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = self.cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The blocks a read claimed, released when it is dropped (fetched and cached, or failed): their waiters wake.
struct Claim<'a> {
    tier: &'a ColdTier,
    keys: Vec<BlockKey>,
    flight: Arc<Flight>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        {
            let mut inflight = self.tier.inflight.lock().unwrap_or_else(|e| e.into_inner());
            for k in &self.keys {
                if inflight
                    .get(k)
                    .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
                {
                    inflight.remove(k);
                }
            }
        }
        *self.flight.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.flight.cv.notify_all();
    }
}

/// The cold tier of one store: the object store, this writer's epoch and fence, the block cache.
pub(crate) struct ColdTier {
    pub store: Arc<dyn ColdStore>,
    pub prefix: String,
    /// The next manifest number this writer creates; its epoch is the first one it created.
    next_manifest: Mutex<u64>,
    /// This writer's epoch, 0 until it has claimed the prefix (at open, or at its first cold change if the store
    /// could not be reached at open).
    epoch: AtomicU64,
    /// The first line of every manifest object this writer creates (its epoch's claim and a random nonce): how it
    /// recognises an object it created when the answer to the request was lost.
    writer: String,
    fenced: AtomicBool,
    cache: Cache<BlockKey, Arc<[u8]>, BlockWeighter>,
    /// Blocks being fetched now, each with the fetch that other readers of it wait for.
    inflight: Mutex<HashMap<BlockKey, Arc<Flight>>>,
    pub block_bytes: u64,
    pub counters: Arc<ColdCounters>,
}

impl fmt::Debug for ColdTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColdTier")
            .field("store", &self.store.describe())
            .field("prefix", &self.prefix)
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

fn manifest_key(prefix: &str, n: u64) -> String {
    format!("{prefix}/manifest/{n:020}")
}

/// Most cache blocks one ranged GET fetches (16 MiB of 256 KiB blocks): bounds a GET's memory.
pub const MAX_BLOCKS_PER_GET: u64 = 64;

/// Most cached blocks between two missing ones that a read fetches again to make one GET of two: a GET costs
/// about as much for 256 KiB as for 1 MiB here, and a second round trip costs more.
pub const MAX_GAP_BLOCKS: u64 = 2;

impl ColdTier {
    /// The cold tier of `store` under `prefix`, not yet claimed (no request is sent).
    pub fn new(
        store: Arc<dyn ColdStore>,
        prefix: String,
        cache_bytes: u64,
        block_bytes: u64,
    ) -> ColdTier {
        let est = usize::try_from(cache_bytes / block_bytes.max(1)).unwrap_or(usize::MAX);
        ColdTier {
            store,
            prefix,
            next_manifest: Mutex::new(0),
            epoch: AtomicU64::new(0),
            writer: writer_line(),
            fenced: AtomicBool::new(false),
            cache: Cache::with_weighter(est.clamp(16, 1 << 20), cache_bytes.max(1), BlockWeighter),
            inflight: Mutex::default(),
            block_bytes: block_bytes.max(4096),
            counters: Arc::new(ColdCounters::default()),
        }
    }

    /// This writer's epoch (0: not claimed yet).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Claims the prefix: the next manifest number becomes this writer's epoch, returned. `body` is what the
    /// claiming manifest object holds (the store's cold set). Reading cold objects needs no claim; writing does.
    pub fn claim(&self, body: impl Fn(u64) -> Vec<u8>) -> io::Result<u64> {
        let mut next = self.next_manifest.lock().unwrap_or_else(|e| e.into_inner());
        if self.epoch() != 0 {
            return Ok(self.epoch());
        }
        let c = &*self.counters;
        let overflow =
            || io::Error::new(io::ErrorKind::InvalidData, "manifest numbers are exhausted");
        let mut n = latest_manifest(&*self.store, &self.prefix, c)?
            .checked_add(1)
            .ok_or_else(overflow)?;
        loop {
            if create_manifest(&*self.store, &self.prefix, n, &self.writer, body(n), c)? {
                break;
            }
            // Another writer claimed `n` at the same moment: the later claim wins, so try the next number.
            n = n.checked_add(1).ok_or_else(overflow)?;
        }
        *next = n.saturating_add(1);
        self.epoch.store(n, Ordering::Release);
        Ok(n)
    }

    /// Whether another writer has claimed the prefix since this one did.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Relaxed)
    }

    /// Records a change of the cold set as the next manifest object; fails (and fences this writer for good) if
    /// another writer created that number first. Called before the local manifest switches, so a writer that was
    /// fenced never makes a change another writer could not see.
    pub fn record_change(&self, body: impl FnOnce(u64) -> Vec<u8>) -> io::Result<()> {
        if self.is_fenced() {
            return Err(fenced());
        }
        let mut next = self.next_manifest.lock().unwrap_or_else(|e| e.into_inner());
        if self.epoch() == 0 {
            return Err(io::Error::other(
                "the cold tier's prefix is not claimed yet",
            ));
        }
        let created = create_manifest(
            &*self.store,
            &self.prefix,
            *next,
            &self.writer,
            body(*next),
            &self.counters,
        )?;
        if !created {
            self.fenced.store(true, Ordering::Relaxed);
            return Err(fenced());
        }
        // Keep the bucket tidy: the manifest two changes back is no longer anybody's latest.
        if *next >= 2 {
            self.counters.deletes.fetch_add(1, Ordering::Relaxed);
            let _ = self.store.delete(&manifest_key(&self.prefix, *next - 2));
        }
        *next += 1;
        Ok(())
    }

    /// The object key of `rel` written by this writer.
    pub fn data_key(&self, rel: &str) -> String {
        format!("{}/data/{}/{rel}", self.prefix, self.epoch())
    }

    /// The epoch in the name of data object `key`, if it is one of this prefix's.
    pub fn epoch_of(&self, key: &str) -> Option<u64> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix("/data/")?;
        rest.split('/').next()?.parse().ok()
    }

    /// Reads `buf.len()` bytes at `offset` of object `key` (of `size` bytes, cache id `file_id`) through the
    /// block cache. The blocks of the range that are not cached are fetched with one ranged GET per group of
    /// missing blocks (gaps of at most [`MAX_GAP_BLOCKS`] cached blocks are fetched again rather than split the
    /// GET; at most [`MAX_BLOCKS_PER_GET`] blocks each): a record that straddles a block boundary costs one GET,
    /// not two. A block another reader is fetching is waited for, not fetched twice: the engine reads the
    /// records of a DeltaPage chain concurrently, and they often share a block.
    pub fn read(
        &self,
        file_id: u64,
        key: &str,
        size: u64,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= size)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        if buf.is_empty() {
            return Ok(());
        }
        let bs = self.block_bytes;
        let (first, last) = (offset / bs, (end - 1) / bs);
        let slot = |b: u64| usize::try_from(b - first).unwrap_or(usize::MAX);
        let mut blocks: Vec<Option<Arc<[u8]>>> = (first..=last)
            .map(|b| self.cache.get(&(file_id, b)))
            .collect();
        // The missing blocks this read fetches (claimed: other readers of them wait), and those another read is
        // fetching now. Checked again under the lock: a fetch caches its blocks before it releases its claim.
        let flight = Arc::new(Flight::default());
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        {
            let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            for b in first..=last {
                if blocks[slot(b)].is_some() {
                    continue;
                }
                if let Some(v) = self.cache.get(&(file_id, b)) {
                    blocks[slot(b)] = Some(v);
                } else if let Some(f) = inflight.get(&(file_id, b)) {
                    theirs.push((b, f.clone()));
                } else {
                    inflight.insert((file_id, b), flight.clone());
                    mine.push(b);
                }
            }
        }
        let hits = (last - first + 1) - (mine.len() + theirs.len()) as u64;
        self.counters.cache_hits.fetch_add(hits, Ordering::Relaxed);
        self.counters
            .cache_misses
            .fetch_add(mine.len() as u64, Ordering::Relaxed);
        // Own blocks first, then wait: a read never waits while it holds a claim, so two reads cannot wait for
        // each other. An error releases the claims (`Claim::drop`), and their waiters fetch for themselves.
        let claim = Claim {
            tier: self,
            keys: mine.iter().map(|&b| (file_id, b)).collect(),
            flight,
        };
        let mut i = 0;
        while i < mine.len() {
            let (lo, mut hi, mut j) = (mine[i], mine[i], i + 1);
            while j < mine.len()
                && mine[j] - hi <= MAX_GAP_BLOCKS + 1
                && mine[j] - lo < MAX_BLOCKS_PER_GET
            {
                hi = mine[j];
                j += 1;
            }
            let data = self.fetch_blocks(key, size, lo, hi + 1)?;
            for (k, d) in data.into_iter().enumerate() {
                let b = lo + k as u64;
                if mine[i..j].binary_search(&b).is_ok() {
                    self.cache.insert((file_id, b), d.clone());
                }
                blocks[slot(b)].get_or_insert(d);
            }
            i = j;
        }
        drop(claim);
        for (b, f) in theirs {
            if blocks[slot(b)].is_some() {
                continue; // fetched again inside one of this read's GETs
            }
            f.wait();
            let d = self.block(file_id, key, size, b)?;
            blocks[slot(b)] = Some(d);
        }
        for (i, data) in blocks.into_iter().enumerate() {
            let data = data.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            let block_start = (first + i as u64) * bs;
            let (lo, hi) = (
                offset.max(block_start),
                end.min(block_start + data.len() as u64),
            );
            if lo >= hi {
                continue;
            }
            let src = usize::try_from(lo - block_start).unwrap_or(usize::MAX);
            let dst = usize::try_from(lo - offset).unwrap_or(usize::MAX);
            let n = usize::try_from(hi - lo).unwrap_or(usize::MAX);
            buf[dst..dst + n].copy_from_slice(&data[src..src + n]);
        }
        Ok(())
    }

    /// Block `b` of object `key` after waiting for another read's fetch of it: from the cache, or, if that fetch
    /// failed (or the block was evicted already), fetched here, by one of the readers that waited.
    fn block(&self, file_id: u64, key: &str, size: u64, b: u64) -> io::Result<Arc<[u8]>> {
        let k = (file_id, b);
        loop {
            let flight = Arc::new(Flight::default());
            let other = {
                let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(v) = self.cache.get(&k) {
                    self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(v);
                }
                match inflight.get(&k) {
                    Some(f) => Some(f.clone()),
                    None => {
                        inflight.insert(k, flight.clone());
                        None
                    }
                }
            };
            let Some(other) = other else {
                let _claim = Claim {
                    tier: self,
                    keys: vec![k],
                    flight,
                };
                self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
                let d = self.fetch_blocks(key, size, b, b + 1)?.pop();
                let d = d.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
                self.cache.insert(k, d.clone());
                return Ok(d);
            };
            other.wait();
        }
    }

    /// Blocks `from..to` of object `key` with one ranged GET (not cached here: the caller owns their
    /// placeholders).
    fn fetch_blocks(&self, key: &str, size: u64, from: u64, to: u64) -> io::Result<Vec<Arc<[u8]>>> {
        let bs = self.block_bytes;
        let start = from * bs;
        let end = (to * bs).min(size);
        let data = self.get_range(key, start, end)?;
        if data.len() as u64 != end - start {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "object {key} returned {} bytes for range {start}..{end}",
                    data.len()
                ),
            ));
        }
        Ok(data
            .chunks(usize::try_from(bs).unwrap_or(usize::MAX))
            .map(Arc::from)
            .collect())
    }

    /// A ranged GET, counted.
    pub fn get_range(&self, key: &str, start: u64, end: u64) -> io::Result<Vec<u8>> {
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        match self.store.get_range(key, start, end) {
            Ok(b) => {
                self.counters
                    .get_bytes
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                Ok(b)
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Uploads `src` as `key`, counted.
    pub fn upload(&self, key: &str, src: FileRef, len: u64) -> io::Result<()> {
        if self.is_fenced() {
            return Err(fenced());
        }
        self.counters.puts.fetch_add(1, Ordering::Relaxed);
        self.counters.put_bytes.fetch_add(len, Ordering::Relaxed);
        self.store.upload(key, src, len).inspect_err(|_| {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Deletes `key`, counted; refused once fenced.
    pub fn delete(&self, key: &str) -> io::Result<()> {
        if self.is_fenced() {
            return Err(fenced());
        }
        self.counters.deletes.fetch_add(1, Ordering::Relaxed);
        self.store.delete(key).inspect_err(|_| {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Lists the data objects of this prefix, counted.
    pub fn list_data(&self) -> io::Result<Vec<String>> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.store.list(&format!("{}/data", self.prefix))
    }

    /// Drops the cached blocks of `file_id` (the file left the cold tier).
    pub fn forget(&self, file_id: u64, size: u64) {
        for b in 0..size.div_ceil(self.block_bytes) {
            self.cache.remove(&(file_id, b));
        }
    }

    /// Bytes held by the block cache.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.weight()
    }
}

/// `writer <epoch-independent random nonce>`: the first line of this writer's manifest objects.
fn writer_line() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!("{}:{t}:{:p}", std::process::id(), &t);
    let h = letus_verify::hash::value_hash(seed.as_bytes());
    format!("writer {}\n", letus_verify::hex::encode(&h.0[..16]))
}

/// Creates manifest object `n` (its body: `writer`, then `body`) if no object has that number. `true` if the
/// object there now is this writer's, whether this request created it or an earlier attempt whose answer was lost
/// (a timeout, a 5xx after the write, a retried request meeting its own object); `false` if another writer's is.
fn create_manifest(
    store: &dyn ColdStore,
    prefix: &str,
    n: u64,
    writer: &str,
    body: Vec<u8>,
    c: &ColdCounters,
) -> io::Result<bool> {
    let key = manifest_key(prefix, n);
    let mut bytes = writer.as_bytes().to_vec();
    bytes.extend_from_slice(&body);
    c.puts.fetch_add(1, Ordering::Relaxed);
    let answer = store.put_if_absent(&key, bytes);
    if let Ok(true) = answer {
        return Ok(true);
    }
    if answer.is_err() {
        c.errors.fetch_add(1, Ordering::Relaxed);
    }
    c.gets.fetch_add(1, Ordering::Relaxed);
    match (store.get(&key), answer) {
        (Ok(Some(b)), _) => Ok(b.starts_with(writer.as_bytes())),
        (_, Err(e)) => Err(e),
        (Ok(None), Ok(_)) => Ok(false),
        (Err(e), Ok(_)) => Err(e),
    }
}

fn latest_manifest(store: &dyn ColdStore, prefix: &str, c: &ColdCounters) -> io::Result<u64> {
    c.lists.fetch_add(1, Ordering::Relaxed);
    let keys = store.list(&format!("{prefix}/manifest"))?;
    Ok(keys
        .iter()
        .filter_map(|k| k.rsplit('/').next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An object held in memory that records the ranges asked for: this tests how reads are split into GETs
    /// (the cold tier against a real S3 server is in `tests/tiering.rs`).
    #[derive(Debug, Default)]
    struct Recording {
        object: Vec<u8>,
        ranges: Mutex<Vec<(u64, u64)>>,
        /// How long each GET takes (so that concurrent reads overlap).
        delay: Duration,
        /// Whether the first GET fails (after the delay), as a store that cannot be reached.
        fail_first: AtomicBool,
    }

    impl ColdStore for Recording {
        fn upload(&self, _: &str, _: FileRef, _: u64) -> io::Result<()> {
            Err(io::Error::other("read-only"))
        }
        fn get_range(&self, _: &str, start: u64, end: u64) -> io::Result<Vec<u8>> {
            std::thread::sleep(self.delay);
            if self.fail_first.swap(false, Ordering::SeqCst) {
                return Err(ColdUnavailable::io("refused"));
            }
            self.ranges.lock().unwrap().push((start, end));
            Ok(self.object[start as usize..end as usize].to_vec())
        }
        fn get(&self, _: &str) -> io::Result<Option<Vec<u8>>> {
            Ok(Some(self.object.clone()))
        }
        fn put_if_absent(&self, _: &str, _: Vec<u8>) -> io::Result<bool> {
            Ok(false)
        }
        fn delete(&self, _: &str) -> io::Result<()> {
            Ok(())
        }
        fn list(&self, _: &str) -> io::Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn describe(&self) -> String {
            "memory".into()
        }
    }

    #[test]
    fn a_read_costs_one_get_per_run_of_missing_blocks() {
        let object: Vec<u8> = (0..10 * 4096u32).map(|i| (i % 251) as u8).collect();
        let size = object.len() as u64;
        let store = Arc::new(Recording {
            object: object.clone(),
            ..Recording::default()
        });
        let tier = ColdTier::new(store.clone(), "p".into(), 1 << 20, 4096);
        let read = |offset: u64, len: usize| {
            let mut buf = vec![0; len];
            tier.read(7, "k", size, &mut buf, offset).unwrap();
            assert_eq!(buf, object[offset as usize..offset as usize + len]);
        };
        let took = |want: &[(u64, u64)]| {
            assert_eq!(std::mem::take(&mut *store.ranges.lock().unwrap()), want);
        };
        // Straddling blocks 0 and 1: one GET of both.
        read(4000, 200);
        took(&[(0, 8192)]);
        // Cached now: no GET.
        read(100, 8000);
        took(&[]);
        // Blocks 2..=5 with 3 cached in between: one GET of all four (a short gap is fetched again).
        read(3 * 4096, 10);
        took(&[(12288, 16384)]);
        read(2 * 4096 + 5, 4 * 4096 - 10);
        took(&[(8192, 24576)]);
        // A gap of two cached blocks is fetched again inside one GET; a gap of three splits the GET.
        tier.cache.clear();
        read(4096, 2 * 4096);
        took(&[(4096, 12288)]);
        read(0, 4 * 4096);
        took(&[(0, 16384)]);
        tier.cache.clear();
        read(4096, 3 * 4096);
        took(&[(4096, 16384)]);
        read(0, 5 * 4096);
        took(&[(0, 4096), (16384, 20480)]);
        // The short last block, and an empty read.
        read(size - 3, 3);
        took(&[(36864, 40960)]);
        read(size, 0);
        took(&[]);
        let mut past = vec![0; 2];
        assert!(tier.read(7, "k", size, &mut past, size - 1).is_err());
        assert_eq!(tier.counters.gets.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn concurrent_reads_of_one_block_make_one_get() {
        let object: Vec<u8> = (0..4 * 4096u32).map(|i| (i % 253) as u8).collect();
        let size = object.len() as u64;
        let store = Arc::new(Recording {
            object: object.clone(),
            delay: Duration::from_millis(50),
            ..Recording::default()
        });
        let tier = ColdTier::new(store.clone(), "p".into(), 1 << 20, 4096);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (tier, object) = (&tier, &object);
                s.spawn(move || {
                    let offset = 4096 + t * 100;
                    let mut buf = vec![0; 64];
                    tier.read(7, "k", size, &mut buf, offset).unwrap();
                    assert_eq!(buf, object[offset as usize..offset as usize + 64]);
                });
            }
        });
        assert_eq!(*store.ranges.lock().unwrap(), [(4096, 8192)]);
    }

    #[test]
    fn a_failed_get_leaves_its_waiters_to_fetch_for_themselves() {
        let object: Vec<u8> = (0..4 * 4096u32).map(|i| (i % 241) as u8).collect();
        let size = object.len() as u64;
        let store = Arc::new(Recording {
            object: object.clone(),
            delay: Duration::from_millis(50),
            fail_first: AtomicBool::new(true),
            ..Recording::default()
        });
        let tier = ColdTier::new(store.clone(), "p".into(), 1 << 20, 4096);
        let failed = std::thread::scope(|s| {
            let readers: Vec<_> = (0..4)
                .map(|_| {
                    let (tier, object) = (&tier, &object);
                    s.spawn(move || {
                        let mut buf = vec![0; 10];
                        let r = tier.read(7, "k", size, &mut buf, 5000);
                        if r.is_ok() {
                            assert_eq!(buf, object[5000..5010]);
                        }
                        r.is_err()
                    })
                })
                .collect();
            readers
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&failed| failed)
                .count()
        });
        // Only the read whose GET failed fails; one of the others fetched the block, and the rest waited for it.
        assert_eq!(failed, 1);
        assert_eq!(*store.ranges.lock().unwrap(), [(4096, 8192)]);
    }
}
