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
    /// Rebase DeltaPages written (each one in place of a BasePage; FORMAT.md §2.1).
    pub rebase_pages: AtomicU64,
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
    /// Gets answered by the latest-value index (one value read, no page walked).
    pub latest_index_hits: AtomicU64,
    /// Leaves the latest-value index's background fill inserted since the open.
    pub latest_index_filled: AtomicU64,
    /// Prunes that removed index files.
    pub prunes: AtomicU64,
    /// Index files removed by prunes.
    pub pruned_files: AtomicU64,
    /// Bytes of the index files removed by prunes.
    pub pruned_bytes: AtomicU64,
    /// Pages written to base files by prunes (the progress of a prune running).
    pub pruned_pages: AtomicU64,
    /// Background prunes that failed (and will be tried again).
    pub prune_errors: AtomicU64,
    /// Value-log GC passes (each an accounting walk of the newest state).
    pub vlog_gc_passes: AtomicU64,
    /// Live value records copied by value-log GC into compacted files.
    pub vlog_moved_records: AtomicU64,
    /// Bytes of those records.
    pub vlog_moved_bytes: AtomicU64,
    /// Value-log data files compacted by GC (a file compacted twice counts twice).
    pub vlog_files_compacted: AtomicU64,
    /// Bytes those compactions gave back (size before less size after).
    pub vlog_bytes_reclaimed: AtomicU64,
    /// Value-log data files deleted by GC.
    pub vlog_files_deleted: AtomicU64,
    /// Bytes of those files.
    pub vlog_bytes_deleted: AtomicU64,
    /// Background value-log GC passes that failed (and will be tried again).
    pub vlog_gc_errors: AtomicU64,
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
            rebase_pages: self.rebase_pages.load(Relaxed),
            page_cache_hits: self.page_cache_hits.load(Relaxed),
            page_cache_misses: self.page_cache_misses.load(Relaxed),
            block_cache_hits: self.block_cache_hits.load(Relaxed),
            commits: self.commits.load(Relaxed),
            updates: self.updates.load(Relaxed),
            commit_micros: self.commit_micros.load(Relaxed),
            gets: self.gets.load(Relaxed),
            latest_index_hits: self.latest_index_hits.load(Relaxed),
            latest_index_filled: self.latest_index_filled.load(Relaxed),
            prunes: self.prunes.load(Relaxed),
            pruned_files: self.pruned_files.load(Relaxed),
            pruned_bytes: self.pruned_bytes.load(Relaxed),
            pruned_pages: self.pruned_pages.load(Relaxed),
            prune_errors: self.prune_errors.load(Relaxed),
            vlog_gc_passes: self.vlog_gc_passes.load(Relaxed),
            vlog_moved_records: self.vlog_moved_records.load(Relaxed),
            vlog_moved_bytes: self.vlog_moved_bytes.load(Relaxed),
            vlog_files_compacted: self.vlog_files_compacted.load(Relaxed),
            vlog_bytes_reclaimed: self.vlog_bytes_reclaimed.load(Relaxed),
            vlog_files_deleted: self.vlog_files_deleted.load(Relaxed),
            vlog_bytes_deleted: self.vlog_bytes_deleted.load(Relaxed),
            vlog_gc_errors: self.vlog_gc_errors.load(Relaxed),
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
    pub rebase_pages: u64,
    pub page_cache_hits: u64,
    pub page_cache_misses: u64,
    pub block_cache_hits: u64,
    pub commits: u64,
    pub updates: u64,
    pub commit_micros: u64,
    pub gets: u64,
    pub latest_index_hits: u64,
    pub latest_index_filled: u64,
    pub prunes: u64,
    pub pruned_files: u64,
    pub pruned_bytes: u64,
    pub pruned_pages: u64,
    pub prune_errors: u64,
    pub vlog_gc_passes: u64,
    pub vlog_moved_records: u64,
    pub vlog_moved_bytes: u64,
    pub vlog_files_compacted: u64,
    pub vlog_bytes_reclaimed: u64,
    pub vlog_files_deleted: u64,
    pub vlog_bytes_deleted: u64,
    pub vlog_gc_errors: u64,
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
            rebase_pages: self.rebase_pages - o.rebase_pages,
            page_cache_hits: self.page_cache_hits - o.page_cache_hits,
            page_cache_misses: self.page_cache_misses - o.page_cache_misses,
            block_cache_hits: self.block_cache_hits - o.block_cache_hits,
            commits: self.commits - o.commits,
            updates: self.updates - o.updates,
            commit_micros: self.commit_micros - o.commit_micros,
            gets: self.gets - o.gets,
            latest_index_hits: self.latest_index_hits - o.latest_index_hits,
            latest_index_filled: self.latest_index_filled - o.latest_index_filled,
            prunes: self.prunes - o.prunes,
            pruned_files: self.pruned_files - o.pruned_files,
            pruned_bytes: self.pruned_bytes - o.pruned_bytes,
            pruned_pages: self.pruned_pages - o.pruned_pages,
            prune_errors: self.prune_errors - o.prune_errors,
            vlog_gc_passes: self.vlog_gc_passes - o.vlog_gc_passes,
            vlog_moved_records: self.vlog_moved_records - o.vlog_moved_records,
            vlog_moved_bytes: self.vlog_moved_bytes - o.vlog_moved_bytes,
            vlog_files_compacted: self.vlog_files_compacted - o.vlog_files_compacted,
            vlog_bytes_reclaimed: self.vlog_bytes_reclaimed - o.vlog_bytes_reclaimed,
            vlog_files_deleted: self.vlog_files_deleted - o.vlog_files_deleted,
            vlog_bytes_deleted: self.vlog_bytes_deleted - o.vlog_bytes_deleted,
            vlog_gc_errors: self.vlog_gc_errors - o.vlog_gc_errors,
        }
    }
}
