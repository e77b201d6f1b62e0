//! File helpers shared by every on-disk structure: errors carry their path, directories are fsynced after
//! a file is created, renamed or removed (so the name itself is durable), and reads at an offset are `pread`s
//! that many threads can issue at once.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Takes the exclusive lock file `name` in `dir` (created if missing) for as long as the returned file is open;
/// `Error::Locked(dir)` when another handle, in this process or another, holds it.
pub fn lock_dir(dir: &Path, name: &str) -> Result<File> {
    let path = dir.join(name);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    lock.try_lock()
        .map_err(|_| Error::Locked(dir.to_path_buf()))?;
    Ok(lock)
}

/// fsyncs a directory so that entries created, renamed or removed in it survive a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Opens an existing file read-only.
pub fn open_read(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::io(path, e))
}

/// Creates a new file for writing (fails if it exists).
pub fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

/// Opens an existing file for reading and writing.
pub fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

/// Reads exactly `buf.len()` bytes at `offset`; a short file is reported as corruption, not as data.
pub fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corrupt(
                path,
                offset,
                format!("file ends inside a {}-byte structure", buf.len()),
            )
        } else {
            Error::io(path, e)
        }
    })
}

/// CRC-32C-style checksum used by every on-disk structure (crc32fast: CRC-32/ISO-HDLC).
pub fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The little-endian `u32` at byte `at` of `b`, `None` if `b` is too short: the one reader of fixed-width fields
/// for every on-disk structure (decoders never index past what they were given).
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

/// The little-endian `u64` at byte `at` of `b`, `None` if `b` is too short.
pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

/// Length of the header of the engine's small logs (roots log, tombstone log, history base).
pub const LOG_HEADER_LEN: usize = 16;

/// The header of a small log: `magic[8] | u32 format | u32 crc32(magic || format)`.
pub fn log_header(magic: &[u8; 8], format: u32) -> [u8; LOG_HEADER_LEN] {
    let mut h = [0u8; LOG_HEADER_LEN];
    h[..8].copy_from_slice(magic);
    h[8..12].copy_from_slice(&format.to_le_bytes());
    let c = crc(&h[..12]);
    h[12..].copy_from_slice(&c.to_le_bytes());
    h
}

/// Checks the header at the start of `bytes` (the whole file `path`, a `what`): magic, checksum, then format
/// (a format this build does not know is [`Error::UnsupportedFormat`], not corruption).
pub fn check_log_header(
    path: &Path,
    bytes: &[u8],
    magic: &[u8; 8],
    format: u32,
    what: &str,
) -> Result<()> {
    let h = bytes
        .get(..LOG_HEADER_LEN)
        .ok_or_else(|| Error::corrupt(path, 0, format!("{what} header is cut")))?;
    if &h[..8] != magic {
        return Err(Error::corrupt(path, 0, format!("not a {what} (bad magic)")));
    }
    let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    if word(12) != crc(&h[..12]) {
        return Err(Error::corrupt(path, 0, format!("{what} header checksum")));
    }
    if word(8) != format {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: word(8),
        });
    }
    Ok(())
}
