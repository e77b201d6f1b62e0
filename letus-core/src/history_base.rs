//! The history base: for a store that starts from an export of another store's version `V`, the frontier of each
//! imported trie's history before `V` (its size and the peaks of its perfect subtrees, SPEC.md §8), so that the
//! store's digests carry the source's history commitment (`history_len`, `history_root`) instead of starting a
//! new history at 1.
//!
//! ## Format
//! ```text
//! header (16 bytes): magic "LETUSHBS" | u32 format = 1 | u32 crc32(magic || format)
//! entry: u32 tid | u64 size | u8 peaks | peaks x (u32 height | hash[32]) | u32 crc32(the entry's bytes before)
//! ```
//! Written once, before the store's first commit, under a temporary name that is fsynced and renamed into place
//! (then the directory is fsynced): a crash leaves either no base or the whole of it.

use std::collections::BTreeMap;
use std::path::Path;

use letus_verify::{Hash, TrieId};

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, u64_at, LOG_HEADER_LEN};
use crate::storage::Storage;

const MAGIC: &[u8; 8] = b"LETUSHBS";
const FORMAT: u32 = 1;
const HEADER_LEN: usize = LOG_HEADER_LEN;
const FILE_NAME: &str = "history_base";

/// One trie's frontier: `(size, peaks (height, hash), largest first)`.
pub type Frontier = (u64, Vec<(u32, Hash)>);

/// Reads the base of the store in `dir` (empty when the store did not start from an export).
pub fn read(fs: &dyn Storage, dir: &Path) -> Result<BTreeMap<TrieId, Frontier>> {
    let path = dir.join(FILE_NAME);
    let Some(bytes) = fsutil::read_if_exists(fs, &path)? else {
        return Ok(BTreeMap::new());
    };
    let bad = |offset: usize, what: &str| Error::corrupt(&path, offset as u64, what);
    check_log_header(&path, &bytes, MAGIC, FORMAT, "history base")?;
    let mut out = BTreeMap::new();
    let mut pos = HEADER_LEN;
    while pos < bytes.len() {
        let start = pos;
        let cut = || bad(start, "history base entry is cut");
        let fixed = bytes.get(pos..pos + 13).ok_or_else(cut)?;
        let tid = u32_at(fixed, 0).ok_or_else(cut)?;
        let size = u64_at(fixed, 4).ok_or_else(cut)?;
        let n = usize::from(fixed[12]);
        let len = 13 + n * 36;
        let entry = bytes.get(pos..pos + len + 4).ok_or_else(cut)?;
        if u32_at(entry, len) != Some(crc(&entry[..len])) {
            return Err(bad(start, "history base entry fails its checksum"));
        }
        let peaks = entry[13..len]
            .chunks_exact(36)
            .map(|c| {
                let mut h = [0u8; 32];
                h.copy_from_slice(&c[4..]);
                (u32_at(c, 0).unwrap_or(u32::MAX), Hash(h))
            })
            .collect();
        if out.insert(tid, (size, peaks)).is_some() {
            return Err(bad(start, "history base names a trie twice"));
        }
        pos += len + 4;
    }
    Ok(out)
}

/// Writes the base (see the module's crash argument).
pub fn write(fs: &dyn Storage, dir: &Path, base: &BTreeMap<TrieId, Frontier>) -> Result<()> {
    let mut b = log_header(MAGIC, FORMAT).to_vec();
    for (tid, (size, peaks)) in base {
        let start = b.len();
        b.extend_from_slice(&tid.to_le_bytes());
        b.extend_from_slice(&size.to_le_bytes());
        // At most 64 peaks (one per bit of a u64 size).
        b.push(u8::try_from(peaks.len()).unwrap_or(u8::MAX));
        for (h, hash) in peaks {
            b.extend_from_slice(&h.to_le_bytes());
            b.extend_from_slice(&hash.0);
        }
        let c = crc(&b[start..]);
        b.extend_from_slice(&c.to_le_bytes());
    }
    fsutil::write_whole_file(fs, dir, FILE_NAME, &b).map(drop)
}
