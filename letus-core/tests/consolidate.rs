//! Consolidated index files (`Reader::consolidate_index_file`) hold the same pages at every version as the files
//! they replace: against a twin store that never consolidates, the same roots, values, proofs and full
//! verification at every version, with caches so small that pages are read back again and again; fewer records
//! read per page; commits going on while files are consolidated; a crash that leaves both generations; reopen.

mod common;

use common::{key, small_options, Rng};
use letus_core::{Options, Reader, Store};
use std::path::Path;

const KEYS: u64 = 500;

fn opts(prefetch: bool) -> Options {
    Options {
        prefetch_delta_chains: prefetch,
        memtable_bytes: 4 * 1024,
        ..small_options()
    }
}

fn index_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("lsvps"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".idx"))
        .collect();
    names.sort();
    names
}

/// Commits versions `from..=to` to both stores (random puts and deletes on `KEYS` keys).
fn commit_both(a: &mut Store, b: &mut Store, rng: &mut Rng, from: u64, to: u64) {
    for v in from..=to {
        for _ in 0..25 {
            let k = key(rng.below(KEYS));
            if rng.chance(10) {
                a.delete(1, &k).unwrap();
                b.delete(1, &k).unwrap();
            } else {
                let val = rng.bytes(20);
                a.put(1, &k, &val).unwrap();
                b.put(1, &k, &val).unwrap();
            }
        }
        assert_eq!(a.commit(v).unwrap(), b.commit(v).unwrap(), "roots of {v}");
    }
}

/// Two stores (`a` never consolidates, `b` will) with versions `1..=versions` committed to both.
struct Twins {
    da: tempfile::TempDir,
    db: tempfile::TempDir,
    a: Store,
    b: Store,
    rng: Rng,
}

fn twins(prefetch: bool, seed: u64, versions: u64) -> Twins {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Store::open(da.path(), opts(prefetch)).unwrap();
    let mut b = Store::open(db.path(), opts(prefetch)).unwrap();
    let mut rng = Rng::new(seed);
    commit_both(&mut a, &mut b, &mut rng, 1, versions);
    Twins { da, db, a, b, rng }
}

fn consolidate_all(reader: &Reader, dir: &Path) -> usize {
    let mut n = 0;
    for name in index_files(dir) {
        if let Some(new) = reader.consolidate_index_file(&name).unwrap() {
            assert_ne!(new, name);
            assert!(new.ends_with(".1.idx"), "{new}");
            n += 1;
        }
    }
    n
}

/// Same values and proofs at every `step`-th version for every `kstep`-th key, caches cleared per version.
fn same_reads(a: &Store, b: &Store, last: u64, step: usize, kstep: usize) {
    for v in (1..=last).step_by(step) {
        assert_eq!(a.digest(1, v).unwrap(), b.digest(1, v).unwrap());
        for k in (0..KEYS).step_by(kstep) {
            let k = key(k);
            assert_eq!(a.get(1, v, &k).unwrap(), b.get(1, v, &k).unwrap(), "{v}");
            assert_eq!(
                a.get_proof(1, v, &k).unwrap(),
                b.get_proof(1, v, &k).unwrap(),
                "proof at {v}"
            );
        }
        a.clear_caches();
        b.clear_caches();
    }
}

#[test]
fn consolidated_files_answer_exactly_what_the_originals_do() {
    for prefetch in [false, true] {
        let Twins {
            da: d1,
            db: d2,
            mut a,
            mut b,
            mut rng,
        } = twins(prefetch, 11, 150);
        let files = index_files(d2.path()).len();
        assert!(files >= 10, "{files} index files: chains need several");

        // The twin's reads before, to compare record counts.
        b.clear_caches();
        let before = b.metrics();
        same_reads(&a, &b, 150, 1, 17);
        let unconsolidated_reads = b.metrics().page_reads - before.page_reads;

        assert!(consolidate_all(&b.reader(), d2.path()) >= files - 1);
        // Already consolidated files are left alone.
        assert_eq!(consolidate_all(&b.reader(), d2.path()), 0);
        // All but perhaps the newest, whose background flush may not be installed yet.
        let names = index_files(d2.path());
        assert!(
            names[..names.len() - 1]
                .iter()
                .all(|n| n.ends_with(".1.idx")),
            "{names:?}"
        );

        b.clear_caches();
        let before = b.metrics();
        same_reads(&a, &b, 150, 1, 17);
        let consolidated_reads = b.metrics().page_reads - before.page_reads;
        assert!(
            consolidated_reads < unconsolidated_reads,
            "records read: {consolidated_reads} consolidated, {unconsolidated_reads} before"
        );
        for v in [1, 75, 150] {
            let root = a.digest(1, v).unwrap().root;
            assert_eq!(
                a.verify_full(1, v, &root).unwrap(),
                b.verify_full(1, v, &root).unwrap()
            );
        }

        // Commits after consolidation build on consolidated chains; reopened, everything still agrees.
        commit_both(&mut a, &mut b, &mut rng, 151, 200);
        drop((a, b));
        let a = Store::open(d1.path(), opts(prefetch)).unwrap();
        let b = Store::open(d2.path(), opts(prefetch)).unwrap();
        same_reads(&a, &b, 200, 3, 11);
    }
}

#[test]
fn commits_and_reads_go_on_while_files_are_consolidated() {
    let Twins {
        da: _d1,
        db: d2,
        mut a,
        mut b,
        mut rng,
    } = twins(true, 12, 80);
    let reader = b.reader();
    let dir = d2.path().to_path_buf();
    let names = index_files(&dir);
    let worker = std::thread::spawn(move || {
        let mut n = 0;
        for name in names {
            // Reads of an old version on the same thread, between consolidations.
            let s = reader.snapshot();
            s.get_proof(1, 40, &key(3)).unwrap();
            if reader.consolidate_index_file(&name).unwrap().is_some() {
                n += 1;
            }
        }
        n
    });
    commit_both(&mut a, &mut b, &mut rng, 81, 160);
    assert!(worker.join().unwrap() > 0);
    same_reads(&a, &b, 160, 2, 13);
}

#[test]
fn a_crash_that_leaves_both_generations_opens_on_the_newer_one() {
    let Twins {
        da: _d1,
        db: d2,
        a,
        b,
        ..
    } = twins(false, 13, 60);
    let names = index_files(d2.path());
    let target = &names[names.len() / 2];
    let old_bytes = std::fs::read(d2.path().join("lsvps").join(target)).unwrap();
    let new = b
        .reader()
        .consolidate_index_file(target)
        .unwrap()
        .expect("consolidated");
    drop(b);
    // As if the process died after the new file's rename and before the old one's removal.
    std::fs::write(d2.path().join("lsvps").join(target), &old_bytes).unwrap();
    let b = Store::open(d2.path(), opts(false)).unwrap();
    let now = index_files(d2.path());
    assert!(!now.contains(target), "the older generation is removed");
    assert!(now.contains(&new));
    same_reads(&a, &b, 60, 1, 7);
}
