//! HTTP load generator against a `letus serve` node on 127.0.0.1 (it starts one on a temporary directory).
//!
//! `cargo run --release -p letus-node --example http_load -- [--keys N] [--blocks N] [--clients N] [--seconds S]`
//!
//! 1. Block commits: `blocks` blocks of 1,000 writes each through `POST /v1/blocks` (sequential: each version
//!    must follow the previous one), reporting blocks/s and writes/s.
//! 2. Proofs: `clients` concurrent clients (threads, keep-alive connections) issuing
//!    `GET /v1/tries/0/keys/{key}` for random keys for `seconds` seconds; reports proofs served per second and
//!    p50/p99 latency. Every 100th answer is verified with letus-verify.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use letus_node::api::{BlockRequest, ValueResponse, WriteOp};
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::{verify_proof, Limits, Proof};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(i: u64) -> Vec<u8> {
    format!("account-{i:08}").into_bytes()
}

fn main() {
    let keys = arg("--keys", 100_000);
    let blocks = arg("--blocks", 100);
    let clients = arg("--clients", 64);
    let seconds = arg("--seconds", 10);
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::var("LETUS_BIN").unwrap_or_else(|_| "target/release/letus".into());
    let mut node = Command::new(&exe)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "load",
            "--data",
        ])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {exe} (build it with `cargo build --release -p letus-node`): {e}")
        });
    let mut line = String::new();
    BufReader::new(node.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("node prints its URL");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("URL")
        .to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let post = |version: u64, writes: Vec<WriteOp>| {
        let req = BlockRequest {
            version,
            writes,
            block: None,
            access_list: vec![],
        };
        let res = agent
            .post(format!("{url}/v1/blocks"))
            .header("authorization", "Bearer load")
            .send_json(&req)
            .expect("post");
        assert_eq!(res.status(), 200, "block {version}");
    };
    // Load the accounts (10k writes per block).
    let t = Instant::now();
    let mut version = 0;
    for chunk in (0..keys).collect::<Vec<_>>().chunks(10_000) {
        version += 1;
        post(
            version,
            chunk
                .iter()
                .map(|&i| WriteOp {
                    tid: 0,
                    key: hex(&key(i)),
                    value: Some(hex(&i.to_le_bytes())),
                })
                .collect(),
        );
    }
    println!(
        "loaded {keys} accounts in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    // 1. Block commits with 1,000 writes each.
    let mut rng = letus_core::workload::Rng::new(7);
    let t = Instant::now();
    for _ in 0..blocks {
        version += 1;
        let writes = (0..1000)
            .map(|_| WriteOp {
                tid: 0,
                key: hex(&key(rng.hot_account(keys))),
                value: Some(hex(&rng.next_u64().to_le_bytes())),
            })
            .collect();
        post(version, writes);
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "POST /v1/blocks with 1,000 writes: {:.1} blocks/s ({:.0} writes/s) over {blocks} blocks",
        blocks as f64 / secs,
        blocks as f64 * 1000.0 / secs
    );

    // 2. Proofs with concurrent clients.
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for c in 0..clients {
        let (url, stop) = (url.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into();
            let mut lat = Vec::new();
            let mut s = c * 7919 + 1;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = key((s >> 16) % keys);
                let t = Instant::now();
                let mut res = agent
                    .get(format!("{url}/v1/tries/0/keys/{}", hex(&k)))
                    .call()
                    .expect("get");
                let body: ValueResponse = res.body_mut().read_json().expect("json");
                lat.push(t.elapsed());
                n += 1;
                if n.is_multiple_of(100) {
                    let value = body.value.as_deref().map(|v| unhex(v).expect("hex"));
                    let p =
                        Proof::decode(&unhex(&body.proof_hex).expect("hex"), &Limits::default())
                            .expect("proof");
                    let read = verify_proof(
                        &body.digest.root,
                        &k,
                        value.as_deref(),
                        &p,
                        &Limits::default(),
                    )
                    .expect("verifies");
                    assert!(read.is_present());
                }
            }
            lat
        }));
    }
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("client"))
        .collect();
    all.sort();
    let n = all.len();
    println!(
        "GET proofs, {clients} concurrent clients: {:.0} proofs/s, p50 {:.2} ms, p99 {:.2} ms ({n} requests in {seconds}s)",
        n as f64 / seconds as f64,
        all[n / 2].as_secs_f64() * 1e3,
        all[(n * 99 / 100).min(n - 1)].as_secs_f64() * 1e3
    );
    let _ = node.kill();
    let _ = node.wait();
}
