//! Property tests: honest proofs verify, any change to a proof, key, value or root makes verification fail,
//! multi-proofs agree with single proofs, and the streaming full verifier agrees with the reference model.

use std::collections::BTreeMap;

use letus_verify::proof_json::ProofJson;
use letus_verify::reference::ReferenceTrie;
use letus_verify::{
    verify_multi_proof, verify_proof, Claim, FullVerifier, Hash, Limits, Proof, ProofError,
};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

fn state() -> impl Strategy<Value = BTreeMap<Vec<u8>, Vec<u8>>> {
    btree_map(vec(any::<u8>(), 0..12), vec(any::<u8>(), 0..8), 0..80)
}

fn trie(m: &BTreeMap<Vec<u8>, Vec<u8>>) -> ReferenceTrie {
    ReferenceTrie::from_pairs(m.iter())
}

fn streaming_root(t: &ReferenceTrie) -> Hash {
    let mut f = FullVerifier::new();
    for (k, v) in t.pairs() {
        f.update(k, v).unwrap();
    }
    f.finalize()
}

fn claims_for<'a>(t: &'a ReferenceTrie, keys: &'a [Vec<u8>]) -> Vec<Claim<'a>> {
    keys.iter()
        .map(|k| Claim {
            key: k,
            value: t.get(k),
        })
        .collect()
}

fn verify(root: &Hash, claims: &[Claim<'_>], bytes: &[u8]) -> Result<(), ProofError> {
    let p = Proof::decode(bytes, &Limits::default())?;
    verify_multi_proof(root, claims, &p, &Limits::default()).map(|_| ())
}

/// Some keys of the state plus some random (almost surely absent) ones, deduplicated.
fn query(m: &BTreeMap<Vec<u8>, Vec<u8>>, pick: &[usize], extra: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let keys: Vec<&Vec<u8>> = m.keys().collect();
    let mut q: Vec<Vec<u8>> = Vec::new();
    if !keys.is_empty() {
        for &i in pick {
            q.push(keys[i % keys.len()].clone());
        }
    }
    q.extend(extra.iter().cloned());
    q.sort();
    q.dedup();
    q
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn root_depends_only_on_the_set(m in state(), seed in any::<u64>()) {
        let a = trie(&m);
        // Insert in a different order, with overwrites and deletes of extra keys along the way.
        let mut pairs: Vec<(&Vec<u8>, &Vec<u8>)> = m.iter().collect();
        let n = pairs.len().max(1);
        pairs.rotate_left((seed as usize) % n);
        let mut b = ReferenceTrie::new();
        b.insert(b"temporary", b"x");
        for (k, v) in &pairs {
            b.insert(k, b"old");
            b.insert(k, v);
        }
        if !m.contains_key(&b"temporary"[..]) {
            b.remove(b"temporary");
        } else {
            b.insert(b"temporary", &m[&b"temporary"[..]]);
        }
        prop_assert_eq!(a.root(), b.root());
        prop_assert_eq!(streaming_root(&a), a.root());
    }

    #[test]
    fn honest_proofs_verify_and_agree_with_single_proofs(
        m in state(), pick in vec(any::<usize>(), 0..6), extra in vec(vec(any::<u8>(), 0..12), 0..4)
    ) {
        let t = trie(&m);
        let root = t.root();
        let q = query(&m, &pick, &extra);
        prop_assume!(!q.is_empty());
        let keys: Vec<&[u8]> = q.iter().map(|k| k.as_slice()).collect();
        let proof = t.prove(&keys);
        let claims = claims_for(&t, &q);
        let verified = verify_multi_proof(&root, &claims, &proof, &Limits::default()).unwrap();
        for (k, v) in verified.entries() {
            prop_assert_eq!(v.as_deref(), t.get(k));
            let single = t.prove(&[k]);
            let read = verify_proof(&root, k, t.get(k), &single, &Limits::default()).unwrap();
            prop_assert_eq!(read.value(), v.as_deref());
            // The opposite claim cannot be proven with the same proof: no absence proof for a present key,
            // no inclusion proof for an absent one.
            let flipped = match t.get(k) { Some(_) => None, None => Some(&b"x"[..]) };
            prop_assert!(verify_proof(&root, k, flipped, &single, &Limits::default()).is_err());
        }
        // The multi-proof is never larger than the single proofs together.
        let singles: usize = keys.iter().map(|k| t.prove(&[k]).encoded_len()).sum();
        prop_assert!(proof.encoded_len() <= singles + 2);
        // JSON round trip.
        let j: ProofJson = serde_json::from_str(&serde_json::to_string(&proof.to_json_value()).unwrap()).unwrap();
        prop_assert_eq!(Proof::try_from(&j).unwrap(), proof.clone());
        // Binary round trip.
        prop_assert_eq!(Proof::decode(&proof.encode(), &Limits::default()).unwrap(), proof);
    }

    #[test]
    fn any_bit_flip_in_a_proof_fails(m in state(), pick in vec(any::<usize>(), 1..4), extra in vec(vec(any::<u8>(), 0..12), 0..2)) {
        let t = trie(&m);
        let root = t.root();
        let q = query(&m, &pick, &extra);
        prop_assume!(!q.is_empty());
        let keys: Vec<&[u8]> = q.iter().map(|k| k.as_slice()).collect();
        let bytes = t.prove(&keys).encode();
        let claims = claims_for(&t, &q);
        prop_assert!(verify(&root, &claims, &bytes).is_ok());
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(verify(&root, &claims, &b).is_err(), "bit {} of {}", bit, bytes.len() * 8);
        }
        // Dropping the last byte or adding one also fails.
        prop_assert!(verify(&root, &claims, &bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert!(verify(&root, &claims, &longer).is_err());
    }

    #[test]
    fn any_bit_flip_in_key_value_or_root_fails(m in state(), i in any::<usize>(), bit in any::<usize>()) {
        prop_assume!(!m.is_empty());
        let t = trie(&m);
        let root = t.root();
        let (k, v) = m.iter().nth(i % m.len()).unwrap();
        let proof = t.prove(&[k]);
        prop_assert!(verify_proof(&root, k, Some(v), &proof, &Limits::default()).is_ok());
        let mut r = root;
        r.0[bit % 32] ^= 1 << (bit % 8);
        prop_assert!(verify_proof(&r, k, Some(v), &proof, &Limits::default()).is_err());
        let mut k2 = k.clone();
        if k2.is_empty() { k2.push(0) } else { let j = bit % k2.len(); k2[j] ^= 1 << (bit % 8); }
        prop_assert!(verify_proof(&root, &k2, Some(v), &proof, &Limits::default()).is_err());
        let mut v2 = v.clone();
        if v2.is_empty() { v2.push(0) } else { let j = bit % v2.len(); v2[j] ^= 1 << (bit % 8); }
        prop_assert!(verify_proof(&root, k, Some(&v2), &proof, &Limits::default()).is_err());
    }

    #[test]
    fn streaming_rejects_disorder(m in btree_map(vec(any::<u8>(), 0..8), vec(any::<u8>(), 0..4), 2..40), i in any::<usize>()) {
        let t = trie(&m);
        let pairs: Vec<(&[u8], &[u8])> = t.pairs().collect();
        let j = i % (pairs.len() - 1);
        let mut f = FullVerifier::new();
        let mut result = Ok(());
        for (n, (k, v)) in pairs.iter().enumerate() {
            let (k, v) = if n == j { pairs[j + 1] } else if n == j + 1 { pairs[j] } else { (*k, *v) };
            result = f.update(k, v);
            if result.is_err() { break; }
        }
        prop_assert_eq!(result.map_err(|e| e.code()), Err("out_of_order"));
    }
}

#[test]
fn streaming_matches_reference_at_100k_keys() {
    let t = ReferenceTrie::from_pairs(
        (0u32..100_000).map(|i| (format!("key-{i}").into_bytes(), i.to_le_bytes().to_vec())),
    );
    assert_eq!(streaming_root(&t), t.root());
}

#[test]
fn deep_chains_and_small_tries() {
    // Keys whose paths share 5 nibbles form a chain of single-child branches; check roots and proofs.
    let a = b"chain".to_vec();
    let pa = letus_verify::KeyPath::of(&a);
    let b = (0u32..)
        .map(|i| format!("c{i}").into_bytes())
        .find(|k| letus_verify::KeyPath::of(k).lcp(&pa) >= 5)
        .unwrap();
    let t = ReferenceTrie::from_pairs([(a.clone(), b"1".to_vec()), (b.clone(), b"2".to_vec())]);
    assert!(t.depth_of(&a).unwrap() >= 6);
    assert_eq!(streaming_root(&t), t.root());
    for k in [&a, &b] {
        let p = t.prove(&[k]);
        let read = verify_proof(&t.root(), k, t.get(k), &p, &Limits::default()).unwrap();
        assert_eq!(read.value(), t.get(k));
    }
    let p = t.prove(&[&a, &b, &b"absent"[..]]);
    let claims = [
        Claim::present(&a, b"1"),
        Claim::present(&b, b"2"),
        Claim::absent(b"absent"),
    ];
    let reads = verify_multi_proof(&t.root(), &claims, &p, &Limits::default()).unwrap();
    assert_eq!(reads.get(b"absent"), Some(None));
    assert_eq!(reads.get(&b), Some(Some(&b"2"[..])));
}
