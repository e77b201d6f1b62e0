//! The client subcommands (`letus get`, `letus proof`, `letus digest`) as a user runs them: the real binary against
//! a real node, directly and through a tampering proxy (a tiny HTTP/1.1 proxy on a std `TcpListener` that rewrites
//! requests and answers). A node that answers for another key, another set of keys or another version than the
//! one asked for must never be reported as verified, with or without a trusted root; every failure is one JSON
//! line with a code.

mod common;

use common::agent;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use letus_node::api::{BlockRequest, DigestsResponse, WriteOp};
use letus_verify::hex::encode as hex;
use serde_json::{json, Value};

const TOKEN: &str = "client-token";

struct Node {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve(dir.path(), TOKEN);
    Node {
        child,
        url,
        _dir: dir,
    }
}

fn post_block(url: &str, version: u64, writes: &[(&[u8], Option<&[u8]>)]) -> DigestsResponse {
    let req = BlockRequest {
        version,
        writes: writes
            .iter()
            .map(|(k, v)| WriteOp {
                tid: 0,
                key: hex(k),
                value: v.map(hex),
            })
            .collect(),
        block: None,
        access_list: vec![],
    };
    let mut res = agent()
        .post(format!("{url}/v1/blocks"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send_json(&req)
        .unwrap();
    assert_eq!(res.status(), 200);
    res.body_mut().read_json().unwrap()
}

/// Rewrites a request's path and JSON body, and the JSON answer.
type Tamper = Arc<dyn Fn(&mut String, &mut Value, &mut Value) + Send + Sync>;

/// A proxy in front of `upstream`: each request is forwarded after `req` rewrote its path and body (the body as
/// JSON, `Null` if none), and the answer is returned after `res` rewrote it. Returns the proxy's URL.
fn proxy(
    upstream: &str,
    req: impl Fn(&mut String, &mut Value) + Send + Sync + 'static,
    res: impl Fn(&mut Value) + Send + Sync + 'static,
) -> String {
    let tamper: Tamper = Arc::new(move |path, body, answer| {
        if answer.is_null() {
            req(path, body)
        } else {
            res(answer)
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let (tamper, upstream) = (tamper.clone(), upstream.clone());
            std::thread::spawn(move || serve_one(conn, &upstream, &tamper));
        }
    });
    url
}

fn serve_one(mut conn: TcpStream, upstream: &str, tamper: &Tamper) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut head = String::new();
    if reader.read_line(&mut head).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = head.split_whitespace();
    let (method, mut path) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    );
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut raw = vec![0; len];
    reader.read_exact(&mut raw).unwrap();
    let mut body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    tamper(&mut path, &mut body, &mut Value::Null);
    let target = format!("{upstream}{path}");
    let mut res = if method == "POST" {
        agent()
            .post(&target)
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap()
    } else {
        agent().get(&target).call().unwrap()
    };
    let status = res.status().as_u16();
    let text = res.body_mut().read_to_string().unwrap();
    let mut answer: Value = serde_json::from_str(&text).unwrap();
    tamper(&mut path, &mut body, &mut answer);
    let out = answer.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{out}",
        out.len()
    );
}

/// Runs `letus ARGS…`; returns the exit code and the JSON lines it printed.
fn letus(args: &[&str]) -> (i32, Vec<Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(
        out.stderr.is_empty(),
        "nothing on stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap(), lines)
}

/// The longest key the store allows: its hex (131,070 digits) fits in one argument, not in a URL.
static LONG_KEY: [u8; 65_535] = [0xab; 65_535];
const ALICE: &str = "616c696365";
const BOB: &str = "626f62";
const CAROL: &str = "6361726f6c";

/// alice and bob at every version 1..=40 (alice = "a{v}", bob = "b{v}"), the empty key at 40.
fn chain(url: &str) -> Vec<DigestsResponse> {
    (1..=40u64)
        .map(|v| {
            let (a, b) = (format!("a{v}"), format!("b{v}"));
            let mut w: Vec<(&[u8], Option<&[u8]>)> =
                vec![(b"alice", Some(a.as_bytes())), (b"bob", Some(b.as_bytes()))];
            if v == 40 {
                w.push((b"", Some(b"empty key's value")));
                w.push((&LONG_KEY, Some(b"long key's value")));
            }
            post_block(url, v, &w)
        })
        .collect()
}

fn set_key(body: &mut Value, key: &str) {
    body["key"] = key.into();
}

#[test]
fn get_and_proof_verify_what_was_asked_not_what_was_answered() {
    let node = start();
    let digests = chain(&node.url);
    let root10 = digests[9].digests[0].root.to_hex();
    let root40 = digests[39].digests[0].root.to_hex();

    // Honest answers verify; without --root the line says that only the node's own digest was checked.
    let (c, l) = letus(&["get", "--url", &node.url, "--key", ALICE, "--version", "10"]);
    assert_eq!(c, 0, "{l:?}");
    assert_eq!(
        (&l[0]["verified"], &l[0]["trusted"], &l[0]["value"]),
        (&json!(true), &json!(false), &json!(hex(b"a10")))
    );
    assert!(l[0]["note"]
        .as_str()
        .unwrap()
        .contains("only against the node's own digest"));
    let (c, l) = letus(&[
        "get",
        "--url",
        &node.url,
        "--key",
        ALICE,
        "--version",
        "10",
        "--root",
        &root10,
    ]);
    assert_eq!((c, &l[0]["trusted"]), (0, &json!(true)), "{l:?}");
    assert!(l[0].get("note").is_none());
    // The empty key, which no URL path can name, through the POST route.
    let (c, l) = letus(&["get", "--url", &node.url, "--key", "", "--root", &root40]);
    assert_eq!(
        (c, &l[0]["value"]),
        (0, &json!(hex(b"empty key's value"))),
        "{l:?}"
    );
    let long = hex(&LONG_KEY);
    let (c, l) = letus(&["get", "--url", &node.url, "--key", &long, "--root", &root40]);
    assert_eq!((c, &l[0]["value"]), (0, &json!(hex(b"long key's value"))));
    let (c, l) = letus(&[
        "proof", "--url", &node.url, "--key", &long, "--key", "", "--root", &root40,
    ]);
    assert_eq!((c, &l[0]["verified"]), (0, &json!(true)));

    // Asked for alice, the proxy asks the node for bob: bob's honest answer, with bob's valid proof.
    let to_bob = proxy(&node.url, |_, b| set_key(b, BOB), |_| {});
    for root in [None, Some(root10.as_str())] {
        let mut args = vec!["get", "--url", &to_bob, "--key", ALICE, "--version", "10"];
        if let Some(r) = root {
            args.extend(["--root", r]);
        }
        let (c, l) = letus(&args);
        assert_eq!(c, 1, "{l:?}");
        assert_eq!(
            (&l[0]["error"], &l[0]["verified"]),
            (&json!("answer_mismatch"), &json!(false))
        );
        assert_eq!(
            l[0]["key"], ALICE,
            "the line names the key that was asked for"
        );
    }
    // Swapped to an absent key: its exclusion proof is valid, but not for alice.
    let to_carol = proxy(&node.url, |_, b| set_key(b, CAROL), |_| {});
    let (c, l) = letus(&["get", "--url", &to_carol, "--key", ALICE, "--root", &root40]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");
    // Swapped, and the answer's key relabelled as alice: the proof is checked for alice and fails.
    for victim in [BOB, CAROL] {
        let relabel = proxy(
            &node.url,
            move |_, b| set_key(b, victim),
            |a| a["key"] = ALICE.into(),
        );
        for root in [None, Some(root40.as_str())] {
            let mut args = vec!["get", "--url", &relabel, "--key", ALICE];
            if let Some(r) = root {
                args.extend(["--root", r]);
            }
            let (c, l) = letus(&args);
            assert_eq!(
                (c, &l[0]["verified"]),
                (1, &json!(false)),
                "{victim}: {l:?}"
            );
            assert_ne!(l[0]["error"], Value::Null);
        }
    }
    // Asked for version 10, served version 40 (whose own digest it matches): refused without --root too.
    let to_40 = proxy(&node.url, |_, b| b["version"] = 40.into(), |_| {});
    let (c, l) = letus(&["get", "--url", &to_40, "--key", ALICE, "--version", "10"]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");
    assert!(l[0]["message"].as_str().unwrap().contains("version 10"));
    let (c, l) = letus(&[
        "proof",
        "--url",
        &to_40,
        "--key",
        ALICE,
        "--key",
        BOB,
        "--version",
        "10",
    ]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");
    // Another trie in the answer.
    let other_trie = proxy(
        &node.url,
        |_, _| {},
        |a| {
            a["tid"] = 1.into();
            a["digest"]["tid"] = 1.into();
        },
    );
    let (c, l) = letus(&["get", "--url", &other_trie, "--key", ALICE]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");

    // Multi-proofs: asked for [alice, bob], served [bob, carol] (valid for that set): refused.
    let shifted = proxy(&node.url, |_, b| b["keys"] = json!([BOB, CAROL]), |_| {});
    for root in [None, Some(root40.as_str())] {
        let mut args = vec!["proof", "--url", &shifted, "--key", ALICE, "--key", BOB];
        if let Some(r) = root {
            args.extend(["--root", r]);
        }
        let (c, l) = letus(&args);
        assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");
        assert_eq!(l[0]["keys"], json!([ALICE, BOB]));
    }
    // Fewer keys than asked for.
    let dropped = proxy(&node.url, |_, b| b["keys"] = json!([ALICE]), |_| {});
    let (c, l) = letus(&["proof", "--url", &dropped, "--key", ALICE, "--key", BOB]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");
    // Same keys, relabelled in the answer: the proof is checked for the asked keys and fails.
    let relabel = proxy(
        &node.url,
        |_, b| b["keys"] = json!([BOB, CAROL]),
        |a| a["keys"] = json!([ALICE, BOB]),
    );
    let (c, l) = letus(&[
        "proof", "--url", &relabel, "--key", ALICE, "--key", BOB, "--root", &root40,
    ]);
    assert_eq!((c, &l[0]["verified"]), (1, &json!(false)), "{l:?}");
    // The honest multi-proof verifies, in the order asked.
    let (c, l) = letus(&[
        "proof", "--url", &node.url, "--key", BOB, "--key", ALICE, "--root", &root40,
    ]);
    assert_eq!(c, 0, "{l:?}");
    assert_eq!(l[0]["values"], json!([hex(b"b40"), hex(b"a40")]));
    assert_eq!(l[0]["trusted"], true);
    let (c, l) = letus(&["proof", "--url", &node.url, "--key", BOB]);
    assert_eq!((c, &l[0]["trusted"]), (0, &json!(false)), "{l:?}");
    assert!(l[0]["note"].is_string());
}

#[test]
fn failures_are_json_lines_with_a_code() {
    let node = start();
    let digests = chain(&node.url);
    // The node's error, with its code and status.
    let (c, l) = letus(&["get", "--url", &node.url, "--key", ALICE, "--version", "99"]);
    assert_eq!(c, 1);
    assert_eq!(
        (&l[0]["error"], &l[0]["status"], &l[0]["verified"]),
        (&json!("version_not_found"), &json!(404), &json!(false))
    );
    let (c, l) = letus(&[
        "proof",
        "--url",
        &node.url,
        "--key",
        ALICE,
        "--version",
        "99",
    ]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("version_not_found")));
    let (c, l) = letus(&["digest", "--url", &node.url, "--version", "99"]);
    assert_eq!(
        (c, &l[0]["error"], &l[0]["source"]),
        (1, &json!("version_not_found"), &json!(node.url))
    );
    // Arguments.
    let (c, l) = letus(&["get", "--url", &node.url, "--key", "xyz"]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("bad_argument")));
    let (c, l) = letus(&["get", "--url", &node.url, "--key", ALICE, "--root", "00"]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("bad_argument")));
    // Nobody listening.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (c, l) = letus(&["get", "--url", &dead, "--key", ALICE]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("request_failed")));
    // A proof that does not decode, and a JSON proof that differs from the binary one.
    let garbled = proxy(&node.url, |_, _| {}, |a| a["proof_hex"] = "ff".into());
    let (c, l) = letus(&["get", "--url", &garbled, "--key", ALICE]);
    assert_eq!(
        (c, &l[0]["error"]),
        (1, &json!("unsupported_format")),
        "{l:?}"
    );
    let other_proof = proxy(
        &node.url,
        |_, _| {},
        |a| a["proof"]["records"] = json!([{"t": "empty"}]),
    );
    let (c, l) = letus(&["get", "--url", &other_proof, "--key", ALICE]);
    assert_eq!(c, 1, "{l:?}");
    assert_ne!(l[0]["verified"], true);
    // An answer that is not the documented JSON.
    let broken = proxy(&node.url, |_, _| {}, |a| *a = json!({"surprise": 1}));
    let (c, l) = letus(&["get", "--url", &broken, "--key", ALICE]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("malformed")), "{l:?}");

    // digest --checkpoint: a trusted digest that agrees, then one that conflicts.
    let d10 = serde_json::to_string(&digests[9].digests[0]).unwrap();
    let (c, l) = letus(&[
        "digest",
        "--url",
        &node.url,
        "--version",
        "10",
        "--checkpoint",
        &d10,
    ]);
    assert_eq!(c, 0, "{l:?}");
    assert_eq!(
        (&l[0]["source"], &l[1]["report"]),
        (&json!("checkpoint"), &json!("agreement"))
    );
    let mut forged = digests[9].digests[0];
    forged.root = digests[8].digests[0].root;
    let forged = serde_json::to_string(&forged).unwrap();
    let (c, l) = letus(&[
        "digest",
        "--url",
        &node.url,
        "--version",
        "10",
        "--checkpoint",
        &forged,
    ]);
    assert_eq!(
        (c, &l[1]["report"]),
        (1, &json!("checkpoint_conflict")),
        "{l:?}"
    );
    let mut zero = digests[9].digests[0];
    zero.history_len = 0;
    let zero = serde_json::to_string(&zero).unwrap();
    let (c, l) = letus(&["digest", "--url", &node.url, "--checkpoint", &zero]);
    assert_eq!(
        (c, &l[0]["error"]),
        (1, &json!("bad_argument")),
        "history_len 0: {l:?}"
    );
    let (c, l) = letus(&["digest", "--url", &node.url, "--checkpoint", "{\"tid\":0}"]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("bad_argument")));
    // A node answering another version than the one asked for.
    let to_40 = proxy(&node.url, |p, _| *p = "/v1/digest/40".into(), |_| {});
    let (c, l) = letus(&["digest", "--url", &to_40, "--version", "10"]);
    assert_eq!((c, &l[0]["error"]), (1, &json!("answer_mismatch")), "{l:?}");
}
