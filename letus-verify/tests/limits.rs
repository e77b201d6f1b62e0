//! The limits of SPEC.md §6 that the vectors do not cover because the inputs would be megabytes.

use letus_verify::reference::ReferenceTrie;
use letus_verify::{verify_multi_proof, verify_proof, Claim, Limits, Proof};

#[test]
fn more_claims_than_max_keys_are_rejected_before_any_hashing() {
    let t = ReferenceTrie::from_pairs([(b"a", b"1")]);
    let keys: Vec<Vec<u8>> = (0..10_001u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let claims: Vec<Claim<'_>> = keys.iter().map(|k| Claim::absent(k)).collect();
    let p = t.prove(&[b"a"]);
    let e = verify_multi_proof(&t.root(), &claims, &p, &Limits::default()).unwrap_err();
    assert_eq!(e.code(), "too_many_keys");
    // Exactly the limit is allowed (and here fails later, on the proof).
    let e = verify_multi_proof(&t.root(), &claims[..10_000], &p, &Limits::default()).unwrap_err();
    assert_ne!(e.code(), "too_many_keys");
}

#[test]
fn oversize_values_and_proofs_are_rejected() {
    let t = ReferenceTrie::from_pairs([(b"a", b"1")]);
    let p = t.prove(&[b"a"]);
    let big = vec![0u8; 16 * 1024 * 1024 + 1];
    let e = verify_proof(&t.root(), b"a", Some(&big), &p, &Limits::default()).unwrap_err();
    assert_eq!(e.code(), "too_large");
    let small = Limits {
        max_proof_bytes: 2,
        ..Limits::default()
    };
    let e = Proof::decode(&p.encode(), &small).unwrap_err();
    assert_eq!(e.code(), "too_large");
    let j = p.to_json_value();
    assert_eq!(
        Proof::from_json(&j, &small).unwrap_err().code(),
        "too_large"
    );
    assert!(Proof::from_json(&j, &Limits::default()).is_ok());
}

#[test]
fn a_hostile_proof_of_maximal_depth_costs_bounded_work() {
    // 64 chained branches, each with 4 frontier hashes, ending on a leaf: the deepest honest shape.
    let mut records = Vec::new();
    for _ in 0..64 {
        records.push(letus_verify::Record::Branch {
            mask: 0x0f,
            hashes: vec![letus_verify::hash::value_hash(b"x"); 4],
        });
    }
    records.push(letus_verify::Record::Leaf);
    let p = Proof { records };
    let bytes = p.encode();
    assert!(bytes.len() < 9_000);
    let decoded = Proof::decode(&bytes, &Limits::default()).unwrap();
    let e = verify_proof(
        &letus_verify::EMPTY,
        b"k",
        Some(b"v"),
        &decoded,
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(e.code(), "root_mismatch");
}
