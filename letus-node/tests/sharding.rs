//! Subtree sharding with real processes (issue: sharding). One `letus serve` holding everything is the reference;
//! routers over 1, 2, 4 and 16 shard processes take the same payment chain and must answer the same digests,
//! values, multi-proofs, histories with proofs and history proofs, byte for byte, at every version. A shard that
//! is down keeps a version in doubt; once it is back, a retry of the block (or the router's next start) finishes
//! that version with the reference's roots.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};

use common::{agent, post_block, serve_with, spawn_server};
use letus_node::api::{BlockRequest, WriteOp};
use letus_node::sharding::PrefixSet;
use letus_verify::hex::encode as hex;
use serde_json::{json, Value};

const TOKEN: &str = "shard-token";
const ACCOUNTS: u64 = 3_000;
const SMALL: &[&str] = &["--memory-budget-bytes", "33554432"];

fn get(url: &str) -> (u16, Value) {
    let mut res = agent().get(url).call().unwrap();
    let status = res.status().as_u16();
    (status, res.body_mut().read_json().unwrap_or(Value::Null))
}

/// A binary answer: status and bytes.
fn get_bytes(url: &str) -> (u16, Vec<u8>) {
    let mut res = agent().get(url).call().unwrap();
    let status = res.status().as_u16();
    (
        status,
        res.body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .unwrap(),
    )
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    let mut res = agent().post(url).send_json(body).unwrap();
    let status = res.status().as_u16();
    (status, res.body_mut().read_json().unwrap_or(Value::Null))
}

fn account(i: u64) -> String {
    hex(format!("account-{i:08}").as_bytes())
}

/// The chain: accounts created in blocks of 1,000 in trie 0; then blocks of transfers, some closing accounts;
/// trie 1 holds a handful of keys (most subtrees empty, single keys hoisted to the top levels), and one block
/// writes nothing.
fn chain() -> Vec<BlockRequest> {
    let mut rng = letus_workload::Rng::new(11);
    let mut blocks = Vec::new();
    let op = |tid, key: String, value: Option<String>| WriteOp { tid, key, value };
    for start in (0..ACCOUNTS).step_by(1_000) {
        let v = blocks.len() as u64 + 1;
        blocks.push(BlockRequest {
            version: v,
            writes: (start..start + 1_000)
                .map(|i| op(0, account(i), Some(hex(b"balance 100"))))
                .collect(),
            block: Some(hex(format!("raw block {v}").as_bytes())),
            access_list: vec![],
        });
    }
    for b in 0..24u64 {
        let v = blocks.len() as u64 + 1;
        let mut writes = BTreeMap::new();
        if b != 7 {
            for _ in 0..100 {
                let a = rng.hot_account(ACCOUNTS);
                writes.insert(
                    account(a),
                    Some(hex(format!("balance {}", rng.below(1_000_000)).as_bytes())),
                );
            }
            writes.insert(account(rng.below(ACCOUNTS)), None);
        }
        let mut writes: Vec<WriteOp> = writes.into_iter().map(|(k, v)| op(0, k, v)).collect();
        if b % 5 == 0 {
            writes.push(op(
                1,
                hex(format!("meta-{b}").as_bytes()),
                Some(hex(&[b as u8])),
            ));
        }
        if b == 15 {
            writes.push(op(1, hex(b"meta-0"), None));
        }
        blocks.push(BlockRequest {
            version: v,
            access_list: writes
                .iter()
                .take(10)
                .map(|w| letus_node::api::AccessKey {
                    tid: w.tid,
                    key: w.key.clone(),
                })
                .collect(),
            writes,
            block: Some(hex(format!("raw block {v}").as_bytes())),
        });
    }
    blocks
}

/// A process killed when the test ends, passed or failed.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Cluster {
    shards: Vec<(Child, String)>,
    router: Child,
    url: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.router.kill();
        for (c, _) in &mut self.shards {
            let _ = c.kill();
        }
    }
}

fn start_shard(dir: &Path, i: usize, n: usize) -> (Child, String) {
    let prefixes = PrefixSet::part(i, n).to_string();
    let mut flags = vec!["--shard-prefixes", prefixes.as_str()];
    flags.extend_from_slice(SMALL);
    serve_with(&dir.join(format!("shard-{i}")), TOKEN, &flags)
}

/// `letus route` listening on `listen` over the router directory `data`, the shards to add.
fn route_command(data: &Path, listen: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_letus"));
    cmd.args(["route", "--listen", listen, "--token", TOKEN, "--data"])
        .arg(data);
    cmd
}

fn start_router(dir: &Path, shards: &[String]) -> (Child, String) {
    let mut cmd = route_command(&dir.join("router"), "127.0.0.1:0");
    for s in shards {
        cmd.args(["--shard", s]);
    }
    spawn_server(cmd)
}

/// SIGKILLs the router and starts it again over the shards as they are now.
fn restart_router(c: &mut Cluster, dir: &Path) {
    let _ = c.router.kill();
    let _ = c.router.wait();
    let urls: Vec<String> = c.shards.iter().map(|(_, u)| u.clone()).collect();
    (c.router, c.url) = start_router(dir, &urls);
}

fn start_cluster(dir: &Path, n: usize) -> Cluster {
    let shards: Vec<(Child, String)> = (0..n).map(|i| start_shard(dir, i, n)).collect();
    let urls: Vec<String> = shards.iter().map(|(_, u)| u.clone()).collect();
    let (router, url) = start_router(dir, &urls);
    Cluster {
        shards,
        router,
        url,
    }
}

/// Every read the router offers, against the reference, at `versions`.
fn same_answers(reference: &str, router: &str, versions: &[u64]) {
    let mut keys: Vec<String> = (0..ACCOUNTS).step_by(97).map(account).collect();
    keys.push(account(ACCOUNTS + 5)); // never written
    keys.push(String::new()); // the empty key
    let (mut values_ok, mut proofs_ok) = (0, 0);
    for &v in versions {
        for path in [
            format!("/v1/digest/{v}"),
            format!("/v1/blocks/{v}"),
            format!("/v1/digest/inclusion?version={v}"),
            format!("/v1/digest/consistency?from={v}"),
            format!("/v1/digest/frontier?version={v}"),
            format!("/v1/digest/inclusion?tid=1&version={}", v.max(4)),
        ] {
            assert_eq!(
                get(&format!("{reference}{path}")),
                get(&format!("{router}{path}")),
                "{path}"
            );
        }
        for tid in [0, 1] {
            for k in &keys {
                let body = json!({"key": k, "version": v});
                let path = format!("/v1/tries/{tid}/value");
                let want = post(&format!("{reference}{path}"), &body);
                values_ok += usize::from(want.0 == 200 && !want.1["value"].is_null());
                assert_eq!(
                    want,
                    post(&format!("{router}{path}"), &body),
                    "trie {tid} key {k} at {v}"
                );
            }
            for batch in keys.chunks(9) {
                let body = json!({"keys": batch.iter().filter(|k| !k.is_empty()).collect::<Vec<_>>(), "version": v});
                let path = format!("/v1/tries/{tid}/proofs");
                let want = post(&format!("{reference}{path}"), &body);
                proofs_ok += usize::from(want.0 == 200);
                assert_eq!(
                    want,
                    post(&format!("{router}{path}"), &body),
                    "multi-proof at {v}"
                );
            }
        }
    }
    // Not only errors compared: reads found their keys at every version.
    assert!(values_ok >= versions.len(), "{values_ok} values found");
    assert!(
        proofs_ok >= versions.len(),
        "{proofs_ok} multi-proofs answered"
    );
    for k in keys.iter().take(5) {
        let path = format!("/v1/tries/0/keys/{k}/history?proofs=true&limit=20");
        if k.is_empty() {
            continue;
        }
        assert_eq!(
            get(&format!("{reference}{path}")),
            get(&format!("{router}{path}")),
            "{path}"
        );
    }
    assert_eq!(
        get(&format!("{reference}/v1/digest")),
        get(&format!("{router}/v1/digest"))
    );
}

#[test]
fn routers_over_1_2_4_and_16_shards_answer_what_one_node_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (reference, ref_url) = serve_with(&dir.path().join("reference"), TOKEN, SMALL);
    let _reference = Killed(reference);
    let blocks = chain();
    for b in &blocks {
        let (status, _) = post_block(&ref_url, TOKEN, b);
        assert_eq!(status, 200);
    }
    let last = blocks.len() as u64;
    for n in [1usize, 2, 4, 16] {
        let d = dir.path().join(format!("cluster-{n}"));
        let cluster = start_cluster(&d, n);
        for b in &blocks {
            let want = get(&format!("{ref_url}/v1/digest/{}", b.version)).1;
            let got = post_block(&cluster.url, TOKEN, b);
            assert_eq!(got, (200, want), "block {} over {n} shards", b.version);
        }
        same_answers(&ref_url, &cluster.url, &[1, 3, 4, 12, last]);

        // A retried block is acknowledged again; a different block at a finished version is a conflict.
        let again = post_block(&cluster.url, TOKEN, &blocks[5]);
        assert_eq!(again.0, 200, "{again:?}");
        let mut other = blocks[5].clone();
        other.block = Some(hex(b"another block"));
        assert_eq!(
            post_block(&cluster.url, TOKEN, &other).1["error"]["code"],
            "version_conflict"
        );
        // A shard refuses a write of a key it does not hold; the router does not offer whole-trie routes.
        if n > 1 {
            let mut stray = blocks[0].clone();
            stray.version = last + 1;
            let (status, body) = post_block(&cluster.shards[1].1, TOKEN, &stray);
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (400, Some("wrong_shard")),
                "{body}"
            );
        }
        // A whole trie's export is the reference's, byte for byte; a node's own administration is not offered.
        for path in [
            "/v1/tries/0/export?version=4",
            "/v1/tries/1/export",
            "/v1/tries/0/export",
        ] {
            assert_eq!(
                get_bytes(&format!("{}{path}", cluster.url)),
                get_bytes(&format!("{ref_url}{path}")),
                "{path} over {n} shards"
            );
        }
        assert_eq!(get(&format!("{}/v1/tiers", cluster.url)).0, 501);
    }
}

#[test]
fn a_version_a_shard_missed_is_finished_by_a_retry_or_by_the_routers_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (reference, ref_url) = serve_with(&dir.path().join("reference"), TOKEN, SMALL);
    let _reference = Killed(reference);
    let blocks = chain();
    for b in &blocks {
        assert_eq!(post_block(&ref_url, TOKEN, b).0, 200);
    }
    let d = dir.path().join("cluster");
    let mut c = start_cluster(&d, 4);
    let digest = |v: u64| get(&format!("{ref_url}/v1/digest/{v}")).1;
    for b in &blocks[..5] {
        assert_eq!(post_block(&c.url, TOKEN, b), (200, digest(b.version)));
    }
    // A raw block that is not hex is refused before anything is decided (found by review: shard 0 refused its
    // part for good while the others committed theirs, and the router could neither write nor restart).
    let mut bad = blocks[5].clone();
    bad.block = Some("zz".into());
    let (status, body) = post_block(&c.url, TOKEN, &bad);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_hex")),
        "{body}"
    );
    assert!(metrics_text(&c.url).contains("letus_router_version_in_doubt 0"));
    // Shard 2 goes down: block 6 commits on the others and stays in doubt.
    let _ = c.shards[2].0.kill();
    let _ = c.shards[2].0.wait();
    let (status, body) = post_block(&c.url, TOKEN, &blocks[5]);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (502, Some("shard_unavailable")),
        "{body}"
    );
    // The router's metrics say so: version 6 in doubt, shard 2's call failed.
    let metrics = metrics_text(&c.url);
    assert!(
        metrics.contains("letus_router_version_in_doubt 1"),
        "{metrics}"
    );
    assert!(metrics.contains("letus_latest_version 5"), "{metrics}");
    let failed = format!(
        "letus_router_shard_failures_total{{shard=\"{}\"}} 1",
        c.shards[2].1
    );
    assert!(metrics.contains(&failed), "{metrics}");
    // Reads go on at the last finished version; the next block and a different block 6 are refused.
    assert_eq!(get(&format!("{}/v1/digest", c.url)).1, digest(5));
    assert_eq!(
        post_block(&c.url, TOKEN, &blocks[6]).1["error"]["code"],
        "version_not_next"
    );
    let mut other = blocks[5].clone();
    other.block = Some(hex(b"another block"));
    assert_eq!(
        post_block(&c.url, TOKEN, &other).1["error"]["code"],
        "version_conflict"
    );
    // Back up (same store, new port: the router is restarted on the new map below), a retry finishes it.
    c.shards[2] = start_shard(&d, 2, 4);
    // The router restarts while version 6 is in doubt: it finishes it before serving.
    restart_router(&mut c, &d);
    assert_eq!(get(&format!("{}/v1/digest", c.url)).1, digest(6));
    assert_eq!(post_block(&c.url, TOKEN, &blocks[5]), (200, digest(6)));
    // Now a shard that is down at the retry: the retry fails, then succeeds once it is back.
    let _ = c.shards[0].0.kill();
    let _ = c.shards[0].0.wait();
    assert_eq!(post_block(&c.url, TOKEN, &blocks[6]).0, 502);
    // The same block in upper-case hex is the same block (found by review: 409 version_conflict).
    let mut upper = blocks[6].clone();
    for w in &mut upper.writes {
        w.key = w.key.to_uppercase();
        w.value = w.value.as_ref().map(|v| v.to_uppercase());
    }
    upper.block = upper.block.map(|b| b.to_uppercase());
    let (status, body) = post_block(&c.url, TOKEN, &upper);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (502, Some("shard_unavailable")),
        "{body}"
    );
    c.shards[0] = start_shard(&d, 0, 4);
    restart_router(&mut c, &d);
    for b in &blocks[6..] {
        assert_eq!(
            post_block(&c.url, TOKEN, b),
            (200, digest(b.version)),
            "block {}",
            b.version
        );
    }
    same_answers(&ref_url, &c.url, &[5, 6, 7, blocks.len() as u64]);
    // SIGKILLed and restarted, the router answers the same from its roots log.
    restart_router(&mut c, &d);
    same_answers(&ref_url, &c.url, &[1, blocks.len() as u64]);
    // A router without these decisions (another directory) refuses shards that are ahead of it, and a map that
    // does not match what the shards hold.
    let urls: Vec<String> = c.shards.iter().map(|(_, u)| u.clone()).collect();
    let refused = |dir: &Path, shards: &[String]| {
        let mut cmd = route_command(dir, "127.0.0.1:0");
        for s in shards {
            cmd.args(["--shard", s]);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let why = refused(&d.join("other-router"), &urls);
    assert!(why.contains("ahead of the router"), "{why}");
    let mut swapped = urls.clone();
    swapped.swap(0, 1);
    let why = refused(&d.join("router"), &swapped);
    assert!(why.contains("the map gives it"), "{why}");
}

/// A free port of 127.0.0.1, for a process that must come back on the same address after a SIGKILL.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Shard `i` of `n` listening on `port` (so that it comes back on the same address after a SIGKILL).
fn shard_at(dir: &Path, port: u16, i: usize, n: usize) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_letus"));
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--token",
        TOKEN,
    ])
    .args([
        "--shard-prefixes",
        &PrefixSet::part(i, n).to_string(),
        "--data",
    ])
    .arg(dir.join(format!("shard-{i}")))
    .args(SMALL);
    spawn_server(cmd).0
}

/// Payment block `v` on trie 0, with a write of trie 1 now and then (its root composed from a few leaves).
fn payment_block(v: u64) -> BlockRequest {
    let mut rng = letus_workload::Rng::new(v);
    let mut writes: BTreeMap<(u32, String), Option<String>> = BTreeMap::new();
    for _ in 0..150 {
        let a = rng.hot_account(ACCOUNTS);
        writes.insert(
            (0, account(a)),
            Some(hex(format!("balance {}", rng.below(1 << 20)).as_bytes())),
        );
    }
    writes.insert((0, account(rng.below(ACCOUNTS))), None);
    if v.is_multiple_of(7) {
        writes.insert(
            (1, hex(format!("meta-{}", v % 5).as_bytes())),
            Some(hex(&v.to_le_bytes())),
        );
    }
    BlockRequest {
        version: v,
        writes: writes
            .into_iter()
            .map(|((tid, key), value)| WriteOp { tid, key, value })
            .collect(),
        block: Some(hex(format!("raw block {v}").as_bytes())),
        access_list: vec![],
    }
}

/// Posts a block; `None` when the answer is not a 200 (or there is none: the router is down).
fn try_post(url: &str, b: &BlockRequest) -> Option<Value> {
    let mut res = agent()
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(b)
        .ok()?;
    (res.status() == 200).then(|| res.body_mut().read_json().ok())?
}

/// `LETUS_SHARD_KILLS` (default 200) SIGKILLs of the router or a random one of 4 shards at random points while
/// one client writes blocks back to back, retrying each until it is acknowledged; every process comes back on
/// its address. Afterwards every acknowledged version has the digests one node gives for the same blocks, every
/// shard holds every version, and the reads agree.
#[test]
fn shards_and_routers_killed_at_random_lose_no_acknowledged_version() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let kills: usize = std::env::var("LETUS_SHARD_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let n = 4;
    let shard_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let router_port = free_port();
    let shard_urls: Vec<String> = shard_ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let start_shard_at = |i: usize| shard_at(&d, shard_ports[i], i, n);
    let start_router_at = || {
        let mut cmd = route_command(&d.join("router"), &format!("127.0.0.1:{router_port}"));
        for s in &shard_urls {
            cmd.args(["--shard", s]);
        }
        spawn_server(cmd).0
    };
    let mut shards: Vec<Killed> = (0..n).map(|i| Killed(start_shard_at(i))).collect();
    let mut router = Killed(start_router_at());
    let url = format!("http://127.0.0.1:{router_port}");

    let acked: Arc<Mutex<Vec<(u64, Value)>>> = Arc::default();
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop, url, failed) = (acked.clone(), stop.clone(), url.clone(), failed.clone());
        std::thread::spawn(move || {
            let mut v = 1;
            while !stop.load(Ordering::Relaxed) {
                let b = payment_block(v);
                // Each block is retried until it is acknowledged, whatever is down meanwhile.
                loop {
                    if let Some(d) = try_post(&url, &b) {
                        acked.lock().unwrap().push((v, d));
                        break;
                    }
                    failed.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                v += 1;
            }
        })
    };
    let mut rng = letus_workload::Rng::new(2026);
    let (mut router_kills, mut shard_kills, mut moves_asked) = (0, 0, 0);
    for k in 0..kills {
        std::thread::sleep(std::time::Duration::from_millis(10 + rng.below(120)));
        // Subtree moves run through the kills too: one asked for now and then (refused while one runs).
        if k % 8 == 0 {
            let (prefix, to) = (rng.below(256), rng.below(n as u64));
            if let Some(202) = try_ask_move(&url, &format!("{prefix:02x}"), to as usize) {
                moves_asked += 1;
            }
        }
        let target = rng.below(n as u64 + 2) as usize;
        if target >= n {
            let _ = router.0.kill();
            let _ = router.0.wait();
            router = Killed(start_router_at());
            router_kills += 1;
        } else {
            let _ = shards[target].0.kill();
            let _ = shards[target].0.wait();
            shards[target] = Killed(start_shard_at(target));
            shard_kills += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let last = acked.last().map(|(v, _)| *v).unwrap();
    assert_eq!(
        acked.len() as u64,
        last,
        "every version acknowledged once, in order"
    );
    assert!(
        last > 20,
        "only {last} blocks were written during the kills"
    );
    let failed = failed.load(Ordering::Relaxed);
    let map = get(&format!("{url}/v1/shard/map")).1;
    let handovers: usize = map["map"]["moved"]
        .as_object()
        .map_or(0, |m| m.values().map(|h| h.as_array().unwrap().len()).sum());
    eprintln!(
        "{router_kills} router and {shard_kills} shard SIGKILLs; {last} blocks acknowledged; {failed} attempts failed and were retried; {moves_asked} moves asked for, {handovers} subtrees handed over"
    );
    assert!(failed > 0, "no kill hit a commit");
    assert!(handovers > 0, "no move finished its handover: {map}");

    let (reference, ref_url) = serve_with(&d.join("reference"), TOKEN, SMALL);
    let _reference = Killed(reference);
    for v in 1..=last {
        assert_eq!(post_block(&ref_url, TOKEN, &payment_block(v)).0, 200);
    }
    for (v, got) in &acked {
        assert_eq!(
            *got,
            get(&format!("{ref_url}/v1/digest/{v}")).1,
            "acknowledged version {v}"
        );
        assert_eq!(
            get(&format!("{url}/v1/digest/{v}")).1,
            *got,
            "the router's digest of version {v}"
        );
    }
    for s in &shard_urls {
        assert_eq!(
            get(&format!("{s}/v1/digest")).1["version"],
            last,
            "shard {s} holds every version"
        );
    }
    same_answers(&ref_url, &url, &[1, last / 2, last]);
}

/// The reference node's digest of version `v`, the reference taking the chain's blocks up to `v` first: it is
/// kept in step with the cluster, so that both answer `latest` alike.
fn in_step<'a>(ref_url: &'a str, blocks: &'a [BlockRequest]) -> impl FnMut(u64) -> Value + 'a {
    let mut at = 0;
    move |v: u64| {
        while at < v {
            at += 1;
            assert_eq!(post_block(ref_url, TOKEN, &blocks[at as usize - 1]).0, 200);
        }
        get(&format!("{ref_url}/v1/digest/{v}")).1
    }
}

/// etcd (Debian's `etcd-server`) on free ports of 127.0.0.1, its data under `dir`; returns once it answers.
fn start_etcd(dir: &Path) -> (Killed, String) {
    let (client, peer) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
        ])
        .args(["--initial-cluster", &format!("default={peer_url}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("etcd (Debian's etcd-server; scripts/test-all.sh installs it)");
    let etcd = Killed(child);
    for _ in 0..200 {
        if let Ok(r) = agent()
            .post(format!("{url}/v3/kv/range"))
            .send_json(json!({"key": "eA=="}))
        {
            if r.status() == 200 {
                return (etcd, url);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("etcd did not answer at {url}");
}

fn route_cmd(data: &Path, etcd: &str, shards: &[String]) -> Command {
    let mut cmd = route_command(data, "127.0.0.1:0");
    cmd.args(["--etcd", etcd, "--cluster", "test", "--lease-secs", "3"]);
    for s in shards {
        cmd.args(["--shard", s]);
    }
    cmd
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// Through etcd: a router SIGKILLed with a version in doubt is replaced by a waiting router, which holds nothing
/// of its own yet: it takes the shard map from etcd, composes the roots of the versions the first one finished
/// from the shards, and finishes the version from the decision in etcd. A router stopped (SIGSTOP) past its lease
/// is replaced the same way, and once it runs again it writes nothing: its lease is gone, so its decision's write
/// fails, and it stops.
#[test]
fn a_router_that_dies_or_stalls_is_replaced_through_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let (_etcd, etcd) = start_etcd(&d);
    let (reference, ref_url) = serve_with(&d.join("reference"), TOKEN, SMALL);
    let _reference = Killed(reference);
    let blocks = chain();
    let mut digest = in_step(&ref_url, &blocks);
    let ports = [free_port(), free_port()];
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let shard = |i: usize| Killed(shard_at(&d, ports[i], i, 2));
    let mut shards = [shard(0), shard(1)];

    // Router A: stores the shard map, leads, writes versions 1-5; version 6 is in doubt when it is SIGKILLed.
    let (a, a_url) = spawn_server(route_cmd(&d.join("router-a"), &etcd, &urls));
    let mut a = Killed(a);
    for b in &blocks[..5] {
        assert_eq!(post_block(&a_url, TOKEN, b), (200, digest(b.version)));
    }
    let _ = shards[1].0.kill();
    let _ = shards[1].0.wait();
    digest(6);
    assert_eq!(post_block(&a_url, TOKEN, &blocks[5]).0, 502);
    let _ = a.0.kill();
    let _ = a.0.wait();
    shards[1] = shard(1);

    // Router B, a new directory and no --shard flags: takes over once A's lease ends.
    let (b, b_url) = spawn_server(route_cmd(&d.join("router-b"), &etcd, &[]));
    let b = Killed(b);
    assert_eq!(get(&format!("{b_url}/v1/digest")).1, digest(6));
    assert_eq!(post_block(&b_url, TOKEN, &blocks[5]), (200, digest(6)));
    for blk in &blocks[6..14] {
        assert_eq!(post_block(&b_url, TOKEN, blk), (200, digest(blk.version)));
    }
    // B starts moving subtree 3f to shard 1 (its step of version 15 is in etcd's decision); C finishes the move.
    assert_eq!(ask_move(&b_url, "3f", 1).0, 202);
    assert_eq!(post_block(&b_url, TOKEN, &blocks[14]), (200, digest(15)));
    assert_eq!(
        get(&format!("{b_url}/v1/shard/map")).1["map"]["task"]["phase"],
        "copy"
    );
    same_answers(&ref_url, &b_url, &[1, 6, 15]);

    // Router C waits while B leads; B stops (SIGSTOP) past its lease and C takes over.
    let waiting = {
        let cmd = route_cmd(&d.join("router-c"), &etcd, &urls);
        std::thread::spawn(move || spawn_server(cmd))
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        !waiting.is_finished(),
        "C must wait while B holds the lease"
    );
    signal(&b.0, "-STOP");
    let (c, c_url) = waiting.join().unwrap();
    let _c = Killed(c);
    assert_eq!(get(&format!("{c_url}/v1/digest")).1, digest(15));
    signal(&b.0, "-CONT");
    // B writes nothing more: its write fails on its own (`fenced`) or B has stopped already.
    let mut b = b;
    if let Ok(mut res) = agent()
        .post(format!("{b_url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(&blocks[15])
    {
        let body: Value = res.body_mut().read_json().unwrap_or(Value::Null);
        assert_eq!(
            (res.status().as_u16(), &body["error"]["code"]),
            (503, &json!("fenced")),
            "{body}"
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = b.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "B did not stop after losing its lease"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(!status.success());
    for blk in &blocks[15..] {
        assert_eq!(post_block(&c_url, TOKEN, blk), (200, digest(blk.version)));
    }
    let last = blocks.len() as u64;
    let map = get(&format!("{c_url}/v1/shard/map")).1;
    assert!(map["map"]["task"].is_null(), "the move finished: {map}");
    let handed_over = map["map"]["moved"]["63"][0]["from"].as_u64().unwrap();
    assert!(handed_over > 15, "{map}");
    same_answers(
        &ref_url,
        &c_url,
        &[1, 6, 15, handed_over - 1, handed_over, last],
    );
    // A router whose --shard flags are not the map in etcd is refused.
    let out = route_cmd(&d.join("router-d"), &etcd, &urls[..1])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("shard map in etcd"));
}

/// A network namespace joined to the host by a veth pair: a process started in it with [`Netns::command`] is
/// reachable at `addr` until [`Netns::cut`] takes its side of the link down. Removed on drop.
struct Netns {
    name: String,
    inner_if: String,
    addr: String,
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .expect("ip (iproute2)")
        .success();
    assert!(ok, "ip {}", args.join(" "));
}

impl Netns {
    fn new() -> Netns {
        let pid = std::process::id();
        let subnet = pid % 250 + 1;
        let name = format!("letus-test-{pid}");
        let (outer, inner) = (format!("lx{pid}"), format!("ly{pid}"));
        ip(&["netns", "add", &name]);
        let ns = Netns {
            name: name.clone(),
            inner_if: inner.clone(),
            addr: format!("10.231.{subnet}.2"),
        };
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ]);
        ip(&["link", "set", &inner, "netns", &name]);
        ip(&[
            "addr",
            "add",
            &format!("10.231.{subnet}.1/30"),
            "dev",
            &outer,
        ]);
        ip(&["link", "set", &outer, "up"]);
        let inside = |args: &[&str]| {
            let mut a = vec!["netns", "exec", &name, "ip"];
            a.extend_from_slice(args);
            ip(&a);
        };
        inside(&[
            "addr",
            "add",
            &format!("10.231.{subnet}.2/30"),
            "dev",
            &inner,
        ]);
        inside(&["link", "set", &inner, "up"]);
        inside(&["link", "set", "lo", "up"]);
        ns
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// The namespace's side of the link goes down: packets to it are lost, as when its machine drops off the
    /// network (nothing answers, nothing is refused).
    fn cut(&self) {
        self.set_link("down");
    }

    fn heal(&self) {
        self.set_link("up");
    }

    fn set_link(&self, state: &str) {
        let (ns, link) = (self.name.as_str(), self.inner_if.as_str());
        ip(&["netns", "exec", ns, "ip", "link", "set", link, state]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the host's end.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A shard in a network namespace of its own, cut off while blocks are written: writes fail cleanly within the
/// router's shard timeout, reads of the other shard's keys go on, and once the link is back the shard rejoins:
/// the version in doubt and the next ones commit, with the roots and answers one node gives.
#[test]
fn a_shard_cut_off_in_a_network_namespace_fails_writes_cleanly_and_rejoins() {
    let ns = Netns::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let (reference, ref_url) = serve_with(&d.join("reference"), TOKEN, SMALL);
    let _reference = Killed(reference);
    let blocks = chain();
    let mut digest = in_step(&ref_url, &blocks);
    let (s0, s0_url) = start_shard(&d, 0, 2);
    let _s0 = Killed(s0);
    let mut cmd = ns.command(env!("CARGO_BIN_EXE_letus"));
    cmd.args([
        "serve",
        "--listen",
        &format!("{}:7000", ns.addr),
        "--token",
        TOKEN,
    ])
    .args([
        "--shard-prefixes",
        &PrefixSet::part(1, 2).to_string(),
        "--data",
    ])
    .arg(d.join("shard-1"))
    .args(SMALL);
    let (s1, s1_url) = spawn_server(cmd);
    let _s1 = Killed(s1);
    let mut cmd = route_command(&d.join("router"), "127.0.0.1:0");
    cmd.args([
        "--shard",
        &s0_url,
        "--shard",
        &s1_url,
        "--shard-timeout-secs",
        "3",
    ]);
    let (router, url) = spawn_server(cmd);
    let _router = Killed(router);
    for b in &blocks[..5] {
        assert_eq!(post_block(&url, TOKEN, b), (200, digest(b.version)));
    }
    ns.cut();
    let started = std::time::Instant::now();
    let (status, body) = post_block(&url, TOKEN, &blocks[5]);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (502, Some("shard_unavailable")),
        "{body}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // Reads of the keys shard 0 holds go on, at the last finished version.
    let mut read = 0;
    for i in (0..ACCOUNTS).step_by(50) {
        let key = account(i);
        let bytes = letus_verify::hex::decode(&key).unwrap();
        if letus_verify::KeyPath::of(&bytes).0[0] >= 0x80 {
            continue;
        }
        let body = json!({"key": key, "version": 5});
        let want = post(&format!("{ref_url}/v1/tries/0/value"), &body);
        assert_eq!(want, post(&format!("{url}/v1/tries/0/value"), &body));
        read += 1;
    }
    assert!(read > 10);
    assert_eq!(get(&format!("{url}/v1/digest")).1, digest(5));
    ns.heal();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, body) = post_block(&url, TOKEN, &blocks[5]);
        if status == 200 {
            assert_eq!(body, digest(6));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the shard did not rejoin: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for b in &blocks[6..] {
        assert_eq!(post_block(&url, TOKEN, b), (200, digest(b.version)));
    }
    same_answers(&ref_url, &url, &[1, 6, blocks.len() as u64]);
}

/// `GET /metrics` of a node or a router.
fn metrics_text(url: &str) -> String {
    agent()
        .get(format!("{url}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// A copy of `cmd`'s program and arguments.
fn cmd_clone(cmd: &Command) -> Command {
    let mut c = Command::new(cmd.get_program());
    c.args(cmd.get_args());
    c
}

/// Asks for a move; the status, or `None` when the router is down.
fn try_ask_move(router: &str, prefix: &str, to: usize) -> Option<u16> {
    agent()
        .post(format!("{router}/v1/shard/moves"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(json!({"prefix": prefix, "to": to}))
        .ok()
        .map(|r| r.status().as_u16())
}

/// Posts a move to the router; returns the status and answer.
fn ask_move(router: &str, prefix: &str, to: usize) -> (u16, Value) {
    let mut res = agent()
        .post(format!("{router}/v1/shard/moves"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(json!({"prefix": prefix, "to": to}))
        .unwrap();
    let status = res.status().as_u16();
    (status, res.body_mut().read_json().unwrap_or(Value::Null))
}

/// Moves subtree 3f from shard 0 to shard 1 and back while blocks keep coming, with the router SIGKILLed in the
/// middle of the first move and shard 1 SIGKILLed and restarted with its first `--shard-prefixes` after the
/// handover. Every block's digests are the reference's; afterwards values, proofs and the histories of the moved
/// keys (which now span both shards) are the reference's at versions before, during and after the moves; the
/// shards hold the subtrees the map says, and the old copies are gone from their latest state.
#[test]
fn a_subtree_moves_between_shards_while_blocks_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (reference, ref_url) = serve_with(&dir.path().join("reference"), TOKEN, SMALL);
    let _reference = Killed(reference);
    let d = dir.path().join("cluster");
    let ports = [free_port(), free_port()];
    let mut shards: Vec<Killed> = (0..2)
        .map(|i| Killed(shard_at(&d, ports[i], i, 2)))
        .collect();
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let (router, mut url) = start_router(&d, &urls);
    let router = Killed(router);
    let moved_keys: Vec<String> = (0..ACCOUNTS)
        .map(account)
        .filter(|k| letus_verify::KeyPath::of(&letus_verify::hex::decode(k).unwrap()).0[0] == 0x3f)
        .collect();
    assert!(moved_keys.len() > 3, "{} keys in 3f", moved_keys.len());
    // Every block writes the moving subtree in both tries (a copy that missed one would differ), and deletes
    // one of its keys now and then.
    let mut blocks = chain();
    let first_moves = blocks.len() as u64 + 1;
    for v in first_moves..first_moves + 150 {
        let mut b = payment_block(v);
        let k = &moved_keys[v as usize % moved_keys.len()];
        b.writes.retain(|w| w.key != *k);
        let value = (v % 6 != 0).then(|| hex(format!("moved {v}").as_bytes()));
        b.writes.push(WriteOp {
            tid: 0,
            key: k.clone(),
            value,
        });
        b.writes.push(WriteOp {
            tid: 1,
            key: k.clone(),
            value: Some(hex(&v.to_le_bytes())),
        });
        blocks.push(b);
    }
    let mut at = 0usize;
    let commit = |url: &str, at: &mut usize| {
        let b = &blocks[*at];
        assert_eq!(post_block(&ref_url, TOKEN, b).0, 200);
        commits_as(url, &ref_url, b);
        *at += 1;
    };
    while (at as u64) < first_moves - 1 {
        commit(&url, &mut at);
    }
    let map = |url: &str| get(&format!("{url}/v1/shard/map")).1;
    let phase = |url: &str| map(url)["map"]["task"]["phase"].clone();

    // A write a shard would refuse for good (a key above 65,535 bytes) is refused before anything is decided:
    // the version stays free.
    let mut huge = blocks[at].clone();
    huge.writes.push(WriteOp {
        tid: 0,
        key: "ab".repeat(65_536),
        value: Some("01".into()),
    });
    assert_eq!(
        post_block(&url, TOKEN, &huge).1["error"]["code"],
        "too_large"
    );
    // Refused: no token, to the shard that holds it, a second move at once.
    let (status, _) = post(
        &format!("{url}/v1/shard/moves"),
        &json!({"prefix": "3f", "to": 1}),
    );
    assert_eq!(status, 401);
    assert_eq!(ask_move(&url, "3f", 0).1["error"]["code"], "move_refused");
    let (status, body) = ask_move(&url, "3f", 1);
    assert_eq!(status, 202, "{body}");
    assert_eq!(ask_move(&url, "40", 0).1["error"]["code"], "move_refused");

    // The first step copies trie 0's part; the router dies; its successor goes on from the decision's map.
    commit(&url, &mut at);
    assert_eq!(phase(&url), "copy");
    drop(router);
    // Its successor copies and deletes at most 4 pairs of a trie at once: the rest of this move and the move back
    // go in pieces (a sixteenth of a trie's part of the subtree per block).
    let mut cmd = route_command(&d.join("router"), "127.0.0.1:0");
    for u in &urls {
        cmd.args(["--shard", u]);
    }
    cmd.args(["--move-step-pairs", "4"]);
    let restart = |router: Option<Killed>| {
        drop(router);
        let (r, u) = spawn_server(cmd_clone(&cmd));
        (Killed(r), u)
    };
    let (router, u) = restart(None);
    url = u;
    assert_eq!(phase(&url), "copy");
    let mut handover = None;
    while map(&url)["map"]["task"].is_object() {
        commit(&url, &mut at);
        let m = map(&url);
        if handover.is_none() && m["map"]["task"]["phase"] == "drop" {
            handover = m["map"]["task"]["handed_over"].as_u64();
            assert_eq!(m["holds"], json!(["00-3e,40-7f", "3f,80-ff"]), "{m}");
            // Shard 1 restarts with its first flag (80-ff): its saved subtrees win.
            let _ = shards[1].0.kill();
            let _ = shards[1].0.wait();
            shards[1] = Killed(shard_at(&d, ports[1], 1, 2));
            assert_eq!(
                get(&format!("{}/v1/shard/tops", urls[1])).1["prefixes"],
                "3f,80-ff"
            );
        }
        assert!(at < blocks.len() - 10, "the move did not finish: {m}");
    }
    let w1 = handover.expect("handed over");
    // The old copy is gone from shard 0's latest state, kept in its history.
    let latest = at as u64;
    let top_prefixes = |shard: &str, v: u64| -> Vec<u64> {
        get(&format!("{shard}/v1/shard/tops?version={v}")).1["tries"][0]["tops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["prefix"].as_u64().unwrap())
            .collect()
    };
    assert!(!top_prefixes(&urls[0], latest).contains(&0x3f));
    assert!(top_prefixes(&urls[0], w1 - 1).contains(&0x3f));
    // A write of the moved subtree straight to its old shard is refused now.
    let mut stray = payment_block(latest + 1);
    stray.writes = vec![WriteOp {
        tid: 0,
        key: moved_keys[0].clone(),
        value: Some(hex(b"stray")),
    }];
    assert_eq!(
        post_block(&urls[0], TOKEN, &stray).1["error"]["code"],
        "wrong_shard"
    );

    // And back: shard 0 takes it again (its history of the subtree then spans three stretches), in pieces. The
    // router dies between the request and the next block: its successor still starts the move.
    assert_eq!(ask_move(&url, "3f", 0).0, 202);
    let (_router, u) = restart(Some(router));
    url = u;
    assert_eq!(map(&url)["requested"]["to"], 0);
    commit(&url, &mut at);
    let mut pieces = std::collections::BTreeSet::new();
    while map(&url)["map"]["task"].is_object() {
        if let Some(p) = map(&url)["map"]["task"]["piece"].as_u64() {
            pieces.insert(p);
        }
        commit(&url, &mut at);
        assert!(at < blocks.len() - 2, "the move back did not finish");
    }
    assert_eq!(
        pieces.len(),
        15,
        "pieces 1-15 went one per block: {pieces:?}"
    );
    let m = map(&url);
    let handovers = m["map"]["moved"]["63"].as_array().unwrap().clone();
    assert_eq!(handovers.len(), 2, "{m}");
    let metrics = metrics_text(&url);
    for line in [
        "letus_router_handovers_total 2",
        "letus_router_move_phase 0",
        "letus_router_version_in_doubt 0",
        "letus_http_requests_total{route=\"/v1/blocks\",status=\"200\"}",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    assert_eq!(m["holds"], json!(["00-7f", "80-ff"]));
    while at < blocks.len() {
        commit(&url, &mut at);
    }
    let last = at as u64;
    let w2 = handovers[1]["from"].as_u64().unwrap();
    same_answers(
        &ref_url,
        &url,
        &[
            first_moves - 1,
            first_moves + 1,
            w1 - 1,
            w1,
            w1 + 1,
            w2 - 1,
            w2,
            last,
        ],
    );
    for k in moved_keys.iter().take(6) {
        for q in ["proofs=true&limit=1000", "limit=3"] {
            let path = format!("/v1/tries/0/keys/{k}/history?{q}");
            let want = get(&format!("{ref_url}{path}"));
            assert_eq!(want, get(&format!("{url}{path}")), "{path}");
            // Following the cursor through the stretches gives the same pages.
            let mut next = want.1["next"].as_u64();
            while let Some(n) = next {
                let path = format!("/v1/tries/0/keys/{k}/history?limit=3&before={n}");
                let want = get(&format!("{ref_url}{path}"));
                assert_eq!(want, get(&format!("{url}{path}")), "{path}");
                next = want.1["next"].as_u64();
            }
        }
        for v in [w1 - 1, w1, w2 - 1, w2, last] {
            let body = json!({"key": k, "version": v});
            assert_eq!(
                post(&format!("{ref_url}/v1/tries/0/value"), &body),
                post(&format!("{url}/v1/tries/0/value"), &body)
            );
        }
    }
}

/// Posts `b` to `url`, which must acknowledge it with the reference's digests of its version.
fn commits_as(url: &str, ref_url: &str, b: &BlockRequest) {
    let want = get(&format!("{ref_url}/v1/digest/{}", b.version)).1;
    assert_eq!(
        post_block(url, TOKEN, b),
        (200, want),
        "block {}",
        b.version
    );
}

/// A reference node (empty) and the chain followed by `payments` payment blocks; the first payment's version.
fn reference_and_chain(dir: &Path, payments: u64) -> (Killed, String, Vec<BlockRequest>, u64) {
    let (reference, ref_url) = serve_with(&dir.join("reference"), TOKEN, SMALL);
    let mut blocks = chain();
    let first = blocks.len() as u64 + 1;
    blocks.extend((first..first + payments).map(payment_block));
    (Killed(reference), ref_url, blocks, first)
}

/// Readers and stalled clients of a router while it commits and moves a subtree: two reader threads read values
/// and multi-proofs at the router's latest version over and over, every answer byte-identical to the reference's
/// at that version; three clients send a block's head and part of its body, then stall. The blocks (and the move)
/// commit meanwhile; the stalled requests are answered `408 body_timeout` only afterwards, by their deadline.
#[test]
fn readers_and_stalled_clients_of_a_router_never_hold_up_its_commits() {
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let (_reference, ref_url, blocks, first) = reference_and_chain(dir.path(), 30);
    for b in &blocks {
        assert_eq!(post_block(&ref_url, TOKEN, b).0, 200);
    }
    let d = dir.path().join("cluster");
    let mut shards = Vec::new();
    let mut urls = Vec::new();
    for i in 0..2 {
        let (c, u) = start_shard(&d, i, 2);
        shards.push(Killed(c));
        urls.push(u);
    }
    let mut cmd = route_command(&d.join("router"), "127.0.0.1:0");
    for u in &urls {
        cmd.args(["--shard", u]);
    }
    cmd.args(["--body-timeout-secs", "20"]);
    let (router, url) = spawn_server(cmd);
    let _router = Killed(router);
    for b in &blocks[..first as usize - 1] {
        assert_eq!(post_block(&url, TOKEN, b).0, 200);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (stop, reads, url, ref_url) =
                (stop.clone(), reads.clone(), url.clone(), ref_url.clone());
            std::thread::spawn(move || {
                let mut rng = letus_workload::Rng::new(r + 100);
                while !stop.load(Ordering::Relaxed) {
                    let v = get(&format!("{url}/v1/digest")).1["version"]
                        .as_u64()
                        .unwrap();
                    let keys: Vec<String> = (0..9).map(|_| account(rng.below(ACCOUNTS))).collect();
                    let body = json!({"keys": keys, "version": v});
                    let path = "/v1/tries/0/proofs";
                    let got = post(&format!("{url}{path}"), &body);
                    assert_eq!(got, post(&format!("{ref_url}{path}"), &body), "at {v}");
                    let body = json!({"key": keys[0], "version": v});
                    let path = "/v1/tries/0/value";
                    let got = post(&format!("{url}{path}"), &body);
                    assert_eq!(got, post(&format!("{ref_url}{path}"), &body), "at {v}");
                    reads.fetch_add(2, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Three requests that stall halfway through their bodies.
    let addr = url.trim_start_matches("http://").to_string();
    let stalled: Vec<std::net::TcpStream> = (0..3)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "POST /v1/blocks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{\"version\": "
            )
            .unwrap();
            s
        })
        .collect();

    assert_eq!(ask_move(&url, "3f", 1).0, 202);
    for b in &blocks[first as usize - 1..] {
        commits_as(&url, &ref_url, b);
    }
    // Every block committed while the stalled requests were still waiting for their bodies.
    let metrics = metrics_text(&url);
    assert!(
        !metrics.contains("status=\"408\""),
        "a stalled request was answered before the commits ended: {metrics}"
    );
    let map = get(&format!("{url}/v1/shard/map")).1;
    assert!(map["map"]["task"].is_null(), "the move finished: {map}");
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("every read matched the reference");
    }
    let reads = reads.load(Ordering::Relaxed);
    eprintln!("{reads} reads checked against the reference while 30 blocks and a move committed");
    assert!(reads >= 20, "only {reads} reads during the commits");
    for mut s in stalled {
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("body_timeout"), "{answer}");
    }
}

/// A node joins from a router (the merged manifest, chunks from the shard holding each subtree, the history
/// frontier, then the router's changes and blocks) and follows it across a subtree move; the router's changes
/// over ranges that span handovers are the reference's.
#[test]
fn a_node_joins_from_a_router_and_follows_it_across_a_move() {
    let dir = tempfile::tempdir().unwrap();
    let (_reference, ref_url, mut blocks, first) = reference_and_chain(dir.path(), 60);
    // One trie (a joined node follows one).
    for b in &mut blocks {
        b.writes.retain(|w| w.tid == 0);
        b.access_list.retain(|a| a.tid == 0);
    }
    let d = dir.path().join("cluster");
    let cluster = start_cluster(&d, 2);
    let url = cluster.url.clone();
    let mut at = 0usize;
    let mut commit = |n: usize| {
        for b in &blocks[at..at + n] {
            assert_eq!(post_block(&ref_url, TOKEN, b).0, 200);
            commits_as(&url, &ref_url, b);
        }
        at += n;
        at as u64
    };
    let map = |u: &str| get(&format!("{u}/v1/shard/map")).1;
    commit(first as usize - 1);
    assert_eq!(ask_move(&url, "3f", 1).0, 202);
    let mut now = commit(1);
    while map(&url)["map"]["task"].is_object() || now < first + 2 {
        now = commit(1);
    }
    let w1 = map(&url)["map"]["moved"]["63"][0]["from"].as_u64().unwrap();
    let v_join = commit(5);

    // B joins at v_join from the router alone, trusting the reference's root of that version.
    let root = get(&format!("{ref_url}/v1/digest/{v_join}")).1["digests"][0]["root"]
        .as_str()
        .unwrap()
        .to_string();
    let v_arg = v_join.to_string();
    let (b, b_url) = serve_with(
        &dir.path().join("joined"),
        TOKEN,
        &[
            "--join",
            &url,
            "--join-version",
            &v_arg,
            "--trusted-root",
            &root,
            "--join-max-pairs",
            "200",
            "--follow",
        ],
    );
    let _b = Killed(b);
    // The subtree moves back while B follows.
    assert_eq!(ask_move(&url, "3f", 0).0, 202);
    commit(1);
    while map(&url)["map"]["task"].is_object() {
        commit(1);
    }
    let w2 = map(&url)["map"]["moved"]["63"][1]["from"].as_u64().unwrap();
    let last = commit(3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while get(&format!("{b_url}/v1/digest")).1["version"].as_u64() != Some(last) {
        assert!(std::time::Instant::now() < deadline, "B did not catch up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for v in v_join..=last {
        assert_eq!(
            get(&format!("{b_url}/v1/digest/{v}")),
            get(&format!("{ref_url}/v1/digest/{v}")),
            "B's digest of {v}"
        );
    }
    // B's values and proofs (its history starts at the join, so key histories are not compared).
    let mut found = 0;
    for v in [v_join, w2, last] {
        for i in (0..ACCOUNTS).step_by(61) {
            let body = json!({"key": account(i), "version": v});
            let want = post(&format!("{ref_url}/v1/tries/0/value"), &body);
            found += usize::from(want.0 == 200 && !want.1["value"].is_null());
            assert_eq!(post(&format!("{b_url}/v1/tries/0/value"), &body), want);
        }
    }
    assert!(found > 100, "{found} values found");
    for v in [v_join, w1, w2, last] {
        let path = format!("/v1/tries/0/export?version={v}");
        let want = get_bytes(&format!("{ref_url}{path}"));
        assert_eq!(want.0, 200);
        assert_eq!(get_bytes(&format!("{url}{path}")), want, "{path}");
    }
    same_answers(&ref_url, &url, &[v_join, w2, last]);
    // Changes over ranges within, across one and across both handovers.
    for (from, to) in [
        (1, last),
        (first - 1, last),
        (w1 - 3, w1 + 2),
        (w1 - 1, w1),
        (w1, w2),
        (w2 - 2, w2 - 1),
        (w2 - 1, last),
        (last, last),
    ] {
        {
            let path = format!("/v1/tries/0/changes?from={from}&to={to}");
            let want = get(&format!("{ref_url}{path}"));
            assert_eq!(want.0, 200, "{path}: {want:?}");
            assert_eq!(get(&format!("{url}{path}")), want, "{path}");
        }
    }
}
