//! [`Memory`]: files held in memory. For fuzzing decoders at the speed of the decoder rather than of the file
//! system (the fuzz targets in `fuzz/`), and for tests that need many short-lived stores. Nothing is durable:
//! dropping the last handle to a `Memory` loses it, and syncs do nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::{EntryKind, FileRef, LockGuard, OpenMode, Storage, StorageFile};

type Bytes = Arc<RwLock<Vec<u8>>>;

#[derive(Debug, Default)]
struct Tree {
    files: BTreeMap<PathBuf, Bytes>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
}

/// A held lock of a [`Memory`]: released when dropped.
#[derive(Debug)]
struct MemoryLock {
    tree: Arc<Mutex<Tree>>,
    path: PathBuf,
}

impl Drop for MemoryLock {
    fn drop(&mut self) {
        let mut t = self
            .tree
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        t.locks.remove(&self.path);
    }
}

/// A file system in memory. `Clone` shares it.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    tree: Arc<Mutex<Tree>>,
}

impl Memory {
    /// An empty file system (the root directory exists; others are made by `create_dir_all`).
    pub fn new() -> Self {
        Memory::default()
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `bytes` as the whole content of `path` (creating it and its directories): how a fuzz target puts
    /// its input where a decoder will find it.
    pub fn put(&self, path: &Path, bytes: &[u8]) {
        let mut t = self.tree();
        for a in path.ancestors().skip(1) {
            t.dirs.insert(a.to_path_buf());
        }
        t.files
            .insert(path.to_path_buf(), Arc::new(RwLock::new(bytes.to_vec())));
    }
}

#[derive(Debug)]
struct MemoryFile {
    bytes: Bytes,
    writable: bool,
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "file opened read-only")
}

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::OutOfMemory, "in-memory file too large")
}

impl StorageFile for MemoryFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let b = self
            .bytes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = usize::try_from(offset).map_err(|_| too_large())?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| b.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(read_only());
        }
        let mut b = self
            .bytes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = usize::try_from(offset).map_err(|_| too_large())?;
        let end = start.checked_add(buf.len()).ok_or_else(too_large)?;
        if b.len() < end {
            b.resize(end, 0);
        }
        b[start..end].copy_from_slice(buf);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(read_only());
        }
        let len = usize::try_from(len).map_err(|_| too_large())?;
        self.bytes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .resize(len, 0);
        Ok(())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self
            .bytes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len() as u64)
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

fn parent_exists(t: &Tree, path: &Path) -> bool {
    match path.parent() {
        None => true,
        Some(p) if p.as_os_str().is_empty() => true,
        Some(p) => t.dirs.contains(p) || p.parent().is_none(),
    }
}

impl Storage for Memory {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let mut t = self.tree();
        let bytes = match mode {
            OpenMode::CreateNew => {
                if t.files.contains_key(path) || t.dirs.contains(path) {
                    return Err(io::Error::from(io::ErrorKind::AlreadyExists));
                }
                if !parent_exists(&t, path) {
                    return Err(not_found());
                }
                let b = Bytes::default();
                t.files.insert(path.to_path_buf(), b.clone());
                b
            }
            _ => t.files.get(path).cloned().ok_or_else(not_found)?,
        };
        Ok(Arc::new(MemoryFile {
            bytes,
            writable: mode != OpenMode::Read,
        }))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.tree()
            .files
            .remove(path)
            .map(drop)
            .ok_or_else(not_found)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut t = self.tree();
        let b = t.files.remove(from).ok_or_else(not_found)?;
        t.files.insert(to.to_path_buf(), b);
        Ok(())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let t = self.tree();
        if !t.dirs.contains(dir) && dir.parent().is_some() {
            return Err(not_found());
        }
        let children = t.files.keys().chain(t.dirs.iter());
        Ok(children
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_os_string()))
            .collect())
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut t = self.tree();
        for a in dir.ancestors() {
            if t.files.contains_key(a) {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            t.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let t = self.tree();
        if t.dirs.contains(dir) || dir.parent().is_none() || dir.as_os_str() == "." {
            Ok(())
        } else {
            Err(not_found())
        }
    }
    fn lock(&self, dir: &Path, name: &str) -> io::Result<LockGuard> {
        let path = dir.join(name);
        if !self.tree().locks.insert(path.clone()) {
            return Err(io::Error::from(io::ErrorKind::WouldBlock));
        }
        Ok(Box::new(MemoryLock {
            tree: self.tree.clone(),
            path,
        }))
    }
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        let t = self.tree();
        Ok(if t.files.contains_key(path) {
            Some(EntryKind::File)
        } else if t.dirs.contains(path) {
            Some(EntryKind::Dir)
        } else {
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directories_behave_like_a_file_system() {
        let m = Memory::new();
        let d = Path::new("/s/lsvps");
        assert!(m.open(&d.join("a"), OpenMode::CreateNew).is_err());
        m.create_dir_all(d).unwrap();
        let f = m.open(&d.join("a"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"hello", 2).unwrap();
        assert_eq!(m.read(&d.join("a")).unwrap(), b"\0\0hello");
        assert!(m.open(&d.join("a"), OpenMode::CreateNew).is_err());
        let r = m.open(&d.join("a"), OpenMode::Read).unwrap();
        assert!(r.write_all_at(b"x", 0).is_err());
        let mut buf = [0u8; 4];
        assert_eq!(
            r.read_exact_at(&mut buf, 5).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        m.rename(&d.join("a"), &d.join("b")).unwrap();
        assert_eq!(m.list(d).unwrap(), vec![OsString::from("b")]);
        assert_eq!(
            m.list(Path::new("/s")).unwrap(),
            vec![OsString::from("lsvps")]
        );
        f.set_len(1).unwrap();
        assert_eq!(m.read(&d.join("b")).unwrap(), b"\0");
        m.remove_file(&d.join("b")).unwrap();
        assert_eq!(m.kind(&d.join("b")).unwrap(), None);
        assert_eq!(m.kind(d).unwrap(), Some(EntryKind::Dir));
        let held = m.lock(d, "LOCK").unwrap();
        assert_eq!(
            m.lock(d, "LOCK").unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(held);
        m.lock(d, "LOCK").unwrap();
    }
}
