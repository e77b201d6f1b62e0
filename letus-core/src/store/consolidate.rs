//! Consolidating an index file: the same records plus a BasePage under every DeltaPage chain that began in an
//! older file, so that a page at any version of the file is read from this one file alone.
//!
//! Why: a page's newest record at an old version is often a DeltaPage whose chain runs back through several older
//! index files (one small DeltaPage per flush, up to `max_delta_chain`). On a local disk each record is one
//! `pread`; in the cold tier each is a ranged GET of another object, so a proof that touches three pages cost
//! about seven GETs. A consolidated file has, for every page whose first record in the file is such a DeltaPage
//! `D` at version `f`, a BasePage at `(page, f)` holding the page as of `f` (`Base < Delta` at one version, so the
//! two records are adjacent and `D`'s floor lookups are unchanged), and `D` names it as its predecessor. The
//! entries of `D` at `f` re-apply what the BasePage already holds, which changes nothing (entries assign slots).
//!
//! The file is written under the next generation's name (`NNNNNN.G.idx`, FORMAT.md §2.8), swapped in for the old
//! one under the engine's write lock (readers hold the engine while they read, so none holds the old file after the
//! swap), and the old one is then deleted. A crash between the new file's rename and the old one's removal leaves
//! both; the store's open keeps the newer generation. Nothing that is hashed changes, so no root, proof or digest
//! does.

use super::*;

impl Shared {
    /// Replaces the index file named `name` (in `lsvps/`) with its consolidated generation; returns the new file's
    /// name. `None` when no index file of the store has that name, or when it is already consolidated (its
    /// generation is above 0).
    pub(super) fn consolidate(&self, name: &str) -> Result<Option<String>> {
        self.consolidate_with(name, false)
    }

    /// [`Shared::consolidate`]; with `or_busy`, answers a `WouldBlock` I/O error at once instead of waiting while
    /// a prune, a value-log GC pass or another consolidation runs. The tier mover asks so: it holds its own lock
    /// over moves, which a prune or GC pass needs to remove a file that was moved, so waiting here would be a
    /// deadlock; it tries the file again in its next pass.
    pub(super) fn consolidate_with(&self, name: &str, or_busy: bool) -> Result<Option<String>> {
        let Some((no, generation)) = crate::lsvps::parse_index_file_name(name) else {
            return Ok(None);
        };
        if generation > 0 {
            return Ok(None);
        }
        let _one_at_a_time = if or_busy {
            match self.maintenance.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    return Err(Error::io(
                        self.engine().dir.join("lsvps").join(name),
                        std::io::Error::new(
                            std::io::ErrorKind::WouldBlock,
                            "a prune, a value-log GC pass or a consolidation is running; tried again next pass",
                        ),
                    ));
                }
            }
        } else {
            self.maintenance
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let (file, lower, dir, counters, block_cache) = {
            let e = self.engine();
            let Some(i) = e
                .files
                .iter()
                .position(|f| f.path().file_name().and_then(|n| n.to_str()) == Some(name))
            else {
                return Ok(None);
            };
            // A base file of format 4 holds one BasePage per page already (and its generation is above 0); a
            // copy in format 3 would lose what its BasePages stand for (FORMAT.md §2.9).
            if e.files[i].bases_only() {
                return Ok(None);
            }
            // Versions up to `lower` are in older files: a predecessor there is where a chain leaves this file.
            let lower = i
                .checked_sub(1)
                .map_or(0, |j| e.files[j].meta().max_version);
            (
                e.files[i].clone(),
                lower,
                e.dir.join("lsvps"),
                e.counters.clone(),
                e.block_cache.clone(),
            )
        };
        let next = generation + 1;
        let fin_name = crate::lsvps::index_file_name(no, next);
        let fin = dir.join(&fin_name);
        let tmp = dir.join(format!("{fin_name}.tmp"));
        let fs = block_cache.shared_storage();
        // A temporary file of an earlier attempt that failed in this process (one from before a crash is deleted
        // by the open).
        if fs.kind(&tmp).map_err(|e| Error::io(&tmp, e))?.is_some() {
            fsutil::remove_file(&*fs, &tmp)?;
        }
        let written = self.write_consolidated(&file, lower, &tmp, &counters, &fs);
        let meta = match written {
            Ok(m) => m,
            Err(e) => {
                let _ = fs.remove_file(&tmp);
                return Err(e);
            }
        };
        fsutil::rename(&*fs, &tmp, &fin)?;
        sync_dir(&*fs, &dir)?;
        let new = Arc::new(IndexFile::open(
            &fin,
            crate::lsvps::cache_id(no, next),
            counters,
            block_cache,
        )?);
        if new.meta().min_version != meta.min_version || new.meta().max_version != meta.max_version
        {
            return Err(Error::corrupt(
                &fin,
                0,
                "the consolidated file's versions differ",
            ));
        }
        {
            let mut e = self.engine_write()?;
            match e.files.iter().position(|f| Arc::ptr_eq(f, &file)) {
                Some(i) => e.files[i] = new,
                // Nothing else replaces files; if something did, the old file stays and the new one goes.
                None => {
                    drop(e);
                    fsutil::remove_file(&*fs, &fin)?;
                    return Ok(None);
                }
            }
        }
        file.evict_from_cache();
        let old = file.path().to_path_buf();
        drop(file);
        fsutil::remove_file(&*fs, &old)?;
        sync_dir(&*fs, &dir)?;
        Ok(Some(fin_name))
    }

    /// Writes the consolidated copy of `file` to `tmp` (fsynced by `finish`); returns its meta.
    fn write_consolidated(
        &self,
        file: &Arc<IndexFile>,
        lower: Version,
        tmp: &Path,
        counters: &Arc<Counters>,
        fs: &crate::storage::SharedStorage,
    ) -> Result<FileMeta> {
        let mut entries = Vec::with_capacity(
            usize::try_from(file.meta().records)
                .unwrap_or(0)
                .min(1 << 24),
        );
        file.scan(|e| {
            entries.push(*e);
            Ok(())
        })?;
        let mut w = IndexFileWriter::create(fs, tmp, counters.clone())?;
        let mut records = 0u64;
        for entry in &entries {
            let bytes = file.read_entry(entry)?;
            let key = entry.key;
            let leaves_file = match key.kind {
                PageKind::Base => None,
                PageKind::Delta => match PageRecord::decode(&bytes)
                    .map_err(|w| Error::corrupt(file.path(), entry.offset, w))?
                {
                    PageRecord::Delta {
                        first_version,
                        since_base,
                        prev: Some(prev),
                        entries,
                        ..
                    } if prev.0 <= lower => Some((first_version, since_base, entries)),
                    _ => None,
                },
            };
            let Some((first_version, since_base, changes)) = leaves_file else {
                w.add(&key, &bytes)?;
                records += 1;
                continue;
            };
            // The engine is held for one page at a time (its chain may be read from the cold tier), so that a
            // commit waiting to publish never waits for more than one page.
            let page = self
                .engine_after_writers()
                .read_page(key.tid, key.page, key.version)?;
            let base = page::encode_base(key.version, 0, page.cells());
            w.add(
                &PageKey {
                    kind: PageKind::Base,
                    ..key
                },
                &base,
            )?;
            let delta = page::encode_delta(
                first_version,
                since_base,
                Some((key.version, PageKind::Base)),
                &changes,
            );
            w.add(&key, &delta)?;
            records += 2;
        }
        let meta = FileMeta {
            records,
            ..*file.meta()
        };
        w.finish(&meta)?;
        Ok(meta)
    }
}

impl Reader {
    /// Replaces index file `name` (a file name in the store's `lsvps/` directory, such as `000012.idx`) with its
    /// consolidated generation (see the `consolidate` module of the store: the same pages at every version, each
    /// readable from this file alone) and deletes the old file; returns the new file's name. `None` if the store
    /// has no index file of that name or it is consolidated already. Readers and commits go on meanwhile; the
    /// engine is held exclusively only to swap the file in.
    pub fn consolidate_index_file(&self, name: &str) -> Result<Option<String>> {
        self.shared.consolidate(name)
    }

    /// What [`crate::storage::tiered::Tiered::set_before_cold`] takes: consolidates an index file before it goes
    /// to the cold tier, so that a page there costs one ranged GET. Holds the store weakly (the tiers are part of
    /// the store's options; a strong reference would keep both alive forever). While a prune, a GC pass or another
    /// consolidation runs it fails at once (`WouldBlock`) instead of waiting, and the mover tries again next pass:
    /// those hold the store's maintenance lock and need the mover's to remove a file it moved.
    pub fn cold_preparer(&self) -> crate::storage::tiered::PrepareFn {
        let weak = Arc::downgrade(&self.shared);
        Arc::new(move |name: &str| match weak.upgrade() {
            Some(shared) => shared.consolidate_with(name, true),
            None => Ok(None),
        })
    }
}
