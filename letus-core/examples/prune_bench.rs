//! Pruning on a payment workload like the bench's (issue 13's figures), one run. The chain is generated here with
//! its own seed (42) and amounts (0-99), so its blocks are not those of `bench/` (seed `0x5eed`, amounts 1-100).
//!
//! 1. `--windows`: the same chain (load of `--accounts` in blocks of 50,000, then `--blocks` payment blocks of
//!    `--txs` transfers) applied to one store per setting — archive, and `Options::keep_versions` of each window
//!    (0: keep only the latest state) — each on its own, durable commits: commit rate over the payment blocks,
//!    p50/p99/max commit latency, the prunes (the store's `prunes` metric at the end: the background pruner's
//!    and the final foreground ones, right up to the window and the merge), then allocated bytes on disk as the
//!    pruner left it, pruned right up to the window, and with the base files merged (`Store::prune_merged`,
//!    then closed: index files, value log, all)
//!    against a fresh bulk import of the head state, and what value-log GC left: the value log against its live bytes (the exact
//!    accounting of a last GC pass), the bytes it moved, and the lifetime value write amplification (value
//!    records written, GC's copies included, over the chain's own records), after the merge (whose
//!    `Store::vlog_gc_all` compacts every file with any garbage) and, in the last column, before it (the online
//!    run: what the background pruner's GC left and copied);
//! 2. `--history`: the cost of pruning 1,000 versions on stores of 2,000 and of `--long` versions (blocks of
//!    `--small-txs` transfers after the same load, not fsynced: only the prune is timed): each store is first
//!    pruned to 1,000 versions before its head, then 1,000 more versions are committed and pruned.
//!
//! ```sh
//! cargo run --release -p letus-core --example prune_bench -- --accounts 1000000 --blocks 1001
//! ```

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use clap::Parser;
use letus_core::{Options, Store};
use letus_workload::Rng;

#[global_allocator]
static GLOBAL: letus_alloc::MiMalloc = letus_alloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// Accounts.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Payment blocks after the load.
    #[arg(long, default_value_t = 1001)]
    blocks: u64,
    /// Transfers per block (two updates each).
    #[arg(long, default_value_t = 1000)]
    txs: u64,
    /// Windows to measure besides the archive (`keep_versions`), comma-separated.
    #[arg(long, default_value = "100,10,0", value_delimiter = ',')]
    windows: Vec<u64>,
    /// Skip part 1.
    #[arg(long)]
    no_windows: bool,
    /// Versions of the long store of part 2 (0: skip part 2).
    #[arg(long, default_value_t = 100_000)]
    long: u64,
    /// Transfers per block in part 2.
    #[arg(long, default_value_t = 10)]
    small_txs: u64,
    /// `Options::max_replay_millis` of every store (500: what `letus serve` sets; it decides how often index files
    /// are cut, hence how finely the boundary moves).
    #[arg(long, default_value_t = 500)]
    max_replay_millis: u64,
    /// `Options::prune_garbage_ratio` of the pruned stores (default: the engine's).
    #[arg(long, default_value_t = letus_core::Options::default().prune_garbage_ratio)]
    prune_garbage_ratio: f64,
    /// `Options::vlog_gc_garbage` of the pruned stores.
    #[arg(long, default_value_t = 0.33)]
    vlog_gc_garbage: f64,
    /// `Options::vdls_file_bytes` of every store (GC deletes whole sealed files).
    #[arg(long, default_value_t = 16 << 20)]
    vdls_file_bytes: u64,
    /// Where the stores go (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Run the archive after the pruned stores instead of before them. The store that runs second starts while
    /// the kernel may still be writing back the first one's files; alternating the order between rounds cancels
    /// what is left of that after `--settle-secs`.
    #[arg(long)]
    archive_last: bool,
    /// Before each store: `sync`, then this many seconds of rest, so that no store's fsyncs queue behind the
    /// previous store's writeback.
    #[arg(long, default_value_t = 3)]
    settle_secs: u64,
}

const TID: u32 = 0;

fn key(a: u64) -> Vec<u8> {
    format!("account-{a:010}").into_bytes()
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Bytes allocated on disk under `dir` (blocks, not lengths).
fn allocated(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                total += allocated(&e.path());
            } else {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// The chain: the load blocks, then the payment blocks (keys touched, new balances); and the final balances.
struct Chain {
    blocks: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    load_versions: usize,
    balances: Vec<u64>,
}

fn chain(accounts: u64, payments: u64, txs: u64, seed: u64) -> Chain {
    let mut balances = vec![1_000_000u64; accounts as usize];
    let mut blocks: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
    for start in (0..accounts).step_by(50_000) {
        let end = (start + 50_000).min(accounts);
        blocks.push(
            (start..end)
                .map(|i| (key(i), balances[i as usize].to_le_bytes().to_vec()))
                .collect(),
        );
    }
    let load_versions = blocks.len();
    let mut rng = Rng::new(seed);
    for _ in 0..payments {
        let mut touched = std::collections::BTreeSet::new();
        for _ in 0..txs {
            let (from, to) = (rng.hot_account(accounts), rng.hot_account(accounts));
            let amount = rng.below(100);
            balances[from as usize] = balances[from as usize].saturating_sub(amount);
            balances[to as usize] += amount;
            touched.insert(from);
            touched.insert(to);
        }
        blocks.push(
            touched
                .iter()
                .map(|&i| (key(i), balances[i as usize].to_le_bytes().to_vec()))
                .collect(),
        );
    }
    Chain {
        blocks,
        load_versions,
        balances,
    }
}

fn commit(s: &mut Store, v: u64, block: &[(Vec<u8>, Vec<u8>)]) {
    for (k, val) in block {
        s.put(TID, k, val).unwrap();
    }
    s.commit(v).unwrap();
}

/// Waits for the kernel to write back what earlier stores left dirty (`sync`), then rests `secs` seconds.
fn settle(secs: u64) {
    if let Err(e) = std::process::Command::new("sync").status() {
        eprintln!("sync: {e}");
    }
    std::thread::sleep(std::time::Duration::from_secs(secs));
}

fn part_windows(a: &Args, root: &Path) {
    let c = chain(a.accounts, a.blocks, a.txs, 42);
    let updates: usize = c.blocks[c.load_versions..].iter().map(Vec::len).sum();
    // The value records the chain itself writes (what a write amplification of 1 is).
    let user_record_bytes: u64 = c
        .blocks
        .iter()
        .flatten()
        .map(|(k, v)| u64::from(letus_core::vdls::put_record_len(k.len(), v.len())))
        .sum();
    println!(
        "## Part 1: {} accounts, {} payment blocks of {} transfers ({} updates), durable commits",
        a.accounts, a.blocks, a.txs, updates
    );
    // The head state as a fresh import: the size a pruned store is compared with.
    let fresh_dir = root.join("fresh");
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..a.accounts)
        .map(|i| (key(i), c.balances[i as usize].to_le_bytes().to_vec()))
        .collect();
    pairs.sort_by_key(|(k, _)| letus_verify::KeyPath::of(k));
    let mut it = pairs.into_iter();
    let fresh = Store::bulk_load(&fresh_dir, Options::default(), TID, 1, None, || {
        Ok(it.next())
    })
    .unwrap();
    fresh.close().unwrap();
    let fresh_bytes = allocated(&fresh_dir);
    let fresh_index = allocated(&fresh_dir.join("lsvps"));
    println!(
        "fresh import of the head state: {} ({} index, {} value log)",
        mib(fresh_bytes),
        mib(fresh_index),
        mib(allocated(&fresh_dir.join("vdls")))
    );
    std::fs::remove_dir_all(&fresh_dir).unwrap();
    println!(
        "| setting | apply time | payment updates/s | commit p50 / p99 / max | prunes | on disk as the pruner left it | on disk, pruned to the window | merged, closed | of which index files | value log | disk / fresh import | index files / fresh import's | value log / its live bytes | GC: files deleted, moved | value write amplification | before the merge: value log / live, write amplification |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut settings: Vec<Option<u64>> = a.windows.iter().map(|w| Some(*w)).collect();
    if a.archive_last {
        settings.push(None);
    } else {
        settings.insert(0, None);
    }
    for keep in settings {
        settle(a.settle_secs);
        let dir = root.join(format!("store-{keep:?}"));
        let mut s = Store::open(
            &dir,
            Options {
                keep_versions: keep,
                prune_garbage_ratio: a.prune_garbage_ratio,
                vlog_gc_garbage: a.vlog_gc_garbage,
                vdls_file_bytes: a.vdls_file_bytes,
                max_replay_millis: a.max_replay_millis,
                ..Options::default()
            },
        )
        .unwrap();
        let started = Instant::now();
        let mut lat = Vec::new();
        let mut pay_secs = 0.0;
        for (i, b) in c.blocks.iter().enumerate() {
            let t = Instant::now();
            commit(&mut s, i as u64 + 1, b);
            if i >= c.load_versions {
                let d = t.elapsed().as_secs_f64();
                pay_secs += d;
                lat.push(d * 1e3);
            }
        }
        let apply = started.elapsed().as_secs_f64();
        // A last flush, and one more prune with the window, so that every store is measured settled.
        s.flush().unwrap();
        // As the background pruner left it (between prunes), then pruned right up to the window.
        let running = allocated(&dir);
        if let Some(k) = keep {
            while s.prune(k).unwrap().is_some() {}
        }
        // A last GC pass: deletes what the boundary has passed, and accounts the live bytes exactly.
        let mut gc = s.vlog_gc().unwrap();
        let pruned = allocated(&dir);
        // The value log and the write amplification of the online run (the pruner's GC), before the merge.
        let online = (
            gc.log_bytes as f64 / gc.live_bytes.max(1) as f64,
            (user_record_bytes + s.metrics().vlog_moved_bytes) as f64 / user_record_bytes as f64,
        );
        // Then the base files merged into one and every value-log file with garbage compacted as far as the
        // boundary allows (`letus prune --merge`): the least disk a prune leaves.
        if let Some(k) = keep {
            s.prune_merged(k).unwrap();
            gc = s.vlog_gc_all().unwrap();
        }
        // Where the value log's bytes are, file by file (stderr, beside the table): MiB committed / live,
        // R retired (waiting for the boundary), V a victim whose records are queued.
        let files: Vec<String> = gc
            .files
            .iter()
            .map(|f| {
                format!(
                    "{}:{:.1}/{:.1}{}{}",
                    f.id,
                    f.bytes as f64 / 1048576.0,
                    f.live_bytes as f64 / 1048576.0,
                    if f.retired_at.is_some() { "R" } else { "" },
                    if f.victim { "V" } else { "" }
                )
            })
            .collect();
        eprintln!("value-log files of {keep:?}: {}", files.join(" "));
        let m = s.metrics();
        let prunes = m.prunes;
        let oldest = s.pruned_below();
        s.close().unwrap();
        let total = allocated(&dir);
        let index = allocated(&dir.join("lsvps"));
        let vlog = allocated(&dir.join("vdls"));
        let name = match keep {
            None => "archive".to_string(),
            Some(0) => "keep only the latest".to_string(),
            Some(k) => format!("window {k}"),
        };
        println!(
            "| {name} (oldest held: {}) | {apply:.1} s | {:.0} | {:.1} / {:.1} / {:.1} ms | {prunes} | {} | {} | {} | {} | {} | {:.2}x | {:.2}x | {} / {} = {:.2}x | {}, {} | {:.2} | {:.2}x, {:.2} |",
            oldest.map_or("1".into(), |o| o.to_string()),
            updates as f64 / pay_secs,
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99),
            pct(&mut lat, 1.0),
            mib(running),
            mib(pruned),
            mib(total),
            mib(index),
            mib(vlog),
            total as f64 / fresh_bytes as f64,
            index as f64 / fresh_index as f64,
            mib(gc.log_bytes),
            mib(gc.live_bytes),
            gc.log_bytes as f64 / gc.live_bytes.max(1) as f64,
            m.vlog_files_deleted,
            mib(m.vlog_moved_bytes),
            (user_record_bytes + m.vlog_moved_bytes) as f64 / user_record_bytes as f64,
            online.0,
            online.1,
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn part_history(a: &Args, root: &Path) {
    println!(
        "## Part 2: pruning 1,000 versions, {} accounts, blocks of {} transfers (commits not fsynced; only prunes timed)",
        a.accounts, a.small_txs
    );
    println!("| versions in the store | first prune (to 1,000 before the head): time, pages, files removed | pruning the next 1,000 versions: time, pages, files removed |");
    println!("|---:|---:|---:|");
    for total in [2_000u64, a.long] {
        let c = chain(a.accounts, total + 1_000, a.small_txs, 7);
        let dir = root.join(format!("history-{total}"));
        let mut s = Store::open(
            &dir,
            Options {
                sync: false,
                max_replay_millis: a.max_replay_millis,
                ..Options::default()
            },
        )
        .unwrap();
        let head = c.load_versions as u64 + total;
        let started = Instant::now();
        for (i, b) in c.blocks[..head as usize].iter().enumerate() {
            commit(&mut s, i as u64 + 1, b);
            if (i + 1) % 20_000 == 0 {
                eprintln!(
                    "  {} versions ({:.0} s)",
                    i + 1,
                    started.elapsed().as_secs_f64()
                );
            }
        }
        s.flush().unwrap();
        let t = Instant::now();
        let first = s.prune(1_000).unwrap().expect("a first prune");
        let first_secs = t.elapsed().as_secs_f64();
        for (i, b) in c.blocks[head as usize..].iter().enumerate() {
            commit(&mut s, head + i as u64 + 1, b);
        }
        s.flush().unwrap();
        let t = Instant::now();
        let next = s.prune(1_000).unwrap().expect("a second prune");
        let next_secs = t.elapsed().as_secs_f64();
        println!(
            "| {} | {first_secs:.2} s, {} pages, {} files (boundary {}) | {next_secs:.2} s, {} pages, {} files (boundary {} → {}) |",
            head - c.load_versions as u64,
            first.pages,
            first.files_removed,
            first.boundary,
            next.pages,
            next.files_removed,
            first.boundary,
            next.boundary
        );
        s.close().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn main() {
    letus_alloc::init();
    let a = Args::parse();
    let tmp = tempfile::tempdir_in(a.dir.clone().unwrap_or_else(std::env::temp_dir)).unwrap();
    if !a.no_windows {
        part_windows(&a, tmp.path());
    }
    if a.long > 0 {
        part_history(&a, tmp.path());
    }
}
