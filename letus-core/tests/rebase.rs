//! Rebase DeltaPages (FORMAT.md §2.1): a large page whose DeltaPage chain is full, but which changed in few slots
//! since its BasePage, restarts its chain with one DeltaPage of those slots instead of a whole BasePage. A load then
//! skips from it to the BasePage, or, where a prune removed that BasePage, follows the chain as usual.
//!
//! Chains of two DeltaPages and a flush every few commits make rebases frequent; a small memory budget makes every
//! read load its pages from the index files. Every value at every version is checked against a model, every checked
//! version's root is recomputed from the stored pages (full verification), and proofs verify against the digests:
//! before and after reopening, and after pruning.

mod common;

use std::collections::BTreeMap;

use common::Rng;
use letus_core::{Error, Options, Store, Version};

const KEYS: u64 = 12_000;
const TID: u32 = 5;

fn opts() -> Options {
    Options {
        max_delta_chain: 2,
        delta_threshold: 64,
        base_threshold: 100_000,
        memtable_bytes: 24 * 1024,
        memory_budget_bytes: 256 * 1024,
        read_threads: 2,
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("acct-{i:06}").into_bytes()
}

/// Every key's writes, in version order (`None`: deleted).
type Model = BTreeMap<u64, Vec<(Version, Option<Vec<u8>>)>>;

fn value_at(model: &Model, k: u64, v: Version) -> Option<Vec<u8>> {
    model
        .get(&k)?
        .iter()
        .rev()
        .find(|(w, _)| *w <= v)
        .and_then(|(_, val)| val.clone())
}

fn check(s: &Store, model: &Model, versions: &[Version], rng: &mut Rng) {
    for &v in versions {
        let digest = s.digest(TID, v).unwrap();
        let report = s.verify_full(TID, v, &digest.root).unwrap();
        assert_eq!(report.root, digest.root, "full verification at {v}");
        for _ in 0..150 {
            let k = rng.below(KEYS + 100);
            let want = value_at(model, k, v);
            assert_eq!(s.get(TID, v, &key(k)).unwrap(), want, "key {k} at {v}");
            let (value, proof) = s.get_proof(TID, v, &key(k)).unwrap();
            assert_eq!(value, want);
            let limits = letus_core::verify::Limits::default();
            let verified = letus_core::verify::verify_proof(
                &digest.root,
                &key(k),
                want.as_deref(),
                &proof,
                &limits,
            )
            .unwrap_or_else(|e| panic!("proof of key {k} at {v}: {e}"));
            assert_eq!(verified.value(), want.as_deref());
        }
    }
}

#[test]
fn rebased_chains_read_as_the_model_at_every_version_before_and_after_reopening_and_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path(), opts()).unwrap();
    let mut rng = Rng::new(77);
    let mut model = Model::new();
    let mut v = 0;
    for chunk in 0..4 {
        v += 1;
        for k in (chunk * KEYS / 4)..((chunk + 1) * KEYS / 4) {
            let val = rng.bytes(16);
            s.put(TID, &key(k), &val).unwrap();
            model.entry(k).or_default().push((v, Some(val)));
        }
        s.commit(v).unwrap();
    }
    for _ in 0..160 {
        v += 1;
        for _ in 0..60 {
            let k = rng.below(KEYS);
            if rng.chance(10) {
                s.delete(TID, &key(k)).unwrap();
                model.entry(k).or_default().push((v, None));
            } else {
                let val = rng.bytes(16);
                s.put(TID, &key(k), &val).unwrap();
                model.entry(k).or_default().push((v, Some(val)));
            }
        }
        s.commit(v).unwrap();
    }
    let latest = v;
    assert!(
        s.metrics().rebase_pages > 100,
        "rebase DeltaPages were written ({})",
        s.metrics().rebase_pages
    );
    let versions: Vec<Version> = (1..=latest).step_by(7).chain([latest]).collect();
    check(&s, &model, &versions, &mut rng);

    drop(s);
    let s = Store::open(dir.path(), opts()).unwrap();
    check(&s, &model, &versions, &mut rng);

    // Pruned: the BasePages that rebases at and above the boundary were relative to are gone; loads follow the
    // chains instead.
    let report = s.prune(40).unwrap().expect("something to prune");
    let boundary = report.boundary;
    assert!(boundary > 5, "boundary {boundary}");
    let kept: Vec<Version> = versions
        .iter()
        .copied()
        .filter(|&x| x >= boundary)
        .chain([boundary])
        .collect();
    check(&s, &model, &kept, &mut rng);
    assert!(matches!(
        s.get(TID, boundary - 1, &key(1)),
        Err(Error::Pruned { .. })
    ));
    drop(s);
    let s = Store::open(dir.path(), opts()).unwrap();
    check(&s, &model, &kept, &mut rng);
}
