//! The one error type of the HTTP API: typed variants mapped to a status code and a stable error code, always
//! rendered as `{"error": {"code", "message"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::{ErrorBody, ErrorDetail};

/// An API error.
#[derive(Debug)]
#[non_exhaustive]
pub enum ApiError {
    /// A hex field does not decode.
    BadHex(String),
    /// The body is not the expected JSON, or a parameter is malformed.
    BadRequest(String),
    /// A history `before` that is not the version of one of the key's entries.
    InvalidCursor(u64),
    /// The body is larger than the configured limit.
    PayloadTooLarge(usize),
    /// A key or value above the store's limits, or too many keys.
    TooLarge(String),
    /// No or wrong bearer token on a write.
    Unauthorized,
    /// The trie does not exist at that version.
    UnknownTrie(u32),
    /// The version was never written.
    VersionNotFound(u64),
    /// The version is below the oldest one this node holds: it joined from a snapshot of `oldest`.
    BeforeSnapshot {
        /// The version asked for.
        version: u64,
        /// The oldest version held.
        oldest: u64,
    },
    /// The version's state was pruned (`--keep-versions`); its digest and history proofs still answer.
    Pruned {
        /// The version asked for.
        version: u64,
        /// The oldest version whose state the node holds.
        oldest: u64,
    },
    /// Nothing has been written yet.
    Empty,
    /// The HTTP method is not allowed on this route.
    MethodNotAllowed,
    /// No block stored at that version.
    BlockNotFound(u64),
    /// No such route.
    NotFound,
    /// A different block was already written at this version.
    Conflict(u64),
    /// The version is not the next one.
    NotNext {
        /// What was sent.
        got: u64,
        /// What is expected.
        expected: u64,
    },
    /// The request body did not fully arrive within the body timeout.
    BodyTimeout(std::time::Duration),
    /// As many streams (exports) as the node allows are running; the limit is given.
    TooManyStreams(usize),
    /// The request bodies being received and handled take the whole body budget (`max_buffered_body_bytes`,
    /// given); the body was not read.
    TooManyBodies(u64),
    /// A block write failed on an I/O error (the next write reopens the store), or a panic stopped writes until restart.
    Unavailable(String),
    /// A read needed a file in the cold tier (the object store), which cannot be reached now.
    TierUnavailable(String),
    /// A write of a key in a subtree this shard does not hold.
    WrongShard(String),
    /// A router could not reach a shard, or a shard failed a request for a reason of its own.
    ShardUnavailable(String),
    /// A router found the shards' answers inconsistent with each other or with its own roots.
    ShardInconsistent(String),
    /// A shard's error, passed on by a router as the shard answered it.
    Upstream {
        /// The shard's status.
        status: StatusCode,
        /// The shard's error.
        detail: crate::api::ErrorDetail,
    },
    /// A router that lost its lease in etcd: another router leads the cluster now.
    Fenced,
    /// A route a router does not offer (yet): ask a shard directly.
    NotSharded(&'static str),
    /// A subtree move the router cannot start now (one is under way, or it would leave a shard empty).
    MoveRefused(String),
    /// Anything else (I/O, corruption): logged, reported without details that could leak paths.
    Internal(String),
}

impl ApiError {
    /// Status and stable code.
    pub fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadHex(_) => (StatusCode::BAD_REQUEST, "bad_hex"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::InvalidCursor(_) => (StatusCode::BAD_REQUEST, "invalid_cursor"),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::UnknownTrie(_) => (StatusCode::NOT_FOUND, "unknown_trie"),
            ApiError::VersionNotFound(_) | ApiError::Empty => {
                (StatusCode::NOT_FOUND, "version_not_found")
            }
            ApiError::BeforeSnapshot { .. } => (StatusCode::GONE, "before_snapshot"),
            ApiError::Pruned { .. } => (StatusCode::GONE, "pruned"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::BlockNotFound(_) => (StatusCode::NOT_FOUND, "block_not_found"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "version_conflict"),
            ApiError::NotNext { .. } => (StatusCode::CONFLICT, "version_not_next"),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::TooManyStreams(_) => (StatusCode::SERVICE_UNAVAILABLE, "too_many_streams"),
            ApiError::TooManyBodies(_) => (StatusCode::SERVICE_UNAVAILABLE, "too_many_bodies"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::TierUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "tier_unavailable"),
            ApiError::WrongShard(_) => (StatusCode::BAD_REQUEST, "wrong_shard"),
            ApiError::ShardUnavailable(_) => (StatusCode::BAD_GATEWAY, "shard_unavailable"),
            ApiError::ShardInconsistent(_) => (StatusCode::BAD_GATEWAY, "shard_inconsistent"),
            ApiError::Upstream { status, .. } => (*status, "upstream"),
            ApiError::NotSharded(_) => (StatusCode::NOT_IMPLEMENTED, "not_sharded"),
            ApiError::MoveRefused(_) => (StatusCode::CONFLICT, "move_refused"),
            ApiError::Fenced => (StatusCode::SERVICE_UNAVAILABLE, "fenced"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    fn message(&self) -> String {
        match self {
            ApiError::BadHex(f) => format!("{f} is not valid hex"),
            ApiError::BadRequest(m) | ApiError::TooLarge(m) => m.clone(),
            ApiError::InvalidCursor(v) => format!(
                "before={v} is not the version of an entry in this key's history (pass an answer's `next`)"
            ),
            ApiError::PayloadTooLarge(limit) => {
                format!("request body above the limit of {limit} bytes")
            }
            ApiError::Unauthorized => {
                "writes need the header `Authorization: Bearer <token>`".into()
            }
            ApiError::UnknownTrie(t) => format!("trie {t} does not exist at that version"),
            ApiError::VersionNotFound(v) => format!("version {v} was never written"),
            ApiError::Empty => "nothing has been written yet".into(),
            ApiError::BeforeSnapshot { version, oldest } => format!(
                "version {version} is before {oldest}, the oldest version this node holds (it started from a snapshot of {oldest})"
            ),
            ApiError::Pruned { version, oldest } => format!(
                "the state of version {version} is pruned: the oldest version whose state this node holds is {oldest} (digests and history proofs of every version still answer)"
            ),
            ApiError::MethodNotAllowed => "method not allowed on this route".into(),
            ApiError::BlockNotFound(v) => format!("no block stored at version {v}"),
            ApiError::NotFound => "no such route".into(),
            ApiError::Conflict(v) => {
                format!("a different block was already written at version {v}")
            }
            ApiError::NotNext { got, expected } => {
                format!("version {got} is not the next version {expected}")
            }
            ApiError::BodyTimeout(limit) => {
                format!("the request body did not arrive within {limit:?} of its headers")
            }
            ApiError::TooManyStreams(n) => {
                format!("{n} streams are running, the most this node serves at once; retry later")
            }
            ApiError::TooManyBodies(n) => format!(
                "the request bodies in progress take the whole body budget of {n} bytes; this body was not read: retry later"
            ),
            ApiError::Unavailable(m) => format!("the store cannot take writes now: {m}"),
            ApiError::TierUnavailable(m) => format!(
                "the data asked for is in the cold tier, which cannot be reached now ({m}); retry later"
            ),
            ApiError::WrongShard(m) => m.clone(),
            ApiError::ShardUnavailable(m) => format!("a shard failed: {m}"),
            ApiError::ShardInconsistent(m) => format!("the shards' answers do not fit together: {m}"),
            ApiError::Upstream { detail, .. } => detail.message.clone(),
            ApiError::Fenced => "this router's lease in etcd ended: another router leads the cluster; write there".into(),
            ApiError::NotSharded(route) => format!(
                "a sharding router does not offer {route}; ask the shard that holds the keys"
            ),
            ApiError::MoveRefused(m) => format!("the move cannot start: {m}"),
            ApiError::Internal(_) => "internal error (see the node's log)".into(),
        }
    }
}

impl ApiError {
    /// The answer to a block write that failed with `e`: an I/O error (a full disk, a failing device) is
    /// `unavailable`, since nothing was acknowledged and the next write reopens the store; the rest as `From`.
    pub fn from_write(e: letus_core::Error) -> Self {
        match e {
            letus_core::Error::Io { source, .. } => ApiError::Unavailable(format!(
                "I/O error ({source}); the write was not acknowledged, and the next write reopens the store"
            )),
            e => e.into(),
        }
    }
}

impl From<letus_core::Error> for ApiError {
    fn from(e: letus_core::Error) -> Self {
        use letus_core::Error as E;
        match e {
            E::UnknownTrie(t) => ApiError::UnknownTrie(t),
            E::VersionNotFound(v) => ApiError::VersionNotFound(v),
            E::BeforeOldest { version, oldest } => ApiError::BeforeSnapshot { version, oldest },
            E::Pruned { version, oldest } => ApiError::Pruned { version, oldest },
            E::ChunkTooLarge { .. } | E::TooManyChanges { .. } => ApiError::TooLarge(e.to_string()),
            E::InvalidCursor(v) => ApiError::InvalidCursor(v),
            E::TooLarge { what, size, limit } => ApiError::TooLarge(format!(
                "{what} of {size} bytes is above the limit of {limit}"
            )),
            E::Poisoned => ApiError::Unavailable(e.to_string()),
            E::Io { ref source, .. }
                if letus_core::storage::tiered::is_cold_unavailable(source) =>
            {
                ApiError::TierUnavailable(source.to_string())
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.parts();
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        if let ApiError::Upstream { status, detail } = self {
            return (status, Json(ErrorBody { error: detail })).into_response();
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: self.message(),
                oldest: match self {
                    ApiError::Pruned { oldest, .. } | ApiError::BeforeSnapshot { oldest, .. } => {
                        Some(oldest)
                    }
                    _ => None,
                },
            },
        };
        let mut res = (status, Json(body)).into_response();
        if let ApiError::TooManyStreams(_) | ApiError::TooManyBodies(_) = self {
            // A stream ends within the idle timeout of its client's last read, or when it is done; a body within
            // the body timeout.
            res.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, 1.into());
        }
        res
    }
}

/// Decodes a hex field, naming it in the error.
pub fn hex_field(s: &str, field: &str) -> Result<Vec<u8>, ApiError> {
    letus_verify::hex::decode(s).ok_or_else(|| ApiError::BadHex(field.into()))
}
