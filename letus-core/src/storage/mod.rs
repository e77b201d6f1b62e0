//! The storage seam: every byte the engine reads or writes goes through a [`Storage`] and the [`StorageFile`]s it
//! opens, so that the same engine runs on local files ([`Local`], the default), under injected faults
//! ([`faulty::Faulty`]), in memory for fuzzing ([`Memory`]) and, later, on other backends.
//!
//! The trait is what the engine's on-disk structures need and nothing more: positional reads and writes, a sync
//! that makes a file's written bytes and length durable, truncation, and the directory operations of a
//! write-ahead layout (create, list, rename, remove, and a directory sync that makes those names durable). The
//! crash argument of `FORMAT.md` is stated in these terms: a byte is durable once `sync_data` of its file returned,
//! a name once `sync_dir` of its directory returned, and nothing else is assumed to survive a crash.
//!
//! Paths are whole paths (the store directory joined with a file's name); a backend that is not a file system maps
//! them to its own names. The exclusive lock of a store directory is part of the seam ([`Storage::lock`]): an
//! `flock` on the local file system; another backend fences a second writer its own way.

pub mod faulty;
mod local;
mod memory;
#[cfg(feature = "s3")]
pub mod s3;
pub mod tiered;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

pub use local::Local;
pub use memory::Memory;

/// How [`Storage::open`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenMode {
    /// An existing file, read only.
    Read,
    /// An existing file, for reading and writing.
    ReadWrite,
    /// A new file for reading and writing; fails with `AlreadyExists` if the name is taken.
    CreateNew,
}

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A file.
    File,
    /// A directory.
    Dir,
    /// Something else (a socket, a device, ...): never a store's file.
    Other,
}

/// One open file. Every method may be called from many threads at once (reads are `pread`s).
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Fills `buf` from byte `offset`; a file that ends first is `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte `offset` (extending the file if needed). Not durable until
    /// [`StorageFile::sync_data`] returns.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every byte written so far, and the file's length, durable.
    fn sync_data(&self) -> io::Result<()>;
    /// [`StorageFile::sync_data`] and the file's other metadata.
    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
    /// Truncates or extends the file to `len` bytes (durable after the next sync).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The file's current length in bytes.
    fn size(&self) -> io::Result<u64>;
}

/// A backend: opens files and handles the names in directories.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens `path` as `mode` says.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef>;
    /// Removes file `path` (durable after [`Storage::sync_dir`] of its directory).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames file `from` to `to`, replacing `to` atomically if it exists (durable after [`Storage::sync_dir`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// The names of the entries of directory `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the names created, renamed or removed in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// What `path` names, `None` if nothing.
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>>;
    /// Takes the exclusive lock `name` of directory `dir` for as long as the guard lives: one writer per store.
    /// `WouldBlock` when another holder has it.
    fn lock(&self, dir: &Path, name: &str) -> io::Result<LockGuard>;

    /// The whole content of file `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open(path, OpenMode::Read)?;
        let len = usize::try_from(f.size()?).map_err(|_| {
            io::Error::new(io::ErrorKind::OutOfMemory, "file too large to read whole")
        })?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// Holds a lock of [`Storage::lock`] until dropped.
pub type LockGuard = Box<dyn fmt::Debug + Send + Sync>;

/// An open file, shared by the threads that read it.
pub type FileRef = Arc<dyn StorageFile>;

/// A backend, shared by every part of a store.
pub type SharedStorage = Arc<dyn Storage>;

/// The default backend: the local file system.
pub fn local() -> SharedStorage {
    Arc::new(Local)
}

/// A [`StorageFile`] read front to back through `std::io::Read` (and `Seek`), for decoders that scan a file
/// sequentially; wrap it in a `BufReader`. The length is taken when it is made: bytes appended later are not seen.
#[derive(Debug)]
pub struct SeqReader<'a> {
    file: &'a dyn StorageFile,
    pos: u64,
    len: u64,
}

impl<'a> SeqReader<'a> {
    /// A reader at the start of `file`.
    pub fn new(file: &'a dyn StorageFile) -> io::Result<Self> {
        Ok(SeqReader {
            file,
            pos: 0,
            len: file.size()?,
        })
    }
}

impl io::Read for SeqReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = usize::try_from(self.len.saturating_sub(self.pos))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        self.file.read_exact_at(&mut buf[..n], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Seek for SeqReader<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let base = match to {
            io::SeekFrom::Start(p) => Some(p),
            io::SeekFrom::End(d) => self.len.checked_add_signed(d),
            io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = base
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}
