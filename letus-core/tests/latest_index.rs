//! The latest-value index (`store/latest_index.rs`): a get at the latest version reads one value record and no
//! page, and the index never answers a value that is not the newest, whatever it evicts, whatever collides, and
//! while readers fill it during commits.

mod common;

use std::collections::BTreeMap;

use common::{key, small_options, Rng};
use letus_core::{Options, Store};

#[test]
fn a_get_at_the_latest_version_reads_one_value_record_and_no_page() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_bytes: 64 * 1024,
        latest_index_bytes: 1 << 20,
        ..Options::default()
    };
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    for v in 1..=20u64 {
        for i in 0..500 {
            s.put(0, &key(i * 20 + v), format!("v{v}").as_bytes())
                .unwrap();
        }
        s.commit(v).unwrap();
    }
    // Every key was written by a commit: each get is one value read.
    let m0 = s.metrics();
    for i in 0..500 {
        assert_eq!(
            s.get(0, 20, &key(i * 20 + 7)).unwrap(),
            Some(b"v7".to_vec())
        );
    }
    let d = s.metrics() - m0;
    assert_eq!(
        (d.latest_index_hits, d.value_reads, d.page_reads),
        (500, 500, 0)
    );

    // A reopened store fills its index in the background; emptied (once the fill is done), the first get walks
    // the pages and the second is a hit.
    drop(s);
    let s = Store::open(dir.path(), opts).unwrap();
    wait_filled(&s, 10_000);
    s.clear_caches();
    let k = key(3 * 20 + 5);
    let m0 = s.metrics();
    assert_eq!(s.get(0, 20, &k).unwrap(), Some(b"v5".to_vec()));
    let d = s.metrics() - m0;
    assert_eq!(d.latest_index_hits, 0);
    assert!(d.page_reads >= 2, "the walk read pages ({})", d.page_reads);
    let m0 = s.metrics();
    assert_eq!(s.get(0, 20, &k).unwrap(), Some(b"v5".to_vec()));
    let d = s.metrics() - m0;
    assert_eq!(
        (d.latest_index_hits, d.value_reads, d.page_reads),
        (1, 1, 0)
    );
    // Older versions never use it; an access list does.
    let m0 = s.metrics();
    assert_eq!(s.get(0, 19, &k).unwrap(), Some(b"v5".to_vec()));
    assert_eq!((s.metrics() - m0).latest_index_hits, 0);
    let keys: Vec<Vec<u8>> = (0..50).map(|i| key(i * 20 + 5)).collect();
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    assert!(s
        .get_many(0, 20, &refs)
        .unwrap()
        .iter()
        .all(|v| v.as_deref() == Some(b"v5")));
    let m0 = s.metrics();
    assert!(s
        .get_many(0, 20, &refs)
        .unwrap()
        .iter()
        .all(|v| v.as_deref() == Some(b"v5")));
    let d = s.metrics() - m0;
    assert_eq!((d.latest_index_hits, d.page_reads), (50, 0));
}

/// The model's value of every key at every version, for a schedule of puts, deletes and re-puts over two tries.
fn run_against_model(opts: Options, seed: u64, versions: u64, keys: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    let mut rng = Rng::new(seed);
    let mut model: BTreeMap<(u32, u64), Vec<u8>> = BTreeMap::new();
    for v in 1..=versions {
        for _ in 0..rng.below(120) + 1 {
            let tid = rng.below(2) as u32;
            let k = rng.below(keys);
            if rng.chance(25) {
                s.delete(tid, &key(k)).unwrap();
                model.remove(&(tid, k));
            } else {
                let val = rng.bytes(40);
                s.put(tid, &key(k), &val).unwrap();
                model.insert((tid, k), val);
            }
        }
        s.commit(v).unwrap();
        // Every key, present or absent, through single gets (filling the index from walks) and an access list.
        for tid in 0..2u32 {
            for k in 0..keys {
                assert_eq!(
                    s.get(tid, v, &key(k)).unwrap(),
                    model.get(&(tid, k)).cloned(),
                    "trie {tid} key {k} at version {v}"
                );
            }
        }
        if v % 10 == 0 {
            let ks: Vec<Vec<u8>> = (0..keys).map(key).collect();
            let refs: Vec<&[u8]> = ks.iter().map(Vec::as_slice).collect();
            let got = s.get_many(1, v, &refs).unwrap();
            for (k, g) in got.into_iter().enumerate() {
                assert_eq!(
                    g,
                    model.get(&(1, k as u64)).cloned(),
                    "get_many key {k} at {v}"
                );
            }
        }
        if v % 25 == 0 {
            drop(s);
            s = Store::open(dir.path(), opts.clone()).unwrap();
        }
    }
}

#[test]
fn gets_equal_the_model_with_an_index_that_evicts_constantly() {
    // 48 slots for up to 2 x 600 keys, pages evicted constantly too.
    let opts = Options {
        latest_index_bytes: 12 * 48,
        ..small_options()
    };
    run_against_model(opts, 1, 120, 600);
}

#[test]
fn gets_equal_the_model_with_an_index_for_every_key() {
    let opts = Options {
        latest_index_bytes: 1 << 20,
        ..Options::default()
    };
    run_against_model(opts, 2, 80, 600);
}

#[test]
fn gets_equal_the_model_with_the_index_off() {
    let opts = Options {
        latest_index_bytes: 0,
        ..small_options()
    };
    run_against_model(opts, 3, 40, 300);
}

/// What version `v`'s commit does to key `k`: 1 put, 2 delete, 0 nothing.
fn action(k: u64, v: u64) -> u8 {
    let h = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ v.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
        .rotate_left(29);
    match h % 16 {
        0..=3 => 1,
        4 => 2,
        _ => 0,
    }
}

/// The value of key `k` as of version `v` under [`action`].
fn expected(k: u64, v: u64) -> Option<Vec<u8>> {
    (1..=v).rev().find_map(|w| match action(k, w) {
        1 => Some(Some(format!("{k}@{w}").into_bytes())),
        2 => Some(None),
        _ => None,
    })?
}

#[test]
fn readers_that_fill_the_index_during_commits_read_the_value_of_their_snapshot() {
    const KEYS: u64 = 800;
    const VERSIONS: u64 = 150;
    let dir = tempfile::tempdir().unwrap();
    // A small index (many evictions, so readers keep re-inserting) and a small page budget.
    let opts = Options {
        latest_index_bytes: 12 * 256,
        ..small_options()
    };
    let mut s = Store::open(dir.path(), opts).unwrap();
    let reader = s.reader();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        for t in 0..3u64 {
            let (reader, done) = (reader.clone(), &done);
            sc.spawn(move || {
                let mut rng = Rng::new(100 + t);
                let mut checked = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || checked == 0 {
                    let snap = reader.snapshot();
                    let Some(v) = snap.version() else { continue };
                    for _ in 0..50 {
                        let k = rng.below(KEYS);
                        assert_eq!(
                            snap.get(0, v, &key(k)).unwrap(),
                            expected(k, v),
                            "key {k} at {v}"
                        );
                        checked += 1;
                    }
                }
            });
        }
        for v in 1..=VERSIONS {
            for k in 0..KEYS {
                match action(k, v) {
                    1 => s.put(0, &key(k), format!("{k}@{v}").as_bytes()).unwrap(),
                    2 => s.delete(0, &key(k)).unwrap(),
                    _ => {}
                }
            }
            s.commit(v).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for k in 0..KEYS {
        assert_eq!(s.get(0, VERSIONS, &key(k)).unwrap(), expected(k, VERSIONS));
    }
}

/// Waits (at most 60 s) until the background fill has inserted `n` leaves since the open.
fn wait_filled(s: &Store, n: u64) {
    let t = std::time::Instant::now();
    while s.metrics().latest_index_filled < n {
        assert!(
            t.elapsed().as_secs() < 60,
            "the fill did not finish: {:?}",
            s.metrics()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_reopened_store_fills_its_index_in_the_background_while_commits_go_on() {
    const KEYS: u64 = 6_000;
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_bytes: 64 * 1024,
        memory_budget_bytes: 8 << 20,
        latest_index_bytes: 1 << 20,
        ..Options::default()
    };
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    for v in 1..=3u64 {
        for k in 0..KEYS {
            let val = format!("{k}@{v}").into_bytes();
            s.put(2, &key(k), &val).unwrap();
            model.insert(k, val);
        }
        s.commit(v).unwrap();
    }
    s.close().unwrap();

    // Reopened: the fill walks the state while commits change and delete keys under it.
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    let mut rng = Rng::new(9);
    for v in 4..=40u64 {
        for _ in 0..200 {
            let k = rng.below(KEYS + 500);
            if rng.chance(20) {
                s.delete(2, &key(k)).unwrap();
                model.remove(&k);
            } else {
                let val = format!("{k}@{v}").into_bytes();
                s.put(2, &key(k), &val).unwrap();
                model.insert(k, val);
            }
        }
        s.commit(v).unwrap();
    }
    wait_filled(&s, 1);
    let t = std::time::Instant::now();
    while s.metrics().latest_index_filled < model.len() as u64 / 2 && t.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for k in 0..KEYS + 500 {
        assert_eq!(
            s.get(2, 40, &key(k)).unwrap(),
            model.get(&k).cloned(),
            "key {k}"
        );
    }
    s.close().unwrap();

    // Reopened with no commit: once filled, every present key is one value read.
    let s = Store::open(dir.path(), opts).unwrap();
    wait_filled(&s, model.len() as u64);
    assert_eq!(
        s.metrics().latest_index_filled,
        model.len() as u64,
        "every leaf once"
    );
    let m0 = s.metrics();
    for (k, v) in &model {
        assert_eq!(s.get(2, 40, &key(*k)).unwrap().as_ref(), Some(v));
    }
    let d = s.metrics() - m0;
    assert_eq!(d.page_reads, 0);
    assert!(
        d.latest_index_hits >= model.len() as u64 * 95 / 100,
        "{} of {} answered by the index",
        d.latest_index_hits,
        model.len()
    );
}
