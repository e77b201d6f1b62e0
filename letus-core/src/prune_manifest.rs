//! The prune manifest (`pruned`): where a pruned store's history of pages begins.
//!
//! A prune at boundary `B` (FORMAT.md §2.9) replaces index files (every record of a version `<= B` not already in
//! a base file) by one **base file** `k.G.idx`. A store's index files are then its base files, oldest first, then
//! ordinary ones. This file names the base files and the boundary; writing it is a prune's commit point. Versions
//! below `B` answer [`crate::Error::Pruned`].
//!
//! Value-log GC may raise the boundary between prunes (to delete value-log files only versions below it read), so
//! the manifest holds two: the **boundary** below which versions are pruned, and the **base boundary** the newest
//! base file was written at (the last version of that file, where the next incremental prune starts), never above
//! the boundary.
//!
//! ## Format (44 + 12 per base file bytes)
//! ```text
//! header (16 bytes): magic "LETUSPRN" | u32 format = 2 | u32 crc32(magic || format)
//! body: u64 boundary | u64 base boundary | u32 n | n x (u64 file number | u32 generation) | u32 crc32(body before)
//! ```
//! Format 1 (read, never written) has no base boundary: it equals the boundary. The base files are listed oldest
//! first; the last one is the newest prune's. Written whole under a temporary
//! name, fsynced, renamed over the old one, directory fsynced ([`fsutil::write_whole_file`]): a crash leaves the
//! old manifest (or none) or the new one.

use std::path::Path;

use letus_verify::Version;

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, u64_at, LOG_HEADER_LEN};
use crate::storage::Storage;

const MAGIC: &[u8; 8] = b"LETUSPRN";
const FORMAT: u32 = 2;
/// The format without a base boundary (a version-4 store's).
const FORMAT_1: u32 = 1;
/// The most base files a manifest lists (a prune merges them all into one long before).
pub const MAX_BASE_FILES: usize = 1024;
/// The manifest's name in the store's directory.
pub const FILE_NAME: &str = "pruned";

/// What the manifest says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneManifest {
    /// The oldest version with state: versions below it are pruned.
    pub boundary: Version,
    /// The last version of the newest base file (`<= boundary`): the pages of versions up to it are in the base
    /// files.
    pub base_boundary: Version,
    /// The base files `(number, generation)`, oldest first (at least one): index files numbered below the first
    /// are gone, and between the first and the last only these are kept.
    pub bases: Vec<(u64, u32)>,
}

impl PruneManifest {
    fn encode(&self) -> Vec<u8> {
        let mut b = log_header(MAGIC, FORMAT).to_vec();
        let body_at = b.len();
        b.extend_from_slice(&self.boundary.to_le_bytes());
        b.extend_from_slice(&self.base_boundary.to_le_bytes());
        b.extend_from_slice(&(self.bases.len() as u32).to_le_bytes());
        for (no, generation) in &self.bases {
            b.extend_from_slice(&no.to_le_bytes());
            b.extend_from_slice(&generation.to_le_bytes());
        }
        let c = crc(&b[body_at..]);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    /// The newest base file (the newest prune's).
    pub fn newest(&self) -> (u64, u32) {
        self.bases.last().copied().unwrap_or((0, 0))
    }
}

/// Reads the manifest of the store in `dir`; `None` for a store never pruned.
pub fn read(fs: &dyn Storage, dir: &Path) -> Result<Option<PruneManifest>> {
    let path = dir.join(FILE_NAME);
    let Some(bytes) = fsutil::read_if_exists(fs, &path)? else {
        return Ok(None);
    };
    // Format 1 is format 2 without the base boundary.
    let format1 = check_log_header(&path, &bytes, MAGIC, FORMAT_1, "prune manifest").is_ok();
    if !format1 {
        check_log_header(&path, &bytes, MAGIC, FORMAT, "prune manifest")?;
    }
    let bad = |what: &str| Error::corrupt(&path, LOG_HEADER_LEN as u64, what);
    let body = bytes.get(LOG_HEADER_LEN..).unwrap_or_default();
    let fixed = if format1 { 8 } else { 16 };
    let n = u32_at(body, fixed).ok_or_else(|| bad("prune manifest is cut"))? as usize;
    if n == 0 || n > MAX_BASE_FILES {
        return Err(bad("prune manifest lists no base file, or too many"));
    }
    let len = fixed + 4 + 12 * n;
    if body.len() != len + 4 {
        return Err(bad("prune manifest has the wrong length"));
    }
    if u32_at(body, len) != Some(crc(&body[..len])) {
        return Err(bad("prune manifest fails its checksum"));
    }
    let boundary = u64_at(body, 0).ok_or_else(|| bad("prune manifest is cut"))?;
    let base_boundary = if format1 {
        boundary
    } else {
        u64_at(body, 8).ok_or_else(|| bad("prune manifest is cut"))?
    };
    if base_boundary > boundary {
        return Err(bad("prune manifest's base boundary is above its boundary"));
    }
    let mut bases = Vec::with_capacity(n);
    for i in 0..n {
        let at = fixed + 4 + 12 * i;
        let no = u64_at(body, at).ok_or_else(|| bad("prune manifest is cut"))?;
        let generation = u32_at(body, at + 8).ok_or_else(|| bad("prune manifest is cut"))?;
        if bases.last().is_some_and(|(last, _)| *last >= no) || generation == 0 {
            return Err(bad("prune manifest lists base files out of order"));
        }
        bases.push((no, generation));
    }
    Ok(Some(PruneManifest {
        boundary,
        base_boundary,
        bases,
    }))
}

/// Replaces the manifest of the store in `dir` atomically (temporary file, fsync, rename, directory fsync).
pub fn write(fs: &dyn Storage, dir: &Path, m: &PruneManifest) -> Result<()> {
    fsutil::write_whole_file(fs, dir, FILE_NAME, &m.encode()).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_reads_back_and_a_flipped_bit_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::storage::local();
        assert_eq!(read(&*fs, dir.path()).unwrap(), None);
        let m = PruneManifest {
            boundary: 77,
            base_boundary: 70,
            bases: vec![(2, 1), (5, 2)],
        };
        write(&*fs, dir.path(), &m).unwrap();
        assert_eq!(read(&*fs, dir.path()).unwrap(), Some(m.clone()));
        let path = dir.path().join(FILE_NAME);
        let mut b = std::fs::read(&path).unwrap();
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

    #[test]
    fn a_format_1_manifest_reads_with_its_boundary_as_the_base_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::storage::local();
        let mut b = log_header(MAGIC, FORMAT_1).to_vec();
        let body_at = b.len();
        b.extend_from_slice(&41u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        let c = crc(&b[body_at..]);
        b.extend_from_slice(&c.to_le_bytes());
        std::fs::write(dir.path().join(FILE_NAME), &b).unwrap();
        assert_eq!(
            read(&*fs, dir.path()).unwrap(),
            Some(PruneManifest {
                boundary: 41,
                base_boundary: 41,
                bases: vec![(3, 1)],
            })
        );
        // A base boundary above the boundary is corruption.
        let m = PruneManifest {
            boundary: 5,
            base_boundary: 6,
            bases: vec![(1, 1)],
        };
        write(&*fs, dir.path(), &m).unwrap();
        assert!(matches!(read(&*fs, dir.path()), Err(Error::Corrupt { .. })));
    }
}
