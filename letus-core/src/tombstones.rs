//! The tombstone log: for every key that is deleted at the latest version, the location of its Delete record.
//!
//! A key's value-log records are linked newest to oldest (each record names the key's previous Put or Delete),
//! and a key's history is walked from its leaf. A deleted key has no leaf, so without this table a later Put of
//! the same key could not link to the Delete, and the history before the delete would be lost. The table holds
//! only keys that are absent now: a Put of a key removes its entry (the new leaf carries the chain from then on).
//!
//! ## Format
//! ```text
//! header (16 bytes): magic "LETUSTMB" | u32 format = 1 | u32 crc32(magic || format)
//! entry  (65 bytes): u64 version | u32 tid | u8 kind | path[32] | u32 file_id | u64 offset | u32 len
//!                    | u32 crc32(previous 61 bytes)
//! kind: 1 = set (the key's Delete record is at the location), 2 = clear (the key was put again; location 0),
//!       3 = flushed (every entry up to `version` is durable; tid, path and location are 0)
//! ```
//! Entries are appended after each commit without fsync. Before an index file is flushed, a `flushed` marker for
//! the flush's version is appended and the file is fsynced, so at open every entry up to the newest flushed
//! version `F` is durable and ends with the marker for `F`. Entries after that marker are rebuilt from the value
//! log on replay (the same way as the roots log's), so `open` cuts them off. An open also writes the log again,
//! with the table alone, once the entries it read are mostly history (FORMAT.md §3a).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use letus_verify::{KeyPath, TrieId, Version};

use crate::error::{Error, Result};
use crate::fsutil::{
    self, check_log_header, crc, log_header, open_rw, u32_at, u64_at, AppendFile, LOG_HEADER_LEN,
};
use crate::storage::{FileRef, Storage};
use crate::vdls::Location;

const MAGIC: &[u8; 8] = b"LETUSTMB";
const FORMAT: u32 = 1;
const HEADER_LEN: u64 = LOG_HEADER_LEN as u64;
const ENTRY_LEN: usize = 65;
const FILE_NAME: &str = "tombstones.log";

/// Bytes of history entries (past twice the table's own) that make an open write the log again.
const REWRITE_SLACK: u64 = 1 << 20;

const SET: u8 = 1;
const CLEAR: u8 = 2;
const FLUSHED: u8 = 3;

/// The keys deleted at the latest version, with the location of each one's Delete record.
pub type Tombstones = HashMap<(TrieId, KeyPath), Location>;

/// The open tombstone log.
pub struct TombstoneLog {
    path: PathBuf,
    file: AppendFile,
    buf: Vec<u8>,
}

impl TombstoneLog {
    /// Opens the log in `dir` and returns the table as of `flushed`, the newest flushed version; everything after
    /// its marker is cut off. A damaged entry before the marker, or a missing marker, is corruption.
    ///
    /// `None`: the store was written by a build without the tombstone log (FORMAT.md's format 1) and has flushed
    /// index files, so the table up to `flushed` must be rebuilt from the value log and written with
    /// [`TombstoneLog::create`]. A store with nothing flushed gets an empty log: its whole value log is replayed.
    pub fn open(
        fs: &dyn Storage,
        dir: &Path,
        flushed: Option<Version>,
    ) -> Result<Option<(TombstoneLog, Tombstones)>> {
        let path = dir.join(FILE_NAME);
        if !fsutil::is_file(fs, &path)? {
            return match flushed {
                Some(_) => Ok(None),
                None => Ok(Some((
                    Self::create(fs, dir, None, &Tombstones::new())?,
                    Tombstones::new(),
                ))),
            };
        }
        let file = open_rw(fs, &path)?;
        let bytes = fs.read(&path).map_err(|e| Error::io(&path, e))?;
        check_log_header(&path, &bytes, MAGIC, FORMAT, "tombstone log")?;
        let mut log = TombstoneLog {
            path,
            file: AppendFile {
                file,
                end: bytes.len() as u64,
            },
            buf: Vec::new(),
        };
        let Some(flushed) = flushed else {
            // Nothing is flushed: the replay of the whole value log rebuilds every entry.
            log.cut(HEADER_LEN)?;
            return Ok(Some((log, Tombstones::new())));
        };
        let mut table = Tombstones::new();
        let mut end = None;
        for (i, e) in bytes[HEADER_LEN as usize..].chunks(ENTRY_LEN).enumerate() {
            let offset = HEADER_LEN + (i * ENTRY_LEN) as u64;
            let Some(entry) = decode(e) else {
                return Err(Error::corrupt(
                    &log.path,
                    offset,
                    format!(
                        "tombstone log entry fails its checksum before flushed version {flushed}"
                    ),
                ));
            };
            if entry.version > flushed {
                return Err(Error::corrupt(
                    &log.path,
                    offset,
                    format!("tombstone log has no marker for flushed version {flushed}"),
                ));
            }
            match entry.kind {
                SET => {
                    table.insert((entry.tid, entry.path), entry.loc);
                }
                CLEAR => {
                    table.remove(&(entry.tid, entry.path));
                }
                _ if entry.version == flushed => {
                    end = Some(offset + ENTRY_LEN as u64);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return Err(Error::corrupt(
                &log.path,
                bytes.len() as u64,
                format!("tombstone log ends before the marker of flushed version {flushed}"),
            ));
        };
        log.cut(end)?;
        // Every delete and every put of a deleted key adds an entry, but the table holds only the keys deleted now:
        // once the entries are mostly history, the log is written again with the table alone (a crash leaves the
        // old log or the new one, and both give this table at `flushed`).
        let live = HEADER_LEN + (table.len() as u64 + 1) * ENTRY_LEN as u64;
        if end > 2 * live + REWRITE_SLACK {
            drop(log);
            return Ok(Some((Self::create(fs, dir, Some(flushed), &table)?, table)));
        }
        Ok(Some((log, table)))
    }

    /// Writes a new log holding `table` (and the marker of `flushed`, if any) under a temporary name, fsyncs it and
    /// renames it into place: a crash leaves either no log (and the rebuild runs again) or the complete one.
    pub fn create(
        fs: &dyn Storage,
        dir: &Path,
        flushed: Option<Version>,
        table: &Tombstones,
    ) -> Result<TombstoneLog> {
        let mut b = Vec::with_capacity(HEADER_LEN as usize + (table.len() + 1) * ENTRY_LEN);
        b.extend_from_slice(&log_header(MAGIC, FORMAT));
        let v = flushed.unwrap_or(0);
        for ((tid, p), loc) in table {
            push(&mut b, v, *tid, SET, p, *loc);
        }
        if let Some(v) = flushed {
            push(&mut b, v, 0, FLUSHED, &KeyPath([0; 32]), NO_LOCATION);
        }
        let file = fsutil::write_whole_file(fs, dir, FILE_NAME, &b)?;
        Ok(TombstoneLog {
            path: dir.join(FILE_NAME),
            file,
            buf: Vec::new(),
        })
    }

    fn cut(&mut self, end: u64) -> Result<()> {
        self.file.cut(end).map_err(|e| Error::io(&self.path, e))
    }

    /// Buffers: `key` of `tid` is deleted at `version` by the record at `loc`.
    pub fn set(&mut self, version: Version, tid: TrieId, path: &KeyPath, loc: Location) {
        self.push(version, tid, SET, path, loc);
    }

    /// Buffers: `key` of `tid` is present again from `version` on.
    pub fn clear(&mut self, version: Version, tid: TrieId, path: &KeyPath) {
        self.push(version, tid, CLEAR, path, NO_LOCATION);
    }

    /// Writes the buffered entries (no fsync); returns the bytes written.
    pub fn write(&mut self) -> Result<u64> {
        let n = self.buf.len() as u64;
        if n > 0 {
            self.file
                .append(&self.buf)
                .map_err(|e| Error::io(&self.path, e))?;
            self.buf.clear();
        }
        Ok(n)
    }

    /// Appends the marker of flushed version `version` (no fsync) and returns a second handle of the file, which
    /// the flush fsyncs before its index file is written (off the commit path);
    /// also the bytes written.
    pub fn mark_flushed(&mut self, version: Version) -> Result<(FileRef, u64)> {
        self.push(version, 0, FLUSHED, &KeyPath([0; 32]), NO_LOCATION);
        let n = self.write()?;
        Ok((self.file.file.clone(), n))
    }

    /// Size of the file.
    pub fn disk_bytes(&self) -> u64 {
        self.file.end
    }

    fn push(&mut self, version: Version, tid: TrieId, kind: u8, path: &KeyPath, loc: Location) {
        push(&mut self.buf, version, tid, kind, path, loc);
    }
}

/// Encodes one entry onto `out`.
fn push(out: &mut Vec<u8>, version: Version, tid: TrieId, kind: u8, path: &KeyPath, loc: Location) {
    let start = out.len();
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&tid.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&path.0);
    out.extend_from_slice(&loc.file_id.to_le_bytes());
    out.extend_from_slice(&loc.offset.to_le_bytes());
    out.extend_from_slice(&loc.len.to_le_bytes());
    let c = crc(&out[start..]);
    out.extend_from_slice(&c.to_le_bytes());
}

const NO_LOCATION: Location = Location {
    file_id: 0,
    offset: 0,
    len: 0,
};

struct Entry {
    version: Version,
    tid: TrieId,
    kind: u8,
    path: KeyPath,
    loc: Location,
}

fn decode(e: &[u8]) -> Option<Entry> {
    if e.len() != ENTRY_LEN {
        return None;
    }
    let stored = u32_at(e, 61)?;
    if crc(e.get(..61)?) != stored {
        return None;
    }
    let kind = *e.get(12)?;
    if !(SET..=FLUSHED).contains(&kind) {
        return None;
    }
    Some(Entry {
        version: u64_at(e, 0)?,
        tid: u32_at(e, 8)?,
        kind,
        path: KeyPath(e.get(13..45)?.try_into().ok()?),
        loc: Location {
            file_id: u32_at(e, 45)?,
            offset: u64_at(e, 49)?,
            len: u32_at(e, 57)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(offset: u64) -> Location {
        Location {
            file_id: 1,
            offset,
            len: 50,
        }
    }

    #[test]
    fn entries_up_to_the_flushed_marker_come_back_and_the_rest_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (KeyPath::of(b"a"), KeyPath::of(b"b"));
        {
            let (mut log, t) = TombstoneLog::open(&crate::storage::Local, dir.path(), None)
                .unwrap()
                .unwrap();
            assert!(t.is_empty());
            log.set(1, 0, &a, loc(100));
            log.set(2, 0, &b, loc(200));
            log.clear(3, 0, &a);
            log.mark_flushed(3).unwrap().0.sync_data().unwrap();
            log.set(4, 0, &a, loc(400));
            log.write().unwrap();
        }
        let (_, t) = TombstoneLog::open(&crate::storage::Local, dir.path(), Some(3))
            .unwrap()
            .unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&(0, b)), Some(&loc(200)));
        // The entry of version 4 was cut: opening again at 3 still works and does not see it.
        let (_, t) = TombstoneLog::open(&crate::storage::Local, dir.path(), Some(3))
            .unwrap()
            .unwrap();
        assert_eq!(t.len(), 1);
    }

    /// A log that is mostly entries of keys put again is written again at open with the table alone, and opens
    /// and goes on as before.
    #[test]
    fn a_log_of_mostly_history_is_written_again_with_the_table_alone() {
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::storage::Local;
        let (a, b) = (KeyPath::of(b"a"), KeyPath::of(b"b"));
        {
            let (mut log, _) = TombstoneLog::open(&fs, dir.path(), None).unwrap().unwrap();
            log.set(1, 0, &b, loc(10));
            // 40,000 deletes and puts of one key: 5 MB of entries for a table of one key.
            for v in 2..40_002 {
                log.set(v, 0, &a, loc(v));
                log.clear(v, 0, &a);
            }
            log.set(40_002, 0, &a, loc(77));
            log.mark_flushed(40_002).unwrap().0.sync_data().unwrap();
        }
        let (mut log, t) = TombstoneLog::open(&fs, dir.path(), Some(40_002))
            .unwrap()
            .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t.get(&(0, a)), t.get(&(0, b))),
            (Some(&loc(77)), Some(&loc(10)))
        );
        let small = HEADER_LEN + 3 * ENTRY_LEN as u64;
        assert_eq!(log.disk_bytes(), small);
        assert_eq!(
            std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len(),
            small
        );
        // It goes on: later entries and markers append to the new file.
        log.clear(40_003, 0, &b);
        log.mark_flushed(40_003).unwrap().0.sync_data().unwrap();
        drop(log);
        let (_, t) = TombstoneLog::open(&fs, dir.path(), Some(40_003))
            .unwrap()
            .unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&(0, a)), Some(&loc(77)));
    }

    #[test]
    fn a_missing_marker_or_a_damaged_durable_entry_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = TombstoneLog::open(&crate::storage::Local, dir.path(), None)
                .unwrap()
                .unwrap();
            log.set(1, 0, &KeyPath::of(b"a"), loc(100));
            log.mark_flushed(1).unwrap().0.sync_data().unwrap();
        }
        assert!(matches!(
            TombstoneLog::open(&crate::storage::Local, dir.path(), Some(2)),
            Err(Error::Corrupt { .. })
        ));
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_LEN as usize + 20] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            TombstoneLog::open(&crate::storage::Local, dir.path(), Some(1)),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn a_store_without_the_log_and_with_flushed_files_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            TombstoneLog::open(&crate::storage::Local, dir.path(), Some(7))
                .unwrap()
                .is_none()
        );
        let mut table = Tombstones::new();
        table.insert((3, KeyPath::of(b"x")), loc(300));
        drop(TombstoneLog::create(&crate::storage::Local, dir.path(), Some(7), &table).unwrap());
        let (_, t) = TombstoneLog::open(&crate::storage::Local, dir.path(), Some(7))
            .unwrap()
            .unwrap();
        assert_eq!(t, table);
    }
}
