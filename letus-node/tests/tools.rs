//! The offline tools' rough edges: a mistyped `--data` is an error that creates nothing, a trie or version that
//! does not exist is an error (exit 2), never a MISMATCH, and `import` without `--root` never says "verified".

use std::process::{Command, Output};

use letus_core::{Options, Store};

fn letus(args: &[&str], data: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A stopped node's data directory: trie 0 at versions 1..=3; returns the root at 3.
fn store(dir: &std::path::Path) -> String {
    let mut s = Store::open(dir.join("state"), Options::default()).unwrap();
    let mut root = None;
    for v in 1..=3u64 {
        s.put(0, format!("k{v}").as_bytes(), b"v").unwrap();
        root = Some(s.commit(v).unwrap()[0].root);
    }
    s.close().unwrap();
    root.unwrap().to_hex()
}

#[test]
fn a_mistyped_data_dir_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("letus-dta");
    let root = "00".repeat(32);
    for args in [
        vec!["verify", "--root", &root],
        vec!["verify", "--root", &root, "--json"],
        vec!["export", "--out", "-"],
    ] {
        let out = letus(&args, &typo);
        assert!(!out.status.success(), "{args:?}");
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(all.contains("no store in"), "{args:?}: {all}");
        assert!(!all.contains("MISMATCH"), "{args:?}: {all}");
    }
    let out = letus(&["verify", "--json", "--root", &root], &typo);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (out.status.code(), &v["error"]),
        (Some(2), &serde_json::json!("no_store"))
    );
}

#[test]
fn verify_of_a_missing_trie_or_version_is_an_error_not_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let root = store(dir.path());
    let ok = letus(&["verify", "--root", &root], dir.path());
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(text(&ok.stdout).starts_with("OK:"));
    for (args, code) in [
        (
            vec!["verify", "--tid", "9", "--root", &root],
            "unknown_trie",
        ),
        (
            vec!["verify", "--version", "99", "--root", &root],
            "version_not_found",
        ),
    ] {
        let out = letus(&args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!text(&out.stdout).contains("MISMATCH"), "{args:?}");
        assert!(text(&out.stderr).starts_with("error: "), "{args:?}");
        let mut json_args = args.clone();
        json_args.push("--json");
        let out = letus(&json_args, dir.path());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (out.status.code(), v["error"].as_str(), &v["ok"]),
            (Some(2), Some(code), &serde_json::json!(false))
        );
    }
    // A real mismatch is still one (exit 1), with a code.
    let wrong = "00".repeat(31) + "01";
    let out = letus(&["verify", "--json", "--root", &wrong], dir.path());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (out.status.code(), v["error"].as_str()),
        (Some(1), Some("mismatch"))
    );
    let out = letus(&["verify", "--root", &wrong], dir.path());
    assert!(text(&out.stdout).starts_with("MISMATCH:"));
    // Export of a version that does not exist: an error before any output file is created.
    let file = dir.path().join("x.export");
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["export", "--version", "99", "--out"])
        .arg(&file)
        .arg("--data")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!file.exists());
}

#[test]
fn import_without_root_does_not_say_verified() {
    let dir = tempfile::tempdir().unwrap();
    let root = store(dir.path());
    let file = dir.path().join("t.export");
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["export", "--out"])
        .arg(&file)
        .arg("--data")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let import = |target: &str, root: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_letus"));
        c.args(["import", "--file"])
            .arg(&file)
            .arg("--data")
            .arg(dir.path().join(target));
        if let Some(r) = root {
            c.args(["--root", r]);
        }
        c.output().unwrap()
    };
    let out = import("untrusted", None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("NOT verified against a trusted root"),
        "{said}"
    );
    assert!(!said.contains("verified against --root"), "{said}");
    assert!(text(&out.stderr).contains("warning: no --root given"));
    let out = import("trusted", Some(&root));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("verified against --root"));
}

#[path = "common/mod.rs"]
mod common;

/// An honest import carries the source's history commitment: `letus digest` over the source node and the node
/// started from the export finds them in agreement (before, it reported a fork: `history_len` 1 on the import).
/// Without the history frontier the import's history restarts, and digest says so (exit 1).
#[test]
fn an_imported_node_has_the_digests_of_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let root = store(&src);
    let file = dir.path().join("t.export");
    let out = letus(&["export", "--out", file.to_str().unwrap()], &src);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let frontier = dir.path().join("t.export.history.json");
    assert!(
        frontier.exists(),
        "export writes the history frontier next to the export"
    );
    let import = |target: &str, extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_letus"));
        c.args(["import", "--root", &root, "--file"])
            .arg(&file)
            .args(extra)
            .arg("--data")
            .arg(dir.path().join(target));
        c.output().unwrap()
    };
    let out = import("dst", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("history: 3 entries"),
        "{}",
        text(&out.stdout)
    );
    // A --history-root that is not what the frontier gives is refused.
    let wrong = "00".repeat(32);
    let out = import("wrong", &["--history-root", &wrong]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("history_root"),
        "{}",
        text(&out.stderr)
    );

    let digest = |urls: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_letus"));
        c.arg("digest");
        for u in urls {
            c.args(["--url", u]);
        }
        c.output().unwrap()
    };
    let (mut a, url_a) = common::serve(&src, "t");
    let (mut b, url_b) = common::serve(&dir.path().join("dst"), "t");
    let out = digest(&[&url_a, &url_b]);
    let said = text(&out.stdout);
    // The digest of the source is also what the import's history proofs continue from.
    let check = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["digest", "--url", &url_b, "--version", "3"])
        .output()
        .unwrap();
    b.kill().unwrap();
    b.wait().unwrap();
    assert!(
        out.status.success(),
        "digest of source and import: {said}{}",
        text(&out.stderr)
    );
    assert!(!said.contains("fork"), "{said}");
    assert!(
        text(&check.stdout).contains("\"history_len\":3"),
        "{}",
        text(&check.stdout)
    );

    // Without the frontier: a new history, which digest reports.
    std::fs::remove_file(&frontier).unwrap();
    let out = import("restarted", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("history starts here"));
    let (mut c, url_c) = common::serve(&dir.path().join("restarted"), "t");
    let out = digest(&[&url_a, &url_c]);
    c.kill().unwrap();
    c.wait().unwrap();
    a.kill().unwrap();
    a.wait().unwrap();
    assert!(!out.status.success(), "{}", text(&out.stdout));
}
