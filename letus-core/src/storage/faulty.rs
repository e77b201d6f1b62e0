//! [`Faulty`]: a backend that injects I/O failures and power cuts into another one, for tests (the models are
//! redb's and SQLite's I/O-failure tests).
//!
//! A fault is armed with a countdown of operations of its class ([`Faulty::arm`]); the operation that reaches
//! zero fails:
//! - [`Fault::NoSpace`]: that write lands a prefix of its bytes (a torn write) and fails with `ENOSPC`; from then
//!   on every write that would grow a file, every extension and every file creation fails the same way, until
//!   [`Faulty::heal`] (space returns);
//! - [`Fault::WriteError`]: that write lands a prefix and fails with `EIO` (once);
//! - [`Fault::ReadError`]: that read fails with `EIO` (once);
//! - [`Fault::SyncError`]: that `fsync` fails with `EIO` and makes nothing durable (once; the kernel may have
//!   dropped the dirty pages, so the writes it covered stay exposed to the next crash);
//! - [`Fault::PowerCut`]: that mutation and every operation after it fail with `EIO` until [`Faulty::crash`].
//!
//! [`Faulty::crash`] simulates losing power at that moment. Only what the seam promises survives (see
//! [`super`]): a write not covered by a later `sync_data` of its file is kept, lost, or torn (a prefix kept),
//! independently of the others, so writes reach the disk in any order; a creation, rename or removal not covered
//! by a later `sync_dir` of its directory is undone or kept. The choices come from a seed, so a failing schedule
//! can be replayed.
//!
//! To undo, every write first saves the bytes it overwrites, and a removal or a replacing rename saves the file:
//! this is a test tool for small stores, not a production layer.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{EntryKind, FileRef, LockGuard, OpenMode, SharedStorage, Storage, StorageFile};

/// The kind of failure [`Faulty::arm`] injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// The disk is full: `ENOSPC` on writes that grow a file and on creations, until [`Faulty::heal`].
    NoSpace,
    /// One write fails with `EIO` after landing a prefix.
    WriteError,
    /// One read fails with `EIO`.
    ReadError,
    /// One `fsync` (of a file or a directory) fails with `EIO`.
    SyncError,
    /// Power is lost: every operation fails with `EIO` until [`Faulty::crash`].
    PowerCut,
}

impl Fault {
    /// Every kind, for schedules that try them all.
    pub const ALL: [Fault; 5] = [
        Fault::NoSpace,
        Fault::WriteError,
        Fault::ReadError,
        Fault::SyncError,
        Fault::PowerCut,
    ];

    fn class(self) -> Class {
        match self {
            Fault::NoSpace | Fault::WriteError => Class::Write,
            Fault::ReadError => Class::Read,
            Fault::SyncError => Class::Sync,
            Fault::PowerCut => Class::Mutation,
        }
    }
}

/// Which operations a countdown counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Read,
    Write,
    Sync,
    /// Writes, truncations, syncs and directory changes.
    Mutation,
}

/// Operations seen since the last [`Faulty::arm`] or [`Faulty::reset_counts`], by class: what a schedule uses to
/// pick a countdown that lands inside a workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// `read_exact_at` calls.
    pub reads: u64,
    /// `write_all_at` calls.
    pub writes: u64,
    /// `sync_data`, `sync_all` and `sync_dir` calls.
    pub syncs: u64,
    /// Writes, truncations, syncs, creations, renames and removals.
    pub mutations: u64,
}

impl OpCounts {
    /// The count of the class `fault` counts.
    pub fn of(&self, fault: Fault) -> u64 {
        match fault.class() {
            Class::Read => self.reads,
            Class::Write => self.writes,
            Class::Sync => self.syncs,
            Class::Mutation => self.mutations,
        }
    }
}

/// How one unsynced write or truncation is undone.
#[derive(Debug)]
enum Undo {
    /// A write of `len` bytes at `offset` over `old` (the bytes it replaced below the old size `old_size`).
    Write {
        offset: u64,
        len: u64,
        old: Vec<u8>,
        old_size: u64,
    },
    /// `set_len` from `old_size`; `cut` holds the bytes a shrink removed.
    SetLen { old_size: u64, cut: Vec<u8> },
}

/// A change of names not yet covered by a `sync_dir`.
#[derive(Debug)]
enum NameOp {
    Create {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<Vec<u8>>,
    },
    Remove {
        path: PathBuf,
        content: Vec<u8>,
    },
}

#[derive(Debug, Default)]
struct State {
    armed: Option<(Fault, u64)>,
    /// `NoSpace` in force.
    full: bool,
    /// Power cut: everything fails until `crash`.
    dead: bool,
    counts: OpCounts,
    /// Faults that fired since the last `crash` or `heal`.
    fired: u64,
    /// Each file's identity by its current name (a rename moves it; handles keep their identity).
    ids: HashMap<PathBuf, u64>,
    next_id: u64,
    /// Unsynced writes and truncations of each file, oldest first, by identity.
    journals: HashMap<u64, Vec<Undo>>,
    /// Unsynced name changes, oldest first, with the directory a `sync_dir` of which makes them durable.
    names: Vec<(PathBuf, NameOp)>,
    rng: u64,
}

impl State {
    fn rand(&mut self) -> u64 {
        // splitmix64: the choices only need to be reproducible from the seed.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Counts one operation of `class` and says whether the armed fault fires on it.
    fn tick(&mut self, class: Class) -> Option<Fault> {
        match class {
            Class::Read => self.counts.reads += 1,
            Class::Write => self.counts.writes += 1,
            Class::Sync => self.counts.syncs += 1,
            Class::Mutation => {}
        }
        if class != Class::Read {
            self.counts.mutations += 1;
        }
        let (fault, left) = self.armed?;
        let counts =
            fault.class() == class || (fault.class() == Class::Mutation && class != Class::Read);
        if !counts {
            return None;
        }
        if left == 0 {
            self.armed = None;
            self.fired += 1;
            Some(fault)
        } else {
            self.armed = Some((fault, left - 1));
            None
        }
    }
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected I/O error ({what})"))
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn dead() -> io::Error {
    io::Error::other("injected power cut: the device is gone")
}

/// Wraps a backend and injects faults into it (see the module documentation).
#[derive(Clone, Debug)]
pub struct Faulty {
    inner: SharedStorage,
    state: Arc<Mutex<State>>,
}

impl Faulty {
    /// Wraps `inner`; `seed` drives every random choice (torn lengths, what a crash keeps).
    pub fn new(inner: SharedStorage, seed: u64) -> Self {
        Faulty {
            inner,
            state: Arc::new(Mutex::new(State {
                rng: seed,
                ..State::default()
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Arms `fault` to fire on the operation of its class after `after` more of them (0: the next one), and resets
    /// the counts.
    pub fn arm(&self, fault: Fault, after: u64) {
        let mut s = self.state();
        s.armed = Some((fault, after));
        s.counts = OpCounts::default();
    }

    /// Operations counted since the last [`Faulty::arm`] or [`Faulty::reset_counts`].
    pub fn counts(&self) -> OpCounts {
        self.state().counts
    }

    /// Sets the counts to zero.
    pub fn reset_counts(&self) {
        self.state().counts = OpCounts::default();
    }

    /// How many faults fired since the last [`Faulty::heal`] or [`Faulty::crash`].
    pub fn fired(&self) -> u64 {
        self.state().fired
    }

    /// Whether a power cut is in force.
    pub fn is_dead(&self) -> bool {
        self.state().dead
    }

    /// Space returns and an armed fault is disarmed; unsynced writes stay unsynced.
    pub fn heal(&self) {
        let mut s = self.state();
        s.full = false;
        s.armed = None;
        s.fired = 0;
    }

    /// Loses power now: unsynced writes and name changes are each kept, lost or torn (see the module
    /// documentation); then the device works again, with no fault armed. Every handle opened before must be
    /// dropped first (what a process would lose with its memory).
    pub fn crash(&self) -> io::Result<()> {
        let mut s = self.state();
        let mut journals = std::mem::take(&mut s.journals);
        let mut files: Vec<(PathBuf, Vec<Undo>)> = s
            .ids
            .iter()
            .filter_map(|(path, id)| Some((path.clone(), journals.remove(id)?)))
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, undos) in files {
            let Ok(f) = self.inner.open(&path, OpenMode::ReadWrite) else {
                continue;
            };
            for u in undos.into_iter().rev() {
                match s.rand() % 3 {
                    0 => continue, // reached the disk
                    1 => undo(&*f, &u, None)?,
                    _ => {
                        let keep = match &u {
                            Undo::Write { len, .. } if *len > 0 => s.rand() % len,
                            _ => 0,
                        };
                        undo(&*f, &u, Some(keep))?;
                    }
                }
            }
        }
        let names = std::mem::take(&mut s.names);
        for (_, op) in names.into_iter().rev() {
            if s.rand().is_multiple_of(2) {
                continue;
            }
            match op {
                NameOp::Create { path } => {
                    let _ = self.inner.remove_file(&path);
                }
                NameOp::Rename { from, to, replaced } => {
                    if self.inner.rename(&to, &from).is_ok() {
                        if let Some(bytes) = replaced {
                            let f = self.inner.open(&to, OpenMode::CreateNew)?;
                            f.write_all_at(&bytes, 0)?;
                        }
                    }
                }
                NameOp::Remove { path, content } => {
                    if let Ok(f) = self.inner.open(&path, OpenMode::CreateNew) {
                        f.write_all_at(&content, 0)?;
                    }
                }
            }
        }
        s.dead = false;
        s.full = false;
        s.armed = None;
        s.fired = 0;
        Ok(())
    }

    /// The shared handle the engine takes ([`crate::Options::storage`]).
    pub fn shared(&self) -> SharedStorage {
        Arc::new(self.clone())
    }

    /// Runs the checks of a mutation: a power cut, an armed fault of `class`. `Ok(Some(fault))` when it fires
    /// now and the caller must fail in its own way (torn writes land their prefix first).
    fn gate(&self, s: &mut State, class: Class) -> io::Result<Option<Fault>> {
        if s.dead {
            return Err(dead());
        }
        let fired = s.tick(class);
        if fired == Some(Fault::PowerCut) {
            s.dead = true;
            return Err(dead());
        }
        Ok(fired)
    }
}

/// Undoes `u` on `f`; with `Some(keep)` the first `keep` bytes of a write stay (a torn write).
fn undo(f: &dyn StorageFile, u: &Undo, keep: Option<u64>) -> io::Result<()> {
    match u {
        Undo::Write {
            offset,
            len,
            old,
            old_size,
        } => {
            let keep = keep.unwrap_or(0).min(*len);
            let from = offset + keep;
            let end = offset + len;
            // Below the old size the old bytes come back.
            let old_end = (*offset + old.len() as u64).min(end);
            if from < old_end {
                f.write_all_at(
                    &old[(from - offset) as usize..(old_end - offset) as usize],
                    from,
                )?;
            }
            // Beyond it the write never reached the disk: cut the file if it was the tail, zeros otherwise
            // (a later write that did reach the disk keeps the length).
            let grow_from = from.max(*old_size);
            if grow_from < end {
                let size = f.size()?;
                if size <= end {
                    f.set_len(grow_from.min(size))?;
                } else {
                    f.write_all_at(&vec![0u8; (end - grow_from) as usize], grow_from)?;
                }
            }
            Ok(())
        }
        Undo::SetLen { old_size, cut } => {
            let size = f.size()?;
            if cut.is_empty() {
                if size > *old_size {
                    f.set_len(*old_size)?;
                }
            } else {
                f.write_all_at(cut, *old_size - cut.len() as u64)?;
            }
            Ok(())
        }
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// A file of a [`Faulty`] backend.
#[derive(Debug)]
struct FaultyFile {
    /// The file's identity in [`State::ids`].
    id: u64,
    inner: FileRef,
    fs: Faulty,
}

impl StorageFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.fs.state();
        if s.dead {
            return Err(dead());
        }
        if s.tick(Class::Read) == Some(Fault::ReadError) {
            return Err(eio("read"));
        }
        drop(s);
        self.inner.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.fs.state();
        let fired = self.fs.gate(&mut s, Class::Write)?;
        let size = self.inner.size()?;
        let grows = offset + buf.len() as u64 > size;
        let fail = match fired {
            Some(Fault::NoSpace) => {
                s.full = true;
                Some(enospc())
            }
            Some(Fault::WriteError) => Some(eio("write")),
            _ if s.full && grows => Some(enospc()),
            _ => None,
        };
        // A failing write may land a prefix (what a short write followed by an error leaves).
        let land = match &fail {
            Some(_) if buf.is_empty() => 0,
            Some(_) => (s.rand() % (buf.len() as u64 + 1)) as usize,
            None => buf.len(),
        };
        if land > 0 {
            let old_end = (offset + land as u64).min(size);
            let mut old = vec![0u8; old_end.saturating_sub(offset) as usize];
            if !old.is_empty() {
                self.inner.read_exact_at(&mut old, offset)?;
            }
            s.journals.entry(self.id).or_default().push(Undo::Write {
                offset,
                len: land as u64,
                old,
                old_size: size,
            });
            self.inner.write_all_at(&buf[..land], offset)?;
        }
        match fail {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.fs.state();
        if self.fs.gate(&mut s, Class::Sync)? == Some(Fault::SyncError) {
            return Err(eio("fsync"));
        }
        self.inner.sync_data()?;
        s.journals.remove(&self.id);
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        let mut s = self.fs.state();
        if self.fs.gate(&mut s, Class::Sync)? == Some(Fault::SyncError) {
            return Err(eio("fsync"));
        }
        self.inner.sync_all()?;
        s.journals.remove(&self.id);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.fs.state();
        self.fs.gate(&mut s, Class::Mutation)?;
        let size = self.inner.size()?;
        if len > size && s.full {
            return Err(enospc());
        }
        let mut cut = vec![0u8; size.saturating_sub(len) as usize];
        if !cut.is_empty() {
            self.inner.read_exact_at(&mut cut, len)?;
        }
        s.journals.entry(self.id).or_default().push(Undo::SetLen {
            old_size: size,
            cut,
        });
        self.inner.set_len(len)
    }

    fn size(&self) -> io::Result<u64> {
        if self.fs.state().dead {
            return Err(dead());
        }
        self.inner.size()
    }
}

impl Storage for Faulty {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let mut s = self.state();
        if mode == OpenMode::CreateNew {
            self.gate(&mut s, Class::Mutation)?;
            if s.full {
                return Err(enospc());
            }
        } else if s.dead {
            return Err(dead());
        }
        let inner = self.inner.open(path, mode)?;
        if mode == OpenMode::CreateNew {
            s.names.push((
                parent(path),
                NameOp::Create {
                    path: path.to_path_buf(),
                },
            ));
        }
        let id = match s.ids.get(path) {
            Some(&id) => id,
            None => {
                s.next_id += 1;
                let id = s.next_id;
                s.ids.insert(path.to_path_buf(), id);
                id
            }
        };
        Ok(Arc::new(FaultyFile {
            id,
            inner,
            fs: self.clone(),
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state();
        self.gate(&mut s, Class::Mutation)?;
        let content = self.inner.read(path)?;
        self.inner.remove_file(path)?;
        if let Some(id) = s.ids.remove(path) {
            s.journals.remove(&id);
        }
        s.names.push((
            parent(path),
            NameOp::Remove {
                path: path.to_path_buf(),
                content,
            },
        ));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state();
        self.gate(&mut s, Class::Mutation)?;
        let replaced = match self.inner.kind(to)? {
            Some(EntryKind::File) => Some(self.inner.read(to)?),
            _ => None,
        };
        self.inner.rename(from, to)?;
        if let Some(id) = s.ids.remove(to) {
            s.journals.remove(&id);
        }
        if let Some(id) = s.ids.remove(from) {
            s.ids.insert(to.to_path_buf(), id);
        }
        s.names.push((
            parent(to),
            NameOp::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
                replaced,
            },
        ));
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        if self.state().dead {
            return Err(dead());
        }
        self.inner.list(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state();
        self.gate(&mut s, Class::Mutation)?;
        self.inner.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state();
        if self.gate(&mut s, Class::Sync)? == Some(Fault::SyncError) {
            return Err(eio("directory fsync"));
        }
        self.inner.sync_dir(dir)?;
        s.names.retain(|(d, _)| d != dir);
        Ok(())
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        if self.state().dead {
            return Err(dead());
        }
        self.inner.kind(path)
    }

    fn lock(&self, dir: &Path, name: &str) -> io::Result<LockGuard> {
        // A lock is the process's, not the disk's: no fault, and it is released when its holder is dropped.
        self.inner.lock(dir, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Faulty) {
        let dir = tempfile::tempdir().unwrap();
        (dir, Faulty::new(super::super::local(), 7))
    }

    #[test]
    fn synced_bytes_survive_a_crash_and_unsynced_ones_may_not() {
        let (dir, fs) = setup();
        let p = dir.path().join("f");
        let f = fs.open(&p, OpenMode::CreateNew).unwrap();
        f.write_all_at(b"durable", 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(dir.path()).unwrap();
        drop(f);
        let mut outcomes = std::collections::HashSet::new();
        for _ in 0..40 {
            let f = fs.open(&p, OpenMode::ReadWrite).unwrap();
            f.write_all_at(b"-maybe", 7).unwrap();
            drop(f);
            fs.crash().unwrap();
            let f = fs.open(&p, OpenMode::ReadWrite).unwrap();
            let got = fs.read(&p).unwrap();
            assert!(got.starts_with(b"durable"), "{got:?}");
            assert!(b"durable-maybe".starts_with(&got), "{got:?}");
            outcomes.insert(got.len());
            f.set_len(7).unwrap();
            f.sync_data().unwrap();
        }
        // Kept, lost and torn all happen.
        assert!(outcomes.contains(&7) && outcomes.contains(&13) && outcomes.len() > 2);
    }

    #[test]
    fn an_unsynced_creation_may_vanish_and_a_synced_one_does_not() {
        let (dir, fs) = setup();
        let mut vanished = 0;
        for i in 0..20 {
            let p = dir.path().join(format!("f{i}"));
            let f = fs.open(&p, OpenMode::CreateNew).unwrap();
            f.write_all_at(b"x", 0).unwrap();
            f.sync_data().unwrap();
            drop(f);
            fs.crash().unwrap();
            if fs.kind(&p).unwrap().is_none() {
                vanished += 1;
            }
        }
        assert!(vanished > 0 && vanished < 20, "{vanished}");
        let p = dir.path().join("kept");
        fs.open(&p, OpenMode::CreateNew).unwrap();
        fs.sync_dir(dir.path()).unwrap();
        fs.crash().unwrap();
        assert_eq!(fs.kind(&p).unwrap(), Some(EntryKind::File));
    }

    #[test]
    fn no_space_persists_until_healed_and_a_power_cut_until_the_crash() {
        let (dir, fs) = setup();
        let f = fs.open(&dir.path().join("f"), OpenMode::CreateNew).unwrap();
        fs.arm(Fault::NoSpace, 1);
        f.write_all_at(b"a", 0).unwrap();
        assert_eq!(
            f.write_all_at(b"b", 1).unwrap_err().raw_os_error(),
            Some(28)
        );
        assert_eq!(
            f.write_all_at(b"c", 5).unwrap_err().raw_os_error(),
            Some(28)
        );
        // Overwriting inside the file needs no space.
        f.write_all_at(b"z", 0).unwrap();
        fs.heal();
        f.write_all_at(b"c", 5).unwrap();

        fs.arm(Fault::PowerCut, 0);
        assert!(f.sync_data().is_err());
        assert!(f.read_exact_at(&mut [0u8; 1], 0).is_err());
        assert!(fs.is_dead());
        drop(f);
        fs.crash().unwrap();
        assert!(!fs.is_dead());
    }

    #[test]
    fn a_rename_not_made_durable_may_be_undone_with_the_old_target_back() {
        let (dir, fs) = setup();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let mut undone = 0;
        for _ in 0..20 {
            for (p, body) in [(&a, b"new"), (&b, b"old")] {
                let _ = fs.remove_file(p);
                let f = fs.open(p, OpenMode::CreateNew).unwrap();
                f.write_all_at(body, 0).unwrap();
                f.sync_data().unwrap();
            }
            fs.sync_dir(dir.path()).unwrap();
            fs.rename(&a, &b).unwrap();
            fs.crash().unwrap();
            match fs.read(&b).unwrap().as_slice() {
                b"new" => assert!(fs.kind(&a).unwrap().is_none()),
                b"old" => {
                    assert_eq!(fs.read(&a).unwrap(), b"new");
                    undone += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(undone > 0 && undone < 20, "{undone}");
    }
}
