//! End to end: the real `letus serve` process on a free port; blocks written over HTTP, values and proofs read
//! back and verified with letus-verify; a graceful restart (SIGTERM) and a crash (SIGKILL) lose nothing that was
//! acknowledged.

mod common;

use common::agent;

use std::process::{Child, Command};

use letus_node::api::{BlockRequest, DigestsResponse, ValueResponse, WriteOp};
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::{verify_proof, Limits, Proof};

const TOKEN: &str = "e2e-token";

fn start(data: &std::path::Path) -> (Child, String) {
    common::serve(data, TOKEN)
}

fn post_block(url: &str, version: u64, n: u32) -> DigestsResponse {
    let writes = (0..n)
        .map(|i| WriteOp {
            tid: 0,
            key: hex(format!("k{i}").as_bytes()),
            value: Some(hex(format!("v{version}-{i}").as_bytes())),
        })
        .collect();
    let req = BlockRequest {
        version,
        writes,
        block: Some(hex(format!("raw {version}").as_bytes())),
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

fn check_value(url: &str, version: u64, i: u32) {
    let mut res = agent()
        .get(format!(
            "{url}/v1/tries/0/keys/{}?version={version}",
            hex(format!("k{i}").as_bytes())
        ))
        .call()
        .unwrap();
    assert_eq!(res.status(), 200);
    let r: ValueResponse = res.body_mut().read_json().unwrap();
    let value = unhex(r.value.as_deref().unwrap()).unwrap();
    assert_eq!(value, format!("v{version}-{i}").into_bytes());
    let proof = Proof::decode(&unhex(&r.proof_hex).unwrap(), &Limits::default()).unwrap();
    let read = verify_proof(
        &r.digest.root,
        format!("k{i}").as_bytes(),
        Some(&value),
        &proof,
        &Limits::default(),
    )
    .unwrap();
    assert!(read.is_present());
}

fn digest(url: &str, version: u64) -> DigestsResponse {
    agent()
        .get(format!("{url}/v1/digest/{version}"))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap()
}

#[test]
fn serve_write_read_restart_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, url) = start(dir.path());
    let mut acked = Vec::new();
    for v in 1..=20 {
        acked.push(post_block(&url, v, 50));
    }
    for v in [1, 7, 20] {
        check_value(&url, v, 3);
        check_value(&url, v, 49);
    }
    // Graceful restart.
    Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status()
        .unwrap();
    assert!(node.wait().unwrap().success(), "graceful shutdown exits 0");
    let (mut node, url) = start(dir.path());
    for a in &acked {
        assert_eq!(&digest(&url, a.version), a, "digests survive a restart");
    }
    check_value(&url, 20, 10);
    // Crash: SIGKILL right after acknowledgements.
    for v in 21..=30 {
        acked.push(post_block(&url, v, 50));
    }
    node.kill().unwrap();
    node.wait().unwrap();
    let (mut node, url) = start(dir.path());
    for a in &acked {
        assert_eq!(
            &digest(&url, a.version),
            a,
            "acknowledged digests survive SIGKILL"
        );
    }
    check_value(&url, 30, 42);
    let mut res = agent().get(format!("{url}/v1/blocks/30")).call().unwrap();
    let b: serde_json::Value = res.body_mut().read_json().unwrap();
    assert_eq!(unhex(b["block"].as_str().unwrap()).unwrap(), b"raw 30");
    // Writing continues at the next version.
    post_block(&url, 31, 5);
    node.kill().unwrap();
    node.wait().unwrap();
}

#[test]
fn verify_export_import_tools() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, url) = start(dir.path());
    let mut last = None;
    for v in 1..=5 {
        last = Some(post_block(&url, v, 200));
    }
    Command::new("kill")
        .args(["-TERM", &node.id().to_string()])
        .status()
        .unwrap();
    node.wait().unwrap();
    let root = last.unwrap().digests[0].root.to_hex();
    let letus = env!("CARGO_BIN_EXE_letus");
    // Full verification: exit 0 and a JSON summary when the root matches, exit 1 when it does not.
    let out = Command::new(letus)
        .args(["verify", "--json", "--tid", "0", "--root", &root, "--data"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (summary["ok"].as_bool(), summary["keys"].as_u64()),
        (Some(true), Some(200))
    );
    let wrong = "00".repeat(31) + "01";
    let out = Command::new(letus)
        .args(["verify", "--json", "--root", &wrong, "--data"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["ok"], false);
    // Export, then import into a new node with the trusted root, then serve it.
    let export = dir.path().join("state.export");
    let st = Command::new(letus)
        .args(["export", "--version", "3", "--out"])
        .arg(&export)
        .arg("--data")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let bytes = std::fs::read(&export).unwrap();
    let root3 = {
        let (mut n, u) = start(dir.path());
        let d = digest(&u, 3);
        n.kill().unwrap();
        n.wait().unwrap();
        d.digests[0].root
    };
    assert_eq!(
        letus_verify::export::verify_export(&bytes, &root3, &Limits::default())
            .unwrap()
            .records,
        200
    );
    let fresh = tempfile::tempdir().unwrap();
    let bad = Command::new(letus)
        .args(["import", "--root", &wrong, "--file"])
        .arg(&export)
        .arg("--data")
        .arg(fresh.path().join("n"))
        .status()
        .unwrap();
    assert!(
        !bad.success(),
        "an export that does not match the trusted root is refused"
    );
    let ok = Command::new(letus)
        .args(["import", "--root", &root3.to_hex(), "--file"])
        .arg(&export)
        .arg("--data")
        .arg(fresh.path().join("n"))
        .status()
        .unwrap();
    assert!(ok.success());
    let (mut n, u) = start(&fresh.path().join("n"));
    check_value(&u, 3, 7);
    assert_eq!(digest(&u, 3).digests[0].root, root3);
    post_block(&u, 4, 3);
    n.kill().unwrap();
    n.wait().unwrap();
}
