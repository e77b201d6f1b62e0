//! Page records (BasePage / DeltaPage payloads) and the pages built from them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    letus_core::fuzzing::page_record(data);
    letus_core::fuzzing::value_record(data);
});
