//! The roots log, the tombstone log and the history base (first byte: which one, second: the flushed version).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let [which, flushed, rest @ ..] = data {
        let flushed = (*flushed != 0).then_some(u64::from(*flushed));
        let _ =
            letus_core::fuzzing::small_log(std::path::Path::new("/fuzz"), *which, flushed, rest);
    }
});
