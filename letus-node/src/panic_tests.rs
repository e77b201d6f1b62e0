//! A handler's panic fails that request only: the in-process router, with panics injected into a block write at
//! each of its stages (`Node::panic_at`, test builds only) and into an async handler.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use http_body_util::BodyExt;
use letus_core::Options;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::metrics::Metrics;
use crate::node::{Node, NodeLimits, WriteStage};
use crate::server::{app, routes, with_layers, AppState};

/// A handler that panics (the never type spelled as a response type).
async fn boom() -> StatusCode {
    panic!("boom")
}

const TOKEN: &str = "panic-token";

fn state(dir: &std::path::Path) -> AppState {
    let node = Node::open(dir, Options::default(), TOKEN.into(), NodeLimits::default()).unwrap();
    AppState {
        node: Arc::new(node),
        metrics: Arc::new(Metrics::new()),
        static_dirs: vec![],
    }
}

async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"));
    let req = match body {
        Some(b) => req.body(Body::from(b.to_string())).unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Block `version` writing `key` (hex) = "01", with raw block "aa".
fn block(version: u64, key: &str) -> Value {
    json!({"version": version, "writes": [{"tid": 0, "key": key, "value": "01"}], "block": "aa"})
}

#[tokio::test]
async fn a_panic_while_staging_fails_that_write_only_and_leaves_nothing_staged() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path());
    let node = s.node.clone();
    let app = app(s);
    assert_eq!(
        call(&app, "POST", "/v1/blocks", Some(block(1, "0a")))
            .await
            .0,
        200
    );
    *node.panic_at.lock().unwrap() = Some(WriteStage::Staging);
    let (status, v) = call(&app, "POST", "/v1/blocks", Some(block(2, "0b"))).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("internal"))
    );
    // The node goes on: reads, and the same version written again (a different block: the panicked one left
    // neither its staged write nor its raw block behind).
    let (status, v) = call(&app, "GET", "/v1/digest", None).await;
    assert_eq!((status, v["version"].as_u64()), (StatusCode::OK, Some(1)));
    assert_eq!(
        call(&app, "POST", "/v1/blocks", Some(block(2, "0c")))
            .await
            .0,
        200
    );
    let (status, v) = call(&app, "GET", "/v1/tries/0/keys/0b?version=2", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        v["value"],
        Value::Null,
        "the panicked write's key was not committed with the next block"
    );
    let (_, v) = call(&app, "GET", "/v1/tries/0/keys/0c?version=2", None).await;
    assert_eq!(v["value"], "01");
    assert_eq!(
        call(&app, "POST", "/v1/blocks", Some(block(3, "0d")))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn a_panic_inside_the_append_or_the_commit_stops_writes_until_restart_and_reads_go_on() {
    for stage in [WriteStage::Block, WriteStage::Commit] {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path());
        let node = s.node.clone();
        let app = app(s);
        assert_eq!(
            call(&app, "POST", "/v1/blocks", Some(block(1, "0a")))
                .await
                .0,
            200
        );
        *node.panic_at.lock().unwrap() = Some(stage);
        let (status, v) = call(&app, "POST", "/v1/blocks", Some(block(2, "0b"))).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, Some("internal")),
            "{stage:?}"
        );
        // What the panic left half-done is unknown: writes are refused with a clear 503, not a 500 for ever.
        let (status, v) = call(&app, "POST", "/v1/blocks", Some(block(2, "0b"))).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")),
            "{stage:?}"
        );
        // Reads go on, the block store's (after a panic under its lock: `Block`) included.
        let (status, v) = call(&app, "GET", "/v1/digest", None).await;
        assert_eq!(
            (status, v["version"].as_u64()),
            (StatusCode::OK, Some(1)),
            "{stage:?}"
        );
        let (status, v) = call(&app, "GET", "/v1/blocks/1", None).await;
        assert_eq!(
            (status, v["block"].as_str()),
            (StatusCode::OK, Some("aa")),
            "{stage:?}"
        );
        // Version 2's block, appended (with `Commit`) before the panic, is not served: its state never was
        // (found by review: it answered 200 with a block the restart then replaced).
        let (status, v) = call(&app, "GET", "/v1/blocks/2", None).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("block_not_found")),
            "{stage:?}"
        );
        assert_eq!(
            call(&app, "GET", "/metrics", None).await.0,
            200,
            "{stage:?}"
        );
        // A restart recovers from disk: version 2 can be written.
        drop(app);
        let node = Arc::try_unwrap(node).ok().expect("the router is gone");
        node.close().unwrap();
        let app = crate::server::app(state(dir.path()));
        let (status, v) = call(&app, "POST", "/v1/blocks", Some(block(2, "0c"))).await;
        assert_eq!(
            (status, v["version"].as_u64()),
            (StatusCode::OK, Some(2)),
            "{stage:?}: {v}"
        );
    }
}

#[tokio::test]
async fn a_panic_in_an_async_handler_is_a_json_500_for_that_request_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(dir.path());
    let app = with_layers(routes(&s).route("/boom", get(boom)), s);
    let (status, v) = call(&app, "GET", "/boom", None).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("internal"))
    );
    assert_eq!(call(&app, "GET", "/boom", None).await.0, 500);
    assert_eq!(
        call(&app, "POST", "/v1/blocks", Some(block(1, "0a")))
            .await
            .0,
        200
    );
    // The metrics layer sits outside the panic handler, so the failed requests are counted.
    let res = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text =
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("letus_http_requests_total")
                && l.contains("route=\"/boom\"")
                && l.contains("status=\"500\"")
                && l.ends_with(" 2")),
        "{text}"
    );
}
