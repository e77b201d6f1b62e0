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

/// Every write of every key, oldest first: each Put, and each Delete of a key that existed.
type Writes = BTreeMap<(u32, Vec<u8>), Vec<(Version, Option<Vec<u8>>)>>;

/// The whole history of `k`, read in pages of `page` entries by following `next`: it must be exactly the model's
/// writes, newest first (every entry there, and nothing else).
fn check_history(store: &Store, writes: &Writes, tid: u32, k: &[u8], page: usize) {
    let mut got = Vec::new();
    let mut before = None;
    loop {
        let p = store.history(tid, k, before, page).unwrap();
        assert!(p.entries.len() <= page);
        got.extend(p.entries.into_iter().map(|e| (e.version, e.value)));
        match p.next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    let mut expected = writes.get(&(tid, k.to_vec())).cloned().unwrap_or_default();
    expected.reverse();
    assert_eq!(
        got, expected,
        "history of {k:?} in trie {tid}, pages of {page}"
    );
}

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
    let mut writes = Writes::new();
    let mut version = 0u64;
    for step in 0..versions {
        version += 1 + rng.below(3);
        let n = 1 + rng.below(25);
        let mut staged: BTreeMap<(u32, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
        for _ in 0..n {
            let tid = if rng.chance(80) { 0 } else { 1 };
            // Now and then the value the key already has: a rewrite is a write too.
            let k = key(rng.below(keys));
            if rng.chance(20) {
                store.delete(tid, &k).unwrap();
                staged.insert((tid, k), None);
            } else {
                let val = match current.get(&tid).and_then(|t| t.get(&k)) {
                    Some(old) if rng.chance(10) => old.to_vec(),
                    _ => rng.bytes(40),
                };
                store.put(tid, &k, &val).unwrap();
                staged.insert((tid, k), Some(val));
            }
        }
        for ((tid, k), val) in staged {
            let existed = current.get(&tid).is_some_and(|t| t.get(&k).is_some());
            match &val {
                Some(v) => current.entry(tid).or_default().insert(&k, v),
                None => {
                    if let Some(t) = current.get_mut(&tid) {
                        t.remove(&k);
                    }
                }
            }
            if val.is_some() || existed {
                writes.entry((tid, k)).or_default().push((version, val));
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
            let k = key(rng.below(keys));
            check_history(&store, &writes, 0, &k, 1 + rng.below(4) as usize);
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
    // The history of every key, present or deleted now, in both tries: all of its writes, in pages of every size.
    for i in 0..keys {
        let k = key(i);
        for tid in [0, 1] {
            check_history(&store, &writes, tid, &k, 1 + (i % 3) as usize);
        }
        check_history(&store, &writes, 0, &k, 1000);
    }
    // A cursor that is not the version of one of the key's entries is refused.
    if let Some(((tid, k), w)) = writes.iter().find(|(_, w)| w.len() >= 2) {
        let (v0, v1) = (w[0].0, w[1].0);
        if let Some(between) = model.keys().copied().find(|v| *v > v0 && *v < v1) {
            assert!(matches!(
                store.history(*tid, k, Some(between), 10),
                Err(letus_core::Error::InvalidCursor(_))
            ));
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
