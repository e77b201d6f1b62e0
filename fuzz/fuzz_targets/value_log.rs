//! A value-log data file, recovered from its start (torn tails, groups, prev links).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = letus_core::fuzzing::value_log(std::path::Path::new("/fuzz"), data);
});
