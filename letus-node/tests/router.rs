//! Router tests in process (tower `oneshot`): every route, and every error case — malformed hex, unknown trie,
//! versions that do not exist, oversize bodies, missing or wrong tokens, conflicts — gets a JSON error with a
//! stable code and the right status. Every proof served is verified with letus-verify.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use letus_core::Options;
use letus_node::api::*;
use letus_node::metrics::Metrics;
use letus_node::node::{Node, NodeLimits};
use letus_node::server::{app, AppState};
use letus_verify::export::verify_export;
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::{verify_multi_proof, verify_proof, Claim, Limits, Proof};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "secret-token";

struct T {
    _dir: tempfile::TempDir,
    app: axum::Router,
}

fn setup(limits: NodeLimits) -> T {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::open(dir.path(), Options::default(), TOKEN.into(), limits).unwrap();
    let app = app(AppState {
        node: Arc::new(node),
        metrics: Arc::new(Metrics::new()),
        static_dirs: vec![],
    });
    T { _dir: dir, app }
}

async fn call(
    t: &T,
    method: &str,
    uri: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, Value, Vec<u8>) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(tok) = token {
        req = req.header("authorization", format!("Bearer {tok}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string()))
            .unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    let res = t.app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, v, bytes)
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error code>")
}

/// `(tid, key, value or None)`.
type W<'a> = (u32, &'a [u8], Option<&'a [u8]>);
/// `(method, uri, body, token, status, code)`.
type Case<'a> = (
    &'a str,
    &'a str,
    Option<Value>,
    Option<&'a str>,
    StatusCode,
    &'a str,
);

fn block(version: u64, writes: &[W<'_>]) -> Value {
    json!({
        "version": version,
        "writes": writes.iter().map(|(t, k, v)| json!({"tid": t, "key": hex(k), "value": v.map(hex)})).collect::<Vec<_>>(),
        "block": hex(format!("block {version}").as_bytes()),
    })
}

async fn write_chain(t: &T) {
    let (s, v, _) = call(
        t,
        "POST",
        "/v1/blocks",
        Some(block(
            1,
            &[
                (0, b"alice", Some(b"100")),
                (0, b"bob", Some(b"50")),
                (1, b"nonce", Some(b"0")),
            ],
        )),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _, _) = call(
        t,
        "POST",
        "/v1/blocks",
        Some(block(
            2,
            &[(0, b"alice", Some(b"70")), (0, b"bob", Some(b"80"))],
        )),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = call(
        t,
        "POST",
        "/v1/blocks",
        Some(block(3, &[(0, b"bob", None)])),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn writes_reads_proofs_and_digests() {
    let t = setup(NodeLimits::default());
    write_chain(&t).await;
    // Latest digests: two tries at version 3.
    let (s, v, _) = call(&t, "GET", "/v1/digest", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let d: DigestsResponse = serde_json::from_value(v).unwrap();
    assert_eq!(d.version, 3);
    assert_eq!(d.digests.len(), 2);
    assert_eq!(d.digests[0].history_len, 3);
    // A value with its proof, at the latest and at an old version, and an absent key.
    for (uri, key, expected) in [
        (
            "/v1/tries/0/keys/616c696365",
            &b"alice"[..],
            Some(&b"70"[..]),
        ),
        (
            "/v1/tries/0/keys/616c696365?version=1",
            &b"alice"[..],
            Some(&b"100"[..]),
        ),
        ("/v1/tries/0/keys/626f62", &b"bob"[..], None),
        (
            "/v1/tries/0/keys/626f62?version=2",
            &b"bob"[..],
            Some(&b"80"[..]),
        ),
    ] {
        let (s, v, _) = call(&t, "GET", uri, None, None).await;
        assert_eq!(s, StatusCode::OK, "{uri}: {v}");
        let r: ValueResponse = serde_json::from_value(v).unwrap();
        assert_eq!(
            r.value.as_deref().map(|h| unhex(h).unwrap()).as_deref(),
            expected,
            "{uri}"
        );
        let proof = Proof::decode(&unhex(&r.proof_hex).unwrap(), &Limits::default()).unwrap();
        let from_json = Proof::from_json(&r.proof, &Limits::default()).unwrap();
        assert_eq!(proof, from_json);
        let read = verify_proof(&r.digest.root, key, expected, &proof, &Limits::default()).unwrap();
        assert_eq!(read.value(), expected);
    }
    // Digest at a version and its history proofs.
    let (s, v, _) = call(&t, "GET", "/v1/digest/1", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let d1: DigestsResponse = serde_json::from_value(v).unwrap();
    let (s, v, _) = call(&t, "GET", "/v1/digest/consistency?from=1&to=3", None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let c: ConsistencyResponse = serde_json::from_value(v).unwrap();
    c.to.verify_extends(&c.from, &c.proof).unwrap();
    assert_eq!(c.from, d1.digests[0]);
    let (s, v, _) = call(
        &t,
        "GET",
        "/v1/digest/inclusion?version=1&at=3&tid=0",
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let i: InclusionResponse = serde_json::from_value(v).unwrap();
    i.at.verify_includes(1, &i.root, &i.proof).unwrap();
    // Multi-proof.
    let (s, v, _) = call(
        &t,
        "POST",
        "/v1/tries/0/proofs",
        Some(json!({"keys": [hex(b"alice"), hex(b"bob"), hex(b"carol")], "version": 2})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let m: MultiProofResponse = serde_json::from_value(v).unwrap();
    let values: Vec<Option<Vec<u8>>> = m
        .values
        .iter()
        .map(|v| v.as_deref().map(|h| unhex(h).unwrap()))
        .collect();
    assert_eq!(
        values,
        vec![Some(b"70".to_vec()), Some(b"80".to_vec()), None]
    );
    let keys = [b"alice".to_vec(), b"bob".to_vec(), b"carol".to_vec()];
    let claims = Claim::zip(&keys, &values);
    let p = Proof::decode(&unhex(&m.proof_hex).unwrap(), &Limits::default()).unwrap();
    let reads = verify_multi_proof(&m.digest.root, &claims, &p, &Limits::default()).unwrap();
    assert_eq!(reads.entries().len(), 3);
    // History with proofs.
    let (s, v, _) = call(
        &t,
        "GET",
        "/v1/tries/0/keys/616c696365/history?proofs=true",
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let h: HistoryResponse = serde_json::from_value(v).unwrap();
    assert_eq!(
        h.entries.iter().map(|e| e.version).collect::<Vec<_>>(),
        vec![2, 1]
    );
    for e in &h.entries {
        let p = Proof::decode(
            &unhex(e.proof_hex.as_ref().unwrap()).unwrap(),
            &Limits::default(),
        )
        .unwrap();
        let val = e.value.as_deref().map(|x| unhex(x).unwrap());
        let read = verify_proof(
            &e.digest.as_ref().unwrap().root,
            b"alice",
            val.as_deref(),
            &p,
            &Limits::default(),
        )
        .unwrap();
        assert!(read.is_present());
    }
    // Raw block, export, health, metrics, openapi.
    let (s, v, _) = call(&t, "GET", "/v1/blocks/2", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(unhex(v["block"].as_str().unwrap()).unwrap(), b"block 2");
    let (s, _, bytes) = call(&t, "GET", "/v1/tries/0/export?version=2", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let (_, v, _) = call(&t, "GET", "/v1/digest/2", None, None).await;
    let root2: DigestsResponse = serde_json::from_value(v).unwrap();
    let summary = verify_export(&bytes, &root2.digests[0].root, &Limits::default()).unwrap();
    assert_eq!(summary.records, 2);
    let (s, _, body) = call(&t, "GET", "/healthz", None, None).await;
    assert_eq!((s, body.as_slice()), (StatusCode::OK, &b"ok"[..]));
    let (s, _, body) = call(&t, "GET", "/metrics", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    for m in [
        "letus_http_requests_total",
        "letus_block_commit_seconds",
        "letus_pages_read_per_get",
        "letus_page_cache_hit_ratio",
        "letus_state_disk_bytes",
    ] {
        assert!(text.contains(m), "metrics lack {m}");
    }
    let (s, v, _) = call(&t, "GET", "/openapi.json", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        v["paths"]["/v1/blocks"].is_object(),
        "openapi documents /v1/blocks"
    );
}

#[tokio::test]
async fn block_writes_are_idempotent_and_ordered() {
    let t = setup(NodeLimits::default());
    write_chain(&t).await;
    // The same block again returns the same digests.
    let (s, v, _) = call(
        &t,
        "POST",
        "/v1/blocks",
        Some(block(
            2,
            &[(0, b"alice", Some(b"70")), (0, b"bob", Some(b"80"))],
        )),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, at2, _) = call(&t, "GET", "/v1/digest/2", None, None).await;
    assert_eq!(v["digests"], at2["digests"]);
    // A different block for an existing version is a conflict.
    let (s, v, _) = call(
        &t,
        "POST",
        "/v1/blocks",
        Some(block(2, &[(0, b"alice", Some(b"0"))])),
        Some(TOKEN),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "version_conflict"));
    // A gap is refused.
    let (s, v, _) = call(&t, "POST", "/v1/blocks", Some(block(7, &[])), Some(TOKEN)).await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "version_not_next"));
    // An empty block is a version with unchanged roots and one more history entry.
    let (_, at3, _) = call(&t, "GET", "/v1/digest/3", None, None).await;
    let (s, v, _) = call(&t, "POST", "/v1/blocks", Some(block(4, &[])), Some(TOKEN)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["digests"][0]["root"], at3["digests"][0]["root"]);
    assert_eq!(v["digests"][0]["history_len"], 4);
}

#[tokio::test]
async fn every_error_has_a_code_and_status() {
    let t = setup(NodeLimits {
        max_body_bytes: 4096,
        max_proof_keys: 4,
        ..NodeLimits::default()
    });
    // Reads of an empty node.
    let (s, v, _) = call(&t, "GET", "/v1/digest", None, None).await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "version_not_found"));
    write_chain(&t).await;
    let cases: Vec<Case<'_>> = vec![
        (
            "POST",
            "/v1/blocks",
            Some(block(4, &[])),
            None,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/blocks",
            Some(block(4, &[])),
            Some("wrong"),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/blocks",
            Some(json!({"version": 4, "writes": [{"tid": 0, "key": "zz", "value": null}]})),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "bad_hex",
        ),
        (
            "POST",
            "/v1/blocks",
            Some(json!({"version": 4, "writes": [{"tid": 0, "key": "00", "value": "0"}]})),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "bad_hex",
        ),
        (
            "POST",
            "/v1/blocks",
            Some(json!({"version": "four"})),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "POST",
            "/v1/blocks",
            Some(json!({"version": 4, "block": "ab".repeat(5000)})),
            Some(TOKEN),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            "GET",
            "/v1/tries/0/keys/xyz",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_hex",
        ),
        (
            "GET",
            "/v1/tries/9/keys/00",
            None,
            None,
            StatusCode::NOT_FOUND,
            "unknown_trie",
        ),
        (
            "GET",
            "/v1/tries/0/keys/00?version=99",
            None,
            None,
            StatusCode::NOT_FOUND,
            "version_not_found",
        ),
        (
            "GET",
            "/v1/tries/0/keys/00?version=abc",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/tries/notanumber/keys/00",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/digest/99",
            None,
            None,
            StatusCode::NOT_FOUND,
            "version_not_found",
        ),
        (
            "GET",
            "/v1/digest/consistency?from=3&to=1",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/digest/consistency?to=1",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/digest/consistency?from=1&to=77",
            None,
            None,
            StatusCode::NOT_FOUND,
            "version_not_found",
        ),
        (
            "GET",
            "/v1/blocks/99",
            None,
            None,
            StatusCode::NOT_FOUND,
            "block_not_found",
        ),
        (
            "GET",
            "/v1/tries/9/export",
            None,
            None,
            StatusCode::NOT_FOUND,
            "unknown_trie",
        ),
        (
            "GET",
            "/v1/tries/0/export?version=99",
            None,
            None,
            StatusCode::NOT_FOUND,
            "version_not_found",
        ),
        (
            "GET",
            "/v1/tries/9/keys/00/history",
            None,
            None,
            StatusCode::NOT_FOUND,
            "unknown_trie",
        ),
        (
            "POST",
            "/v1/tries/0/proofs",
            Some(json!({"keys": []})),
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/blocks",
            None,
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            "GET",
            "/v1/tries/0/keys/00/history?limit=x",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/digest/inclusion?version=3&at=1",
            None,
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "POST",
            "/v1/tries/0/proofs",
            Some(json!({"keys": ["00", "01", "02", "03", "04"]})),
            None,
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            "POST",
            "/v1/tries/0/proofs",
            Some(json!({"keys": ["00", "00"]})),
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "POST",
            "/v1/tries/0/proofs",
            Some(json!({"keys": ["0g"]})),
            None,
            StatusCode::BAD_REQUEST,
            "bad_hex",
        ),
        (
            "POST",
            "/v1/tries/0/proofs",
            Some(json!({"nokeys": 1})),
            None,
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "GET",
            "/v1/nothing",
            None,
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (method, uri, body, token, status, c) in cases {
        let (s, v, _) = call(&t, method, uri, body, token).await;
        assert_eq!((s, code(&v)), (status, c), "{method} {uri}: {v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // Nothing above changed the state.
    let (_, v, _) = call(&t, "GET", "/v1/digest", None, None).await;
    assert_eq!(v["version"], 3);
}

#[tokio::test]
async fn a_chain_that_starts_at_the_last_version_answers_without_overflow() {
    let t = setup(NodeLimits::default());
    // The first block, then the same block again (answered from the block store, as any retry is).
    for _ in 0..2 {
        let (s, v, _) = call(
            &t,
            "POST",
            "/v1/blocks",
            Some(block(u64::MAX, &[(0, b"alice", Some(b"1"))])),
            Some(TOKEN),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    // No version can follow u64::MAX: a clear 400, not an overflow.
    for version in [5, u64::MAX - 1] {
        let (s, v, _) = call(
            &t,
            "POST",
            "/v1/blocks",
            Some(block(version, &[(0, b"bob", Some(b"2"))])),
            Some(TOKEN),
        )
        .await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{v}"
        );
    }
}

#[tokio::test]
async fn a_commit_that_fails_after_it_is_durable_keeps_its_block() {
    let dir = tempfile::tempdir().unwrap();
    // Every commit fills the MemIndexTable, so every commit starts an index flush.
    let opts = Options {
        memtable_bytes: 1,
        ..Options::default()
    };
    let open = |opts: Options| {
        let node = Node::open(dir.path(), opts, TOKEN.into(), NodeLimits::default()).unwrap();
        app(AppState {
            node: Arc::new(node),
            metrics: Arc::new(Metrics::new()),
            static_dirs: vec![],
        })
    };
    let lsvps = dir.path().join("state/lsvps");
    let t = T {
        _dir: tempfile::tempdir().unwrap(),
        app: open(opts.clone()),
    };
    // A file where the index directory was: index flushes fail, after the commits they follow are durable.
    std::fs::rename(&lsvps, dir.path().join("lsvps.saved")).unwrap();
    std::fs::write(&lsvps, b"not a directory").unwrap();
    let mut failed = None;
    for v in 1..=3u64 {
        let (s, _, _) = call(
            &t,
            "POST",
            "/v1/blocks",
            Some(block(v, &[(0, b"alice", Some(v.to_string().as_bytes()))])),
            Some(TOKEN),
        )
        .await;
        if s != StatusCode::OK {
            failed = Some(v);
            break;
        }
    }
    let failed = failed.expect("a commit after a failed flush fails");
    drop(t);
    std::fs::remove_file(&lsvps).unwrap();
    std::fs::rename(dir.path().join("lsvps.saved"), &lsvps).unwrap();
    let t = T {
        _dir: tempfile::tempdir().unwrap(),
        app: open(opts),
    };
    // Either the failed flush was seen before the next block started, and that block was refused before anything
    // was written (the state ends just before it, and so does the block store); or it surfaced inside that block's
    // commit, after the commit was durable: then the state has the block, and so has the block store.
    let (s, v, _) = call(&t, "GET", "/v1/digest", None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let at = v["version"].as_u64().unwrap();
    assert!(at == failed || at + 1 == failed, "{v}");
    let (s, v, _) = call(&t, "GET", &format!("/v1/blocks/{failed}"), None, None).await;
    if at == failed {
        assert_eq!(s, StatusCode::OK, "{v}");
    } else {
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    }
    // And resubmitting it is answered: as the retry it is, or as the next block.
    let (s, v, _) = call(
        &t,
        "POST",
        "/v1/blocks",
        Some(block(
            failed,
            &[(0, b"alice", Some(failed.to_string().as_bytes()))],
        )),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn an_access_list_longer_than_the_block_limit_is_refused() {
    let t = setup(NodeLimits {
        max_block_writes: 3,
        ..NodeLimits::default()
    });
    let mut body = block(1, &[(0, b"alice", Some(b"1"))]);
    body["access_list"] = json!((0..4)
        .map(|i| json!({"tid": 0, "key": hex(format!("k{i}").as_bytes())}))
        .collect::<Vec<_>>());
    let (s, v, _) = call(&t, "POST", "/v1/blocks", Some(body.clone()), Some(TOKEN)).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        "{v}"
    );
    // Within the limit the same block commits.
    body["access_list"] = json!([{"tid": 0, "key": hex(b"alice")}]);
    let (s, v, _) = call(&t, "POST", "/v1/blocks", Some(body), Some(TOKEN)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn history_lists_every_write_across_deletes_and_pages_with_before() {
    let t = setup(NodeLimits::default());
    // put, put, delete, put, put (the last one rewrites the same value), then a delete of an absent key.
    let steps: [Option<&[u8]>; 5] = [Some(b"1"), Some(b"2"), None, Some(b"3"), Some(b"3")];
    for (i, step) in steps.iter().enumerate() {
        let (s, v, _) = call(
            &t,
            "POST",
            "/v1/blocks",
            Some(block(
                i as u64 + 1,
                &[(0, b"alice", *step), (0, b"bob", None)],
            )),
            Some(TOKEN),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    let expected: Vec<(u64, Option<String>)> = steps
        .iter()
        .enumerate()
        .rev()
        .map(|(i, v)| (i as u64 + 1, v.map(hex)))
        .collect();
    let entries = |v: &Value| -> Vec<(u64, Option<String>)> {
        let h: HistoryResponse = serde_json::from_value(v.clone()).unwrap();
        h.entries
            .into_iter()
            .map(|e| (e.version, e.value))
            .collect()
    };
    let (s, v, _) = call(&t, "GET", "/v1/tries/0/keys/616c696365/history", None, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(entries(&v), expected);
    assert!(v.get("next").is_none(), "{v}");
    // Pages of two through both routes, following `next`, with proofs that verify (a delete: absence).
    for post in [false, true] {
        let mut got = Vec::new();
        let mut before: Option<u64> = None;
        loop {
            let (s, v, _) = if post {
                let mut body = json!({"key": hex(b"alice"), "limit": 2, "proofs": true});
                if let Some(b) = before {
                    body["before"] = json!(b);
                }
                call(&t, "POST", "/v1/tries/0/history", Some(body), None).await
            } else {
                let q = before.map_or(String::new(), |b| format!("&before={b}"));
                let uri = format!("/v1/tries/0/keys/616c696365/history?limit=2&proofs=true{q}");
                call(&t, "GET", &uri, None, None).await
            };
            assert_eq!(s, StatusCode::OK, "{v}");
            let h: HistoryResponse = serde_json::from_value(v.clone()).unwrap();
            assert!(h.entries.len() <= 2);
            for e in &h.entries {
                let p = Proof::decode(
                    &unhex(e.proof_hex.as_ref().unwrap()).unwrap(),
                    &Limits::default(),
                )
                .unwrap();
                let val = e.value.as_deref().map(|x| unhex(x).unwrap());
                let read = verify_proof(
                    &e.digest.as_ref().unwrap().root,
                    b"alice",
                    val.as_deref(),
                    &p,
                    &Limits::default(),
                )
                .unwrap();
                assert_eq!(read.value(), val.as_deref());
            }
            got.extend(entries(&v));
            match h.next {
                Some(n) => before = Some(n),
                None => break,
            }
        }
        assert_eq!(
            got,
            expected,
            "paged through the {} route",
            if post { "POST" } else { "GET" }
        );
    }
    // bob was only ever deleted while absent: nothing was written.
    let (_, v, _) = call(&t, "GET", "/v1/tries/0/keys/626f62/history", None, None).await;
    assert!(entries(&v).is_empty(), "{v}");
    // A `before` that is no entry of alice's, and one that is no number.
    for (q, status, c) in [
        ("before=99", StatusCode::BAD_REQUEST, "invalid_cursor"),
        ("before=x", StatusCode::BAD_REQUEST, "bad_request"),
    ] {
        let uri = format!("/v1/tries/0/keys/626f62/history?{q}");
        let (s, v, _) = call(&t, "GET", &uri, None, None).await;
        assert_eq!((s, code(&v)), (status, c), "{q}: {v}");
    }
}

#[tokio::test]
async fn the_history_frontier_continues_into_the_digest_of_its_version() {
    let t = setup(NodeLimits::default());
    write_chain(&t).await;
    for v in 1..=3u64 {
        let (s, body, _) = call(
            &t,
            "GET",
            &format!("/v1/digest/frontier?version={v}"),
            None,
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let f: FrontierResponse = serde_json::from_value(body).unwrap();
        assert_eq!((f.tid, f.version, f.size), (0, v, v - 1));
        let peaks = f
            .peaks
            .iter()
            .map(|p| (p.height, letus_verify::Hash::from_hex(&p.hash).unwrap()))
            .collect();
        // A store seeded from an export of v starts from this frontier and pushes v's entry: the result must be
        // the history commitment of v's digest.
        let mut tree = letus_verify::HistoryTree::from_frontier(f.size, peaks).unwrap();
        let (_, d, _) = call(&t, "GET", &format!("/v1/digest/{v}"), None, None).await;
        let d: DigestsResponse = serde_json::from_value(d).unwrap();
        let d = d.digests.iter().find(|d| d.tid == 0).unwrap();
        tree.push(letus_verify::hash::history_leaf(0, v, &d.root));
        assert_eq!(
            (tree.len(), tree.root()),
            (d.history_len, d.history_root),
            "v{v}"
        );
    }
}
