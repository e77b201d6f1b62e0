//! The connection loop of `letus serve`, written on hyper because `axum::serve` has none of these settings: a
//! deadline for a request's head, a deadline for a response write that makes no progress, and a graceful
//! shutdown that gives up after a deadline. Also the request-body deadline that the router applies.
//!
//! Together with the router's body deadline ([`DeadlineBody`]) and its limit on concurrent streams, these bound
//! how long any client can hold a connection or a blocking thread without making progress (no client holds a lock
//! a commit needs: reads and exports read snapshots):
//!
//! - a client that does not finish its request head within `header_timeout` loses the connection (hyper's
//!   timer; it also closes a keep-alive connection idle for that long);
//! - a request body that has not fully arrived `body_timeout` after its head is answered `408 body_timeout`;
//! - a response write that makes no progress for `stream_idle_timeout` (the client stopped reading) drops the
//!   connection, and with it the response body: an export's walk then ends at its next chunk and releases its
//!   snapshot, its thread and its stream permit;
//! - after the shutdown signal, connections get `shutdown_timeout` to finish; the rest are dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::wire::JsonErrors;

/// The largest request head (request line and headers) the node parses; above it, 431 `headers_too_large`.
/// hyper's own buffer limit alone is soft (a head that arrives in one large read can pass it), so this is the
/// hard one. It is above the 65,534-byte URI limit, so that a long URI still answers 414.
pub const MAX_HEADER_BYTES: usize = 128 * 1024;

/// Timeouts of the connection loop.
#[derive(Clone, Debug)]
pub struct ServerSettings {
    /// The whole request head (request line and headers) must arrive within this; also the longest a keep-alive
    /// connection stays open without a new request.
    pub header_timeout: Duration,
    /// A response write that makes no progress for this long (the client reads nothing) closes the connection.
    pub stream_idle_timeout: Duration,
    /// After the shutdown signal, connections still open after this long are dropped.
    pub shutdown_timeout: Duration,
    /// Most connections open at once; past it no new one is accepted (they wait in the listen backlog) until one
    /// ends, so that connections cannot take the file descriptors the store needs.
    pub max_connections: usize,
}

/// The default of [`ServerSettings::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            header_timeout: Duration::from_secs(10),
            stream_idle_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(10),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// How a [`serve`] ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Connections still open at the shutdown deadline, dropped without finishing their request.
    pub dropped: usize,
}

/// Serves `app` on `listener` until `shutdown` completes, then drains the connections for at most
/// `settings.shutdown_timeout`. Every connection task has ended (finished or dropped) when this returns; blocking
/// work they started (a commit on the blocking pool) may still be running, and ends with the runtime.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> ShutdownReport {
    let mut listener = listener;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            // Finished connections are reaped as they end, so the set holds only the open ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            // `Listener::accept` for TcpListener retries on errors (e.g. too many open files) after a pause.
            (tcp, _addr) = axum::serve::Listener::accept(&mut listener), if conns.len() < settings.max_connections => {
                let io = TokioIo::new(JsonErrors::new(WriteIdle::new(tcp, settings.stream_idle_timeout)));
                let service = TowerToHyperService::new(app.clone());
                let mut stop = stop_rx.clone();
                let header_timeout = settings.header_timeout;
                conns.spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_timeout)
                        .max_header_size(MAX_HEADER_BYTES)
                        .serve_connection(io, service);
                    tokio::pin!(conn);
                    tokio::select! {
                        r = conn.as_mut() => log_conn_end(r),
                        // The one change is to `true` (or the sender gone: serve is over either way).
                        _ = stop.changed() => {
                            // Finishes the request in progress (if any), then closes; idle connections close now.
                            conn.as_mut().graceful_shutdown();
                            log_conn_end(conn.await);
                        }
                    }
                });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(settings.shutdown_timeout, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    let mut report = ShutdownReport::default();
    if drained.is_err() {
        report.dropped = conns.len();
        tracing::warn!(
            connections = report.dropped,
            "shutdown deadline reached: dropping the connections still open"
        );
        conns.shutdown().await;
    }
    report
}

fn log_conn_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        // A client that went away, a head timeout, a stalled write: the client's doing, not the node's.
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// A connection whose writes fail with `TimedOut` after making no progress for `limit`: a client that stops
/// reading cannot keep a response (and what produces it) alive.
pub struct WriteIdle<S> {
    inner: S,
    limit: Duration,
    /// Running while the inner stream refuses writes; cleared by any write that goes through.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteIdle<S> {
    /// Wraps a connection.
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteIdle {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Records the outcome of a write-side poll: progress clears the stall timer, `Pending` starts it or, when it
    /// has run out, turns into an error.
    fn check<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteIdle<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteIdle<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.check(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.check(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.check(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.check(cx, r)
    }
}

/// The error a request body gives once its deadline has passed; the handlers answer it `408 body_timeout`.
#[derive(Debug)]
pub struct BodyTimeout(pub Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {:?}", self.0)
    }
}

impl std::error::Error for BodyTimeout {}

/// Whether `e`, or an error it wraps, is a [`BodyTimeout`].
pub fn is_body_timeout<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimeout> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<BodyTimeout>() {
            return Some(t);
        }
        cur = e.source();
    }
    None
}

/// A request body that must be complete by a deadline set when its head arrived: past it, every poll fails with
/// [`BodyTimeout`]. A total deadline and not a per-read one, so that a client trickling a byte at a time cannot
/// hold a connection and a growing buffer for ever.
pub struct DeadlineBody {
    inner: Body,
    deadline: Instant,
    limit: Duration,
    /// Created at the first poll that has to wait: a body nobody reads (most GETs) costs no timer.
    timer: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    /// `inner`, to be complete within `limit` from now.
    pub fn new(inner: Body, limit: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Instant::now() + limit,
            limit,
            timer: None,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(this.limit)))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => {
                let deadline = this.deadline;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(this.limit)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
