//! Runs every test vector in `vectors/` through this crate (the Python and JS implementations run the same
//! files). Positive cases must reproduce; negative cases must fail with exactly the named error code.

use letus_verify::export::verify_export;
use letus_verify::hash::{history_leaf, value_hash};
use letus_verify::hex::decode as unhex;
use letus_verify::history::{mth, ConsistencyProof, InclusionProof};
use letus_verify::proof_json::ProofJson;
use letus_verify::reference::ReferenceTrie;
use letus_verify::{
    verify_multi_proof, Claim, Digest, DigestChecker, FullVerifier, Hash, KeyPath, Limits, Proof,
};
use serde_json::Value;

fn load(kind: &str) -> Vec<Value> {
    let text = match kind {
        "roots" => include_str!("../vectors/roots.json"),
        "proofs" => include_str!("../vectors/proofs.json"),
        "history" => include_str!("../vectors/history.json"),
        "digests" => include_str!("../vectors/digests.json"),
        "exports" => include_str!("../vectors/exports.json"),
        "snapshots" => include_str!("../vectors/snapshots.json"),
        _ => unreachable!(),
    };
    let v: Value = serde_json::from_str(text).unwrap();
    assert_eq!(v["spec"], "letus-verify/1");
    assert_eq!(v["kind"], kind);
    let cases = v["cases"].as_array().unwrap().clone();
    assert!(!cases.is_empty());
    cases
}

fn bytes(v: &Value) -> Vec<u8> {
    unhex(v.as_str().unwrap()).unwrap()
}

fn hash(v: &Value) -> Hash {
    Hash::from_hex(v.as_str().unwrap()).unwrap()
}

fn name(c: &Value) -> &str {
    c["name"].as_str().unwrap()
}

#[test]
fn roots() {
    for c in load("roots") {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = c["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (bytes(&p["key"]), bytes(&p["value"])))
            .collect();
        for (i, (k, v)) in pairs.iter().enumerate() {
            assert_eq!(
                KeyPath::of(k).as_hash(),
                hash(&c["paths"][i]),
                "{}",
                name(&c)
            );
            assert_eq!(value_hash(v), hash(&c["value_hashes"][i]), "{}", name(&c));
        }
        let t = ReferenceTrie::from_pairs(pairs.iter().map(|(k, v)| (k, v)));
        assert_eq!(t.root(), hash(&c["root"]), "reference root: {}", name(&c));
        let mut f = FullVerifier::new();
        for (k, v) in t.pairs() {
            f.update(k, v).unwrap();
        }
        assert_eq!(
            f.finalize(),
            hash(&c["root"]),
            "streaming root: {}",
            name(&c)
        );
    }
}

fn check_proof(
    root: &Hash,
    claims: &[Claim<'_>],
    proof: Result<Proof, letus_verify::DecodeError>,
) -> Result<(), String> {
    let proof = proof.map_err(|e| e.code().to_string())?;
    verify_multi_proof(root, claims, &proof, &Limits::default())
        .map(|_| ())
        .map_err(|e| e.code().to_string())
}

#[test]
fn proofs() {
    let limits = Limits::default();
    for c in load("proofs") {
        let root = hash(&c["root"]);
        let owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = c["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|cl| {
                (
                    bytes(&cl["key"]),
                    cl["value"].as_str().map(|v| unhex(v).unwrap()),
                )
            })
            .collect();
        let claims: Vec<Claim<'_>> = owned
            .iter()
            .map(|(k, v)| Claim {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        let expected: Result<(), String> = match c.get("error") {
            Some(e) => Err(e.as_str().unwrap().to_string()),
            None => {
                assert_eq!(c["valid"], true);
                Ok(())
            }
        };
        let binary = Proof::decode(&bytes(&c["proof"]), &limits);
        assert_eq!(
            check_proof(&root, &claims, binary.clone()),
            expected,
            "binary: {}",
            name(&c)
        );
        if let Some(j) = c.get("proof_json") {
            // A field of the wrong JSON type (or a record that is not an object) fails in serde, before
            // Proof::from_json sees it: SPEC.md §5.5 calls that malformed.
            let from_json = match serde_json::from_value::<ProofJson>(j.clone()) {
                Ok(pj) => Proof::from_json(&pj, &limits),
                Err(_) => Err(letus_verify::DecodeError::Malformed(
                    "not the JSON form of SPEC.md §5.5",
                )),
            };
            match c.get("json_error") {
                Some(code) => assert_eq!(
                    from_json.map_err(|e| e.code()),
                    Err(code.as_str().unwrap()),
                    "json: {}",
                    name(&c)
                ),
                None => {
                    if let Ok(b) = &binary {
                        assert_eq!(
                            from_json.as_ref().ok(),
                            Some(b),
                            "json and binary agree: {}",
                            name(&c)
                        );
                        if c.get("json_reencodes") != Some(&Value::Bool(false)) {
                            assert_eq!(
                                &serde_json::to_value(b.to_json_value()).unwrap(),
                                j,
                                "json encoding: {}",
                                name(&c)
                            );
                        }
                    }
                    assert_eq!(
                        check_proof(&root, &claims, from_json),
                        expected,
                        "json: {}",
                        name(&c)
                    );
                }
            }
        }
        if let (Ok(p), None) = (&binary, c.get("error")) {
            assert_eq!(p.encode(), bytes(&c["proof"]), "re-encoding: {}", name(&c));
        }
    }
}

fn outcome<E: core::fmt::Debug>(
    r: Result<(), E>,
    code: impl Fn(&E) -> &'static str,
) -> Result<(), String> {
    r.map_err(|e| code(&e).to_string())
}

fn expected(c: &Value) -> Result<(), String> {
    match c.get("error") {
        Some(e) => Err(e.as_str().unwrap().to_string()),
        None => {
            assert_eq!(c["valid"], true, "{}", name(c));
            Ok(())
        }
    }
}

#[test]
fn history() {
    for c in load("history") {
        match c["type"].as_str().unwrap() {
            "roots" => {
                let leaves: Vec<Hash> = c["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        history_leaf(
                            e["tid"].as_u64().unwrap() as u32,
                            e["version"].as_u64().unwrap(),
                            &hash(&e["root"]),
                        )
                    })
                    .collect();
                for (i, r) in c["roots"].as_array().unwrap().iter().enumerate() {
                    assert_eq!(mth(&leaves[..=i]), hash(r), "{} at {}", name(&c), i + 1);
                }
            }
            "inclusion" => {
                let e = &c["entry"];
                let leaf = history_leaf(
                    e["tid"].as_u64().unwrap() as u32,
                    e["version"].as_u64().unwrap(),
                    &hash(&e["root"]),
                );
                let r = InclusionProof::decode(&bytes(&c["proof"]))
                    .map_err(letus_verify::HistoryError::from)
                    .and_then(|p| {
                        p.verify(
                            &hash(&c["history_root"]),
                            c["tree_size"].as_u64().unwrap(),
                            &leaf,
                        )
                    });
                assert_eq!(outcome(r, |e| e.code()), expected(&c), "{}", name(&c));
            }
            "consistency" => {
                let r = ConsistencyProof::decode(&bytes(&c["proof"]))
                    .map_err(letus_verify::HistoryError::from)
                    .and_then(|p| {
                        p.verify(
                            c["old_size"].as_u64().unwrap(),
                            &hash(&c["old_root"]),
                            c["new_size"].as_u64().unwrap(),
                            &hash(&c["new_root"]),
                        )
                    });
                assert_eq!(outcome(r, |e| e.code()), expected(&c), "{}", name(&c));
            }
            other => panic!("unknown history case type {other}"),
        }
    }
}

#[test]
fn digests() {
    for c in load("digests") {
        match c["type"].as_str().unwrap() {
            "encoding" => {
                let d: Digest = serde_json::from_value(c["digest"].clone()).unwrap();
                assert_eq!(Digest::decode(&bytes(&c["binary"])), Ok(d), "{}", name(&c));
                assert_eq!(d.encode(), bytes(&c["binary"]), "{}", name(&c));
            }
            "decode" => {
                assert_eq!(
                    Digest::decode(&bytes(&c["binary"])).map_err(|e| e.code()),
                    Err(c["error"].as_str().unwrap()),
                    "{}",
                    name(&c)
                );
            }
            "json_decode" => {
                // serde rejects a missing field or one of the wrong type or range; validate() a zero history_len.
                let got = serde_json::from_value::<Digest>(c["digest"].clone())
                    .map_err(|_| "malformed")
                    .and_then(|d| d.validate().map_err(|e| e.code()));
                assert_eq!(got, Err(c["error"].as_str().unwrap()), "{}", name(&c));
            }
            "checker" => {
                let mut checker = DigestChecker::new();
                for (i, s) in c["steps"].as_array().unwrap().iter().enumerate() {
                    let d: Digest = serde_json::from_value(s["digest"].clone()).unwrap();
                    let report = match s["source"].as_str() {
                        Some(src) => checker.observe(src, &d),
                        None => checker.add_checkpoint(&d),
                    };
                    assert_eq!(
                        report.code(),
                        s["report"].as_str().unwrap(),
                        "{} step {i}",
                        name(&c)
                    );
                }
            }
            other => panic!("unknown digest case type {other}"),
        }
    }
}

#[test]
fn exports() {
    for c in load("exports") {
        let stream = bytes(&c["stream"]);
        let root = hash(&c["trusted_root"]);
        let whole = verify_export(&stream, &root, &Limits::default());
        match c.get("error") {
            Some(code) => assert_eq!(
                whole.map_err(|e| e.code()),
                Err(code.as_str().unwrap()),
                "{}",
                name(&c)
            ),
            None => assert_eq!(
                whole.unwrap().records,
                c["records"].as_u64().unwrap(),
                "{}",
                name(&c)
            ),
        }
        // Fed one byte at a time, the reader must reach the same verdict.
        let mut r = letus_verify::export::ExportReader::new(Limits::default());
        let mut res = Ok(());
        for b in &stream {
            res = r.feed(std::slice::from_ref(b));
            if res.is_err() {
                break;
            }
        }
        let bytewise = res
            .and_then(|()| r.finish(&root))
            .map(|s| s.records)
            .map_err(|e| e.code());
        match c.get("error") {
            Some(code) => assert_eq!(
                bytewise,
                Err(code.as_str().unwrap()),
                "bytewise {}",
                name(&c)
            ),
            None => assert_eq!(
                bytewise,
                Ok(c["records"].as_u64().unwrap()),
                "bytewise {}",
                name(&c)
            ),
        }
        // Pushed one byte at a time with every record taken as it is decoded: the same verdict, and the records
        // handed out are the stream's (as many as the verdict counts when it verifies).
        let mut r = letus_verify::export::ExportReader::new(Limits::default());
        let mut res = Ok(());
        let mut handed_out = 0u64;
        'stream: for b in &stream {
            r.push(std::slice::from_ref(b));
            loop {
                match r.next_record() {
                    Ok(Some(_)) => handed_out += 1,
                    Ok(None) => break,
                    Err(e) => {
                        res = Err(e);
                        break 'stream;
                    }
                }
            }
        }
        let streamed = res
            .and_then(|()| r.finish(&root))
            .map(|s| s.records)
            .map_err(|e| e.code());
        match c.get("error") {
            Some(code) => assert_eq!(
                streamed,
                Err(code.as_str().unwrap()),
                "streamed {}",
                name(&c)
            ),
            None => assert_eq!(
                (streamed, handed_out),
                (
                    Ok(c["records"].as_u64().unwrap()),
                    c["records"].as_u64().unwrap()
                ),
                "streamed {}",
                name(&c)
            ),
        }
    }
}

#[test]
fn snapshots() {
    use letus_verify::snapshot::Manifest;
    let l = Limits::default();
    for c in load("snapshots") {
        let tid = c["tid"].as_u64().unwrap() as u32;
        let version = c["version"].as_u64().unwrap();
        let root = hash(&c["trusted_root"]);
        let manifest = Manifest::decode(&bytes(&c["manifest"]), &l)
            .map_err(letus_verify::SnapshotError::from)
            .and_then(|m| m.verify(tid, version, &root));
        let got = match c["type"].as_str().unwrap() {
            "manifest" => manifest.map(|m| m.pairs()).map_err(|e| e.code()),
            "chunk" => {
                let m = manifest.unwrap_or_else(|e| panic!("{}: manifest {e}", name(&c)));
                let index = c["index"].as_u64().unwrap() as u32;
                m.verify_chunk(index, &bytes(&c["chunk"]), &l)
                    .map(|ch| ch.pairs.len() as u64)
                    .map_err(|e| e.code())
            }
            other => panic!("unknown snapshot case type {other}"),
        };
        let expected = match (c.get("error"), c["type"].as_str().unwrap()) {
            (Some(code), _) => Err(code.as_str().unwrap()),
            (None, "manifest") => Ok(c["pairs"].as_u64().unwrap()),
            (None, _) => Ok(c["records"].as_u64().unwrap()),
        };
        assert_eq!(got, expected, "{}", name(&c));
    }
}
