//! The few etcd v3 calls a sharding router makes, through etcd's JSON gateway (`/v3/...`, keys and values in
//! base64, 64-bit integers as decimal strings): leases, a transactional create and compare-and-put, and reads.
//!
//! Why not the `etcd-client` crate: it speaks gRPC through tonic and compiles etcd's protobuf files in its build
//! script, which needs `protoc` on every machine that builds letus, for five calls the gateway answers over the
//! HTTP client the node already has. The gateway is part of etcd (`etcd-server` in Debian serves it on the client
//! port) and is etcd's documented API for clients without gRPC.

use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

/// Why an etcd call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EtcdError {
    /// No answer from etcd (refused, timed out, cut).
    Unreachable(String),
    /// etcd answered with an error, or with something this client does not understand.
    Answer(String),
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::Unreachable(m) => write!(f, "etcd cannot be reached: {m}"),
            EtcdError::Answer(m) => write!(f, "etcd answered: {m}"),
        }
    }
}

impl std::error::Error for EtcdError {}

/// A key's value and its revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    /// The value.
    pub value: Vec<u8>,
    /// The revision of the key's last change.
    pub mod_revision: i64,
}

/// An etcd endpoint.
#[derive(Clone)]
pub struct Etcd {
    base: String,
    agent: ureq::Agent,
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

impl Etcd {
    /// The etcd at `url` (`http://127.0.0.1:2379`).
    pub fn new(url: &str) -> Etcd {
        Etcd {
            base: url.trim_end_matches('/').to_string(),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(5)))
                .build()
                .into(),
        }
    }

    fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let url = format!("{}{path}", self.base);
        let mut res = self
            .agent
            .post(&url)
            .send_json(&body)
            .map_err(|e| EtcdError::Unreachable(format!("{url}: {e}")))?;
        let status = res.status();
        let text = res
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| EtcdError::Unreachable(format!("{url}: {e}")))?;
        if !status.is_success() {
            return Err(EtcdError::Answer(format!(
                "{url}: {status}: {}",
                text.chars().take(300).collect::<String>()
            )));
        }
        serde_json::from_str(&text).map_err(|e| EtcdError::Answer(format!("{url}: {e}")))
    }

    /// A new lease of `ttl` seconds: its id.
    pub fn grant(&self, ttl: u64) -> Result<i64, EtcdError> {
        let v = self.call("/v3/lease/grant", json!({ "TTL": ttl }))?;
        int(&v["ID"]).ok_or_else(|| EtcdError::Answer(format!("no lease id in {v}")))
    }

    /// Renews lease `id`: `false` when it has expired (or never existed).
    pub fn keepalive(&self, id: i64) -> Result<bool, EtcdError> {
        let v = self.call("/v3/lease/keepalive", json!({ "ID": id.to_string() }))?;
        Ok(int(&v["result"]["TTL"]).is_some_and(|t| t > 0))
    }

    /// Revokes lease `id` (its keys go at once).
    pub fn revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", json!({ "ID": id.to_string() }))
            .map(drop)
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &str) -> Result<Option<Kv>, EtcdError> {
        let v = self.call("/v3/kv/range", json!({ "key": B64.encode(key) }))?;
        let Some(kv) = v["kvs"].as_array().and_then(|a| a.first()) else {
            return Ok(None);
        };
        let value = B64
            .decode(kv["value"].as_str().unwrap_or(""))
            .map_err(|e| EtcdError::Answer(format!("{key}: {e}")))?;
        let mod_revision = int(&kv["mod_revision"])
            .ok_or_else(|| EtcdError::Answer(format!("{key}: no mod_revision")))?;
        Ok(Some(Kv {
            value,
            mod_revision,
        }))
    }

    /// Puts `key` only if it does not exist (bound to `lease` if given): the revision of the write, or `None`
    /// when the key exists.
    pub fn create(
        &self,
        key: &str,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<Option<i64>, EtcdError> {
        let mut put = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        if let Some(l) = lease {
            put["lease"] = json!(l.to_string());
        }
        let v = self.call(
            "/v3/kv/txn",
            json!({
                "compare": [{ "key": B64.encode(key), "result": "EQUAL", "target": "CREATE",
                              "create_revision": "0" }],
                "success": [{ "request_put": put }],
            }),
        )?;
        Ok(if v["succeeded"].as_bool() == Some(true) {
            Some(
                int(&v["header"]["revision"])
                    .ok_or_else(|| EtcdError::Answer(format!("no revision in {v}")))?,
            )
        } else {
            None
        })
    }

    /// Puts `key` only while `guard` was last changed at revision `guard_revision` (a fence: whoever holds the
    /// guard key at that revision may write, nobody after it): whether it was written.
    pub fn put_if(
        &self,
        guard: &str,
        guard_revision: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, EtcdError> {
        let v = self.call(
            "/v3/kv/txn",
            json!({
                "compare": [{ "key": B64.encode(guard), "result": "EQUAL", "target": "MOD",
                              "mod_revision": guard_revision.to_string() }],
                "success": [{ "request_put": { "key": B64.encode(key), "value": B64.encode(value) } }],
            }),
        )?;
        Ok(v["succeeded"].as_bool() == Some(true))
    }
}
