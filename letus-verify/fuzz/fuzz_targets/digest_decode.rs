//! Any bytes as a digest: decoding returns a result; what decodes re-encodes identically.
#![no_main]
use letus_verify::{Digest, DigestChecker};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Digest::decode(data) {
        assert_eq!(d.encode(), data);
        let mut c = DigestChecker::new();
        let _ = c.observe("a", &d);
        let _ = c.add_checkpoint(&d);
    }
});
