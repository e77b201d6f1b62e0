//! Any bytes as the JSON form of a proof: parse, convert with typed errors, round-trip through binary.
#![no_main]
use letus_verify::proof_json::ProofJson;
use letus_verify::{Limits, Proof};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(j) = serde_json::from_slice::<ProofJson>(data) {
        if let Ok(p) = Proof::try_from(&j) {
            assert_eq!(Proof::decode(&p.encode(), &Limits::default()).ok(), Some(p));
        }
    }
});
