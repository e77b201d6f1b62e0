//! An LSVPS index file: opened and looked up.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let _ = letus_core::fuzzing::index_file(dir.path(), data);
});
