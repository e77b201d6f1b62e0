//! Pruning with the real binary: `letus serve --keep-versions` prunes by itself while blocks are written, old
//! reads answer `410 pruned` naming the oldest version held while digests of every version still answer (and are
//! the ones the writes returned), `/metrics` shows the prunes; a SIGKILL and restart keep all of that; a stopped
//! node is pruned further by `letus prune`, and its latest state still reads and verifies.

mod common;

use common::agent;

use std::process::Command;
use std::time::{Duration, Instant};

use letus_node::api::{BlockRequest, WriteOp};
use letus_verify::hex::encode as hex;
use serde_json::Value;

const TOKEN: &str = "prune-token";

fn key(i: u64) -> String {
    hex(format!("acct-{i}").as_bytes())
}

fn post_block(url: &str, v: u64) -> Value {
    let req = BlockRequest {
        version: v,
        writes: (0..20)
            .map(|i| WriteOp {
                tid: 0,
                key: key((v * 7 + i * 13) % 300),
                value: Some(hex(format!("{v}-{i}").as_bytes())),
            })
            .collect(),
        block: Some(hex(format!("block {v}").as_bytes())),
        access_list: vec![],
    };
    let (status, body) = common::post_block(url, TOKEN, &req);
    assert_eq!(status, 200, "block {v}: {body}");
    body
}

fn get(url: &str, path: &str) -> (u16, Value) {
    let mut res = agent().get(format!("{url}{path}")).call().unwrap();
    let status = res.status().as_u16();
    (status, res.body_mut().read_json().unwrap_or(Value::Null))
}

/// The oldest version the node holds, from the `pruned` answer to a read of version 1 (`None` while unpruned).
fn oldest(url: &str) -> Option<u64> {
    let (s, v) = get(url, &format!("/v1/tries/0/keys/{}?version=1", key(7)));
    match s {
        200 => None,
        410 => {
            assert_eq!(v["error"]["code"], "pruned", "{v}");
            v["error"]["oldest"].as_u64()
        }
        other => panic!("version 1: {other} {v}"),
    }
}

/// Checks every version up to `latest`; returns the boundary. The node may still be pruning (the last blocks
/// woke its pruner), so the boundary may rise while this reads, never fall.
fn check(url: &str, digests: &[Value], latest: u64) -> u64 {
    let first = oldest(url).expect("pruned");
    for v in 1..=latest {
        // Digests of every version, pruned or not, as the writes returned them.
        let (s, d) = get(url, &format!("/v1/digest/{v}"));
        assert_eq!(s, 200, "digest {v}");
        assert_eq!(
            d["digests"],
            digests[v as usize - 1]["digests"],
            "digest {v}"
        );
        let (s, r) = get(
            url,
            &format!("/v1/tries/0/keys/{}?version={v}", key(v % 300)),
        );
        match s {
            410 => {
                assert_eq!(r["error"]["code"], "pruned", "{v}: {r}");
                let b = r["error"]["oldest"].as_u64().unwrap();
                assert!(b > v && b >= first, "{v}: {r}");
            }
            200 => assert!(
                v >= first,
                "version {v} reads though {first} was the boundary"
            ),
            other => panic!("read at {v}: {other} {r}"),
        }
    }
    oldest(url).unwrap()
}

#[test]
fn a_node_prunes_by_itself_and_letus_prune_prunes_a_stopped_one() {
    let dir = tempfile::tempdir().unwrap();
    // An index file after nearly every block, so that there is something to prune every few blocks.
    let flags = [
        "--keep-versions",
        "10",
        "--max-replay-millis",
        "1",
        "--prune-garbage-ratio",
        "0",
        "--max-traceable-blocks",
        "30",
        "--block-segment-bytes",
        "512",
        // A value-log file every few blocks: value-log GC has sealed files to account, empty and delete.
        "--vdls-file-bytes",
        "4096",
    ];
    let (mut node, url) = common::serve_with(dir.path(), TOKEN, &flags);
    let mut digests = Vec::new();
    for v in 1..=80 {
        digests.push(post_block(&url, v));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while oldest(&url).is_none_or(|b| b < 40) {
        assert!(Instant::now() < deadline, "the node did not prune");
        std::thread::sleep(Duration::from_millis(50));
    }
    let b = check(&url, &digests, 80);
    assert!(b <= 70, "keeps at least 10 versions: boundary {b}");
    let metrics = agent()
        .get(format!("{url}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let counter = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(counter("letus_prunes_total") >= 1, "{metrics}");
    // Value-log GC ran after the prunes and deleted files no kept version reads.
    assert!(counter("letus_vlog_gc_passes_total") >= 1, "{metrics}");
    assert!(counter("letus_vlog_deleted_files_total") >= 1, "{metrics}");
    assert!(
        counter("letus_vlog_deleted_bytes_total") >= 4096,
        "{metrics}"
    );
    assert_eq!(counter("letus_vlog_gc_errors_total"), 0, "{metrics}");
    // The block store's tail cuts are counted; the prune and GC gauges are there (0 or 1).
    assert!(counter("letus_block_segments_cut_total") >= 1, "{metrics}");
    assert!(counter("letus_block_bytes_cut_total") >= 1, "{metrics}");
    for gauge in ["letus_prune_running", "letus_vlog_gc_running"] {
        assert!(counter(gauge) <= 1, "{metrics}");
    }
    assert!(counter("letus_prune_level_pages_done") <= counter("letus_prune_level_pages"));
    // The status route agrees that the node has pruned.
    let mut res = agent()
        .get(format!("{url}/v1/admin/prune"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    let st: Value = res.body_mut().read_json().unwrap();
    assert!(st["oldest"].as_u64().is_some_and(|o| o >= b), "{st}");

    // The block store's tail is cut a whole segment at a time: the newest 30 blocks are always there, the oldest
    // are `410 pruned` with the oldest block held.
    let (s, b1) = get(&url, "/v1/blocks/1");
    assert_eq!(
        (s, b1["error"]["code"].as_str()),
        (410, Some("pruned")),
        "{b1}"
    );
    let oldest_block = b1["error"]["oldest"].as_u64().unwrap();
    // Segments are sealed every 30 / 4 = 7 blocks too, so at most 6 more than the newest 30 stay.
    assert!((45..=51).contains(&oldest_block), "{b1}");
    for v in oldest_block..=80 {
        let (s, r) = get(&url, &format!("/v1/blocks/{v}"));
        assert_eq!(s, 200, "block {v}: {r}");
        assert_eq!(r["block"], hex(format!("block {v}").as_bytes()));
    }

    // SIGKILL, restart: the boundary holds, the chain goes on, and pruning with it.
    node.kill().unwrap();
    node.wait().unwrap();
    let (mut node, url) = common::serve_with(dir.path(), TOKEN, &flags);
    assert!(oldest(&url).unwrap() >= b);
    for v in 81..=120 {
        digests.push(post_block(&url, v));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while oldest(&url).is_none_or(|x| x <= b) {
        assert!(
            Instant::now() < deadline,
            "the node did not prune after restart"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    check(&url, &digests, 120);

    // Stopped, then pruned to the latest state offline, the base files merged into one.
    node.kill().unwrap();
    node.wait().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["prune", "--keep", "0", "--merge", "--json", "--data"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["pruned"], true, "{r}");
    assert!(r["vlog_live_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(
        r["vlog_bytes"].as_u64().unwrap() >= r["vlog_live_bytes"].as_u64().unwrap(),
        "{r}"
    );
    let offline = r["oldest"].as_u64().unwrap();
    assert!(offline > b, "{r}");
    let (mut node, url) = common::serve(dir.path(), TOKEN);
    assert_eq!(check(&url, &digests, 120), offline);
    // The latest state verifies in full.
    node.kill().unwrap();
    node.wait().unwrap();
    verify_latest(dir.path(), &digests[119]);
}

/// Runs `letus verify` on the stopped node's data at `dir` against the root of trie 0 in `digest` (a block
/// write's answer): every stored page and value of the latest state recomputed.
fn verify_latest(dir: &std::path::Path, digest: &Value) {
    let root = digest["digests"][0]["root"].as_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["verify", "--root", root, "--data"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGKILLs while the node prunes after every block (`--prune-garbage-ratio 0`, an index file per block): half the
/// kills land a few milliseconds after a block was acknowledged, when the pruner that block woke may be running;
/// the other half the moment `GET /v1/admin/prune` says a prune is running (at least one must). After every
/// restart each acknowledged version's digest is the one its write returned, the state reads from the boundary
/// on, and below it answers `pruned`; at the end `letus verify` recomputes the latest root from every stored page
/// and value. The test prints how many kills left a staged base file or an unfinished value-log compaction
/// behind. Every restart also reads back each block the block store still holds (at least the newest 5), with its
/// segments sealed by block count in odd rounds and by bytes too in even ones, and checks the tail is cut as the
/// chain grows. `LETUS_PRUNE_KILLS` sets the number of kills (default 12).
#[test]
fn sigkills_while_the_node_prunes_lose_nothing_acknowledged() {
    let kills: u64 = std::env::var("LETUS_PRUNE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--keep-versions",
        "3",
        "--max-replay-millis",
        "1",
        "--prune-garbage-ratio",
        "0",
        "--max-traceable-blocks",
        "5",
        // A value-log file every few blocks: value-log GC has sealed files to account, empty and delete.
        "--vdls-file-bytes",
        "4096",
    ];
    // Block-store segments are sealed every max(5 / 4, 4) = 4 blocks; in even rounds also every 100 bytes (a
    // stored block here is about 57 bytes, so every 2 blocks), so that kills land in both kinds of sealing and a
    // restart finds segments sealed by the other.
    let by_bytes = ["--block-segment-bytes", "100"];
    let mut rng = letus_workload::Rng::new(99);
    let mut digests: Vec<Value> = Vec::new();
    let mut pruned_seen = false;
    let mut tail_cut_seen = false;
    let (mut kills_in_prune, mut staged_left, mut compaction_left) = (0u64, 0u64, 0u64);
    for round in 0..=kills {
        let round_flags: Vec<&str> = match round % 2 {
            0 => flags.iter().chain(&by_bytes).copied().collect(),
            _ => flags.to_vec(),
        };
        let (mut node, url) = common::serve_with(dir.path(), TOKEN, &round_flags);
        let acked = digests.len() as u64;
        // Everything acknowledged is there, with the digest its write returned.
        let (s, d) = get(&url, "/v1/digest");
        if acked > 0 {
            assert_eq!(s, 200);
            assert_eq!(d["version"], acked, "round {round}");
        }
        for v in 1..=acked {
            let (s, d) = get(&url, &format!("/v1/digest/{v}"));
            assert_eq!(s, 200, "round {round}: digest {v}");
            assert_eq!(
                d["digests"],
                digests[v as usize - 1]["digests"],
                "round {round}: {v}"
            );
        }
        if acked > 0 {
            let b = oldest(&url);
            pruned_seen |= b.is_some();
            let b = b.unwrap_or(1);
            assert!(b <= acked, "round {round}: boundary {b} above {acked}");
            for v in b..=acked {
                let (s, r) = get(
                    &url,
                    &format!("/v1/tries/0/keys/{}?version={v}", key(v % 300)),
                );
                assert_eq!(s, 200, "round {round}: read at {v}: {r}");
            }
            // The block store keeps at least the newest 5 blocks, and every block from its oldest on.
            let (s, b1) = get(&url, "/v1/blocks/1");
            let first = match s {
                200 => 1,
                410 => b1["error"]["oldest"].as_u64().unwrap(),
                other => panic!("round {round}: block 1: {other} {b1}"),
            };
            assert!(
                first <= acked.saturating_sub(4).max(1),
                "round {round}: oldest block {first} of {acked}"
            );
            // And the cutting goes on: nothing older than the newest 5 plus one segment of at most 4 blocks.
            assert!(
                acked - first < 8,
                "round {round}: oldest block {first} of {acked}"
            );
            tail_cut_seen |= first > 1;
            for v in first..=acked {
                let (s, r) = get(&url, &format!("/v1/blocks/{v}"));
                assert_eq!(s, 200, "round {round}: block {v}: {r}");
                assert_eq!(r["block"], hex(format!("block {v}").as_bytes()));
            }
        }
        if round == kills {
            node.kill().unwrap();
            node.wait().unwrap();
            break;
        }
        for _ in 0..3 + rng.below(20) {
            digests.push(post_block(&url, digests.len() as u64 + 1));
        }
        if round % 2 == 1 {
            // Aimed: kill as soon as the node says a prune is running (its walk, the base file being written),
            // posting blocks (each wakes the pruner) until it does, up to 50 more.
            'aim: for _ in 0..50 {
                let until = Instant::now() + Duration::from_millis(30);
                while Instant::now() < until {
                    if prune_running(&url) {
                        node.kill().unwrap();
                        kills_in_prune += 1;
                        break 'aim;
                    }
                }
                digests.push(post_block(&url, digests.len() as u64 + 1));
            }
        } else {
            std::thread::sleep(Duration::from_millis(rng.below(15)));
        }
        node.kill().unwrap();
        node.wait().unwrap();
        // What the kill interrupted, by what it left on disk: a base file staged and not yet installed (a prune
        // between its walk and its swap), or a value-log file being compacted.
        let left = |sub: &str, ends: &[&str]| {
            std::fs::read_dir(dir.path().join("state").join(sub))
                .map(|rd| {
                    rd.flatten().any(|e| {
                        let n = e.file_name().to_string_lossy().to_string();
                        ends.iter().any(|x| n.ends_with(x))
                    })
                })
                .unwrap_or(false)
        };
        staged_left += u64::from(left("lsvps", &[".prune.tmp", ".prune"]));
        compaction_left += u64::from(left("vdls", &[".tmp"]));
    }
    eprintln!(
        "{kills} kills: {kills_in_prune} while the node said a prune was running; {staged_left} left a base file \
         staged, {compaction_left} a value-log compaction unfinished"
    );
    assert!(pruned_seen, "the node never pruned");
    assert!(tail_cut_seen, "the block store never cut its tail");
    assert!(
        kills_in_prune > 0 || kills < 2,
        "no kill landed while a prune was running"
    );
    // Value-log GC deleted files along the way (the ids missing below the newest are the `collected` list's)
    // and compacted others (`NNNNNN.vdc`).
    let vdls = dir.path().join("state").join("vdls");
    let names: Vec<String> = std::fs::read_dir(&vdls)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let ids: Vec<u32> = names
        .iter()
        .filter_map(|n| {
            n.strip_suffix(".vdl")
                .or_else(|| n.strip_suffix(".vdc"))
                .map(|s| s.parse().unwrap())
        })
        .collect();
    let newest = ids.iter().max().copied().unwrap_or(0);
    assert!(
        ids.len() < newest as usize && vdls.join("collected").exists(),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n.ends_with(".vdc")), "{names:?}");
    // The latest state verifies in full against the root its write returned.
    verify_latest(dir.path(), digests.last().unwrap());
}

/// Whether the node at `url` says a prune is running (`GET /v1/admin/prune`).
fn prune_running(url: &str) -> bool {
    agent()
        .get(&format!("{url}/v1/admin/prune"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
        .is_some_and(|v| v["running"] == true)
}
