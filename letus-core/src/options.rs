//! Store options. Defaults are chosen from the measurements in docs/BENCHMARKS.md.

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct Options {
    /// The engine's memory budget in bytes: decoded pages, index blocks and the MemIndexTable together. The
    /// engine splits it ([`Options::memory_split`]); the state itself may be far larger, pages that do not fit are
    /// read back from the index files.
    pub memory_budget_bytes: u64,
    /// `Td`: slot updates after which a page's DeltaPage is frozen and a new one starts.
    pub delta_threshold: u32,
    /// `Tb`: slot updates after which a page writes a BasePage checkpoint.
    pub base_threshold: u32,
    /// Most DeltaPage records chained after a BasePage. A page changed by few updates per flush interval would
    /// otherwise chain one small DeltaPage per index file until `Tb` updates accumulate, and a cold load would
    /// read them all; when the chain is full, the next change writes a BasePage instead.
    pub max_delta_chain: u32,
    /// Bytes of page records held in the MemIndexTable before it is flushed as an index file (part of the memory
    /// budget, at most a quarter of it). While a full table is written to its index file in the background, the
    /// next one fills, so for that time the two hold up to twice this; the budget counts it once. (Reserving twice
    /// was measured at 10M keys with the 2 GiB default: the page cache fell just short of the state, commits ran
    /// at 64.4k updates/s instead of 70k and the peak RSS rose; halving this instead cost 532 bytes written per
    /// update instead of 445.)
    pub memtable_bytes: usize,
    /// Most trie-update and publish time (milliseconds) of the commits after the newest index file: past it the
    /// MemIndexTable is flushed even if it is not full. A recovery after a crash replays those commits, at about
    /// the speed they ran, so this bounds the restart time by design. Lower values flush more often (more, smaller
    /// index files; more DeltaPages frozen early, so more bytes written); `u64::MAX` bounds the replay only by
    /// `memtable_bytes` (the default: an embedder that writes large blocks trades a longer restart for fewer bytes
    /// written; `letus serve` sets 500).
    pub max_replay_millis: u64,
    /// Most index-file descriptors kept open (evicted ones are reopened by their next read). `0`: a quarter of
    /// the process's descriptor limit (`/proc/self/limits`), between 8 and 256.
    pub max_open_index_files: usize,
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
    /// Read a DeltaPage chain's records all at once when a page is loaded, instead of one after the other as
    /// each record names its predecessor. For storage where a read takes milliseconds (a cold tier on an object
    /// store): the chain's records are found through the index blocks alone, then read concurrently, so loading
    /// a page costs about two read latencies instead of one per record. Off by default: on a local disk the
    /// records are read faster than threads are started.
    pub prefetch_delta_chains: bool,
    /// A bulk load ([`crate::Store::bulk_load`]) leaves the pages it builds in the page cache of the store it
    /// returns, up to the cache's share of the budget, holding them meanwhile: for a store used right away (a
    /// joined node catching up), whose first commits then find them there. Off by default: an import that closes
    /// the store at once would only hold the memory for nothing.
    pub bulk_load_keeps_pages: bool,
    /// Keep the state of only the newest `n` versions: after each flush, a background thread prunes the pages of
    /// older versions ([`crate::Store::prune`]). `None` (the default) keeps every version (an archive); `Some(0)`
    /// keeps only the latest state. The pruner also runs value-log GC after each prune (see `vlog_gc_garbage`).
    pub keep_versions: Option<u64>,
    /// With `keep_versions`: the background pruner prunes once the index files below the window hold this many
    /// times the bytes of the pages kept from before it (about one copy of the state's pages). Lower keeps less
    /// history on disk and costs more pruning work; `0.0` prunes as soon as any index file lies below the window
    /// (above 0, at least 1 MiB of index files is pruned at once). The default, 2.0, was chosen by measurement
    /// (docs/BENCHMARKS.md, Pruning): against 1.0 it kept 0.87-0.99 of the archive's commit rate instead of
    /// 0.87-0.98 and wrote 1.52-1.55 times the chain's value bytes instead of 1.70-1.77 (GC runs after each
    /// prune), for up to one more copy of the state's pages on disk between prunes.
    pub prune_garbage_ratio: f64,
    /// Value-log GC ([`crate::Store::vlog_gc`]): a sealed value-log file whose bytes are at least this fraction
    /// garbage a compaction can give back (records neither the newest state nor a version from the prune
    /// boundary on reads) is compacted to the records those versions read (on the pruner's thread; commits do
    /// nothing for it). Files with nothing live are deleted whatever this is. `1.0` compacts nothing. A
    /// threshold `g` bounds the sealed files to `1 / (1 - g)` times the bytes the retained versions read (the
    /// default `0.33`: 1.5x; with a window, the live bytes plus the values overwritten within it), and each
    /// compaction of a file copies at most `1 - g` of it, so a byte that outlives every compaction of its file
    /// is copied at most `(1 - g) / g` times (about twice at the default; `0.5`: once).
    pub vlog_gc_garbage: f64,
    /// Bytes of the memory budget given to the latest-value index (`store/latest_index.rs`): where each key's
    /// newest value record is, so that a `get` (or `get_many`) at the latest version reads one value record and
    /// walks no page, however little of the trie is cached. About 12 bytes a slot; with 1.5 slots a key it
    /// answers nearly every key. `0` (the default) turns it off: proofs, commits and reads at older versions need
    /// the pages anyway, so it pays only for an embedder whose reads are mostly plain gets of the latest state
    /// (block execution), and at the default budget it takes memory the pages of a state that just fits would
    /// use (10M keys, 2 GiB: 56.5k committed updates/s with 128 MiB of index against 69.0k without, docs/BENCHMARKS.md).
    /// At most the budget less the MemIndexTable's share (the page cache may then be tiny: a store whose reads
    /// are gets at the latest version needs little else).
    pub latest_index_bytes: u64,
    /// Where the store's files live: the local file system ([`crate::storage::local`]) unless a test or an
    /// embedder passes another backend, such as [`crate::storage::faulty::Faulty`].
    pub storage: crate::storage::SharedStorage,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_budget_bytes: 2 << 30,
            delta_threshold: 128,
            base_threshold: 256,
            max_delta_chain: 8,
            memtable_bytes: 64 << 20,
            max_replay_millis: u64::MAX,
            max_open_index_files: 0,
            vdls_file_bytes: 256 << 20,
            sync: true,
            max_key_bytes: 65_535,
            max_value_bytes: 16 << 20,
            read_threads: 32,
            prefetch_delta_chains: false,
            bulk_load_keeps_pages: false,
            keep_versions: None,
            prune_garbage_ratio: 2.0,
            vlog_gc_garbage: 0.33,
            latest_index_bytes: 0,
            storage: crate::storage::local(),
        }
    }
}

/// How the memory budget is spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemorySplit {
    /// Decoded pages.
    pub page_cache_bytes: u64,
    /// Index blocks of the index files.
    pub block_cache_bytes: u64,
    /// The MemIndexTable's flush threshold.
    pub memtable_bytes: usize,
    /// The latest-value index (see [`Options::latest_index_bytes`]).
    pub latest_index_bytes: u64,
}

impl Options {
    /// [`Options::max_open_index_files`] resolved: the setting, or a quarter of the soft descriptor limit.
    pub fn open_index_files(&self) -> usize {
        if self.max_open_index_files > 0 {
            return self.max_open_index_files;
        }
        let soft = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3))
                    .and_then(|n| n.parse::<usize>().ok())
            })
            .unwrap_or(1024);
        (soft / 4).clamp(8, crate::lsvps::MAX_OPEN_FILES)
    }

    /// The split of [`Options::memory_budget_bytes`]: the MemIndexTable its `memtable_bytes` (at most a quarter of
    /// the budget), the latest-value index its `latest_index_bytes` (at most what is left), then 1/32 of the
    /// rest for index blocks (a page found through the in-memory lookup block needs at most one index block; the
    /// hot ones are few) and everything else for decoded pages, which is what keeps commits and reads off the
    /// disk.
    pub fn memory_split(&self) -> MemorySplit {
        let budget = self.memory_budget_bytes;
        let memtable = (self.memtable_bytes as u64).min(budget / 4);
        let latest = self.latest_index_bytes.min(budget - memtable);
        let rest = budget - memtable - latest;
        let block = rest / 32;
        MemorySplit {
            page_cache_bytes: rest - block,
            block_cache_bytes: block,
            memtable_bytes: usize::try_from(memtable).unwrap_or(usize::MAX).max(1),
            latest_index_bytes: latest,
        }
    }
}
