//! Mixed-load HTTP benchmark against a `letus serve` node on 127.0.0.1 (it starts one on a temporary directory).
//!
//! `cargo build --release -p letus-node && cargo run --release -p letus-node --example http_load -- \
//!     [--keys N] [--clients N] [--seconds S] [--block-writes N] [--blocks N] [--read-rate N]`
//!
//! With `--read-rate N` the clients together offer N reads/s on a fixed schedule instead of reading as fast as
//! they are answered, so phases A and C see the same read load (latency then counts from each read's scheduled
//! time).
//!
//! It loads `keys` accounts (10,000 writes per block), then runs three phases against the same node, `seconds`
//! seconds each:
//!
//! - **A, reads only**: `clients` concurrent clients (threads, one keep-alive connection each) issuing
//!   `GET /v1/tries/0/keys/{key}` (value + proof + digest) for random loaded keys; every `verify_every`-th answer
//!   is verified with letus-verify. Reports reads/s and read latency p50 / p99 / p99.9 / max.
//! - **B, writes only**: one writer committing blocks back to back through `POST /v1/blocks` (each the next
//!   version, `block_writes` puts of random accounts, 80/20 with `letus_workload`). Reports blocks/s and
//!   commit latency p50 / p99 / p99.9 / max.
//! - **C, both at once**: the readers of A and the writer of B together. Reports both.
//!
//! Then the ratios the "readers never wait for writers" goals use: read p99 in C / read p99 in A (goal <= 2x)
//! and commit rate in C / commit rate in B (goal >= 0.8), with the maxima next to them.
//!
//! Percentiles are exact (every sample is kept and sorted; nearest rank). Latency is measured by the client,
//! which shares the machine with the node. Any answer that is not 2xx, and any transport error, is counted as
//! an error and reported; its latency is not in the percentiles. A failed block is retried from the node's
//! latest version (read from `GET /v1/digest`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Parser;
use letus_node::api::{BlockRequest, DigestsResponse, ValueResponse, WriteOp};
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::{verify_proof, Limits, Proof};

#[derive(Parser, Debug, Clone)]
#[command(about = "Mixed read/write HTTP benchmark against a spawned `letus serve`")]
struct Args {
    /// Accounts loaded before the phases (reads pick among them uniformly, writes 80/20).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Concurrent reading clients in phases A and C.
    #[arg(long, default_value_t = 64)]
    clients: u64,
    /// Duration of each phase, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Puts per block in phases B and C.
    #[arg(long, default_value_t = 1000)]
    block_writes: u64,
    /// If given, phase B commits exactly this many blocks instead of running for `--seconds`.
    #[arg(long)]
    blocks: Option<u64>,
    /// Verify every N-th read answer with letus-verify (0: never).
    #[arg(long, default_value_t = 100)]
    verify_every: u64,
    /// Seconds of reads before phase A, not measured (warms the node's caches and connections).
    #[arg(long, default_value_t = 1)]
    warmup_seconds: u64,
    /// Seed of the write key choice.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The `letus` binary to start.
    #[arg(long, env = "LETUS_BIN", default_value = "target/release/letus")]
    bin: String,
    /// Reads per second offered by all clients together (0: each client reads as fast as it is answered).
    /// Each client sends on a fixed schedule, and a read's latency counts from its scheduled time, so time spent
    /// waiting for an earlier answer is not hidden.
    #[arg(long, default_value_t = 0)]
    read_rate: u64,
}

fn key(i: u64) -> Vec<u8> {
    format!("account-{i:08}").into_bytes()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// Exact latency summary of a sorted sample.
struct Summary {
    n: usize,
    p50: Duration,
    p99: Duration,
    p999: Duration,
    max: Duration,
}

impl Summary {
    fn of(mut samples: Vec<Duration>) -> Summary {
        samples.sort_unstable();
        // Nearest rank: the smallest sample with at least q of the samples at or below it.
        let rank = |q: f64| -> Duration {
            if samples.is_empty() {
                return Duration::ZERO;
            }
            let r = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[r - 1]
        };
        Summary {
            n: samples.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            p999: rank(0.999),
            max: samples.last().copied().unwrap_or_default(),
        }
    }

    fn line(&self) -> String {
        format!(
            "p50 {} / p99 {} / p99.9 {} / max {}",
            ms(self.p50),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        )
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// What a group of readers measured.
struct Reads {
    lat: Summary,
    errors: u64,
    secs: f64,
}

impl Reads {
    fn rate(&self) -> f64 {
        self.lat.n as f64 / self.secs
    }
}

/// What the writer measured.
struct Writes {
    lat: Summary,
    blocks: u64,
    errors: u64,
    secs: f64,
}

impl Writes {
    fn rate(&self) -> f64 {
        self.blocks as f64 / self.secs
    }
}

/// `clients` reader threads, started together once `start` is passed, reading until `stop` is set.
struct Readers {
    handles: Vec<JoinHandle<(Vec<Duration>, u64)>>,
    started: Instant,
}

fn start_readers(args: &Args, url: &str, stop: &Arc<AtomicBool>, seed: u64) -> Readers {
    let barrier = Arc::new(Barrier::new(args.clients as usize + 1));
    let handles = (0..args.clients)
        .map(|c| {
            let (url, stop, barrier) = (url.to_string(), stop.clone(), barrier.clone());
            let (keys, verify_every, clients) = (args.keys, args.verify_every, args.clients);
            // With a read rate, client `c` sends every `clients / rate` seconds, the clients spread evenly.
            let period = (args.read_rate > 0)
                .then(|| Duration::from_secs_f64(args.clients as f64 / args.read_rate as f64));
            std::thread::spawn(move || {
                let agent = agent();
                let mut lat = Vec::with_capacity(1 << 16);
                let mut errors = 0u64;
                let mut s = (seed ^ c).wrapping_mul(7919) + 1;
                let mut n = 0u64;
                barrier.wait();
                let mut due = period.map(|p| Instant::now() + p.mul_f64(c as f64 / clients as f64));
                while !stop.load(Ordering::Relaxed) {
                    let scheduled = match (due.as_mut(), period) {
                        (Some(d), Some(p)) => {
                            if let Some(wait) = d.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            let at = *d;
                            *d += p;
                            Some(at)
                        }
                        _ => None,
                    };
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = key((s >> 16) % keys);
                    let t = Instant::now();
                    let body = match agent
                        .get(format!("{url}/v1/tries/0/keys/{}", hex(&k)))
                        .call()
                    {
                        Ok(mut res) if res.status().is_success() => {
                            res.body_mut().read_json::<ValueResponse>().ok()
                        }
                        _ => None,
                    };
                    let elapsed = scheduled.map_or_else(|| t.elapsed(), |at| at.elapsed());
                    let Some(body) = body else {
                        errors += 1;
                        continue;
                    };
                    lat.push(elapsed);
                    n += 1;
                    if verify_every > 0 && n.is_multiple_of(verify_every) {
                        let value = body.value.as_deref().map(|v| unhex(v).expect("hex"));
                        let p = Proof::decode(
                            &unhex(&body.proof_hex).expect("hex"),
                            &Limits::default(),
                        )
                        .expect("proof");
                        let read = verify_proof(
                            &body.digest.root,
                            &k,
                            value.as_deref(),
                            &p,
                            &Limits::default(),
                        )
                        .expect("verifies");
                        assert!(read.is_present(), "loaded key {k:?} absent");
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    barrier.wait();
    Readers {
        handles,
        started: Instant::now(),
    }
}

impl Readers {
    /// Joins the readers; `stop` must be set already.
    fn finish(self) -> Reads {
        let secs = self.started.elapsed().as_secs_f64();
        let mut all = Vec::new();
        let mut errors = 0;
        for h in self.handles {
            let (lat, e) = h.join().expect("reader");
            all.extend(lat);
            errors += e;
        }
        Reads {
            lat: Summary::of(all),
            errors,
            secs,
        }
    }
}

/// The node's latest version (`GET /v1/digest`).
fn latest_version(agent: &ureq::Agent, url: &str) -> u64 {
    let mut res = agent
        .get(format!("{url}/v1/digest"))
        .call()
        .expect("GET /v1/digest");
    assert!(
        res.status().is_success(),
        "GET /v1/digest: {}",
        res.status()
    );
    res.body_mut()
        .read_json::<DigestsResponse>()
        .expect("digest json")
        .version
}

/// One writer committing blocks back to back from `version + 1`, until `stop` is set (the block in flight
/// completes) or `limit` blocks are committed. Returns what it measured and the last committed version.
fn write_blocks(
    args: &Args,
    url: &str,
    mut version: u64,
    rng: &mut letus_workload::Rng,
    stop: &AtomicBool,
    limit: Option<u64>,
) -> (Writes, u64) {
    let agent = agent();
    let mut lat = Vec::new();
    let (mut blocks, mut errors) = (0u64, 0u64);
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && limit.is_none_or(|l| blocks < l) {
        let req = BlockRequest {
            version: version + 1,
            writes: (0..args.block_writes)
                .map(|_| WriteOp {
                    tid: 0,
                    key: hex(&key(rng.hot_account(args.keys))),
                    value: Some(hex(&rng.next_u64().to_le_bytes())),
                })
                .collect(),
            block: None,
            access_list: vec![],
        };
        let t = Instant::now();
        let ok = match agent
            .post(format!("{url}/v1/blocks"))
            .header("authorization", "Bearer load")
            .send_json(&req)
        {
            Ok(mut res) => {
                let ok = res.status().is_success();
                if !ok {
                    let body = res.body_mut().read_to_string().unwrap_or_default();
                    eprintln!("block {}: {} {body}", req.version, res.status());
                }
                ok
            }
            Err(e) => {
                eprintln!("block {}: {e}", req.version);
                false
            }
        };
        let elapsed = t.elapsed();
        if ok {
            lat.push(elapsed);
            blocks += 1;
            version += 1;
        } else {
            errors += 1;
            // The block may or may not have been committed (a lost answer): go on from what the node has.
            version = latest_version(&agent, url);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    (
        Writes {
            lat: Summary::of(lat),
            blocks,
            errors,
            secs,
        },
        version,
    )
}

fn print_reads(args: &Args, r: &Reads) {
    println!(
        "  reads:   {:.0} reads/s ({} in {:.1}s, {} clients), {}, errors {}",
        r.rate(),
        r.lat.n,
        r.secs,
        args.clients,
        r.lat.line(),
        r.errors
    );
}

fn print_writes(args: &Args, w: &Writes) {
    println!(
        "  commits: {:.1} blocks/s ({:.0} writes/s; {} blocks of {} in {:.1}s), {}, errors {}",
        w.rate(),
        w.rate() * args.block_writes as f64,
        w.blocks,
        args.block_writes,
        w.secs,
        w.lat.line(),
        w.errors
    );
}

/// Kills the node when dropped, whichever way `main` ends.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn main() {
    let args = Args::parse();
    assert!(
        args.keys > 0 && args.clients > 0 && args.seconds > 0,
        "--keys, --clients and --seconds must be > 0"
    );
    let phase = Duration::from_secs(args.seconds);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(&args.bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--token", "load", "--data"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} (build it with `cargo build --release -p letus-node`, or set LETUS_BIN / --bin): {e}",
                args.bin
            )
        });
    let stdout = child.stdout.take().expect("stdout");
    let _node = Node(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("node prints its URL");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("URL")
        .to_string();

    // Load the accounts (10k writes per block).
    let loader = agent();
    let t = Instant::now();
    let mut version = 0;
    for chunk in (0..args.keys).collect::<Vec<_>>().chunks(10_000) {
        version += 1;
        let req = BlockRequest {
            version,
            writes: chunk
                .iter()
                .map(|&i| WriteOp {
                    tid: 0,
                    key: hex(&key(i)),
                    value: Some(hex(&i.to_le_bytes())),
                })
                .collect(),
            block: None,
            access_list: vec![],
        };
        let res = loader
            .post(format!("{url}/v1/blocks"))
            .header("authorization", "Bearer load")
            .send_json(&req)
            .expect("post");
        assert_eq!(res.status(), 200, "load block {version}");
    }
    println!(
        "node {url}: loaded {} accounts in {version} blocks in {:.1}s",
        args.keys,
        t.elapsed().as_secs_f64()
    );
    println!(
        "{} reading clients{} (GET /v1/tries/0/keys/{{key}}, value + proof, {}); \
         1 writer (POST /v1/blocks, {} puts per block); {}s per phase",
        args.clients,
        match args.read_rate {
            0 => String::new(),
            r => format!(" offering {r} reads/s"),
        },
        match args.verify_every {
            0 => "none verified".to_string(),
            n => format!("1 in {n} verified"),
        },
        args.block_writes,
        args.seconds
    );

    if args.warmup_seconds > 0 {
        let stop = Arc::new(AtomicBool::new(false));
        let readers = start_readers(&args, &url, &stop, 0x5eed);
        std::thread::sleep(Duration::from_secs(args.warmup_seconds));
        stop.store(true, Ordering::Relaxed);
        let w = readers.finish();
        println!(
            "warm-up: {:.0} reads/s over {}s (not counted)",
            w.rate(),
            args.warmup_seconds
        );
    }

    // A: reads only.
    let stop = Arc::new(AtomicBool::new(false));
    let readers = start_readers(&args, &url, &stop, 1);
    std::thread::sleep(phase);
    stop.store(true, Ordering::Relaxed);
    let a = readers.finish();
    println!("phase A, reads only:");
    print_reads(&args, &a);

    // B: writes only.
    let mut rng = letus_workload::Rng::new(args.seed);
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        let fixed = args.blocks.is_some();
        std::thread::spawn(move || {
            if !fixed {
                std::thread::sleep(phase);
                stop.store(true, Ordering::Relaxed);
            }
        })
    };
    let (b, v) = write_blocks(&args, &url, version, &mut rng, &stop, args.blocks);
    version = v;
    timer.join().expect("timer");
    println!("phase B, writes only:");
    print_writes(&args, &b);

    // C: both. The readers run from before the writer's first block to after its last one.
    let read_stop = Arc::new(AtomicBool::new(false));
    let write_stop = Arc::new(AtomicBool::new(false));
    let readers = start_readers(&args, &url, &read_stop, 2);
    let writer = {
        let (args, url, write_stop) = (args.clone(), url.clone(), write_stop.clone());
        let mut rng = rng.clone();
        std::thread::spawn(move || write_blocks(&args, &url, version, &mut rng, &write_stop, None))
    };
    std::thread::sleep(phase);
    write_stop.store(true, Ordering::Relaxed);
    let (c_writes, v) = writer.join().expect("writer");
    read_stop.store(true, Ordering::Relaxed);
    let c_reads = readers.finish();
    version = v;
    println!("phase C, reads and writes at once:");
    print_reads(&args, &c_reads);
    print_writes(&args, &c_writes);

    let latest = latest_version(&loader, &url);
    assert_eq!(
        latest, version,
        "the node's latest version is the last committed block"
    );

    let p99_ratio = ratio(c_reads.lat.p99, a.lat.p99);
    let rate_ratio = c_writes.rate() / b.rate().max(1e-9);
    let verdict = |ok: bool| if ok { "meets goal" } else { "MISSES goal" };
    println!("goals (\"readers never wait for writers\"):");
    println!(
        "  read p99 C / A     = {:>6.2}x  (goal <= 2x, {}): {} vs {}; max C / A = {:.2}x: {} vs {}",
        p99_ratio,
        verdict(p99_ratio <= 2.0),
        ms(c_reads.lat.p99),
        ms(a.lat.p99),
        ratio(c_reads.lat.max, a.lat.max),
        ms(c_reads.lat.max),
        ms(a.lat.max)
    );
    println!(
        "  commit rate C / B  = {:>6.2}   (goal >= 0.8, {}): {:.1} vs {:.1} blocks/s; commit p99 C / B: {} vs {}, max {} vs {}",
        rate_ratio,
        verdict(rate_ratio >= 0.8),
        c_writes.rate(),
        b.rate(),
        ms(c_writes.lat.p99),
        ms(b.lat.p99),
        ms(c_writes.lat.max),
        ms(b.lat.max)
    );
    println!(
        "  read throughput C / A = {:.2} ({:.0} vs {:.0} reads/s)",
        c_reads.rate() / a.rate().max(1e-9),
        c_reads.rate(),
        a.rate()
    );
    let errors = a.errors + b.errors + c_reads.errors + c_writes.errors;
    println!("errors (non-2xx or transport): {errors} in all; final version {version}");
    if errors > 0 {
        std::process::exit(1);
    }
}
