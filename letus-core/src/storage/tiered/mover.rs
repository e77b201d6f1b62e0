//! The policy and the mover: which sealed files go to a colder tier, and how a move stays crash-safe.
//!
//! A move of file `F` from tier `A` to the colder tier `B`:
//!
//! 1. read `F` in `A` and compute its CRC-32;
//! 2. copy it to `B`: warm, under `F.tmp`, fsynced, renamed to `F`, directory fsynced; cold, uploaded as
//!    `P/data/<epoch>/F` (multipart when large);
//! 3. read the copy back from `B` and compare its CRC-32 with step 1's; a mismatch stops the move;
//!    cold only: write the file's pinned ranges (its index and top-of-trie records) to `tier-pins/F` on the hot
//!    disk (temporary name, fsync, rename, directory fsync), checked against the source's bytes;
//! 4. cold only: create the next manifest object (fails if another writer fenced this one: the move stops);
//! 5. switch: write the local manifest naming `B` (whole-file replace, durable);
//! 6. point every open handle at `B` (closing their descriptors of `A`);
//! 7. delete `F` from `A`.
//!
//! A crash before step 5 is durable leaves the manifest naming `A`, where `F` is whole: the copy in `B` is an
//! orphan that the next open deletes (a pin file too). A crash after it leaves the manifest naming `B`, where the verified copy is:
//! the next open deletes `F` from `A` if it is still there. Either way each file is read from exactly one place.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::manifest::{FileRecord, Manifest, Tier};
use super::{cold_set_body, io_err, kind_of, Inner, Kind, OpenMode, Place, Signal};
use crate::error::{Error, Result};
use crate::storage::StorageFile;

/// When sealed files move.
#[derive(Clone, Debug)]
pub struct TierPolicy {
    /// Move a sealed hot file to the warm tier once it has been sealed this many versions (`None`: never).
    pub warm_after_versions: Option<u64>,
    /// Move a sealed file to the cold tier once it has been sealed this many versions (`None`: never).
    pub cold_after_versions: Option<u64>,
    /// A file read more often than this many times per version since the mover last looked is hot whatever
    /// its age, and stays where it is (`None`: age alone decides).
    pub max_reads_per_version: Option<f64>,
    /// The mover looks at the files once per this many new versions.
    pub scan_every_versions: u64,
    /// Most bytes one look moves (the rest waits for the next one), so that a backlog never starves the disk.
    pub max_bytes_per_pass: u64,
}

impl Default for TierPolicy {
    fn default() -> Self {
        TierPolicy {
            warm_after_versions: None,
            cold_after_versions: None,
            max_reads_per_version: None,
            scan_every_versions: 16,
            max_bytes_per_pass: 1 << 30,
        }
    }
}

/// Bytes copied per read and write of a move.
const CHUNK: usize = 4 << 20;

/// The mover thread: waits for versions, then runs one pass. Holds its store only weakly between passes.
///
/// A recorder thread runs beside it, recording newly sealed files at every new version: a pass can take hundreds
/// of versions (the consolidation and upload of a large index file), and a file's age counts from when it is
/// recorded, so a file sealed during a long pass must not wait for the pass to end to start ageing.
pub(super) fn run(weak: Weak<Inner>, signal: Arc<Signal>) {
    std::thread::scope(|s| {
        let (w, sig) = (weak.clone(), signal.clone());
        // Without the recorder (it could not be spawned) the mover still records at every pass: files only
        // start ageing later.
        let _ = std::thread::Builder::new()
            .name("letus-tier-recorder".into())
            .spawn_scoped(s, move || record_loop(w, sig));
        move_loop(weak, signal);
    });
}

/// Waits until the clock passes `from` (or a stop); returns the new version, or `None` when the thread should end.
fn wait_past(weak: &Weak<Inner>, signal: &Signal, from: u64) -> Option<u64> {
    let mut c = signal.lock();
    while !c.1 && c.0 <= from {
        // The timeout only lets a thread whose store is gone (every clone and handle dropped) notice it and end;
        // it sends no request.
        c = signal
            .wake
            .wait_timeout(c, std::time::Duration::from_secs(1))
            .unwrap_or_else(|e| e.into_inner())
            .0;
        if weak.strong_count() == 0 {
            return None;
        }
    }
    (!c.1).then_some(c.0)
}

fn record_loop(weak: Weak<Inner>, signal: Arc<Signal>) {
    let mut seen = 0u64;
    while let Some(v) = wait_past(&weak, &signal, seen) {
        seen = v;
        let Some(inner) = weak.upgrade() else { return };
        // A failure (a listing or the manifest's write) is retried at the next version and by the next pass.
        let _ = inner.record_sealed(v);
    }
}

fn move_loop(weak: Weak<Inner>, signal: Arc<Signal>) {
    let mut scanned_at = 0u64;
    loop {
        let every = match weak.upgrade() {
            Some(inner) => inner.cfg.policy.scan_every_versions.max(1),
            None => return,
        };
        let Some(v) = wait_past(&weak, &signal, scanned_at.saturating_add(every - 1)) else {
            return;
        };
        scanned_at = v;
        let Some(inner) = weak.upgrade() else { return };
        // A failure is in `TierStatus::last_error` and the counters (letus-core logs nothing itself); the next
        // pass retries.
        let _ = inner.migrate_once(u64::MAX);
    }
}

/// Holds [`Inner::moving`] (or nothing, on the thread that already holds it).
pub(super) struct MoveGuard<'a> {
    inner: &'a Inner,
    guard: Option<std::sync::MutexGuard<'a, ()>>,
}

impl Drop for MoveGuard<'_> {
    fn drop(&mut self) {
        if self.guard.is_some() {
            *self
                .inner
                .moving_thread
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

impl Inner {
    /// Excludes other moves: locks `moving`, unless this thread holds it already (a pass whose
    /// [`super::PrepareFn`] makes the engine remove a file).
    pub(super) fn lock_moving(&self) -> MoveGuard<'_> {
        let me = std::thread::current().id();
        let holder = |i: &Inner| *i.moving_thread.lock().unwrap_or_else(|e| e.into_inner());
        if holder(self) == Some(me) {
            return MoveGuard {
                inner: self,
                guard: None,
            };
        }
        let guard = self.moving.lock().unwrap_or_else(|e| e.into_inner());
        *self.moving_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(me);
        MoveGuard {
            inner: self,
            guard: Some(guard),
        }
    }

    /// The tier policy wants `f` in now (never a hotter one than it is in).
    fn target(&self, f: &FileRecord, version: u64, heat: f64) -> Tier {
        let p = &self.cfg.policy;
        if p.max_reads_per_version.is_some_and(|max| heat > max) {
            return f.tier;
        }
        let age = version.saturating_sub(f.sealed_at);
        // Never in the version it was sealed in: a crash can still undo that version's last writes (a block whose
        // state commit did not happen is cut from its segment at the next open).
        let due = |after: Option<u64>| after.is_some_and(|a| age >= a.max(1));
        let t = if self.cold.is_some() && due(p.cold_after_versions) {
            Tier::Cold
        } else if self.cfg.warm_dir.is_some() && due(p.warm_after_versions) {
            Tier::Warm
        } else {
            Tier::Hot
        };
        t.max(f.tier)
    }

    /// Files the policy wants moved and their bytes.
    pub(super) fn backlog(&self, m: &Manifest, version: u64) -> super::TierUse {
        let mut u = super::TierUse { files: 0, bytes: 0 };
        for f in m.files.values() {
            if self.target(f, version, 0.0) != f.tier {
                u.files += 1;
                u.bytes += f.size;
            }
        }
        u
    }

    /// Finds the sealed hot files the manifest does not know yet and records them (sealed at the current version).
    fn record_sealed(&self, version: u64) -> Result<()> {
        let hot = &*self.cfg.hot;
        let root = &self.cfg.root;
        let found: Vec<(String, Kind, u64)> = super::files_under(hot, root)
            .map_err(|e| io_err(root, e))?
            .iter()
            .filter_map(|p| {
                let (kind, num) = kind_of(p.file_name()?.to_str()?)?;
                let rel = p.strip_prefix(root).ok()?;
                // Pin files are copies of parts of cold files, not files of the store.
                if rel.starts_with(super::PIN_DIR) {
                    return None;
                }
                Some((rel.to_str()?.to_string(), kind, num))
            })
            .collect();
        let mut m = self.lock_manifest();
        // The clock read after the listing: a file sealed by a commit still running (a block segment sealed by the
        // append of version v, whose commit is pending) is listed after the clock passed v - 1, so it ages from v
        // at the earliest, and never moves before that commit is done. `version` may be far older (a pass's).
        let version = version.max(self.signal.lock().0);
        // The highest number of each directory and extension, wherever its file is: that file is the active one.
        let mut highest: std::collections::HashMap<(String, String), u64> = Default::default();
        let key_of = |rel: &str| -> Option<((String, String), u64)> {
            let p = Path::new(rel);
            let name = p.file_name()?.to_str()?;
            let (kind, num) = kind_of(name)?;
            (kind == Kind::Numbered).then(|| {
                let dir = p
                    .parent()
                    .and_then(|d| d.to_str())
                    .unwrap_or("")
                    .to_string();
                let ext = name.rsplit_once('.').map_or("", |(_, e)| e).to_string();
                ((dir, ext), num)
            })
        };
        for rel in found
            .iter()
            .map(|f| f.0.as_str())
            .chain(m.files.keys().map(String::as_str))
        {
            if let Some((k, num)) = key_of(rel) {
                let h = highest.entry(k).or_insert(num);
                *h = (*h).max(num);
            }
        }
        let mut changed = false;
        // A file recorded as sealed that is the highest of its directory again (recovery removed a newer file
        // that no commit had used, and the value log goes on writing this one) is not sealed: forget it while
        // it is hot, so that it never moves while being written.
        let unsealed: Vec<String> = m
            .files
            .iter()
            .filter(|(rel, f)| {
                f.tier == Tier::Hot
                    && key_of(rel).is_some_and(|(k, n)| highest.get(&k).is_some_and(|&h| n >= h))
            })
            .map(|(rel, _)| rel.clone())
            .collect();
        // A hot record whose file is gone (a crash between the engine's remove and the manifest's update) is
        // dropped, so that it never blocks the moves behind it. The listing is older than the lock (a pass may
        // have recorded a consolidated replacement since), so absence is confirmed under it.
        let present: std::collections::HashSet<&str> = found.iter().map(|f| f.0.as_str()).collect();
        let mut gone = Vec::new();
        for (rel, f) in &m.files {
            if f.tier == Tier::Hot && !present.contains(rel.as_str()) {
                let path = root.join(rel);
                if hot.kind(&path).map_err(|e| io_err(&path, e))?.is_none() {
                    gone.push(rel.clone());
                }
            }
        }
        for rel in unsealed.into_iter().chain(gone) {
            m.files.remove(&rel);
            changed = true;
        }
        for (rel, kind, num) in found {
            if m.files.contains_key(&rel) {
                continue;
            }
            let sealed = match kind {
                Kind::Index => true,
                Kind::Numbered => {
                    key_of(&rel).is_some_and(|(k, _)| highest.get(&k).is_some_and(|&h| num < h))
                }
            };
            if !sealed {
                continue;
            }
            let path = self.cfg.root.join(&rel);
            // The engine removes a hot file before it takes the manifest's lock to forget it: a file listed but
            // gone now is one it removed, not one to record.
            let size = match hot.open(&path, OpenMode::Read).and_then(|f| f.size()) {
                Ok(size) => size,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, e)),
            };
            m.files.insert(
                rel,
                FileRecord {
                    tier: Tier::Hot,
                    size,
                    crc: 0,
                    // Counted from the next version: a commit still running may be the one that sealed it.
                    sealed_at: version.saturating_add(1),
                    key: String::new(),
                    pins: Vec::new(),
                },
            );
            changed = true;
        }
        if changed {
            m.store(hot, &self.cfg.root)?;
        }
        Ok(())
    }

    /// One pass of the policy: records newly sealed files, then moves what is due (at most the policy's bytes per
    /// pass, and at most `max_files`). Returns the number of files moved.
    pub(super) fn migrate_once(&self, max_files: u64) -> Result<usize> {
        let _pass = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        let version = self.signal.lock().0;
        self.record_sealed(version)?;
        let m = self.lock_manifest().clone();
        let mut due = Vec::new();
        for (rel, f) in &m.files {
            let heat = self
                .lock_entries()
                .get(rel)
                .map_or(0.0, |e| e.reads.swap(0, Ordering::Relaxed) as f64);
            let versions = self.cfg.policy.scan_every_versions.max(1) as f64;
            let to = self.target(f, version, heat / versions);
            if to != f.tier {
                due.push((rel.clone(), f.clone(), to));
            }
        }
        // Oldest first.
        due.sort_by_key(|(_, f, _)| f.sealed_at);
        let mut moved = 0;
        let mut bytes = 0u64;
        let mut failed = None;
        for (rel, f, to) in due {
            if moved as u64 >= max_files || bytes >= self.cfg.policy.max_bytes_per_pass {
                break;
            }
            let one = self.lock_moving();
            // Removed or changed since the pass listed it (the engine removes files between moves).
            if self.lock_manifest().files.get(&rel) != Some(&f) {
                continue;
            }
            let result = self.prepare_and_move(&rel, &f, to);
            drop(one);
            #[cfg(test)]
            if let Some(f) = &*self
                .after_each_move
                .lock()
                .unwrap_or_else(|e| e.into_inner())
            {
                f(self);
            }
            // A pass can take many versions (a consolidation and an upload of a large file): files sealed
            // meanwhile are recorded now, so that their age counts from about when they were sealed, not from the
            // next pass.
            let now = self.signal.lock().0;
            let _ = self.record_sealed(now);
            match result {
                Ok(()) => {
                    moved += 1;
                    bytes += f.size;
                }
                Err(e) => {
                    self.counters.move_failures.fetch_add(1, Ordering::Relaxed);
                    *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("moving {rel} to the {} tier: {e}", to.name()));
                    // One file that fails does not hold back the others; an object store that cannot be reached
                    // (or that fenced this writer) is not asked again in this pass. The next pass retries.
                    let store_down = match &e {
                        Error::Io { source, .. } => {
                            super::is_cold_unavailable(source)
                                || source.kind() == io::ErrorKind::PermissionDenied
                        }
                        _ => false,
                    };
                    failed = Some(e);
                    if store_down {
                        break;
                    }
                }
            }
        }
        match failed {
            Some(e) if moved == 0 => Err(e),
            _ => Ok(moved),
        }
    }

    /// Moves `rel` to `to`; an index file going cold is first handed to the [`super::PrepareFn`], and the file
    /// that replaces it moves instead, keeping its age.
    fn prepare_and_move(&self, rel: &str, f: &FileRecord, to: Tier) -> Result<()> {
        let name = Path::new(rel).file_name().and_then(|n| n.to_str());
        let prepare = self
            .before_cold
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (Some(name), Some(prepare), Tier::Cold, Some((Kind::Index, _))) =
            (name, prepare, to, name.and_then(kind_of))
        else {
            return self.move_file(rel, f, to);
        };
        let Some(new_name) = prepare(name)? else {
            return self.move_file(rel, f, to);
        };
        let new_rel = Path::new(rel)
            .with_file_name(&new_name)
            .to_str()
            .map(str::to_string)
            .ok_or_else(|| {
                io_err(
                    Path::new(&new_name),
                    io::Error::from(io::ErrorKind::InvalidInput),
                )
            })?;
        let path = self.cfg.root.join(&new_rel);
        let size = self
            .cfg
            .hot
            .open(&path, OpenMode::Read)
            .and_then(|f| f.size())
            .map_err(|e| io_err(&path, e))?;
        // The replacement is sealed since the file it replaces was: it keeps that age. (A crash before this
        // manifest write only delays its move: the next pass finds it as newly sealed.)
        let rec = FileRecord {
            tier: Tier::Hot,
            size,
            crc: 0,
            sealed_at: f.sealed_at,
            key: String::new(),
            pins: Vec::new(),
        };
        {
            let mut m = self.lock_manifest();
            let mut next = m.clone();
            next.files.insert(new_rel.clone(), rec.clone());
            next.store(&*self.cfg.hot, &self.cfg.root)?;
            *m = next;
        }
        self.move_file(&new_rel, &rec, to)
    }

    /// Opens `rel`'s current copy for reading.
    fn open_copy(&self, rel: &str, tier: Tier) -> Result<Arc<dyn StorageFile>> {
        let (fs, path) = match tier {
            Tier::Hot => (&self.cfg.hot, self.cfg.root.join(rel)),
            Tier::Warm => (&self.warm, self.warm_path(rel).ok_or_else(|| no_warm(rel))?),
            Tier::Cold => {
                return Err(io_err(
                    Path::new(rel),
                    io::Error::other("a cold file is never moved again"),
                ))
            }
        };
        fs.open(&path, OpenMode::Read).map_err(|e| io_err(&path, e))
    }

    /// Moves `rel` (described by `f`) to tier `to`, by the steps of this module's documentation.
    fn move_file(&self, rel: &str, f: &FileRecord, to: Tier) -> Result<()> {
        let src = self.open_copy(rel, f.tier)?;
        let src_path = match f.tier {
            Tier::Warm => self.warm_path(rel).unwrap_or_default(),
            _ => self.cfg.root.join(rel),
        };
        let size = src.size().map_err(|e| io_err(&src_path, e))?;
        let mut key = String::new();
        let crc = match to {
            Tier::Warm => self.copy_to_warm(rel, &*src, size)?,
            Tier::Cold => {
                self.claim_cold()?;
                let cold = self.cold.as_ref().ok_or(Error::Poisoned)?;
                key = cold.data_key(rel);
                let want = crc_of(&*src, &src_path, size)?;
                // A warm copy was verified when it moved there: bytes that changed since (a failing disk) are
                // not uploaded as the file.
                if f.tier == Tier::Warm && want != f.crc {
                    return Err(Error::corrupt(
                        &src_path,
                        0,
                        format!(
                            "the warm copy's CRC-32 {want:08x} differs from the {:08x} it had when it moved there",
                            f.crc
                        ),
                    ));
                }
                cold.upload(&key, src.clone(), size)
                    .map_err(|e| io_err(Path::new(&key), e))?;
                let got = crc_of_object(cold, &key, size)?;
                if got != want {
                    return Err(Error::corrupt(
                        Path::new(&key),
                        0,
                        format!("the uploaded copy's CRC-32 {got:08x} differs from the file's {want:08x}"),
                    ));
                }
                want
            }
            Tier::Hot => return Ok(()),
        };
        let pins = match (to, &self.cfg.pins) {
            (Tier::Cold, Some(pin)) => {
                let src_fs = if f.tier == Tier::Warm {
                    &self.warm
                } else {
                    &self.cfg.hot
                };
                let pins = pin(src_fs, &src_path)?;
                self.write_pins(rel, &*src, &src_path, &pins)?;
                pins
            }
            _ => Vec::new(),
        };
        drop(src);
        let rec = FileRecord {
            tier: to,
            size,
            crc,
            sealed_at: f.sealed_at,
            key: key.clone(),
            pins: pins.clone(),
        };
        if to == Tier::Cold {
            // The conditional PUT goes out without the manifest's lock, which opens, listings and status take:
            // a slow object store must not stall the hot tier. Moves are one at a time (`moving`).
            let mut next = self.lock_manifest().clone();
            next.files.insert(rel.to_string(), rec.clone());
            let cold = self.cold.as_ref().ok_or(Error::Poisoned)?;
            cold.record_change(|n| cold_set_body(n, &next))
                .map_err(|e| io_err(Path::new(&cold.prefix), e))?;
        }
        {
            let mut m = self.lock_manifest();
            // The engine may have removed the file meanwhile: then the copy is an orphan (deleted at next open).
            if m.files.get(rel) != Some(f) {
                return Err(io_err(
                    Path::new(rel),
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "the file was removed during its move",
                    ),
                ));
            }
            let mut next = m.clone();
            next.files.insert(rel.to_string(), rec.clone());
            next.store(&*self.cfg.hot, &self.cfg.root)?;
            *m = next;
        }
        // Every handle now reads the new copy; their descriptors of the old one close.
        let entry = self.lock_entries().get(rel).cloned();
        if let Some(e) = entry {
            let mut place = e.place.write().unwrap_or_else(|e| e.into_inner());
            *place = match to {
                Tier::Cold => Place::Cold {
                    key,
                    size,
                    pins: super::pin_table(&pins),
                },
                _ => Place::Warm,
            };
            for h in e.handles.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                if let Some(slot) = h.upgrade() {
                    *slot.0.write().unwrap_or_else(|e| e.into_inner()) = None;
                }
            }
        }
        // The source goes last; a failure here leaves a copy the next open deletes.
        let (fs, dir) = match f.tier {
            Tier::Warm => (&self.warm, src_path.parent().map(Path::to_path_buf)),
            _ => (&self.cfg.hot, src_path.parent().map(Path::to_path_buf)),
        };
        // Gone already: the engine removed the file while it moved (and then removed the copy too).
        match fs.remove_file(&src_path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => r.map_err(|e| io_err(&src_path, e))?,
        }
        if let Some(d) = dir {
            fs.sync_dir(&d).map_err(|e| io_err(&d, e))?;
        }
        let c = &self.counters;
        match to {
            Tier::Cold => c.moved_cold.fetch_add(1, Ordering::Relaxed),
            _ => c.moved_warm.fetch_add(1, Ordering::Relaxed),
        };
        c.moved_bytes.fetch_add(size, Ordering::Relaxed);
        Ok(())
    }

    /// Writes the pin file of `rel`: the bytes of `pins` (ranges of `src`) back to back, durably (whole-file
    /// replace), then reads it back and compares it with the source's bytes.
    fn write_pins(
        &self,
        rel: &str,
        src: &dyn StorageFile,
        src_path: &Path,
        pins: &[(u64, u64)],
    ) -> Result<()> {
        if pins.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        for &(start, len) in pins {
            let n = usize::try_from(len).map_err(|_| {
                io_err(
                    src_path,
                    io::Error::new(io::ErrorKind::InvalidInput, "pinned range too large"),
                )
            })?;
            let at = bytes.len();
            bytes.resize(at + n, 0);
            src.read_exact_at(&mut bytes[at..], start)
                .map_err(|e| io_err(src_path, e))?;
        }
        let path = self.pin_path(rel);
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io_err(&path, io::Error::from(io::ErrorKind::InvalidInput)))?;
        let hot = &*self.cfg.hot;
        crate::fsutil::ensure_dir(hot, &dir)?;
        drop(crate::fsutil::write_whole_file(hot, &dir, name, &bytes)?);
        if hot.read(&path).map_err(|e| io_err(&path, e))? != bytes {
            return Err(Error::corrupt(
                &path,
                0,
                "the pin file differs from the file's bytes",
            ));
        }
        Ok(())
    }

    /// Step 2 and 3 for the warm tier; returns the CRC-32 both copies have.
    fn copy_to_warm(&self, rel: &str, src: &dyn StorageFile, size: u64) -> Result<u32> {
        let dst = self.warm_path(rel).ok_or_else(|| no_warm(rel))?;
        let dir = dst.parent().map(Path::to_path_buf).unwrap_or_default();
        let w = &*self.warm;
        w.create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        // The directories on the way are durable before a file in them is named by the manifest.
        if let Some(root) = &self.cfg.warm_dir {
            let mut d = dir.as_path();
            while let Some(parent) = d.parent().filter(|p| p.starts_with(root) && *p != d) {
                w.sync_dir(parent).map_err(|e| io_err(parent, e))?;
                d = parent;
            }
        }
        let tmp = dst.with_extension(format!(
            "{}.tmp",
            dst.extension().and_then(|e| e.to_str()).unwrap_or("")
        ));
        if w.kind(&tmp).map_err(|e| io_err(&tmp, e))?.is_some() {
            w.remove_file(&tmp).map_err(|e| io_err(&tmp, e))?;
        }
        let out = w
            .open(&tmp, OpenMode::CreateNew)
            .map_err(|e| io_err(&tmp, e))?;
        let want = scan(src, Path::new(rel), size, |at, bytes| {
            out.write_all_at(bytes, at).map_err(|e| io_err(&tmp, e))
        })?;
        out.sync_data().map_err(|e| io_err(&tmp, e))?;
        let got = crc_of(&*out, &tmp, size)?;
        drop(out);
        if got != want {
            return Err(Error::corrupt(
                &tmp,
                0,
                format!("the copy's CRC-32 {got:08x} differs from the file's {want:08x}"),
            ));
        }
        w.rename(&tmp, &dst).map_err(|e| io_err(&dst, e))?;
        w.sync_dir(&dir).map_err(|e| io_err(&dir, e))?;
        Ok(want)
    }

    /// The engine removes a file that is in the warm or cold tier.
    pub(super) fn forget_moved(&self, rel: &str) -> io::Result<()> {
        let _one = self.lock_moving();
        // Read under the move lock: a move that ran meanwhile changed where the file is.
        let Some(f) = self.lock_manifest().files.get(rel).cloned() else {
            return Ok(());
        };
        if f.tier == Tier::Hot {
            return self.remove_hot(rel);
        }
        let f = &f;
        if f.tier == Tier::Cold {
            self.claim_cold()
                .map_err(|e| io::Error::other(e.to_string()))?;
            let mut next = self.lock_manifest().clone();
            next.files.remove(rel);
            let cold = self
                .cold
                .as_ref()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            cold.record_change(|n| cold_set_body(n, &next))?;
        }
        {
            let mut m = self.lock_manifest();
            let mut next = m.clone();
            next.files.remove(rel);
            next.store(&*self.cfg.hot, &self.cfg.root)
                .map_err(|e| io::Error::other(e.to_string()))?;
            *m = next;
        }
        let entry = self.lock_entries().remove(rel);
        if let Some(e) = entry {
            if let (Some(c), Place::Cold { size, .. }) = (
                &self.cold,
                &*e.place.read().unwrap_or_else(|e| e.into_inner()),
            ) {
                c.forget(e.id, *size);
            }
        }
        if !f.pins.is_empty() {
            let _ = self.cfg.hot.remove_file(&self.pin_path(rel));
        }
        match f.tier {
            Tier::Cold => self.cold.as_ref().map_or(Ok(()), |c| c.delete(&f.key)),
            Tier::Warm => match self.warm_path(rel) {
                Some(p) => self.warm.remove_file(&p),
                None => Ok(()),
            },
            Tier::Hot => Ok(()),
        }
    }
}

fn no_warm(rel: &str) -> Error {
    io_err(
        Path::new(rel),
        io::Error::new(io::ErrorKind::NotFound, "no warm tier is configured"),
    )
}

/// Reads the first `size` bytes of `file` in `CHUNK`s, handing each to `each` with its offset; returns their
/// CRC-32.
fn scan(
    file: &dyn StorageFile,
    path: &Path,
    size: u64,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < size {
        let n = usize::try_from((size - at).min(CHUNK as u64)).unwrap_or(CHUNK);
        file.read_exact_at(&mut buf[..n], at)
            .map_err(|e| io_err(path, e))?;
        h.update(&buf[..n]);
        each(at, &buf[..n])?;
        at += n as u64;
    }
    Ok(h.finalize())
}

/// CRC-32 of the first `size` bytes of `file`.
fn crc_of(file: &dyn StorageFile, path: &Path, size: u64) -> Result<u32> {
    scan(file, path, size, |_, _| Ok(()))
}

/// CRC-32 of object `key` as the store returns it, by ranged GETs of `CHUNK` bytes.
fn crc_of_object(cold: &super::cold::ColdTier, key: &str, size: u64) -> Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut at = 0u64;
    while at < size {
        let end = (at + CHUNK as u64).min(size);
        let b = cold
            .get_range(key, at, end)
            .map_err(|e| io_err(Path::new(key), e))?;
        if b.len() as u64 != end - at {
            return Err(Error::corrupt(
                Path::new(key),
                at,
                "the uploaded object is shorter than the file",
            ));
        }
        h.update(&b);
        at = end;
    }
    Ok(h.finalize())
}
