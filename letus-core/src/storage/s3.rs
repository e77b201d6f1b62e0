//! [`S3`]: the cold tier on an S3-compatible object store, through the `object_store` crate (feature `s3`).
//!
//! Why `object_store`: it is the Apache Arrow project's client (what SlateDB builds on), with ranged GETs,
//! multipart uploads, conditional puts (`If-None-Match: *`, the fence), retries with backoff and timeouts. It is
//! asynchronous; [`S3`] owns a small tokio runtime of its own and every call waits for its request on the calling
//! thread, so the engine's blocking code can call it from any thread (a tokio worker's too).
//!
//! HTTPS uses rustls with the `ring` provider; plain HTTP only when [`S3Config::allow_http`] says so (local
//! test servers). Path-style addressing (`endpoint/bucket/key`) is used unless virtual hosting is asked for.
//! Credentials come from the configuration, which takes them from the environment or a file: they are never
//! printed (the `Debug` of [`S3Config`] redacts them).

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

use super::tiered::{ColdStore, ColdUnavailable};
use super::FileRef;

/// Where the object store is and how to reach it.
#[derive(Clone, Default)]
pub struct S3Config {
    /// The endpoint, e.g. `http://127.0.0.1:8333`; `None` for AWS itself (from the region).
    pub endpoint: Option<String>,
    /// The bucket.
    pub bucket: String,
    /// The region (`us-east-1` if unset).
    pub region: Option<String>,
    /// Allow `http://` endpoints (local servers only).
    pub allow_http: bool,
    /// Virtual-hosted-style requests (`bucket.endpoint/key`) instead of path style.
    pub virtual_hosted: bool,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Timeout of one request.
    pub request_timeout: Option<Duration>,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("virtual_hosted", &self.virtual_hosted)
            .field(
                "access_key_id",
                &self.access_key_id.as_ref().map(|_| "(set)"),
            )
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "(set)"),
            )
            .finish()
    }
}

impl S3Config {
    /// Takes the credentials from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` where they are set.
    pub fn credentials_from_env(mut self) -> Self {
        if let Ok(v) = std::env::var("AWS_ACCESS_KEY_ID") {
            self.access_key_id = Some(v);
        }
        if let Ok(v) = std::env::var("AWS_SECRET_ACCESS_KEY") {
            self.secret_access_key = Some(v);
        }
        self
    }

    /// Takes the credentials from file `path`: lines `access_key_id = ...` and `secret_access_key = ...`
    /// (`#` starts a comment). The file's content is never echoed in an error.
    pub fn credentials_from_file(mut self, path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"').to_string();
            match k.trim() {
                "access_key_id" | "aws_access_key_id" => self.access_key_id = Some(v),
                "secret_access_key" | "aws_secret_access_key" => self.secret_access_key = Some(v),
                _ => {}
            }
        }
        if self.access_key_id.is_none() || self.secret_access_key.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} must set access_key_id and secret_access_key",
                    PathBuf::from(path).display()
                ),
            ));
        }
        Ok(self)
    }
}

/// An S3-compatible bucket as the cold tier's [`ColdStore`].
pub struct S3 {
    store: Arc<AmazonS3>,
    /// Always `Some` until dropped (taken in `Drop`).
    rt: Option<tokio::runtime::Runtime>,
    describe: String,
}

impl Drop for S3 {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside an async context: let it end in the background.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl fmt::Debug for S3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3({})", self.describe)
    }
}

/// Bytes of one part of a multipart upload; files up to this size go in one PUT.
const PART: usize = 8 << 20;

impl S3 {
    /// A client for `cfg` (no request is sent until the first call).
    pub fn new(cfg: &S3Config) -> io::Result<S3> {
        // rustls needs a process-wide provider; a second install (another S3 in this process) is refused and
        // harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut opts = ClientOptions::new()
            .with_timeout(cfg.request_timeout.unwrap_or(Duration::from_secs(30)))
            .with_connect_timeout(Duration::from_secs(3));
        if cfg.allow_http {
            opts = opts.with_allow_http(true);
        }
        let retry = RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
            ..RetryConfig::default()
        };
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&cfg.bucket)
            .with_region(cfg.region.as_deref().unwrap_or("us-east-1"))
            .with_virtual_hosted_style_request(cfg.virtual_hosted)
            .with_client_options(opts)
            .with_retry(retry);
        if let Some(e) = &cfg.endpoint {
            b = b.with_endpoint(e);
        }
        if let (Some(k), Some(s)) = (&cfg.access_key_id, &cfg.secret_access_key) {
            b = b.with_access_key_id(k).with_secret_access_key(s);
        } else {
            b = b.with_skip_signature(true);
        }
        let store = b
            .build()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("letus-s3")
            .enable_all()
            .build()?;
        Ok(S3 {
            store: Arc::new(store),
            rt: Some(rt),
            describe: format!(
                "s3 {} bucket {}",
                cfg.endpoint.as_deref().unwrap_or("(aws)"),
                cfg.bucket
            ),
        })
    }

    /// Runs `fut` on this client's runtime and waits for it on the calling thread.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| ColdUnavailable::io("the object-store client stopped"))?;
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        match rx.recv() {
            Ok(r) => r.map_err(to_io),
            Err(_) => Err(ColdUnavailable::io("the object-store client stopped")),
        }
    }
}

/// Maps an `object_store` error: not found stays `NotFound`; anything that is the store's or the network's
/// fault is [`ColdUnavailable`].
fn to_io(e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => {
            io::Error::new(io::ErrorKind::NotFound, e.to_string())
        }
        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } => {
            io::Error::new(io::ErrorKind::AlreadyExists, e.to_string())
        }
        other => ColdUnavailable::io(other.to_string()),
    }
}

impl ColdStore for S3 {
    fn upload(&self, key: &str, src: FileRef, len: u64) -> io::Result<()> {
        let path = ObjPath::from(key);
        let store = self.store.clone();
        let read = move |at: u64, n: usize| -> object_store::Result<Vec<u8>> {
            let mut buf = vec![0u8; n];
            src.read_exact_at(&mut buf, at)
                .map_err(|e| object_store::Error::Generic {
                    store: "local",
                    source: Box::new(e),
                })?;
            Ok(buf)
        };
        if len <= PART as u64 {
            let n = usize::try_from(len).unwrap_or(PART);
            return self.run(async move {
                let body = read(0, n)?;
                store.put(&path, PutPayload::from(body)).await.map(drop)
            });
        }
        self.run(async move {
            let mut up = store.put_multipart(&path).await?;
            let mut at = 0u64;
            let result = async {
                while at < len {
                    let n = usize::try_from((len - at).min(PART as u64)).unwrap_or(PART);
                    // The read is a local pread of at most 8 MiB on this client's own runtime.
                    let part = read(at, n)?;
                    up.put_part(PutPayload::from(part)).await?;
                    at += n as u64;
                }
                up.complete().await.map(drop)
            }
            .await;
            if result.is_err() {
                let _ = up.abort().await;
            }
            result
        })
    }

    fn get_range(&self, key: &str, start: u64, end: u64) -> io::Result<Vec<u8>> {
        let path = ObjPath::from(key);
        let store = self.store.clone();
        self.run(async move { store.get_range(&path, start..end).await.map(|b| b.to_vec()) })
    }

    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let path = ObjPath::from(key);
        let store = self.store.clone();
        let r = self.run(async move {
            let r = store.get(&path).await?;
            r.bytes().await.map(|b| b.to_vec())
        });
        match r {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> io::Result<bool> {
        let path = ObjPath::from(key);
        let store = self.store.clone();
        let r = self.run(async move {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            store.put_opts(&path, PutPayload::from(bytes), opts).await
        });
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn delete(&self, key: &str) -> io::Result<()> {
        let path = ObjPath::from(key);
        let store = self.store.clone();
        match self.run(async move { store.delete(&path).await }) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let path = ObjPath::from(prefix);
        let store = self.store.clone();
        self.run(async move {
            let mut s = store.list(Some(&path));
            let mut keys = Vec::new();
            while let Some(m) = s.next().await {
                keys.push(m?.location.to_string());
            }
            Ok(keys)
        })
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}
