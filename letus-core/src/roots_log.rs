//! The roots log: one fixed-size entry per (version, trie) with the trie's root and root-page version after that
//! commit. It is how a reopened store knows every historical root (for reads at old versions and for digests)
//! without scanning the value log.
//!
//! ## Format
//! ```text
//! header (16 bytes): magic "LETUSRTS" | u32 format = 1 | u32 crc32(magic || format)
//! entry  (56 bytes): u64 version | u32 tid | root[32] | u64 root_page_version | u32 crc32(previous 52 bytes)
//! ```
//! Entries are appended at each commit without fsync; the file is fsynced (by the flush thread) before every index
//! file is written, so all entries up to the newest flushed version are durable. Entries after it are rebuilt from the value log on
//! replay, so `open` drops them (and any torn tail) and lets the replay append them again.

use std::path::{Path, PathBuf};

use letus_verify::{Hash, TrieId, Version};

use crate::error::{Error, Result};
use crate::fsutil::{
    self, check_log_header, crc, log_header, open_rw, u32_at, u64_at, AppendFile, LOG_HEADER_LEN,
};
use crate::storage::{FileRef, Storage};

const MAGIC: &[u8; 8] = b"LETUSRTS";
const FORMAT: u32 = 1;
const HEADER_LEN: u64 = LOG_HEADER_LEN as u64;
const ENTRY_LEN: usize = 56;

/// One entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RootEntry {
    /// The commit version.
    pub version: Version,
    /// The trie.
    pub tid: TrieId,
    /// Its root after the commit.
    pub root: Hash,
    /// The version of its root page after the commit.
    pub page_version: Version,
}

/// The open roots log.
pub struct RootsLog {
    path: PathBuf,
    file: AppendFile,
    buf: Vec<u8>,
}

impl RootsLog {
    /// Opens (or creates) the log and returns the durable entries with `version <= keep_up_to`; everything after
    /// them is cut off. An entry that fails its checksum before `keep_up_to` is reached is corruption.
    pub fn open(
        fs: &dyn Storage,
        dir: &Path,
        keep_up_to: Option<Version>,
    ) -> Result<(RootsLog, Vec<RootEntry>)> {
        let (path, file, bytes) = open_file(fs, dir)?;
        let mut entries = Vec::new();
        let mut end = HEADER_LEN;
        for (i, e) in bytes[HEADER_LEN as usize..].chunks(ENTRY_LEN).enumerate() {
            let offset = HEADER_LEN + (i * ENTRY_LEN) as u64;
            let decoded = decode(e);
            let Some(entry) = decoded else {
                // A torn or damaged entry: acceptable only beyond the durable prefix.
                if keep_up_to
                    .is_some_and(|k| entries.last().is_none_or(|l: &RootEntry| l.version < k))
                {
                    return Err(Error::corrupt(
                        &path,
                        offset,
                        "roots log entry fails its checksum",
                    ));
                }
                break;
            };
            if keep_up_to.is_none_or(|k| entry.version > k) {
                break;
            }
            entries.push(entry);
            end = offset + ENTRY_LEN as u64;
        }
        if let Some(k) = keep_up_to {
            if entries.last().is_none_or(|l| l.version < k) {
                return Err(Error::corrupt(
                    &path,
                    end,
                    format!("roots log ends before flushed version {k}"),
                ));
            }
            // Every commit writes an entry for every trie that has a root, and tries are never dropped: a trie
            // with an entry before `k` has one at `k`. The entries of `k` were fsynced before its index file was
            // written, so one missing there is damage (a checksum failure inside `k`'s entries that the loop
            // above took for a torn append after them), not a torn tail. (An entry of a trie created at `k`
            // itself cannot be told apart this way.)
            let at_k: std::collections::BTreeSet<TrieId> = entries
                .iter()
                .filter(|e| e.version == k)
                .map(|e| e.tid)
                .collect();
            if let Some(e) = entries.iter().find(|e| !at_k.contains(&e.tid)) {
                return Err(Error::corrupt(
                    &path,
                    end,
                    format!(
                        "roots log has no entry of trie {} at flushed version {k} (damaged)",
                        e.tid
                    ),
                ));
            }
        }
        Ok((RootsLog::cut_at(path, file, end)?, entries))
    }

    /// The log with its file cut (fsynced) at `end`, where the next append goes.
    fn cut_at(path: PathBuf, file: FileRef, end: u64) -> Result<RootsLog> {
        let mut file = AppendFile { file, end };
        file.cut(end).map_err(|e| Error::io(&path, e))?;
        Ok(RootsLog {
            path,
            file,
            buf: Vec::new(),
        })
    }

    /// Opens (or creates) a roots log that is its own record of what is durable (a sharding router's): the entries
    /// up to the first one that fails its checksum, then those after it whose checksums hold (what tells a torn
    /// last append from damage in the middle of the log: the caller decides). Nothing is cut: the caller cuts
    /// ([`RootsLog::cut_to`]) before it appends, and fsyncs ([`RootsLog::sync`]) before it acknowledges.
    pub fn open_all(
        fs: &dyn Storage,
        dir: &Path,
    ) -> Result<(RootsLog, Vec<RootEntry>, Vec<RootEntry>)> {
        let (path, file, bytes) = open_file(fs, dir)?;
        let mut chunks = bytes[HEADER_LEN as usize..].chunks(ENTRY_LEN);
        let entries: Vec<RootEntry> = chunks.by_ref().map_while(decode).collect();
        let after: Vec<RootEntry> = chunks.filter_map(decode).collect();
        let end = HEADER_LEN + (entries.len() * ENTRY_LEN) as u64;
        Ok((
            RootsLog {
                path,
                file: AppendFile { file, end },
                buf: Vec::new(),
            },
            entries,
            after,
        ))
    }

    /// Cuts the file after its first `entries` entries (fsynced), dropping anything buffered: the next append goes
    /// there.
    pub fn cut_to(&mut self, entries: usize) -> Result<()> {
        self.buf.clear();
        let end = HEADER_LEN + (entries * ENTRY_LEN) as u64;
        self.file.cut(end).map_err(|e| Error::io(&self.path, e))
    }

    /// Writes buffered entries and fsyncs the file.
    pub fn sync(&mut self) -> Result<()> {
        self.write()?;
        self.file
            .file
            .sync_data()
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Buffers one entry.
    pub fn push(&mut self, e: &RootEntry) {
        let start = self.buf.len();
        self.buf.extend_from_slice(&e.version.to_le_bytes());
        self.buf.extend_from_slice(&e.tid.to_le_bytes());
        self.buf.extend_from_slice(&e.root.0);
        self.buf.extend_from_slice(&e.page_version.to_le_bytes());
        let c = crc(&self.buf[start..]);
        self.buf.extend_from_slice(&c.to_le_bytes());
    }

    /// Writes buffered entries (no fsync); returns the bytes written.
    pub fn write(&mut self) -> Result<u64> {
        let n = self.buf.len() as u64;
        self.file
            .append(&self.buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.buf.clear();
        Ok(n)
    }

    /// Writes buffered entries (no fsync) and returns a second handle of the file, for a flush that fsyncs it off
    /// the commit path before its index file is written; also the bytes written.
    pub fn handle_to_sync(&mut self) -> Result<(FileRef, u64)> {
        let n = self.write()?;
        Ok((self.file.file.clone(), n))
    }

    /// Size of the file.
    pub fn disk_bytes(&self) -> u64 {
        self.file.end
    }
}

/// Opens (creating it if missing) `dir/roots.log` and reads it whole, its header checked.
fn open_file(fs: &dyn Storage, dir: &Path) -> Result<(PathBuf, FileRef, Vec<u8>)> {
    let path = dir.join("roots.log");
    if !fsutil::is_file(fs, &path)? {
        // Created whole under a temporary name: a crash or a failed write during creation never leaves a
        // `roots.log` with a cut header (which would be corruption at every open).
        fsutil::write_whole_file(fs, dir, "roots.log", &log_header(MAGIC, FORMAT))?;
    }
    let file = open_rw(fs, &path)?;
    let bytes = fs.read(&path).map_err(|e| Error::io(&path, e))?;
    check_log_header(&path, &bytes, MAGIC, FORMAT, "roots log")?;
    Ok((path, file, bytes))
}

fn decode(e: &[u8]) -> Option<RootEntry> {
    if e.len() != ENTRY_LEN {
        return None;
    }
    let stored = u32_at(e, 52)?;
    if crc(e.get(..52)?) != stored {
        return None;
    }
    Some(RootEntry {
        version: u64_at(e, 0)?,
        tid: u32_at(e, 8)?,
        root: Hash(e.get(12..44)?.try_into().ok()?),
        page_version: u64_at(e, 44)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Local;

    fn entry(version: Version, tid: TrieId) -> RootEntry {
        RootEntry {
            version,
            tid,
            root: Hash([version as u8; 32]),
            page_version: 0,
        }
    }

    #[test]
    fn open_all_keeps_every_whole_entry_and_reports_what_follows_a_damaged_one() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, entries, after) = RootsLog::open_all(&Local, dir.path()).unwrap();
        assert!(entries.is_empty() && after.is_empty());
        let written = [entry(1, 0), entry(2, 0), entry(2, 1)];
        for e in &written {
            log.push(e);
        }
        log.sync().unwrap();
        drop(log);
        let path = dir.path().join("roots.log");
        let whole = std::fs::metadata(&path).unwrap().len();
        // A torn append: half of the next entry. Nothing is cut until the caller says so.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &[7u8; ENTRY_LEN / 2]).unwrap();
        drop(f);
        let (mut log, entries, after) = RootsLog::open_all(&Local, dir.path()).unwrap();
        assert_eq!(entries, written);
        assert!(after.is_empty());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            whole + ENTRY_LEN as u64 / 2
        );
        log.cut_to(entries.len()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        // Appends go on where the whole entries end; a damaged entry ends what is kept, and the whole entries
        // after it are reported apart.
        log.push(&entry(3, 0));
        log.sync().unwrap();
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        let second = HEADER_LEN as usize + ENTRY_LEN;
        bytes[second + 3] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let (_, entries, after) = RootsLog::open_all(&Local, dir.path()).unwrap();
        assert_eq!(entries, written[..1]);
        assert_eq!(after, [written[2], entry(3, 0)]);
    }

    /// Found by review: damage to an entry of the flushed version other than its first was taken for a torn
    /// append after it, and the log was cut there, losing that trie's root at the flushed version for good.
    #[test]
    fn damage_inside_the_flushed_version_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = RootsLog::open(&Local, dir.path(), None).unwrap();
        for e in [
            entry(1, 0),
            entry(1, 1),
            entry(2, 0),
            entry(2, 1),
            entry(3, 0),
        ] {
            log.push(&e);
        }
        log.sync().unwrap();
        drop(log);
        let path = dir.path().join("roots.log");
        let whole = std::fs::read(&path).unwrap();
        // The last entry (of version 3, after the flushed 2) torn: cut.
        let mut bytes = whole.clone();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let (_, entries) = RootsLog::open(&Local, dir.path(), Some(2)).unwrap();
        assert_eq!(entries.len(), 4);
        // Trie 1's entry at the flushed version 2 damaged: corruption, and nothing cut.
        let mut bytes = whole.clone();
        bytes[HEADER_LEN as usize + 3 * ENTRY_LEN + 5] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            RootsLog::open(&Local, dir.path(), Some(2)),
            Err(Error::Corrupt { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
