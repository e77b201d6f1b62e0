//! The list of collected data files (`vdls/collected`): the value-log files that garbage collection deleted.
//!
//! Data file ids are contiguous from 1 except for the ids this list names; an id missing from the directory and
//! not listed here is a lost file (corruption). Writing the list is the commit point of a deletion: the ids are
//! added here first (durably), and only then are the files unlinked, so a crash in between leaves files that the
//! next open deletes (FORMAT.md §1.6).
//!
//! ## Format (24 + 8 per range bytes)
//! ```text
//! header (16 bytes): magic "LETUSVGC" | u32 format = 1 | u32 crc32(magic || format)
//! body: u32 n | n x (u32 first id | u32 last id) | u32 crc32(body before)
//! ```
//! The ranges are inclusive, ascending and neither overlap nor touch (one encoding per set). Written whole under a
//! temporary name, fsynced, renamed over the old one, directory fsynced ([`fsutil::write_whole_file`]).

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, LOG_HEADER_LEN};
use crate::storage::Storage;

const MAGIC: &[u8; 8] = b"LETUSVGC";
const FORMAT: u32 = 1;
/// The list's name in the value log's directory.
pub const FILE_NAME: &str = "collected";
/// The most ranges a list holds (a list is read whole into memory; collection mostly removes the oldest files,
/// which makes one range).
pub const MAX_RANGES: usize = 1 << 20;

/// The most file ids a list names (16M: 256 TB of value log deleted at 16 MiB a file), checked while the ranges
/// are expanded, so that a list that passes its checksum cannot make an open allocate without bound.
pub const MAX_IDS: u64 = 1 << 24;

/// The ranges `[first, last]` of `ids`, ascending.
fn ranges(ids: &BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &id in ids {
        match out.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(id) => *last = id,
            _ => out.push((id, id)),
        }
    }
    out
}

fn encode(ids: &BTreeSet<u32>) -> Vec<u8> {
    let mut b = log_header(MAGIC, FORMAT).to_vec();
    let body_at = b.len();
    let r = ranges(ids);
    b.extend_from_slice(&(r.len() as u32).to_le_bytes());
    for (first, last) in r {
        b.extend_from_slice(&first.to_le_bytes());
        b.extend_from_slice(&last.to_le_bytes());
    }
    let c = crc(&b[body_at..]);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// Reads the list in the value log's directory `dir`; empty when there is none.
pub fn read(fs: &dyn Storage, dir: &Path) -> Result<BTreeSet<u32>> {
    let path = dir.join(FILE_NAME);
    let Some(bytes) = fsutil::read_if_exists(fs, &path)? else {
        return Ok(BTreeSet::new());
    };
    check_log_header(&path, &bytes, MAGIC, FORMAT, "collected-file list")?;
    let bad = |what: &str| Error::corrupt(&path, LOG_HEADER_LEN as u64, what);
    let body = bytes.get(LOG_HEADER_LEN..).unwrap_or_default();
    let n = u32_at(body, 0).ok_or_else(|| bad("collected-file list is cut"))? as usize;
    if n > MAX_RANGES {
        return Err(bad("collected-file list has too many ranges"));
    }
    let len = 4 + 8 * n;
    if body.len() != len + 4 {
        return Err(bad("collected-file list has the wrong length"));
    }
    if u32_at(body, len) != Some(crc(&body[..len])) {
        return Err(bad("collected-file list fails its checksum"));
    }
    let mut ids = BTreeSet::new();
    let mut after: Option<u32> = None;
    for i in 0..n {
        let first = u32_at(body, 4 + 8 * i).ok_or_else(|| bad("collected-file list is cut"))?;
        let last = u32_at(body, 8 + 8 * i).ok_or_else(|| bad("collected-file list is cut"))?;
        // Ranges ascend with a gap between them; ids start at 1.
        let in_order = after.is_none_or(|a| a.checked_add(1).is_some_and(|next| first > next));
        if first == 0 || first > last || !in_order {
            return Err(bad("collected-file list ranges are out of order"));
        }
        if ids.len() as u64 + u64::from(last - first) + 1 > MAX_IDS {
            return Err(bad("collected-file list names too many files"));
        }
        ids.extend(first..=last);
        after = Some(last);
    }
    Ok(ids)
}

/// Replaces the list in `dir` atomically (temporary file, fsync, rename, directory fsync).
pub fn write(fs: &dyn Storage, dir: &Path, ids: &BTreeSet<u32>) -> Result<()> {
    fsutil::write_whole_file(fs, dir, FILE_NAME, &encode(ids)).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list whose one range names more ids than any store deletes passes its checksum and is still refused,
    /// not expanded into billions of ids.
    #[test]
    fn a_list_naming_too_many_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::storage::local();
        let mut b = encode(&[1u32].into_iter().collect());
        let body_at = LOG_HEADER_LEN;
        b[body_at + 8..body_at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let len = b.len();
        let c = crc(&b[body_at..len - 4]);
        b[len - 4..].copy_from_slice(&c.to_le_bytes());
        std::fs::write(dir.path().join(FILE_NAME), &b).unwrap();
        match read(&*fs, dir.path()) {
            Err(Error::Corrupt { what, .. }) => assert!(what.contains("too many files"), "{what}"),
            other => panic!("{:?}", other.map(|s| s.len())),
        }
    }

    #[test]
    fn a_list_reads_back_as_ranges_and_a_flipped_bit_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::storage::local();
        assert!(read(&*fs, dir.path()).unwrap().is_empty());
        let ids: BTreeSet<u32> = [1, 2, 3, 5, 9, 10].into_iter().collect();
        assert_eq!(ranges(&ids), vec![(1, 3), (5, 5), (9, 10)]);
        write(&*fs, dir.path(), &ids).unwrap();
        assert_eq!(read(&*fs, dir.path()).unwrap(), ids);
        let path = dir.path().join(FILE_NAME);
        let mut b = std::fs::read(&path).unwrap();
        assert_eq!(b.len(), 24 + 8 * 3);
        for i in 0..b.len() {
            b[i] ^= 1;
            std::fs::write(&path, &b).unwrap();
            assert!(
                matches!(
                    read(&*fs, dir.path()),
                    Err(Error::Corrupt { .. } | Error::UnsupportedFormat { .. })
                ),
                "byte {i}"
            );
            b[i] ^= 1;
        }
        std::fs::write(&path, &b[..b.len() - 1]).unwrap();
        assert!(read(&*fs, dir.path()).is_err());
    }
}
