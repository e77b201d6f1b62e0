//! A tiered node, with the real binary and a real S3-compatible server (SeaweedFS, started by the test on
//! 127.0.0.1): sealed files move hot → warm → cold while blocks are written; the node is SIGKILLed at random
//! moments, moves included, and every restart holds every acknowledged version with its digests and values, with
//! each moved file in exactly one place; with the object store down, reads of cold data answer
//! `503 tier_unavailable` while hot reads and block writes go on.
//!
//! `LETUS_TIER_KILLS` sets the number of SIGKILLs (default 10).

mod common;
#[path = "../../letus-core/tests/support/s3_server.rs"]
mod s3_server;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{agent, serve_with};
use letus_core::storage::tiered::{Manifest, Tier};
use letus_node::api::{BlockRequest, WriteOp};
use letus_verify::hex::encode as hex;
use s3_server::S3Server;
use serde_json::Value;

const TOKEN: &str = "tier-token";

fn flags<'a>(s3: &'a S3Server, warm: &'a str, creds: &'a str, prefix: &'a str) -> Vec<String> {
    [
        "--warm-dir",
        warm,
        "--cold-bucket",
        s3_server::BUCKET,
        "--cold-endpoint",
        &s3.endpoint,
        "--cold-allow-http",
        "--cold-prefix",
        prefix,
        "--cold-credentials-file",
        creds,
        "--tier-warm-after-versions",
        "2",
        "--tier-cold-after-versions",
        "6",
        // Index files and value-log files are sealed every few blocks.
        "--max-replay-millis",
        "1",
        "--vdls-file-bytes",
        "32768",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn key(v: u64, i: u64) -> Vec<u8> {
    format!("k{v}-{i}").into_bytes()
}

fn post(url: &str, v: u64) -> Result<Value, String> {
    let req = BlockRequest {
        version: v,
        writes: (0..40)
            .map(|i| WriteOp {
                tid: 0,
                key: hex(&key(v, i)),
                value: Some(hex(format!("value {v} {i}").as_bytes())),
            })
            .collect(),
        block: Some(hex(format!("block {v}").as_bytes())),
        access_list: vec![],
    };
    let mut res = agent()
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(req)
        .map_err(|e| e.to_string())?;
    let status = res.status();
    let body: Value = res.body_mut().read_json().map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    Ok(body)
}

fn get(url: &str, path: &str) -> (u16, Value) {
    let mut res = agent().get(format!("{url}{path}")).call().unwrap();
    let status = res.status().as_u16();
    (status, res.body_mut().read_json().unwrap_or(Value::Null))
}

fn value_at(url: &str, v: u64, i: u64) -> (u16, Value) {
    get(
        url,
        &format!("/v1/tries/0/keys/{}?version={v}", hex(&key(v, i))),
    )
}

fn creds_file(dir: &Path) -> String {
    let p = dir.join("s3.credentials");
    std::fs::write(
        &p,
        format!(
            "# test credentials\naccess_key_id = {}\nsecret_access_key = {}\n",
            s3_server::ACCESS_KEY,
            s3_server::SECRET_KEY
        ),
    )
    .unwrap();
    p.display().to_string()
}

/// Every moved file is where the manifest says and nowhere else.
fn one_place_each(data: &Path, warm: &Path) {
    let m = Manifest::load(&letus_core::storage::Local, data).unwrap();
    for (rel, f) in &m.files {
        let hot = data.join(rel).exists();
        let warm = warm.join(rel).exists();
        match f.tier {
            Tier::Hot => assert!(hot && !warm, "{rel}: hot {hot} warm {warm}"),
            Tier::Warm => assert!(!hot && warm, "{rel}: hot {hot} warm {warm}"),
            _ => assert!(!hot && !warm, "{rel}: hot {hot} warm {warm}"),
        }
        // A cold index file keeps its pinned ranges (index, top-of-trie records) on the hot disk; nothing else
        // has a pin file.
        let pinned = data.join("tier-pins").join(rel).exists();
        assert_eq!(
            pinned,
            f.tier == Tier::Cold && !f.pins.is_empty(),
            "{rel}: pin file {pinned}"
        );
    }
    let mut stack = vec![data.join("tier-pins")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(data.join("tier-pins"))
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                assert!(
                    m.files.get(&rel).is_some_and(|f| f.tier == Tier::Cold),
                    "stray pin file {rel}"
                );
            }
        }
    }
}

#[test]
fn sigkill_at_any_moment_of_migration_loses_nothing_and_leaves_each_file_in_one_place() {
    let kills: u64 = std::env::var("LETUS_TIER_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let s3 = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (data, warm) = (dir.path().join("data"), dir.path().join("warm"));
    let creds = creds_file(dir.path());
    let warm_s = warm.display().to_string();
    let f = flags(&s3, &warm_s, &creds, "kill");
    let f: Vec<&str> = f.iter().map(String::as_str).collect();
    let mut rng = letus_workload::Rng::new(11);
    let mut digests: BTreeMap<u64, Value> = BTreeMap::new();
    let mut acked = 0u64;
    for round in 0..=kills {
        let (mut node, url) = serve_with(&data, TOKEN, &f);
        // Everything acknowledged is there: digests, and values of sampled old versions.
        let (_, d) = get(&url, "/v1/digest");
        let latest = d["version"].as_u64().unwrap_or(0);
        assert!(
            latest >= acked,
            "round {round}: came back at {latest}, {acked} acknowledged"
        );
        // A sample of the acknowledged versions (at most 30 a round, the newest always), so that a long run
        // costs the same per round.
        let all: Vec<u64> = digests.keys().copied().collect();
        let mut sample: Vec<u64> = (0..30.min(all.len()))
            .map(|_| all[rng.below(all.len() as u64) as usize])
            .collect();
        sample.extend(all.last());
        for v in sample {
            let want = &digests[&v];
            let (s, got) = get(&url, &format!("/v1/digest/{v}"));
            assert_eq!(
                (s, &got["digests"]),
                (200, &want["digests"]),
                "round {round}: digest of {v}"
            );
            let (s, val) = value_at(&url, v, v % 40);
            assert_eq!(s, 200, "round {round}: value at {v}: {val}");
            assert_eq!(
                val["value"],
                hex(format!("value {v} {}", v % 40).as_bytes())
            );
        }
        if round == kills {
            let (s, t) = get(&url, "/v1/tiers");
            assert_eq!(s, 200);
            assert!(t["tiers"]["cold"]["files"].as_u64().unwrap() > 0, "{t}");
            assert_eq!(t["object_store"]["fenced"], false, "{t}");
            // Index files go cold as their consolidated generation (`NNNNNN.1.idx`, FORMAT.md §2.8).
            let m = Manifest::load(&letus_core::storage::Local, &data).unwrap();
            let cold_idx: Vec<&String> = m
                .files
                .iter()
                .filter(|(r, f)| f.tier == Tier::Cold && r.ends_with(".idx"))
                .map(|(r, _)| r)
                .collect();
            assert!(!cold_idx.is_empty(), "{:?}", m.files.keys());
            assert!(
                cold_idx.iter().all(|r| r.ends_with(".1.idx")),
                "{cold_idx:?}"
            );
            let metrics = agent()
                .get(format!("{url}/metrics"))
                .call()
                .unwrap()
                .body_mut()
                .read_to_string()
                .unwrap();
            assert!(
                metrics.contains("letus_tier_bytes{tier=\"cold\"}"),
                "{metrics}"
            );
            assert!(metrics.contains("letus_object_store_requests{kind=\"get\"}"));
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_letus"))
                .args(["tier", "status", "--url", &url])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains("cold:"), "{text}");
            assert!(
                !text.contains(s3_server::SECRET_KEY),
                "a credential was printed"
            );
            let _ = node.kill();
            let _ = node.wait();
            // Offline full verification reads the tiers it is given; without them it says what is missing.
            let (&v, d) = digests.iter().next_back().unwrap();
            let root = d["digests"][0]["root"].as_str().unwrap().to_string();
            let tier_flags: Vec<&str> = f[..f.len() - 4].to_vec();
            let verify = |with_tiers: bool| {
                let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_letus"));
                c.args(["verify", "--data"]).arg(&data);
                c.args(["--version", &v.to_string(), "--root", &root]);
                if with_tiers {
                    c.args(&tier_flags);
                }
                c.output().unwrap()
            };
            let out = verify(true);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let out = verify(false);
            assert!(!out.status.success());
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("tiered store")
                    || String::from_utf8_lossy(&out.stderr).contains("tiered store")
            );
            break;
        }
        eprintln!("round {round}: came back at {latest} ({acked} acknowledged)");
        acked = acked.max(latest);
        let blocks = 4 + rng.below(20);
        for _ in 0..blocks {
            let v = acked + 1;
            let body = post(&url, v).unwrap_or_else(|e| panic!("round {round}: block {v}: {e}"));
            digests.insert(v, body);
            acked = v;
        }
        // Kill at a random moment: during the mover's pass after the last commits, or between passes.
        std::thread::sleep(Duration::from_millis(rng.below(400)));
        let _ = node.kill();
        let _ = node.wait();
        one_place_after_open(&data, &warm, &s3, "kill");
    }
}

/// What the next open does first (recovery of the tiers, here without the node, whose mover would start a new
/// move at once): afterwards each moved file is in the one place the manifest names.
fn one_place_after_open(data: &Path, warm: &Path, s3: &S3Server, prefix: &str) {
    let cold: std::sync::Arc<dyn letus_core::storage::tiered::ColdStore> =
        std::sync::Arc::new(letus_core::storage::s3::S3::new(&s3.config()).unwrap());
    let cfg = letus_core::storage::tiered::TierConfig {
        warm_dir: Some(warm.to_path_buf()),
        cold: Some(cold),
        cold_prefix: prefix.into(),
        ..letus_core::storage::tiered::TierConfig::new(data)
    };
    drop(letus_core::storage::tiered::Tiered::open(cfg).unwrap());
    one_place_each(data, warm);
}

#[test]
fn with_the_object_store_down_cold_reads_answer_503_while_hot_reads_and_writes_go_on() {
    let mut s3 = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (data, warm) = (dir.path().join("data"), dir.path().join("warm"));
    let creds = creds_file(dir.path());
    let warm_s = warm.display().to_string();
    let f = flags(&s3, &warm_s, &creds, "down");
    let f: Vec<&str> = f.iter().map(String::as_str).collect();
    let (mut node, url) = serve_with(&data, TOKEN, &f);
    for v in 1..=60 {
        post(&url, v).unwrap();
    }
    // The mover runs every 16 versions; wait for its pass after version 48 to be done (files are cold and no
    // move has happened for a second: a pass consolidates index files before it uploads them, so the first cold
    // files can be there well before the pass ends).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last_moved = (u64::MAX, std::time::Instant::now());
    loop {
        let (_, t) = get(&url, "/v1/tiers");
        let moved = t["moved"]["files"].as_u64().unwrap_or(0);
        if moved != last_moved.0 {
            last_moved = (moved, std::time::Instant::now());
        }
        if (t["tiers"]["cold"]["files"].as_u64().unwrap_or(0) > 2
            && last_moved.1.elapsed() > Duration::from_secs(1))
            || std::time::Instant::now() > deadline
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    s3.kill();
    let mut unavailable = 0;
    for v in 1..=20 {
        let (s, body) = value_at(&url, v, 1);
        match s {
            200 => {}
            503 => {
                assert_eq!(body["error"]["code"], "tier_unavailable", "{body}");
                unavailable += 1;
            }
            other => panic!("version {v}: {other} {body}"),
        }
    }
    assert!(unavailable > 0, "no read reached the cold tier");
    // Hot reads and writes go on.
    for v in 61..=70 {
        post(&url, v).unwrap();
        let (s, body) = value_at(&url, v, 3);
        assert_eq!(s, 200, "{body}");
    }
    // The node also starts while the object store is down (it claims the prefix at its first cold move) after a
    // graceful stop: the stop flushes the MemIndexTable, so the open replays nothing and reads only pinned ranges
    // of cold files. (After a crash, replaying the value log's tail needs the pages of the versions before it,
    // whose newest records may be in cold files: such an open fails with "the cold tier is unavailable" until the
    // object store answers again.)
    let status = std::process::Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exited = node.wait().unwrap();
    assert!(
        exited.success(),
        "graceful stop with the object store down: {exited}"
    );
    let (restarted, url) = serve_with(&data, TOKEN, &f);
    node = restarted;
    let (s, d) = get(&url, "/v1/digest");
    assert_eq!((s, d["version"].as_u64()), (200, Some(70)), "{d}");
    // What needs only hot files answers (digests, the newest raw block); what needs a cold file answers
    // `503 tier_unavailable` (with every cache empty, even a recent value's trie pages may sit in cold files).
    let (s, body) = get(&url, "/v1/digest/70");
    assert_eq!(s, 200, "{body}");
    let res = agent().get(format!("{url}/v1/blocks/70")).call().unwrap();
    assert_eq!(res.status(), 200);
    let (s, body) = value_at(&url, 70, 3);
    assert!(
        s == 200 || (s == 503 && body["error"]["code"] == "tier_unavailable"),
        "{s} {body}"
    );
    let (s, body) = value_at(&url, 1, 1);
    assert_eq!(
        (s, &body["error"]["code"]),
        (503, &Value::from("tier_unavailable")),
        "{body}"
    );
    // With its caches empty, a block may need a page whose newest record is in a cold file: it is refused with a
    // 503, never acknowledged and never a 500, and goes through once the object store answers again.
    let refused = match post(&url, 71) {
        Ok(_) => false,
        Err(e) => {
            assert!(e.starts_with("503"), "{e}");
            true
        }
    };
    s3.restart();
    if refused {
        let mut r = post(&url, 71);
        for _ in 0..20 {
            if r.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            r = post(&url, 71);
        }
        r.unwrap();
    }
    for v in 72..=75 {
        post(&url, v).unwrap();
    }
    for v in 1..=20 {
        // The restarted server may need a moment; the node needs nothing (no restart, no reset).
        let mut answer = value_at(&url, v, 1);
        for _ in 0..20 {
            if answer.0 == 200 {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            answer = value_at(&url, v, 1);
        }
        assert_eq!(
            answer.0, 200,
            "after the store came back, version {v}: {}",
            answer.1
        );
    }
    let _ = node.kill();
    let _ = node.wait();
}
