//! JSON bodies for the errors that hyper answers by itself, before a request reaches the router: a request line
//! that is not HTTP (400), a URI above 65,534 bytes (414), a request head above `http::MAX_HEADER_BYTES` or with more than 100 headers (431). hyper writes these
//! as a bare head (`connection: close`, `content-length: 0`) and closes the connection; [`JsonErrorListener`]
//! wraps each accepted connection so that such a head, when it is a whole write (or the whole last slice of a
//! vectored write), is replaced by the same status with the API's `{"error": {"code", "message"}}` body. Every
//! other byte passes through untouched.
//!
//! The match is on hyper's exact bytes, from the start of a write: hyper writes a head in a buffer of its own, and
//! a body, which may end with any bytes a block wrote, never starts a write with `HTTP/1.1 `.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// `(status line, code, message)` of the heads hyper writes on its own.
const HYPER_ERRORS: [(&str, &str, &str); 3] = [
    (
        "400 Bad Request",
        "bad_request",
        "the request is not valid HTTP/1.1",
    ),
    (
        "414 URI Too Long",
        "uri_too_long",
        "the request URI is above 65,534 bytes; read a long key with POST /v1/tries/{tid}/value",
    ),
    (
        "431 Request Header Fields Too Large",
        "headers_too_large",
        "the request headers are too large",
    ),
];

/// If `buf` is exactly one of hyper's bare error heads, the same status with a JSON body.
///
/// Only a whole write (or the whole last slice of a vectored write) is matched: hyper writes a head in a buffer
/// of its own and a body in slices of its own, and a body may end with any bytes (a snapshot chunk ends with a
/// raw value a block wrote), so bytes after the start of a write are never taken for a head. Should a head
/// ever share a write with what came before it, it goes out as hyper made it: a bare head, still the right
/// status.
pub fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    // Cheap tests first: this runs on every write of every connection.
    const BARE: &[u8] = b"\r\nconnection: close\r\ncontent-length: 0\r\ndate: ";
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let tail = &buf[buf.len().saturating_sub(BARE.len() + 64 + 4)..];
    if !tail.windows(BARE.len()).any(|w| w == BARE) {
        return None;
    }
    for (status, code, message) in HYPER_ERRORS {
        let head = format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: 0\r\ndate: ");
        let Some(date) = buf.strip_prefix(head.as_bytes()) else {
            continue;
        };
        let date = &date[..date.len().saturating_sub(4)];
        if date.is_empty() || date.len() > 64 || !date.iter().all(|b| (0x20..0x7f).contains(b)) {
            continue;
        }
        let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
        let mut out = Vec::with_capacity(head.len() + date.len() + body.len() + 64);
        out.extend_from_slice(
            format!(
                "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\ndate: ",
                body.len()
            )
            .as_bytes(),
        );
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(body.as_bytes());
        return Some(out);
    }
    None
}

/// A connection whose hyper-made error heads get JSON bodies (see the module docs).
pub struct JsonErrors<S> {
    inner: S,
    /// Bytes still to write after a rewrite (already reported to hyper as written).
    pending: Vec<u8>,
    sent: usize,
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// Wraps a connection.
    pub fn new(inner: S) -> Self {
        JsonErrors {
            inner,
            pending: Vec::new(),
            sent: 0,
        }
    }

    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.pending.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Queues `replacement` for a write hyper made of `len` bytes, and starts sending it.
    fn substitute(
        &mut self,
        cx: &mut Context<'_>,
        replacement: Vec<u8>,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        self.pending = replacement;
        self.sent = 0;
        match self.drain(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The rest goes out in poll_flush / poll_shutdown, which hyper calls next.
            _ => Poll::Ready(Ok(len)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        if let Some(r) = rewrite(buf) {
            return this.substitute(cx, r, buf.len());
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        if let Some(last) = bufs.iter().rposition(|b| !b.is_empty()) {
            if let Some(r) = rewrite(&bufs[last]) {
                let mut all: Vec<u8> = bufs[..last]
                    .iter()
                    .flat_map(|b| b.iter().copied())
                    .collect();
                all.extend_from_slice(&r);
                let len = bufs.iter().map(|b| b.len()).sum();
                return this.substitute(cx, all, len);
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// A TCP listener whose connections are [`JsonErrors`]; pass it to `axum::serve`.
pub struct JsonErrorListener(pub TcpListener);

impl axum::serve::Listener for JsonErrorListener {
    type Io = JsonErrors<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (JsonErrors::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn rewrites_only_hypers_bare_error_heads() {
        let date = "date: Tue, 01 Dec 2026 09:18:57 GMT\r\n\r\n";
        let head = format!(
            "HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\n{date}"
        );
        let out = String::from_utf8(rewrite(head.as_bytes()).unwrap()).unwrap();
        let (h, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(h.starts_with("HTTP/1.1 414 URI Too Long\r\n"));
        assert!(h.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "uri_too_long");
        // Bytes that end like a head after the start of a write are left alone: they may be the end of a body
        // (a snapshot chunk ending with a value a block wrote), which must go out byte for byte.
        let body_end = format!("LSNP\x01 chunk bytes, then a value: {head}");
        assert!(rewrite(body_end.as_bytes()).is_none());
        let both = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok{head}");
        assert!(rewrite(both.as_bytes()).is_none());
        // The router's own errors (JSON bodies) and other responses are left alone.
        for other in [
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}".to_string(),
            format!("HTTP/1.1 204 No Content\r\nconnection: close\r\ncontent-length: 0\r\n{date}"),
            "HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: \r\n".to_string(),
        ] {
            assert!(rewrite(other.as_bytes()).is_none(), "{other}");
        }
    }
}
