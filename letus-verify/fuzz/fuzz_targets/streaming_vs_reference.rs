//! Differential: the streaming root (SPEC.md §9.1) equals the reference model's root for any key set, and a
//! proof for any key verifies.
#![no_main]
use letus_verify::reference::ReferenceTrie;
use letus_verify::{verify_proof, FullVerifier, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Keys are 2-byte windows so that sets are small and paths collide in their first nibbles often.
    let t = ReferenceTrie::from_pairs(data.chunks(2).map(|k| (k, &k[..1])));
    let mut f = FullVerifier::new();
    for (k, v) in t.pairs() {
        f.update(k, v).expect("pairs come in path order");
    }
    assert_eq!(f.finalize(), t.root());
    if let Some(k) = data.get(..2) {
        let p = t.prove(&[k]);
        let read =
            verify_proof(&t.root(), k, t.get(k), &p, &Limits::default()).expect("honest proof");
        assert_eq!(read.value(), t.get(k));
    }
});
