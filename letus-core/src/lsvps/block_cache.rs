//! The shared cache of what index-file reads need: decoded index blocks, and open file descriptors.

use std::path::Path;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::index_file::IndexBlock;
use crate::storage::{FileRef, SharedStorage, Storage};

/// Cache key: `(file number, byte offset of the index block in that file)`.
///
/// Invariant the engine keeps: a file number names one file for the life of the cache (numbers are never reused,
/// and a file that is deleted has its blocks evicted with [`super::IndexFile::evict_from_cache`] or simply never
/// asked for again). A reused number could otherwise serve another file's block.
type BlockKey = (u64, u64);

/// Weighs a decoded block by the memory it holds, so that the capacity is a byte budget.
#[derive(Clone, Copy, Debug, Default)]
struct BlockWeighter;

impl Weighter<BlockKey, Arc<IndexBlock>> for BlockWeighter {
    fn weight(&self, _key: &BlockKey, block: &Arc<IndexBlock>) -> u64 {
        // Never zero: zero-weight entries are never evicted by quick_cache.
        block.mem_size() as u64
    }
}

/// Shared cache of decoded index blocks, bounded in bytes, keyed by `(file_no, block offset)`.
///
/// The lookup block of each open file is not in here: it is held by its [`super::IndexFile`] for as long as the file
/// is open. Blocks are immutable (index files are never modified), so a cached block is never stale.
///
/// It also holds the open descriptors of the index files, at most [`MAX_OPEN_FILES`] of them: a store has one
/// index file per flush and never merges them, so keeping every one open would reach the process's descriptor
/// limit (1,024 by default) after about a thousand flushes. A file whose descriptor was evicted is opened again by
/// its next read.
pub struct BlockCache {
    cache: Cache<BlockKey, Arc<IndexBlock>, BlockWeighter>,
    capacity: u64,
    files: Cache<u64, FileRef>,
    /// Where the index files are (re)opened.
    storage: SharedStorage,
}

/// Most index-file descriptors held open at once (what the engine uses of a process's descriptors, with the
/// value-log files, the logs and, in a node, the sockets).
pub const MAX_OPEN_FILES: usize = 256;

impl BlockCache {
    /// A cache holding up to about `capacity_bytes` of decoded blocks (0 caches nothing useful: every block is
    /// read from disk).
    #[cfg(test)]
    pub fn new(capacity_bytes: u64) -> Self {
        Self::with_open_files(crate::storage::local(), capacity_bytes, MAX_OPEN_FILES)
    }

    /// [`BlockCache::new`] over `storage`, holding at most `max_open_files` (at least 1) descriptors open.
    pub fn with_open_files(
        storage: SharedStorage,
        capacity_bytes: u64,
        max_open_files: usize,
    ) -> Self {
        // ~4 KiB per decoded block; the estimate only sizes quick_cache's tables.
        let estimated_items = (capacity_bytes / 4096).clamp(16, 1 << 22) as usize;
        BlockCache {
            cache: Cache::with_weighter(estimated_items, capacity_bytes, BlockWeighter),
            capacity: capacity_bytes,
            files: Cache::new(max_open_files.max(1)),
            storage,
        }
    }

    /// The backend, shared.
    pub(crate) fn shared_storage(&self) -> SharedStorage {
        self.storage.clone()
    }

    /// The backend the index files are opened from.
    pub(crate) fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    /// The open descriptor of index file `file_no` at `path`, opened (read-only) if it is not held. A reader keeps
    /// its `Arc` for the read, so an eviction never closes a descriptor in use.
    pub(crate) fn file(&self, file_no: u64, path: &Path) -> crate::error::Result<FileRef> {
        self.files
            .get_or_insert_with(&file_no, || crate::fsutil::open_read(&*self.storage, path))
    }

    /// Keeps `file` as the open descriptor of index file `file_no`.
    pub(crate) fn keep_file(&self, file_no: u64, file: FileRef) {
        self.files.insert(file_no, file);
    }

    /// The byte budget given to [`BlockCache::new`].
    #[cfg(test)]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of decoded blocks held now.
    pub fn weight(&self) -> u64 {
        self.cache.weight()
    }

    /// Whether no block is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Drops every cached block (used to measure cold reads).
    pub fn clear(&self) {
        self.cache.clear();
    }

    /// The cached block, if any (does not load).
    pub(crate) fn get(&self, file_no: u64, offset: u64) -> Option<Arc<IndexBlock>> {
        self.cache.get(&(file_no, offset))
    }

    /// The cached block, or the one `load` returns, which is then cached. Concurrent callers for the same block
    /// wait for one load instead of reading it twice. The flag is true on a cache hit.
    pub(crate) fn get_or_load<E>(
        &self,
        file_no: u64,
        offset: u64,
        load: impl FnOnce() -> Result<Arc<IndexBlock>, E>,
    ) -> Result<(Arc<IndexBlock>, bool), E> {
        let mut loaded = false;
        let block = self.cache.get_or_insert_with(&(file_no, offset), || {
            loaded = true;
            load()
        })?;
        Ok((block, !loaded))
    }

    /// Drops one block.
    pub(crate) fn remove(&self, file_no: u64, offset: u64) {
        self.cache.remove(&(file_no, offset));
    }

    /// Closes the descriptor held for file `file_no` (a file that was replaced or deleted: an unlinked file's
    /// space comes back only once its last descriptor closes). A reader still holding it keeps it open.
    pub(crate) fn forget_file(&self, file_no: u64) {
        self.files.remove(&file_no);
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("weight", &self.cache.weight())
            .field("len", &self.cache.len())
            .finish()
    }
}
