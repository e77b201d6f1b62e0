//! A store with far more index files than the process may open descriptors: a child process runs under
//! `ulimit -n 64`, writes 300 commits that each end in a flush (300 index files), reopens the store and reads
//! every version back. The engine holds at most `MAX_OPEN_FILES` index-file descriptors (reopening evicted ones on
//! their next read); before, every index file kept its descriptor and the open failed with "too many open files".

mod common;

use std::process::Command;

use common::{key, small_options};
use letus_core::{Options, Store};

const VERSIONS: u64 = 300;

fn opts() -> Options {
    Options {
        // Every commit flushes: one index file per version.
        max_replay_millis: 0,
        ..small_options()
    }
}

/// Child side: runs only when the parent sets `LETUS_FD_DIR` (under a low descriptor limit).
#[test]
fn fd_child() {
    let Ok(dir) = std::env::var("LETUS_FD_DIR") else {
        return;
    };
    let mut digests = Vec::new();
    {
        let mut s = Store::open(&dir, opts()).unwrap();
        for v in 1..=VERSIONS {
            for i in 0..5 {
                s.put(0, &key(v * 5 + i), &v.to_le_bytes()).unwrap();
            }
            digests.push(s.commit(v).unwrap()[0]);
        }
        s.close().unwrap();
    }
    let files = std::fs::read_dir(std::path::Path::new(&dir).join("lsvps"))
        .unwrap()
        .count() as u64;
    assert!(files >= VERSIONS, "{files} index files");
    let s = Store::open(&dir, opts()).unwrap();
    s.clear_caches();
    for (i, d) in digests.iter().enumerate() {
        let v = i as u64 + 1;
        assert_eq!(s.digest(0, v).unwrap(), *d);
        // A value written at v, read at v: its pages are in index file v.
        assert_eq!(
            s.get(0, v, &key(v * 5)).unwrap(),
            Some(v.to_le_bytes().to_vec())
        );
        let (_, proof) = s.get_proof(0, v, &key(v * 5 + 1)).unwrap();
        let read = letus_verify::verify_proof(
            &d.root,
            &key(v * 5 + 1),
            Some(&v.to_le_bytes()),
            &proof,
            &letus_verify::Limits::default(),
        )
        .unwrap();
        assert_eq!(read.value(), Some(v.to_le_bytes().as_slice()));
    }
    println!("fd child ok: {files} index files");
}

#[test]
fn more_index_files_than_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" --exact fd_child --nocapture --test-threads=1")
        .arg(&exe)
        .env("LETUS_FD_DIR", dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed under ulimit -n 64:\n{text}"
    );
    assert!(text.contains("fd child ok"), "{text}");
}
