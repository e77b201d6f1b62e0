//! On-disk compatibility of a node's data directory: `tests/fixtures/node-v1/data/` is what `Node` (the code
//! behind `letus serve`) wrote: the state store (`state/`, engine format version 2, see letus-core/FORMAT.md) and
//! the block store (`blocks/`, BLOCKSTORE-FORMAT.md version 1). 12 blocks in two tries with deletes and puts
//! after deletes, raw block bytes (one block without), a clean close after block 8 (so index files exist) and
//! blocks 9-12 after it that only the value log holds. `expected.json` holds every request, every digest (the
//! SPEC's binary form, hex), the value of every key at every version, and the history of every key, all from the
//! generator's own record of what it wrote.
//!
//! THE FIXTURE IS THE CONTRACT: every later version must open a copy of it and pass this test. A format change
//! reads it, migrates it, or refuses it with a clear error (and the test is changed deliberately to expect
//! that); the fixture is never regenerated to make the test pass (a new one is added next to it). The generator
//! refuses to overwrite and runs only when asked:
//!
//! ```text
//! LETUS_WRITE_FIXTURES=1 cargo test -p letus-node --test compat -- write_fixture --nocapture
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use letus_core::Options;
use letus_node::api::{BlockRequest, WriteOp};
use letus_node::error::ApiError;
use letus_node::node::{Node, NodeLimits};
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::{verify_proof, Digest, Limits, Proof};
use serde_json::{json, Value};

const NAME: &str = "node-v1";
const TOKEN: &str = "compat-token";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(NAME)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn open(data: &Path) -> Node {
    // Default engine options: the writer's options are not part of the format.
    Node::open(
        data,
        Options::default(),
        TOKEN.into(),
        NodeLimits::default(),
    )
    .unwrap()
}

fn digests_of(node: &Node, v: u64) -> Vec<String> {
    node.digests(Some(v))
        .unwrap()
        .digests
        .iter()
        .map(|d| hex(&d.encode()))
        .collect()
}

/// Everything `expected.json` says, against the open node.
fn check(node: &Node, e: &Value) {
    let requests: Vec<BlockRequest> = serde_json::from_value(e["requests"].clone()).unwrap();
    for (r, d) in requests.iter().zip(e["digests"].as_array().unwrap()) {
        let v = r.version;
        let want: Vec<String> = serde_json::from_value(d.clone()).unwrap();
        assert_eq!(digests_of(node, v), want, "digests at {v}");
        let block = node.block(v).unwrap();
        assert_eq!(
            block.block,
            r.block.clone().unwrap_or_default(),
            "block {v}"
        );
        // The same request again is acknowledged with the same digests (the block store's request hash), a
        // different one for the same version is a conflict.
        let again = node.write_block(r.clone()).unwrap();
        assert_eq!(
            again
                .digests
                .iter()
                .map(|d| hex(&d.encode()))
                .collect::<Vec<_>>(),
            want
        );
        let mut other = r.clone();
        other.block = Some("ff".into());
        assert!(matches!(
            node.write_block(other),
            Err(ApiError::Conflict(_))
        ));
    }
    for x in e["values"].as_array().unwrap() {
        let (tid, v) = (
            x["tid"].as_u64().unwrap() as u32,
            x["version"].as_u64().unwrap(),
        );
        let key = x["key"].as_str().unwrap();
        let want = x["value"].as_str().map(str::to_string);
        let got = node.value(tid, key, Some(v)).unwrap();
        assert_eq!(got.value, want, "trie {tid} version {v} key {key}");
        let digest = Digest::decode(
            &unhex(
                e["digests"][v as usize - 1].as_array().unwrap()[tid as usize]
                    .as_str()
                    .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(got.digest, digest);
        let proof = Proof::decode(&unhex(&got.proof_hex).unwrap(), &Limits::default()).unwrap();
        let value = want.as_deref().map(|v| unhex(v).unwrap());
        let read = verify_proof(
            &digest.root,
            &unhex(key).unwrap(),
            value.as_deref(),
            &proof,
            &Limits::default(),
        )
        .unwrap_or_else(|err| panic!("proof trie {tid} version {v} key {key}: {err}"));
        assert_eq!(read.value(), value.as_deref());
    }
    for x in e["histories"].as_array().unwrap() {
        let tid = x["tid"].as_u64().unwrap() as u32;
        let key = x["key"].as_str().unwrap();
        let h = node.history(tid, key, false, None, None).unwrap();
        let got: Vec<Value> = h
            .entries
            .iter()
            .map(|i| json!([i.version, i.value]))
            .collect();
        assert_eq!(&Value::from(got), &x["entries"], "history of {tid} {key}");
    }
}

fn check_fixture(src: &Path) {
    let e: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("expected.json")).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy_dir(&src.join("data"), &data);
    let node = open(&data);
    check(&node, &e);
    // One more block on top, a clean close, a reopen.
    let latest = e["requests"].as_array().unwrap().len() as u64;
    let req = BlockRequest {
        version: latest + 1,
        writes: vec![
            WriteOp {
                tid: 0,
                key: hex(b"after the upgrade"),
                value: Some(hex(b"new")),
            },
            WriteOp {
                tid: 1,
                key: hex(b"key-1"),
                value: None,
            },
        ],
        block: Some(hex(b"block after the upgrade")),
        access_list: Vec::new(),
    };
    let d = node.write_block(req.clone()).unwrap();
    node.close().unwrap();
    // The delete is a write of key-1's history if the key was there.
    let mut e = e;
    for h in e["histories"].as_array_mut().unwrap() {
        if h["tid"] == 1 && h["key"] == hex(b"key-1").as_str() && !h["entries"][0][1].is_null() {
            h["entries"]
                .as_array_mut()
                .unwrap()
                .insert(0, json!([latest + 1, null]));
        }
    }
    let node = open(&data);
    check(&node, &e);
    let again = node.digests(Some(latest + 1)).unwrap();
    assert_eq!(again, d);
    assert_eq!(node.block(latest + 1).unwrap().block, req.block.unwrap());
    let v = node.value(0, &hex(b"after the upgrade"), None).unwrap();
    assert_eq!(v.value, Some(hex(b"new")));
    assert_eq!(node.value(1, &hex(b"key-1"), None).unwrap().value, None);
    node.close().unwrap();
}

#[test]
fn node_v1_fixture_opens_and_verifies() {
    check_fixture(&fixture());
}

/// Every write of every key (hex), oldest first; a delete of an absent key writes nothing.
type Model = BTreeMap<(u32, String), Vec<(u64, Option<String>)>>;

#[test]
fn write_fixture() {
    if std::env::var_os("LETUS_WRITE_FIXTURES").is_none() {
        return;
    }
    let out = fixture();
    assert!(
        !out.exists(),
        "{} exists: a fixture is never regenerated over (see the top of this file)",
        out.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // No time-based flush: the bytes must not depend on the machine's speed.
    let opts = Options {
        max_replay_millis: u64::MAX,
        memtable_bytes: 8 * 1024,
        memory_budget_bytes: 1 << 20,
        vdls_file_bytes: 16 * 1024,
        ..Options::default()
    };
    let mut rng = letus_workload::Rng::new(0x00de_c0de);
    let mut model: Model = BTreeMap::new();
    let at = |m: &Model, tid, key: &str, v| {
        m.get(&(tid, key.to_string()))
            .and_then(|w| w.iter().rev().find(|(at, _)| *at <= v))
            .and_then(|(_, val)| val.clone())
    };
    let keys: Vec<String> = (0..16)
        .map(|i| hex(format!("key-{i}").as_bytes()))
        .collect();
    let mut requests = Vec::new();
    let mut digests = Vec::new();
    let mut node = Node::open(&data, opts.clone(), TOKEN.into(), NodeLimits::default()).unwrap();
    for v in 1..=12u64 {
        let mut writes = Vec::new();
        let mut chosen = std::collections::BTreeSet::new();
        for tid in 0..2u32 {
            while chosen.len() < 6 * (tid as usize + 1) {
                chosen.insert((tid, rng.below(keys.len() as u64) as usize));
            }
        }
        for &(tid, k) in &chosen {
            let key = &keys[k];
            let value = if v > 1 && rng.below(100) < 35 {
                None
            } else {
                let n = rng.below(20);
                Some(hex(&(0..n)
                    .map(|_| rng.next_u64() as u8)
                    .collect::<Vec<_>>()))
            };
            if value.is_some() || at(&model, tid, key, v).is_some() {
                model
                    .entry((tid, key.clone()))
                    .or_default()
                    .push((v, value.clone()));
            }
            writes.push(WriteOp {
                tid,
                key: key.clone(),
                value,
            });
        }
        let req = BlockRequest {
            version: v,
            writes,
            block: (v != 5).then(|| hex(format!("raw block {v}").as_bytes())),
            access_list: Vec::new(),
        };
        let d = node.write_block(req.clone()).unwrap();
        digests.push(
            d.digests
                .iter()
                .map(|d| hex(&d.encode()))
                .collect::<Vec<_>>(),
        );
        requests.push(req);
        if v == 8 {
            node.close().unwrap();
            node = Node::open(&data, opts.clone(), TOKEN.into(), NodeLimits::default()).unwrap();
        }
    }
    // Dropped without a close: blocks 9-12 are in the value log only.
    drop(node);
    for lock in ["state/LOCK", "blocks/blocks.lock"] {
        let _ = std::fs::remove_file(data.join(lock));
    }
    let mut values = Vec::new();
    for v in 1..=12u64 {
        for tid in 0..2u32 {
            if tid == 1 && digests[v as usize - 1].len() < 2 {
                continue;
            }
            for key in &keys {
                values.push(
                    json!({"tid": tid, "version": v, "key": key, "value": at(&model, tid, key, v)}),
                );
            }
        }
    }
    let histories: Vec<Value> = model
        .iter()
        .map(|((tid, key), w)| {
            let entries: Vec<Value> = w.iter().rev().map(|(v, val)| json!([v, val])).collect();
            json!({"tid": tid, "key": key, "entries": entries})
        })
        .collect();
    let expected = json!({
        "about": "what tests/fixtures/node-v1/data must answer; written by letus-node/tests/compat.rs, do not edit",
        "requests": requests,
        "digests": digests,
        "values": values,
        "histories": histories,
    });
    let staged = tmp.path().join("fixture");
    copy_dir(&data, &staged.join("data"));
    std::fs::write(
        staged.join("expected.json"),
        serde_json::to_string_pretty(&expected).unwrap() + "\n",
    )
    .unwrap();
    check_fixture(&staged);
    copy_dir(&staged, &out);
    println!("wrote {}", out.display());
}
