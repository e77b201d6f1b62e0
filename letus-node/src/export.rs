//! The one writer of state exports (SPEC.md §9.2), for `GET /v1/tries/{tid}/export` and `letus export`.

use letus_core::Snapshot;
use letus_verify::export::{encode_record, encode_trailer, ExportHeader};
use letus_verify::{Hash, TrieId, Version};

/// Bytes gathered before a chunk goes to the sink.
const CHUNK_BYTES: usize = 64 * 1024;

/// Writes the export of trie `tid` at `version` (whose root is `root`) of `snap` to `sink` in chunks of about
/// 64 KiB: header, records in path order, trailer. `sink` returns `false` to stop (its reader went away); then
/// the result is `Ok(None)`. Otherwise the number of records. The snapshot walk holds the engine only per chunk
/// of pairs, never while `sink` runs.
pub fn write_export(
    snap: &Snapshot,
    tid: TrieId,
    version: Version,
    root: Hash,
    mut sink: impl FnMut(Vec<u8>) -> bool,
) -> Result<Option<u64>, letus_core::Error> {
    let mut buf = ExportHeader { tid, version, root }.encode();
    let n = snap.for_each_pair(tid, version, |k, v| {
        encode_record(k, v, &mut buf);
        if buf.len() >= CHUNK_BYTES && !sink(std::mem::take(&mut buf)) {
            return Err(letus_core::Error::Cancelled);
        }
        Ok(())
    });
    let n = match n {
        Ok(n) => n,
        Err(letus_core::Error::Cancelled) => return Ok(None),
        Err(e) => return Err(e),
    };
    buf.extend_from_slice(&encode_trailer(n));
    Ok(sink(buf).then_some(n))
}
