//! No client can freeze the node: the token is checked before a block's body is read (100 connections without
//! one, announcing 20 MB bodies, get their 401 while the node's memory stays bounded); a SIGTERM while a client
//! holds a half-sent body ends the node within its shutdown deadline and loses nothing acknowledged; a body that
//! does not arrive in time is a 408, a head that does not arrive closes the connection; an export whose client
//! stops reading is dropped after the idle timeout, releasing its thread and its stream permit, and past the
//! stream limit an export is a 503 with a stable code; an export read at 1 KB/s does not hold up 100 block writes
//! and still returns exactly its version; request bodies share one budget, past which a request is refused with its
//! body unread. A zero timeout or stream limit is refused at start.
//!
//! The deadlines below are generous bounds on "finishes", far below what the node would take without the limit
//! under test (which is for ever, or the 600 s body timeout set where it matters); nothing here times anything.

mod common;

use common::agent;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use letus_core::Options;
use letus_node::api::{BlockRequest, DigestsResponse, WriteOp};
use letus_node::http::{ServerSettings, ShutdownReport};
use letus_node::metrics::Metrics;
use letus_node::node::{Node, NodeLimits};
use letus_node::server::{app, AppState};
use letus_verify::hex::encode as hex;
use letus_verify::Limits;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "limits-token";

fn block_request(version: u64, keys: u32, value_len: usize) -> BlockRequest {
    BlockRequest {
        version,
        writes: (0..keys)
            .map(|i| WriteOp {
                tid: 0,
                key: hex(format!("v{version}k{i}").as_bytes()),
                value: Some(hex(&vec![(i % 251) as u8; value_len])),
            })
            .collect(),
        block: Some(hex(format!("raw {version}").as_bytes())),
        access_list: vec![],
    }
}

fn post_block(url: &str, version: u64) -> DigestsResponse {
    let mut res = agent()
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(block_request(version, 20, 8))
        .unwrap();
    assert_eq!(res.status(), 200);
    res.body_mut().read_json().unwrap()
}

fn digest(url: &str, version: Option<u64>) -> Value {
    let path = version.map_or("/v1/digest".to_string(), |v| format!("/v1/digest/{v}"));
    agent()
        .get(format!("{url}{path}"))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap()
}

/// Waits for the child to exit, for at most `limit`: its exit status, or None if it is still running (then it is
/// killed).
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Reads from `s` until the end of a response head; the head.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("a response head");
        assert!(n == 1, "the connection closed inside a head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

#[test]
fn sigterm_while_a_body_is_half_sent_exits_within_the_shutdown_deadline_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The body timeout is far longer than the test: only the shutdown deadline can end that request.
    let (mut node, url) = common::serve_with(
        dir.path(),
        TOKEN,
        &["--shutdown-timeout-secs", "2", "--body-timeout-secs", "600"],
    );
    let acked: Vec<DigestsResponse> = (1..=5).map(|v| post_block(&url, v)).collect();
    let body = serde_json::to_vec(&block_request(6, 2_000, 64)).unwrap();
    let mut s = TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\n\r\n",
        body.len()
    )
    .unwrap();
    // hyper sends the 100 when the handler starts reading the body: the request is in progress from here on.
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 100 Continue\r\n"), "{head}");
    s.write_all(&body[..body.len() / 2]).unwrap();
    Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status()
        .unwrap();
    let status = wait_at_most(&mut node, Duration::from_secs(30))
        .expect("the node exits after its 2 s shutdown deadline, not after the 600 s body timeout");
    assert!(status.success(), "{status:?}");
    // The half-sent request got no answer: its connection was closed.
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest)),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
    // Everything acknowledged is there, the half-sent block is not, and writing goes on at version 6.
    let (mut node, url) = common::serve(dir.path(), TOKEN);
    for a in &acked {
        assert_eq!(
            serde_json::to_value(a).unwrap(),
            digest(&url, Some(a.version))
        );
    }
    assert_eq!(digest(&url, None)["version"], 5);
    post_block(&url, 6);
    node.kill().unwrap();
    node.wait().unwrap();
}

/// A field of /proc/PID/status, in KiB.
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_hundred_blocks_without_a_token_get_401_unread_and_the_node_memory_stays_bounded() {
    const CONNECTIONS: usize = 100;
    const ANNOUNCED: usize = 20_000_000;
    const SENT: usize = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (mut node, url) = common::serve(dir.path(), TOKEN);
    let pid = node.id();
    let addr = url.trim_start_matches("http://").to_string();
    post_block(&url, 1);
    let peak_before = proc_status_kib(pid, "VmHWM:");
    let barrier = Arc::new(std::sync::Barrier::new(CONNECTIONS + 1));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let addr = addr.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let auth = if i % 2 == 0 {
                    String::new()
                } else {
                    "authorization: Bearer wrong-token\r\n".to_string()
                };
                let mut req = format!(
                    "POST /v1/blocks HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\n\
                     content-length: {ANNOUNCED}\r\n\r\n"
                )
                .into_bytes();
                req.extend(std::iter::repeat_n(b' ', SENT));
                // The node answers without reading this and closes: the write may fail part way.
                let _ = s.write_all(&req);
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                let text = String::from_utf8_lossy(&out).to_string();
                // Hold the connection (the client stalls) while the node's memory is measured.
                barrier.wait();
                drop(s);
                text
            })
        })
        .collect();
    // Every client has its answer before the measure: the barrier waits for all of them.
    barrier.wait();
    let peak_after = proc_status_kib(pid, "VmHWM:");
    let rss = proc_status_kib(pid, "VmRSS:");
    for c in clients {
        let text = c.join().unwrap();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no answer: {text:?}"));
        assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    // 100 bodies of 1 MiB, had they been read, are 100 MiB; 20 MB announced each, 2 GB.
    assert!(
        peak_after.saturating_sub(peak_before) < 48 * 1024,
        "peak RSS grew from {peak_before} KiB to {peak_after} KiB (now {rss} KiB)"
    );
    // The node still serves.
    assert_eq!(digest(&url, None)["version"], 1);
    node.kill().unwrap();
    node.wait().unwrap();
}

/// An in-process node serving on a real socket through [`letus_node::http::serve`].
struct Served {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<ShutdownReport>,
    node: Arc<Node>,
    _dir: tempfile::TempDir,
}

async fn serve_in_process(limits: NodeLimits, settings: ServerSettings) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(Node::open(dir.path(), Options::default(), TOKEN.into(), limits).unwrap());
    let router = app(AppState {
        node: node.clone(),
        metrics: Arc::new(Metrics::new()),
        static_dirs: vec![],
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(letus_node::http::serve(
        listener,
        router,
        settings,
        async move {
            let _ = stopped.await;
        },
    ));
    Served {
        addr,
        stop,
        server,
        node,
        _dir: dir,
    }
}

/// One request on its own connection (`connection: close`): status, head and body.
async fn request(addr: std::net::SocketAddr, raw: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .expect("the answer within the deadline")
        .unwrap();
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8(out[..at].to_vec()).unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, out[at + 4..].to_vec())
}

/// The body of a chunked response.
fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap(), 16).unwrap();
        b = &b[line + 2..];
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[..n]);
        b = &b[n + 2..];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_whose_client_stops_reading_is_dropped_after_the_idle_timeout() {
    let served = serve_in_process(
        NodeLimits {
            max_streams: 1,
            ..NodeLimits::default()
        },
        ServerSettings {
            stream_idle_timeout: Duration::from_secs(1),
            ..ServerSettings::default()
        },
    )
    .await;
    // About 10 MiB of state: more than the socket buffers, hyper's and the stream's channel hold together, so a
    // client that reads nothing leaves the export's walk blocked (on its snapshot, holding no lock).
    let node = served.node.clone();
    tokio::task::spawn_blocking(move || {
        for v in 1..=5 {
            node.write_block(block_request(v, 128, 16 << 10)).unwrap();
        }
    })
    .await
    .unwrap();
    let addr = served.addr;

    // A client that reads the head of its export and then nothing, through a small receive buffer.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /v1/tries/0/export HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 256];
        let n = stalled.read(&mut buf).await.unwrap();
        assert!(n > 0, "the export's head");
        head.extend_from_slice(&buf[..n]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));

    // The one stream permit is taken: another export is refused with a stable code.
    let (status, head, body) = request(
        addr,
        b"GET /v1/tries/0/export HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (503, Some("too_many_streams"))
    );
    assert!(head.to_lowercase().contains("retry-after: 1"), "{head}");

    // A writer commits while the stalled export is open: the export holds no lock a commit needs.
    let block = serde_json::to_vec(&block_request(6, 1, 8)).unwrap();
    let mut raw = format!(
        "POST /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
        block.len()
    )
    .into_bytes();
    raw.extend_from_slice(&block);
    let (status, _, body) = request(addr, &raw).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let written: DigestsResponse = serde_json::from_slice(&body).unwrap();

    // The client stays stalled past the idle timeout: its connection is dropped, and reading on, it finds the
    // stream cut short.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut rest))
        .await
        .expect("the stalled connection is closed, not left open");
    assert!(
        read.is_ok() || read.as_ref().unwrap_err().kind() == ErrorKind::ConnectionReset,
        "{read:?}"
    );
    assert!(
        !rest.ends_with(b"0\r\n\r\n"),
        "the dropped stream has no final chunk"
    );

    // The permit came back: a client that reads gets the whole export, and it verifies.
    let (status, _, body) = request(
        addr,
        b"GET /v1/tries/0/export HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    let export = unchunk(&body);
    assert!(rest.len() + head.len() < export.len());
    let summary =
        letus_verify::export::verify_export(&export, &written.digests[0].root, &Limits::default())
            .unwrap();
    assert_eq!(summary.records, 5 * 128 + 1);

    served.stop.send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), served.server)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report, ShutdownReport { dropped: 0 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_bodies_time_out_and_shutdown_drops_what_is_left_at_its_deadline() {
    let served = serve_in_process(
        NodeLimits {
            body_timeout: Duration::from_secs(1),
            ..NodeLimits::default()
        },
        ServerSettings {
            header_timeout: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(1),
            ..ServerSettings::default()
        },
    )
    .await;
    let addr = served.addr;
    // A body that stops after 10 of its 100 bytes: 408 with the JSON error, then the connection closes.
    let (status, _, body) = request(
        addr,
        b"POST /v1/tries/0/value HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"key\": \"0",
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (408, Some("body_timeout"))
    );
    // A head that never ends: the connection is closed without an answer.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .expect("the connection is closed");
    assert!(
        read.is_ok() || read.as_ref().unwrap_err().kind() == ErrorKind::ConnectionReset,
        "{read:?}"
    );
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));

    served.stop.send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), served.server)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report, ShutdownReport { dropped: 0 });

    // A write whose body is half-sent when the shutdown begins, with a body timeout far longer than the
    // shutdown's: the shutdown drops it at its deadline.
    let served = serve_in_process(
        NodeLimits {
            body_timeout: Duration::from_secs(600),
            ..NodeLimits::default()
        },
        ServerSettings {
            shutdown_timeout: Duration::from_secs(1),
            ..ServerSettings::default()
        },
    )
    .await;
    let addr = served.addr;
    let slow = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!(
                "POST /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\
                 content-length: 1000\r\nexpect: 100-continue\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = vec![0u8; 25];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
        s.write_all(b"{\"version\": 1, ").await.unwrap();
        s
    });
    let _held = slow.await.unwrap();
    served.stop.send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), served.server)
        .await
        .expect("serve returns after its shutdown deadline")
        .unwrap();
    assert_eq!(report, ShutdownReport { dropped: 1 });
}

/// Reads are public, so their bodies are what anyone can make the node hold: with a body budget of one largest
/// body, a client sending such a body slowly leaves the next reader `503 too_many_bodies` (body unread, with
/// `Retry-After`), and once that slow body timed out the budget serves again. A write without a token is still
/// refused first, taking nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_share_one_budget_and_past_it_a_request_is_refused_unread() {
    let served = serve_in_process(
        NodeLimits {
            max_body_bytes: 64 << 10,
            max_buffered_body_bytes: 64 << 10,
            body_timeout: Duration::from_secs(4),
            ..NodeLimits::default()
        },
        ServerSettings::default(),
    )
    .await;
    let addr = served.addr;
    let node = served.node.clone();
    tokio::task::spawn_blocking(move || node.write_block(block_request(1, 4, 8)).unwrap())
        .await
        .unwrap();
    let key = hex(b"v1k0");
    let small = format!("{{\"key\": \"{key}\"}}");
    let read = format!(
        "POST /v1/tries/0/value HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{small}",
        small.len()
    );
    let (status, _, _) = request(addr, read.as_bytes()).await;
    assert_eq!(status, 200);

    // A multi-proof announcing the largest body, sent slowly: it holds the whole budget until its deadline.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(
        format!(
            "POST /v1/tries/0/proofs HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{{\"keys\": [",
            64 << 10
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // The slow body's reservation is taken once its head is read; a small read then waits out the budget's
    // wait and is refused, its body unread.
    let started = Instant::now();
    let mut refused = None;
    while started.elapsed() < Duration::from_secs(3) && refused.is_none() {
        let (status, head, body) = request(addr, read.as_bytes()).await;
        if status == 503 {
            refused = Some((head, body));
        }
    }
    let (head, body) = refused.expect("a read refused while the slow body holds the budget");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "too_many_bodies", "{v}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    // A write without a token still gets its 401 at once, whatever the budget.
    let (status, _, _) = request(
        addr,
        format!(
            "POST /v1/blocks HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
            60 << 10
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(status, 401);

    // The slow body times out (408), which gives its share back.
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut out))
        .await
        .expect("the slow body's answer")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let (status, _, _) = request(addr, read.as_bytes()).await;
    assert_eq!(status, 200);
}

#[test]
fn a_zero_timeout_or_stream_limit_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("letus.toml");
    std::fs::write(&config, "shutdown_timeout_secs = 0\n").unwrap();
    let letus = env!("CARGO_BIN_EXE_letus");
    for (args, named) in [
        (vec!["--max-streams", "0"], "max_streams"),
        (vec!["--body-timeout-secs", "0"], "body_timeout_secs"),
        (
            vec!["--config", config.to_str().unwrap()],
            "shutdown_timeout_secs",
        ),
    ] {
        let out = Command::new(letus)
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{named} must be at least 1")),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_max_proof_keys_no_verifier_accepts_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let letus = env!("CARGO_BIN_EXE_letus");
    for keys in [0, 10_001] {
        let config = dir.path().join("letus.toml");
        std::fs::write(&config, format!("max_proof_keys = {keys}\n")).unwrap();
        let out = Command::new(letus)
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .arg("--data")
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{keys}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("max_proof_keys must be 1 to 10000"),
            "{keys}: {err}"
        );
    }
}

/// Done-means 2 of the readers issue, with the real binary: a client reads an export at 1 KB/s while 100 blocks
/// are written (some of them overwriting the exported keys). Every write answers within a bound, reads keep
/// answering, and the export, read to its end afterwards, is exactly its version's state.
#[test]
fn a_slow_export_does_not_hold_up_writes_and_returns_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, url) = common::serve(dir.path(), TOKEN);
    // About 10 MiB of state: more than the socket buffers and the stream's channel hold, so the export's walk
    // waits on the slow client for the whole run.
    for v in 1..=5 {
        let mut res = agent()
            .post(format!("{url}/v1/blocks"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send_json(block_request(v, 128, 16 << 10))
            .unwrap();
        assert_eq!(
            res.status(),
            200,
            "{}",
            res.body_mut().read_to_string().unwrap()
        );
    }
    let root5 = digest(&url, Some(5))["digests"][0]["root"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = url.trim_start_matches("http://").to_string();
    let (slow_tx, slow_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(
            b"GET /v1/tries/0/export?version=5 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        // 1 KB per second until the writer is done.
        while slow_rx.try_recv().is_err() {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the export ended early");
            got.extend_from_slice(&buf[..n]);
            std::thread::sleep(Duration::from_secs(1));
        }
        let slow_bytes = got.len();
        s.read_to_end(&mut got).unwrap();
        (slow_bytes, got)
    });
    std::thread::sleep(Duration::from_secs(2));
    let mut slowest = Duration::ZERO;
    for v in 6..=105u64 {
        // Overwrite some of the exported keys, and add new ones.
        let mut req = block_request(v, 10, 8);
        for i in 0..10u64 {
            req.writes.push(WriteOp {
                tid: 0,
                key: hex(format!("v1k{}", (v * 10 + i) % 128).as_bytes()),
                value: Some(hex(&v.to_le_bytes())),
            });
        }
        let started = Instant::now();
        let mut res = agent()
            .post(format!("{url}/v1/blocks"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send_json(req)
            .unwrap();
        slowest = slowest.max(started.elapsed());
        assert_eq!(
            res.status(),
            200,
            "{}",
            res.body_mut().read_to_string().unwrap()
        );
        // Reads keep answering, and see the write.
        if v % 10 == 0 {
            let key = hex(format!("v{v}k0").as_bytes());
            let res = agent()
                .get(format!("{url}/v1/tries/0/keys/{key}"))
                .call()
                .unwrap();
            assert_eq!(res.status(), 200);
        }
    }
    // A generous bound (each write takes milliseconds): with the export holding the store, writes never finished.
    assert!(
        slowest < Duration::from_secs(20),
        "slowest write {slowest:?}"
    );
    slow_tx.send(()).unwrap();
    let (slow_bytes, got) = reader.join().unwrap();
    assert!(got.len() > 8 << 20, "the export is all there");
    assert!(
        slow_bytes < got.len() / 4,
        "the export was still running during the writes"
    );
    let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&got[..at]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let export = unchunk(&got[at + 4..]);
    let root = letus_verify::Hash::from_hex(&root5).unwrap();
    let summary = letus_verify::export::verify_export(&export, &root, &Limits::default()).unwrap();
    assert_eq!(summary.records, 5 * 128);
    assert_eq!(digest(&url, None)["version"], 105);
    node.kill().unwrap();
    node.wait().unwrap();
}

/// Past `max_connections` open connections no new one is served until one ends: connections cannot take the
/// file descriptors the store needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_wait_until_one_ends() {
    let served = serve_in_process(
        NodeLimits::default(),
        ServerSettings {
            max_connections: 2,
            header_timeout: Duration::from_secs(60),
            ..ServerSettings::default()
        },
    )
    .await;
    let addr = served.addr;
    // Two idle connections take both places (accepted: each answers a request, then stays open).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
        held.push(s);
    }
    // A third connects (the kernel's backlog) but is not served...
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let early = tokio::time::timeout(Duration::from_millis(700), third.read_to_end(&mut out)).await;
    assert!(early.is_err() && out.is_empty(), "served past the limit");
    // ... until one of the two ends.
    drop(held.pop());
    tokio::time::timeout(Duration::from_secs(30), third.read_to_end(&mut out))
        .await
        .expect("served once a place is free")
        .unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    served.stop.send(()).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(60), served.server).await;
}
