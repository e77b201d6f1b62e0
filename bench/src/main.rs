//! `letus-bench`: letus against plain RocksDB, Ethereum's MPT on RocksDB, JMT on RocksDB and NOMT on the same
//! workload. See README.md.

mod plot;
mod system;
mod systems;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;

#[global_allocator]
static GLOBAL: letus_alloc::MiMalloc = letus_alloc::MiMalloc;

use system::{disk_bytes, drop_os_cache, proc_io, rss_bytes, System};
use workload::{Kind, Workload};

#[derive(Parser, Debug)]
#[command(about = "letus vs RocksDB / MPT / JMT / NOMT on the same 80/20 payment workload")]
struct Args {
    /// Systems to run, in order: letus, rocksdb, mpt, jmt, nomt.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "letus,rocksdb,mpt,jmt,nomt"
    )]
    systems: Vec<String>,
    /// Accounts (all created by the load phase).
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Measured blocks after the load.
    #[arg(long, default_value_t = 300)]
    blocks: u64,
    /// Transactions per block (2 updates each).
    #[arg(long, default_value_t = 1_000)]
    txs: u64,
    /// Workload: payment (account keys) or erc20 (token-contract balance slots).
    #[arg(long, value_enum, default_value_t = Kind::Payment)]
    workload: Kind,
    /// Accounts per load block.
    #[arg(long, default_value_t = 50_000)]
    load_block: u64,
    /// Random gets per read measurement (warm, historical).
    #[arg(long, default_value_t = 20_000)]
    gets: u64,
    /// Gets measured with caches cleared before each one.
    #[arg(long, default_value_t = 1_000)]
    cold_gets: u64,
    /// Proofs generated.
    #[arg(long, default_value_t = 5_000)]
    proofs: u64,
    /// How far back historical reads go, in blocks (capped by the blocks written).
    #[arg(long, default_value_t = 1_000)]
    history_depth: u64,
    /// Cache budget per system (letus page cache, RocksDB block cache, NOMT page cache), MiB.
    #[arg(long, default_value_t = 512)]
    cache_mib: usize,
    /// Output directory for results.json and results.md.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Where the systems' data go (default: OUT/data). Must be on the disk to measure.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Keep each system's data directory after its run.
    #[arg(long)]
    keep_data: bool,
    /// Blocks per point of the throughput-over-time and space-over-time series.
    #[arg(long, default_value_t = 25)]
    sample_every: u64,
    /// Access lists (blocks of the same workload, not yet applied) loaded serially and in parallel, each from a
    /// cold start (store reopened, OS page cache dropped).
    #[arg(long, default_value_t = 5)]
    access_blocks: u64,
    /// Cache sizes of the I/Os-per-get study, as fractions of each system's store size on disk.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,0.001,0.003,0.01,0.03,0.1,0.3"
    )]
    sweep: Vec<f64>,
    /// Gets measured at each cache size (after a warm-up of max(20,000, 2 x fraction x accounts) gets).
    #[arg(long, default_value_t = 10_000)]
    sweep_gets: u64,
    /// letus' `Options::max_delta_chain` (default: letus' default).
    #[arg(long)]
    letus_max_delta_chain: Option<u32>,
    /// Systems in the I/Os-per-get study: the sweep counts the calling thread's read system calls. NOMT is left
    /// out by default; the reason once given (its reads go through io_uring) does not hold for its gets, which a
    /// reading of nomt 1.0's source shows to be blocking reads on the calling thread. Sweeping it is not done yet.
    #[arg(long, value_delimiter = ',', default_value = "letus,rocksdb,mpt,jmt")]
    sweep_systems: Vec<String>,
}

/// One point of the series over time.
#[derive(Serialize, Debug, Default, Clone)]
pub struct Sample {
    /// Version (block number, load blocks included) at the end of the window.
    pub version: u64,
    /// `true` for the load phase.
    pub load: bool,
    /// Committed updates per second of commit time over the window.
    pub updates_per_sec: f64,
    pub disk_bytes: u64,
    /// The process's resident set at the end of the window (the systems run one after another in one process;
    /// each one's data and caches are dropped before the next starts).
    pub rss_bytes: u64,
}

/// Serial against parallel loading of a block's access list from a cold start.
#[derive(Serialize, Debug, Default, Clone)]
struct AccessList {
    blocks: u64,
    keys_per_block: f64,
    serial_ms: f64,
    parallel_ms: f64,
    speedup: f64,
    serial_disk_bytes_per_key: f64,
    parallel_disk_bytes_per_key: f64,
}

/// One cache size of the I/Os-per-get study.
#[derive(Serialize, Debug, Default, Clone)]
struct SweepPoint {
    fraction: f64,
    cache_bytes: u64,
    ios_per_get: f64,
    disk_bytes_per_get: f64,
    gets_per_sec: f64,
}

#[derive(Serialize, Debug, Default, Clone)]
pub struct Result1 {
    system: String,
    workload: String,
    accounts: u64,
    blocks: u64,
    updates: u64,
    load_secs: f64,
    updates_per_sec: f64,
    commit_p50_ms: f64,
    commit_p99_ms: f64,
    bytes_written_per_update: f64,
    disk_bytes: u64,
    disk_bytes_per_account: f64,
    warm_gets_per_sec: f64,
    /// Read system calls per warm get (the calling thread's; see `system::ReadCalls`).
    warm_ios_per_get: f64,
    /// Read system calls per cold get.
    cold_ios_per_get: f64,
    cold_caches_cleared: bool,
    os_cache_dropped: bool,
    cold_get_ms: f64,
    cold_disk_bytes_read_per_get: f64,
    history_blocks_back: Option<u64>,
    history_gets_per_sec: Option<f64>,
    proofs_per_sec: Option<f64>,
    proof_bytes_mean: Option<f64>,
    last_root: String,
    /// Hash of the values the warm reads returned: equal across systems when they store the same state.
    read_checksum: String,
    history_checksum: Option<String>,
    series: Vec<Sample>,
    access_list: Option<AccessList>,
    sweep: Vec<SweepPoint>,
}

fn open(name: &str, dir: &Path, args: &Args) -> Result<Box<dyn System>> {
    let cache = args.cache_mib << 20;
    Ok(match name {
        "letus" => Box::new(systems::letus::Letus::open(
            dir,
            cache,
            args.letus_max_delta_chain,
        )?),
        #[cfg(feature = "rocksdb-peers")]
        "rocksdb" => Box::new(systems::rocks::Rocks::open(dir, cache)?),
        #[cfg(feature = "rocksdb-peers")]
        "mpt" => Box::new(systems::mpt::Mpt::open(dir, cache)?),
        #[cfg(feature = "rocksdb-peers")]
        "jmt" => Box::new(systems::jmt_rocks::Jmt::open(dir, cache)?),
        "nomt" => Box::new(systems::nomt_sys::NomtSys::open(dir, cache, args.accounts)?),
        other => bail!(
            "unknown system {other} (letus, nomt; rocksdb, mpt, jmt with the rocksdb-peers feature)"
        ),
    })
}

fn pct(sorted: &[Duration], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)].as_secs_f64() * 1e3
}

fn checksum(h: &mut u64, v: &Option<Vec<u8>>) {
    // FNV-1a over the values (None hashes as one 0xff byte).
    let mut feed = |b: u8| {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    };
    match v {
        Some(v) => v.iter().for_each(|&b| feed(b)),
        None => feed(0xff),
    }
}

fn run(name: &str, args: &Args) -> Result<Result1> {
    let data = args
        .data_dir
        .clone()
        .unwrap_or_else(|| args.out.join("data"));
    let dir = data.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut sys = open(name, &dir, args).with_context(|| format!("opening {name}"))?;
    let cache_bytes = args.cache_mib << 20;
    debug_assert_eq!(sys.name(), name);
    let mut w = Workload::new(args.workload, args.accounts, args.txs, 0x5eed);
    let mut r = Result1 {
        system: name.to_string(),
        workload: format!("{:?}", args.workload).to_lowercase(),
        accounts: args.accounts,
        blocks: args.blocks,
        ..Default::default()
    };

    // Load.
    let t = Instant::now();
    let mut version = 0u64;
    // Generated block by block: at 10M accounts the whole load would be a gigabyte of the process's RSS.
    for b in w.load_blocks(args.load_block) {
        version += 1;
        let t = Instant::now();
        sys.apply_block(version, &b)?;
        r.series.push(Sample {
            version,
            load: true,
            updates_per_sec: b.len() as f64 / t.elapsed().as_secs_f64(),
            disk_bytes: disk_bytes(&dir),
            rss_bytes: rss_bytes(),
        });
    }
    sys.flush()?;
    r.load_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "[{name}] load: {} accounts in {:.1}s",
        args.accounts, r.load_secs
    );

    // Measured blocks.
    let (_, w0) = proc_io();
    let mut lat = Vec::with_capacity(args.blocks as usize);
    let mut busy = Duration::ZERO;
    let mut updates = 0u64;
    let mut root = Vec::new();
    let first_measured = version + 1;
    let (mut win_updates, mut win_busy) = (0u64, Duration::ZERO);
    let progress = args.blocks.div_ceil(10).max(1);
    for i in 0..args.blocks {
        let b = w.next_block();
        updates += b.len() as u64;
        version += 1;
        let t = Instant::now();
        root = sys.apply_block(version, &b)?;
        let d = t.elapsed();
        busy += d;
        lat.push(d);
        win_updates += b.len() as u64;
        win_busy += d;
        if (i + 1) % args.sample_every.max(1) == 0 || i + 1 == args.blocks {
            r.series.push(Sample {
                version,
                load: false,
                updates_per_sec: win_updates as f64 / win_busy.as_secs_f64(),
                disk_bytes: disk_bytes(&dir),
                rss_bytes: rss_bytes(),
            });
            (win_updates, win_busy) = (0, Duration::ZERO);
        }
        if (i + 1) % progress == 0 {
            eprintln!(
                "[{name}] block {}/{}: {:.0} updates/s so far",
                i + 1,
                args.blocks,
                updates as f64 / busy.as_secs_f64()
            );
        }
    }
    sys.flush()?;
    let (_, w1) = proc_io();
    lat.sort();
    r.updates = updates;
    r.updates_per_sec = updates as f64 / busy.as_secs_f64();
    r.commit_p50_ms = pct(&lat, 50);
    r.commit_p99_ms = pct(&lat, 99);
    r.bytes_written_per_update = w1.saturating_sub(w0) as f64 / updates.max(1) as f64;
    r.disk_bytes = disk_bytes(&dir);
    r.disk_bytes_per_account = r.disk_bytes as f64 / args.accounts as f64;
    r.last_root = root.iter().map(|b| format!("{b:02x}")).collect();
    eprintln!(
        "[{name}] {} blocks: {:.0} updates/s, commit p50 {:.1} ms p99 {:.1} ms, {:.0} B written/update, disk {} B",
        args.blocks, r.updates_per_sec, r.commit_p50_ms, r.commit_p99_ms, r.bytes_written_per_update, r.disk_bytes
    );

    // Warm random reads at the latest version (same keys for every system).
    let mut reads = Workload::new(args.workload, args.accounts, 1, 0x4ead);
    for _ in 0..args.gets {
        sys.get_latest(&reads.random_key())?;
    }
    let mut reads = Workload::new(args.workload, args.accounts, 1, 0xbeef);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let calls = system::ReadCalls::start();
    let t = Instant::now();
    for _ in 0..args.gets {
        let v = sys.get_latest(&reads.random_key())?;
        if v.is_none() {
            bail!("{name}: a loaded account is missing");
        }
        checksum(&mut h, &v);
    }
    r.warm_gets_per_sec = args.gets as f64 / t.elapsed().as_secs_f64();
    r.warm_ios_per_get = calls.since() as f64 / args.gets.max(1) as f64;
    r.read_checksum = format!("{h:016x}");

    // Proofs at the latest version.
    let mut reads = Workload::new(args.workload, args.accounts, 1, 0xfeed);
    let mut bytes = 0u64;
    let t = Instant::now();
    let mut supported = true;
    for _ in 0..args.proofs {
        match sys.prove(&reads.random_key())? {
            Some(p) => bytes += p.len() as u64,
            None => {
                supported = false;
                break;
            }
        }
    }
    if supported && args.proofs > 0 {
        r.proofs_per_sec = Some(args.proofs as f64 / t.elapsed().as_secs_f64());
        r.proof_bytes_mean = Some(bytes as f64 / args.proofs as f64);
        eprintln!(
            "[{name}] proofs: {:.0}/s, {:.0} bytes mean",
            r.proofs_per_sec.unwrap(),
            r.proof_bytes_mean.unwrap()
        );
    }

    // Historical reads.
    let back = args
        .history_depth
        .min(version.saturating_sub(first_measured));
    let hv = version - back;
    // Not the warm reads' seed (0xbeef) nor the proofs' (0xfeed): the same keys would be read from warm caches.
    let mut reads = Workload::new(args.workload, args.accounts, 1, 0x01d5);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let t = Instant::now();
    let mut supported = true;
    for _ in 0..args.gets {
        match sys.get_at(hv, &reads.random_key())? {
            Some(v) => checksum(&mut h, &v),
            None => {
                supported = false;
                break;
            }
        }
    }
    if supported {
        r.history_blocks_back = Some(back);
        r.history_gets_per_sec = Some(args.gets as f64 / t.elapsed().as_secs_f64());
        r.history_checksum = Some(format!("{h:016x}"));
        eprintln!(
            "[{name}] historical reads {back} blocks back: {:.0} gets/s",
            r.history_gets_per_sec.unwrap()
        );
    }

    // Cold reads: the system reopened (a restarted node), its own caches cleared before every get (NOMT, which has
    // no such call, is reopened before every get), the OS page cache dropped once before the batch (root only).
    sys.reopen(cache_bytes)?;
    r.cold_caches_cleared = sys.clear_caches();
    r.os_cache_dropped = drop_os_cache();
    let (r0, _) = proc_io();
    let mut cold = Duration::ZERO;
    let mut calls = 0;
    for _ in 0..args.cold_gets {
        sys.clear_caches();
        let k = reads.random_key();
        let c = system::ReadCalls::start();
        let t = Instant::now();
        sys.get_latest(&k)?;
        cold += t.elapsed();
        calls += c.since();
    }
    let (r1, _) = proc_io();
    r.cold_ios_per_get = calls as f64 / args.cold_gets.max(1) as f64;
    r.cold_get_ms = cold.as_secs_f64() * 1e3 / args.cold_gets.max(1) as f64;
    r.cold_disk_bytes_read_per_get = r1.saturating_sub(r0) as f64 / args.cold_gets.max(1) as f64;
    eprintln!(
        "[{name}] reads: warm {:.0} gets/s; cold {:.3} ms/get, {:.0} disk bytes read/get (caches cleared: {}, OS cache dropped: {})",
        r.warm_gets_per_sec, r.cold_get_ms, r.cold_disk_bytes_read_per_get, r.cold_caches_cleared, r.os_cache_dropped
    );

    r.access_list = Some(access_lists(&mut *sys, args, cache_bytes)?);
    if args.sweep_systems.iter().any(|s| s == name) {
        r.sweep = cache_sweep(&mut *sys, args, r.disk_bytes)?;
    }

    drop(sys);
    if !args.keep_data {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(r)
}

/// Loads `args.access_blocks` access lists (the keys of blocks drawn from the same workload with another seed),
/// each twice from a cold start: one get after another, then all at once with `get_many`.
fn access_lists(sys: &mut dyn System, args: &Args, cache_bytes: usize) -> Result<AccessList> {
    let name = sys.name();
    let mut w = Workload::new(args.workload, args.accounts, args.txs, 0xacce55);
    let (mut serial, mut parallel) = (Duration::ZERO, Duration::ZERO);
    let (mut serial_bytes, mut parallel_bytes, mut keys_total) = (0u64, 0u64, 0u64);
    for _ in 0..args.access_blocks {
        let keys: Vec<Vec<u8>> = w.next_block().into_iter().map(|(k, _)| k).collect();
        keys_total += keys.len() as u64;

        sys.reopen(cache_bytes)?;
        drop_os_cache();
        let (r0, _) = proc_io();
        let t = Instant::now();
        let mut one_by_one = Vec::with_capacity(keys.len());
        for k in &keys {
            one_by_one.push(sys.get_latest(k)?);
        }
        serial += t.elapsed();
        let (r1, _) = proc_io();
        serial_bytes += r1.saturating_sub(r0);

        sys.reopen(cache_bytes)?;
        drop_os_cache();
        let (r0, _) = proc_io();
        let t = Instant::now();
        let all = sys.get_many(&keys)?;
        parallel += t.elapsed();
        let (r1, _) = proc_io();
        parallel_bytes += r1.saturating_sub(r0);
        if all != one_by_one {
            bail!("{name}: get_many returned other values than serial gets");
        }
    }
    let n = args.access_blocks.max(1) as f64;
    let keys = keys_total.max(1) as f64;
    let a = AccessList {
        blocks: args.access_blocks,
        keys_per_block: keys_total as f64 / n,
        serial_ms: serial.as_secs_f64() * 1e3 / n,
        parallel_ms: parallel.as_secs_f64() * 1e3 / n,
        speedup: serial.as_secs_f64() / parallel.as_secs_f64().max(1e-9),
        serial_disk_bytes_per_key: serial_bytes as f64 / keys,
        parallel_disk_bytes_per_key: parallel_bytes as f64 / keys,
    };
    eprintln!(
        "[{name}] access list of {:.0} keys from a cold start: serial {:.1} ms, parallel {:.1} ms ({:.1}x)",
        a.keys_per_block, a.serial_ms, a.parallel_ms, a.speedup
    );
    Ok(a)
}

/// I/Os per get against the cache size: for each fraction of the store's size, the system is reopened with that
/// cache budget, warmed up with uniform random gets, and then the read system calls of the measured gets counted.
fn cache_sweep(sys: &mut dyn System, args: &Args, store_bytes: u64) -> Result<Vec<SweepPoint>> {
    let name = sys.name();
    let mut out = Vec::new();
    for &f in &args.sweep {
        let cache = (store_bytes as f64 * f) as usize;
        sys.reopen(cache)?;
        let warm = (2.0 * f * args.accounts as f64).max(20_000.0) as u64;
        let mut reads = Workload::new(args.workload, args.accounts, 1, 0x5eee9);
        for _ in 0..warm {
            sys.get_latest(&reads.random_key())?;
        }
        let (r0, _) = proc_io();
        let calls = system::ReadCalls::start();
        let t = Instant::now();
        for _ in 0..args.sweep_gets {
            sys.get_latest(&reads.random_key())?;
        }
        let secs = t.elapsed().as_secs_f64();
        let ios = calls.since();
        let (r1, _) = proc_io();
        let gets = args.sweep_gets.max(1) as f64;
        let p = SweepPoint {
            fraction: f,
            cache_bytes: cache as u64,
            ios_per_get: ios as f64 / gets,
            disk_bytes_per_get: r1.saturating_sub(r0) as f64 / gets,
            gets_per_sec: gets / secs,
        };
        eprintln!(
            "[{name}] cache {:.1}% of the store ({} MiB): {:.2} I/Os per get, {:.0} gets/s",
            f * 100.0,
            cache >> 20,
            p.ios_per_get,
            p.gets_per_sec
        );
        out.push(p);
    }
    sys.reopen(args.cache_mib << 20)?;
    Ok(out)
}

/// The markdown report: raw figures, then letus / peer ratios.
fn markdown(args: &Args, results: &[Result1], failures: &BTreeMap<String, String>) -> String {
    let mut s = String::new();
    s += &format!(
        "# letus-bench results\n\nWorkload `{:?}`: {} accounts loaded in blocks of {}, then {} blocks of {} transactions \
         (2 updates each, 80/20), one durable commit per block; cache budget {} MiB per system.\n\n",
        args.workload, args.accounts, args.load_block, args.blocks, args.txs, args.cache_mib
    );
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
    s += "| system | updates/s | commit p50 ms | commit p99 ms | bytes written/update | disk bytes/account | warm gets/s | warm I/Os/get | cold ms/get | cold I/Os/get | cold disk bytes/get | historical gets/s | proofs/s | proof bytes |\n";
    s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in results {
        s += &format!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.2} | {:.3} | {:.2} | {:.0} | {} | {} | {} |\n",
            r.system,
            r.updates_per_sec,
            r.commit_p50_ms,
            r.commit_p99_ms,
            r.bytes_written_per_update,
            r.disk_bytes_per_account,
            r.warm_gets_per_sec,
            r.warm_ios_per_get,
            r.cold_get_ms,
            r.cold_ios_per_get,
            r.cold_disk_bytes_read_per_get,
            opt(r.history_gets_per_sec),
            opt(r.proofs_per_sec),
            opt(r.proof_bytes_mean),
        );
    }
    if let Some(l) = results.iter().find(|r| r.system == "letus") {
        s += "\n## Ratios letus / peer\n\nAbove 1 means letus is higher (better for rates, worse for times and bytes).\n\n";
        s += "| peer | updates/s | commit p50 | commit p99 | bytes written/update | disk bytes | warm gets/s | cold ms/get | historical gets/s | proofs/s | proof bytes |\n";
        s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.2}", a / b)
            } else {
                "n/a".into()
            }
        };
        let oratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => ratio(a, b),
            _ => "n/a".into(),
        };
        for p in results.iter().filter(|r| r.system != "letus") {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                p.system,
                ratio(l.updates_per_sec, p.updates_per_sec),
                ratio(l.commit_p50_ms, p.commit_p50_ms),
                ratio(l.commit_p99_ms, p.commit_p99_ms),
                ratio(l.bytes_written_per_update, p.bytes_written_per_update),
                ratio(l.disk_bytes as f64, p.disk_bytes as f64),
                ratio(l.warm_gets_per_sec, p.warm_gets_per_sec),
                ratio(l.cold_get_ms, p.cold_get_ms),
                oratio(l.history_gets_per_sec, p.history_gets_per_sec),
                oratio(l.proofs_per_sec, p.proofs_per_sec),
                oratio(l.proof_bytes_mean, p.proof_bytes_mean),
            );
        }
    }
    s += "\n## Access list of one block from a cold start: serial gets against parallel\n\n";
    s += "Store reopened and OS page cache dropped before each load; letus uses `Store::get_many`, the peers the same \
          gets on 32 threads.\n\n";
    s += "| system | keys | serial ms | parallel ms | speedup | disk bytes/key serial | disk bytes/key parallel |\n";
    s += "|---|---:|---:|---:|---:|---:|---:|\n";
    for r in results {
        if let Some(a) = &r.access_list {
            s += &format!(
                "| {} | {:.0} | {:.1} | {:.1} | {:.1}x | {:.0} | {:.0} |\n",
                r.system,
                a.keys_per_block,
                a.serial_ms,
                a.parallel_ms,
                a.speedup,
                a.serial_disk_bytes_per_key,
                a.parallel_disk_bytes_per_key
            );
        }
    }
    if results.iter().any(|r| !r.sweep.is_empty()) {
        s += "\n## I/Os per get against cache size\n\nRead system calls per uniform random get at the latest version, \
              after a warm-up, with the cache budget set to a fraction of the system's store size on disk.\n\n";
        let fr: Vec<f64> = args.sweep.clone();
        s += "| system |";
        for f in &fr {
            s += &format!(" {}% |", f * 100.0);
        }
        s += "\n|---|";
        s += &"---:|".repeat(fr.len());
        s += "\n";
        for r in results.iter().filter(|r| !r.sweep.is_empty()) {
            s += &format!("| {} |", r.system);
            for p in &r.sweep {
                s += &format!(" {:.2} |", p.ios_per_get);
            }
            s += "\n";
        }
    }
    s += "\nCharts: [throughput over time](throughput.svg), [disk space over time](space.svg), \
          [I/Os per get against cache size](ios_per_get.svg).\n";
    s += "\nRead checksums (equal = same state read back): ";
    s += &results
        .iter()
        .map(|r| format!("{} `{}`", r.system, r.read_checksum))
        .collect::<Vec<_>>()
        .join(", ");
    s += "\n";
    if !failures.is_empty() {
        s += "\n## Systems that failed\n\n";
        for (k, v) in failures {
            s += &format!("- {k}: `{v}`\n");
        }
    }
    s
}

fn main() -> Result<()> {
    letus_alloc::init();
    let args = Args::parse();
    std::fs::create_dir_all(&args.out)?;
    let mut results = Vec::new();
    let mut failures = BTreeMap::new();
    for name in &args.systems {
        eprintln!("== {name}");
        match run(name, &args) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("[{name}] FAILED: {e:#}");
                failures.insert(name.clone(), format!("{e:#}"));
            }
        }
        // Write after every system so that a later crash loses nothing.
        let json = serde_json::json!({ "results": results, "failures": failures });
        std::fs::write(
            args.out.join("results.json"),
            serde_json::to_string_pretty(&json)?,
        )?;
        std::fs::write(
            args.out.join("results.md"),
            markdown(&args, &results, &failures),
        )?;
        let load_blocks = args.accounts.div_ceil(args.load_block.max(1));
        plot::throughput(&results, load_blocks, &args.out.join("throughput.svg"))?;
        plot::space(&results, &args.out.join("space.svg"))?;
        plot::load_and_rss(&results, args.load_block, &args.out.join("scale.svg"))?;
        plot::ios_per_get(&results, &args.out.join("ios_per_get.svg"))?;
    }
    print!("{}", markdown(&args, &results, &failures));
    Ok(())
}
