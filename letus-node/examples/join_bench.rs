//! Joining from a snapshot, measured with the real binary (issue: join from a snapshot).
//!
//! `cargo build --release -p letus-node && cargo run --release -p letus-node --example join_bench -- \
//!     --accounts 1000000 --dir /path/on/the/disk [--seconds 20] [--parallel 4] [--max-pairs 16384]`
//!
//! 1. Node A's store gets `accounts` accounts by bulk load (version 1), then `letus serve` runs on it and one
//!    writer posts payment blocks back to back (1,000 transfers each: 2,000 writes, 80% on 20% of the accounts,
//!    every block fsynced). The writer runs for the whole benchmark.
//! 2. **Idle**: A's commit rate for `seconds` seconds while nothing else runs.
//! 3. **Join**: `letus serve --join A --trusted-root R --join-version V --follow` on an empty data directory B
//!    (V: A's newest version, R its root): manifest and chunks over HTTP, each chunk verified on arrival and stored
//!    as it comes, then the node serves. The time from spawning B to its first line is the join time; A's commit
//!    rate meanwhile is the "while serving the snapshot" figure. `--nice-b` runs B at nice 19; `--pin` keeps A
//!    and the writer on CPU 0 and B on CPU 1 from the idle phase on (two one-core machines).
//! 4. **Catch up**: the writer stops; B, following A, applies A's versions since the snapshot; the time until B
//!    has A's newest version, and B's digest there against A's.
//!
//! Prints one JSON object per phase and a summary; the data directories are removed at the end.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/common/http_proxy.rs"]
mod http_proxy;

use clap::Parser;
use letus_core::{Options, Store};
use letus_node::api::{BlockRequest, DigestsResponse, WriteOp};
use letus_verify::hex::encode as hex;
use letus_verify::KeyPath;
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Accounts in A's state.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Where the two data directories go (removed at the end).
    #[arg(long)]
    dir: PathBuf,
    /// Seconds of the idle phase.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Chunks fetched at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Pairs per chunk.
    #[arg(long, default_value_t = letus_node::node::DEFAULT_SNAPSHOT_PAIRS)]
    max_pairs: u64,
    /// B's `--join-max-pairs-per-sec` (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_pairs_per_sec: u64,
    /// Run B at `nice -n 19`, as if on another machine: A's figure then shows what serving costs A, not what
    /// B's verifying and storing on the same two cores cost it.
    #[arg(long)]
    nice_b: bool,
    /// The `letus` binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// B reaches A through a proxy that holds every request this many milliseconds before forwarding it, as a
    /// round trip over a wide-area link would (0: B talks to A directly).
    #[arg(long, default_value_t = 0)]
    source_rtt_ms: u64,
    /// The writer pauses while B joins (and resumes for `seconds` after, for the catch-up): the join's pairs/s
    /// then shows what the two nodes' own work costs, without A's commits on the same cores (A's rate while
    /// serving is not measured).
    #[arg(long)]
    quiet_source: bool,
    /// A and the writer on CPU 0, B on CPU 1 (`taskset`), from the idle phase on: two machines of one core each, so
    /// that A's rate while serving shows what serving costs A and not what B's work on A's cores costs it.
    #[arg(long)]
    pin: bool,
}

const TOKEN: &str = "join-bench";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into()
}

fn account(i: u64) -> Vec<u8> {
    format!("account-{i:010}").into_bytes()
}

/// `letus serve` (under `nice -n 19` with `nice`), its log in `log` (else on this process's stderr, warnings
/// only); returns once it serves.
fn serve_logged(
    bin: &Path,
    data: &Path,
    flags: &[&str],
    log: Option<&Path>,
    nice: bool,
    cpu: Option<usize>,
) -> (Child, String) {
    let mut prefix: Vec<String> = Vec::new();
    if let Some(cpu) = cpu {
        prefix.extend(["taskset".into(), "-c".into(), cpu.to_string()]);
    }
    if nice {
        prefix.extend(["nice".into(), "-n".into(), "19".into()]);
    }
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let mut c = cmd
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--data",
        ])
        .arg(data)
        .args(flags)
        .env(
            "RUST_LOG",
            if log.is_some() {
                "info,letus_node::join=debug"
            } else {
                "warn"
            },
        )
        .stdout(Stdio::piped())
        .stderr(log.map_or(Stdio::inherit(), |l| {
            std::fs::File::create(l).unwrap().into()
        }))
        .spawn()
        .expect("spawn letus serve");
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("URL")
        .to_string();
    (c, url)
}

fn digest(url: &str, v: Option<u64>) -> DigestsResponse {
    let path = v.map_or("/v1/digest".to_string(), |v| format!("/v1/digest/{v}"));
    agent()
        .get(format!("{url}{path}"))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap()
}

/// Blocks committed by the writer, for rates over a window.
struct Writer {
    blocks: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// While set, the writer posts no block.
    pause: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

fn writer(url: String, accounts: u64, from: u64) -> Writer {
    let blocks = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Arc::new(AtomicBool::new(false));
    let (b, s, p) = (blocks.clone(), stop.clone(), pause.clone());
    let handle = std::thread::spawn(move || {
        let mut rng = letus_workload::Rng::new(11);
        let mut v = from;
        let a = agent();
        while !s.load(Ordering::Relaxed) {
            if p.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            v += 1;
            let mut writes = std::collections::BTreeMap::new();
            for _ in 0..1000 {
                for acc in [rng.hot_account(accounts), rng.hot_account(accounts)] {
                    writes.insert(acc, rng.below(1_000_000));
                }
            }
            let req = BlockRequest {
                version: v,
                writes: writes
                    .into_iter()
                    .map(|(k, bal)| WriteOp {
                        tid: 0,
                        key: hex(&account(k)),
                        value: Some(hex(format!("balance {bal}").as_bytes())),
                    })
                    .collect(),
                block: Some(hex(format!("block {v}").as_bytes())),
                access_list: vec![],
            };
            let r = a
                .post(format!("{url}/v1/blocks"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .send_json(&req)
                .unwrap();
            assert_eq!(r.status(), 200);
            b.fetch_add(1, Ordering::Relaxed);
        }
        v
    });
    Writer {
        blocks,
        stop,
        pause,
        handle,
    }
}

/// Blocks per second over `f`'s run.
fn rate_during<T>(w: &Writer, f: impl FnOnce() -> T) -> (T, f64, f64) {
    let (b0, t0) = (w.blocks.load(Ordering::Relaxed), Instant::now());
    let r = f();
    let (b1, secs) = (w.blocks.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    (r, (b1 - b0) as f64 / secs, secs)
}

fn main() {
    let args = Args::parse();
    let (a_cpu, b_cpu) = if args.pin {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    let bin = args.bin.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().join("letus")
    });
    let _ = std::fs::remove_dir_all(&args.dir);
    let (a_dir, b_dir) = (args.dir.join("a"), args.dir.join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();

    // 1. A's state by bulk load, in path order.
    let t = Instant::now();
    let mut keys: Vec<(KeyPath, u64)> = (0..args.accounts)
        .map(|i| (KeyPath::of(&account(i)), i))
        .collect();
    keys.sort_unstable();
    let mut it = keys.into_iter();
    Store::bulk_load(a_dir.join("state"), Options::default(), 0, 1, None, || {
        Ok(it
            .next()
            .map(|(_, i)| (account(i), b"balance 100".to_vec())))
    })
    .unwrap()
    .close()
    .unwrap();
    println!(
        "{}",
        json!({"phase": "A's state", "accounts": args.accounts, "seconds": t.elapsed().as_secs_f64()})
    );
    if args.pin {
        // This process (the writer) keeps to A's CPU; threads started later inherit it.
        let ok = Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "taskset failed: --pin needs util-linux's taskset and two CPUs"
        );
    }
    let (mut a, a_url) = serve_logged(&bin, &a_dir, &[], None, false, a_cpu);
    let w = writer(a_url.clone(), args.accounts, 1);

    // 2. Idle.
    std::thread::sleep(Duration::from_secs(3));
    let ((), idle, _) = rate_during(&w, || std::thread::sleep(Duration::from_secs(args.seconds)));
    println!("{}", json!({"phase": "idle", "A blocks/s": idle}));

    // 3. B joins (`letus serve --join A`: manifest, chunks verified on arrival and stored as they come, the
    // history frontier) while A commits; A's rate meanwhile is the "while serving the snapshot" figure.
    let d = digest(&a_url, None);
    let source = match args.source_rtt_ms {
        0 => a_url.clone(),
        ms => delaying_proxy(a_url.clone(), Duration::from_millis(ms)),
    };
    let (v, root) = (d.version, d.digests[0].root.to_hex());
    let log = args.dir.join("b.log");
    let b_flags = [
        "--join".to_string(),
        source.clone(),
        "--join-version".into(),
        v.to_string(),
        "--trusted-root".into(),
        root.clone(),
        "--join-parallel".into(),
        args.parallel.to_string(),
        "--join-max-pairs".into(),
        args.max_pairs.to_string(),
        "--join-max-pairs-per-sec".into(),
        args.max_pairs_per_sec.to_string(),
        "--follow".into(),
    ];
    let b_flags: Vec<&str> = b_flags.iter().map(String::as_str).collect();
    if args.quiet_source {
        w.pause.store(true, Ordering::Relaxed);
        // A block already posted finishes first.
        std::thread::sleep(Duration::from_millis(300));
    }
    let ((mut b, b_url), serving, join_secs) = rate_during(&w, || {
        serve_logged(&bin, &b_dir, &b_flags, Some(&log), args.nice_b, b_cpu)
    });
    if args.quiet_source {
        w.pause.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(args.seconds));
    }
    let joined = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains("joined from a snapshot"))
        .unwrap_or("")
        .to_string();
    let pairs = args.accounts as f64;
    println!(
        "{}",
        json!({"phase": "join", "version": v, "seconds": join_secs, "A blocks/s": serving,
               "A rate vs idle": serving / idle, "pairs/s verified and stored": pairs / join_secs,
               "B's log": joined})
    );

    // 4. Catch up: the writer stops; B (following A) applies A's versions since the snapshot.
    w.stop.store(true, Ordering::Relaxed);
    let last = w.handle.join().unwrap();
    let t = Instant::now();
    let at_stop = digest(&b_url, None).version;
    while digest(&b_url, None).version < last {
        std::thread::sleep(Duration::from_millis(20));
    }
    let catch_up = t.elapsed().as_secs_f64();
    let same = digest(&b_url, Some(last)).digests == digest(&a_url, Some(last)).digests;
    println!(
        "{}",
        json!({"phase": "catch up", "versions behind when the writer stopped": last - at_stop,
               "versions since the snapshot": last - v, "seconds": catch_up,
               "versions/s": (last - at_stop) as f64 / catch_up.max(1e-9), "same digest as A": same})
    );
    println!(
        "{}",
        json!({
            "summary": {
                "accounts": args.accounts,
                "join version": v,
                "join s (spawn to serving)": join_secs,
                "pairs/s verified and stored": pairs / join_secs,
                "catch up": {"versions": last - at_stop, "seconds": catch_up},
                "A blocks/s idle": idle,
                "A blocks/s while serving": serving,
                "A commit rate while serving / idle": serving / idle,
                "B niced": args.nice_b,
                "A quiet while serving": args.quiet_source,
                "A on CPU 0, B on CPU 1": args.pin,
                "B max pairs/s": args.max_pairs_per_sec,
                "same digests": same,
            }
        })
    );
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    // B's log (with the follower's per-version timings) outlives the data directories.
    let kept = std::env::temp_dir().join("join_bench_b.log");
    let _ = std::fs::copy(&log, &kept);
    println!("{}", json!({"B's log": kept}));
    let _ = std::fs::remove_dir_all(&args.dir);
    assert!(same, "B's digest differs from A's");
}

/// A proxy to `target` that holds every answer for `rtt` before sending it on. Returns its URL.
fn delaying_proxy(target: String, rtt: Duration) -> String {
    http_proxy::start(target, move |_, _| std::thread::sleep(rtt))
}
