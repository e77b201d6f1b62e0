//! Any bytes as history inclusion and consistency proofs, verified against roots derived from the input.
#![no_main]
use letus_verify::{ConsistencyProof, Hash, InclusionProof};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let root = Hash([0x11; 32]);
    if let Ok(p) = InclusionProof::decode(data) {
        assert_eq!(p.encode().ok().as_deref(), Some(data));
        let _ = p.verify(&root, p.tree_size, &Hash([0x22; 32]));
    }
    if let Ok(p) = ConsistencyProof::decode(data) {
        assert_eq!(p.encode().ok().as_deref(), Some(data));
        let _ = p.verify(p.old_size, &root, p.new_size, &Hash([0x33; 32]));
    }
});
