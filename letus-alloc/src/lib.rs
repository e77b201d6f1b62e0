//! The allocator of every letus process — the node (`letus`), the engine bench, the prune and tier benches and
//! `bench/` — so that the node runs with what its figures in docs/BENCHMARKS.md were measured with.
//!
//! mimalloc: with glibc malloc (`MALLOC_ARENA_MAX=2`) the 3M-key engine bench committed 75k updates/s against
//! 94k, loaded a third slower, and kept the peak of every commit's transient allocations as RSS.
//!
//! A binary installs it with `#[global_allocator] static GLOBAL: letus_alloc::MiMalloc = letus_alloc::MiMalloc;`
//! and calls [`init`] first thing in `main`.

pub use mimalloc::MiMalloc;

/// The two settings every letus process runs with: [`purge_freed_memory_soon`] and [`no_transparent_huge_pages`].
pub fn init() {
    purge_freed_memory_soon();
    no_transparent_huge_pages();
}

/// Makes mimalloc return freed memory to the OS after 1 ms instead of its default 10 ms (100 ms for its arenas).
///
/// The page cache evicts and replaces pages continuously, and at 10M keys the freed memory waiting to be purged
/// was 220 MiB of RSS above the live heap (10M engine bench: peak 2,572 MiB by default, 2,349 with no delay,
/// 2,297 with 1 ms after the boxed-slice change, against 2,286 with none). No delay at all cost warm gets at 1M
/// keys 13-26% (each get's buffers were returned and faulted in again: 222k-263k gets/s against 301k); 1 ms costs
/// 6% (285k). `mi_option_purge_delay` is 15 in mimalloc v3's `mi_option_e` (libmimalloc-sys declares no constant
/// for it). An explicit `MIMALLOC_PURGE_DELAY` in the environment wins (to compare settings).
fn purge_freed_memory_soon() {
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets an allocator option; mimalloc allows this at any time from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1) };
}

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`; checked at every page fault, so it
/// also covers what mimalloc mapped before `main`).
///
/// mimalloc asks for THP on its arenas (`madvise(MADV_HUGEPAGE)`), so with the 1 ms purge delay above every commit
/// faulted its transient buffers back in as 2 MiB pages, each zeroed whole by the kernel however little of it was
/// used: `clear_page_erms` was 13% of a node's CPU while it committed blocks of 1,000 writes, 5-7% of a 10M-key
/// load. With THP off (3M-key engine bench, uncontended, same session): 87.4k committed updates/s against 77.9k,
/// warm gets 349k/s against 333k, peak RSS 739 MiB against 766; the load rate did not move. An explicit
/// `MIMALLOC_ALLOW_THP` in the environment wins (to compare settings).
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        // SAFETY: prctl with PR_SET_THP_DISABLE takes integer arguments only and changes a flag of this process.
        // An error (kernels before 3.15) leaves THP as the kernel has it: slower commits, nothing incorrect.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

/// Raises this process's soft limit of open files to its hard limit, and returns the new soft limit (`None` when
/// it cannot be read or set). A node holds index files, value-log files, block segments and client connections
/// at once; the usual default soft limit of 1,024 is reached long before the hard one, and a store that cannot
/// open a file stops taking writes. (Kept here with the other process-wide settings: this crate is the one
/// that may call libc.)
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit write/read the plain struct passed by pointer, which outlives the calls.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
            return None;
        }
        if l.rlim_cur < l.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                l = raised;
            }
        }
        Some(l.rlim_cur)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
