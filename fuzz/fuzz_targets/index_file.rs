//! An LSVPS index file: opened and looked up.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = letus_core::fuzzing::index_file(std::path::Path::new("/fuzz"), data);
});
