//! Pruning the pages of old versions (FORMAT.md §2.9), against an archive store fed the same commits:
//! - at and above the boundary, every value, proof (present and absent keys), digest, history page and full
//!   verification is identical to the archive's, before and after reopening, and while commits go on after it;
//! - below it, reads, proofs and verification answer `Pruned` naming the boundary; digests and history-commitment
//!   proofs still answer, identical to the archive's;
//! - the index files below the boundary are gone from the disk;
//! - a power cut at every mutation of a prune loses nothing: the store reopens either pruned or not, and reads
//!   as the archive at every version it still holds; so does a prune failing at any fsync and tried again;
//! - with `Options::keep_versions` the store prunes itself after its flushes.
//!
//! Memory budgets are tiny, so pages are evicted and read back from the base file constantly.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{small_options, Rng};
use letus_core::storage::faulty::{Fault, Faulty, OpCounts};
use letus_core::storage::{local, SharedStorage};
use letus_core::{Error, Options, Store};

const TRIES: [u32; 2] = [0, 3];
const KEYS: u64 = 600;

fn opts(storage: SharedStorage) -> Options {
    Options {
        storage,
        // A flush every few commits: many index files to prune.
        memtable_bytes: 12 * 1024,
        read_threads: 2,
        ..small_options()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("acct-{i:05}").into_bytes()
}

/// The writes of version `v` (the same for every seed-`seed` run): puts of new and old keys, deletes, in both tries.
fn writes(seed: u64, v: u64) -> Vec<(u32, Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = Rng::new(seed * 1_000_003 + v);
    let n = 5 + rng.below(30);
    let mut w = BTreeMap::new();
    if v == 1 {
        for tid in TRIES {
            w.insert((tid, key(0)), Some(b"first".to_vec()));
        }
    }
    for _ in 0..n {
        let tid = TRIES[rng.below(2) as usize];
        let k = key(rng.below(KEYS));
        let val = if rng.chance(15) {
            None
        } else {
            Some(rng.bytes(40))
        };
        w.insert((tid, k), val);
    }
    w.into_iter().map(|((t, k), v)| (t, k, v)).collect()
}

fn commit(s: &mut Store, seed: u64, v: u64) -> letus_core::Result<()> {
    for (tid, k, val) in writes(seed, v) {
        match val {
            Some(val) => s.put(tid, &k, &val)?,
            None => s.delete(tid, &k)?,
        }
    }
    s.commit(v).map(drop)
}

/// The keys a comparison reads: a sample that includes keys never written (absent everywhere).
fn probe_keys() -> Vec<Vec<u8>> {
    (0..KEYS + 20).step_by(7).map(key).collect()
}

/// Checks store `p` against archive `a` at every version up to `latest`.
fn compare(a: &Store, p: &Store, latest: u64) {
    let boundary = p.pruned_below().unwrap_or(1);
    let keys = probe_keys();
    for v in 1..=latest {
        for tid in TRIES {
            // Digests of every version, pruned or not.
            assert_eq!(
                p.digest(tid, v).unwrap(),
                a.digest(tid, v).unwrap(),
                "digest {tid}@{v}"
            );
            if v >= 2 {
                assert_eq!(
                    p.history_consistency_proof(tid, v - 1, v).unwrap(),
                    a.history_consistency_proof(tid, v - 1, v).unwrap()
                );
                assert_eq!(
                    p.history_inclusion_proof(tid, 1, v).unwrap(),
                    a.history_inclusion_proof(tid, 1, v).unwrap()
                );
            }
            if v < boundary {
                for k in keys.iter().take(3) {
                    match p.get(tid, v, k) {
                        Err(Error::Pruned { version, oldest }) => {
                            assert_eq!((version, oldest), (v, boundary))
                        }
                        other => panic!("get {tid}@{v} below {boundary}: {other:?}"),
                    }
                    assert!(matches!(p.get_proof(tid, v, k), Err(Error::Pruned { .. })));
                }
                continue;
            }
            for k in &keys {
                assert_eq!(
                    p.get(tid, v, k).unwrap(),
                    a.get(tid, v, k).unwrap(),
                    "{tid}@{v}"
                );
                assert_eq!(
                    p.get_proof(tid, v, k).unwrap(),
                    a.get_proof(tid, v, k).unwrap(),
                    "proof {tid}@{v}"
                );
            }
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            assert_eq!(
                p.get_multi_proof(tid, v, &refs).unwrap(),
                a.get_multi_proof(tid, v, &refs).unwrap()
            );
        }
    }
    for tid in TRIES {
        let d = a.digest(tid, latest).unwrap();
        let full = p.verify_full(tid, latest, &d.root).unwrap();
        assert_eq!(full, a.verify_full(tid, latest, &d.root).unwrap());
        let d = a.digest(tid, boundary).unwrap();
        p.verify_full(tid, boundary, &d.root).unwrap();
        if boundary > 1 {
            let d = a.digest(tid, boundary - 1).unwrap();
            assert!(matches!(
                p.verify_full(tid, boundary - 1, &d.root),
                Err(Error::Pruned { .. })
            ));
        }
    }
}

/// History: the entries above the boundary, then the one that holds the key's state at the boundary; asking for
/// older ones answers `Pruned`.
fn compare_history(a: &Store, p: &Store) {
    let boundary = p.pruned_below().unwrap_or(0);
    for k in probe_keys().iter().take(40) {
        for tid in TRIES {
            let full = a.history(tid, k, None, 10_000).unwrap().entries;
            let mut got = Vec::new();
            let mut before = None;
            loop {
                match p.history(tid, k, before, 3) {
                    Ok(page) => {
                        got.extend(page.entries);
                        match page.next {
                            Some(n) => before = Some(n),
                            None => break,
                        }
                    }
                    Err(Error::Pruned { oldest, .. }) => {
                        assert_eq!(oldest, boundary);
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            let kept = full.iter().take_while(|e| e.version > boundary).count();
            let expected = &full[..(kept + 1).min(full.len())];
            assert_eq!(
                got, expected,
                "history of {tid}/{k:?} with boundary {boundary}"
            );
        }
    }
}

fn index_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("lsvps"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".idx"))
        .collect();
    v.sort();
    v
}

fn lsvps_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("lsvps"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[test]
fn a_pruned_store_reads_as_the_archive_at_every_version_it_keeps() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), opts(local())).unwrap();
    let mut p = Store::open(dp.path(), opts(local())).unwrap();
    let seed = 7;
    let mut boundaries = Vec::new();
    let mut base_counts = Vec::new();
    for v in 1..=240 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
        // Prunes at several points, with different windows; commits go on after each.
        if let Some(keep) = match v {
            60 => Some(30),
            110 | 111 => Some(10),
            170 => Some(0),
            // From here a prune every few versions: incremental base files, merged when they outweigh the first.
            v if v > 170 && v % 6 == 0 => Some(5),
            _ => None,
        } {
            let bytes = lsvps_bytes(dp.path());
            let Some(r) = p.prune(keep).unwrap() else {
                // Nothing wholly below the window yet (no flush since the last prune).
                continue;
            };
            assert!(r.boundary <= v - keep, "{r:?}");
            assert!(r.files_removed >= 1);
            // The replaced files are gone: base files (generation 1 and above) first, then files numbered on
            // from the newest one without a gap (a background flush may have added a file meanwhile).
            let after = index_files(dp.path());
            let parsed: Vec<(u64, bool)> = after
                .iter()
                .map(|n| (n[..6].parse().unwrap(), n.matches('.').count() == 2))
                .collect();
            let nbases = parsed.iter().take_while(|(_, base)| *base).count();
            assert!(nbases >= 1, "{after:?}");
            assert!(parsed.windows(2).all(|w| w[0].0 < w[1].0), "{after:?}");
            assert!(
                parsed[nbases - 1..]
                    .windows(2)
                    .all(|w| w[0].0 + 1 == w[1].0),
                "{after:?}"
            );
            base_counts.push(nbases);
            if v == 60 {
                // The first prune replaces sixty versions of history with one copy of the state.
                assert!(r.bytes_reclaimed() > 0, "{r:?}");
                assert!(lsvps_bytes(dp.path()) < bytes);
            }
            assert_eq!(p.pruned_below(), Some(r.boundary));
            boundaries.push(r.boundary);
            if v <= 170 || v % 30 == 0 {
                compare(&a, &p, v);
            }
        }
        // Pruning again to the same place does nothing.
        if v == 111 {
            assert_eq!(p.prune(10).unwrap(), None);
        }
    }
    assert!(boundaries.windows(2).all(|w| w[0] < w[1]), "{boundaries:?}");
    // Incremental prunes added base files, and merges folded them back into one.
    assert!(
        base_counts.windows(2).any(|w| w[1] > w[0]),
        "{base_counts:?}"
    );
    assert!(
        base_counts.windows(2).any(|w| w[1] < w[0]),
        "{base_counts:?}"
    );
    compare(&a, &p, 240);

    // Merging every base file into one: the index files come down to one base file and the versions after it.
    p.flush().unwrap();
    p.prune_merged(5).unwrap();
    let bases = index_files(dp.path())
        .iter()
        .filter(|n| n.matches('.').count() == 2)
        .count();
    assert_eq!(bases, 1, "{:?}", index_files(dp.path()));
    compare(&a, &p, 240);

    compare_history(&a, &p);
    let boundary = p.pruned_below().unwrap();

    drop(p);
    let p = Store::open(dp.path(), opts(local())).unwrap();
    assert_eq!(p.pruned_below(), Some(boundary));
    compare(&a, &p, 240);
}

#[test]
fn a_prune_reports_its_progress_level_by_level_and_its_status_while_it_runs() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Store::open(d.path(), opts(local())).unwrap();
    for v in 1..=120 {
        commit(&mut s, 11, v).unwrap();
    }
    s.flush().unwrap();
    let r = s.reader();
    assert_eq!(r.prune_status(), None);
    for merge in [false, true] {
        let mut seen: Vec<letus_core::PruneProgress> = Vec::new();
        let report = r
            .prune_with_progress(20, merge, &mut |p| {
                // While the prune runs, its status is this progress.
                let st = r.prune_status().expect("a prune is running");
                assert_eq!((st.merge, st.progress), (merge, *p));
                seen.push(*p);
            })
            .unwrap()
            .expect("something to prune");
        assert_eq!(
            r.prune_status(),
            None,
            "the status is cleared when the prune ends"
        );
        assert!(!seen.is_empty());
        // Pages only grow, to the report's count; within a level, done grows to the level's pages; levels go
        // down each trie, one trie after the other (a level walked in parts reports each part; these small
        // stores never split one).
        assert!(seen.windows(2).all(|w| w[0].pages < w[1].pages));
        assert_eq!(seen.last().unwrap().pages, report.pages);
        for w in seen.windows(2) {
            if w[0].depth == w[1].depth && w[0].level_pages == w[1].level_pages {
                assert!(w[0].level_done < w[1].level_done, "{w:?}");
            } else {
                assert_eq!(
                    w[0].level_done, w[0].level_pages,
                    "a level ends done: {w:?}"
                );
                assert!(w[0].depth < w[1].depth || w[1].depth == 0, "{w:?}");
            }
        }
        assert!(seen
            .iter()
            .all(|p| p.level_done <= p.level_pages && p.level_done > 0));
        let last = seen.last().unwrap();
        assert_eq!(last.level_done, last.level_pages);
        // The levels' pages add up to the pages written.
        let mut total = 0;
        for (i, p) in seen.iter().enumerate() {
            if seen
                .get(i + 1)
                .is_none_or(|n| n.depth != p.depth || n.level_pages != p.level_pages)
            {
                total += p.level_pages;
            }
        }
        assert_eq!(total, report.pages);
        let next = s.latest_version().unwrap() + 1;
        for v in next..next + 40 {
            commit(&mut s, 11, v).unwrap();
        }
        s.flush().unwrap();
    }
}

#[test]
fn keep_versions_prunes_in_the_background_after_flushes() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), opts(local())).unwrap();
    let keep = 20;
    let popts = Options {
        keep_versions: Some(keep),
        prune_garbage_ratio: 0.0,
        // Value-log GC runs after each prune, beside the commits that move its records.
        ..gc_opts(local())
    };
    let mut p = Store::open(dp.path(), popts.clone()).unwrap();
    let seed = 11;
    for v in 1..=200 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    // The pruner runs beside the commits; give it a moment to finish the last one it was woken for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while p.pruned_below().is_none_or(|b| b < 150) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let b = p.pruned_below().expect("the pruner pruned");
    assert!((150..=200 - keep).contains(&b), "boundary {b}");
    assert!(p.metrics().prunes >= 2, "{:?}", p.metrics());
    assert_eq!(p.metrics().prune_errors, 0);
    // Whatever the pruner still had to do is done once a prune finds nothing (prunes take turns): the boundary
    // no longer moves while the comparison reads it.
    while p.prune(keep).unwrap().is_some() {}
    let m = p.metrics();
    assert!(
        m.vlog_gc_passes >= 2 && m.vlog_files_compacted >= 1 && m.vlog_moved_records >= 1,
        "{m:?}"
    );
    assert_eq!(m.vlog_gc_errors, 0);
    compare(&a, &p, 200);
    compare_history(&a, &p);
    drop(p);
    let p = Store::open(dp.path(), popts).unwrap();
    compare(&a, &p, 200);
    compare_history(&a, &p);
}

/// A store of `versions` versions of seed `seed`, pruned once (keeping 60), closed: the store the crash tests
/// prune again, so that a cut in that second prune has an old manifest and an old base file to keep.
fn pruned_once(seed: u64, versions: u64) -> tempfile::TempDir {
    let template = tempfile::tempdir().unwrap();
    let mut s = Store::open(template.path(), opts(local())).unwrap();
    for v in 1..=versions {
        commit(&mut s, seed, v).unwrap();
    }
    s.prune(60).unwrap().unwrap();
    s.close().unwrap();
    template
}

/// Copies the store in `from` (its files and those of `lsvps/` and `vdls/`) to `to`.
fn copy_store(from: &Path, to: &Path) {
    for sub in ["", "lsvps", "vdls"] {
        std::fs::create_dir_all(to.join(sub)).unwrap();
        for e in std::fs::read_dir(from.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(sub).join(e.file_name())).unwrap();
            }
        }
    }
}

/// The unpruned store of `versions` versions of seed `seed`: what the crash tests compare with.
fn archive(seed: u64, versions: u64) -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let mut a = Store::open(d.path(), opts(local())).unwrap();
    for v in 1..=versions {
        commit(&mut a, seed, v).unwrap();
    }
    (d, a)
}

/// The storage operations of one fault-free `prune(15)` of a copy of `template`, to aim the faults at.
fn prune_op_counts(template: &Path) -> OpCounts {
    let d = tempfile::tempdir().unwrap();
    copy_store(template, d.path());
    let fs = Faulty::new(local(), 0);
    let s = Store::open(d.path(), opts(fs.shared())).unwrap();
    fs.reset_counts();
    s.prune(15).unwrap().unwrap();
    fs.counts()
}

/// A power cut at every mutation of one prune: after the crash the store opens, is pruned at the old boundary or
/// the new one, and reads as the archive at every version it holds; commits go on.
#[test]
fn a_power_cut_anywhere_in_a_prune_loses_nothing() {
    let seed = 5;
    let versions = 90;
    let (_da, a) = archive(seed, versions + 5);
    // The store before the prune, built once and copied for each schedule.
    let template = pruned_once(seed, versions);
    let copy = |to: &Path| copy_store(template.path(), to);
    // Mutations of the prune alone, to aim the cuts.
    let mutations = prune_op_counts(template.path()).of(Fault::PowerCut);
    assert!(mutations >= 8, "{mutations}");
    let mut outcomes = BTreeMap::new();
    // `arm(_, n)` fires on the operation after `n` more: 0 is the prune's first mutation.
    for cut in 0..mutations {
        let d = tempfile::tempdir().unwrap();
        copy(d.path());
        let fs = Faulty::new(local(), cut);
        let s = Store::open(d.path(), opts(fs.shared())).unwrap();
        let old = s.pruned_below().unwrap();
        fs.reset_counts();
        fs.arm(Fault::PowerCut, cut);
        assert!(s.prune(15).is_err(), "cut {cut} did not fire");
        drop(s);
        fs.crash().unwrap();
        let mut s = Store::open(d.path(), opts(local())).unwrap();
        let b = s.pruned_below().unwrap();
        assert!(b >= old, "cut {cut}: boundary {b}, was {old}");
        *outcomes.entry(b > old).or_insert(0) += 1;
        compare(&a, &s, versions);
        for v in versions + 1..=versions + 5 {
            commit(&mut s, seed, v).unwrap();
            assert_eq!(s.digest(0, v).unwrap(), a.digest(0, v).unwrap());
        }
        // A prune after the cut completes.
        s.prune(15).unwrap();
        compare(&a, &s, versions + 5);
    }
    // Cuts before the manifest is durable leave the old boundary, later ones the new.
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

/// A prune that fails at any fsync (EIO) and is then tried again on the same store, with power lost a few
/// operations into the second try: the store reopens and reads as the archive. A failure after the manifest is
/// written (the commit point) refuses further prunes until the store is reopened, because another prune would
/// delete or rewrite the base file that manifest names (found by review: a retry deleted the staged base file
/// the manifest named, and a cut in its walk left a store that no longer opened).
#[test]
fn a_prune_failing_at_any_fsync_then_tried_again_loses_nothing() {
    let seed = 7;
    let versions = 90;
    let (_da, a) = archive(seed, versions);
    let template = pruned_once(seed, versions);
    let copy = |to: &Path| copy_store(template.path(), to);
    let syncs = prune_op_counts(template.path()).of(Fault::SyncError);
    assert!(syncs >= 4, "{syncs}");
    let mut refused = 0;
    // Each fsync, with three ways of losing what was not fsynced at the power cut.
    for (k, crash_seed) in (0..syncs).flat_map(|k| (0..3).map(move |c| (k, k * 3 + c))) {
        let d = tempfile::tempdir().unwrap();
        copy(d.path());
        let fs = Faulty::new(local(), crash_seed);
        let s = Store::open(d.path(), opts(fs.shared())).unwrap();
        fs.reset_counts();
        fs.arm(Fault::SyncError, k);
        assert!(s.prune(15).is_err(), "sync {k} did not fail");
        fs.heal();
        fs.arm(Fault::PowerCut, 3);
        match s.prune(15) {
            Err(Error::Poisoned) => refused += 1,
            Err(_) => assert!(fs.is_dead(), "sync {k}: the second prune failed on its own"),
            // The first one had swapped its base file in (it failed removing what it replaced).
            Ok(None) => {}
            Ok(Some(r)) => panic!("sync {k}: the power cut did not fire: {r:?}"),
        }
        drop(s);
        fs.crash().unwrap();
        let s = Store::open(d.path(), opts(local()))
            .unwrap_or_else(|e| panic!("sync {k}: reopen: {e}"));
        compare(&a, &s, versions);
        // The reopened store prunes again.
        s.prune(15).unwrap();
        compare(&a, &s, versions);
    }
    // The fsyncs after the manifest's write fail past the commit point.
    assert!(
        refused >= 3 && refused < 3 * syncs,
        "{refused} of {}",
        3 * syncs
    );
}

/// Options for value-log GC: data files of 16 KiB, so that a few hundred versions fill dozens.
fn gc_opts(storage: SharedStorage) -> Options {
    Options {
        vdls_file_bytes: 16 * 1024,
        ..opts(storage)
    }
}

fn vdls_ids(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(dir.join("vdls"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_suffix(".vdl")
                .or_else(|| n.strip_suffix(".vdc"))
                .map(|s| s.parse().unwrap())
        })
        .collect();
    v.sort();
    v
}

/// The names in `vdls/` that are data files (plain or compacted).
fn vdls_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("vdls"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".vdl") || n.ends_with(".vdc"))
        .collect();
    v.sort();
    v
}

/// The record bytes the newest state of `a` refers to, from its values alone: a Put record per present key, a
/// Delete record per key whose last write deleted it (its tombstone). The GC's accounting must find exactly this.
fn live_bytes_of(a: &Store) -> u64 {
    let mut live = 0;
    for i in 0..KEYS {
        let k = key(i);
        for tid in TRIES {
            if let Some(e) = a.history(tid, &k, None, 1).unwrap().entries.first() {
                live += match &e.value {
                    Some(v) => u64::from(letus_core::vdls::put_record_len(k.len(), v.len())),
                    None => 41 + k.len() as u64,
                };
            }
        }
    }
    live
}

#[test]
fn value_log_gc_deletes_files_no_kept_version_reads_and_compacts_the_rest() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), gc_opts(local())).unwrap();
    let mut p = Store::open(dp.path(), gc_opts(local())).unwrap();
    let seed = 11;
    let mut reports = Vec::new();
    for v in 1..=300 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
        if v % 15 == 0 {
            p.prune(10).unwrap();
            let r = p.vlog_gc().unwrap();
            assert_eq!(r.version, v);
            // Exact accounting: the bytes the newest state refers to, whatever moved where.
            assert_eq!(r.live_bytes, live_bytes_of(&a), "{r:?}");
            reports.push(r);
        }
        if v % 75 == 0 {
            compare(&a, &p, v);
            compare_history(&a, &p);
        }
    }
    let m = p.metrics();
    assert!(m.vlog_files_compacted >= 5, "{m:?}\n{reports:?}");
    assert!(
        m.vlog_moved_records > 0 && m.vlog_files_compacted > 0,
        "{m:?}"
    );
    assert!(reports
        .iter()
        .any(|r| r.victims_chosen > 0 && r.files_compacted > 0));
    assert!(vdls_names(dp.path()).iter().any(|n| n.ends_with(".vdc")));
    // The files gone are the ones GC deleted, and the log is far smaller than the archive's.
    let ids = vdls_ids(dp.path());
    let missing = (1..=*ids.last().unwrap())
        .filter(|i| !ids.contains(i))
        .count();
    assert_eq!(missing as u64, m.vlog_files_deleted, "{ids:?}");
    let vdls_bytes = |d: &Path| -> u64 {
        std::fs::read_dir(d.join("vdls"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    assert!(
        2 * vdls_bytes(dp.path()) < vdls_bytes(da.path()),
        "{} against {}",
        vdls_bytes(dp.path()),
        vdls_bytes(da.path())
    );
    let last = reports.last().unwrap();
    // Sealed files are compacted when half garbage (the default threshold), so the log holds at most about twice
    // the live bytes plus the active file and the files waiting for the boundary.
    assert!(last.log_bytes < 4 * last.live_bytes + 64 * 1024, "{last:?}");
    compare(&a, &p, 300);
    compare_history(&a, &p);

    // Reopened: the collected list explains the missing ids, the compacted files read through their tables.
    drop(p);
    let mut p = Store::open(dp.path(), gc_opts(local())).unwrap();
    compare(&a, &p, 300);
    compare_history(&a, &p);
    for v in 301..=320 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    p.prune(5).unwrap();
    // The first pass after an open finds the live records by a walk of the state.
    let r = p.vlog_gc().unwrap();
    assert_eq!(r.live_bytes, live_bytes_of(&a), "{r:?}");
    compare(&a, &p, 320);
    compare_history(&a, &p);

    // A data file missing that GC did not delete is corruption, not silently skipped.
    drop(p);
    let ids = vdls_ids(dp.path());
    let victim = &vdls_names(dp.path())[ids.len() / 2];
    std::fs::remove_file(dp.path().join("vdls").join(victim)).unwrap();
    match Store::open(dp.path(), gc_opts(local())) {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("missing"), "{what}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn a_power_cut_anywhere_in_a_value_log_compaction_loses_nothing() {
    power_cut_anywhere_in_a_compacting_pass(false);
}

/// The same for a compaction with the boundary below the version the victims were chosen at: the first pass after
/// reopening a pruned store, which reads the records that died above the boundary from the value log's tail.
#[test]
fn a_power_cut_anywhere_in_an_early_compaction_loses_nothing() {
    power_cut_anywhere_in_a_compacting_pass(true);
}

/// Cuts power at every mutation of a GC pass that compacts (with the seam's fault injector), then reopens, compares
/// with an archive at every version kept, and commits more. `early`: the store was pruned with a window before, and
/// the pass is the first after the open, compacting victims chosen above the boundary; otherwise the victims were
/// chosen by an earlier pass and the boundary has passed them.
fn power_cut_anywhere_in_a_compacting_pass(early: bool) {
    let seed = 13;
    let versions = 120;
    let da = tempfile::tempdir().unwrap();
    let mut a = Store::open(da.path(), gc_opts(local())).unwrap();
    for v in 1..=versions + 10 {
        commit(&mut a, seed, v).unwrap();
    }
    let template = tempfile::tempdir().unwrap();
    {
        let mut s = Store::open(template.path(), gc_opts(local())).unwrap();
        for v in 1..=versions {
            commit(&mut s, seed, v).unwrap();
        }
        // Not pruned unless `early`: the first pass of `ready` then chooses victims that wait for the boundary (a
        // pruned store's first pass compacts them at once, from the records the log's tail says died above it).
        if early {
            s.flush().unwrap();
            s.prune(20).unwrap().unwrap();
        }
        s.close().unwrap();
    }
    let copy = |to: &Path| {
        for sub in ["", "lsvps", "vdls"] {
            std::fs::create_dir_all(to.join(sub)).unwrap();
            for e in std::fs::read_dir(template.path().join(sub)).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_file() {
                    std::fs::copy(e.path(), to.join(sub).join(e.file_name())).unwrap();
                }
            }
        }
    };
    let head = if early { versions } else { versions + 5 };
    // Unless `early`: chooses victims at the newest version, commits more, and moves the boundary past it: the
    // next pass compacts them (and deletes the files that died meanwhile).
    let ready = |s: &mut Store| {
        if early {
            return;
        }
        // The first pass finds the live bytes by a walk and chooses the victims.
        let first = s.vlog_gc().unwrap();
        assert!(first.walked && first.victims_chosen > 0, "{first:?}");
        for v in versions + 1..=versions + 5 {
            commit(s, seed, v).unwrap();
        }
        s.flush().unwrap();
        s.prune(0).unwrap().unwrap();
        assert!(s.pruned_below().unwrap() >= first.version);
    };
    let mutations = {
        let d = tempfile::tempdir().unwrap();
        copy(d.path());
        let fs = Faulty::new(local(), 0);
        let mut s = Store::open(d.path(), gc_opts(fs.shared())).unwrap();
        ready(&mut s);
        fs.reset_counts();
        let r = s.vlog_gc().unwrap();
        assert!(r.files_compacted > 0, "{r:?}");
        if early {
            assert!(r.walked && s.pruned_below().unwrap() < r.version, "{r:?}");
        }
        fs.counts().of(Fault::PowerCut)
    };
    assert!(mutations >= 4, "{mutations}");
    let mut outcomes = BTreeMap::new();
    for cut in 0..mutations {
        let d = tempfile::tempdir().unwrap();
        copy(d.path());
        let fs = Faulty::new(local(), cut);
        let mut s = Store::open(d.path(), gc_opts(fs.shared())).unwrap();
        ready(&mut s);
        let before = vdls_names(d.path());
        fs.reset_counts();
        fs.arm(Fault::PowerCut, cut);
        assert!(s.vlog_gc().is_err(), "cut {cut} did not fire");
        drop(s);
        fs.crash().unwrap();
        let mut s = Store::open(d.path(), gc_opts(local())).unwrap();
        // Each file is either as it was or compacted (a half-written compaction is gone).
        let after = vdls_names(d.path());
        assert!(
            after
                .iter()
                .all(|n| before.contains(n) || n.ends_with(".vdc")),
            "{before:?} -> {after:?}"
        );
        *outcomes.entry(after != before).or_insert(0) += 1;
        compare(&a, &s, head);
        for v in head + 1..=versions + 10 {
            commit(&mut s, seed, v).unwrap();
            assert_eq!(s.digest(0, v).unwrap(), a.digest(0, v).unwrap());
        }
        compare(&a, &s, versions + 10);
        compare_history(&a, &s);
    }
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

/// Value-log GC passes run back to back on another thread while commits overwrite the very keys being moved: no
/// move ever puts back a value a commit replaced (the store reads as the archive at every version it keeps), and
/// the live bytes stay exact.
#[test]
fn value_log_gc_beside_commits_that_overwrite_the_keys_it_moves() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), gc_opts(local())).unwrap();
    let mut p = Store::open(dp.path(), gc_opts(local())).unwrap();
    let reader = p.reader();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut passes = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = reader.prune(8).unwrap();
                reader.vlog_gc().unwrap();
                passes += 1;
            }
            passes
        })
    };
    let seed = 23;
    for v in 1..=250 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let passes = gc.join().unwrap();
    assert!(passes > 10, "{passes}");
    let m = p.metrics();
    assert!(
        m.vlog_moved_records > 0 && m.vlog_files_compacted > 0,
        "{m:?}"
    );
    let r = p.vlog_gc().unwrap();
    assert_eq!(r.live_bytes, live_bytes_of(&a), "{r:?}");
    compare(&a, &p, 250);
    compare_history(&a, &p);
    drop(p);
    let p = Store::open(dp.path(), gc_opts(local())).unwrap();
    compare(&a, &p, 250);
    compare_history(&a, &p);
}

/// Between prunes, the background pruner compacts the victims an earlier pass chose as soon as the window passes
/// the version they were chosen at: it raises the boundary to `latest - keep` (durably, so a reopen keeps it)
/// without touching the index files, and the store still reads as the archive at every version it keeps.
#[test]
fn the_pruner_compacts_value_log_files_between_prunes() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), gc_opts(local())).unwrap();
    let keep = 5;
    let popts = Options {
        keep_versions: Some(keep),
        // No background prune after the first (its index files never outweigh a billion copies of the state),
        // so no background pass chooses victims either: the files compacted here are those the explicit pass
        // below chose.
        prune_garbage_ratio: 1e9,
        vlog_gc_garbage: 0.2,
        ..gc_opts(local())
    };
    let mut p = Store::open(dp.path(), popts.clone()).unwrap();
    let seed = 29;
    for v in 1..=60 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    // The first pass after the open walks the state (from here the commits keep the live bytes) and chooses
    // victims. The store was never pruned, so no record that died above a boundary is known (nor read from the
    // log): they wait for the boundary to pass the newest version.
    let r = p.vlog_gc().unwrap();
    assert!(
        r.walked && r.victims_chosen > 0 && r.files_compacted == 0,
        "{r:?}"
    );
    p.prune(keep).unwrap().expect("a first prune");
    let (first, prunes) = (p.pruned_below().unwrap(), p.metrics().prunes);
    assert!(first <= 60 - keep, "{first}");
    let before = p.metrics().vlog_files_compacted;
    for v in 61..=260 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    // The pruner runs beside the commits: wait for the deletions it was woken for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while p.metrics().vlog_files_compacted == before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let m = p.metrics();
    assert!(m.vlog_files_compacted > before, "{m:?}");
    assert_eq!(m.prunes, prunes, "no prune ran: {m:?}");
    assert_eq!(m.vlog_gc_errors, 0, "{m:?}");
    let b = p.pruned_below().unwrap();
    assert!(b > first && b <= 260 - keep, "{first} -> {b}");
    // The compacted files are in the directory and the store reads as the archive from the boundary on.
    assert!(vdls_names(dp.path()).iter().any(|n| n.ends_with(".vdc")));
    compare(&a, &p, 260);
    compare_history(&a, &p);
    drop(p);
    let p = Store::open(dp.path(), popts).unwrap();
    assert!(p.pruned_below().unwrap() >= b);
    compare(&a, &p, 260);
    compare_history(&a, &p);
}

/// A victim chosen at a version above the boundary is compacted in the pass that chose it, without waiting for the
/// boundary to pass that version: it keeps the records live then and those that died above the boundary, so every
/// version the store keeps still reads as the archive's, before and after a reopen. After a reopen (what `letus
/// prune` on a stopped node does), the first pass finds those records in the value log's tail.
#[test]
fn victims_above_the_boundary_are_compacted_at_once() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let opts = Options {
        vlog_gc_garbage: 0.2,
        ..gc_opts(local())
    };
    let mut a = Store::open(da.path(), opts.clone()).unwrap();
    let mut p = Store::open(dp.path(), opts.clone()).unwrap();
    let seed = 37;
    for v in 1..=40 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    // The first pass walks the state; from then on the commits keep the records each version made dead.
    assert!(p.vlog_gc().unwrap().walked);
    for v in 41..=160 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    p.flush().unwrap();
    p.prune(30).unwrap().expect("a prune");
    let b = p.pruned_below().unwrap();
    assert!(b > 40 && b <= 130, "{b}");
    let r = p.vlog_gc().unwrap();
    assert_eq!(r.version, 160, "{r:?}");
    assert!(r.victims_chosen > 0 && r.files_compacted > 0, "{r:?}");
    assert_eq!(r.victims_waiting, 0, "{r:?}");
    assert_eq!(r.live_bytes, live_bytes_of(&a), "{r:?}");
    // The records that died between the boundary and 160 are still there: versions from `b` on read as before.
    compare(&a, &p, 160);
    compare_history(&a, &p);
    for v in 161..=170 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    drop(p);
    let mut p = Store::open(dp.path(), opts.clone()).unwrap();
    assert_eq!(p.pruned_below(), Some(b));
    compare(&a, &p, 170);
    compare_history(&a, &p);

    // After a reopen GC knows nothing of the records that died above the boundary: the first pass reads them
    // from the value log's tail (each record names the one it replaced), so its victims are compacted at once too.
    for v in 171..=260 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    p.flush().unwrap();
    p.prune(30).unwrap().expect("a prune");
    let b = p.pruned_below().unwrap();
    assert!(b > 170 && b <= 230, "{b}");
    drop(p);
    let p = Store::open(dp.path(), opts.clone()).unwrap();
    let r = p.vlog_gc().unwrap();
    assert!(r.walked && r.files_compacted > 0, "{r:?}");
    assert_eq!(r.victims_waiting, 0, "{r:?}");
    assert_eq!(r.live_bytes, live_bytes_of(&a), "{r:?}");
    compare(&a, &p, 260);
    compare_history(&a, &p);
    drop(p);
    let p = Store::open(dp.path(), opts).unwrap();
    compare(&a, &p, 260);
    compare_history(&a, &p);
}

/// `vlog_gc_all` (what `letus prune --merge` runs): with the boundary at the newest version, every sealed file is
/// compacted to exactly its live records (its table and header aside) in one pass, whatever its garbage, and the
/// store still reads as the archive, before and after a reopen.
#[test]
fn compacting_everything_leaves_only_live_records_in_sealed_files() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), gc_opts(local())).unwrap();
    let mut p = Store::open(dp.path(), gc_opts(local())).unwrap();
    let seed = 31;
    for v in 1..=120 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    p.flush().unwrap();
    p.prune_merged(0).unwrap().unwrap();
    assert_eq!(p.pruned_below(), Some(120));
    let r = p.vlog_gc_all().unwrap();
    assert!(r.files_compacted > 3, "{r:?}");
    assert_eq!(r.live_bytes, live_bytes_of(&a), "{r:?}");
    let (sealed, active) = r.files.split_at(r.files.len() - 1);
    for f in sealed {
        assert!(f.compacted || f.retired_at.is_some(), "{f:?}");
        // A 32-byte header, at most 4 bytes of table per record here (16 KiB files; records of at least 45
        // bytes) and an 8-byte footer.
        assert!(
            f.bytes <= f.live_bytes + f.live_bytes * 4 / 45 + 40,
            "{f:?}"
        );
    }
    assert!(r.log_bytes <= r.live_bytes * 10 / 9 + active[0].bytes + 40 * sealed.len() as u64);
    compare(&a, &p, 120);
    compare_history(&a, &p);
    // A second pass finds nothing more to do.
    let again = p.vlog_gc_all().unwrap();
    assert_eq!(again.files_compacted, 0, "{again:?}");
    drop(p);
    let p = Store::open(dp.path(), gc_opts(local())).unwrap();
    compare(&a, &p, 120);
    compare_history(&a, &p);
}

/// Readers on other threads read the probe keys at the newest version while commits go on and the background
/// pruner compacts value-log files under them (a file leaves the readers' list for its compacted copy): every
/// answer is the archive's at that version, or `Pruned` once the window has passed it, never another error.
#[test]
fn readers_never_fail_while_value_log_files_are_compacted_under_them() {
    let (da, dp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), gc_opts(local())).unwrap();
    let popts = Options {
        keep_versions: Some(3),
        prune_garbage_ratio: 0.0,
        vlog_gc_garbage: 0.2,
        ..gc_opts(local())
    };
    let mut p = Store::open(dp.path(), popts).unwrap();
    let (ra, rp) = (a.reader(), p.reader());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (ra, rp, stop) = (ra.clone(), rp.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut answered, mut pruned) = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let s = rp.snapshot();
                    let Some(v) = s.version() else {
                        continue;
                    };
                    // The archive commits each version before the pruned store does.
                    let sa = ra.snapshot();
                    for k in probe_keys() {
                        for tid in TRIES {
                            match s.get(tid, v, &k) {
                                Ok(got) => {
                                    assert_eq!(got, sa.get(tid, v, &k).unwrap(), "{tid}@{v}");
                                    answered += 1;
                                }
                                Err(Error::Pruned { .. }) => pruned += 1,
                                Err(e) => panic!("read of {tid}@{v} failed: {e}"),
                            }
                        }
                    }
                }
                (answered, pruned)
            })
        })
        .collect();
    let seed = 37;
    for v in 1..=300 {
        commit(&mut a, seed, v).unwrap();
        commit(&mut p, seed, v).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: u64 = readers.into_iter().map(|r| r.join().unwrap().0).sum();
    assert!(answered > 1000, "{answered}");
    // Whatever the pruner was woken for is done once a prune finds nothing more to do.
    while p.prune(3).unwrap().is_some() {}
    let m = p.metrics();
    assert!(m.vlog_files_compacted > 0, "{m:?}");
    assert_eq!(m.vlog_gc_errors, 0, "{m:?}");
    compare(&a, &p, 300);
}

/// Commits with no writes still write a commit group: a value-log file that holds the groups of empty commits
/// after its last records must not be compacted or deleted while a recovery would replay those groups (the GC's
/// live version used to stay at the last commit with records, so the file looked wholly below the boundary).
#[test]
fn empty_commits_keep_their_file_until_no_recovery_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Store::open(dir.path(), gc_opts(local())).unwrap();
    let seed = 23;
    for v in 1..=60 {
        commit(&mut p, seed, v).unwrap();
    }
    // The flushed version is 60, its group the last one with records in the active file; the GC's live records
    // are known from here on (a pass walks the state once).
    p.flush().unwrap();
    p.vlog_gc().unwrap();
    let files = vdls_ids(dir.path()).len();
    let mut v = 60;
    // Empty commits until the active file is sealed, and a few more in the next one.
    while vdls_ids(dir.path()).len() == files || v < 60 + 5 {
        v += 1;
        p.commit(v).unwrap();
        assert!(v < 100_000, "the value log never rotated");
    }
    for _ in 0..5 {
        v += 1;
        p.commit(v).unwrap();
    }
    let digest = p.digest(0, v).unwrap();
    // The boundary can only reach the flushed version (60); every sealed file with garbage is a victim.
    assert_eq!(p.prune(1).unwrap().map(|r| r.boundary), Some(60));
    assert!(p.vlog_gc_all().unwrap().victims_chosen > 0);
    p.vlog_gc().unwrap();
    drop(p);
    let p = Store::open(dir.path(), gc_opts(local())).expect("reopen after GC");
    assert_eq!(p.digest(0, v).unwrap(), digest);
    assert_eq!(p.latest_version(), Some(v));
}

/// A snapshot taken before a prune whose boundary passes its version: its history answers `Pruned` like its
/// other reads, instead of entries from below the boundary.
#[test]
fn a_snapshot_below_a_later_boundary_answers_pruned_for_history() {
    let d = tempfile::tempdir().unwrap();
    let mut s = Store::open(d.path(), opts(local())).unwrap();
    let seed = 3;
    for v in 1..=40 {
        commit(&mut s, seed, v).unwrap();
    }
    let snap = s.snapshot();
    assert!(snap.history(0, &key(1), None, 5).is_ok());
    for v in 41..=90 {
        commit(&mut s, seed, v).unwrap();
    }
    let b = s.prune(10).unwrap().unwrap().boundary;
    assert!(b > 40, "{b}");
    match snap.history(0, &key(1), None, 5) {
        Err(Error::Pruned { version, oldest }) => assert_eq!((version, oldest), (40, b)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        snap.get(0, 40, &key(1)),
        Err(Error::Pruned { .. })
    ));
}

/// Found by review: a prune, GC pass or consolidation started through a `Reader` kept running on the old engine
/// after its `Store` let the directory lock go (dropped, or reopened after an I/O failure), beside the next
/// opener: a prune that renamed its staged base file could have it deleted by the new open and then write a
/// manifest naming it, and no open would succeed after. Once the store lets its lock go, they are refused.
#[test]
fn maintenance_through_a_reader_stops_when_the_store_lets_its_directory_go() {
    for reopen in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path(), opts(local())).unwrap();
        for v in 1..=12 {
            commit(&mut s, 1, v).unwrap();
        }
        s.flush().unwrap();
        let reader = s.reader();
        let refused = |reader: &letus_core::Reader| {
            assert!(
                matches!(reader.prune(3), Err(Error::Poisoned)),
                "reopen {reopen}: a prune through the old engine"
            );
            assert!(
                matches!(reader.vlog_gc(), Err(Error::Poisoned)),
                "reopen {reopen}"
            );
        };
        let s = if reopen {
            s.reopen().unwrap();
            refused(&reader);
            s
        } else {
            drop(s);
            refused(&reader);
            Store::open(dir.path(), opts(local())).unwrap()
        };
        drop(reader);
        // The store itself prunes as before.
        assert!(s.prune(3).unwrap().is_some(), "reopen {reopen}");
    }
}
