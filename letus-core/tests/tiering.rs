//! Tiering against a real S3-compatible server (SeaweedFS, started by the test on 127.0.0.1; see
//! `support/s3_server.rs`): a store whose sealed files went to a warm directory and to the object store answers
//! every read, proof, digest and history query exactly as an untiered store with the same commits; a reopened
//! one too; a second writer on the same prefix fences the first; an unreachable object store fails cold reads
//! with a clear error while hot reads and commits go on; an idle store sends no request.

mod common;
#[path = "support/s3_server.rs"]
mod s3_server;

use std::sync::Arc;
use std::time::Duration;

use common::{key, small_options, Rng};
use letus_core::storage::s3::S3;
use letus_core::storage::tiered::{is_cold_unavailable, ColdStore, TierConfig, TierPolicy, Tiered};
use letus_core::{Error, Options, Store};
use s3_server::S3Server;

const TID: u32 = 3;

fn tier_config(
    root: &std::path::Path,
    warm: &std::path::Path,
    s3: &S3Server,
    prefix: &str,
) -> TierConfig {
    let cold: Arc<dyn ColdStore> = Arc::new(S3::new(&s3.config()).unwrap());
    TierConfig {
        warm_dir: Some(warm.to_path_buf()),
        cold: Some(cold),
        cold_prefix: prefix.into(),
        // Small blocks and cache: reads cross blocks and the cache evicts.
        cold_cache_bytes: 256 << 10,
        cold_block_bytes: 16 << 10,
        policy: TierPolicy {
            warm_after_versions: Some(2),
            cold_after_versions: Some(5),
            scan_every_versions: 1,
            ..TierPolicy::default()
        },
        ..TierConfig::new(root)
    }
}

/// The tiered stores read DeltaPage chains concurrently (as a node with a cold tier does); the untiered one
/// record by record: the differential compares both ways of reading too.
fn opts(storage: letus_core::storage::SharedStorage) -> Options {
    Options {
        prefetch_delta_chains: true,
        storage,
        memtable_bytes: 8 * 1024,
        vdls_file_bytes: 16 * 1024,
        read_threads: 2,
        ..small_options()
    }
}

/// The writes of version `v`.
fn writes(rng: &mut Rng, v: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut w = Vec::new();
    for i in 0..25 {
        w.push((
            key(v * 25 + i),
            Some(format!("v{v}-{i}-{}", rng.below(1000)).into_bytes()),
        ));
    }
    for _ in 0..10 {
        let k = rng.below(v * 25 + 1);
        if rng.chance(20) {
            w.push((key(k), None));
        } else {
            w.push((key(k), Some(rng.bytes(40))));
        }
    }
    w
}

fn commit(store: &mut Store, v: u64, w: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, val) in w {
        match val {
            Some(x) => store.put(TID, k, x).unwrap(),
            None => store.delete(TID, k).unwrap(),
        }
    }
    store.commit(v).unwrap();
}

/// Everything a client can ask, at every version, compared between the two stores.
fn same_answers(a: &Store, b: &Store, versions: u64, keys: u64) {
    for v in 1..=versions {
        assert_eq!(
            a.digest(TID, v).unwrap(),
            b.digest(TID, v).unwrap(),
            "digest at {v}"
        );
        for k in (0..keys).step_by(7) {
            let k = key(k);
            assert_eq!(
                a.get(TID, v, &k).unwrap(),
                b.get(TID, v, &k).unwrap(),
                "get at {v}"
            );
        }
        for k in (0..keys).step_by(53) {
            let k = key(k);
            let (va, pa) = a.get_proof(TID, v, &k).unwrap();
            let (vb, pb) = b.get_proof(TID, v, &k).unwrap();
            assert_eq!((va, pa), (vb, pb), "proof at {v}");
        }
        assert_eq!(
            a.history_inclusion_proof(TID, v, versions).unwrap(),
            b.history_inclusion_proof(TID, v, versions).unwrap()
        );
    }
    for k in (0..keys).step_by(31) {
        let k = key(k);
        let ha = a.history(TID, &k, None, 100).unwrap();
        let hb = b.history(TID, &k, None, 100).unwrap();
        assert_eq!(format!("{ha:?}"), format!("{hb:?}"), "history");
    }
}

#[test]
fn a_tiered_store_answers_exactly_as_an_untiered_one_and_its_hot_disk_holds_little() {
    let s3 = S3Server::start();
    let plain_dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let warm = tempfile::tempdir().unwrap();
    let tiers = Tiered::open(tier_config(root.path(), warm.path(), &s3, "t1")).unwrap();
    let mut plain = Store::open(
        plain_dir.path(),
        Options {
            prefetch_delta_chains: false,
            ..opts(letus_core::storage::local())
        },
    )
    .unwrap();
    let mut tiered = Store::open(root.path().join("state"), opts(tiers.shared())).unwrap();
    // Index files are consolidated as they go cold (from the warm tier: the consolidated file is written hot).
    tiers.set_before_cold(tiered.reader().cold_preparer());
    let mut rng = Rng::new(7);
    const V: u64 = 60;
    for v in 1..=V {
        let w = writes(&mut rng, v);
        commit(&mut plain, v, &w);
        commit(&mut tiered, v, &w);
        tiers.note_version(v);
        tiers.migrate_now().unwrap();
    }
    let st = tiers.status();
    assert!(st.tiers[2].files > 10, "files went cold: {st:?}");
    assert!(st.tiers[1].files > 0, "files are warm: {st:?}");
    assert_eq!(st.move_failures, 0, "{st:?}");
    // Everything the mover took is off the hot disk.
    let hot = st.tiers[0].bytes + st.hot_other_bytes;
    let all = hot + st.tiers[1].bytes + st.tiers[2].bytes;
    assert!(hot * 2 < all, "hot {hot} of {all} bytes: {st:?}");
    let m = letus_core::storage::tiered::Manifest::load(&letus_core::storage::Local, root.path())
        .unwrap();
    let cold_idx: Vec<&String> = m
        .files
        .iter()
        .filter(|(rel, f)| {
            f.tier == letus_core::storage::tiered::Tier::Cold && rel.ends_with(".idx")
        })
        .map(|(rel, _)| rel)
        .collect();
    assert!(!cold_idx.is_empty());
    assert!(
        cold_idx.iter().all(|rel| rel.ends_with(".1.idx")),
        "every cold index file is consolidated: {cold_idx:?}"
    );

    tiered.clear_caches();
    tiers.clear_cold_cache();
    let gets_before = tiers
        .cold_counters()
        .unwrap()
        .gets
        .load(std::sync::atomic::Ordering::Relaxed);
    same_answers(&plain, &tiered, V, V * 25);
    assert!(
        tiers
            .cold_counters()
            .unwrap()
            .gets
            .load(std::sync::atomic::Ordering::Relaxed)
            > gets_before,
        "the reads went to the object store"
    );
    assert!(
        tiers.status().pinned_reads > 0,
        "index blocks came from the pin files"
    );
    let comm = tiered.digest(TID, V).unwrap();
    tiered.verify_full(TID, V, &comm.root).unwrap();

    // Reopened from the manifest: the same answers, and commits go on.
    tiered.close().unwrap();
    drop(tiers);
    let tiers = Tiered::open(tier_config(root.path(), warm.path(), &s3, "t1")).unwrap();
    let mut tiered = Store::open(root.path().join("state"), opts(tiers.shared())).unwrap();
    same_answers(&plain, &tiered, V, V * 25);
    let w = writes(&mut rng, V + 1);
    commit(&mut plain, V + 1, &w);
    commit(&mut tiered, V + 1, &w);
    assert_eq!(
        plain.digest(TID, V + 1).unwrap(),
        tiered.digest(TID, V + 1).unwrap()
    );

    // Idle: no request at all.
    let c = tiers.cold_counters().unwrap();
    let before = c.requests();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(c.requests(), before, "an idle store sent requests");
}

#[test]
fn a_second_writer_on_the_same_prefix_fences_the_first() {
    let s3 = S3Server::start();
    let (r1, w1, r2, w2) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let a = Tiered::open(tier_config(r1.path(), w1.path(), &s3, "shared")).unwrap();
    let mut sa = Store::open(r1.path().join("state"), opts(a.shared())).unwrap();
    let mut rng = Rng::new(1);
    for v in 1..=12 {
        commit(&mut sa, v, &writes(&mut rng, v));
        a.note_version(v);
        a.migrate_now().unwrap();
    }
    assert!(a.status().tiers[2].files > 0);
    assert!(!a.status().fenced);
    // Another store claims the same prefix.
    let b = Tiered::open(tier_config(r2.path(), w2.path(), &s3, "shared")).unwrap();
    assert!(b.status().epoch > a.status().epoch);
    let mut failed = false;
    for v in 13..=30 {
        commit(&mut sa, v, &writes(&mut rng, v));
        a.note_version(v);
        if let Err(e) = a.migrate_now() {
            assert!(e.to_string().contains("fenced"), "{e}");
            failed = true;
            break;
        }
    }
    assert!(
        failed,
        "the first writer went on moving files to a prefix it lost"
    );
    assert!(a.status().fenced);
    // Fenced is not broken: what it has stays readable.
    let comm = sa.digest(TID, sa.latest_version().unwrap()).unwrap();
    sa.clear_caches();
    sa.verify_full(TID, sa.latest_version().unwrap(), &comm.root)
        .unwrap();
}

#[test]
fn an_unreachable_object_store_fails_cold_reads_clearly_while_hot_reads_and_commits_go_on() {
    let mut s3 = S3Server::start();
    let root = tempfile::tempdir().unwrap();
    let warm = tempfile::tempdir().unwrap();
    let mut cfg = tier_config(root.path(), warm.path(), &s3, "down");
    cfg.warm_dir = None;
    cfg.cold_cache_bytes = 1;
    let tiers = Tiered::open(cfg).unwrap();
    let o = Options {
        memory_budget_bytes: 64 << 20,
        ..opts(tiers.shared())
    };
    let mut store = Store::open(root.path().join("state"), o).unwrap();
    let mut rng = Rng::new(3);
    for v in 1..=40 {
        commit(&mut store, v, &writes(&mut rng, v));
        tiers.note_version(v);
        tiers.migrate_now().unwrap();
    }
    assert!(tiers.status().tiers[2].files > 0);
    // Warm the page cache for the latest state so that commits need no cold page.
    for k in 0..40 * 25 {
        let _ = store.get_latest(TID, &key(k));
    }
    s3.kill();
    // Old values live in cold value-log files: their reads fail, with the cold tier named as the reason.
    let mut cold_errors = 0;
    for k in 0..100 {
        match store.get(TID, 2, &key(k)) {
            Err(Error::Io { source, .. }) if is_cold_unavailable(&source) => cold_errors += 1,
            Err(e) => panic!("a cold read failed with an unexpected error: {e}"),
            Ok(_) => {}
        }
    }
    assert!(cold_errors > 0, "no read reached the cold tier");
    // Commits go on (their pages are cached; their files are hot), and read back.
    let mut last = Vec::new();
    for v in 41..=45 {
        last = writes(&mut rng, v);
        commit(&mut store, v, &last);
        tiers.note_version(v);
        let _ = tiers.migrate_now(); // fails: the mover cannot upload; it retries later
    }
    let (k, _) = &last[0];
    let want = last
        .iter()
        .rev()
        .find(|(x, _)| x == k)
        .and_then(|(_, v)| v.clone());
    assert_eq!(store.get_latest(TID, k).unwrap(), want);
    assert!(tiers.status().move_failures > 0);
    // The server comes back: the same reads work.
    s3.restart();
    for k in 0..100 {
        store.get(TID, 2, &key(k)).unwrap();
    }
    // Moves resume (the restarted server may need a moment before it takes writes again).
    let mut moved = tiers.migrate_now();
    for _ in 0..20 {
        if moved.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        moved = tiers.migrate_now();
    }
    moved.unwrap();
    let comm = store.digest(TID, 45).unwrap();
    store.clear_caches();
    store.verify_full(TID, 45, &comm.root).unwrap();
}

#[test]
/// A store whose cold index files were consolidated reopens while the object store is down.
fn a_consolidated_store_reopens_with_the_object_store_down() {
    let mut s3 = S3Server::start();
    let root = tempfile::tempdir().unwrap();
    let warm = tempfile::tempdir().unwrap();
    let tiers = Tiered::open(tier_config(root.path(), warm.path(), &s3, "t1")).unwrap();
    let mut tiered = Store::open(root.path().join("state"), opts(tiers.shared())).unwrap();
    tiers.set_before_cold(tiered.reader().cold_preparer());
    let mut rng = Rng::new(7);
    for v in 1..=60 {
        let w = writes(&mut rng, v);
        commit(&mut tiered, v, &w);
        tiers.note_version(v);
        tiers.migrate_now().unwrap();
    }
    drop(tiered);
    drop(tiers);
    s3.kill();
    let tiers = Tiered::open(tier_config(root.path(), warm.path(), &s3, "t1")).unwrap();
    let reopened = Store::open(root.path().join("state"), opts(tiers.shared())).unwrap();
    assert_eq!(reopened.latest_version(), Some(60));
}

/// Pruning and value-log GC on a tiered store: index files and value-log files that went warm or cold are
/// replaced or deleted through the tiers (the manifest forgets them, the object store's copies are removed), and
/// the store answers as an untiered archive at every version it keeps, before and after reopening.
#[test]
fn pruning_and_value_log_gc_reach_files_in_every_tier() {
    let s3 = S3Server::start();
    let plain_dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let warm = tempfile::tempdir().unwrap();
    let tiers = Tiered::open(tier_config(root.path(), warm.path(), &s3, "gc")).unwrap();
    let mut plain = Store::open(plain_dir.path(), opts(letus_core::storage::local())).unwrap();
    let mut tiered = Store::open(root.path().join("state"), opts(tiers.shared())).unwrap();
    let mut rng = Rng::new(17);
    const V: u64 = 90;
    let mut deleted_cold = false;
    for v in 1..=V {
        // Overwrites of a small key set: most of each value-log file becomes garbage.
        let w: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..30)
            .map(|_| (key(rng.below(200)), Some(rng.bytes(60))))
            .collect();
        commit(&mut plain, v, &w);
        commit(&mut tiered, v, &w);
        tiers.note_version(v);
        tiers.migrate_now().unwrap();
        if v % 10 == 0 {
            let cold_before: Vec<String> = cold_vdls(root.path());
            tiered.prune(5).unwrap();
            let r = tiered.vlog_gc().unwrap();
            let cold_after = cold_vdls(root.path());
            deleted_cold |= r.files_deleted > 0 && cold_after.len() < cold_before.len();
        }
    }
    let m = tiered.metrics();
    assert!(
        m.vlog_files_deleted > 0 && m.vlog_moved_records > 0,
        "{m:?}"
    );
    assert!(
        deleted_cold,
        "GC deleted value-log files from the object store"
    );
    assert_eq!(tiers.status().move_failures, 0);
    let check = |t: &Store| {
        let b = t.pruned_below().unwrap();
        for v in b..=V {
            assert_eq!(plain.digest(TID, v).unwrap(), t.digest(TID, v).unwrap());
            for k in 0..200 {
                let k = key(k);
                assert_eq!(
                    plain.get(TID, v, &k).unwrap(),
                    t.get(TID, v, &k).unwrap(),
                    "get at {v}"
                );
            }
        }
        for k in 0..200 {
            let k = key(k);
            let h = t.history(TID, &k, None, 1000).unwrap().entries;
            let full = plain.history(TID, &k, None, 1000).unwrap().entries;
            assert_eq!(h[..], full[..h.len()], "history");
        }
        let d = plain.digest(TID, V).unwrap();
        t.verify_full(TID, V, &d.root).unwrap();
    };
    tiered.clear_caches();
    tiers.clear_cold_cache();
    check(&tiered);
    tiered.close().unwrap();
    drop(tiers);
    let tiers = Tiered::open(tier_config(root.path(), warm.path(), &s3, "gc")).unwrap();
    let tiered = Store::open(root.path().join("state"), opts(tiers.shared())).unwrap();
    check(&tiered);
}

/// The value-log files the tier manifest of the store at `root` has in the cold tier.
fn cold_vdls(root: &std::path::Path) -> Vec<String> {
    let m = letus_core::storage::tiered::Manifest::load(&letus_core::storage::Local, root).unwrap();
    m.files
        .iter()
        .filter(|(rel, f)| {
            f.tier == letus_core::storage::tiered::Tier::Cold && rel.ends_with(".vdl")
        })
        .map(|(rel, _)| rel.clone())
        .collect()
}
