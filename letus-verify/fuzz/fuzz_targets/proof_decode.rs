//! Any bytes as a proof, checked against claims taken from the input: decoding and verification must return
//! a result, never panic; whatever decodes must re-encode to the same bytes.
#![no_main]
use letus_verify::{verify_multi_proof, Claim, Hash, Limits, Proof};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    // First byte: number of claims (1..=4); then the claims' keys are 1-byte slices; the rest is the proof.
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n % 4) + 1;
    if rest.len() < n {
        return;
    }
    let (keys, proof_bytes) = rest.split_at(n);
    let claims: Vec<Claim<'_>> = keys
        .chunks(1)
        .enumerate()
        .map(|(i, k)| Claim { key: k, value: if i % 2 == 0 { Some(k) } else { None } })
        .collect();
    if let Ok(p) = Proof::decode(proof_bytes, &limits) {
        assert_eq!(p.encode(), proof_bytes);
        let _ = verify_multi_proof(&Hash([0x5a; 32]), &claims, &p, &limits);
    }
});
