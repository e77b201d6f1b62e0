//! Any bytes as a state export, fed in chunks whose sizes come from the input; whole and chunked reads agree.
#![no_main]
use letus_verify::export::{verify_export, ExportReader};
use letus_verify::{Hash, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, stream)) = data.split_first() else { return };
    let limits = Limits { max_key_bytes: 1024, max_value_bytes: 4096, ..Limits::default() };
    let root = Hash([0; 32]);
    let whole = verify_export(stream, &root, &limits).map_err(|e| e.code());
    let mut r = ExportReader::new(limits);
    let mut res = Ok(());
    for c in stream.chunks(usize::from(chunk).max(1)) {
        res = r.feed(c);
        if res.is_err() {
            break;
        }
    }
    let chunked = res.and_then(|()| r.finish(&root)).map_err(|e| e.code());
    assert_eq!(whole, chunked);
});
