//! Counters the engine keeps: disk reads by kind, cache hits, bytes written, commit times. All are atomics so
//! that parallel readers can count without locks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Monotonic counters since the store was opened.
#[derive(Debug, Default)]
pub struct Counters {
    /// Page records read from index files (one pread each).
    pub page_reads: AtomicU64,
    /// Index blocks read from index files (misses of the block cache).
    pub index_block_reads: AtomicU64,
    /// Value records read from VDLS.
    pub value_reads: AtomicU64,
    /// Bytes read from disk.
    pub bytes_read: AtomicU64,
    /// Bytes written to disk (VDLS, index files, roots log).
    pub bytes_written: AtomicU64,
    /// Page cache hits.
    pub page_cache_hits: AtomicU64,
    /// Page cache misses.
    pub page_cache_misses: AtomicU64,
    /// Index block cache hits.
    pub block_cache_hits: AtomicU64,
    /// Commits.
    pub commits: AtomicU64,
    /// Updates (puts and deletes) committed.
    pub updates: AtomicU64,
    /// Total time spent in commit, in microseconds.
    pub commit_micros: AtomicU64,
    /// `get` calls.
    pub gets: AtomicU64,
}

impl Counters {
    /// Adds `n` to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    /// A plain copy of every counter.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            page_reads: self.page_reads.load(Relaxed),
            index_block_reads: self.index_block_reads.load(Relaxed),
            value_reads: self.value_reads.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            page_cache_hits: self.page_cache_hits.load(Relaxed),
            page_cache_misses: self.page_cache_misses.load(Relaxed),
            block_cache_hits: self.block_cache_hits.load(Relaxed),
            commits: self.commits.load(Relaxed),
            updates: self.updates.load(Relaxed),
            commit_micros: self.commit_micros.load(Relaxed),
            gets: self.gets.load(Relaxed),
        }
    }
}

/// A copy of [`Counters`] at one moment; subtract two to measure an interval.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Snapshot {
    pub page_reads: u64,
    pub index_block_reads: u64,
    pub value_reads: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub page_cache_hits: u64,
    pub page_cache_misses: u64,
    pub block_cache_hits: u64,
    pub commits: u64,
    pub updates: u64,
    pub commit_micros: u64,
    pub gets: u64,
}

impl std::ops::Sub for Snapshot {
    type Output = Snapshot;
    fn sub(self, o: Snapshot) -> Snapshot {
        Snapshot {
            page_reads: self.page_reads - o.page_reads,
            index_block_reads: self.index_block_reads - o.index_block_reads,
            value_reads: self.value_reads - o.value_reads,
            bytes_read: self.bytes_read - o.bytes_read,
            bytes_written: self.bytes_written - o.bytes_written,
            page_cache_hits: self.page_cache_hits - o.page_cache_hits,
            page_cache_misses: self.page_cache_misses - o.page_cache_misses,
            block_cache_hits: self.block_cache_hits - o.block_cache_hits,
            commits: self.commits - o.commits,
            updates: self.updates - o.updates,
            commit_micros: self.commit_micros - o.commit_micros,
            gets: self.gets - o.gets,
        }
    }
}
