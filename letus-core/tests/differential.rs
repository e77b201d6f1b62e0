//! Differential tests against the reference model of `letus-verify`: random puts, deletes and commits over many
//! versions and two tries, with reopens; every root, every read at random historical versions, every proof
//! (identical bytes to the reference model's, and verified by `letus-verify`), histories and full verification.

mod common;

use std::collections::BTreeMap;

use common::{key, small_options, Rng};
use letus_core::{Options, Store};
use letus_verify::reference::ReferenceTrie;
use letus_verify::{verify_multi_proof, verify_proof, Claim, Limits, Version};

type Model = BTreeMap<Version, BTreeMap<u32, ReferenceTrie>>;

fn check_version(store: &Store, model: &Model, v: Version, rng: &mut Rng, keys: u64) {
    let tries = &model[&v];
    for (&tid, t) in tries {
        let d = store.digest(tid, v).unwrap();
        assert_eq!(d.root, t.root(), "root of trie {tid} at version {v}");
        for _ in 0..4 {
            let k = key(rng.below(keys));
            assert_eq!(
                store.get(tid, v, &k).unwrap().as_deref(),
                t.get(&k),
                "get {k:?} trie {tid} v{v}"
            );
            let (value, proof) = store.get_proof(tid, v, &k).unwrap();
            assert_eq!(value.as_deref(), t.get(&k));
            assert_eq!(
                proof,
                t.prove(&[&k]),
                "proof bytes equal the reference model's"
            );
            let read =
                verify_proof(&d.root, &k, value.as_deref(), &proof, &Limits::default()).unwrap();
            assert_eq!(read.value(), t.get(&k));
        }
        let mut batch: Vec<Vec<u8>> = (0..6).map(|_| key(rng.below(keys))).collect();
        batch.sort();
        batch.dedup();
        let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        let (values, proof) = store.get_multi_proof(tid, v, &refs).unwrap();
        assert_eq!(proof, t.prove(&refs));
        let claims = Claim::zip(&refs, &values);
        let reads = verify_multi_proof(&d.root, &claims, &proof, &Limits::default()).unwrap();
        assert_eq!(reads.entries().len(), refs.len());
    }
}

fn run(seed: u64, versions: u64, keys: u64, opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let mut store = Store::open(dir.path(), opts.clone()).unwrap();
    let mut model: Model = BTreeMap::new();
    let mut current: BTreeMap<u32, ReferenceTrie> = BTreeMap::new();
    let mut version = 0u64;
    for step in 0..versions {
        version += 1 + rng.below(3);
        let n = 1 + rng.below(25);
        for _ in 0..n {
            let tid = if rng.chance(80) { 0 } else { 1 };
            let k = key(rng.below(keys));
            if rng.chance(20) {
                store.delete(tid, &k).unwrap();
                if let Some(t) = current.get_mut(&tid) {
                    t.remove(&k);
                }
            } else {
                let val = rng.bytes(40);
                store.put(tid, &k, &val).unwrap();
                current.entry(tid).or_default().insert(&k, &val);
            }
        }
        let digests = store.commit(version).unwrap();
        for d in &digests {
            assert_eq!(
                d.root,
                current[&d.tid].root(),
                "seed {seed} version {version} trie {}",
                d.tid
            );
            assert_eq!(d.version, version);
        }
        model.insert(version, current.clone());
        if rng.chance(10) {
            drop(store);
            store = Store::open(dir.path(), opts.clone()).unwrap();
        }
        if step % 7 == 0 {
            let vs: Vec<Version> = model.keys().copied().collect();
            let v = vs[rng.below(vs.len() as u64) as usize];
            check_version(&store, &model, v, &mut rng, keys);
        }
    }
    // Everything once more after a clean close and reopen, including full verification at old versions.
    store.close().unwrap();
    let store = Store::open(dir.path(), opts).unwrap();
    for (&v, tries) in &model {
        check_version(&store, &model, v, &mut rng, keys);
        for (&tid, t) in tries {
            let report = store.verify_full(tid, v, &t.root()).unwrap();
            assert_eq!(report.keys as usize, t.len());
            let mut pairs = Vec::new();
            store
                .for_each_pair(tid, v, |k, val| {
                    pairs.push((k.to_vec(), val.to_vec()));
                    Ok(())
                })
                .unwrap();
            let expected: Vec<(Vec<u8>, Vec<u8>)> =
                t.pairs().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            assert_eq!(pairs, expected, "export order and content at v{v}");
        }
    }
    // History of every key present at the end equals the model's sequence of changes.
    let last = *model.keys().last().unwrap();
    for i in 0..keys {
        let k = key(i);
        if model[&last].get(&0).and_then(|t| t.get(&k)).is_none() {
            continue;
        }
        let hist = store.history(0, &k, usize::MAX).unwrap();
        assert!(!hist.is_empty(), "a present key has a history");
        assert_eq!(
            hist[0].value.as_deref(),
            model[&last][&0].get(&k),
            "newest history entry is the current value"
        );
        for w in hist.windows(2) {
            assert!(w[0].version > w[1].version, "history goes back in time");
        }
        for h in &hist {
            let at = model[&h.version].get(&0).and_then(|t| t.get(&k));
            assert_eq!(
                at,
                h.value.as_deref(),
                "history entry of {k:?} at v{}",
                h.version
            );
        }
    }
}

#[test]
fn random_workloads_small_thresholds() {
    for seed in 1..=6 {
        run(seed, 60, 150, small_options());
    }
}

#[test]
fn random_workload_default_options() {
    run(99, 40, 400, Options::default());
}

#[test]
fn many_keys_deep_pages() {
    // Enough keys that pages exist at depths 2 and 4, with frequent flushes.
    run(
        7,
        25,
        5_000,
        Options {
            memtable_bytes: 256 * 1024,
            ..small_options()
        },
    );
}

#[test]
fn random_workloads_tiny_memory_budget() {
    // A budget of a few pages: nearly every page a commit, read or proof needs is loaded from the index files
    // (or the MemIndexTable being flushed) again.
    for seed in [21, 22] {
        run(
            seed,
            50,
            2_000,
            Options {
                memory_budget_bytes: 16 * 1024,
                memtable_bytes: 2 * 1024,
                ..small_options()
            },
        );
    }
}

#[test]
fn random_workloads_short_delta_chains() {
    // Large Td/Tb with a flush every few commits: the chain cap, not Tb, decides when BasePages are written.
    for (seed, chain) in [(11, 0), (12, 1), (13, 2)] {
        run(
            seed,
            40,
            300,
            Options {
                delta_threshold: 1_000,
                base_threshold: 10_000,
                memtable_bytes: 4 * 1024,
                max_delta_chain: chain,
                ..small_options()
            },
        );
    }
}

#[test]
fn a_cold_page_load_reads_at_most_the_chain_cap() {
    // One page changed at every version and a flush after every commit: without the cap its chain would grow by
    // one DeltaPage per index file.
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        delta_threshold: 1_000,
        base_threshold: 10_000,
        memtable_bytes: 1,
        max_delta_chain: 3,
        ..small_options()
    };
    let mut store = Store::open(dir.path(), opts.clone()).unwrap();
    for v in 1..=30u64 {
        store.put(0, b"alice", &v.to_le_bytes()).unwrap();
        store.put(0, b"bob", &(v * 2).to_le_bytes()).unwrap();
        store.commit(v).unwrap();
    }
    for reopen in [false, true] {
        if reopen {
            store.close().unwrap();
            store = Store::open(dir.path(), opts.clone()).unwrap();
        }
        store.clear_caches();
        let before = store.metrics();
        assert_eq!(
            store.get(0, 30, b"alice").unwrap(),
            Some(30u64.to_le_bytes().to_vec())
        );
        let reads = store.metrics().page_reads - before.page_reads;
        assert!(
            (1..=4).contains(&reads),
            "a cold load of the root page read {reads} page records (cap: 1 BasePage + 3 DeltaPages)"
        );
        // Older versions still read back through their own chains.
        assert_eq!(
            store.get(0, 7, b"bob").unwrap(),
            Some(14u64.to_le_bytes().to_vec())
        );
    }
}
