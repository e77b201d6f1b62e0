//! Corruption tests: a flipped byte in each kind of file is detected and reported as an error naming the file,
//! never returned as data and never a panic.

mod common;

use std::path::{Path, PathBuf};

use common::{key, small_options, Rng};
use letus_core::{Error, Store};
use letus_verify::Hash;

/// Builds a store with 30 versions; returns its directory and every (version, root).
fn build(flush_at_end: bool) -> (tempfile::TempDir, Vec<(u64, Hash)>) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), small_options()).unwrap();
    let mut rng = Rng::new(5);
    let mut roots = Vec::new();
    for v in 1..=30u64 {
        for _ in 0..20 {
            store.put(0, &key(rng.below(400)), &rng.bytes(30)).unwrap();
        }
        roots.push((v, store.commit(v).unwrap()[0].root));
    }
    if flush_at_end {
        store.close().unwrap();
    }
    (dir, roots)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else if e.file_name() != "LOCK" {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn files(dir: &Path, sub: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

/// Opens the store and reads everything: every version fully verified. Returns the first error.
fn read_everything(dir: &Path, roots: &[(u64, Hash)]) -> Result<(), Error> {
    let store = Store::open(dir, small_options())?;
    for (v, root) in roots {
        store.verify_full(0, *v, root)?;
    }
    Ok(())
}

fn assert_names(e: &Error, what: &str) {
    match e {
        Error::Corrupt { path, .. } => assert!(
            path.to_string_lossy().contains(what),
            "{e} should name a {what} file"
        ),
        Error::Mismatch { .. } => {}
        other => panic!("expected corruption in {what}, got {other}"),
    }
}

#[test]
fn flipped_bytes_in_value_log_are_detected() {
    for flushed in [true, false] {
        let (dir, roots) = build(flushed);
        read_everything(dir.path(), &roots).unwrap();
        let f = files(dir.path(), "vdls", "vdl")[0].clone();
        let len = std::fs::metadata(&f).unwrap().len();
        // Offsets inside the first file's committed groups (never the final group of the log, whose damage is
        // indistinguishable from a torn write; FORMAT.md §1).
        for i in 0..12u64 {
            let offset = 40 + i * (len / 3 - 40) / 12;
            let trial = tempfile::tempdir().unwrap();
            copy_dir(dir.path(), trial.path());
            flip(
                &trial.path().join("vdls").join(f.file_name().unwrap()),
                offset,
            );
            let e = read_everything(trial.path(), &roots)
                .expect_err("flipped value-log byte must be detected");
            assert_names(&e, "vdls");
        }
    }
}

#[test]
fn flipped_bytes_in_index_files_are_detected() {
    let (dir, roots) = build(true);
    let idx = files(dir.path(), "lsvps", "idx");
    assert!(idx.len() > 1, "small options flush several index files");
    for f in &idx {
        let len = std::fs::metadata(f).unwrap().len();
        for i in 0..10u64 {
            let offset = i * (len - 1) / 9;
            let trial = tempfile::tempdir().unwrap();
            copy_dir(dir.path(), trial.path());
            flip(
                &trial.path().join("lsvps").join(f.file_name().unwrap()),
                offset,
            );
            let e = read_everything(trial.path(), &roots)
                .expect_err("flipped index-file byte must be detected");
            assert_names(&e, "lsvps");
        }
    }
}

#[test]
fn flipped_bytes_in_the_roots_log_are_detected() {
    let (dir, roots) = build(true);
    let len = std::fs::metadata(dir.path().join("roots.log"))
        .unwrap()
        .len();
    for offset in [3, 20, 100, len / 2, len - 60] {
        let trial = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), trial.path());
        flip(&trial.path().join("roots.log"), offset);
        let e = read_everything(trial.path(), &roots)
            .expect_err("flipped roots-log byte must be detected");
        assert_names(&e, "roots.log");
    }
}

#[test]
fn truncated_index_file_is_detected() {
    let (dir, roots) = build(true);
    let f = files(dir.path(), "lsvps", "idx")[0].clone();
    let trial = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), trial.path());
    let p = trial.path().join("lsvps").join(f.file_name().unwrap());
    let len = std::fs::metadata(&p).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = read_everything(trial.path(), &roots).expect_err("truncated index file");
    assert_names(&e, "lsvps");
}

#[test]
fn a_second_process_cannot_open_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let _a = Store::open(dir.path(), small_options()).unwrap();
    assert!(matches!(
        Store::open(dir.path(), small_options()),
        Err(Error::Locked(_))
    ));
}

#[test]
fn a_checksum_valid_group_that_writes_a_key_twice_is_corruption_not_a_hang() {
    use letus_core::metrics::Counters;
    use letus_core::vdls::{Position, Record, Vdls, VdlsOptions};
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = Store::open(dir.path(), small_options()).unwrap();
        store.put(0, b"a", b"1").unwrap();
        store.commit(1).unwrap();
    }
    // A crafted group that passes every checksum: version 2 puts the same key twice.
    let mut log = Vdls::open(
        &letus_core::storage::local(),
        &dir.path().join("vdls"),
        VdlsOptions::default(),
        std::sync::Arc::new(Counters::default()),
        Position::START,
        |_, _, _| Ok(()),
    )
    .unwrap();
    for value in [b"2", b"3"] {
        log.append(&Record::Put {
            version: 2,
            tid: 0,
            key: b"dup".to_vec(),
            value: value.to_vec(),
            prev: None,
        })
        .unwrap();
    }
    log.commit(2, &[]).unwrap();
    drop(log);
    match Store::open(dir.path(), small_options()) {
        Err(Error::Corrupt { .. }) => {}
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("a group that writes a key twice was accepted"),
    }
}

#[test]
fn a_missing_index_file_in_the_middle_is_detected_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), small_options()).unwrap();
    let mut rng = Rng::new(5);
    for v in 1..=40u64 {
        for _ in 0..30 {
            store
                .put(0, &key(rng.below(2_000)), &rng.bytes(40))
                .unwrap();
        }
        store.commit(v).unwrap();
    }
    store.close().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path().join("lsvps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{} index files", files.len());
    // The store opens as it is.
    drop(Store::open(dir.path(), small_options()).unwrap());
    std::fs::remove_file(&files[files.len() / 2]).unwrap();
    match Store::open(dir.path(), small_options()) {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("missing"), "{what}"),
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("a store with a missing index file opened"),
    }
}
