//! The small interface every compared system implements, and shared helpers.

use std::path::Path;

use anyhow::Result;

/// One block's updates: `(key, value)`, keys unique and sorted (the workload dedups a block, last write wins).
pub type Updates = [(Vec<u8>, Vec<u8>)];

/// A key-value store under test. Every call that returns `Ok` from `apply_block` must have made the block durable
/// (fsync'd), as a blockchain node needs before it acknowledges a block.
pub trait System {
    /// Short name used on the command line and in reports.
    fn name(&self) -> &'static str;

    /// Applies one block as `version` (1, 2, ... strictly increasing), durably, and returns its state root (empty
    /// for systems without one, such as plain RocksDB).
    fn apply_block(&mut self, version: u64, updates: &Updates) -> Result<Vec<u8>>;

    /// The value of `key` at the latest applied version.
    fn get_latest(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The value of `key` at an older `version`; `Ok(None)` when the system keeps no history (unsupported),
    /// `Ok(Some(None))` when the key was absent then.
    fn get_at(&mut self, version: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>>;

    /// A proof of `key`'s value at the latest version, encoded as the system would send it; `Ok(None)` when the
    /// system cannot prove (plain RocksDB).
    fn prove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Makes in-memory write buffers reach disk (memtables, MemIndexTable) so that the writes an update phase
    /// caused are all counted; not a durability point (that is `apply_block`).
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// Empties the system's own read caches, if it can; returns whether it did.
    fn clear_caches(&mut self) -> bool {
        false
    }

    /// Closes and reopens the system on its data with a read-cache budget of `cache_bytes`: the state of a node
    /// that just restarted (nothing of the store in the process's memory).
    fn reopen(&mut self, cache_bytes: usize) -> Result<()>;

    /// The values of `keys` at the latest version, fetched with many reads in flight at once (a block's access
    /// list). letus uses `Store::get_many`; the peers have no such call, so their gets run on
    /// [`PARALLEL_READERS`] threads, as a node would do for them.
    fn get_many(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>>;
}

/// Threads the peers' parallel reads use: the queue depth letus' read pool has by default.
pub const PARALLEL_READERS: usize = 32;

/// `get` applied to every key on [`PARALLEL_READERS`] threads; results in the order of `keys`.
pub fn parallel_gets<F>(keys: &[Vec<u8>], get: F) -> Result<Vec<Option<Vec<u8>>>>
where
    F: Fn(&[u8]) -> Result<Option<Vec<u8>>> + Sync,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let out: Vec<parking_lot::Mutex<Option<Option<Vec<u8>>>>> =
        keys.iter().map(|_| parking_lot::Mutex::new(None)).collect();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..PARALLEL_READERS.min(keys.len()))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(k) = keys.get(i) else { return Ok(()) };
                        *out[i].lock() = Some(get(k)?);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a reader thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(out
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_default())
        .collect())
}

/// A count of the read system calls the calling thread makes from now on (`syscr` in /proc/thread-self/io):
/// every block or page read a store issues to the file system, whether the OS page cache then serves it or the
/// disk does. This is the "I/Os per get" of the cache-size study (a read that the store's own cache answers makes
/// no system call).
pub struct ReadCalls(u64);

impl ReadCalls {
    pub fn start() -> ReadCalls {
        ReadCalls(raw_thread_read_calls())
    }

    /// Read calls since `start`, without those of reading the counter itself: between two readings lie the
    /// calls of one whole reading (the end of the first, the start of the second), measured once per process.
    pub fn since(&self) -> u64 {
        static OWN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let own = *OWN.get_or_init(|| {
            let a = raw_thread_read_calls();
            raw_thread_read_calls().saturating_sub(a)
        });
        raw_thread_read_calls()
            .saturating_sub(self.0)
            .saturating_sub(own)
    }
}

fn raw_thread_read_calls() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/io").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("syscr:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Bytes allocated on disk under `dir` (st_blocks * 512, so preallocated sparse files count only what they use).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

/// `(read_bytes, write_bytes)` of this process from /proc/self/io: bytes that really went to or came from the
/// storage layer (page-cache hits are not reads), all threads included.
pub fn proc_io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

/// This process's resident set (`VmRSS`), bytes.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Drops the OS page cache (root only); returns whether it could.
pub fn drop_os_cache() -> bool {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

#[cfg(feature = "rocksdb-peers")]
/// RocksDB options shared by every RocksDB-backed system, so that they differ only in what they store; and the
/// block cache, so that it can be emptied.
pub fn rocksdb_options(cache_bytes: usize) -> (rocksdb::Options, rocksdb::Cache) {
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.set_compression_type(rocksdb::DBCompressionType::None);
    o.increase_parallelism(2);
    let mut b = rocksdb::BlockBasedOptions::default();
    let cache = rocksdb::Cache::new_lru_cache(cache_bytes);
    b.set_block_cache(&cache);
    b.set_bloom_filter(10.0, false);
    b.set_cache_index_and_filter_blocks(true);
    o.set_block_based_table_factory(&b);
    (o, cache)
}

#[cfg(feature = "rocksdb-peers")]
/// Empties a RocksDB block cache (capacity 0 evicts every unpinned entry) and restores its capacity.
pub fn clear_block_cache(cache: &mut rocksdb::Cache, cache_bytes: usize) {
    cache.set_capacity(0);
    cache.set_capacity(cache_bytes);
}

#[cfg(feature = "rocksdb-peers")]
/// Sync writes: the block is on disk when `write` returns.
pub fn sync_write() -> rocksdb::WriteOptions {
    let mut w = rocksdb::WriteOptions::default();
    w.set_sync(true);
    w
}
