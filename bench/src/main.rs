//! `letus-bench`: letus against plain RocksDB, Ethereum's MPT on RocksDB, JMT on RocksDB and NOMT on the same
//! workload. See README.md.

mod system;
mod systems;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;

use system::{disk_bytes, drop_os_cache, proc_io, System};
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
}

#[derive(Serialize, Debug, Default, Clone)]
struct Result1 {
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
}

fn open(name: &str, dir: &Path, args: &Args) -> Result<Box<dyn System>> {
    let cache = args.cache_mib << 20;
    Ok(match name {
        "letus" => Box::new(systems::letus::Letus::open(dir, cache)?),
        "rocksdb" => Box::new(systems::rocks::Rocks::open(dir, cache)?),
        "mpt" => Box::new(systems::mpt::Mpt::open(dir, cache)?),
        "jmt" => Box::new(systems::jmt_rocks::Jmt::open(dir, cache)?),
        "nomt" => Box::new(systems::nomt_sys::NomtSys::open(dir, cache, args.accounts)?),
        other => bail!("unknown system {other} (letus, rocksdb, mpt, jmt, nomt)"),
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
    let loads: Vec<_> = w.load_blocks(args.load_block).collect();
    for b in loads {
        version += 1;
        sys.apply_block(version, &b)?;
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
    for _ in 0..args.blocks {
        let b = w.next_block();
        updates += b.len() as u64;
        version += 1;
        let t = Instant::now();
        root = sys.apply_block(version, &b)?;
        let d = t.elapsed();
        busy += d;
        lat.push(d);
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
    let t = Instant::now();
    for _ in 0..args.gets {
        let v = sys.get_latest(&reads.random_key())?;
        if v.is_none() {
            bail!("{name}: a loaded account is missing");
        }
        checksum(&mut h, &v);
    }
    r.warm_gets_per_sec = args.gets as f64 / t.elapsed().as_secs_f64();
    r.read_checksum = format!("{h:016x}");

    // Cold reads: the system's own caches cleared before every get (where it lets us), the OS page cache dropped
    // once before the batch (root only).
    r.cold_caches_cleared = sys.clear_caches();
    r.os_cache_dropped = drop_os_cache();
    let (r0, _) = proc_io();
    let mut cold = Duration::ZERO;
    for _ in 0..args.cold_gets {
        sys.clear_caches();
        let k = reads.random_key();
        let t = Instant::now();
        sys.get_latest(&k)?;
        cold += t.elapsed();
    }
    let (r1, _) = proc_io();
    r.cold_get_ms = cold.as_secs_f64() * 1e3 / args.cold_gets.max(1) as f64;
    r.cold_disk_bytes_read_per_get = r1.saturating_sub(r0) as f64 / args.cold_gets.max(1) as f64;
    eprintln!(
        "[{name}] reads: warm {:.0} gets/s; cold {:.3} ms/get, {:.0} disk bytes read/get (caches cleared: {}, OS cache dropped: {})",
        r.warm_gets_per_sec, r.cold_get_ms, r.cold_disk_bytes_read_per_get, r.cold_caches_cleared, r.os_cache_dropped
    );

    // Historical reads.
    let back = args
        .history_depth
        .min(version.saturating_sub(first_measured));
    let hv = version - back;
    let mut reads = Workload::new(args.workload, args.accounts, 1, 0xbeef);
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

    drop(sys);
    if !args.keep_data {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(r)
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
    s += "| system | updates/s | commit p50 ms | commit p99 ms | bytes written/update | disk bytes/account | warm gets/s | cold ms/get | cold disk bytes/get | historical gets/s | proofs/s | proof bytes |\n";
    s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in results {
        s += &format!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.3} | {:.0} | {} | {} | {} |\n",
            r.system,
            r.updates_per_sec,
            r.commit_p50_ms,
            r.commit_p99_ms,
            r.bytes_written_per_update,
            r.disk_bytes_per_account,
            r.warm_gets_per_sec,
            r.cold_get_ms,
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
    }
    print!("{}", markdown(&args, &results, &failures));
    Ok(())
}
