//! Any bytes as the JSON form of a proof: parse, convert with typed errors, round-trip through binary.
#![no_main]
use letus_verify::proof_json::ProofJson;
use letus_verify::{Limits, Proof};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(j) = serde_json::from_slice::<ProofJson>(data) {
        // What the JSON decoder accepts within the limits, the binary one accepts too, as the same records.
        if let Ok(p) = Proof::from_json(&j, &Limits::default()) {
            assert_eq!(Proof::decode(&p.encode(), &Limits::default()).ok(), Some(p));
        }
    }
});
