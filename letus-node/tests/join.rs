//! Joining from a snapshot with real processes (issue: join from a snapshot). Node A runs a payment chain and
//! keeps committing while node B joins from it at version V, through a proxy that corrupts one chunk: B names the
//! chunk, fetches it again from A, imports, follows A's later versions, and then serves the same digests, values,
//! proofs and history proofs as A at every version from V on, and `410 before_snapshot` below V. A node C is
//! SIGKILLed in the middle of its join and resumes without fetching a verified chunk again.

mod common;
#[path = "common/http_proxy.rs"]
mod http_proxy;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::agent;
use letus_node::api::{BlockRequest, WriteOp};
use letus_verify::hex::encode as hex;
use serde_json::Value;

const TOKEN: &str = "join-token";
const ACCOUNTS: u64 = 20_000;

fn get(url: &str) -> (u16, Value) {
    let mut res = agent().get(url).call().unwrap();
    let status = res.status().as_u16();
    let v = res.body_mut().read_json().unwrap_or(Value::Null);
    (status, v)
}

fn latest(url: &str) -> u64 {
    get(&format!("{url}/v1/digest")).1["version"]
        .as_u64()
        .unwrap_or(0)
}

fn account(i: u64) -> String {
    hex(format!("account-{i:08}").as_bytes())
}

fn post(url: &str, req: &BlockRequest) {
    let res = agent()
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(req)
        .unwrap();
    assert_eq!(res.status(), 200, "block {}", req.version);
}

/// One block of the payment chain: `n` transfers between accounts (80% on the hot 20%).
fn transfers(rng: &mut letus_workload::Rng, v: u64, n: usize) -> BlockRequest {
    let mut writes = BTreeMap::new();
    for _ in 0..n {
        for a in [rng.hot_account(ACCOUNTS), rng.hot_account(ACCOUNTS)] {
            writes.insert(
                account(a),
                hex(format!("balance {}", rng.below(1_000_000)).as_bytes()),
            );
        }
    }
    BlockRequest {
        version: v,
        writes: writes
            .into_iter()
            .map(|(key, value)| WriteOp {
                tid: 0,
                key,
                value: Some(value),
            })
            .collect(),
        block: Some(hex(format!("raw block {v}").as_bytes())),
        access_list: vec![],
    }
}

/// A chain on a new node: the accounts created in blocks of 5,000, then `blocks` blocks of transfers.
fn start_chain(dir: &Path, blocks: u64) -> (Child, String, letus_workload::Rng) {
    let (a, url) = common::serve(dir, TOKEN);
    let mut rng = letus_workload::Rng::new(42);
    let mut v = 0;
    for start in (0..ACCOUNTS).step_by(5_000) {
        v += 1;
        post(
            &url,
            &BlockRequest {
                version: v,
                writes: (start..start + 5_000)
                    .map(|i| WriteOp {
                        tid: 0,
                        key: account(i),
                        value: Some(hex(b"balance 100")),
                    })
                    .collect(),
                block: Some(hex(format!("raw block {v}").as_bytes())),
                access_list: vec![],
            },
        );
    }
    for _ in 0..blocks {
        v += 1;
        post(&url, &transfers(&mut rng, v, 100));
    }
    (a, url, rng)
}

/// A proxy to `target` that records every chunk index asked for and corrupts the chunks in `corrupt` (one byte
/// of the last record's value flipped, so the chunk still decodes).
struct Proxy {
    url: String,
    asked: Arc<Mutex<Vec<u32>>>,
}

fn proxy(target: String, corrupt: BTreeSet<u32>) -> Proxy {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let rec = asked.clone();
    let url = http_proxy::start(target, move |path, answer| {
        let index = path
            .split("/snapshot/chunks/")
            .nth(1)
            .and_then(|r| r.split('?').next())
            .and_then(|i| i.parse::<u32>().ok());
        if let Some(i) = index {
            rec.lock().unwrap().push(i);
            if answer.status == 200 && corrupt.contains(&i) {
                let last = answer.body.len() - 1;
                answer.body[last] ^= 0x01;
            }
        }
    });
    Proxy { url, asked }
}

/// `letus serve` joining with `flags`, its stderr (the node's log) written to `log`.
fn spawn_joining(data: &Path, log: &Path, flags: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_letus"))
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
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// The URL the node prints once it serves (after its join).
fn url_of(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_joins_from_a_snapshot_while_the_source_commits_and_then_serves_what_the_source_serves() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, a_url, mut rng) = start_chain(&dir.path().join("a"), 30);
    let v_join = latest(&a_url);
    let root = get(&format!("{a_url}/v1/digest/{v_join}")).1["digests"][0]["root"]
        .as_str()
        .unwrap()
        .to_string();

    // A keeps committing during the whole join.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, url) = (stop.clone(), a_url.clone());
        std::thread::spawn(move || {
            let mut v = v_join;
            while !stop.load(Ordering::Relaxed) {
                v += 1;
                post(&url, &transfers(&mut rng, v, 100));
            }
            v
        })
    };

    // B joins through a proxy that corrupts chunk 2 (even chunks try the proxy first), and from A directly.
    let p = proxy(a_url.clone(), BTreeSet::from([2]));
    let log = dir.path().join("b.log");
    let mut b = spawn_joining(
        &dir.path().join("b"),
        &log,
        &[
            "--join",
            &p.url,
            "--join",
            &a_url,
            "--join-version",
            &v_join.to_string(),
            "--join-max-pairs",
            "500",
            "--follow",
        ],
    );
    let b_url = url_of(&mut b);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().unwrap();
    assert!(
        last > v_join + 3,
        "A committed during the join ({v_join} → {last})"
    );
    wait_for("B to catch up", || latest(&b_url) >= last);

    let mut text = String::new();
    std::fs::File::open(&log)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        text.contains("chunk 2 (depth") && text.contains("root_mismatch"),
        "B names the corrupted chunk and its error: {text}"
    );
    assert!(p.asked.lock().unwrap().contains(&2));
    // The chunks verified in this run were stored with their verification's hashes, not read back and hashed again.
    let handed_over: usize = text
        .split("handed_over")
        .nth(1)
        .and_then(|rest| rest.split_once('='))
        .map(|(_, rest)| {
            // The log may colour the field's name: skip the escape sequences after the '='.
            let mut rest = rest;
            while let Some(after) = rest.strip_prefix('\u{1b}') {
                rest = after.split_once('m').map_or("", |(_, r)| r);
            }
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(handed_over > 0, "no chunk was handed over: {text}");

    // Digests, values, proofs and history proofs at every version from V on are A's.
    for v in v_join..=last {
        assert_eq!(
            get(&format!("{a_url}/v1/digest/{v}")),
            get(&format!("{b_url}/v1/digest/{v}")),
            "digest at {v}"
        );
    }
    let mut krng = letus_workload::Rng::new(9);
    for v in [v_join, v_join + 1, (v_join + last) / 2, last] {
        for _ in 0..20 {
            let k = account(krng.below(ACCOUNTS + 50)); // some keys never written: exclusion proofs
            let q = format!("/v1/tries/0/keys/{k}?version={v}");
            let (sa, ja) = get(&format!("{a_url}{q}"));
            assert_eq!(sa, 200);
            assert_eq!((sa, ja), get(&format!("{b_url}{q}")), "{q}");
        }
        let q = format!("/v1/digest/inclusion?version={v}&at={last}");
        assert_eq!(
            get(&format!("{a_url}{q}")),
            get(&format!("{b_url}{q}")),
            "{q}"
        );
        let q = format!("/v1/digest/consistency?from={v}&to={last}");
        assert_eq!(
            get(&format!("{a_url}{q}")),
            get(&format!("{b_url}{q}")),
            "{q}"
        );
        let q = format!("/v1/blocks/{v}");
        assert_eq!(
            get(&format!("{a_url}{q}")),
            get(&format!("{b_url}{q}")),
            "{q}"
        );
    }
    assert_eq!(
        get(&format!("{b_url}/v1/digest/{v_join}")).1["digests"][0]["root"].as_str(),
        Some(root.as_str())
    );
    // Below V: a typed 410, not a 404.
    let below = v_join - 1;
    for q in [
        format!("/v1/digest/{below}"),
        format!("/v1/tries/0/keys/{}?version={below}", account(1)),
        format!("/v1/blocks/{below}"),
    ] {
        let (s, body) = get(&format!("{b_url}{q}"));
        assert_eq!(s, 410, "{q}: {body}");
        assert_eq!(body["error"]["code"], "before_snapshot", "{q}");
    }
    // A following node stops on SIGTERM within its shutdown deadline (10 s by default), follower included.
    let asked = Instant::now();
    Command::new("kill")
        .args(["-TERM", &b.id().to_string()])
        .status()
        .unwrap();
    while b.try_wait().unwrap().is_none() {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "B did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    a.kill().unwrap();
    a.wait().unwrap();
}

#[test]
fn a_join_killed_midway_resumes_without_fetching_a_verified_chunk_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, a_url, _) = start_chain(&dir.path().join("a"), 5);
    let v_join = latest(&a_url);
    let root = get(&format!("{a_url}/v1/digest/{v_join}")).1["digests"][0]["root"]
        .as_str()
        .unwrap()
        .to_string();
    let p = proxy(a_url.clone(), BTreeSet::new());
    let data = dir.path().join("c");
    // Small chunks, one at a time, so that the kill lands in the middle of the fetch.
    let flags = [
        "--join",
        p.url.as_str(),
        "--trusted-root",
        root.as_str(),
        "--join-version",
        &v_join.to_string(),
        "--join-max-pairs",
        "8",
        "--join-parallel",
        "1",
    ]
    .map(str::to_string);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut c = spawn_joining(&data, &dir.path().join("c1.log"), &flags);
    let chunks = data.join("join/chunks");
    let on_disk = || -> BTreeSet<u32> {
        std::fs::read_dir(&chunks)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_for("C to fetch some chunks", || on_disk().len() >= 200);
    c.kill().unwrap();
    c.wait().unwrap();
    let verified = on_disk();
    let before = p.asked.lock().unwrap().len();
    let mut c = spawn_joining(&data, &dir.path().join("c2.log"), &flags);
    let c_url = url_of(&mut c);
    let again: Vec<u32> = p.asked.lock().unwrap()[before..]
        .iter()
        .copied()
        .filter(|i| verified.contains(i))
        .collect();
    assert!(
        again.is_empty(),
        "chunks fetched again after the restart: {again:?}"
    );
    assert!(
        p.asked.lock().unwrap().len() > before,
        "the rest was fetched"
    );
    assert_eq!(
        get(&format!("{c_url}/v1/digest/{v_join}")),
        get(&format!("{a_url}/v1/digest/{v_join}"))
    );
    assert!(
        !data.join("join").exists(),
        "the staging directory is removed"
    );
    c.kill().unwrap();
    c.wait().unwrap();
    a.kill().unwrap();
    a.wait().unwrap();
}
