//! A store with far more index files than the process may open descriptors: a child process runs under
//! `ulimit -n 256`, writes 10,000 commits that each end in a flush (10,000 index files), reopens the store with
//! every one of them present and reads versions spread over the whole range back, in an order that keeps evicting
//! descriptors. The engine holds at most a quarter of the soft limit (here 64) of index-file descriptors,
//! reopening evicted ones on their next read; before, every index file kept its descriptor and the open failed
//! with "too many open files".
//!
//! Speed: each flush fsyncs the index file, its directory and the roots and tombstone logs, which on a disk costs
//! about 10 ms each time (10,000 flushes: minutes). The store is therefore put on `/dev/shm` (tmpfs: an fsync is
//! free) when it exists; durability is not what this test is about. Elsewhere it falls back to the temp dir.

mod common;

use std::path::Path;
use std::process::Command;

use common::{key, small_options};
use letus_core::{Options, Store};

const VERSIONS: u64 = 10_000;
const LIMIT: u64 = 256;

fn opts() -> Options {
    Options {
        // Every commit flushes: one index file per version.
        max_replay_millis: 0,
        // Only the value log's commit fsync depends on it; the flushes fsync anyway.
        sync: false,
        ..small_options()
    }
}

fn value(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// Descriptors open in this process now.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Child side: runs only when the parent sets `LETUS_FD_DIR` (under a low descriptor limit).
#[test]
fn fd_child() {
    let Ok(dir) = std::env::var("LETUS_FD_DIR") else {
        return;
    };
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(soft, LIMIT, "the child must run under ulimit -n {LIMIT}");
    assert_eq!(opts().open_index_files(), (LIMIT / 4) as usize);

    let started = std::time::Instant::now();
    let mut digests = Vec::new();
    {
        let mut s = Store::open(&dir, opts()).unwrap();
        for v in 1..=VERSIONS {
            // Key 0 is written at every version: the trie's root page changes every time, and reading a
            // version's root needs that version's file.
            s.put(0, &key(0), &value(v)).unwrap();
            s.put(0, &key(v), &value(v)).unwrap();
            digests.push(s.commit(v).unwrap()[0]);
        }
        s.close().unwrap();
    }
    let wrote = started.elapsed();
    let files = std::fs::read_dir(Path::new(&dir).join("lsvps"))
        .unwrap()
        .count() as u64;
    assert!(files >= VERSIONS, "{files} index files");

    let started = std::time::Instant::now();
    let s = Store::open(&dir, opts()).unwrap();
    assert_eq!(
        s.replayed().versions,
        0,
        "every version is in an index file"
    );
    assert!(
        open_fds() < LIMIT as usize,
        "{} descriptors open",
        open_fds()
    );
    s.clear_caches();
    // Every version, visited in a scattered order (a stride coprime to VERSIONS), so that nearly every read
    // goes to a file whose descriptor was evicted; the oldest and newest versions are among them.
    let stride = 7_919; // prime, does not divide 10,000
    let mut reads = 0;
    let mut proofs = 0;
    for i in 0..VERSIONS {
        let v = i * stride % VERSIONS + 1;
        let d = &digests[v as usize - 1];
        assert_eq!(s.digest(0, v).unwrap(), *d);
        // Written at v, read at v: the path to it is in index file v.
        assert_eq!(s.get(0, v, &key(v)).unwrap(), Some(value(v)));
        assert_eq!(s.get(0, v, &key(0)).unwrap(), Some(value(v)));
        // Not written yet at v.
        assert_eq!(s.get(0, v, &key(v + 1)).unwrap(), None);
        reads += 3;
        if i % 10 == 0 || v <= 10 || v > VERSIONS - 10 {
            let (got, proof) = s.get_proof(0, v, &key(v)).unwrap();
            assert_eq!(got, Some(value(v)));
            let read = letus_verify::verify_proof(
                &d.root,
                &key(v),
                Some(&value(v)),
                &proof,
                &letus_verify::Limits::default(),
            )
            .unwrap();
            assert_eq!(read.value(), Some(value(v).as_slice()));
            let (got, proof) = s.get_proof(0, v, &key(v + 1)).unwrap();
            assert_eq!(got, None);
            let read = letus_verify::verify_proof(
                &d.root,
                &key(v + 1),
                None,
                &proof,
                &letus_verify::Limits::default(),
            )
            .unwrap();
            assert_eq!(read.value(), None);
            proofs += 2;
        }
    }
    // The latest version reads keys written all over the range: the pages holding them were last written in
    // index files across the whole range.
    for v in (1..=VERSIONS).step_by(97) {
        assert_eq!(s.get_latest(0, &key(v)).unwrap(), Some(value(v)));
    }
    assert!(
        open_fds() < LIMIT as usize,
        "{} descriptors open",
        open_fds()
    );
    println!(
        "fd child ok: {files} index files, {reads} reads and {proofs} proofs under ulimit -n {LIMIT} \
         (write {wrote:?}, reopen and read {:?})",
        started.elapsed()
    );
}

#[test]
fn more_index_files_than_descriptors() {
    // tmpfs when there is one (see the module docs).
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap_or_else(|_| tempfile::tempdir().unwrap())
    } else {
        tempfile::tempdir().unwrap()
    };
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {LIMIT} && exec \"$0\" --exact fd_child --nocapture --test-threads=1"
        ))
        .arg(&exe)
        .env("LETUS_FD_DIR", dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed under ulimit -n {LIMIT}:\n{text}"
    );
    assert!(text.contains("fd child ok"), "{text}");
    println!(
        "{}",
        text.lines().find(|l| l.contains("fd child ok")).unwrap()
    );
}
