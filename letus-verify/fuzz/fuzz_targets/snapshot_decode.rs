//! Any bytes as a snapshot manifest and as a chunk: decoding returns a result (never a panic); what decodes
//! re-encodes identically; verifying a decoded manifest and a chunk against it returns a result.
#![no_main]
use letus_verify::snapshot::{Chunk, Manifest};
use letus_verify::{Limits, EMPTY};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let l = Limits::default();
    if let Ok(m) = Manifest::decode(data, &l) {
        assert_eq!(m.encode(), data);
        let (tid, version, root) = (m.tid, m.version, m.root);
        let _ = m.clone().verify(tid, version, &EMPTY);
        if let Ok(vm) = m.verify(tid, version, &root) {
            for i in 0..vm.items().len().min(4) {
                let _ = vm.verify_chunk(i as u32, data, &l);
            }
        }
    }
    if let Ok(c) = Chunk::decode(data, &l) {
        assert_eq!(c.encode(), data);
    }
});
