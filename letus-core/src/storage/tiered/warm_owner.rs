//! The owner of a warm directory (`letus-warm.owner` in it): the hot root of the one store whose files it holds.
//!
//! Moved files keep their names (`state/lsvps/000007.idx` is the same name in every store), and recovery deletes
//! every file of the warm directory its own manifest does not name: two stores sharing a warm directory would
//! delete, or silently read, each other's files. So a warm directory is claimed by the first store that opens it
//! and refused to any other; while a store is open it also holds the directory's lock (`letus-warm.lock`), so two
//! stores opening it at once cannot both claim it.
//!
//! ## Format (version 1)
//!
//! ```text
//! magic "LETUSWOW" | u32 format = 1 | u32 crc32(magic || format)        the small-log header (FORMAT.md)
//! u32 len | len bytes: the canonical path of the owner's hot root (the platform's encoding)
//! u32 crc32 of everything before it
//! ```
//!
//! Written whole (`fsutil::write_whole_file`: temporary name, fsync, rename, directory fsync) before the store
//! moves anything there, so a crash leaves no owner (nothing of this store is in the directory yet) or this one.

use std::io;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsutil::{self, check_log_header, crc, log_header, u32_at, LOG_HEADER_LEN};
use crate::storage::{LockGuard, Storage};

/// The owner file's name in the warm directory.
pub const OWNER_NAME: &str = "letus-warm.owner";
/// The lock a store holds on its warm directory while it is open.
pub const LOCK_NAME: &str = "letus-warm.lock";
const MAGIC: &[u8; 8] = b"LETUSWOW";
const FORMAT: u32 = 1;
/// The longest owner path read back (a path is far shorter; a longer length is damage).
const MAX_PATH: usize = 64 << 10;

fn encode(owner: &[u8]) -> Vec<u8> {
    let mut b = log_header(MAGIC, FORMAT).to_vec();
    b.extend_from_slice(&(owner.len() as u32).to_le_bytes());
    b.extend_from_slice(owner);
    let c = crc(&b);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

fn decode(path: &Path, b: &[u8]) -> Result<Vec<u8>> {
    check_log_header(path, b, MAGIC, FORMAT, "warm directory owner")?;
    let corrupt = |why: &str| Error::corrupt(path, 0, why.to_string());
    let len =
        u32_at(b, LOG_HEADER_LEN).ok_or_else(|| corrupt("the owner's length is cut"))? as usize;
    if len > MAX_PATH {
        return Err(corrupt("the owner's length is not a path's"));
    }
    let start = LOG_HEADER_LEN + 4;
    let end = start + len;
    if b.len() != end + 4 {
        return Err(corrupt("the owner file's length does not match its path's"));
    }
    if u32_at(b, end) != Some(crc(&b[..end])) {
        return Err(corrupt("the owner file's checksum"));
    }
    Ok(b[start..end].to_vec())
}

/// Locks the warm directory `dir` for the store whose hot root is `root`, and claims it if no store did: the
/// guard is held for the store's life. A directory another store owns, or one another store has open, is refused.
pub fn claim(warm: &dyn Storage, dir: &Path, root: &Path) -> Result<LockGuard> {
    let lock = fsutil::lock_dir(warm, dir, LOCK_NAME)?;
    let me = super::canonical(root).into_os_string().into_encoded_bytes();
    let path = dir.join(OWNER_NAME);
    match fsutil::read_if_exists(warm, &path)? {
        Some(b) => {
            let owner = decode(&path, &b)?;
            if owner != me {
                return Err(Error::io(
                    dir,
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "the warm directory holds the files of the store at {} (named in {OWNER_NAME}); give \
                             each store its own warm directory, or remove {OWNER_NAME} if that store and its \
                             files are gone",
                            String::from_utf8_lossy(&owner)
                        ),
                    ),
                ));
            }
        }
        None => {
            fsutil::write_whole_file(warm, dir, OWNER_NAME, &encode(&me))?;
        }
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_round_trips_and_damage_is_refused() {
        let p = Path::new("owner");
        let b = encode(b"/data/a");
        assert_eq!(decode(p, &b).unwrap(), b"/data/a");
        for cut in 0..b.len() {
            assert!(decode(p, &b[..cut]).is_err(), "cut {cut}");
        }
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 1;
            assert!(decode(p, &d).is_err(), "flip {i}");
        }
    }

    #[test]
    fn a_warm_directory_serves_one_store() {
        let d = tempfile::tempdir().unwrap();
        let warm = d.path().join("warm");
        std::fs::create_dir_all(&warm).unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        let fs = crate::storage::Local;
        let lock = claim(&fs, &warm, &a).unwrap();
        // Held by a: b cannot even look.
        assert!(matches!(claim(&fs, &warm, &b), Err(Error::Locked(_))));
        drop(lock);
        // Owned by a: b is refused, a opens again.
        let e = claim(&fs, &warm, &b).err().unwrap().to_string();
        assert!(e.contains("give each store its own warm directory"), "{e}");
        drop(claim(&fs, &warm, &a).unwrap());
    }
}
