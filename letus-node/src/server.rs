//! The HTTP API: `app(node) -> Router`, testable in process with `tower::ServiceExt::oneshot`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::api::*;
use crate::body_budget::BodyPermit;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::node::Node;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    /// The node.
    pub node: Arc<Node>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Static directories served as they are, `(url prefix, directory)`: the wallet page and the JS package.
    pub static_dirs: Vec<(String, std::path::PathBuf)>,
}

/// The OpenAPI document, checked into the repository.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The API router.
pub fn app(state: AppState) -> Router {
    with_layers(routes(&state), state)
}

/// The routes, without the layers [`with_layers`] puts around them.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    let mut router = Router::new();
    for (prefix, dir) in &state.static_dirs {
        router = router.nest_service(prefix, tower_http::services::ServeDir::new(dir));
    }
    router
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
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
        .route("/v1/shard/tops", get(shard_tops))
        .route("/v1/shard/blocks", post(write_shard_block))
        .route("/v1/tiers", get(tiers))
        .route("/v1/admin/prune", post(prune).get(prune_status))
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
}

/// What every request goes through, innermost first: the body limit and deadline, a panic turned into that
/// request's `500 internal` (the connection and the node go on), and the metrics, which count that 500 too.
pub(crate) fn with_layers(router: Router<AppState>, state: AppState) -> Router {
    let limit = state.node.limits.max_body_bytes;
    router
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), body_deadline))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |panic: Box<dyn std::any::Any + Send>| {
                let what = crate::node::panic_message(&*panic);
                ApiError::Internal(format!("a handler panicked: {what}")).into_response()
            },
        ))
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// Gives every request body the deadline `limits.body_timeout` from now (its head has just been read).
async fn body_deadline(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let limit = s.node.limits.body_timeout;
    next.run(req.map(|b| Body::new(crate::http::DeadlineBody::new(b, limit))))
        .await
}

/// Counts requests and their latency per route.
async fn track(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let res = next.run(req).await;
    s.metrics
        .observe_request(&route, res.status().as_u16(), started.elapsed());
    res
}

/// Runs blocking store work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
}

/// Runs a read once one of the node's read permits is free: reads queue here, without a thread, rather than all
/// computing at once and taking the cores from the writer.
///
/// The read runs on the async worker that took the permit when that leaves at least one worker free for the
/// network (see [`InlineRead`]); otherwise on the blocking pool. A warm read is tens of microseconds of CPU, and
/// handing it to a pool thread and back cost more than the read itself (two thread wake-ups per request).
async fn read<T: Send + 'static>(
    node: &Node,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = read_permit(&node.reads).await?;
    match InlineRead::try_take(node) {
        Some(_inline) => {
            let _permit = permit;
            f()
        }
        None => {
            blocking(move || {
                let _permit = permit;
                f()
            })
            .await
        }
    }
}

/// One of the read permits of `reads` (a node's or a router's `max_concurrent_reads`), waiting for it.
pub(crate) async fn read_permit(
    reads: &Arc<tokio::sync::Semaphore>,
) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    reads
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// A read computed on an async worker thread. At most `workers - 1` at once, and only on a multi-threaded
/// runtime: a worker computing a read (which may wait on a disk read) serves no connection meanwhile, and one
/// worker must always be left for the network and for the writer's requests. Released on drop, also when the
/// read panics.
struct InlineRead<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> InlineRead<'a> {
    fn try_take(node: &'a Node) -> Option<Self> {
        use std::sync::atomic::Ordering;
        let handle = tokio::runtime::Handle::try_current().ok()?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        let max = handle.metrics().num_workers().saturating_sub(1);
        let active = &node.inline_reads;
        active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| InlineRead(active))
    }
}

impl Drop for InlineRead<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

pub(crate) fn parse_json<T: for<'de> Deserialize<'de>>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| {
        if let Some(t) = crate::http::is_body_timeout(&e) {
            ApiError::BodyTimeout(t.0)
        } else if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::BadRequest(e.body_text())
        }
    })?;
    // JSON text is UTF-8 (RFC 8259 §8.1); serde_json would let invalid bytes through in fields it ignores.
    if let Err(e) = std::str::from_utf8(&body) {
        return Err(ApiError::BadRequest(format!(
            "the body is not valid UTF-8 (byte {})",
            e.valid_up_to()
        )));
    }
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

/// A path parameter that axum could not extract (e.g. a percent-escape that is not UTF-8) is a JSON 400 too.
pub(crate) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t)
        .map_err(|e| ApiError::BadRequest(format!("bad path: {}", e.body_text())))
}

pub(crate) fn tid_param(s: &str) -> Result<u32, ApiError> {
    s.parse()
        .map_err(|_| ApiError::BadRequest(format!("trie id `{s}` is not a u32")))
}

pub(crate) fn version_param(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::BadRequest(format!("version `{s}` is not a decimal u64")))
}

/// Constant-time comparison of the presented token with the configured one.
pub(crate) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn write_block(
    State(s): State<AppState>,
    req: Request,
) -> Result<Json<DigestsResponse>, ApiError> {
    let with_tops = match req.uri().query() {
        None | Some("") | Some("tops=false") => false,
        Some("tops=true") => true,
        Some(q) => {
            return Err(ApiError::BadRequest(format!(
                "`{q}`: the only parameter is tops=true or tops=false"
            )))
        }
    };
    let (req, _body): (BlockRequest, _) = authorized_json(&s, req).await?;
    let node = s.node.clone();
    let started = Instant::now();
    let r = blocking(move || {
        let mut r = node.write_block(req)?;
        if with_tops {
            r.tops = Some(node.shard_tops(Some(r.version))?.tries);
        }
        Ok(r)
    })
    .await?;
    s.metrics.observe_commit(started.elapsed());
    Ok(Json(r))
}

/// The JSON body of a write, read only once its token checked out: a client without it gets its 401 while its
/// body is still unread (hyper then closes the connection rather than read the rest), so it cannot make the node
/// buffer anything or take any of the writers' body budget. The permit is the body's share of that budget: keep
/// it until the request is answered.
async fn authorized_json<T: serde::de::DeserializeOwned>(
    s: &AppState,
    req: Request,
) -> Result<(T, BodyPermit), ApiError> {
    if !authorized(req.headers(), &s.node.token) {
        return Err(ApiError::Unauthorized);
    }
    s.node
        .write_bodies
        .read_json(req, s.node.limits.max_body_bytes)
        .await
}

/// `POST /v1/shard/blocks`: a router's part of a block; answers with the shard's tops at the version.
async fn write_shard_block(
    State(s): State<AppState>,
    req: Request,
) -> Result<Json<DigestsResponse>, ApiError> {
    let (req, _body): (ShardBlockRequest, _) = authorized_json(&s, req).await?;
    let node = s.node.clone();
    let started = Instant::now();
    let r = blocking(move || {
        let mut r = node.write_shard_block(req)?;
        r.tops = Some(node.shard_tops(Some(r.version))?.tries);
        Ok(r)
    })
    .await?;
    s.metrics.observe_commit(started.elapsed());
    Ok(Json(r))
}

#[derive(Deserialize)]
pub(crate) struct VersionQuery {
    version: Option<String>,
}

impl VersionQuery {
    pub(crate) fn get(&self) -> Result<Option<u64>, ApiError> {
        self.version.as_deref().map(version_param).transpose()
    }
}

async fn shard_tops(
    State(s): State<AppState>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Json<ShardTopsResponse>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let v = q.get()?;
    let node = s.node.clone();
    Ok(Json(read(&s.node, move || node.shard_tops(v)).await?))
}

async fn digest_latest(State(s): State<AppState>) -> Result<Json<DigestsResponse>, ApiError> {
    let node = s.node.clone();
    Ok(Json(read(&s.node, move || node.digests(None)).await?))
}

async fn digest_at(
    State(s): State<AppState>,
    version: Result<Path<String>, PathRejection>,
) -> Result<Json<DigestsResponse>, ApiError> {
    let v = version_param(&path(version)?)?;
    let node = s.node.clone();
    Ok(Json(read(&s.node, move || node.digests(Some(v))).await?))
}

#[derive(Deserialize)]
pub(crate) struct RangeQuery {
    from: Option<String>,
    to: Option<String>,
    version: Option<String>,
    at: Option<String>,
    tid: Option<String>,
}

/// Parses the optional history-route parameters: a required version, an optional upper version, the trie id.
pub(crate) fn range(
    q: Result<Query<RangeQuery>, QueryRejection>,
    required: &str,
) -> Result<(u32, u64, Option<u64>), ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let (lower, upper) = if required == "from" {
        (q.from, q.to)
    } else {
        (q.version, q.at)
    };
    let lower = lower.ok_or_else(|| ApiError::BadRequest(format!("`{required}` is required")))?;
    let tid = q.tid.as_deref().map(tid_param).transpose()?.unwrap_or(0);
    Ok((
        tid,
        version_param(&lower)?,
        upper.as_deref().map(version_param).transpose()?,
    ))
}

async fn consistency(
    State(s): State<AppState>,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Json<ConsistencyResponse>, ApiError> {
    let (tid, from, to) = range(q, "from")?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || node.consistency(tid, from, to)).await?,
    ))
}

async fn inclusion(
    State(s): State<AppState>,
    q: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Json<InclusionResponse>, ApiError> {
    let (tid, version, at) = range(q, "version")?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || node.inclusion(tid, version, at)).await?,
    ))
}

#[derive(Deserialize)]
pub(crate) struct FrontierQuery {
    pub(crate) version: Option<String>,
    pub(crate) tid: Option<String>,
}

async fn frontier(
    State(s): State<AppState>,
    q: Result<Query<FrontierQuery>, QueryRejection>,
) -> Result<Json<FrontierResponse>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let tid = q.tid.as_deref().map(tid_param).transpose()?.unwrap_or(0);
    let version = q.version.as_deref().map(version_param).transpose()?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || node.frontier(tid, version)).await?,
    ))
}

async fn value(
    State(s): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Json<ValueResponse>, ApiError> {
    let (tid, key) = path(p)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let tid = tid_param(&tid)?;
    let v = q.get()?;
    let node = s.node.clone();
    Ok(Json(read(&s.node, move || node.value(tid, &key, v)).await?))
}

#[derive(Deserialize)]
pub(crate) struct HistoryQuery {
    proofs: Option<String>,
    limit: Option<String>,
    before: Option<String>,
}

async fn history(
    State(s): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let (tid, key) = path(p)?;
    let tid = tid_param(&tid)?;
    let (proofs, limit, before) = history_query(q)?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || {
            node.history(tid, &key, proofs, limit, before)
        })
        .await?,
    ))
}

/// The parameters of `GET .../history`: `proofs`, `limit`, `before`.
pub(crate) fn history_query(
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<(bool, Option<usize>, Option<u64>), ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let proofs = match q.proofs.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "proofs=`{other}`: use true or false"
            )))
        }
    };
    let limit = q
        .limit
        .as_deref()
        .map(|l| {
            l.parse::<usize>()
                .map_err(|_| ApiError::BadRequest(format!("limit=`{l}` is not a count")))
        })
        .transpose()?;
    let before = q.before.as_deref().map(version_param).transpose()?;
    Ok((proofs, limit, before))
}

/// `GET /v1/tries/{tid}/keys/`: the empty key (a path segment cannot be empty).
async fn value_of_empty_key(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Json<ValueResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let v = q.get()?;
    let node = s.node.clone();
    Ok(Json(read(&s.node, move || node.value(tid, "", v)).await?))
}

/// `POST /v1/tries/{tid}/value`: the GET route with the key in the body, so that any key can be read.
async fn value_post(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    req: Request,
) -> Result<Json<ValueResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let (req, _body): (ValueRequest, _) = s
        .node
        .bodies
        .read_json(req, s.node.limits.max_body_bytes)
        .await?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || node.value(tid, &req.key, req.version)).await?,
    ))
}

/// `POST /v1/tries/{tid}/history`: the GET route with the key in the body.
async fn history_post(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    req: Request,
) -> Result<Json<HistoryResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let (req, _body): (HistoryRequest, _) = s
        .node
        .bodies
        .read_json(req, s.node.limits.max_body_bytes)
        .await?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || {
            node.history(tid, &req.key, req.proofs, req.limit, req.before)
        })
        .await?,
    ))
}

async fn multi_proof(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    req: Request,
) -> Result<Json<MultiProofResponse>, ApiError> {
    let tid = tid_param(&path(p)?)?;
    let (req, _body): (MultiProofRequest, _) = s
        .node
        .bodies
        .read_json(req, s.node.limits.max_body_bytes)
        .await?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || node.multi_proof(tid, req)).await?,
    ))
}

async fn block(
    State(s): State<AppState>,
    version: Result<Path<String>, PathRejection>,
) -> Result<Json<BlockResponse>, ApiError> {
    let v = version_param(&path(version)?)?;
    let node = s.node.clone();
    Ok(Json(read(&s.node, move || node.block(v)).await?))
}

async fn export(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (tid, v) = trie_and_version(p, q)?;
    // A stream holds a blocking thread and a snapshot until its client has read it (or stalled for the idle
    // timeout, which drops the connection): their number is bounded. It holds no lock a commit needs.
    let permit = s
        .node
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams(s.node.limits.max_streams))?;
    // Check the request before the 200 goes out: afterwards an error can only cut the stream short.
    {
        let node = s.node.clone();
        blocking(move || {
            node.digests(v).and_then(|d| {
                if d.digests.iter().any(|x| x.tid == tid) {
                    Ok(())
                } else {
                    Err(ApiError::UnknownTrie(tid))
                }
            })
        })
        .await?;
    }
    let node = s.node.clone();
    Ok(blocking_stream(permit, move |sink| {
        node.export(tid, v, sink)
    }))
}

/// The trie in the path and the optional `version` of the query.
pub(crate) fn trie_and_version(
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<VersionQuery>, QueryRejection>,
) -> Result<(u32, Option<u64>), ApiError> {
    let tid = tid_param(&path(p)?)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    Ok((tid, q.get()?))
}

/// A binary answer produced on a blocking thread, which holds `permit` until it ends: done, failed (the stream
/// is cut short), or stopped because the client went away (`produce`'s sink then answers `false`).
pub(crate) fn blocking_stream(
    permit: tokio::sync::OwnedSemaphorePermit,
    produce: impl FnOnce(&mut dyn FnMut(Vec<u8>) -> bool) -> Result<u64, ApiError> + Send + 'static,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let tx2 = tx.clone();
        if let Err(e) = produce(&mut |chunk| tx2.blocking_send(Ok(chunk)).is_ok()) {
            let _ = tx.blocking_send(Err(std::io::Error::other(format!("{e:?}"))));
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

#[derive(Deserialize)]
pub(crate) struct ManifestQuery {
    version: Option<String>,
    max_pairs: Option<String>,
}

/// The trie, version and `max_pairs` of a manifest request.
pub(crate) fn manifest_params(
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ManifestQuery>, QueryRejection>,
) -> Result<(u32, Option<u64>, u64), ApiError> {
    let tid = tid_param(&path(p)?)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let v = q.version.as_deref().map(version_param).transpose()?;
    let max_pairs = match q.max_pairs.as_deref() {
        None => crate::node::DEFAULT_SNAPSHOT_PAIRS,
        Some(m) => m
            .parse()
            .map_err(|_| ApiError::BadRequest(format!("max_pairs `{m}` is not a decimal u64")))?,
    };
    Ok((tid, v, max_pairs))
}

/// The trie, entry index, version, depth and prefix of a chunk request.
pub(crate) fn chunk_params(
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<ChunkQuery>, QueryRejection>,
) -> Result<(u32, u32, u64, u8, [u8; 32]), ApiError> {
    let (tid, index) = path(p)?;
    let tid = tid_param(&tid)?;
    let index: u32 = index
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("chunk index `{index}` is not a u32")))?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let missing = |what: &str| ApiError::BadRequest(format!("`{what}` is required"));
    let v = version_param(q.version.as_deref().ok_or_else(|| missing("version"))?)?;
    let depth: u8 = q
        .depth
        .as_deref()
        .ok_or_else(|| missing("depth"))?
        .parse()
        .map_err(|_| ApiError::BadRequest("`depth` is not a number up to 64".into()))?;
    let prefix = crate::error::hex_field(
        q.prefix.as_deref().ok_or_else(|| missing("prefix"))?,
        "prefix",
    )?;
    let prefix: [u8; 32] = prefix
        .try_into()
        .map_err(|_| ApiError::BadRequest("`prefix` must be 32 bytes (64 hex digits)".into()))?;
    Ok((tid, index, v, depth, prefix))
}

/// The trie and versions of a changes request.
pub(crate) fn changes_params(
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<(u32, u64, u64), ApiError> {
    let tid = tid_param(&path(p)?)?;
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let missing = |what: &str| ApiError::BadRequest(format!("`{what}` is required"));
    let from = version_param(q.from.as_deref().ok_or_else(|| missing("from"))?)?;
    let to = version_param(q.to.as_deref().ok_or_else(|| missing("to"))?)?;
    Ok((tid, from, to))
}

/// `GET /v1/tries/{tid}/snapshot`: the snapshot manifest (SPEC.md §12.1). Computing one walks every leaf, so it
/// runs under a stream permit (not a read permit, which it would hold for seconds) and is cached.
async fn snapshot_manifest(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ManifestQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (tid, v, max_pairs) = manifest_params(p, q)?;
    let permit = s
        .node
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams(s.node.limits.max_streams))?;
    let node = s.node.clone();
    let m = blocking(move || {
        let _permit = permit;
        node.snapshot_manifest(tid, v, max_pairs)
    })
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        m.as_ref().clone(),
    )
        .into_response())
}

#[derive(Deserialize)]
pub(crate) struct ChunkQuery {
    version: Option<String>,
    depth: Option<String>,
    prefix: Option<String>,
}

/// `GET /v1/tries/{tid}/snapshot/chunks/{index}?version&depth&prefix`: one chunk (SPEC.md §12.3). The entry's
/// depth and prefix come from the manifest the client verified, so the node keeps no state per join.
async fn snapshot_chunk(
    State(s): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<ChunkQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (tid, index, v, depth, prefix) = chunk_params(p, q)?;
    let node = s.node.clone();
    let c = read(&s.node, move || {
        node.snapshot_chunk(tid, v, index, depth, &prefix)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], c).into_response())
}

#[derive(Deserialize)]
pub(crate) struct ChangesQuery {
    from: Option<String>,
    to: Option<String>,
}

/// `GET /v1/tries/{tid}/changes?from&to`: the key changes between two versions (how a joined node follows).
async fn changes(
    State(s): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<ChangesQuery>, QueryRejection>,
) -> Result<Json<ChangesResponse>, ApiError> {
    let (tid, from, to) = changes_params(p, q)?;
    let node = s.node.clone();
    Ok(Json(
        read(&s.node, move || node.changes(tid, from, to)).await?,
    ))
}

/// `GET /`: where to go from here (the demo prints this URL first).
async fn index(State(s): State<AppState>) -> Json<serde_json::Value> {
    let mut links = serde_json::json!({
        "digest": "/v1/digest",
        "openapi": "/openapi.json",
        "metrics": "/metrics",
        "healthz": "/healthz",
    });
    if s.static_dirs.iter().any(|(p, _)| p == "/wallet") {
        links["wallet"] = "/wallet/index.html".into();
    }
    Json(serde_json::json!({
        "name": "letus",
        "version": env!("CARGO_PKG_VERSION"),
        "docs": "letus-node/API.md",
        "links": links,
    }))
}

async fn metrics(State(s): State<AppState>) -> Result<Response, ApiError> {
    let turn = s.metrics.status_reads.clone().acquire_owned().await;
    let node = s.node.clone();
    let (stats, tiers) = blocking(move || {
        let _turn = turn;
        Ok((node.stats()?, node.tier_status()))
    })
    .await?;
    let mut text = s.metrics.render(stats);
    if let Some(t) = tiers {
        text.push_str(&crate::metrics::render_tiers(&t));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// Prunes now, with the write token (pruning removes state for good).
async fn prune(State(s): State<AppState>, req: Request) -> Result<Json<PruneResponse>, ApiError> {
    if !authorized(req.headers(), &s.node.token) {
        return Err(ApiError::Unauthorized);
    }
    let (req, _body): (PruneRequest, _) = authorized_json(&s, req).await?;
    let node = s.node.clone();
    Ok(Json(
        blocking(move || node.prune(req.keep, req.merge)).await?,
    ))
}

/// `GET /v1/admin/prune`: the prune running now and how far it is, with the write token (what a prune is doing
/// is the operator's business).
async fn prune_status(
    State(s): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<crate::api::PruneStatusResponse>, ApiError> {
    if !authorized(&headers, &s.node.token) {
        return Err(ApiError::Unauthorized);
    }
    let node = s.node.clone();
    Ok(Json(blocking(move || Ok(node.prune_status())).await?))
}

/// `GET /v1/tiers`: where the store's sealed files are, what the mover and the object store did.
async fn tiers(State(s): State<AppState>) -> Result<Response, ApiError> {
    let turn = s.metrics.status_reads.clone().acquire_owned().await;
    let node = s.node.clone();
    let st = blocking(move || {
        let _turn = turn;
        Ok(node.tier_status())
    })
    .await?;
    match st {
        Some(t) => Ok(Json(crate::api::tier_status_json(&t)).into_response()),
        None => Err(ApiError::BadRequest(
            "this node is not tiered (start it with --warm-dir or --cold-bucket)".into(),
        )),
    }
}

#[cfg(test)]
mod inline_read_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use letus_core::Options;

    use super::read;
    use crate::error::ApiError;
    use crate::node::{Node, NodeLimits};

    fn node(dir: &std::path::Path, reads: usize) -> Arc<Node> {
        let limits = NodeLimits {
            max_concurrent_reads: reads,
            ..NodeLimits::default()
        };
        Arc::new(Node::open(dir, Options::default(), "t".into(), limits).unwrap())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// With two workers, at most one read computes on a worker: the others go to the blocking pool, all finish,
    /// and the network's worker keeps running tasks meanwhile.
    #[test]
    fn reads_on_workers_leave_one_worker_free_and_the_rest_go_to_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let node = node(dir.path(), 4);
        let rt = runtime();
        let most_inline = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let started = Instant::now();
            let mut reads = Vec::new();
            for _ in 0..4 {
                let (n, most) = (node.clone(), most_inline.clone());
                reads.push(tokio::spawn(async move {
                    let n2 = n.clone();
                    read(&n, move || {
                        most.fetch_max(n2.inline_reads.load(Ordering::Acquire), Ordering::AcqRel);
                        std::thread::sleep(Duration::from_millis(300));
                        Ok::<_, ApiError>(())
                    })
                    .await
                }));
            }
            // While the four reads sleep, a timer task on the runtime still runs promptly.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let tick = Instant::now();
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(
                tick.elapsed() < Duration::from_millis(250),
                "no worker was left for other tasks"
            );
            for r in reads {
                r.await.unwrap().unwrap();
            }
            // Four reads of 300 ms with four permits: they ran at once, not one after another.
            assert!(started.elapsed() < Duration::from_millis(1100));
        });
        assert_eq!(most_inline.load(Ordering::Acquire), 1);
        assert_eq!(node.inline_reads.load(Ordering::Acquire), 0);
    }

    /// A read that panics on a worker releases its permit and its worker slot: later reads run.
    #[test]
    fn a_read_that_panics_inline_gives_back_its_permit() {
        let dir = tempfile::tempdir().unwrap();
        let node = node(dir.path(), 1);
        let rt = runtime();
        rt.block_on(async {
            let n = node.clone();
            let panicked = tokio::spawn(async move {
                read(&n, || -> Result<(), ApiError> { panic!("a read panics") }).await
            })
            .await;
            assert!(panicked.unwrap_err().is_panic());
            assert_eq!(node.inline_reads.load(Ordering::Acquire), 0);
            assert_eq!(node.reads.available_permits(), 1);
            let n = node.clone();
            let v = tokio::spawn(async move { read(&n, || Ok::<_, ApiError>(7)).await })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(v, 7);
        });
    }
}
