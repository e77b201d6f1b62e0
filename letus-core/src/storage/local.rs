//! [`Local`]: the local file system, through `std::fs` (`pread`/`pwrite`, `fdatasync`, directory `fsync`).

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::{EntryKind, FileRef, LockGuard, OpenMode, Storage, StorageFile};

/// The local file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

/// How long [`Storage::lock`] waits for a lock that is held before it reports `WouldBlock`.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

#[derive(Debug)]
struct LocalFile(File);

impl StorageFile for LocalFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Storage for Local {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let mut o = OpenOptions::new();
        o.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                o.write(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
        }
        Ok(Arc::new(LocalFile(o.open(path)?)))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, dir: &Path, name: &str) -> io::Result<LockGuard> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(name))?;
        // A lock can be held for an instant by a process that does not own the store: a child forked by another
        // thread while the previous owner still had the file open keeps a copy of the descriptor until it execs
        // (seen under load, when a store closed and reopened at once by another process found it locked). Such a
        // holder goes away within milliseconds; a real owner (a running node) does not, and is reported.
        let deadline = std::time::Instant::now() + LOCK_PATIENCE;
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(Box::new(lock)),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::from(io::ErrorKind::WouldBlock))
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => Ok(Some(EntryKind::File)),
            Ok(m) if m.is_dir() => Ok(Some(EntryKind::Dir)),
            Ok(_) => Ok(Some(EntryKind::Other)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}
