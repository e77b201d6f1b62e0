//! Snapshot readers: many threads read pinned versions while the writer commits, and every read equals the
//! reference model of its version; a walk whose consumer stalls does not hold up commits, and still returns
//! exactly the pairs of its version.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{key, small_options, Rng};
use letus_core::{Options, Store};
use letus_verify::reference::ReferenceTrie;
use letus_verify::{verify_proof, Limits};

/// The writes of version `v`: deterministic, so the models can be built up front.
fn writes(v: u64, keys: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = Rng::new(v * 7919);
    (0..10 + rng.below(40))
        .map(|_| {
            let k = key(rng.below(keys));
            if rng.chance(15) {
                (k, None)
            } else {
                (k, Some(rng.bytes(40)))
            }
        })
        .collect()
}

/// `models[v]`: trie 0 after version `v` (index 0: empty).
fn models(versions: u64, keys: u64) -> Vec<ReferenceTrie> {
    let mut out = vec![ReferenceTrie::new()];
    for v in 1..=versions {
        let mut t = out.last().unwrap().clone();
        for (k, val) in writes(v, keys) {
            match val {
                Some(val) => t.insert(&k, &val),
                None => t.remove(&k),
            }
        }
        out.push(t);
    }
    out
}

fn commit(store: &mut Store, v: u64, keys: u64) {
    for (k, val) in writes(v, keys) {
        match val {
            Some(val) => store.put(0, &k, &val).unwrap(),
            None => store.delete(0, &k).unwrap(),
        }
    }
    store.commit(v).unwrap();
}

fn check(snap: &letus_core::Snapshot, model: &ReferenceTrie, rng: &mut Rng, keys: u64) {
    let v = snap.version().unwrap();
    let d = snap.digest(0, v).unwrap();
    assert_eq!(d.root, model.root(), "root of the snapshot at v{v}");
    for _ in 0..5 {
        let k = key(rng.below(keys));
        let (value, proof) = snap.get_proof(0, v, &k).unwrap();
        assert_eq!(value.as_deref(), model.get(&k), "{k:?} at v{v}");
        let read = verify_proof(&d.root, &k, value.as_deref(), &proof, &Limits::default()).unwrap();
        assert_eq!(read.value(), model.get(&k));
        // As-of reads past the snapshot's version read its version, not what was committed since.
        assert_eq!(
            snap.get(0, v + 1_000, &k).unwrap().as_deref(),
            model.get(&k)
        );
    }
    assert!(
        snap.digest(0, v + 1).is_err(),
        "a version after the snapshot's is not visible"
    );
}

#[test]
fn snapshots_read_their_version_while_commits_go_on() {
    let (versions, keys) = (80u64, 600u64);
    let models = Arc::new(models(versions, keys));
    for opts in [
        small_options(),
        // Pages evicted constantly, and a flush every few commits.
        Options {
            memory_budget_bytes: 16 * 1024,
            memtable_bytes: 2 * 1024,
            ..small_options()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), opts).unwrap();
        commit(&mut store, 1, keys);
        let reader = store.reader();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = Arc::new(std::sync::Mutex::new(stop_rx));
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let (reader, models, stop) = (reader.clone(), models.clone(), stop_rx.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng::new(t);
                    let mut held = Vec::new();
                    let mut checked = 0u64;
                    loop {
                        let snap = reader.snapshot();
                        let v = snap.version().unwrap() as usize;
                        check(&snap, &models[v], &mut rng, keys);
                        held.push(snap);
                        // Snapshots taken earlier still read their own versions.
                        let old = &held[rng.below(held.len() as u64) as usize];
                        check(
                            old,
                            &models[old.version().unwrap() as usize],
                            &mut rng,
                            keys,
                        );
                        checked += 1;
                        if stop.lock().unwrap().try_recv().is_ok() {
                            return checked;
                        }
                    }
                })
            })
            .collect();
        for v in 2..=versions {
            commit(&mut store, v, keys);
        }
        for _ in &threads {
            stop_tx.send(()).unwrap();
        }
        for t in threads {
            assert!(t.join().unwrap() > 0);
        }
        // A snapshot taken after the last commit sees it; the store's own reads agree.
        let snap = store.snapshot();
        assert_eq!(snap.version(), Some(versions));
        assert_eq!(
            store.digest(0, versions).unwrap(),
            snap.digest(0, versions).unwrap()
        );
    }
}

#[test]
fn a_stalled_walk_does_not_hold_up_commits_and_returns_its_version() {
    // Enough keys for several chunks of a snapshot walk.
    let (versions, keys) = (40u64, 5_000u64);
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), small_options()).unwrap();
    for k in 0..keys {
        store.put(0, &key(k), b"first").unwrap();
    }
    store.commit(1).unwrap();
    let mut at1 = ReferenceTrie::new();
    for k in 0..keys {
        at1.insert(&key(k), b"first");
    }
    let snap = store.snapshot();
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let walker = std::thread::spawn(move || {
        let mut pairs = Vec::new();
        let n = snap
            .for_each_pair(0, 1, |k, v| {
                if pairs.is_empty() {
                    started_tx.send(()).unwrap();
                    // The consumer stalls (a client that stopped reading) until the writer is done.
                    go_rx.recv().unwrap();
                }
                pairs.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        (n, pairs)
    });
    started_rx.recv().unwrap();
    // The writer commits while the walk is stalled; if the walk held the engine, this would never finish.
    let (done_tx, done_rx) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        for v in 2..=versions {
            // Overwrite a seventh of the keys each version: the pairs of version 1 change under the walk.
            for k in 0..keys {
                if k % 7 == v % 7 {
                    store.put(0, &key(k), &v.to_le_bytes()).unwrap();
                }
            }
            store.commit(v).unwrap();
        }
        done_tx.send(()).unwrap();
        store
    });
    done_rx
        .recv_timeout(Duration::from_secs(300))
        .expect("commits finish while a snapshot walk is stalled");
    let store = writer.join().unwrap();
    go_tx.send(()).unwrap();
    let (n, pairs) = walker.join().unwrap();
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        at1.pairs().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert_eq!(n as usize, expected.len());
    assert_eq!(
        pairs, expected,
        "the walk returns exactly version 1's pairs"
    );
    assert_eq!(store.latest_version(), Some(versions));
}

#[test]
fn a_snapshot_reads_the_history_and_frontier_of_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), small_options()).unwrap();
    store.put(0, b"alice", b"1").unwrap();
    store.commit(1).unwrap();
    store.put(0, b"alice", b"2").unwrap();
    store.commit(2).unwrap();
    let at2 = store.snapshot();
    // After the snapshot: alice is deleted, then written again.
    store.delete(0, b"alice").unwrap();
    store.commit(3).unwrap();
    let at3 = store.snapshot();
    store.put(0, b"alice", b"4").unwrap();
    store.commit(4).unwrap();
    let entries = |s: &letus_core::Snapshot| -> Vec<(u64, Option<Vec<u8>>)> {
        let p = s.history(0, b"alice", None, 100).unwrap();
        p.entries
            .into_iter()
            .map(|e| (e.version, e.value))
            .collect()
    };
    assert_eq!(
        entries(&at2),
        vec![(2, Some(b"2".to_vec())), (1, Some(b"1".to_vec()))],
        "a snapshot sees the history up to its version only"
    );
    assert_eq!(
        entries(&at3),
        vec![
            (3, None),
            (2, Some(b"2".to_vec())),
            (1, Some(b"1".to_vec()))
        ],
        "a snapshot taken while alice was deleted starts at the delete"
    );
    assert_eq!(entries(&store.snapshot()).len(), 4);
    // Paging on a snapshot, and a cursor above its version refused.
    let p = at3.history(0, b"alice", None, 1).unwrap();
    assert_eq!(p.next, Some(3));
    let p = at3.history(0, b"alice", p.next, 1).unwrap();
    assert_eq!((p.entries[0].version, p.next), (2, Some(2)));
    assert!(matches!(
        at2.history(0, b"alice", Some(4), 10),
        Err(letus_core::Error::InvalidCursor(4))
    ));
    // Digests, versions and frontiers are those of the snapshot's version.
    assert_eq!(at2.latest_version(), Some(2));
    assert!(!at2.has_version(3) && store.snapshot().has_version(3));
    assert_eq!(at2.versions(), vec![1, 2]);
    assert!(at2.digest(0, 3).is_err());
    assert_eq!(
        at2.history_frontier(0, 2).unwrap(),
        store.history_frontier(0, 2).unwrap()
    );
}
