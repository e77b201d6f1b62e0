//! Differential: stores holding parts of the 256 subtrees, composed, against one store holding every key.

use std::collections::{BTreeMap, HashMap};

use letus_verify::{KeyPath, Limits, Proof};

use super::*;
use crate::{Options, Store};

const TID: u32 = 3;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `owner[prefix]`: which of the shard stores holds each subtree.
fn run(owner: [usize; 256], shards: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options {
        // The out-of-cache path: pages are loaded back as the proofs walk them.
        memory_budget_bytes: 1 << 20,
        ..Options::default()
    };
    let mut full = Store::open(dir.path().join("full"), opts()).unwrap();
    let mut parts: Vec<Store> = (0..shards)
        .map(|i| Store::open(dir.path().join(format!("s{i}")), opts()).unwrap())
        .collect();
    let mut rng = Rng(seed);
    let mut live: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut by_path: HashMap<KeyPath, Vec<u8>> = HashMap::new();
    // Sizes that go through an empty trie, one key (a root leaf), keys alone in their subtree (hoisted leaves at
    // depths 0-2), hundreds of keys (branches below depth 2), and back down.
    let plan: [(u64, u64); 8] = [
        (1, 0),
        (3, 0),
        (40, 0),
        (600, 10),
        (50, 400),
        (0, 300),
        (5, 0),
        (2000, 50),
    ];
    for (i, (puts, deletes)) in plan.iter().enumerate() {
        let version = i as u64 + 1;
        for _ in 0..*puts {
            let key = rng.below(5000).to_le_bytes().to_vec();
            let value = rng.next().to_le_bytes()[..rng.below(9) as usize].to_vec();
            let path = KeyPath::of(&key);
            by_path.insert(path, key.clone());
            full.put(TID, &key, &value).unwrap();
            parts[owner[usize::from(path.0[0])]]
                .put(TID, &key, &value)
                .unwrap();
            live.insert(key, value);
        }
        for _ in 0..*deletes {
            let Some(key) = live
                .keys()
                .nth(rng.below(live.len().max(1) as u64) as usize)
                .cloned()
            else {
                break;
            };
            live.remove(&key);
            full.delete(TID, &key).unwrap();
            parts[owner[usize::from(KeyPath::of(&key).0[0])]]
                .delete(TID, &key)
                .unwrap();
        }
        if version == 6 {
            // Everything goes: the trie exists and is empty.
            for key in std::mem::take(&mut live).into_keys() {
                full.delete(TID, &key).unwrap();
                parts[owner[usize::from(KeyPath::of(&key).0[0])]]
                    .delete(TID, &key)
                    .unwrap();
            }
        }
        full.commit(version).unwrap();
        for p in &mut parts {
            p.commit(version).unwrap();
        }
        for p in &parts {
            p.clear_caches();
        }
        full.clear_caches();
        check_version(&full, &parts, &owner, version, &by_path, &mut rng);
    }
    // Every version again, now that each store holds newer ones.
    for version in 1..=plan.len() as u64 {
        check_version(&full, &parts, &owner, version, &by_path, &mut rng);
    }
}

fn check_version(
    full: &Store,
    parts: &[Store],
    owner: &[usize; 256],
    version: u64,
    by_path: &HashMap<KeyPath, Vec<u8>>,
    rng: &mut Rng,
) {
    let expected = full.subtree_tops(TID, version).unwrap();
    let mut held = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if let Some(t) = p.subtree_tops(TID, version).unwrap() {
            assert_eq!(
                t,
                t.filter(|x| owner[usize::from(x)] == i),
                "a store reports a subtree it does not hold"
            );
            held.push(t);
        }
    }
    let merged = Tops::merge(held).unwrap();
    let expected = expected.expect("the trie exists from version 1");
    assert_eq!(merged, expected, "tops at version {version}");
    let root = full.digest(TID, version).unwrap().root;
    assert_eq!(merged.root(), root, "root at version {version}");

    // Proofs: every key ever written (present or deleted), some never written, alone and in batches.
    let mut keys: Vec<Vec<u8>> = by_path.values().cloned().collect();
    keys.sort();
    keys.extend((0..20).map(|i| (900_000u64 + i).to_le_bytes().to_vec()));
    let mut batches: Vec<Vec<Vec<u8>>> = keys.iter().map(|k| vec![k.clone()]).collect();
    for _ in 0..20 {
        let n = 1 + rng.below(40) as usize;
        batches.push(
            (0..n)
                .map(|_| keys[rng.below(keys.len() as u64) as usize].clone())
                .collect(),
        );
    }
    let by_path: HashMap<KeyPath, Vec<u8>> =
        keys.iter().map(|k| (KeyPath::of(k), k.clone())).collect();
    for batch in batches {
        let refs: Vec<&[u8]> = batch.iter().map(|k| k.as_slice()).collect();
        let (values, want) = full.get_multi_proof(TID, version, &refs).unwrap();
        let mut paths: Vec<KeyPath> = refs.iter().map(|k| KeyPath::of(k)).collect();
        paths.sort();
        paths.dedup();
        let got = merged
            .prove(&paths, |prefix, q| {
                let keys: Vec<&[u8]> = q.iter().map(|p| by_path[p].as_slice()).collect();
                let (_, proof) = parts[owner[usize::from(prefix)]]
                    .get_multi_proof(TID, version, &keys)
                    .unwrap();
                below_top(proof)
            })
            .unwrap();
        assert_eq!(
            got,
            want,
            "proof of {} keys at version {version}",
            batch.len()
        );
        let mut claims: Vec<letus_verify::Claim<'_>> = refs
            .iter()
            .zip(&values)
            .map(|(k, v)| letus_verify::Claim {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        claims.sort_by_key(|c| c.key);
        claims.dedup_by_key(|c| c.key);
        let _ = letus_verify::verify_multi_proof(&root, &claims, &got, &Limits::default()).unwrap();
    }
}

fn contiguous(shards: usize) -> [usize; 256] {
    std::array::from_fn(|p| p * shards / 256)
}

#[test]
fn one_store_composes_to_its_own_root() {
    run(contiguous(1), 1, 1);
}

#[test]
fn two_four_and_sixteen_contiguous_shards_compose_to_the_single_store() {
    run(contiguous(2), 2, 2);
    run(contiguous(4), 4, 4);
    run(contiguous(16), 16, 16);
}

#[test]
fn scattered_subtrees_compose_to_the_single_store() {
    let mut rng = Rng(99);
    run(std::array::from_fn(|_| rng.below(3) as usize), 3, 7);
}

#[test]
fn overlapping_and_misplaced_tops_are_refused() {
    let leaf = |b: u8| Top::Leaf {
        path: KeyPath([b; 32]),
        value_hash: letus_verify::hash::value_hash(b"v"),
    };
    assert_eq!(
        Tops::merge([
            Tops::new(vec![(1, leaf(1))]).unwrap(),
            Tops::new(vec![(1, leaf(1))]).unwrap()
        ]),
        Err(ShardError::Overlap { prefix: 1 })
    );
    assert_eq!(
        Tops::new(vec![(2, leaf(1))]),
        Err(ShardError::Misplaced { prefix: 2 })
    );
    assert_eq!(
        Tops::new(vec![(2, Top::Branch(letus_verify::EMPTY))]),
        Err(ShardError::EmptyBranch { prefix: 2 })
    );
    assert_eq!(Tops::default().root(), letus_verify::EMPTY);
    assert!(matches!(
        below_top(Proof {
            records: vec![ProofRecord::Empty]
        }),
        Err(ShardError::ProofShape(_))
    ));
}
