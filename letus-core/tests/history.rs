//! Key history across deletes: every write of a key is listed, through reopens, flushes, a store written before
//! the tombstone log existed, and a damaged tombstone log.

mod common;

use common::small_options;
use letus_core::{Error, HistoryEntry, Options, Store};

/// `(version, value or None for a delete)`, newest first.
type Entries = Vec<(u64, Option<Vec<u8>>)>;

fn entries(store: &Store, key: &[u8]) -> Entries {
    let p = store.history(0, key, None, 1000).unwrap();
    assert_eq!(p.next, None);
    p.entries
        .into_iter()
        .map(|HistoryEntry { version, value }| (version, value))
        .collect()
}

/// put, put, delete, put, put of `alice` at versions 1..=5 (the sequence of the issue), with other keys around
/// so that pages are shared and flushed.
fn build(opts: &Options) -> (tempfile::TempDir, Entries) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    let steps: [Option<&[u8]>; 5] = [Some(b"100"), Some(b"90"), None, Some(b"50"), Some(b"50")];
    for (i, step) in steps.iter().enumerate() {
        for j in 0..50u32 {
            s.put(0, format!("other-{j}").as_bytes(), &[i as u8; 8])
                .unwrap();
        }
        match step {
            Some(v) => s.put(0, b"alice", v).unwrap(),
            None => s.delete(0, b"alice").unwrap(),
        }
        s.commit(i as u64 + 1).unwrap();
    }
    // Deleting a key that is already absent writes nothing.
    s.put(0, b"other-0", b"x").unwrap();
    s.delete(0, b"bob").unwrap();
    s.commit(6).unwrap();
    let expected: Entries = steps
        .iter()
        .enumerate()
        .rev()
        .map(|(i, v)| (i as u64 + 1, v.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(entries(&s, b"alice"), expected);
    assert!(entries(&s, b"bob").is_empty());
    drop(s);
    (dir, expected)
}

#[test]
fn history_goes_on_past_a_delete_and_survives_reopen_and_flush() {
    let opts = small_options();
    let (dir, expected) = build(&opts);
    // Reopened without a flush (replayed from the value log), then flushed and reopened.
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(entries(&s, b"alice"), expected);
    s.flush().unwrap();
    drop(s);
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(entries(&s, b"alice"), expected);
    // Deleted now: the history starts at the delete.
    s.delete(0, b"alice").unwrap();
    s.commit(7).unwrap();
    s.flush().unwrap();
    drop(s);
    let s = Store::open(dir.path(), opts).unwrap();
    let mut now = vec![(7, None)];
    now.extend(expected.iter().cloned());
    assert_eq!(entries(&s, b"alice"), now);
    // Pages of two, following `next`.
    let mut got = Vec::new();
    let mut before = None;
    loop {
        let p = s.history(0, b"alice", before, 2).unwrap();
        got.extend(p.entries.into_iter().map(|e| (e.version, e.value)));
        match p.next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    assert_eq!(got, now);
    // A cursor that names no entry of the key: a version where alice was unchanged, and one never committed.
    for bad in [6, 99] {
        assert!(matches!(
            s.history(0, b"alice", Some(bad), 2),
            Err(Error::InvalidCursor(v)) if v == bad
        ));
    }
}

#[test]
fn a_store_written_without_the_tombstone_log_is_rebuilt_at_open() {
    let opts = small_options();
    let (dir, expected) = build(&opts);
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    s.flush().unwrap();
    drop(s);
    // What a store of format 1 looks like: index files, no tombstone log.
    std::fs::remove_file(dir.path().join("tombstones.log")).unwrap();
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(entries(&s, b"alice"), expected);
    drop(s);
    assert!(dir.path().join("tombstones.log").exists());
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    // The rebuilt table links the next Put after a delete as well.
    s.delete(0, b"alice").unwrap();
    s.commit(7).unwrap();
    s.put(0, b"alice", b"1").unwrap();
    s.commit(8).unwrap();
    let got = entries(&s, b"alice");
    assert_eq!(got.len(), expected.len() + 2);
    assert_eq!(&got[2..], &expected[..]);
}

#[test]
fn a_damaged_durable_tombstone_entry_is_corruption() {
    let opts = small_options();
    let (dir, _) = build(&opts);
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    s.flush().unwrap();
    drop(s);
    let path = dir.path().join("tombstones.log");
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.len() > 16 + 65,
        "the log holds alice's delete and the marker"
    );
    bytes[16 + 20] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    match Store::open(dir.path(), opts) {
        Err(Error::Corrupt { path, .. }) => assert!(path.ends_with("tombstones.log")),
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("a damaged tombstone log was accepted"),
    }
}

#[test]
fn a_store_started_from_an_export_carries_the_source_history_commitment() {
    let opts = small_options();
    let src_dir = tempfile::tempdir().unwrap();
    let mut src = Store::open(src_dir.path(), opts.clone()).unwrap();
    for v in 1..=7u64 {
        for j in 0..20u64 {
            src.put(
                0,
                format!("k{}", (v * 7 + j) % 45).as_bytes(),
                &v.to_le_bytes(),
            )
            .unwrap();
        }
        src.commit(v * 2).unwrap();
    }
    let at = 10; // the fifth commit: the history before it has 4 entries
    let (size, peaks) = src.history_frontier(0, at).unwrap();
    assert_eq!(size, 4);
    let mut pairs = Vec::new();
    src.for_each_pair(0, at, |k, v| {
        pairs.push((k.to_vec(), v.to_vec()));
        Ok(())
    })
    .unwrap();

    let dst_dir = tempfile::tempdir().unwrap();
    let mut dst = Store::open(dst_dir.path(), opts.clone()).unwrap();
    dst.set_history_base(0, size, peaks.clone()).unwrap();
    for (k, v) in &pairs {
        dst.put(0, k, v).unwrap();
    }
    dst.commit(at).unwrap();
    assert_eq!(dst.digest(0, at).unwrap(), src.digest(0, at).unwrap());
    // A base is set before the first commit only.
    assert!(matches!(
        dst.set_history_base(0, size, peaks),
        Err(Error::InvalidHistoryBase(_))
    ));
    // Both reopened, then the source's next blocks (versions 12 and 14) applied to the imported store: equal
    // digests and history proofs.
    drop(src);
    drop(dst);
    let src = Store::open(src_dir.path(), opts.clone()).unwrap();
    let mut dst = Store::open(dst_dir.path(), opts.clone()).unwrap();
    for v in [12u64, 14] {
        for j in 0..20u64 {
            dst.put(
                0,
                format!("k{}", ((v / 2) * 7 + j) % 45).as_bytes(),
                &(v / 2).to_le_bytes(),
            )
            .unwrap();
        }
        dst.commit(v).unwrap();
        assert_eq!(dst.digest(0, v).unwrap(), src.digest(0, v).unwrap(), "v{v}");
    }
    assert_eq!(
        dst.history_consistency_proof(0, at, 14).unwrap(),
        src.history_consistency_proof(0, at, 14).unwrap()
    );
    assert_eq!(
        dst.history_inclusion_proof(0, 12, 14).unwrap(),
        src.history_inclusion_proof(0, 12, 14).unwrap()
    );
    drop(dst);
    let dst = Store::open(dst_dir.path(), opts).unwrap();
    assert_eq!(dst.digest(0, 14).unwrap(), src.digest(0, 14).unwrap());
    // Versions before the import are not in this store.
    assert!(dst.history_inclusion_proof(0, 8, 14).is_err());
}

#[test]
fn the_tombstone_table_is_counted_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path(), small_options()).unwrap();
    for i in 0..1_000u32 {
        s.put(0, &i.to_le_bytes(), b"v").unwrap();
    }
    s.commit(1).unwrap();
    assert_eq!(s.memory().tombstone_bytes, 0, "nothing deleted yet");
    for i in 0..1_000u32 {
        s.delete(0, &i.to_le_bytes()).unwrap();
    }
    s.commit(2).unwrap();
    // 1,000 keys of 36 bytes (trie id and path) with a 16-byte location each, at the least.
    assert!(s.memory().tombstone_bytes >= 1_000 * 52, "{:?}", s.memory());
}
