//! Store options. Defaults are chosen from the measurements in docs/BENCHMARKS.md.

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes of decoded pages kept in the page cache.
    pub page_cache_bytes: u64,
    /// Bytes of index blocks kept in the block cache.
    pub block_cache_bytes: u64,
    /// `Td`: slot updates after which a page's DeltaPage is frozen and a new one starts.
    pub delta_threshold: u32,
    /// `Tb`: slot updates after which a page writes a BasePage checkpoint.
    pub base_threshold: u32,
    /// Most DeltaPage records chained after a BasePage. A page changed by few updates per flush interval would
    /// otherwise chain one small DeltaPage per index file until `Tb` updates accumulate, and a cold load would
    /// read them all; when the chain is full, the next change writes a BasePage instead.
    pub max_delta_chain: u32,
    /// Bytes of page records held in the MemIndexTable before it is flushed as an index file.
    pub memtable_bytes: usize,
    /// Size after which the value log starts a new data file.
    pub vdls_file_bytes: u64,
    /// fsync at every commit. Turning it off loses the durability guarantee; only for experiments.
    pub sync: bool,
    /// Longest key accepted.
    pub max_key_bytes: usize,
    /// Longest value accepted.
    pub max_value_bytes: usize,
    /// Threads that `get_many` uses to issue page and value reads concurrently. Reads wait on the device, not the
    /// CPU, so this is larger than the number of cores: it is the I/O queue depth a block's access list can use.
    pub read_threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_cache_bytes: 512 << 20,
            block_cache_bytes: 64 << 20,
            delta_threshold: 128,
            base_threshold: 256,
            max_delta_chain: 8,
            memtable_bytes: 64 << 20,
            vdls_file_bytes: 256 << 20,
            sync: true,
            max_key_bytes: 65_535,
            max_value_bytes: 16 << 20,
            read_threads: 32,
        }
    }
}
