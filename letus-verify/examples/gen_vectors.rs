//! Generates the JSON test vectors in `letus-verify/vectors/` from the reference model.
//!
//! `cargo run -p letus-verify --example gen_vectors --features reference` rewrites the files; they are
//! checked in, and `tests/vectors.rs` (Rust), `tools/check_vectors.py` (an independent Python implementation)
//! and the JS package all check them. Regenerating must leave them unchanged unless SPEC.md changed.

use std::path::PathBuf;

use letus_verify::export::{encode_record, encode_trailer, ExportHeader};
use letus_verify::hash::{history_leaf, value_hash};
use letus_verify::hex::encode as hex;
use letus_verify::proof::Record;
use letus_verify::reference::ReferenceTrie;
use letus_verify::snapshot::{Chunk, Manifest, ManifestBuilder, CHUNK_HEAD_LEN, MANIFEST_HEAD_LEN};
use letus_verify::{Digest, DigestChecker, Hash, HistoryTree, KeyPath, Proof, EMPTY};
use serde_json::{json, Value};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;
type Steps<'a> = Vec<(Option<&'a str>, Digest)>;

fn key(i: u32) -> Vec<u8> {
    format!("account-{i:05}").into_bytes()
}

fn val(i: u32) -> Vec<u8> {
    format!("balance:{}", i * 7919 % 100_000).into_bytes()
}

/// Finds a key (after `start`) whose path shares at least `nibbles` leading nibbles with `target`.
fn key_near(target: &KeyPath, nibbles: usize, start: u32) -> Vec<u8> {
    (start..)
        .map(|i| format!("near-{i}").into_bytes())
        .find(|k| KeyPath::of(k).lcp(target) >= nibbles)
        .expect("search is unbounded")
}

fn file(kind: &str, description: &str, cases: Vec<Value>) -> Value {
    json!({"spec": "letus-verify/1", "kind": kind, "description": description, "cases": cases})
}

fn roots() -> Vec<Value> {
    let mut sets: Vec<(&str, Pairs)> = vec![
        ("empty trie", vec![]),
        ("one key", vec![(b"alice".to_vec(), b"50".to_vec())]),
        ("one key, empty value", vec![(b"alice".to_vec(), vec![])]),
        ("empty key", vec![(vec![], b"x".to_vec())]),
        (
            "two keys",
            vec![
                (b"alice".to_vec(), b"50".to_vec()),
                (b"bob".to_vec(), b"30".to_vec()),
            ],
        ),
        ("sixteen keys", (0..16).map(|i| (key(i), val(i))).collect()),
        (
            "two hundred keys",
            (0..200).map(|i| (key(i), val(i))).collect(),
        ),
    ];
    let a = b"chain-a".to_vec();
    let b = key_near(&KeyPath::of(&a), 4, 0);
    sets.push((
        "two keys sharing four nibbles (a chain of branches)",
        vec![(a.clone(), b"1".to_vec()), (b, b"2".to_vec())],
    ));
    let c = key_near(&KeyPath::of(&a), 3, 1_000_000);
    sets.push((
        "chain plus a third key",
        vec![
            (a, b"1".to_vec()),
            (c, b"3".to_vec()),
            (b"zed".to_vec(), b"4".to_vec()),
        ],
    ));
    sets.into_iter()
        .map(|(name, pairs)| {
            let t = ReferenceTrie::from_pairs(pairs.iter().map(|(k, v)| (k, v)));
            json!({
                "name": name,
                "pairs": pairs.iter().map(|(k, v)| json!({"key": hex(k), "value": hex(v)})).collect::<Vec<_>>(),
                "paths": pairs.iter().map(|(k, _)| KeyPath::of(k).as_hash().to_hex()).collect::<Vec<_>>(),
                "value_hashes": pairs.iter().map(|(_, v)| value_hash(v).to_hex()).collect::<Vec<_>>(),
                "root": t.root().to_hex(),
            })
        })
        .collect()
}

fn claims_json(claims: &[(Vec<u8>, Option<Vec<u8>>)]) -> Value {
    claims
        .iter()
        .map(|(k, v)| json!({"key": hex(k), "value": v.as_ref().map(|v| hex(v))}))
        .collect()
}

fn proof_case(
    name: &str,
    root: &Hash,
    claims: &[(Vec<u8>, Option<Vec<u8>>)],
    proof: &Proof,
    error: Option<&str>,
) -> Value {
    proof_case_bytes(
        name,
        root,
        claims,
        &proof.encode(),
        Some(serde_json::to_value(proof.to_json_value()).expect("json")),
        error,
    )
}

fn proof_case_bytes(
    name: &str,
    root: &Hash,
    claims: &[(Vec<u8>, Option<Vec<u8>>)],
    bytes: &[u8],
    proof_json: Option<Value>,
    error: Option<&str>,
) -> Value {
    let mut c = json!({"name": name, "root": root.to_hex(), "claims": claims_json(claims), "proof": hex(bytes)});
    if let Some(j) = proof_json {
        c["proof_json"] = j;
    }
    match error {
        None => c["valid"] = json!(true),
        Some(code) => c["error"] = json!(code),
    }
    c
}

fn present(k: &[u8], v: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    (k.to_vec(), Some(v.to_vec()))
}

fn absent(k: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    (k.to_vec(), None)
}

fn proofs() -> Vec<Value> {
    let mut cases = Vec::new();
    let chain_a = b"chain-a".to_vec();
    let chain_b = key_near(&KeyPath::of(&chain_a), 4, 0);
    let mut t = ReferenceTrie::from_pairs((0..60).map(|i| (key(i), val(i))));
    t.insert(&chain_a, b"deep-a");
    t.insert(&chain_b, b"deep-b");
    let root = t.root();
    let k7 = key(7);
    let v7 = val(7);

    // Positive cases.
    for i in [0u32, 7, 33] {
        let p = t.prove(&[&key(i)]);
        cases.push(proof_case(
            &format!("inclusion of {}", String::from_utf8_lossy(&key(i))),
            &root,
            &[present(&key(i), &val(i))],
            &p,
            None,
        ));
    }
    cases.push(proof_case(
        "inclusion of a deep key below a chain of branches",
        &root,
        &[present(&chain_a, b"deep-a")],
        &t.prove(&[&chain_a]),
        None,
    ));
    // Absent keys: find one that ends on an empty slot and one that ends on another leaf.
    let mut found_empty = false;
    let mut found_other = false;
    for i in 0..10_000u32 {
        let k = format!("missing-{i}").into_bytes();
        let p = t.prove(&[&k]);
        match p.records.last() {
            Some(Record::Empty) if !found_empty => {
                found_empty = true;
                cases.push(proof_case(
                    "exclusion ending on an empty slot",
                    &root,
                    &[absent(&k)],
                    &p,
                    None,
                ));
            }
            Some(Record::OtherLeaf { .. }) if !found_other => {
                found_other = true;
                cases.push(proof_case(
                    "exclusion ending on another key's leaf",
                    &root,
                    &[absent(&k)],
                    &p,
                    None,
                ));
            }
            _ => {}
        }
        if found_empty && found_other {
            break;
        }
    }
    let batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = vec![
        present(&key(3), &val(3)),
        absent(b"missing-a"),
        present(&key(41), &val(41)),
        present(&chain_b, b"deep-b"),
        absent(b"missing-b"),
        present(&chain_a, b"deep-a"),
    ];
    let keys: Vec<&[u8]> = batch.iter().map(|(k, _)| k.as_slice()).collect();
    let multi = t.prove(&keys);
    cases.push(proof_case(
        "multi-proof of six keys, present and absent",
        &root,
        &batch,
        &multi,
        None,
    ));
    let all: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..60).map(|i| present(&key(i), &val(i))).collect();
    let all_keys: Vec<&[u8]> = all.iter().map(|(k, _)| k.as_slice()).collect();
    cases.push(proof_case(
        "multi-proof of sixty keys",
        &root,
        &all,
        &t.prove(&all_keys),
        None,
    ));

    let empty = ReferenceTrie::new();
    cases.push(proof_case(
        "exclusion in the empty trie",
        &EMPTY,
        &[absent(b"alice")],
        &empty.prove(&[b"alice"]),
        None,
    ));
    let single = ReferenceTrie::from_pairs([(b"alice", b"50")]);
    cases.push(proof_case(
        "inclusion in a one-key trie (the root is the leaf)",
        &single.root(),
        &[present(b"alice", b"50")],
        &single.prove(&[b"alice"]),
        None,
    ));
    cases.push(proof_case(
        "exclusion in a one-key trie",
        &single.root(),
        &[absent(b"bob")],
        &single.prove(&[b"bob"]),
        None,
    ));

    // Negative cases: each names the error code SPEC.md §5.3 gives first.
    let p7 = t.prove(&[&k7]);
    let b7 = p7.encode();
    cases.push(proof_case(
        "wrong value",
        &root,
        &[present(&k7, b"balance:999999")],
        &p7,
        Some("root_mismatch"),
    ));
    cases.push(proof_case(
        "wrong root",
        &value_hash(b"another root"),
        &[present(&k7, &v7)],
        &p7,
        Some("root_mismatch"),
    ));
    cases.push(proof_case(
        "present key claimed absent",
        &root,
        &[absent(&k7)],
        &p7,
        Some("expected_absent"),
    ));
    let pm = t.prove(&[b"missing-a"]);
    cases.push(proof_case(
        "absent key claimed present",
        &root,
        &[present(b"missing-a", b"1")],
        &pm,
        Some("expected_present"),
    ));
    cases.push(proof_case(
        "proof for another key",
        &root,
        &[present(&key(8), &val(8))],
        &p7,
        Some("root_mismatch"),
    ));
    let mut tampered = b7.clone();
    tampered[5] ^= 0x01; // inside the first sibling hash of the root branch
    cases.push(proof_case_bytes(
        "tampered sibling hash",
        &root,
        &[present(&k7, &v7)],
        &tampered,
        None,
        Some("root_mismatch"),
    ));
    cases.push(proof_case_bytes(
        "truncated inside a hash",
        &root,
        &[present(&k7, &v7)],
        &b7[..b7.len() - 20],
        None,
        Some("truncated"),
    ));
    cases.push(proof_case_bytes(
        "empty input",
        &root,
        &[present(&k7, &v7)],
        &[],
        None,
        Some("truncated"),
    ));
    let mut f2 = b7.clone();
    f2[0] = 2;
    cases.push(proof_case_bytes(
        "format version 2",
        &root,
        &[present(&k7, &v7)],
        &f2,
        None,
        Some("unsupported_format"),
    ));
    let mut ty = b7.clone();
    ty[1] = 0x02;
    cases.push(proof_case_bytes(
        "digest type byte",
        &root,
        &[present(&k7, &v7)],
        &ty,
        None,
        Some("wrong_type"),
    ));
    // One terminal record more than max_keys (10,000), then an unknown tag: the count fails first.
    let mut many = vec![1u8, 1];
    many.extend(std::iter::repeat_n(0u8, 10_001));
    many.push(0x07);
    cases.push(proof_case_bytes(
        "more terminal records than max_keys",
        &root,
        &[present(&k7, &v7)],
        &many,
        None,
        Some("too_large"),
    ));
    let mut unk = b7.clone();
    unk.push(0x07);
    cases.push(proof_case_bytes(
        "unknown record tag",
        &root,
        &[present(&k7, &v7)],
        &unk,
        None,
        Some("unknown_tag"),
    ));
    let mut extra = p7.clone();
    extra.records.push(Record::Empty);
    cases.push(proof_case(
        "an extra record",
        &root,
        &[present(&k7, &v7)],
        &extra,
        Some("unused_records"),
    ));
    let mut short = p7.clone();
    short.records.pop();
    cases.push(proof_case(
        "the leaf record is missing",
        &root,
        &[present(&k7, &v7)],
        &short,
        Some("proof_exhausted"),
    ));
    let mut written_empty = b7[..4].to_vec();
    written_empty.extend_from_slice(&[0u8; 32]);
    written_empty.extend_from_slice(&b7[36..]);
    cases.push(proof_case_bytes(
        "an EMPTY hash written in a branch",
        &root,
        &[present(&k7, &v7)],
        &written_empty,
        None,
        Some("non_canonical"),
    ));
    let mut wide = single.prove(&[b"alice"]);
    wide.records.insert(
        0,
        Record::Branch {
            mask: 0,
            hashes: vec![],
        },
    );
    let wrapped_root =
        letus_verify::fold::fold_single(KeyPath::of(b"alice").nibble(0), &single.root());
    cases.push(proof_case(
        "a branch whose only child is a leaf",
        &wrapped_root,
        &[present(b"alice", b"50")],
        &wide,
        Some("non_canonical"),
    ));
    // SPEC.md §5.3: a branch's `units` checks run after its children's walks, so an error below it comes first
    // (here the empty branch would be non_canonical, but its child already fails).
    let mut hollow = wide.clone();
    hollow.records = vec![
        Record::Branch {
            mask: 0,
            hashes: vec![],
        },
        Record::Empty,
    ];
    cases.push(proof_case(
        "an error below a branch comes before the branch's own checks",
        &wrapped_root,
        &[present(b"alice", b"50")],
        &hollow,
        Some("expected_present"),
    ));
    if let Some(Record::Branch { mask, hashes }) = p7.records.first() {
        let mut bad = p7.clone();
        bad.records[0] = Record::Branch {
            mask: mask | 0x10,
            hashes: [hashes.clone(), vec![value_hash(b"x")]].concat(),
        };
        cases.push(proof_case(
            "mask bit beyond the frontier",
            &root,
            &[present(&k7, &v7)],
            &bad,
            Some("non_canonical"),
        ));
    }
    cases.push(proof_case(
        "the same key claimed twice",
        &root,
        &[present(&k7, &v7), present(&k7, &v7)],
        &p7,
        Some("duplicate_key"),
    ));
    cases.push(proof_case(
        "no claims",
        &root,
        &[],
        &p7,
        Some("too_many_keys"),
    ));
    let alice = KeyPath::of(b"alice");
    let self_leaf = Proof {
        records: vec![Record::OtherLeaf {
            path: alice,
            value_hash: value_hash(b"50"),
        }],
    };
    cases.push(proof_case(
        "other leaf that is the claimed key itself",
        &single.root(),
        &[absent(b"alice")],
        &self_leaf,
        Some("other_leaf_mismatch"),
    ));
    // A two-key trie whose root is a branch: offer, as proof of absence, a leaf from another child.
    let two = ReferenceTrie::from_pairs([(&b"alice"[..], &b"50"[..]), (&b"bob"[..], &b"30"[..])]);
    let mut off_path = None;
    for i in 0..1000u32 {
        let k = format!("probe-{i}").into_bytes();
        let p = two.prove(&[&k]);
        if matches!(p.records.last(), Some(Record::Empty))
            && KeyPath::of(&k).nibble(0) != alice.nibble(0)
        {
            off_path = Some((k, p));
            break;
        }
    }
    if let Some((k, mut p)) = off_path {
        if let Some(last) = p.records.last_mut() {
            *last = Record::OtherLeaf {
                path: alice,
                value_hash: value_hash(b"50"),
            };
        }
        cases.push(proof_case(
            "other leaf not on the claimed key's path",
            &two.root(),
            &[absent(&k)],
            &p,
            Some("other_leaf_mismatch"),
        ));
    }
    let mut deep = Proof::default();
    for _ in 0..65 {
        deep.records.push(Record::Branch {
            mask: 0,
            hashes: vec![],
        });
    }
    deep.records.push(Record::Leaf);
    cases.push(proof_case(
        "65 nested branches",
        &root,
        &[present(b"alice", b"50")],
        &deep,
        Some("depth_exceeded"),
    ));
    let huge_key = vec![0x61u8; 65_536];
    cases.push(proof_case(
        "a key above max_key_bytes",
        &root,
        &[present(&huge_key, b"1")],
        &p7,
        Some("too_large"),
    ));
    cases.push(proof_case(
        "two present claims sharing one leaf",
        &single.root(),
        &[
            present(b"alice", b"50"),
            present(&key_near(&alice, 1, 0), b"1"),
        ],
        &single.prove(&[b"alice"]),
        Some("expected_absent"),
    ));

    // JSON-only errors: the binary proof is valid, its JSON form is not.
    let pj = serde_json::to_value(p7.to_json_value()).expect("json");
    let mut j1 = pj.clone();
    j1["format"] = json!(2);
    let mut j2 = pj.clone();
    j2["records"][0]["t"] = json!("twig");
    let mut j3 = pj.clone();
    j3["records"][0]["hashes"]
        .as_array_mut()
        .expect("array")
        .pop();
    let mut j4 = pj.clone();
    j4["records"][0]["hashes"][0] = json!("zz");
    let mut j5 = pj.clone();
    j5["records"][0]["mask"] = json!(256);
    // SPEC.md §5.5: fields of the wrong JSON type are malformed, and fields the form does not define are ignored.
    let mut j7 = pj.clone();
    j7["format"] = json!("1");
    let mut j8 = pj.clone();
    j8["records"][0]["mask"] = json!(true);
    let mut j9 = pj.clone();
    j9["records"][0] = json!("branch");
    let mut j10 = pj.clone();
    if let Some(r) = j10["records"][0].as_object_mut() {
        r.remove("t");
    }
    // The order of SPEC.md §5.5: `format` before `records`, each record before the next.
    let mut j11 = pj.clone();
    j11["format"] = json!(2);
    j11["records"] = json!("not an array");
    let mut j13 = pj.clone();
    j13["format"] = json!(-1);
    let mut j12 = pj.clone();
    j12["records"][0]["t"] = json!("twig");
    j12["records"].as_array_mut().expect("array").push(json!(5));
    // Fields a record's type does not use are not looked at, whatever their JSON type.
    let mut unused = pj.clone();
    for r in unused["records"].as_array_mut().expect("array") {
        if r["t"] == "leaf" {
            r["mask"] = json!("x");
            r["hashes"] = json!(5);
            r["path"] = json!(true);
        }
    }
    let mut c = proof_case_bytes(
        "json fields a record's type does not use, of any JSON type",
        &root,
        &[present(&k7, &v7)],
        &b7,
        Some(unused),
        None,
    );
    c["json_reencodes"] = json!(false);
    cases.push(c);
    let mut extra = pj.clone();
    extra["comment"] = json!("not part of the form");
    extra["records"][0]["note"] = json!(1);
    let mut c = proof_case_bytes(
        "json with fields the form does not define",
        &root,
        &[present(&k7, &v7)],
        &b7,
        Some(extra),
        None,
    );
    c["json_reencodes"] = json!(false);
    cases.push(c);
    // Uppercase hex is accepted (SPEC.md §1).
    let mut upper = pj.clone();
    upper["records"][0]["hashes"][0] = json!(upper["records"][0]["hashes"][0]
        .as_str()
        .expect("hex")
        .to_uppercase());
    let mut c = proof_case_bytes(
        "json with uppercase hex",
        &root,
        &[present(&k7, &v7)],
        &b7,
        Some(upper),
        None,
    );
    c["json_reencodes"] = json!(false);
    cases.push(c);
    // Uppercase hex is accepted in byte strings too (SPEC.md §1): the claim's key and value.
    let mut c = proof_case(
        "claims in uppercase hex",
        &root,
        &[present(&k7, &v7)],
        &p7,
        None,
    );
    c["claims"][0]["key"] = json!(hex(&k7).to_uppercase());
    c["claims"][0]["value"] = json!(hex(&v7).to_uppercase());
    cases.push(c);
    let excl = t.prove(&[b"missing-a"]);
    let mut j6 = serde_json::to_value(excl.to_json_value()).expect("json");
    let last = j6["records"].as_array().map_or(0, |a| a.len()) - 1;
    if j6["records"][last]["t"] == "other_leaf" {
        j6["records"][last]
            .as_object_mut()
            .expect("object")
            .remove("value_hash");
        let mut c = proof_case_bytes(
            "json other_leaf without value_hash",
            &root,
            &[absent(b"missing-a")],
            &excl.encode(),
            Some(j6),
            None,
        );
        c["json_error"] = json!("malformed");
        cases.push(c);
    }
    cases.push(proof_case_bytes(
        "one byte",
        &root,
        &[present(&k7, &v7)],
        &[1],
        None,
        Some("truncated"),
    ));
    for (name, j, code) in [
        ("json format 2", j1, "unsupported_format"),
        ("json mask above 255", j5, "malformed"),
        ("json unknown record type", j2, "unknown_tag"),
        ("json hash count differs from the mask", j3, "malformed"),
        ("json bad hex", j4, "malformed"),
        ("json format as a string", j7, "malformed"),
        ("json mask of the wrong JSON type", j8, "malformed"),
        ("json record that is not an object", j9, "malformed"),
        ("json record without t", j10, "malformed"),
        ("json format -1", j13, "unsupported_format"),
        (
            "json format 2 with records not an array",
            j11,
            "unsupported_format",
        ),
        (
            "json unknown record type before a record that is not an object",
            j12,
            "unknown_tag",
        ),
    ] {
        let mut c = proof_case_bytes(name, &root, &[present(&k7, &v7)], &b7, Some(j), None);
        c["json_error"] = json!(code);
        cases.push(c);
    }
    cases
}

fn entries() -> Vec<(u32, u64, Hash)> {
    // Versions with gaps: a store commits at the versions its chain gives it.
    [1u64, 2, 3, 5, 8, 9, 10, 14, 20, 21, 22, 30, 31]
        .iter()
        .map(|&v| (0u32, v, value_hash(format!("state-{v}").as_bytes())))
        .collect()
}

fn entry_json(e: &(u32, u64, Hash)) -> Value {
    json!({"tid": e.0, "version": e.1, "root": e.2.to_hex()})
}

fn history() -> Vec<Value> {
    let es = entries();
    let mut tree = HistoryTree::new();
    let mut roots = Vec::new();
    for e in &es {
        tree.push(history_leaf(e.0, e.1, &e.2));
        roots.push(tree.root().to_hex());
    }
    let n = tree.len();
    let mut cases = vec![
        json!({"name": "roots after each append", "type": "roots", "entries": es.iter().map(entry_json).collect::<Vec<_>>(), "roots": roots}),
    ];
    let incl = |name: &str,
                size: u64,
                root: &Hash,
                entry: &(u32, u64, Hash),
                proof: &[u8],
                error: Option<&str>| {
        let mut c = json!({"name": name, "type": "inclusion", "history_root": root.to_hex(), "tree_size": size, "entry": entry_json(entry), "proof": hex(proof)});
        match error {
            None => c["valid"] = json!(true),
            Some(e) => c["error"] = json!(e),
        }
        c
    };
    for (i, size) in [
        (0u64, 1u64),
        (0, 13),
        (4, 13),
        (12, 13),
        (5, 8),
        (7, 8),
        (2, 7),
    ] {
        let r = tree.root_at(size).expect("size");
        let p = tree
            .inclusion_proof(i, size)
            .expect("proof")
            .encode()
            .expect("encode");
        cases.push(incl(
            &format!("inclusion of entry {i} in {size}"),
            size,
            &r,
            &es[i as usize],
            &p,
            None,
        ));
    }
    let r = tree.root();
    let p = tree.inclusion_proof(4, n).expect("proof");
    let pb = p.encode().expect("encode");
    cases.push(incl(
        "wrong entry",
        n,
        &r,
        &es[5],
        &pb,
        Some("history_root_mismatch"),
    ));
    // SPEC.md §8.2: the position is the proof's own `index`; rewriting it does not move the proof to that entry.
    let mut moved = p.clone();
    moved.index = 5;
    cases.push(incl(
        "index rewritten to another entry",
        n,
        &r,
        &es[5],
        &moved.encode().expect("encode"),
        Some("history_root_mismatch"),
    ));
    cases.push(incl(
        "proof for another tree size",
        n - 1,
        &tree.root_at(n - 1).expect("size"),
        &es[4],
        &pb,
        Some("history_size_mismatch"),
    ));
    let mut beyond = p.clone();
    beyond.index = n;
    cases.push(incl(
        "index beyond the tree",
        n,
        &r,
        &es[4],
        &beyond.encode().expect("encode"),
        Some("history_index_out_of_range"),
    ));
    let mut longer = p.clone();
    longer.hashes.push(value_hash(b"x"));
    cases.push(incl(
        "one hash too many",
        n,
        &r,
        &es[4],
        &longer.encode().expect("encode"),
        Some("history_proof_length"),
    ));
    let mut shorter = p.clone();
    shorter.hashes.pop();
    cases.push(incl(
        "one hash too few",
        n,
        &r,
        &es[4],
        &shorter.encode().expect("encode"),
        Some("history_proof_length"),
    ));
    let mut over = pb[..18].to_vec();
    over.push(129);
    cases.push(incl(
        "hash count above 128",
        n,
        &r,
        &es[4],
        &over,
        Some("too_large"),
    ));
    cases.push(incl(
        "truncated",
        n,
        &r,
        &es[4],
        &pb[..pb.len() - 1],
        Some("truncated"),
    ));
    let mut wrong_type = pb.clone();
    wrong_type[1] = 0x04;
    cases.push(incl(
        "consistency type byte",
        n,
        &r,
        &es[4],
        &wrong_type,
        Some("wrong_type"),
    ));
    cases.push(incl("one byte", n, &r, &es[4], &[1], Some("truncated")));
    cases.push(incl(
        "trailing byte",
        n,
        &r,
        &es[4],
        &[pb.clone(), vec![0]].concat(),
        Some("trailing_data"),
    ));

    let cons = |name: &str,
                old: u64,
                old_root: &Hash,
                new: u64,
                new_root: &Hash,
                proof: &[u8],
                error: Option<&str>| {
        let mut c = json!({"name": name, "type": "consistency", "old_size": old, "old_root": old_root.to_hex(), "new_size": new, "new_root": new_root.to_hex(), "proof": hex(proof)});
        match error {
            None => c["valid"] = json!(true),
            Some(e) => c["error"] = json!(e),
        }
        c
    };
    for (m, size) in [
        (1u64, 13u64),
        (4, 13),
        (7, 13),
        (8, 13),
        (12, 13),
        (13, 13),
        (0, 13),
        (3, 7),
        (4, 8),
    ] {
        let p = tree
            .consistency_proof(m, size)
            .expect("proof")
            .encode()
            .expect("encode");
        cases.push(cons(
            &format!("consistency {m} -> {size}"),
            m,
            &tree.root_at(m).expect("m"),
            size,
            &tree.root_at(size).expect("n"),
            &p,
            None,
        ));
    }
    // SPEC.md §8.3: from the empty history, old_root is not examined.
    cases.push(cons(
        "consistency 0 -> 13 whatever old_root says",
        0,
        &value_hash(b"not the empty history"),
        n,
        &tree.root(),
        &tree
            .consistency_proof(0, n)
            .expect("proof")
            .encode()
            .expect("encode"),
        None,
    ));
    let p = tree.consistency_proof(7, n).expect("proof");
    let pb = p.encode().expect("encode");
    cases.push(cons(
        "forked old history",
        7,
        &value_hash(b"fork"),
        n,
        &r,
        &pb,
        Some("history_root_mismatch"),
    ));
    cases.push(cons(
        "new history rewritten",
        7,
        &tree.root_at(7).expect("7"),
        n,
        &value_hash(b"rewritten"),
        &pb,
        Some("history_root_mismatch"),
    ));
    let mut back = p.clone();
    back.old_size = n;
    back.new_size = 7;
    cases.push(cons(
        "old longer than new",
        n,
        &r,
        7,
        &tree.root_at(7).expect("7"),
        &back.encode().expect("encode"),
        Some("history_size_mismatch"),
    ));
    let mut longer = p.clone();
    longer.hashes.push(value_hash(b"x"));
    cases.push(cons(
        "one hash too many",
        7,
        &tree.root_at(7).expect("7"),
        n,
        &r,
        &longer.encode().expect("encode"),
        Some("history_proof_length"),
    ));
    let mut over = pb[..18].to_vec();
    over.push(200);
    cases.push(cons(
        "hash count above 128",
        7,
        &tree.root_at(7).expect("7"),
        n,
        &r,
        &over,
        Some("too_large"),
    ));
    cases.push(cons(
        "trailing byte",
        7,
        &tree.root_at(7).expect("7"),
        n,
        &r,
        &[pb.clone(), vec![0]].concat(),
        Some("trailing_data"),
    ));
    cases
}

fn digest_json(d: &Digest) -> Value {
    serde_json::to_value(d).expect("json")
}

fn digests() -> Vec<Value> {
    let es = entries();
    let mut tree = HistoryTree::new();
    let mut ds = Vec::new();
    for e in &es {
        tree.push(history_leaf(e.0, e.1, &e.2));
        ds.push(Digest {
            tid: e.0,
            version: e.1,
            root: e.2,
            history_len: tree.len(),
            history_root: tree.root(),
        });
    }
    let mut cases = Vec::new();
    for d in [&ds[0], &ds[6], &ds[12]] {
        cases.push(json!({"name": format!("digest at version {}", d.version), "type": "encoding", "digest": digest_json(d), "binary": hex(&d.encode())}));
    }
    let other = Digest {
        tid: 7,
        version: u64::MAX,
        ..ds[3]
    };
    cases.push(json!({"name": "trie 7 at the largest version", "type": "encoding", "digest": digest_json(&other), "binary": hex(&other.encode())}));
    let b = ds[2].encode();
    let mut zero_len = Digest {
        history_len: 0,
        ..ds[2]
    }
    .encode();
    let decode = |name: &str, bytes: &[u8], code: &str| json!({"name": name, "type": "decode", "binary": hex(bytes), "error": code});
    cases.push(decode("truncated", &b[..85], "truncated"));
    cases.push(decode("one byte", &b[..1], "truncated"));
    cases.push(decode(
        "trailing byte",
        &[b.clone(), vec![0]].concat(),
        "trailing_data",
    ));
    cases.push(decode("history_len 0", &zero_len, "malformed"));
    zero_len[0] = 9;
    cases.push(decode("format 9", &zero_len, "unsupported_format"));
    let mut ty = b.clone();
    ty[1] = 0x01;
    cases.push(decode("proof type byte", &ty, "wrong_type"));
    // SPEC.md §7: the JSON form is decoded with the same rules: every field present, of its JSON type and range.
    let good = digest_json(&ds[3]);
    let json_bad = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut d = good.clone();
        edit(&mut d);
        json!({"name": name, "type": "json_decode", "digest": d, "error": "malformed"})
    };
    cases.push(json_bad("json history_len 0", &|d| {
        d["history_len"] = json!(0)
    }));
    cases.push(json_bad("json root of 63 hex digits", &|d| {
        d["root"] = json!(d["root"].as_str().expect("hex")[1..].to_string())
    }));
    cases.push(json_bad("json without history_root", &|d| {
        if let Some(o) = d.as_object_mut() {
            o.remove("history_root");
        }
    }));
    cases.push(json_bad("json tid above u32", &|d| {
        d["tid"] = json!(1u64 << 32)
    }));
    cases.push(json_bad("json negative version", &|d| {
        d["version"] = json!(-1)
    }));
    cases.push(json_bad("json fractional version", &|d| {
        d["version"] = json!(1.5)
    }));
    cases.push(json_bad("json digest as an array of its fields", &|d| {
        *d = json!([
            d["tid"],
            d["version"],
            d["root"],
            d["history_len"],
            d["history_root"]
        ])
    }));

    // Checker scenarios: each step's expected report (SPEC.md §7.1).
    let forked = |d: &Digest, tag: &[u8]| Digest {
        root: value_hash(tag),
        history_root: value_hash(&[tag, b"h"].concat()),
        ..*d
    };
    let scenarios: Vec<(&str, Steps)> = vec![
        (
            "two nodes agree",
            vec![
                (Some("node-a"), ds[0]),
                (Some("node-b"), ds[0]),
                (Some("node-a"), ds[1]),
                (Some("node-b"), ds[1]),
            ],
        ),
        (
            "fork at one version",
            vec![
                (Some("node-a"), ds[4]),
                (Some("node-b"), forked(&ds[4], b"evil")),
            ],
        ),
        (
            "same history length, different history",
            vec![
                (Some("node-a"), ds[4]),
                (
                    Some("node-b"),
                    Digest {
                        version: ds[4].version + 1,
                        ..forked(&ds[4], b"x")
                    },
                ),
            ],
        ),
        (
            "rollback",
            vec![
                (Some("node-a"), ds[5]),
                (Some("node-a"), ds[6]),
                (Some("node-a"), ds[3]),
            ],
        ),
        (
            "conflict with a checkpoint",
            vec![
                (None, ds[7]),
                (Some("node-a"), ds[7]),
                (Some("node-b"), forked(&ds[7], b"evil")),
            ],
        ),
        (
            "checkpoint arrives after a bad report",
            vec![(Some("node-b"), forked(&ds[7], b"evil")), (None, ds[7])],
        ),
        (
            // SPEC.md §7.1: a checkpoint is checkpoint_conflict only when it conflicts with something.
            "a checkpoint that conflicts with nothing is new",
            vec![
                (None, ds[2]),
                (Some("node-a"), ds[2]),
                (None, ds[3]),
                (Some("node-a"), ds[4]),
            ],
        ),
        (
            "another source going back is not a rollback",
            vec![(Some("node-a"), ds[8]), (Some("node-b"), ds[2])],
        ),
    ];
    for (name, steps) in scenarios {
        let mut checker = DigestChecker::new();
        let steps: Vec<Value> = steps
            .iter()
            .map(|(src, d)| {
                let report = match src {
                    Some(s) => checker.observe(s, d),
                    None => checker.add_checkpoint(d),
                };
                json!({"source": src, "digest": digest_json(d), "report": report.code()})
            })
            .collect();
        cases.push(json!({"name": name, "type": "checker", "steps": steps}));
    }
    cases
}

fn export_bytes(t: &ReferenceTrie, tid: u32, version: u64) -> Vec<u8> {
    let mut out = ExportHeader {
        tid,
        version,
        root: t.root(),
    }
    .encode();
    for (k, v) in t.pairs() {
        encode_record(k, v, &mut out);
    }
    out.extend_from_slice(&encode_trailer(t.len() as u64));
    out
}

fn exports() -> Vec<Value> {
    let case = |name: &str, stream: &[u8], trusted: &Hash, result: Result<u64, &str>| {
        let mut c = json!({"name": name, "stream": hex(stream), "trusted_root": trusted.to_hex()});
        match result {
            Ok(n) => {
                c["valid"] = json!(true);
                c["records"] = json!(n);
            }
            Err(e) => c["error"] = json!(e),
        }
        c
    };
    let t = ReferenceTrie::from_pairs((0..40).map(|i| (key(i), val(i))));
    let s = export_bytes(&t, 0, 12);
    let empty = ReferenceTrie::new();
    let one = ReferenceTrie::from_pairs([(b"alice", b"")]);
    let mut cases = vec![
        case("forty pairs", &s, &t.root(), Ok(40)),
        case("empty trie", &export_bytes(&empty, 3, 1), &EMPTY, Ok(0)),
        case(
            "one pair with an empty value",
            &export_bytes(&one, 0, 2),
            &one.root(),
            Ok(1),
        ),
        case(
            "untrusted root in the header is not enough",
            &s,
            &value_hash(b"trusted"),
            Err("root_mismatch"),
        ),
    ];
    let mut magic = s.clone();
    magic[0] = b'X';
    cases.push(case("bad magic", &magic, &t.root(), Err("bad_magic")));
    let mut fmt = s.clone();
    fmt[8] = 2;
    cases.push(case("format 2", &fmt, &t.root(), Err("unsupported_format")));
    cases.push(case(
        "format 2 in a stream cut right after it",
        &fmt[..9],
        &t.root(),
        Err("unsupported_format"),
    ));
    let mut tag = s.clone();
    tag[letus_verify::export::HEADER_LEN] = 0x05;
    cases.push(case(
        "unknown record tag",
        &tag,
        &t.root(),
        Err("unknown_tag"),
    ));
    let mut count = s.clone();
    let last = count.len() - 8;
    count[last] ^= 1;
    cases.push(case(
        "trailer count off by one",
        &count,
        &t.root(),
        Err("count_mismatch"),
    ));
    cases.push(case(
        "byte after the trailer",
        &[s.clone(), vec![0]].concat(),
        &t.root(),
        Err("trailing_data"),
    ));
    cases.push(case(
        "stream cut before the trailer",
        &s[..s.len() - 9],
        &t.root(),
        Err("truncated"),
    ));
    // Records in insertion order rather than path order.
    let mut unsorted = ExportHeader {
        tid: 0,
        version: 12,
        root: t.root(),
    }
    .encode();
    let mut pairs: Vec<(&[u8], &[u8])> = t.pairs().collect();
    pairs.swap(0, 1);
    for (k, v) in &pairs {
        encode_record(k, v, &mut unsorted);
    }
    unsorted.extend_from_slice(&encode_trailer(pairs.len() as u64));
    cases.push(case(
        "records out of path order",
        &unsorted,
        &t.root(),
        Err("out_of_order"),
    ));
    let mut dup = ExportHeader {
        tid: 0,
        version: 12,
        root: one.root(),
    }
    .encode();
    encode_record(b"alice", b"", &mut dup);
    encode_record(b"alice", b"", &mut dup);
    dup.extend_from_slice(&encode_trailer(2));
    cases.push(case(
        "the same key twice",
        &dup,
        &one.root(),
        Err("duplicate_key"),
    ));
    let mut big = ExportHeader {
        tid: 0,
        version: 1,
        root: EMPTY,
    }
    .encode();
    big.push(0x01);
    big.extend_from_slice(&70_000u32.to_le_bytes());
    big.extend_from_slice(&0u32.to_le_bytes());
    cases.push(case(
        "key length above the limit",
        &big,
        &EMPTY,
        Err("too_large"),
    ));
    let mut big_value = ExportHeader {
        tid: 0,
        version: 1,
        root: EMPTY,
    }
    .encode();
    big_value.push(0x01);
    big_value.extend_from_slice(&5u32.to_le_bytes());
    big_value.extend_from_slice(&(16 * 1024 * 1024 + 1u32).to_le_bytes());
    cases.push(case(
        "value length above the limit",
        &big_value,
        &EMPTY,
        Err("too_large"),
    ));
    cases.push(case(
        "shorter than the magic",
        b"LETUS",
        &EMPTY,
        Err("truncated"),
    ));
    cases.push(case("not an export", b"LEX", &EMPTY, Err("bad_magic")));
    cases
}

/// The manifest of `t` with entries of at most `max` pairs below depth `top`, and each entry's pairs.
fn snapshot_of(
    t: &ReferenceTrie,
    tid: u32,
    version: u64,
    top: u8,
    max: u64,
) -> (Manifest, Vec<Pairs>) {
    let mut b = ManifestBuilder::new(top, max);
    for (k, v) in t.pairs() {
        b.push_pair(k, v)
            .expect("reference pairs come in path order");
    }
    let items = b.finish();
    let chunks = items
        .iter()
        .map(|it| {
            t.pairs()
                .filter(|(k, _)| it.covers(&KeyPath::of(k)))
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect()
        })
        .collect();
    let m = Manifest {
        tid,
        version,
        root: t.root(),
        items,
    };
    (m, chunks)
}

fn chunk_bytes(m: &Manifest, index: u32, pairs: &Pairs) -> Vec<u8> {
    let it = m.items[index as usize];
    Chunk {
        tid: m.tid,
        version: m.version,
        index,
        depth: it.depth,
        prefix: it.prefix,
        pairs: pairs.clone(),
    }
    .encode()
}

fn snapshots() -> Vec<Value> {
    let t = ReferenceTrie::from_pairs((0..60).map(|i| (key(i), val(i))));
    let (m, chunks) = snapshot_of(&t, 2, 30, 1, 5);
    let root = t.root();
    let head = |name: &str, typ: &str, m: &[u8], trusted: &Hash| {
        json!({"name": name, "type": typ, "tid": 2, "version": 30, "trusted_root": trusted.to_hex(),
               "manifest": hex(m)})
    };
    let manifest = |name: &str, bytes: &[u8], trusted: &Hash, r: Result<u64, &str>| {
        let mut c = head(name, "manifest", bytes, trusted);
        match r {
            Ok(n) => {
                c["valid"] = json!(true);
                c["pairs"] = json!(n);
            }
            Err(e) => c["error"] = json!(e),
        }
        c
    };
    let enc = m.encode();
    let mut cases = vec![manifest(
        "sixty pairs, entries of at most five pairs below depth 1",
        &enc,
        &root,
        Ok(60),
    )];
    let (whole, _) = snapshot_of(&t, 2, 30, 0, 1000);
    cases.push(manifest(
        "one entry holding everything",
        &whole.encode(),
        &root,
        Ok(60),
    ));
    let (deep, _) = snapshot_of(&t, 2, 30, 3, 1000);
    cases.push(manifest(
        "entries at depth 3, most of them single pairs listed below their leaves",
        &deep.encode(),
        &root,
        Ok(60),
    ));
    let empty = Manifest {
        tid: 2,
        version: 30,
        root: EMPTY,
        items: vec![],
    };
    cases.push(manifest("the empty trie", &empty.encode(), &EMPTY, Ok(0)));
    cases.push(manifest(
        "untrusted root in the header is not enough",
        &enc,
        &value_hash(b"x"),
        Err("root_mismatch"),
    ));
    let mut other = m.clone();
    other.version = 31;
    cases.push(manifest(
        "another version",
        &other.encode(),
        &root,
        Err("wrong_snapshot"),
    ));
    let mut swapped = m.clone();
    swapped.items.swap(1, 2);
    cases.push(manifest(
        "entries out of path order",
        &swapped.encode(),
        &root,
        Err("out_of_order"),
    ));
    let mut nested = m.clone();
    let mut inner = nested.items[1];
    inner.depth += 1;
    nested.items.insert(2, inner);
    cases.push(manifest(
        "an entry inside the previous one",
        &nested.encode(),
        &root,
        Err("out_of_order"),
    ));
    let mut dropped = m.clone();
    dropped.items.remove(4);
    cases.push(manifest(
        "an entry left out",
        &dropped.encode(),
        &root,
        Err("root_mismatch"),
    ));
    let mut flipped = m.clone();
    flipped.items[0].hash.0[31] ^= 1;
    cases.push(manifest(
        "an entry's hash changed",
        &flipped.encode(),
        &root,
        Err("root_mismatch"),
    ));
    let mut empty = m.clone();
    empty.items[0].hash = EMPTY;
    cases.push(manifest(
        "an entry with the empty hash",
        &empty.encode(),
        &root,
        Err("non_canonical"),
    ));
    let mut zero = enc.clone();
    let count_at = MANIFEST_HEAD_LEN + 1 + 32;
    zero[count_at..count_at + 8].copy_from_slice(&0u64.to_le_bytes());
    cases.push(manifest(
        "an entry with no pairs",
        &zero,
        &root,
        Err("malformed"),
    ));
    let mut deep_byte = enc.clone();
    deep_byte[MANIFEST_HEAD_LEN] = 65;
    cases.push(manifest(
        "an entry at depth 65",
        &deep_byte,
        &root,
        Err("malformed"),
    ));
    let mut nibble = enc.clone();
    nibble[MANIFEST_HEAD_LEN + 1 + 31] = 1;
    cases.push(manifest(
        "a non-zero nibble after an entry's depth",
        &nibble,
        &root,
        Err("non_canonical"),
    ));
    cases.push(manifest(
        "cut inside an entry",
        &enc[..enc.len() - 1],
        &root,
        Err("truncated"),
    ));
    cases.push(manifest(
        "a byte after the last entry",
        &[enc.clone(), vec![0]].concat(),
        &root,
        Err("trailing_data"),
    ));
    let mut many = enc[..MANIFEST_HEAD_LEN].to_vec();
    many[MANIFEST_HEAD_LEN - 4..].copy_from_slice(&262_145u32.to_le_bytes());
    cases.push(manifest(
        "more entries than the limit",
        &many,
        &root,
        Err("too_large"),
    ));
    let mut typ = enc.clone();
    typ[1] = 0x06;
    cases.push(manifest(
        "a chunk where a manifest was expected",
        &typ,
        &root,
        Err("wrong_type"),
    ));

    let chunk = |name: &str, index: u32, bytes: &[u8], r: Result<u64, &str>| {
        let mut c = head(name, "chunk", &enc, &root);
        c["index"] = json!(index);
        c["chunk"] = json!(hex(bytes));
        match r {
            Ok(n) => {
                c["valid"] = json!(true);
                c["records"] = json!(n);
            }
            Err(e) => c["error"] = json!(e),
        }
        c
    };
    let i = chunks
        .iter()
        .position(|c| c.len() >= 3)
        .expect("an entry of three pairs or more") as u32;
    let good = &chunks[i as usize];
    let single = chunks
        .iter()
        .position(|c| c.len() == 1)
        .expect("an entry of one pair") as u32;
    cases.push(chunk(
        "a chunk of several pairs",
        i,
        &chunk_bytes(&m, i, good),
        Ok(good.len() as u64),
    ));
    cases.push(chunk(
        "a chunk of one pair",
        single,
        &chunk_bytes(&m, single, &chunks[single as usize]),
        Ok(1),
    ));
    cases.push(chunk(
        "checked as another entry",
        i + 1,
        &chunk_bytes(&m, i, good),
        Err("chunk_mismatch"),
    ));
    let mut wrong_index = chunk_bytes(&m, i, good);
    wrong_index[14..18].copy_from_slice(&(i + 1).to_le_bytes());
    cases.push(chunk(
        "another entry's chunk",
        i,
        &wrong_index,
        Err("chunk_mismatch"),
    ));
    cases.push(chunk(
        "an index beyond the manifest",
        m.items.len() as u32,
        &chunk_bytes(&m, i, good),
        Err("chunk_mismatch"),
    ));
    let mut other_version = chunk_bytes(&m, i, good);
    other_version[6..14].copy_from_slice(&31u64.to_le_bytes());
    cases.push(chunk(
        "another version",
        i,
        &other_version,
        Err("wrong_snapshot"),
    ));
    let mut changed = good.clone();
    changed[0].1.push(b'!');
    cases.push(chunk(
        "a value changed",
        i,
        &chunk_bytes(&m, i, &changed),
        Err("root_mismatch"),
    ));
    let mut missing = good.clone();
    missing.pop();
    cases.push(chunk(
        "a pair left out",
        i,
        &chunk_bytes(&m, i, &missing),
        Err("root_mismatch"),
    ));
    let mut swapped = good.clone();
    swapped.swap(0, 1);
    cases.push(chunk(
        "pairs out of path order",
        i,
        &chunk_bytes(&m, i, &swapped),
        Err("out_of_order"),
    ));
    let mut dup = good.clone();
    dup.insert(1, dup[0].clone());
    cases.push(chunk(
        "the same key twice",
        i,
        &chunk_bytes(&m, i, &dup),
        Err("duplicate_key"),
    ));
    let mut outside = good.clone();
    let stranger = (0..60)
        .map(|j| (key(j), val(j)))
        .find(|(k, _)| !m.items[i as usize].covers(&KeyPath::of(k)))
        .expect("a key of another entry");
    outside[0] = stranger;
    cases.push(chunk(
        "a pair of another subtree",
        i,
        &chunk_bytes(&m, i, &outside),
        Err("outside_chunk"),
    ));
    let gb = chunk_bytes(&m, i, good);
    cases.push(chunk(
        "cut inside the last record",
        i,
        &gb[..gb.len() - 1],
        Err("truncated"),
    ));
    cases.push(chunk(
        "a byte after the last record",
        i,
        &[gb.clone(), vec![0]].concat(),
        Err("trailing_data"),
    ));
    let mut big = gb[..CHUNK_HEAD_LEN].to_vec();
    big.extend_from_slice(&70_000u32.to_le_bytes());
    big.extend_from_slice(&0u32.to_le_bytes());
    cases.push(chunk(
        "a key length above the limit",
        i,
        &big,
        Err("too_large"),
    ));
    // The manifest miscounts an entry: the root still verifies (counts above one are not hashed), the chunk's
    // pairs verify, and the count check names the manifest.
    let mut miscount = m.clone();
    miscount.items[i as usize].count += 1;
    let mut c = chunk(
        "the manifest miscounts the entry",
        i,
        &chunk_bytes(&m, i, good),
        Err("count_mismatch"),
    );
    c["manifest"] = json!(hex(&miscount.encode()));
    cases.push(c);
    cases
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors");
    std::fs::create_dir_all(&dir).expect("create vectors/");
    let files = [
        (
            "roots",
            "Root commitments of key/value sets (SPEC.md §3)",
            roots(),
        ),
        (
            "proofs",
            "State proofs: inclusion, exclusion, multi-proofs and rejected proofs (SPEC.md §5)",
            proofs(),
        ),
        (
            "history",
            "History roots, inclusion and consistency proofs (SPEC.md §8)",
            history(),
        ),
        (
            "digests",
            "Digest encodings and digest-checker scenarios (SPEC.md §7)",
            digests(),
        ),
        (
            "exports",
            "State export streams for full verification (SPEC.md §9)",
            exports(),
        ),
        (
            "snapshots",
            "Snapshot manifests and chunks (SPEC.md §12)",
            snapshots(),
        ),
    ];
    for (kind, description, cases) in files {
        let path = dir.join(format!("{kind}.json"));
        let n = cases.len();
        let text =
            serde_json::to_string_pretty(&file(kind, description, cases)).expect("json") + "\n";
        std::fs::write(&path, text).expect("write vectors");
        println!("{}: {n} cases", path.display());
    }
}
