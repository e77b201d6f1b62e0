//! The shared cache of decoded index blocks.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::index_file::IndexBlock;

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
pub struct BlockCache {
    cache: Cache<BlockKey, Arc<IndexBlock>, BlockWeighter>,
    capacity: u64,
}

impl BlockCache {
    /// A cache holding up to about `capacity_bytes` of decoded blocks (0 caches nothing useful: every block is
    /// read from disk).
    pub fn new(capacity_bytes: u64) -> Self {
        // ~4 KiB per decoded block; the estimate only sizes quick_cache's tables.
        let estimated_items = (capacity_bytes / 4096).clamp(16, 1 << 22) as usize;
        BlockCache {
            cache: Cache::with_weighter(estimated_items, capacity_bytes, BlockWeighter),
            capacity: capacity_bytes,
        }
    }

    /// The byte budget given to [`BlockCache::new`].
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of decoded blocks held now.
    pub fn weight(&self) -> u64 {
        self.cache.weight()
    }

    /// Number of blocks held now.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether no block is held.
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
