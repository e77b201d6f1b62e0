//! The prune manifest (`pruned`): where a pruned store's history of pages begins.
//!
//! A prune at boundary `B` (FORMAT.md §2.9) replaces the index files `1..=k` (every record of a version `<= B`) by
//! one **base file** `k.G.idx` holding, for every page reachable at `B`, its newest record at or below `B` under
//! the same key (a DeltaPage rewritten onto a BasePage of its own first version). This file names that base file
//! and the boundary; it is the prune's commit point. Versions below `B` answer [`crate::Error::Pruned`].
//!
//! ## Format (40 bytes)
//! ```text
//! header (16 bytes): magic "LETUSPRN" | u32 format = 1 | u32 crc32(magic || format)
//! body: u64 boundary | u64 base file number | u32 base file generation | u32 crc32(body before)
//! ```
//! Written whole under a temporary name, fsynced, renamed over the old one, directory fsynced
//! ([`fsutil::write_whole_file`]): a crash leaves the old manifest (or none) or the new one.

use std::path::Path;

use letus_verify::Version;

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, u64_at, LOG_HEADER_LEN};
use crate::storage::Storage;

const MAGIC: &[u8; 8] = b"LETUSPRN";
const FORMAT: u32 = 1;
const BODY_LEN: usize = 20;
/// The manifest's name in the store's directory.
pub const FILE_NAME: &str = "pruned";

/// What the manifest says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PruneManifest {
    /// The oldest version with state: versions below it are pruned.
    pub boundary: Version,
    /// The base file's number: index files numbered below it are gone (or leftovers of the prune to delete).
    pub base_no: u64,
    /// The base file's generation (`NNNNNN.G.idx`, G above the generation of the file it replaced).
    pub base_generation: u32,
}

impl PruneManifest {
    fn encode(&self) -> Vec<u8> {
        let mut b = log_header(MAGIC, FORMAT).to_vec();
        let body_at = b.len();
        b.extend_from_slice(&self.boundary.to_le_bytes());
        b.extend_from_slice(&self.base_no.to_le_bytes());
        b.extend_from_slice(&self.base_generation.to_le_bytes());
        let c = crc(&b[body_at..]);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }
}

/// Reads the manifest of the store in `dir`; `None` for a store never pruned.
pub fn read(fs: &dyn Storage, dir: &Path) -> Result<Option<PruneManifest>> {
    let path = dir.join(FILE_NAME);
    let Some(bytes) = fsutil::read_if_exists(fs, &path)? else {
        return Ok(None);
    };
    check_log_header(&path, &bytes, MAGIC, FORMAT, "prune manifest")?;
    let body = bytes
        .get(LOG_HEADER_LEN..)
        .filter(|b| b.len() == BODY_LEN + 4)
        .ok_or_else(|| {
            Error::corrupt(
                &path,
                LOG_HEADER_LEN as u64,
                "prune manifest has the wrong length",
            )
        })?;
    if u32_at(body, BODY_LEN) != Some(crc(&body[..BODY_LEN])) {
        return Err(Error::corrupt(
            &path,
            LOG_HEADER_LEN as u64,
            "prune manifest fails its checksum",
        ));
    }
    let field = |at| {
        u64_at(body, at).ok_or_else(|| Error::corrupt(&path, at as u64, "prune manifest is cut"))
    };
    Ok(Some(PruneManifest {
        boundary: field(0)?,
        base_no: field(8)?,
        base_generation: u32_at(body, 16)
            .ok_or_else(|| Error::corrupt(&path, 16, "prune manifest is cut"))?,
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
            base_no: 5,
            base_generation: 2,
        };
        write(&*fs, dir.path(), &m).unwrap();
        assert_eq!(read(&*fs, dir.path()).unwrap(), Some(m));
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
