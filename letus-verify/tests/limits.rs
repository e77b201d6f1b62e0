//! The limits of SPEC.md §6 that the vectors do not cover because the inputs would be megabytes.

use letus_verify::proof_json::{JsonField, RecordJson};
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

#[test]
fn a_proof_holds_at_most_max_keys_terminal_and_64_times_as_many_branch_records() {
    let bytes = |records: &[&[u8]], n: usize| -> Vec<u8> {
        let mut b = vec![1u8, 1];
        for _ in 0..n {
            for r in records {
                b.extend_from_slice(r);
            }
        }
        b
    };
    let three = Limits {
        max_keys: 3,
        ..Limits::default()
    };
    // Terminal records of every kind count together; the fourth fails, even before a bad record after it.
    let other = [&[2u8][..], &[7u8; 64][..]].concat();
    let terminals: [&[u8]; 3] = [&[0u8], &[1u8], &other];
    assert_eq!(
        Proof::decode(&bytes(&terminals, 1), &three)
            .unwrap()
            .records
            .len(),
        3
    );
    let mut four = bytes(&terminals, 1);
    four.extend_from_slice(&[0, 0x07]);
    let e = Proof::decode(&four, &three).unwrap_err();
    assert_eq!(e.code(), "too_large", "{e}");
    // BRANCH records: 64 per key.
    assert!(Proof::decode(&bytes(&[&[3, 0]], 192), &three).is_ok());
    let e = Proof::decode(&bytes(&[&[3, 0]], 193), &three).unwrap_err();
    assert_eq!(e.code(), "too_large", "{e}");
    // The JSON form counts the same records.
    let p = Proof::decode(&bytes(&[&[3, 0]], 192), &three).unwrap();
    assert!(Proof::from_json(&p.to_json_value(), &three).is_ok());
    let mut p = Proof::decode(&bytes(&terminals, 1), &three).unwrap();
    p.records.push(letus_verify::Record::Empty);
    assert_eq!(
        Proof::from_json(&p.to_json_value(), &three)
            .unwrap_err()
            .code(),
        "too_large"
    );
    // JSON counts only once every record is converted (SPEC.md §5.5): a bad record after too many terminal
    // records is that record's error.
    let mut j = p.to_json_value();
    let Some(JsonField::List(records)) = &mut j.records else {
        panic!("records: {:?}", j.records)
    };
    records.push(JsonField::Object(Box::new(RecordJson {
        t: Some(JsonField::Str("twig".into())),
        ..RecordJson::default()
    })));
    assert_eq!(
        Proof::from_json(&j, &three).unwrap_err().code(),
        "unknown_tag"
    );
    // At the defaults: 640,000 BRANCH records decode, one more does not; a 4 MiB proof of one-byte records now
    // fails at its 10,001st record instead of decoding 4 million records.
    assert!(Proof::decode(&bytes(&[&[3, 0]], 640_000), &Limits::default()).is_ok());
    let e = Proof::decode(&bytes(&[&[3, 0]], 640_001), &Limits::default()).unwrap_err();
    assert_eq!(e.code(), "too_large");
    let e = Proof::decode(&bytes(&[&[0]], (4 << 20) - 2), &Limits::default()).unwrap_err();
    assert_eq!(e.code(), "too_large");
}

/// Found by review: a `Proof` built in code (its fields are public) could give a branch more or fewer hashes than
/// its mask names, or an empty subtree's hash, and the walk padded or ignored them. Only the decoders refused
/// that; the verifier now does too, with the decoders' codes.
#[test]
fn a_branch_built_in_code_must_match_its_mask() {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..200u32)
        .map(|i| (i.to_le_bytes().to_vec(), b"v".to_vec()))
        .collect();
    let t = ReferenceTrie::from_pairs(pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
    let key = 7u32.to_le_bytes();
    let p = t.prove(&[&key]);
    let verify = |p: &Proof| verify_proof(&t.root(), &key, Some(b"v"), p, &Limits::default());
    assert!(verify(&p).is_ok());
    let at = p
        .records
        .iter()
        .position(
            |r| matches!(r, letus_verify::Record::Branch { hashes, .. } if !hashes.is_empty()),
        )
        .expect("a branch with hashes");
    type Edit = dyn Fn(&mut Vec<letus_verify::Hash>);
    let edits: [&Edit; 3] = [
        &|h| h.push(letus_verify::hash::value_hash(b"extra")),
        &|h| {
            h.pop();
        },
        &|h| h[0] = letus_verify::EMPTY,
    ];
    // The codes the decoders give the same records (SPEC.md §5.4).
    for (edit, code) in edits
        .iter()
        .zip(["malformed", "malformed", "non_canonical"])
    {
        let mut bad = p.clone();
        if let letus_verify::Record::Branch { hashes, .. } = &mut bad.records[at] {
            edit(hashes);
        }
        assert_eq!(verify(&bad).unwrap_err().code(), code);
    }
}
