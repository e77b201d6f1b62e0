//! An HTTP proxy for GET requests between two nodes, for the tests and benchmarks that need to see, change or
//! delay what one node fetches from another. One request per connection (it answers `Connection: close`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The target's answer to one request, as the proxy will send it on.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type` (the target's, else `application/octet-stream`).
    pub content_type: String,
    /// The body.
    pub body: Vec<u8>,
}

/// Starts a proxy to `target` (`http://host:port`) on a free port of 127.0.0.1 and returns its URL. Each
/// request's path goes to the target; `hook(path, answer)` sees the answer (and may change it, or sleep) before
/// it is sent on.
pub fn start(target: String, hook: impl Fn(&str, &mut Answer) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hook = std::sync::Arc::new(hook);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (target, hook) = (target.clone(), hook.clone());
            std::thread::spawn(move || serve_one(conn, &target, &*hook));
        }
    });
    url
}

fn serve_one(mut conn: TcpStream, target: &str, hook: &dyn Fn(&str, &mut Answer)) {
    let Ok(clone) = conn.try_clone() else { return };
    let mut reader = BufReader::new(clone);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    let Ok(mut res) = agent.get(format!("{target}{path}")).call() else {
        return;
    };
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_string();
    let mut answer = Answer {
        status: res.status().as_u16(),
        content_type,
        body: Vec::new(),
    };
    if res
        .body_mut()
        .as_reader()
        .read_to_end(&mut answer.body)
        .is_err()
    {
        return;
    }
    hook(&path, &mut answer);
    let head = format!(
        "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len()
    );
    let _ = conn
        .write_all(head.as_bytes())
        .and_then(|()| conn.write_all(&answer.body));
}
