//! The policy and the mover: which sealed files go to a colder tier, and how a move stays crash-safe.
//!
//! A move of file `F` from tier `A` to the colder tier `B`:
//!
//! 1. read `F` in `A` and compute its CRC-32;
//! 2. copy it to `B`: warm, under `F.tmp`, fsynced, renamed to `F`, directory fsynced; cold, uploaded as
//!    `P/data/<epoch>/F` (multipart when large);
//! 3. read the copy back from `B` and compare its CRC-32 with step 1's; a mismatch stops the move;
//! 4. cold only: create the next manifest object (fails if another writer fenced this one: the move stops);
//! 5. switch: write the local manifest naming `B` (whole-file replace, durable);
//! 6. point every open handle at `B` (closing their descriptors of `A`);
//! 7. delete `F` from `A`.
//!
//! A crash before step 5 is durable leaves the manifest naming `A`, where `F` is whole: the copy in `B` is an
//! orphan that the next open deletes. A crash after it leaves the manifest naming `B`, where the verified copy is:
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
pub(super) fn run(weak: Weak<Inner>, signal: Arc<Signal>) {
    let mut scanned_at = 0u64;
    loop {
        let every = match weak.upgrade() {
            Some(inner) => inner.cfg.policy.scan_every_versions.max(1),
            None => return,
        };
        {
            let mut c = signal.lock();
            while !c.1 && c.0 < scanned_at.saturating_add(every) {
                c = signal.wake.wait(c).unwrap_or_else(|e| e.into_inner());
            }
            if c.1 {
                return;
            }
            scanned_at = c.0;
        }
        let Some(inner) = weak.upgrade() else { return };
        // A failure is in `TierStatus::last_error` and the counters (letus-core logs nothing itself); the next
        // pass retries.
        let _ = inner.migrate_once(u64::MAX);
    }
}

impl Inner {
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
                Some((p.strip_prefix(root).ok()?.to_str()?.to_string(), kind, num))
            })
            .collect();
        let mut m = self.lock_manifest();
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
        for rel in unsealed {
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
            let size = hot
                .open(&path, OpenMode::Read)
                .and_then(|f| f.size())
                .map_err(|e| io_err(&path, e))?;
            m.files.insert(
                rel,
                FileRecord {
                    tier: Tier::Hot,
                    size,
                    crc: 0,
                    sealed_at: version,
                    key: String::new(),
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
        let _one = self.moving.lock().unwrap_or_else(|e| e.into_inner());
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
        for (rel, f, to) in due {
            if moved as u64 >= max_files || bytes >= self.cfg.policy.max_bytes_per_pass {
                break;
            }
            match self.move_file(&rel, &f, to) {
                Ok(()) => {
                    moved += 1;
                    bytes += f.size;
                }
                Err(e) => {
                    self.counters.move_failures.fetch_add(1, Ordering::Relaxed);
                    *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("moving {rel} to the {} tier: {e}", to.name()));
                    // The next pass retries; a cold tier that fails once is not asked again in this pass.
                    return Err(e);
                }
            }
        }
        Ok(moved)
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
                let cold = self.cold.as_ref().ok_or(Error::Poisoned)?;
                key = cold.data_key(rel);
                let want = crc_of(&*src, &src_path, size)?;
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
        drop(src);
        let rec = FileRecord {
            tier: to,
            size,
            crc,
            sealed_at: f.sealed_at,
            key: key.clone(),
        };
        {
            let mut m = self.lock_manifest();
            let mut next = m.clone();
            next.files.insert(rel.to_string(), rec.clone());
            if to == Tier::Cold {
                let cold = self.cold.as_ref().ok_or(Error::Poisoned)?;
                cold.record_change(|n| cold_set_body(n, &next))
                    .map_err(|e| io_err(Path::new(&cold.prefix), e))?;
            }
            next.store(&*self.cfg.hot, &self.cfg.root)?;
            *m = next;
        }
        // Every handle now reads the new copy; their descriptors of the old one close.
        if let Some(e) = self.lock_entries().get(rel).cloned() {
            let mut place = e.place.write().unwrap_or_else(|e| e.into_inner());
            *place = match to {
                Tier::Cold => Place::Cold { key, size },
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
        fs.remove_file(&src_path)
            .map_err(|e| io_err(&src_path, e))?;
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

    /// Step 2 and 3 for the warm tier; returns the CRC-32 both copies have.
    fn copy_to_warm(&self, rel: &str, src: &dyn StorageFile, size: u64) -> Result<u32> {
        let dst = self.warm_path(rel).ok_or_else(|| no_warm(rel))?;
        let dir = dst.parent().map(Path::to_path_buf).unwrap_or_default();
        let w = &*self.warm;
        w.create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
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
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0u64;
        while at < size {
            let n = usize::try_from((size - at).min(CHUNK as u64)).unwrap_or(CHUNK);
            src.read_exact_at(&mut buf[..n], at)
                .map_err(|e| io_err(Path::new(rel), e))?;
            h.update(&buf[..n]);
            out.write_all_at(&buf[..n], at)
                .map_err(|e| io_err(&tmp, e))?;
            at += n as u64;
        }
        out.sync_data().map_err(|e| io_err(&tmp, e))?;
        let want = h.finalize();
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
    pub(super) fn forget_moved(&self, rel: &str, f: &FileRecord) -> io::Result<()> {
        let mut m = self.lock_manifest();
        let mut next = m.clone();
        next.files.remove(rel);
        if f.tier == Tier::Cold {
            let cold = self
                .cold
                .as_ref()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            cold.record_change(|n| cold_set_body(n, &next))?;
        }
        next.store(&*self.cfg.hot, &self.cfg.root)
            .map_err(|e| io::Error::other(e.to_string()))?;
        *m = next;
        drop(m);
        if let Some(e) = self.lock_entries().remove(rel) {
            if let (Some(c), Place::Cold { size, .. }) = (
                &self.cold,
                &*e.place.read().unwrap_or_else(|e| e.into_inner()),
            ) {
                c.forget(e.id, *size);
            }
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

/// CRC-32 of the first `size` bytes of `file`.
fn crc_of(file: &dyn StorageFile, path: &Path, size: u64) -> Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < size {
        let n = usize::try_from((size - at).min(CHUNK as u64)).unwrap_or(CHUNK);
        file.read_exact_at(&mut buf[..n], at)
            .map_err(|e| io_err(path, e))?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h.finalize())
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
