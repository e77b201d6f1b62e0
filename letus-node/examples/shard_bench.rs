//! Sharding measured with the real binary (issue: sharding): one node against routers over 1, 2, 4 ... shards,
//! the same payment chain, one run.
//!
//! `cargo build --release -p letus-node --bin letus --example shard_bench && \
//!     ./target/release/examples/shard_bench --accounts 1000000 --dir /path/on/the/disk [--shards 1,2,4] \
//!     [--blocks 200] [--moves 8] [--move-step-pairs 10000] [--bin target/release/letus]`
//!
//! For each setup (first a single `letus serve`, then `letus route` over N shard nodes, each shard
//! `--shard-prefixes` the N-th part of 00-ff): `accounts` accounts are written through the API in blocks of 10,000,
//! then `blocks` payment blocks (1,000 transfers: 2,000 writes, 80% on 20% of the accounts) are posted back to back
//! by one client and each block's latency taken. CPU seconds of every process during the payment blocks come from
//! `/proc/PID/stat`, so the router's cost per block and each shard's are reported apart (this machine has two
//! cores: N shards share them). Prints one JSON line per setup; the data directories are removed at the end.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use letus_node::api::{BlockRequest, WriteOp};
use letus_node::sharding::PrefixSet;
use letus_verify::hex::encode as hex;
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Accounts in the state.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Where the data directories go (removed at the end).
    #[arg(long)]
    dir: PathBuf,
    /// Shard counts to measure, after the single node.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    shards: Vec<usize>,
    /// Payment blocks measured per setup.
    #[arg(long, default_value_t = 200)]
    blocks: u64,
    /// The `letus` binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Subtree moves measured after the payment blocks of each setup of 2 shards or more: one after the other,
    /// each to the next shard, while payment blocks go on (0: none).
    #[arg(long, default_value_t = 0)]
    moves: u64,
    /// The router's `--move-step-pairs` (default: the router's own).
    #[arg(long)]
    move_step_pairs: Option<usize>,
}

const TOKEN: &str = "shard-bench";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into()
}

fn spawn(mut cmd: Command) -> (Child, String) {
    let mut c = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn letus");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (c, url)
}

fn serve(bin: &Path, data: &Path, prefixes: Option<String>) -> (Child, String) {
    let mut cmd = Command::new(bin);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token",
        TOKEN,
        "--data",
    ])
    .arg(data);
    if let Some(p) = prefixes {
        cmd.args(["--shard-prefixes", &p]);
    }
    spawn(cmd)
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name; clock ticks of 1/100 s.
    (ticks(11) + ticks(12)) / 100.0
}

fn account(i: u64) -> String {
    hex(format!("account-{i:010}").as_bytes())
}

fn post(a: &ureq::Agent, url: &str, req: &BlockRequest) {
    let mut r = a
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(req)
        .unwrap();
    let status = r.status();
    assert_eq!(
        status,
        200,
        "block {}: {}",
        req.version,
        r.body_mut().read_to_string().unwrap_or_default()
    );
}

fn block(version: u64, writes: Vec<WriteOp>) -> BlockRequest {
    BlockRequest {
        version,
        writes,
        block: Some(hex(format!("block {version}").as_bytes())),
        access_list: vec![],
    }
}

/// Payment block `v`: 1,000 transfers (2,000 writes, 80% on 20% of the accounts).
fn payment(rng: &mut letus_workload::Rng, v: u64, accounts: u64) -> BlockRequest {
    let mut writes = std::collections::BTreeMap::new();
    for _ in 0..1000 {
        for acc in [rng.hot_account(accounts), rng.hot_account(accounts)] {
            writes.insert(acc, rng.below(1_000_000));
        }
    }
    block(
        v,
        writes
            .into_iter()
            .map(|(k, bal)| WriteOp {
                tid: 0,
                key: account(k),
                value: Some(hex(format!("balance {bal}").as_bytes())),
            })
            .collect(),
    )
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// p50, p99 and max of `lat` (sorted here), in ms.
fn latencies(lat: &mut [Duration]) -> serde_json::Value {
    lat.sort();
    let pct = |q: f64| ms(lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)]);
    json!({"p50": pct(0.5), "p99": pct(0.99), "max": ms(*lat.last().unwrap())})
}

/// Loads the accounts and runs the payment blocks against `url`; returns the figures as JSON, the last version
/// and the workload's generator.
fn run(
    args: &Args,
    url: &str,
    pids: &[(String, u32)],
) -> (serde_json::Value, u64, letus_workload::Rng) {
    let a = agent();
    let started = Instant::now();
    let mut v = 0;
    for start in (0..args.accounts).step_by(10_000) {
        v += 1;
        let end = (start + 10_000).min(args.accounts);
        let writes = (start..end)
            .map(|i| WriteOp {
                tid: 0,
                key: account(i),
                value: Some(hex(b"balance 100")),
            })
            .collect();
        post(&a, url, &block(v, writes));
    }
    let load = started.elapsed().as_secs_f64();
    let mut rng = letus_workload::Rng::new(11);
    let cpu0: Vec<f64> = pids.iter().map(|(_, p)| cpu_seconds(*p)).collect();
    let mut lat = Vec::new();
    let mut updates = 0usize;
    let started = Instant::now();
    for _ in 0..args.blocks {
        v += 1;
        let req = payment(&mut rng, v, args.accounts);
        updates += req.writes.len();
        let t = Instant::now();
        post(&a, url, &req);
        lat.push(t.elapsed());
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu0)
        .map(|((_, p), c0)| cpu_seconds(*p) - c0)
        .collect();
    let figures = json!({
        "load_keys_per_sec": (args.accounts as f64 / load).round(),
        "blocks_per_sec": ((args.blocks as f64 / secs) * 100.0).round() / 100.0,
        "updates_per_sec": (updates as f64 / secs).round(),
        "commit_ms": latencies(&mut lat),
        "cpu_ms_per_block": pids.iter().zip(&cpu).map(|((name, _), c)| {
            (name.clone(), json!((c / args.blocks as f64 * 1e4).round() / 10.0))
        }).collect::<serde_json::Map<_, _>>(),
        "cores_used": (cpu.iter().sum::<f64>() / secs * 100.0).round() / 100.0,
    });
    (figures, v, rng)
}

/// Moves `args.moves` subtrees over `n` shards, one after the other (subtree `17·i mod 256` to the shard after
/// its holder), while payment blocks go on after version `v`; returns the figures.
fn run_moves(
    args: &Args,
    url: &str,
    n: usize,
    mut v: u64,
    rng: &mut letus_workload::Rng,
) -> serde_json::Value {
    let a = agent();
    let map = || -> serde_json::Value {
        a.get(format!("{url}/v1/shard/map"))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap()
    };
    let mut lat = Vec::new();
    let mut per_move = Vec::new();
    let started = Instant::now();
    for i in 0..args.moves {
        let prefix = (i * 17 % 256) as usize;
        let holder = map()["holds"]
            .as_array()
            .unwrap()
            .iter()
            .position(|h| {
                h.as_str()
                    .is_some_and(|h| PrefixSet::parse(h).is_ok_and(|s| s.contains(prefix as u8)))
            })
            .unwrap();
        let mut r = a
            .post(format!("{url}/v1/shard/moves"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send_json(json!({"prefix": format!("{prefix:02x}"), "to": (holder + 1) % n}))
            .unwrap();
        assert_eq!(
            r.status(),
            202,
            "{}",
            r.body_mut().read_to_string().unwrap_or_default()
        );
        let (t0, v0) = (Instant::now(), v);
        loop {
            v += 1;
            let req = payment(rng, v, args.accounts);
            let t = Instant::now();
            post(&a, url, &req);
            lat.push(t.elapsed());
            if map()["map"]["task"].is_null() {
                break;
            }
        }
        per_move.push((t0.elapsed(), v - v0));
    }
    let secs = started.elapsed().as_secs_f64();
    let blocks: u64 = per_move.iter().map(|(_, b)| b).sum();
    let mut move_secs: Vec<Duration> = per_move.iter().map(|(d, _)| *d).collect();
    json!({
        "moves": args.moves,
        "blocks_per_move": blocks as f64 / args.moves as f64,
        "ms_per_move": latencies(&mut move_secs),
        "blocks_per_sec_during_moves": ((blocks as f64 / secs) * 100.0).round() / 100.0,
        "commit_ms_during_moves": latencies(&mut lat),
    })
}

fn main() {
    let args = Args::parse();
    let bin = args.bin.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().join("letus")
    });
    std::fs::create_dir_all(&args.dir).unwrap();
    let mut results = Vec::new();
    {
        let data = args.dir.join("single");
        let (mut node, url) = serve(&bin, &data, None);
        let (r, _, _) = run(&args, &url, &[("node".into(), node.id())]);
        println!("{}", json!({"setup": "single node", "figures": r}));
        results.push(("single".to_string(), r));
        let _ = node.kill();
        let _ = node.wait();
        let _ = std::fs::remove_dir_all(&data);
    }
    for &n in &args.shards {
        let data = args.dir.join(format!("shards-{n}"));
        let mut shards: Vec<(Child, String)> = (0..n)
            .map(|i| {
                serve(
                    &bin,
                    &data.join(format!("shard-{i}")),
                    Some(PrefixSet::part(i, n).to_string()),
                )
            })
            .collect();
        let mut cmd = Command::new(&bin);
        cmd.args([
            "route",
            "--listen",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--data",
        ])
        .arg(data.join("router"));
        for (_, u) in &shards {
            cmd.args(["--shard", u]);
        }
        if let Some(m) = args.move_step_pairs {
            cmd.args(["--move-step-pairs", &m.to_string()]);
        }
        let (mut router, url) = spawn(cmd);
        let mut pids = vec![("router".to_string(), router.id())];
        pids.extend(
            shards
                .iter()
                .enumerate()
                .map(|(i, (c, _))| (format!("shard-{i}"), c.id())),
        );
        let (r, v, mut rng) = run(&args, &url, &pids);
        println!(
            "{}",
            json!({"setup": format!("router over {n} shards"), "figures": r})
        );
        if args.moves > 0 && n > 1 {
            let m = run_moves(&args, &url, n, v, &mut rng);
            println!(
                "{}",
                json!({"setup": format!("router over {n} shards, moving subtrees"), "figures": m})
            );
        }
        results.push((format!("{n} shards"), r));
        let _ = router.kill();
        let _ = router.wait();
        for (c, _) in &mut shards {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&data);
    }
    let base = results[0].1["blocks_per_sec"].as_f64().unwrap_or(1.0);
    for (name, r) in &results {
        println!(
            "{name}: {} blocks/s ({:.2}x the single node), commit p50/p99/max {}/{}/{} ms, {} cores",
            r["blocks_per_sec"],
            r["blocks_per_sec"].as_f64().unwrap_or(0.0) / base,
            r["commit_ms"]["p50"],
            r["commit_ms"]["p99"],
            r["commit_ms"]["max"],
            r["cores_used"]
        );
    }
}
