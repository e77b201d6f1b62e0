//! File helpers shared by every on-disk structure, over the storage seam ([`crate::storage`]): errors carry their path, directories are fsynced after
//! a file is created, renamed or removed (so the name itself is durable), and reads at an offset are `pread`s
//! that many threads can issue at once.

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::{EntryKind, FileRef, LockGuard, OpenMode, Storage, StorageFile};

/// Takes the exclusive lock `name` of `dir` (on the local file system an `flock`ed file, created if missing) for
/// as long as the returned guard lives; `Error::Locked(dir)` when another holder, in this process or another, has it.
pub fn lock_dir(fs: &dyn Storage, dir: &Path, name: &str) -> Result<LockGuard> {
    fs.lock(dir, name).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            Error::Locked(dir.to_path_buf())
        } else {
            Error::io(dir.join(name), e)
        }
    })
}

/// fsyncs a directory so that entries created, renamed or removed in it survive a crash.
pub fn sync_dir(fs: &dyn Storage, dir: &Path) -> Result<()> {
    fs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Opens an existing file read-only.
pub fn open_read(fs: &dyn Storage, path: &Path) -> Result<FileRef> {
    fs.open(path, OpenMode::Read)
        .map_err(|e| Error::io(path, e))
}

/// Creates a new file for writing (fails if it exists).
pub fn create_new(fs: &dyn Storage, path: &Path) -> Result<FileRef> {
    fs.open(path, OpenMode::CreateNew)
        .map_err(|e| Error::io(path, e))
}

/// Opens an existing file for reading and writing.
pub fn open_rw(fs: &dyn Storage, path: &Path) -> Result<FileRef> {
    fs.open(path, OpenMode::ReadWrite)
        .map_err(|e| Error::io(path, e))
}

/// The whole content of `path`; `None` if there is no such file.
pub fn read_if_exists(fs: &dyn Storage, path: &Path) -> Result<Option<Vec<u8>>> {
    match fs.read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Whether `path` names a file.
pub fn is_file(fs: &dyn Storage, path: &Path) -> Result<bool> {
    Ok(fs.kind(path).map_err(|e| Error::io(path, e))? == Some(EntryKind::File))
}

/// Removes file `path`.
pub fn remove_file(fs: &dyn Storage, path: &Path) -> Result<()> {
    fs.remove_file(path).map_err(|e| Error::io(path, e))
}

/// Renames `from` to `to` (replacing it).
pub fn rename(fs: &dyn Storage, from: &Path, to: &Path) -> Result<()> {
    fs.rename(from, to).map_err(|e| Error::io(to, e))
}

/// The names of `dir`'s entries that are valid UTF-8 (the engine names every file in ASCII; others are not ours).
pub fn list(fs: &dyn Storage, dir: &Path) -> Result<Vec<String>> {
    Ok(fs
        .list(dir)
        .map_err(|e| Error::io(dir, e))?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .collect())
}

/// Creates `dir` and its missing ancestors, fsyncing the parent of each one created so that every directory on
/// the way is durable.
pub fn ensure_dir(fs: &dyn Storage, dir: &Path) -> Result<()> {
    let parent_of = |d: &Path| -> std::path::PathBuf {
        match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => Path::new(".").to_path_buf(),
        }
    };
    // The missing directories, deepest first.
    let mut missing = Vec::new();
    let mut d = dir.to_path_buf();
    loop {
        match fs.kind(&d).map_err(|e| Error::io(&d, e))? {
            Some(EntryKind::Dir) => break,
            Some(_) => {
                return Err(Error::io(
                    &d,
                    std::io::Error::new(std::io::ErrorKind::AlreadyExists, "not a directory"),
                ))
            }
            None => {
                let parent = parent_of(&d);
                missing.push(d);
                if parent == Path::new(".") || parent == Path::new("/") {
                    break;
                }
                d = parent;
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs.create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for m in missing.iter().rev() {
        sync_dir(fs, &parent_of(m))?;
    }
    Ok(())
}

/// Writes `bytes` as the whole of file `name` in `dir` so that a crash leaves either the old file (or none) or
/// the complete new one: under `name.tmp` (a stale one is removed first), fsynced, renamed over `name`, and the
/// directory fsynced. Returns the open file, positioned for appends after `bytes`.
pub fn write_whole_file(
    fs: &dyn Storage,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<AppendFile> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    if is_file(fs, &tmp)? {
        remove_file(fs, &tmp)?;
    }
    let file = create_new(fs, &tmp)?;
    file.write_all_at(bytes, 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(&tmp, e))?;
    rename(fs, &tmp, &path)?;
    sync_dir(fs, dir)?;
    Ok(AppendFile {
        file,
        end: bytes.len() as u64,
    })
}

/// A file written only at its end (the engine's small logs): the handle and the length written so far.
#[derive(Debug)]
pub struct AppendFile {
    /// The open file.
    pub file: FileRef,
    /// Where the next append goes.
    pub end: u64,
}

impl AppendFile {
    /// Writes `bytes` at the end (no fsync).
    pub fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all_at(bytes, self.end)?;
        self.end += bytes.len() as u64;
        Ok(())
    }

    /// Truncates to `end` and fsyncs, so that the next append starts there.
    pub fn cut(&mut self, end: u64) -> std::io::Result<()> {
        self.file.set_len(end)?;
        self.file.sync_all()?;
        self.end = end;
        Ok(())
    }
}

/// Reads exactly `buf.len()` bytes at `offset`; a short file is reported as corruption, not as data.
pub fn read_exact_at(
    file: &dyn StorageFile,
    path: &Path,
    buf: &mut [u8],
    offset: u64,
) -> Result<()> {
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
