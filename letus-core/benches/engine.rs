//! Engine benchmark: the LETUS evaluation workload on one store.
//!
//! `cargo bench -p letus-core --bench engine -- [--keys N] [--versions N] [--updates N] [--td N --tb N] [--gets N]`
//!
//! Loads `keys` accounts, then commits `versions` versions of `updates` updates each, 80% of them going to 20% of
//! the keys, with fsync at every commit; then measures reads at the latest version with a cold and a warm cache.
//! Prints committed updates per second, commit latency, bytes written per update (engine counters and
//! /proc/self/io), disk bytes per live key, and disk reads per get.

use std::time::Instant;

/// mimalloc, counting the bytes the process holds allocated, so that the bench can tell the engine's live heap
/// (what its memory budget is about) from allocator overhead and fragmentation in the RSS.
struct Counting;

static LIVE_HEAP: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
/// The most `LIVE_HEAP` has been: the transient peak inside a commit, which the RSS peak is to be compared with.
static PEAK_HEAP: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn grew(bytes: i64) {
    let now = LIVE_HEAP.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed) + bytes;
    // A plain load first: `fetch_max` is a compare-and-swap loop on x86, and most allocations set no new peak.
    if now > PEAK_HEAP.load(std::sync::atomic::Ordering::Relaxed) {
        PEAK_HEAP.fetch_max(now, std::sync::atomic::Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to mimalloc; the counter only observes the sizes.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        grew(l.size() as i64);
        unsafe { letus_alloc::MiMalloc.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        grew(l.size() as i64);
        unsafe { letus_alloc::MiMalloc.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        LIVE_HEAP.fetch_sub(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        unsafe { letus_alloc::MiMalloc.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        grew(new as i64 - l.size() as i64);
        unsafe { letus_alloc::MiMalloc.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bytes allocated and not yet freed (as requested, before the allocator's rounding).
fn live_heap() -> u64 {
    LIVE_HEAP.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64
}

/// The most [`live_heap`] has been so far.
fn peak_heap() -> u64 {
    PEAK_HEAP.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64
}

use letus_core::{Options, Store};
use letus_workload::Rng;

fn key(i: u64) -> Vec<u8> {
    format!("account-{i:010}").into_bytes()
}

fn proc_write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("write_bytes:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// `VmRSS` and `VmHWM` (peak) of this process, bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The engine benchmark's settings (`cargo bench -p letus-core --bench engine -- --keys N ...`).
#[derive(clap::Parser)]
struct Args {
    /// Accounts loaded.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Update commits after the load (0: the load alone, then stop).
    #[arg(long, default_value_t = 200)]
    versions: u64,
    /// Updates per commit.
    #[arg(long, default_value_t = 1_000)]
    updates: u64,
    /// Gets per read phase.
    #[arg(long, default_value_t = 20_000)]
    gets: u64,
    /// Gets of the first read phase, right after the updates with every cache as they left it (default
    /// `--gets`; more to profile reads from a full cache).
    #[arg(long)]
    hot_gets: Option<u64>,
    /// `Options::delta_threshold` (default: the engine's).
    #[arg(long)]
    td: Option<u32>,
    /// `Options::base_threshold`.
    #[arg(long)]
    tb: Option<u32>,
    /// `Options::max_delta_chain`.
    #[arg(long)]
    chain: Option<u32>,
    /// `Options::memory_budget_bytes`, in MiB.
    #[arg(long)]
    budget_mib: Option<u64>,
    /// `Options::memtable_bytes`, in MiB.
    #[arg(long)]
    memtable_mib: Option<usize>,
    /// Print load progress every this many keys.
    #[arg(long, default_value_t = 5_000_000)]
    report_every: u64,
    /// `Options::latest_index_bytes`, in MiB (taken from the budget; default 0, off).
    #[arg(long)]
    latest_index_mib: Option<u64>,
    /// Last: reopen with page and index-block caches of this many MiB (for example 1% of the store on disk), the
    /// usual MemIndexTable and a latest-value index
    /// of `--small-latest-index-mib`, wait for the index's background fill (without one, warm the caches with
    /// max(20,000, keys / 50) random gets),
    /// then measure the reads of random gets.
    #[arg(long)]
    small_cache_mib: Option<u64>,
    /// The latest-value index of the `--small-cache-mib` phase, MiB (besides the caches).
    #[arg(long, default_value_t = 0)]
    small_latest_index_mib: u64,
    /// Keys per load commit.
    #[arg(long, default_value_t = 50_000)]
    load_block: u64,
    /// Passed by `cargo bench` to every bench binary.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    letus_alloc::init();
    let a = <Args as clap::Parser>::parse();
    let (keys, versions, updates, gets) = (a.keys, a.versions, a.updates, a.gets);
    let mut opts = Options::default();
    opts.delta_threshold = a.td.unwrap_or(opts.delta_threshold);
    opts.base_threshold = a.tb.unwrap_or(opts.base_threshold);
    opts.max_delta_chain = a.chain.unwrap_or(opts.max_delta_chain);
    if let Some(m) = a.budget_mib {
        opts.memory_budget_bytes = m << 20;
    }
    if let Some(m) = a.latest_index_mib {
        opts.latest_index_bytes = m << 20;
    }
    if let Some(m) = a.memtable_mib {
        opts.memtable_bytes = m << 20;
    }
    let (report_every, load_block) = (a.report_every, a.load_block);
    let dir = tempfile::tempdir_in(std::env::var("LETUS_BENCH_DIR").unwrap_or_else(|_| ".".into()))
        .expect("temp dir");
    let mut store = Store::open(dir.path(), opts.clone()).expect("open");
    println!(
        "keys {keys}, versions {versions} x {updates} updates, Td {} Tb {}, max delta chain {}, memory budget {} MiB, memtable {} MiB, latest index {} MiB",
        opts.delta_threshold, opts.base_threshold, opts.max_delta_chain, opts.memory_budget_bytes >> 20,
        opts.memtable_bytes >> 20, opts.memory_split().latest_index_bytes >> 20
    );

    // Load: `load_block` keys per version.
    let t = Instant::now();
    let mut v = 0u64;
    let mut i = 0u64;
    let mut interval = (Instant::now(), 0u64);
    while i < keys {
        for _ in 0..load_block.min(keys - i) {
            store.put(0, &key(i), &1_000u64.to_le_bytes()).expect("put");
            i += 1;
        }
        v += 1;
        store.commit(v).expect("commit");
        if i - interval.1 >= report_every || i == keys {
            let (now, peak) = rss();
            let m = store.memory();
            println!(
                "  loaded {:>11} keys: {:>7.0} keys/s over the last {} keys, RSS {} MiB (peak {} MiB; heap {} MiB, peak {} MiB; page cache {} MiB in {} pages), disk {:.0} bytes per key",
                i,
                (i - interval.1) as f64 / interval.0.elapsed().as_secs_f64(),
                i - interval.1,
                now >> 20,
                peak >> 20,
                live_heap() >> 20,
                peak_heap() >> 20,
                m.page_cache_bytes >> 20,
                m.page_cache_pages,
                store.disk_bytes() as f64 / i as f64
            );
            interval = (Instant::now(), i);
        }
    }
    println!(
        "load: {:.1}s ({:.0} keys/s)",
        t.elapsed().as_secs_f64(),
        keys as f64 / t.elapsed().as_secs_f64()
    );
    // The load's page records must not be counted as the updates' writes.
    store.flush().expect("flush");
    if versions == 0 {
        // `--versions 0` measures the load alone (the read phases below assume updates were made).
        return;
    }

    // Updates.
    let mut rng = Rng::new(0x5eed);
    let before = store.metrics();
    let io_before = proc_write_bytes();
    let mut lat = Vec::with_capacity(versions as usize);
    let t = Instant::now();
    for _ in 0..versions {
        for _ in 0..updates {
            let k = key(rng.hot_account(keys));
            store
                .put(0, &k, &(rng.next_u64() % 1_000_000).to_le_bytes())
                .expect("put");
        }
        v += 1;
        let c = Instant::now();
        store.commit(v).expect("commit");
        lat.push(c.elapsed());
    }
    let secs = t.elapsed().as_secs_f64();
    // Page changes sit in the MemIndexTable until it fills; flush now so that every byte the updates cause is
    // on disk and counted, and so that reads below come from index files.
    store.flush().expect("flush");
    let after = store.metrics();
    let io_after = proc_write_bytes();
    lat.sort();
    let n = (versions * updates) as f64;
    println!(
        "updates: {:.0} committed updates/s over {:.1}s",
        n / secs,
        secs
    );
    println!(
        "commit latency: p50 {:.1} ms, p99 {:.1} ms",
        lat[lat.len() / 2].as_secs_f64() * 1e3,
        lat[(lat.len() * 99 / 100).min(lat.len() - 1)].as_secs_f64() * 1e3
    );
    println!(
        "bytes written per update: {:.0} (engine counters), {:.0} (/proc/self/io write_bytes)",
        (after.bytes_written - before.bytes_written) as f64 / n,
        io_after.saturating_sub(io_before) as f64 / n
    );
    println!(
        "disk: {} bytes, {:.0} bytes per live key",
        store.disk_bytes(),
        store.disk_bytes() as f64 / keys as f64
    );
    let (now, peak) = rss();
    println!(
        "RSS after the updates: {} MiB (peak {} MiB; {}), heap {} MiB (peak {} MiB), {:?}",
        now >> 20,
        peak >> 20,
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("Rss") || l.starts_with("Threads"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join(", "),
        live_heap() >> 20,
        peak_heap() >> 20,
        store.memory()
    );

    // Reads at the latest version.
    let read = |store: &Store, rng: &mut Rng, label: &str, clear_each: bool, gets: u64| {
        let m0 = store.metrics();
        let mut busy = std::time::Duration::ZERO;
        for _ in 0..gets {
            if clear_each {
                store.clear_caches();
            }
            let k = key(rng.next_u64() % keys);
            let t = Instant::now();
            store.get(0, v, &k).expect("get").expect("present");
            busy += t.elapsed();
        }
        let d = store.metrics() - m0;
        let g = gets as f64;
        println!(
            "get ({label}): {:.0} gets/s; per get: {:.2} page records, {:.2} index blocks, {:.2} value records read from disk; {:.0}% answered by the latest-value index",
            g / busy.as_secs_f64(),
            d.page_reads as f64 / g,
            d.index_block_reads as f64 / g,
            d.value_reads as f64 / g,
            100.0 * d.latest_index_hits as f64 / g
        );
    };
    read(
        &store,
        &mut rng,
        "as the updates left the caches",
        false,
        a.hot_gets.unwrap_or(gets),
    );
    read(
        &store,
        &mut rng,
        "cold cache: caches cleared before every get",
        true,
        gets,
    );
    store.clear_caches();
    // Warm the default cache to a steady state (as many gets as keys, at most 2M), then measure.
    for _ in 0..keys.min(2_000_000).max(5 * gets) {
        let k = key(rng.next_u64() % keys);
        store.get(0, v, &k).expect("get");
    }
    read(&store, &mut rng, "default cache, warmed", false, gets);
    // Cold means our caches and, where the machine lets us (root), the OS page cache too.
    let drop_os_cache = || {
        let _ = std::process::Command::new("sync").status();
        std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
    };
    let batch: Vec<Vec<u8>> = (0..1000).map(|_| key(rng.next_u64() % keys)).collect();
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    store.clear_caches();
    let os_cold = drop_os_cache();
    let t = Instant::now();
    for k in &refs {
        store.get(0, v, k).expect("get");
    }
    let serial = t.elapsed();
    store.clear_caches();
    drop_os_cache();
    let t = Instant::now();
    store.get_many(0, v, &refs).expect("get_many");
    let parallel = t.elapsed();
    println!(
        "access list of 1000 keys, cold cache (OS page cache dropped: {os_cold}): serial {:.1} ms, get_many {:.1} ms ({:.1}x)",
        serial.as_secs_f64() * 1e3,
        parallel.as_secs_f64() * 1e3,
        serial.as_secs_f64() / parallel.as_secs_f64()
    );

    if let Some(cache_mib) = a.small_cache_mib {
        let latest = a.small_latest_index_mib << 20;
        store.close().expect("close");
        let small = Options {
            memory_budget_bytes: (cache_mib << 20) + latest + opts.memtable_bytes as u64,
            latest_index_bytes: latest,
            ..opts.clone()
        };
        let split = small.memory_split();
        let store = Store::open(dir.path(), small).expect("reopen");
        let t = Instant::now();
        // The index fills itself after the open (a background walk of the state); with it off, random gets warm
        // the caches instead.
        if latest > 0 {
            let mut seen = (0, Instant::now());
            while store.metrics().latest_index_filled < keys {
                let now = store.metrics().latest_index_filled;
                if now != seen.0 {
                    seen = (now, Instant::now());
                }
                assert!(
                    seen.1.elapsed().as_secs() < 60,
                    "the index's fill stopped at {now} leaves"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        } else {
            // A fixed 2% of the keys (at least 20,000), uniform: what `bench/` uses to warm a cache of 1% of the
            // store (max(20,000, 2 f keys) for a fraction f). Reading every key once took 25 minutes at 10M keys.
            for _ in 0..(keys / 50).max(20_000) {
                store.get(0, v, &key(rng.below(keys))).expect("get");
            }
        }
        println!(
            "small caches: {} MiB of pages, {} MiB of index blocks, {} MiB of MemIndexTable, latest index {} MiB; filled (or warmed with random gets) in {:.1}s",
            split.page_cache_bytes >> 20,
            split.block_cache_bytes >> 20,
            split.memtable_bytes >> 20,
            split.latest_index_bytes >> 20,
            t.elapsed().as_secs_f64()
        );
        read(&store, &mut rng, "small caches", false, gets);
    }
}
