//! A block-store segment file: recovered, and its versions read back.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = letus_node::fuzzing::block_segment(std::path::Path::new("/fuzz"), data);
});
