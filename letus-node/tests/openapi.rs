//! openapi.json against the router: every request below is sent to the in-process router, its status and error
//! code checked, and mapped to the documented operation it hits. Every `(path, method, status)` that
//! openapi.json documents must be produced by one of these requests (except the statuses that need an I/O
//! failure, listed in `NEEDS_IO_FAILURE`), and every status produced must be documented. Errors are JSON bodies
//! with a code everywhere, the fallbacks (404, 405) included; the errors hyper answers by itself (400, 414, 431)
//! are checked against the real binary.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use letus_core::Options;
use letus_node::metrics::Metrics;
use letus_node::node::{Node, NodeLimits};
use letus_node::server::{app, AppState, OPENAPI};
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::{verify_proof, Limits, Proof};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "openapi-token";

/// Statuses that only an I/O failure or corruption of the store produces: `internal` (500, documented for
/// every route that reads the store; produced below for `GET /v1/blocks/{version}` by damaging a block on disk,
/// the same `ApiError::Internal` answering for every route), `unavailable` (503, once a failed commit
/// poisoned the store) and `tier_unavailable` (503, a read that needs the object store while it is down). The
/// store's own crash and corruption tests cover the first two; tests/tiering.rs produces the third against a
/// real object store that it stops.
const NEEDS_IO_FAILURE: [(&str, &str, u16); 13] = [
    ("post", "/v1/blocks", 503),
    ("get", "/v1/blocks/{version}", 503),
    ("get", "/v1/tries/{tid}/keys/{key}", 503),
    ("get", "/v1/tries/{tid}/keys/", 503),
    ("post", "/v1/tries/{tid}/value", 503),
    ("get", "/v1/tries/{tid}/keys/{key}/history", 503),
    ("post", "/v1/tries/{tid}/history", 503),
    ("post", "/v1/tries/{tid}/proofs", 503),
    ("get", "/v1/tries/{tid}/export", 503),
    ("get", "/v1/tries/{tid}/snapshot", 503),
    ("get", "/v1/tries/{tid}/snapshot/chunks/{index}", 503),
    ("get", "/v1/tries/{tid}/changes", 503),
    ("get", "/v1/shard/tops", 503),
];

/// Documented statuses that need a state too large for this test: a snapshot chunk over the verifier's 64 MiB
/// `max_chunk_bytes`, a manifest of more than 262,144 entries, a `changes` answer over a million keys.
/// letus-core's state_sync tests cover the first two; all answer through the same `ApiError::TooLarge` as the
/// 413s produced here.
const NEEDS_HUGE_STATE: [(&str, &str, u16); 3] = [
    ("get", "/v1/tries/{tid}/snapshot/chunks/{index}", 413),
    ("get", "/v1/tries/{tid}/snapshot", 413),
    ("get", "/v1/tries/{tid}/changes", 413),
];

fn setup(limits: NodeLimits) -> (tempfile::TempDir, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::open(dir.path(), Options::default(), TOKEN.into(), limits).unwrap();
    let app = app(AppState {
        node: Arc::new(node),
        metrics: Arc::new(Metrics::new()),
        static_dirs: vec![],
    });
    (dir, app)
}

async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Vec<u8>>,
    token: bool,
) -> (StatusCode, Vec<u8>) {
    let mut req = Request::builder().method(method).uri(uri);
    if token {
        req = req.header("authorization", format!("Bearer {TOKEN}"));
    }
    let req = req.body(body.map_or_else(Body::empty, Body::from)).unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    (
        status,
        res.into_body().collect().await.unwrap().to_bytes().to_vec(),
    )
}

/// The documented path template a concrete path falls under (literal segments win over parameters).
fn template<'a>(templates: &'a [String], uri: &str) -> Option<&'a str> {
    let path = uri.split('?').next().unwrap();
    let segs: Vec<&str> = path.split('/').collect();
    templates
        .iter()
        .filter(|t| {
            let ts: Vec<&str> = t.split('/').collect();
            ts.len() == segs.len()
                && ts.iter().zip(&segs).all(|(t, s)| {
                    if t.starts_with('{') {
                        !s.is_empty()
                    } else {
                        t == s
                    }
                })
        })
        .max_by_key(|t| t.split('/').filter(|s| !s.starts_with('{')).count())
        .map(String::as_str)
}

struct Case {
    method: &'static str,
    uri: String,
    body: Option<Vec<u8>>,
    token: bool,
    status: u16,
    /// The error code, for an error status.
    code: &'static str,
}

fn case(method: &'static str, uri: impl Into<String>, status: u16, code: &'static str) -> Case {
    Case {
        method,
        uri: uri.into(),
        body: None,
        token: false,
        status,
        code,
    }
}

impl Case {
    fn json(mut self, v: Value) -> Self {
        self.body = Some(v.to_string().into_bytes());
        self
    }
    fn raw(mut self, b: &[u8]) -> Self {
        self.body = Some(b.to_vec());
        self
    }
    fn token(mut self) -> Self {
        self.token = true;
        self
    }
}

fn block(version: u64, writes: &[(&[u8], Option<&[u8]>)]) -> Value {
    json!({"version": version, "writes": writes.iter().map(|(k, v)| json!({"tid": 0, "key": hex(k), "value": v.map(hex)})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn every_documented_status_of_every_route_is_produced() {
    let doc: Value = serde_json::from_str(OPENAPI).unwrap();
    let templates: Vec<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for status in op["responses"].as_object().unwrap().keys() {
                documented.insert((method.clone(), path.clone(), status.parse::<u16>().unwrap()));
            }
        }
    }
    let mut produced = BTreeSet::new();
    let doc = &doc;
    let run = |app: axum::Router, cases: Vec<Case>| {
        let templates = templates.clone();
        async move {
            let mut seen = Vec::new();
            for c in cases {
                let (s, body) = send(&app, c.method, &c.uri, c.body, c.token).await;
                let label = format!("{} {}", c.method, &c.uri[..c.uri.len().min(120)]);
                assert_eq!(
                    s.as_u16(),
                    c.status,
                    "{label}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                );
                if c.status >= 400 {
                    let v: Value = serde_json::from_slice(&body)
                        .unwrap_or_else(|_| panic!("{label}: an error body that is not JSON"));
                    assert_eq!(v["error"]["code"], c.code, "{label}: {v}");
                    assert!(v["error"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty()));
                }
                match template(&templates, &c.uri) {
                    Some(t) if doc["paths"][t].get(c.method.to_lowercase()).is_some() => {
                        seen.push((c.method.to_lowercase(), t.to_string(), c.status))
                    }
                    // The fallbacks: no such route, or a route without this method.
                    _ => assert!(
                        matches!(
                            (c.status, c.code),
                            (404, "not_found") | (405, "method_not_allowed")
                        ),
                        "{label} is not a documented operation"
                    ),
                }
            }
            seen
        }
    };

    // An empty node.
    let (_d0, empty) = setup(NodeLimits::default());
    produced.extend(
        run(
            empty,
            vec![
                case("GET", "/v1/digest", 404, "version_not_found"),
                case("GET", "/v1/tries/0/keys/00", 404, "version_not_found"),
            ],
        )
        .await,
    );

    let (dir, app) = setup(NodeLimits {
        max_body_bytes: 200_000,
        max_proof_keys: 4,
        max_block_writes: 10,
        ..NodeLimits::default()
    });
    let long = vec![7u8; 65_535];
    let blocks = [
        block(1, &[(b"alice", Some(b"100")), (b"", Some(b"empty"))]),
        block(2, &[(b"alice", Some(b"70")), (&long, Some(b"long"))]),
        block(3, &[(b"bob", Some(b"5"))]),
    ];
    for b in &blocks {
        let (s, body) = send(
            &app,
            "POST",
            "/v1/blocks",
            Some(b.to_string().into_bytes()),
            true,
        )
        .await;
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&body));
    }
    let big = json!({"key": "00".repeat(100_001)});
    let cases = vec![
        case("GET", "/", 200, ""),
        case("GET", "/healthz", 200, ""),
        case("GET", "/metrics", 200, ""),
        case("GET", "/openapi.json", 200, ""),
        // Writes.
        case("POST", "/v1/blocks", 200, "")
            .json(blocks[2].clone())
            .token(),
        case("POST", "/v1/blocks", 400, "bad_request")
            .json(json!({"version": "four"}))
            .token(),
        case("POST", "/v1/blocks", 400, "bad_hex")
            .json(json!({"version": 4, "writes": [{"tid": 0, "key": "zz", "value": null}]}))
            .token(),
        // Invalid UTF-8 in a field serde would otherwise skip.
        case("POST", "/v1/blocks", 400, "bad_request")
            .raw(b"{\"version\": 4, \"note\": \"\xff\xfe\"}")
            .token(),
        case("POST", "/v1/blocks", 401, "unauthorized").json(block(4, &[])),
        case("POST", "/v1/blocks?tops=maybe", 400, "bad_request")
            .json(block(4, &[]))
            .token(),
        case("POST", "/v1/blocks", 409, "version_conflict")
            .json(block(3, &[]))
            .token(),
        case("POST", "/v1/blocks", 409, "version_not_next")
            .json(block(9, &[]))
            .token(),
        case("POST", "/v1/blocks", 413, "payload_too_large")
            .json(json!({"version": 4, "block": "ab".repeat(100_001)}))
            .token(),
        case("POST", "/v1/blocks", 413, "too_large")
            .json(block(4, &[(&b"k"[..], None); 11]))
            .token(),
        // A router's part of a block: a node that is no shard takes a plain part, not a move's writes.
        case("POST", "/v1/shard/blocks", 200, "")
            .json(blocks[2].clone())
            .token(),
        case("POST", "/v1/shard/blocks", 400, "bad_request")
            .json(json!({"version": 4, "moving": [{"tid": 0, "key": "6b", "value": "01"}]}))
            .token(),
        case("POST", "/v1/shard/blocks", 401, "unauthorized").json(block(4, &[])),
        case("POST", "/v1/shard/blocks", 409, "version_conflict")
            .json(block(3, &[]))
            .token(),
        case("GET", "/v1/blocks/1", 200, ""),
        case("GET", "/v1/blocks/one", 400, "bad_request"),
        case("GET", "/v1/blocks/99", 404, "block_not_found"),
        // Digests and history proofs.
        case("GET", "/v1/digest", 200, ""),
        case("GET", "/v1/digest/2", 200, ""),
        case("GET", "/v1/digest/two", 400, "bad_request"),
        case("GET", "/v1/digest/99", 404, "version_not_found"),
        case("GET", "/v1/digest/consistency?from=1&to=3", 200, ""),
        case(
            "GET",
            "/v1/digest/consistency?from=3&to=1",
            400,
            "bad_request",
        ),
        case(
            "GET",
            "/v1/digest/consistency?from=1&to=77",
            404,
            "version_not_found",
        ),
        case("GET", "/v1/digest/frontier?version=2", 200, ""),
        case("GET", "/v1/shard/tops?version=2", 200, ""),
        case("GET", "/v1/shard/tops?version=x", 400, "bad_request"),
        case("GET", "/v1/shard/tops?version=99", 404, "version_not_found"),
        case("GET", "/v1/digest/frontier?version=x", 400, "bad_request"),
        case("GET", "/v1/tiers", 400, "bad_request"),
        case(
            "GET",
            "/v1/digest/frontier?version=1&tid=9",
            404,
            "unknown_trie",
        ),
        case("GET", "/v1/digest/inclusion?version=1&at=3", 200, ""),
        case("GET", "/v1/digest/inclusion?at=3", 400, "bad_request"),
        case(
            "GET",
            "/v1/digest/inclusion?version=1&at=3&tid=9",
            404,
            "unknown_trie",
        ),
        // Values.
        case(
            "GET",
            format!("/v1/tries/0/keys/{}?version=1", hex(b"alice")),
            200,
            "",
        ),
        case("GET", "/v1/tries/0/keys/xyz", 400, "bad_hex"),
        case("GET", "/v1/tries/0/keys/%ff", 400, "bad_request"),
        case("GET", "/v1/tries/9/keys/00", 404, "unknown_trie"),
        case("GET", "/v1/tries/0/keys/", 200, ""),
        case("GET", "/v1/tries/0/keys/?version=x", 400, "bad_request"),
        case(
            "GET",
            "/v1/tries/0/keys/?version=99",
            404,
            "version_not_found",
        ),
        case("POST", "/v1/tries/0/value", 200, "").json(json!({"key": ""})),
        case("POST", "/v1/tries/0/value", 200, "").json(json!({"key": hex(&long), "version": 2})),
        case("POST", "/v1/tries/0/value", 400, "bad_hex").json(json!({"key": "0"})),
        case("POST", "/v1/tries/0/value", 400, "bad_request").json(json!({"keys": ["00"]})),
        case("POST", "/v1/tries/0/value", 400, "bad_request")
            .raw(b"{\"key\": \"00\", \"x\": \"\xc3\"}"),
        case("POST", "/v1/tries/9/value", 404, "unknown_trie").json(json!({"key": "00"})),
        case("POST", "/v1/tries/0/value", 413, "payload_too_large").json(big.clone()),
        // History.
        case(
            "GET",
            format!("/v1/tries/0/keys/{}/history?proofs=true", hex(b"alice")),
            200,
            "",
        ),
        case(
            "GET",
            "/v1/tries/0/keys/00/history?proofs=maybe",
            400,
            "bad_request",
        ),
        case(
            "GET",
            "/v1/tries/0/keys/00/history?limit=-1",
            400,
            "bad_request",
        ),
        case("GET", "/v1/tries/9/keys/00/history", 404, "unknown_trie"),
        case("POST", "/v1/tries/0/history", 200, "").json(json!({"key": "", "proofs": true})),
        case("POST", "/v1/tries/0/history", 400, "bad_request")
            .json(json!({"key": "00", "proofs": "yes"})),
        case("POST", "/v1/tries/9/history", 404, "unknown_trie").json(json!({"key": "00"})),
        case("POST", "/v1/tries/0/history", 413, "payload_too_large").json(big.clone()),
        // Multi-proofs.
        case("POST", "/v1/tries/0/proofs", 200, "").json(json!({"keys": ["", hex(b"alice")]})),
        case("POST", "/v1/tries/0/proofs", 400, "bad_request").json(json!({"keys": []})),
        case("POST", "/v1/tries/9/proofs", 404, "unknown_trie").json(json!({"keys": ["00"]})),
        case("POST", "/v1/tries/0/proofs", 413, "too_large")
            .json(json!({"keys": ["00", "01", "02", "03", "04"]})),
        // Exports.
        case("GET", "/v1/tries/0/export?version=2", 200, ""),
        case("GET", "/v1/tries/0/export?version=two", 400, "bad_request"),
        case("GET", "/v1/tries/9/export", 404, "unknown_trie"),
        // Snapshots and changes.
        case("GET", "/v1/tries/0/snapshot", 200, ""),
        case(
            "GET",
            "/v1/tries/0/snapshot?max_pairs=0",
            400,
            "bad_request",
        ),
        case("GET", "/v1/tries/9/snapshot", 404, "unknown_trie"),
        case(
            "GET",
            "/v1/tries/0/snapshot?version=99",
            404,
            "version_not_found",
        ),
        case(
            "GET",
            format!(
                "/v1/tries/0/snapshot/chunks/0?version=2&depth=0&prefix={}",
                "00".repeat(32)
            ),
            200,
            "",
        ),
        case(
            "GET",
            "/v1/tries/0/snapshot/chunks/0?version=2",
            400,
            "bad_request",
        ),
        case(
            "GET",
            format!(
                "/v1/tries/0/snapshot/chunks/0?version=99&depth=0&prefix={}",
                "00".repeat(32)
            ),
            404,
            "version_not_found",
        ),
        case("GET", "/v1/tries/0/changes?from=1&to=3", 200, ""),
        case("GET", "/v1/tries/0/changes?from=3&to=1", 400, "bad_request"),
        case(
            "GET",
            "/v1/tries/9/changes?from=1&to=3",
            404,
            "unknown_trie",
        ),
        // Fallbacks.
        case("GET", "/v1/nothing", 404, "not_found"),
        case("GET", "/v1/tries/0/keys/00/history/more", 404, "not_found"),
        case("GET", "/v1/blocks", 405, "method_not_allowed"),
        case("DELETE", "/v1/digest", 405, "method_not_allowed"),
        case("GET", "/v1/tries/0/value", 405, "method_not_allowed"),
    ];
    produced.extend(run(app.clone(), cases).await);

    // Nothing above changed the state, the rejected non-UTF-8 block included.
    let (_, body) = send(&app, "GET", "/v1/digest", None, false).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["version"],
        3
    );
    // The empty key and the 65,535-byte key are served with proofs that verify.
    for (key, value, version) in [(&b""[..], &b"empty"[..], 3), (&long[..], &b"long"[..], 2)] {
        let req = json!({"key": hex(key), "version": version})
            .to_string()
            .into_bytes();
        let (_, body) = send(&app, "POST", "/v1/tries/0/value", Some(req), false).await;
        let r: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(r["value"], hex(value));
        let proof = Proof::decode(
            &unhex(r["proof_hex"].as_str().unwrap()).unwrap(),
            &Limits::default(),
        )
        .unwrap();
        let root = letus_verify::Hash::from_hex(r["digest"]["root"].as_str().unwrap()).unwrap();
        assert!(
            verify_proof(&root, key, Some(value), &proof, &Limits::default())
                .unwrap()
                .is_present()
        );
    }

    // A damaged block on disk: 500 `internal`, with the JSON body and no detail that could leak a path.
    let payload = "5a17ed".repeat(20);
    let b4 = json!({"version": 4, "writes": [], "block": payload});
    let (s, _) = send(
        &app,
        "POST",
        "/v1/blocks",
        Some(b4.to_string().into_bytes()),
        true,
    )
    .await;
    assert_eq!(s, 200);
    let seg = std::fs::read_dir(dir.path().join("blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let raw = unhex(&payload).unwrap();
    let at = bytes
        .windows(raw.len())
        .position(|w| w == raw)
        .expect("the block is on disk");
    bytes[at] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    produced.extend(
        run(
            app.clone(),
            vec![case("GET", "/v1/blocks/4", 500, "internal")],
        )
        .await,
    );
    let (_, body) = send(&app, "GET", "/v1/blocks/4", None, false).await;
    assert!(
        !String::from_utf8_lossy(&body).contains(".seg"),
        "no path in the answer"
    );

    // Bodies that never finish arriving: 408 `body_timeout` on every route that reads one, once the deadline
    // set at the request's head has passed; and with no stream permits, an export is 503 `too_many_streams`.
    let (_d2, slow) = setup(NodeLimits {
        body_timeout: std::time::Duration::from_millis(300),
        max_streams: 0,
        ..NodeLimits::default()
    });
    let (s, _) = send(
        &slow,
        "POST",
        "/v1/blocks",
        Some(blocks[0].to_string().into_bytes()),
        true,
    )
    .await;
    assert_eq!(s, 200);
    for uri in [
        "/v1/blocks",
        "/v1/tries/0/value",
        "/v1/tries/0/history",
        "/v1/tries/0/proofs",
    ] {
        let stalled = tokio_stream::StreamExt::chain(
            tokio_stream::iter([Ok::<_, std::io::Error>(b"{\"version\": ".to_vec())]),
            tokio_stream::pending(),
        );
        let req = Request::post(uri)
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::from_stream(stalled))
            .unwrap();
        let res = slow.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let v: Value =
            serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (408, Some("body_timeout")),
            "{uri}"
        );
        produced.insert((
            "post".into(),
            template(&templates, uri).unwrap().to_string(),
            408,
        ));
    }
    produced.extend(
        run(
            slow.clone(),
            vec![
                case("GET", "/v1/tries/0/export", 503, "too_many_streams"),
                case("GET", "/v1/tries/0/snapshot", 503, "too_many_streams"),
            ],
        )
        .await,
    );

    // A body that never finishes arriving holds the whole body budget (it announces no length, so it reserves
    // `max_body_bytes`): every other body of its kind is then refused unread, 503 `too_many_bodies`. Public reads
    // and requests with the write token have budgets of their own: one stalled body holds each.
    let (_d3, full) = setup(NodeLimits {
        max_body_bytes: 4096,
        max_buffered_body_bytes: 4096,
        ..NodeLimits::default()
    });
    let stalled = || {
        Body::from_stream(tokio_stream::StreamExt::chain(
            tokio_stream::iter([Ok::<_, std::io::Error>(b"{\"key\": ".to_vec())]),
            tokio_stream::pending(),
        ))
    };
    let holders = [
        Request::post("/v1/tries/0/value").body(stalled()).unwrap(),
        Request::post("/v1/blocks")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(stalled())
            .unwrap(),
    ]
    .map(|req| tokio::spawn(full.clone().oneshot(req)));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    produced.extend(
        run(
            full.clone(),
            vec![
                case("POST", "/v1/tries/0/value", 503, "too_many_bodies")
                    .json(json!({"key": "00"})),
                case("POST", "/v1/admin/prune", 503, "too_many_bodies")
                    .json(json!({"keep": 3}))
                    .token(),
                case("POST", "/v1/shard/blocks", 503, "too_many_bodies")
                    .json(json!({}))
                    .token(),
                case("POST", "/v1/admin/prune", 401, "unauthorized").json(json!({"keep": 3})),
            ],
        )
        .await,
    );
    for h in holders {
        h.abort();
    }

    // A pruned node (an index file every commit): below the boundary, `410 pruned`; digests still answer.
    let (_dp, pruned) = {
        let dir = tempfile::tempdir().unwrap();
        let node = Node::open(
            dir.path(),
            Options {
                max_replay_millis: 0,
                ..Options::default()
            },
            TOKEN.into(),
            NodeLimits::default(),
        )
        .unwrap();
        let router = letus_node::server::app(AppState {
            node: Arc::new(node),
            metrics: Arc::new(Metrics::new()),
            static_dirs: vec![],
        });
        (dir, router)
    };
    let mut blocks: Vec<Case> = (1..=12u64)
        .map(|v| {
            let k = format!("k{v}");
            case("POST", "/v1/blocks", 200, "")
                .json(block(v, &[(k.as_bytes(), Some(b"v"))]))
                .token()
        })
        .collect();
    blocks.extend([
        case("POST", "/v1/admin/prune", 401, "unauthorized").json(json!({"keep": 3})),
        case("POST", "/v1/admin/prune", 400, "bad_request")
            .json(json!({"keep": -1}))
            .token(),
        case("POST", "/v1/admin/prune", 200, "")
            .json(json!({"keep": 3}))
            .token(),
        case("POST", "/v1/admin/prune", 200, "")
            .json(json!({"keep": 3, "merge": true}))
            .token(),
        case("POST", "/v1/admin/prune", 400, "bad_request")
            .json(json!({"keep": 3, "merge": "yes"}))
            .token(),
        case("GET", "/v1/admin/prune", 401, "unauthorized"),
        case("GET", "/v1/admin/prune", 200, "").token(),
        case("GET", "/v1/tries/0/keys/00?version=2", 410, "pruned"),
        case("GET", "/v1/tries/0/keys/?version=2", 410, "pruned"),
        case("POST", "/v1/tries/0/value", 410, "pruned").json(json!({"key": "00", "version": 2})),
        case(
            "GET",
            "/v1/tries/0/keys/6b3132/history?before=2",
            410,
            "pruned",
        ),
        case("POST", "/v1/tries/0/history", 410, "pruned")
            .json(json!({"key": "6b3132", "before": 2})),
        case("POST", "/v1/tries/0/proofs", 410, "pruned")
            .json(json!({"keys": ["00"], "version": 2})),
        case("GET", "/v1/tries/0/keys/00?version=12", 200, ""),
        case("GET", "/v1/digest/2", 200, ""),
    ]);
    produced.extend(run(pruned, blocks).await);

    // A node that joined from a snapshot of version 5 (its store bulk-loaded there): below it, `410`.
    let joined_dir = tempfile::tempdir().unwrap();
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..50u32)
        .map(|i| (format!("k{i}").into_bytes(), b"v".to_vec()))
        .collect();
    pairs.sort_by_key(|(k, _)| letus_verify::KeyPath::of(k));
    let mut it = pairs.into_iter();
    letus_core::Store::bulk_load(
        joined_dir.path().join("state"),
        Options::default(),
        0,
        5,
        None,
        || Ok(it.next()),
    )
    .unwrap()
    .close()
    .unwrap();
    let node = Node::open(
        joined_dir.path(),
        Options::default(),
        TOKEN.into(),
        NodeLimits::default(),
    )
    .unwrap();
    let joined = letus_node::server::app(AppState {
        node: Arc::new(node),
        metrics: Arc::new(Metrics::new()),
        static_dirs: vec![],
    });
    let zero = "00".repeat(32);
    produced.extend(
        run(
            joined,
            vec![
                case("GET", "/v1/digest/2", 410, "before_snapshot"),
                case(
                    "GET",
                    "/v1/tries/0/keys/00?version=2",
                    410,
                    "before_snapshot",
                ),
                case("GET", "/v1/blocks/2", 410, "before_snapshot"),
                case(
                    "GET",
                    "/v1/tries/0/snapshot?version=2",
                    410,
                    "before_snapshot",
                ),
                case(
                    "GET",
                    format!("/v1/tries/0/snapshot/chunks/0?version=2&depth=0&prefix={zero}"),
                    410,
                    "before_snapshot",
                ),
                case(
                    "GET",
                    "/v1/tries/0/changes?from=2&to=5",
                    410,
                    "before_snapshot",
                ),
                case("GET", "/v1/tries/0/changes?from=5&to=5", 200, ""),
                case("GET", "/v1/tries/0/keys/?version=2", 410, "before_snapshot"),
                case(
                    "GET",
                    "/v1/digest/consistency?from=2&to=5",
                    410,
                    "before_snapshot",
                ),
                case(
                    "GET",
                    "/v1/digest/inclusion?version=2&at=5",
                    410,
                    "before_snapshot",
                ),
                case(
                    "GET",
                    "/v1/digest/frontier?version=2",
                    410,
                    "before_snapshot",
                ),
            ],
        )
        .await,
    );

    // A tiered node (a warm tier only: the object store is tested with a real server in tests/tiering.rs).
    let tiered_dir = tempfile::tempdir().unwrap();
    let tiers =
        letus_core::storage::tiered::Tiered::open(letus_core::storage::tiered::TierConfig {
            warm_dir: Some(tiered_dir.path().join("warm")),
            ..letus_core::storage::tiered::TierConfig::new(tiered_dir.path().join("data"))
        })
        .unwrap();
    let node = Node::open(
        &tiered_dir.path().join("data"),
        Options {
            storage: tiers.shared(),
            ..Options::default()
        },
        TOKEN.into(),
        NodeLimits::default(),
    )
    .unwrap()
    .with_tiers(tiers);
    let tiered = letus_node::server::app(AppState {
        node: Arc::new(node),
        metrics: Arc::new(Metrics::new()),
        static_dirs: vec![],
    });
    produced.extend(run(tiered, vec![case("GET", "/v1/tiers", 200, "")]).await);

    for p in &produced {
        assert!(
            documented.contains(p),
            "{p:?} is produced but not in openapi.json"
        );
    }
    let missing: Vec<_> = documented
        .iter()
        .filter(|(m, p, s)| !produced.contains(&(m.clone(), p.clone(), *s)))
        .filter(|(m, p, s)| *s != 500 && !NEEDS_IO_FAILURE.contains(&(m.as_str(), p.as_str(), *s)))
        .filter(|(m, p, s)| !NEEDS_HUGE_STATE.contains(&(m.as_str(), p.as_str(), *s)))
        .collect();
    assert!(
        missing.is_empty(),
        "documented in openapi.json, produced by no test: {missing:?}"
    );
}

/// Sends raw bytes to `addr` and reads the whole answer (the node closes the connection after these errors).
fn raw(addr: &str, request: &[u8]) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(head.contains("content-type: application/json"), "{head}");
    (
        status,
        serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}")),
    )
}

#[test]
fn errors_hyper_answers_itself_are_json_too() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = common::serve(dir.path(), TOKEN);
    let addr = url.trim_start_matches("http://").to_string();
    // A 40,000-byte key in a URL (80,000 hex digits): above hyper's URI limit.
    let long = format!(
        "GET /v1/tries/0/keys/{} HTTP/1.1\r\nhost: x\r\n\r\n",
        "00".repeat(40_000)
    );
    assert_eq!(raw(&addr, long.as_bytes()).0, 414);
    assert_eq!(
        raw(&addr, long.as_bytes()).1["error"]["code"],
        "uri_too_long"
    );
    let (s, v) = raw(
        &addr,
        format!(
            "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
            "a".repeat(200_000)
        )
        .as_bytes(),
    );
    // 200,000 bytes fit hyper's read buffer, so this is the node's hard limit (MAX_HEADER_BYTES) answering.
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (431, Some("headers_too_large"))
    );
    let many: String = (0..101).map(|i| format!("x-h{i}: 1\r\n")).collect();
    let (s, v) = raw(
        &addr,
        format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{many}\r\n").as_bytes(),
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (431, Some("headers_too_large"))
    );
    let (s, v) = raw(&addr, b"NOT HTTP AT ALL\r\n\r\n");
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("bad_request")));
    // After a good request on the same connection, the good answer is untouched and the error is JSON.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(format!("GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n{long}").as_bytes())
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(
        out.contains("\r\n\r\nokHTTP/1.1 414 URI Too Long\r\n") && out.ends_with("\"}}"),
        "{out}"
    );
    // The router's own fallbacks through the real server.
    let (s, v) = raw(
        &addr,
        b"GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")));
    let (s, v) = raw(
        &addr,
        b"PUT /v1/digest HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
