//! The router's HTTP API: the routes of a node that a router can answer for the whole sharded state, with the
//! node's request limits, body deadline and panic handling; its shard map and moves. A node's own administration
//! (tiers, pruning) answers `501 not_sharded`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router as Routes};

use super::router::{MapResponse, MoveRequest, Router};
use crate::api::*;
use crate::error::ApiError;
use crate::server::{
    authorized, blocking, blocking_stream, changes_params, chunk_params, history_query,
    manifest_params, path, range, tid_param, trie_and_version, version_param, ChangesQuery,
    ChunkQuery, FrontierQuery, HistoryQuery, ManifestQuery, RangeQuery, VersionQuery,
};

type S = State<Arc<Router>>;

/// The router's API.
pub fn app(router: Arc<Router>) -> axum::Router {
    let not_sharded = |what: &'static str| move || async move { ApiError::NotSharded(what) };
    let limit = router.limits.max_body_bytes;
    Routes::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/v1/blocks", post(write_block))
        .route("/v1/blocks/{version}", get(block))
        .route("/v1/digest", get(digest_latest))
        .route("/v1/digest/consistency", get(consistency))
        .route("/v1/digest/inclusion", get(inclusion))
        .route("/v1/digest/frontier", get(frontier))
        .route("/v1/digest/{version}", get(digest_at))
        .route("/v1/tries/{tid}/keys/", get(value_of_empty_key))
        .route("/v1/tries/{tid}/keys/{key}", get(value))
        .route("/v1/tries/{tid}/keys/{key}/history", get(history))
        .route("/v1/tries/{tid}/value", post(value_post))
        .route("/v1/tries/{tid}/history", post(history_post))
        .route("/v1/tries/{tid}/proofs", post(multi_proof))
        .route("/v1/tries/{tid}/export", get(export))
        .route("/v1/tries/{tid}/snapshot", get(snapshot_manifest))
        .route(
            "/v1/tries/{tid}/snapshot/chunks/{index}",
            get(snapshot_chunk),
        )
        .route("/v1/tries/{tid}/changes", get(changes))
        .route("/v1/shard/tops", get(not_sharded("tops")))
        .route("/v1/shard/blocks", post(not_sharded("shard blocks")))
        .route("/v1/shard/map", get(shard_map))
        .route("/v1/shard/moves", post(request_move))
        .route("/v1/tiers", get(not_sharded("tiers")))
        .route(
            "/v1/admin/prune",
            post(not_sharded("pruning")).get(not_sharded("pruning")),
        )
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            router.clone(),
            body_deadline,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |panic: Box<dyn std::any::Any + Send>| {
                let what = crate::node::panic_message(&*panic);
                ApiError::Internal(format!("a handler panicked: {what}")).into_response()
            },
        ))
        .layer(middleware::from_fn_with_state(router.clone(), track))
        .with_state(router)
}

/// Counts requests and their latency per route, as a node does.
async fn track(State(r): S, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    r.metrics
        .observe_request(&route, res.status().as_u16(), started.elapsed());
    res
}

async fn metrics(State(r): S) -> Result<Response, ApiError> {
    let r2 = r.clone();
    let status = blocking(move || Ok(r2.status())).await?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        r.metrics.render_router(&status),
    )
        .into_response())
}

async fn body_deadline(State(r): S, req: Request, next: Next) -> Response {
    let limit = r.limits.body_timeout;
    next.run(req.map(|b| Body::new(crate::http::DeadlineBody::new(b, limit))))
        .await
}

/// Runs a router call, which waits on the shards, off the async threads.
async fn call<T: Send + 'static>(
    r: &Arc<Router>,
    f: impl FnOnce(&Router) -> Result<T, ApiError> + Send + 'static,
) -> Result<Json<T>, ApiError> {
    let r = r.clone();
    blocking(move || f(&r)).await.map(Json)
}

/// A read: [`call`] under one of the router's read permits (at most `max_concurrent_reads` at once; the rest
/// wait), since each may hold answers of every shard.
async fn read<T: Send + 'static>(
    r: &Arc<Router>,
    f: impl FnOnce(&Router) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = crate::server::read_permit(&r.reads).await?;
    let r = r.clone();
    blocking(move || {
        let _permit = permit;
        f(&r)
    })
    .await
}

async fn write_block(State(r): S, req: Request) -> Result<Json<DigestsResponse>, ApiError> {
    // The token before any byte of the body, as on a node.
    if !authorized(req.headers(), &r.token) {
        return Err(ApiError::Unauthorized);
    }
    let (req, _body): (BlockRequest, _) = r
        .write_bodies
        .read_json(req, r.limits.max_body_bytes)
        .await?;
    let started = std::time::Instant::now();
    let answer = call(&r, move |r| r.write_block(req)).await;
    if answer.is_ok() {
        r.metrics.observe_commit(started.elapsed());
    }
    answer
}

/// `GET /v1/tries/{tid}/export`: streamed as a node streams it, under the same limit of concurrent streams.
async fn export(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (tid, v) = trie_and_version(p, q)?;
    let permit = r
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams(r.limits.max_streams))?;
    // Checked before the 200 goes out: afterwards an error can only cut the stream short.
    let v = {
        let r = r.clone();
        blocking(move || r.export_version(tid, v)).await?
    };
    let r = r.clone();
    Ok(blocking_stream(permit, move |sink| r.export(tid, v, sink)))
}

async fn snapshot_manifest(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ManifestQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (tid, v, max_pairs) = manifest_params(p, q)?;
    let m = read(&r, move |r| r.snapshot_manifest(tid, v, max_pairs)).await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
        m,
    )
        .into_response())
}

async fn snapshot_chunk(
    State(r): S,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<ChunkQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (tid, index, v, depth, prefix) = chunk_params(p, q)?;
    let c = read(&r, move |r| r.snapshot_chunk(tid, v, index, depth, &prefix)).await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
        c,
    )
        .into_response())
}

async fn changes(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<ChangesResponse>, ApiError> {
    let (tid, from, to) = changes_params(p, q)?;
    read(&r, move |r| r.changes(tid, from, to)).await.map(Json)
}

async fn shard_map(State(r): S) -> Result<Json<MapResponse>, ApiError> {
    call(&r, |r| r.map_view()).await
}

/// `POST /v1/shard/moves`: authenticated like a block write; the next block starts the move.
async fn request_move(State(r): S, req: Request) -> Result<Response, ApiError> {
    if !authorized(req.headers(), &r.token) {
        return Err(ApiError::Unauthorized);
    }
    let (req, _body): (MoveRequest, _) = r
        .write_bodies
        .read_json(req, r.limits.max_body_bytes)
        .await?;
    let Json(map) = call(&r, move |r| r.request_move(req)).await?;
    Ok((axum::http::StatusCode::ACCEPTED, Json(map)).into_response())
}

async fn block(
    State(r): S,
    v: Result<Path<String>, PathRejection>,
) -> Result<Json<BlockResponse>, ApiError> {
    let v = version_param(&path(v)?)?;
    read(&r, move |r| r.block(v)).await.map(Json)
}

async fn digest_latest(State(r): S) -> Result<Json<DigestsResponse>, ApiError> {
    read(&r, |r| r.digests(None)).await.map(Json)
}

async fn digest_at(
    State(r): S,
    v: Result<Path<String>, PathRejection>,
) -> Result<Json<DigestsResponse>, ApiError> {
    let v = version_param(&path(v)?)?;
    read(&r, move |r| r.digests(Some(v))).await.map(Json)
}

async fn consistency(
    State(r): S,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Json<ConsistencyResponse>, ApiError> {
    let (tid, from, to) = range(q, "from")?;
    read(&r, move |r| r.consistency(tid, from, to))
        .await
        .map(Json)
}

async fn inclusion(
    State(r): S,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Json<InclusionResponse>, ApiError> {
    let (tid, version, at) = range(q, "version")?;
    read(&r, move |r| r.inclusion(tid, version, at))
        .await
        .map(Json)
}

async fn frontier(
    State(r): S,
    q: Result<Query<FrontierQuery>, QueryRejection>,
) -> Result<Json<FrontierResponse>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let tid = q.tid.as_deref().map(tid_param).transpose()?.unwrap_or(0);
    let version = q.version.as_deref().map(version_param).transpose()?;
    read(&r, move |r| r.frontier(tid, version)).await.map(Json)
}

async fn value(
    State(r): S,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Json<ValueResponse>, ApiError> {
    let (tid, key) = path(p)?;
    let tid = tid_param(&tid)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let v = q.get()?;
    read(&r, move |r| r.value(tid, &key, v)).await.map(Json)
}

async fn value_of_empty_key(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Json<ValueResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let v = q.get()?;
    read(&r, move |r| r.value(tid, "", v)).await.map(Json)
}

async fn value_post(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    req: Request,
) -> Result<Json<ValueResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let (req, _body): (ValueRequest, _) = r.bodies.read_json(req, r.limits.max_body_bytes).await?;
    read(&r, move |r| r.value(tid, &req.key, req.version))
        .await
        .map(Json)
}

async fn history(
    State(r): S,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let (tid, key) = path(p)?;
    let tid = tid_param(&tid)?;
    let (proofs, limit, before) = history_query(q)?;
    let req = HistoryRequest {
        key,
        proofs,
        limit,
        before,
    };
    read(&r, move |r| r.history(tid, req)).await.map(Json)
}

async fn history_post(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    req: Request,
) -> Result<Json<HistoryResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let (req, _body): (HistoryRequest, _) =
        r.bodies.read_json(req, r.limits.max_body_bytes).await?;
    read(&r, move |r| r.history(tid, req)).await.map(Json)
}

async fn multi_proof(
    State(r): S,
    p: Result<Path<String>, PathRejection>,
    req: Request,
) -> Result<Json<MultiProofResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let (req, _body): (MultiProofRequest, _) =
        r.bodies.read_json(req, r.limits.max_body_bytes).await?;
    read(&r, move |r| r.multi_proof(tid, req)).await.map(Json)
}
