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
    assert!(
        !dir.path().join("wrong").exists(),
        "a refused import leaves no store behind"
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

/// Exports trie 0 of the store in `src` to `file` (no history frontier); returns the export's bytes.
fn export_to(src: &std::path::Path, file: &std::path::Path) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["export", "--history-out"])
        .arg(src.join("unused.history.json"))
        .arg("--out")
        .arg(file)
        .arg("--data")
        .arg(src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::read(file).unwrap()
}

fn import_file(file: &std::path::Path, data: &std::path::Path, root: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_letus"));
    c.args(["import", "--file"])
        .arg(file)
        .arg("--data")
        .arg(data);
    if let Some(r) = root {
        c.args(["--root", r]);
    }
    c.output().unwrap()
}

/// What a directory holds (nothing when it does not exist).
fn entries(dir: &std::path::Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `letus import` streams the export into a store that becomes `state` only once the export verified: a flipped
/// value byte, a cut file, a wrong trailer count or a root that is not the trusted one fail (exit 1, with the
/// reason) and leave no store in the data directory, which a later `letus serve` would open as if it were good.
#[test]
fn an_export_that_does_not_verify_leaves_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let root = store(&src);
    let good = dir.path().join("good.export");
    let bytes = export_to(&src, &good);
    // Header (53 bytes), then record 0: tag, two lengths, key `kN` (2 bytes), value `v` (1 byte).
    let value0 = 53 + 9 + 2;
    assert_eq!(bytes[value0], b'v');
    let mut flipped = bytes.clone();
    flipped[value0] ^= 1;
    let mut count = bytes.clone();
    let n = count.len();
    count[n - 8] += 1;
    let wrong_root = "00".repeat(31) + "01";
    let cases: Vec<(&str, Vec<u8>, Option<&str>, &str)> = vec![
        (
            "flipped value byte, --root",
            flipped.clone(),
            Some(&root),
            "the export does not verify: export does not verify: recomputed root",
        ),
        (
            "flipped value byte, no --root",
            flipped,
            None,
            "the export does not verify: export does not verify: recomputed root",
        ),
        (
            "cut in the trailer",
            bytes[..n - 4].to_vec(),
            Some(&root),
            "the export does not verify: bad export stream: input ends inside an object",
        ),
        (
            "cut inside a record",
            bytes[..value0].to_vec(),
            Some(&root),
            "the export does not verify: bad export stream: input ends inside an object",
        ),
        (
            "cut inside the header",
            bytes[..20].to_vec(),
            Some(&root),
            "the export has no header",
        ),
        (
            "wrong trailer count",
            count,
            Some(&root),
            "bad export stream: export trailer declares 4 records but 3 were read",
        ),
        (
            "not the trusted root",
            bytes.clone(),
            Some(&wrong_root),
            "the export does not verify: export does not verify: recomputed root",
        ),
    ];
    for (what, export, trusted, message) in &cases {
        let file = dir.path().join("bad.export");
        std::fs::write(&file, export).unwrap();
        // Into a data directory the import creates, and into one that exists (empty).
        for existing in [false, true] {
            let data = dir.path().join("dst");
            if existing {
                std::fs::create_dir(&data).unwrap();
            }
            let out = import_file(&file, &data, *trusted);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what}: {err}");
            assert!(
                err.lines()
                    .any(|l| l.starts_with("error: ") && l.contains(message)),
                "{what}: {err}"
            );
            assert!(!text(&out.stdout).contains("imported"), "{what}");
            assert_eq!(data.exists(), existing, "{what}");
            assert_eq!(entries(&data), Vec::<String>::new(), "{what}");
            if existing {
                std::fs::remove_dir(&data).unwrap();
            }
        }
    }
    // The same export untampered imports, and the store verifies against the source's root.
    let data = dir.path().join("dst");
    let out = import_file(&good, &data, Some(&root));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(entries(&data), vec!["state".to_string()]);
    let out = letus(&["verify", "--root", &root], &data);
    assert!(out.status.success(), "{}", text(&out.stdout));
}

/// An export of a few MiB is read in 1 MiB chunks, so records straddle chunk boundaries; every pair arrives. A
/// store left by an import that was killed (`state.importing`) is removed, with a warning, by the next import, but
/// not while another import holds the data directory's import lock.
#[test]
fn a_large_export_imports_chunk_by_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let mut s = Store::open(src.join("state"), Options::default()).unwrap();
    for i in 0..3000u32 {
        let value = vec![(i % 251) as u8; 1000 + (i as usize % 7)];
        s.put(0, format!("key/{i}").as_bytes(), &value).unwrap();
    }
    let root = s.commit(1).unwrap()[0].root.to_hex();
    s.close().unwrap();
    let file = dir.path().join("big.export");
    let bytes = export_to(&src, &file);
    assert!(bytes.len() > 2 << 20, "{} bytes", bytes.len());
    let data = dir.path().join("dst");
    let stale = data.join("state.importing");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("junk"), b"from a killed import").unwrap();
    // While another import holds the lock, nothing is touched.
    let lock = std::fs::File::create(data.join("state.importing.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = import_file(&file, &data, Some(&root));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("another import into"),
        "{}",
        text(&out.stderr)
    );
    assert!(stale.join("junk").exists());
    drop(lock);
    let out = import_file(&file, &data, Some(&root));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("left by an import that did not finish"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("imported 3000 pairs of trie 0 at version 1"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(entries(&data), vec!["state".to_string()]);
    let out = letus(&["verify", "--root", &root], &data);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("3000 keys"),
        "{}",
        text(&out.stdout)
    );
    // A data directory that already holds a store is refused before anything is read.
    let out = import_file(&file, &data, Some(&root));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("already holds a store"));
    assert_eq!(entries(&data), vec!["state".to_string()]);
}

/// Found by review: the export of a trie whose keys were all deleted could never be imported (the empty commit
/// created no trie, and the import's own check then refused it). It loads as the trie with the empty root, its
/// history continued from the source's frontier.
#[test]
fn an_emptied_trie_imports_with_the_empty_root_and_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let mut s = Store::open(src.join("state"), Options::default()).unwrap();
    s.put(0, b"only", b"v").unwrap();
    s.commit(1).unwrap();
    s.delete(0, b"only").unwrap();
    let empty = s.commit(2).unwrap()[0].root;
    assert_eq!(empty, letus_verify::EMPTY);
    let source = s.digest(0, 2).unwrap();
    s.close().unwrap();
    let file = dir.path().join("t.export");
    let out = letus(&["export", "--out", file.to_str().unwrap()], &src);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = file.to_str().unwrap();
    let root = empty.to_hex();
    assert_empty_and_continued(
        &dir.path().join("dst"),
        &["import", "--root", &root, "--file", file],
        &source,
    );
}

/// Runs `letus ARGS --data DST` (an import into DST), then checks that DST's trie 0 at the source digest's version
/// has the empty root and the source's history.
fn assert_empty_and_continued(dst: &std::path::Path, args: &[&str], source: &letus_verify::Digest) {
    let out = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(args)
        .arg("--data")
        .arg(dst)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = Store::open(dst.join("state"), Options::default()).unwrap();
    let d = s.digest(0, source.version).unwrap();
    assert_eq!(d.root, letus_verify::EMPTY);
    assert_eq!(
        (d.history_len, d.history_root),
        (source.history_len, source.history_root)
    );
}

/// Found by review: a join of a trie that is empty at its version (every key deleted) was refused ("nothing to
/// join"), although its manifest (no entries) verifies against the empty root. `letus snapshot fetch` and
/// `letus snapshot import` (a join's steps) now give the trie with the empty root and the source's history.
#[test]
fn an_emptied_trie_joins_from_a_snapshot_with_the_empty_root_and_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let mut s = Store::open(src.join("state"), Options::default()).unwrap();
    for v in 1..=3u64 {
        s.put(0, format!("k{v}").as_bytes(), b"v").unwrap();
        s.commit(v).unwrap();
    }
    for v in 1..=3u64 {
        s.delete(0, format!("k{v}").as_bytes()).unwrap();
    }
    assert_eq!(s.commit(4).unwrap()[0].root, letus_verify::EMPTY);
    let source = s.digest(0, 4).unwrap();
    s.close().unwrap();
    let (mut node, url) = common::serve(&src, "t");
    let snap = dir.path().join("snap");
    let fetched = Command::new(env!("CARGO_BIN_EXE_letus"))
        .args(["snapshot", "fetch", "--out"])
        .arg(&snap)
        .args(["--join", &url, "--join-version", "4", "--trusted-root"])
        .arg(letus_verify::EMPTY.to_hex())
        .output()
        .unwrap();
    node.kill().unwrap();
    node.wait().unwrap();
    assert!(fetched.status.success(), "{}", text(&fetched.stderr));
    assert_empty_and_continued(
        &dir.path().join("dst"),
        &["snapshot", "import", "--dir", snap.to_str().unwrap()],
        &source,
    );
}
