//! The prune manifest (`pruned`): where a pruned store's history of pages begins.
//!
//! A prune at boundary `B` (FORMAT.md §2.9) replaces index files (every record of a version `<= B` not already in
//! a base file) by one **base file** `k.G.idx`. A store's index files are then its base files, oldest first, then
//! ordinary ones. This file names the base files and the boundary; writing it is a prune's commit point. Versions
//! below `B` answer [`crate::Error::Pruned`].
//!
//! ## Format (36 + 12 per base file bytes)
//! ```text
//! header (16 bytes): magic "LETUSPRN" | u32 format = 1 | u32 crc32(magic || format)
//! body: u64 boundary | u32 n | n x (u64 file number | u32 generation) | u32 crc32(body before)
//! ```
//! The base files are listed oldest first; the last one is the newest prune's. Written whole under a temporary
//! name, fsynced, renamed over the old one, directory fsynced ([`fsutil::write_whole_file`]): a crash leaves the
//! old manifest (or none) or the new one.

use std::path::Path;

use letus_verify::Version;

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, u64_at, LOG_HEADER_LEN};
use crate::storage::Storage;

const MAGIC: &[u8; 8] = b"LETUSPRN";
const FORMAT: u32 = 1;
/// The most base files a manifest lists (a prune merges them all into one long before).
pub const MAX_BASE_FILES: usize = 1024;
/// The manifest's name in the store's directory.
pub const FILE_NAME: &str = "pruned";

/// What the manifest says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneManifest {
    /// The oldest version with state: versions below it are pruned.
    pub boundary: Version,
    /// The base files `(number, generation)`, oldest first (at least one): index files numbered below the first
    /// are gone, and between the first and the last only these are kept.
    pub bases: Vec<(u64, u32)>,
}

impl PruneManifest {
    fn encode(&self) -> Vec<u8> {
        let mut b = log_header(MAGIC, FORMAT).to_vec();
        let body_at = b.len();
        b.extend_from_slice(&self.boundary.to_le_bytes());
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
    check_log_header(&path, &bytes, MAGIC, FORMAT, "prune manifest")?;
    let bad = |what: &str| Error::corrupt(&path, LOG_HEADER_LEN as u64, what);
    let body = bytes.get(LOG_HEADER_LEN..).unwrap_or_default();
    let n = u32_at(body, 8).ok_or_else(|| bad("prune manifest is cut"))? as usize;
    if n == 0 || n > MAX_BASE_FILES {
        return Err(bad("prune manifest lists no base file, or too many"));
    }
    let len = 12 + 12 * n;
    if body.len() != len + 4 {
        return Err(bad("prune manifest has the wrong length"));
    }
    if u32_at(body, len) != Some(crc(&body[..len])) {
        return Err(bad("prune manifest fails its checksum"));
    }
    let boundary = u64_at(body, 0).ok_or_else(|| bad("prune manifest is cut"))?;
    let mut bases = Vec::with_capacity(n);
    for i in 0..n {
        let at = 12 + 12 * i;
        let no = u64_at(body, at).ok_or_else(|| bad("prune manifest is cut"))?;
        let generation = u32_at(body, at + 8).ok_or_else(|| bad("prune manifest is cut"))?;
        if bases.last().is_some_and(|(last, _)| *last >= no) || generation == 0 {
            return Err(bad("prune manifest lists base files out of order"));
        }
        bases.push((no, generation));
    }
    Ok(Some(PruneManifest { boundary, bases }))
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
}
