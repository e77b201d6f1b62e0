//! Helpers shared by the tests that run the real `letus` binary.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `letus serve` on a free port of 127.0.0.1 over the store in `data`, with write token `token`: the running child
/// and the URL it listens on (named in the first line it prints).
pub fn serve(data: &Path, token: &str) -> (Child, String) {
    serve_with(data, token, &[])
}

/// [`serve`] with more flags.
pub fn serve_with(data: &Path, token: &str, flags: &[&str]) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_letus"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token",
        token,
        "--data",
    ])
    .arg(data)
    .args(flags);
    spawn_server(cmd)
}

/// Runs a `letus` server command (`serve`, `route`) that prints its URL on its first line: the running child and
/// that URL.
pub fn spawn_server(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn letus");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the server's first line");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
        // The server stopped before serving: what it said is the diagnosis.
        let mut why = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut why);
        panic!("the server did not print its URL (first line {line:?}); its stderr: {why}");
    };
    let url = url.to_string();
    // The server's log is drained so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
    });
    (child, url)
}

/// An HTTP client for the tests: every status is an answer (not an error), and no request takes over 60 s.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// Posts `block` to the node at `url` with the write token `token`: the status and the JSON body.
pub fn post_block(
    url: &str,
    token: &str,
    block: &letus_node::api::BlockRequest,
) -> (u16, serde_json::Value) {
    let mut res = agent()
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {token}"))
        .send_json(block)
        .expect("the node answers");
    let status = res.status().as_u16();
    (
        status,
        res.body_mut()
            .read_json()
            .unwrap_or(serde_json::Value::Null),
    )
}
