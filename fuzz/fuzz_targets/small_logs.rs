//! The roots log, the tombstone log, the history base, the prune manifest and the value log's collected-file list
//! (first byte: which one, modulo 5; second: the flushed version).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let [which, flushed, rest @ ..] = data {
        let flushed = (*flushed != 0).then_some(u64::from(*flushed));
        let _ =
            letus_core::fuzzing::small_log(std::path::Path::new("/fuzz"), *which, flushed, rest);
    }
});
