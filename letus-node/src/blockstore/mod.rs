//! The block store: the raw bytes of every block, by version, in append-only segment files with checksums.
//!
//! Blocks are appended to the *active* segment (`NNNNNN.seg`, the highest id). Once it is larger than
//! [`BlockStoreOptions::segment_bytes`] it is **sealed**: an index of its records (version, offset, length) is
//! written as a footer, and the next segment is created. A sealed segment is immutable and self-contained: it can
//! be opened alone from its footer without scanning, which is what moving segments to cheaper storage tiers and
//! cutting the tail (deleting the oldest segments) rely on. The byte layout, the write and fsync order and the
//! crash argument are in `letus-node/BLOCKSTORE-FORMAT.md`.
//!
//! Reads (`get`) take `&self` and use positional reads, so many threads can read at once; appends and
//! truncation take `&mut self`.

mod format;
mod recovery;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use letus_core::fsutil;
use letus_core::storage::{FileRef, SharedStorage};
use letus_core::{Error, Result};

pub use format::MAX_BLOCK_BYTES;
use format::RECORD_HEADER_LEN;

/// Options of a [`BlockStore`].
#[derive(Debug, Clone)]
pub struct BlockStoreOptions {
    /// The active segment is sealed, and a new one started, once it is larger than this (default 64 MiB).
    pub segment_bytes: u64,
    /// ... or once it holds this many blocks (default: no such limit). The tail is cut a whole sealed segment at a
    /// time, so a node that keeps the newest N blocks (`max_traceable_blocks`) seals every few blocks: with
    /// segments of bytes alone, a chain of small blocks kept every block of its first 64 MiB.
    pub segment_blocks: Option<u64>,
    /// fsync every append before it returns (default true). Sealing and truncation always fsync.
    pub sync: bool,
    /// Where the segments live (the local file system unless a test injects faults).
    pub storage: SharedStorage,
}

impl Default for BlockStoreOptions {
    fn default() -> Self {
        BlockStoreOptions {
            segment_bytes: 64 << 20,
            segment_blocks: None,
            sync: true,
            storage: letus_core::storage::local(),
        }
    }
}

/// Blocks per block-store segment for a node that keeps the newest `keep` blocks: a quarter of them, at least 4.
/// The tail is cut by whole sealed segments, so the store then holds at most `keep` blocks plus one segment's
/// worth less one, and a seal (a footer written and fsynced, the next file created, the directory fsynced) comes
/// once every `keep / 4` blocks.
pub fn segment_blocks_for(keep: u64) -> u64 {
    (keep / 4).max(4)
}

/// One stored block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    /// The block's version (height).
    pub version: u64,
    /// Hash of the request that carried the block.
    pub request_hash: [u8; 32],
    /// The block's raw bytes.
    pub block: Vec<u8>,
}

/// What [`BlockStore::segments`] reports about one segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The segment id (the number in the file name).
    pub id: u64,
    /// The segment file.
    pub path: PathBuf,
    /// Version of its first block; `None` for an empty active segment.
    pub first_version: Option<u64>,
    /// Version of its last block; `None` for an empty active segment.
    pub last_version: Option<u64>,
    /// Number of blocks in it.
    pub blocks: usize,
    /// True when the segment is sealed (immutable, with its footer index).
    pub sealed: bool,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Where one block record is: see [`BlockStore::locate`].
pub struct BlockLocation {
    version: u64,
    file: FileRef,
    path: PathBuf,
    offset: u64,
    /// At most [`format::MAX_RECORD_LEN`], checked when the segment's index was built.
    len: u64,
}

impl BlockLocation {
    /// Reads the record and checks its checksum and version.
    pub fn read(self) -> Result<BlockRecord> {
        let (version, off) = (self.version, self.offset);
        let mut buf = vec![0u8; self.len as usize];
        fsutil::read_exact_at(&*self.file, &self.path, &mut buf, off)?;
        if !format::record_valid(&buf) {
            return Err(corrupt(
                &self.path,
                off,
                format!(
                    "block record of version {version} fails its checksum or its length ({} bytes expected)",
                    buf.len()
                ),
            ));
        }
        let (v, request_hash, _) = format::record_parts(&buf);
        if v != version {
            return Err(corrupt(
                &self.path,
                off,
                format!("the record holds version {v}, the index says {version}"),
            ));
        }
        buf.drain(..RECORD_HEADER_LEN as usize);
        Ok(BlockRecord {
            version,
            request_hash,
            block: buf,
        })
    }
}

/// One segment file in memory: its open file and its index.
struct Segment {
    id: u64,
    path: PathBuf,
    file: FileRef,
    /// Versions of the records, strictly increasing.
    versions: Vec<u64>,
    /// Offset of each record.
    offsets: Vec<u64>,
    /// End of the records: the footer's offset when sealed, the file length otherwise.
    records_end: u64,
    /// File length.
    len: u64,
    /// The segment has its footer and is immutable.
    sealed: bool,
}

impl Segment {
    /// Whole length of record `i` (at most [`format::MAX_RECORD_LEN`], checked when the index was built).
    fn record_len(&self, i: usize) -> u64 {
        let end = self.offsets.get(i + 1).copied().unwrap_or(self.records_end);
        end - self.offsets[i]
    }
}

/// The block store. See the module documentation.
pub struct BlockStore {
    dir: PathBuf,
    opts: BlockStoreOptions,
    /// Segments by id, contiguous; all but the last are sealed, the last is active (never sealed).
    segments: Vec<Segment>,
    /// A write or fsync failed: appends and truncation refuse until the store is reopened.
    poisoned: bool,
    _lock: letus_core::storage::LockGuard,
}

const LOCK_FILE: &str = "blocks.lock";

/// Path of segment `id` in `dir`: the id in decimal, zero-padded to at least 6 digits, `.seg`.
/// What a sealed segment keeps on the hot disk when it goes cold (see `recovery::tier_pins`).
pub use recovery::tier_pins;

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.seg"))
}

fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, offset: u64, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset,
        what: what.into(),
    }
}

impl BlockStore {
    /// Opens `dir` (created if missing): sealed segments via their footers, the active segment by scanning; a torn
    /// tail of the active segment (a record that fails its checksum or ends mid-record at the end of the file,
    /// or a partly written footer) is truncated. A bad record before valid ones is `Error::Corrupt` (file and
    /// offset). An interrupted sealing is completed: a durable footer gets its next segment created, and an
    /// active segment larger than `segment_bytes` (its footer was torn and cut) or holding `segment_blocks` blocks is
    /// sealed. The directory is locked (`blocks.lock`) while the store is open: a second open returns
    /// `Error::Locked`.
    pub fn open(dir: &Path, opts: BlockStoreOptions) -> Result<BlockStore> {
        let fs = opts.storage.clone();
        fsutil::ensure_dir(&*fs, dir)?;
        let lock = fsutil::lock_dir(&*fs, dir, LOCK_FILE)?;
        let segments = recovery::recover(&*fs, dir)?;
        let mut store = BlockStore {
            dir: dir.to_path_buf(),
            opts,
            segments,
            poisoned: false,
            _lock: lock,
        };
        // A sealing that was interrupted before its footer was durable (or a smaller `segment_bytes` or
        // `segment_blocks` than before): seal now, so that the active segment is never over either after an
        // operation.
        if store.active_is_full() {
            store.seal()?;
        }
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn active(&mut self) -> &mut Segment {
        // `recover` always leaves one active segment, and every operation keeps one.
        self.segments
            .last_mut()
            .expect("the block store always has an active segment")
    }

    /// Appends a block (versions strictly increasing, `Error::VersionNotIncreasing` otherwise; at most
    /// [`MAX_BLOCK_BYTES`], `Error::TooLarge` otherwise) and fsyncs (when `opts.sync`) before returning.
    /// Whether a failed write or fsync left the store refusing appends until [`BlockStore::reopen`].
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Opens the directory again (recovery of what is on disk), releasing the lock in between; on an error the
    /// store stays as it was, poisoned.
    pub fn reopen(&mut self) -> Result<()> {
        self.poisoned = true;
        self._lock = Box::new(());
        let opts = self.opts.clone();
        *self = BlockStore::open(&self.dir, opts)?;
        Ok(())
    }

    /// Seals the active segment afterwards if it is larger than `segment_bytes` or holds `segment_blocks` blocks
    /// (write the footer index, fsync,
    /// then create the next segment file and fsync the directory).
    ///
    /// A failed write or fsync poisons the store (`Error::Poisoned` from then on; reads keep working): reopen it.
    /// A block whose append returned an error may or may not be there after the reopen.
    pub fn append(&mut self, version: u64, request_hash: [u8; 32], block: &[u8]) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if block.len() > MAX_BLOCK_BYTES {
            return Err(Error::TooLarge {
                what: "block",
                size: block.len(),
                limit: MAX_BLOCK_BYTES,
            });
        }
        if let Some(last) = self.latest_version() {
            if version <= last {
                return Err(Error::VersionNotIncreasing {
                    requested: version,
                    last,
                });
            }
        }
        let rec = format::encode_record(version, &request_hash, block);
        let sync = self.opts.sync;
        let seg = self.active();
        let at = seg.records_end;
        let written = seg.file.write_all_at(&rec, at).and_then(|()| {
            if sync {
                seg.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            let path = seg.path.clone();
            self.poisoned = true;
            return Err(io_err(&path, e));
        }
        seg.versions.push(version);
        seg.offsets.push(at);
        seg.records_end = at + rec.len() as u64;
        seg.len = seg.records_end;
        if self.active_is_full() {
            if let Err(e) = self.seal() {
                self.poisoned = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether the active segment holds a record and is larger than `segment_bytes` or holds `segment_blocks`
    /// blocks: it is sealed then.
    fn active_is_full(&mut self) -> bool {
        let (bytes, blocks) = (self.opts.segment_bytes, self.opts.segment_blocks);
        let seg = self.active();
        !seg.versions.is_empty()
            && (seg.len > bytes || blocks.is_some_and(|n| seg.versions.len() as u64 >= n.max(1)))
    }

    /// Seals the active segment (which holds at least one record) and creates the next one.
    fn seal(&mut self) -> Result<()> {
        let dir = self.dir.clone();
        let fs = self.opts.storage.clone();
        let seg = self.active();
        let footer = format::encode_footer(seg.id, seg.records_end, &seg.versions, &seg.offsets);
        seg.file
            .write_all_at(&footer, seg.records_end)
            .and_then(|()| seg.file.sync_data())
            .map_err(|e| io_err(&seg.path, e))?;
        seg.len = seg.records_end + footer.len() as u64;
        seg.sealed = true;
        let next = recovery::create_segment(&*fs, &dir, seg.id + 1)?;
        self.segments.push(next);
        Ok(())
    }

    /// Reads the block stored at `version`; `None` if there is none. The record's checksum, length and version
    /// are checked: a mismatch is `Error::Corrupt` with the segment file and the record's offset.
    pub fn get(&self, version: u64) -> Result<Option<BlockRecord>> {
        self.locate(version).map(BlockLocation::read).transpose()
    }

    /// Where the block of `version` is, without reading it: a caller that holds the block store behind a lock
    /// reads it after letting the lock go (a read from the cold tier can take seconds, and commits need the lock).
    /// The open file stays readable after the segment is cut from the tail (the handle keeps it).
    pub fn locate(&self, version: u64) -> Option<BlockLocation> {
        let si = self
            .segments
            .partition_point(|s| s.versions.last().is_some_and(|&l| l < version));
        let seg = self.segments.get(si)?;
        let i = seg.versions.binary_search(&version).ok()?;
        Some(BlockLocation {
            version,
            file: seg.file.clone(),
            path: seg.path.clone(),
            offset: seg.offsets[i],
            len: seg.record_len(i),
        })
    }

    /// The version of the newest block, `None` when the store is empty.
    pub fn latest_version(&self) -> Option<u64> {
        self.segments
            .iter()
            .rev()
            .find_map(|s| s.versions.last().copied())
    }

    /// The version of the oldest block still stored, `None` when the store is empty.
    pub fn first_version(&self) -> Option<u64> {
        self.segments
            .iter()
            .find_map(|s| s.versions.first().copied())
    }

    /// Removes every block with version > `v` (used at startup to drop blocks whose state commit never
    /// happened). Later segments are deleted whole, newest first, fsyncing the directory after each; then the
    /// segment holding the last kept block is cut right after it (its footer too, if it was sealed: it becomes
    /// the active segment) and fsynced. Idempotent: after a crash in the middle, calling it again finishes it.
    pub fn truncate_after(&mut self, v: u64) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if self.latest_version().is_none_or(|l| l <= v) {
            return Ok(());
        }
        let r = self.truncate_inner(v);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    fn truncate_inner(&mut self, v: u64) -> Result<()> {
        // The segment that keeps the last block <= v (the first segment when no block is kept).
        let mut t = self
            .segments
            .iter()
            .rposition(|s| s.versions.first().is_some_and(|&f| f <= v))
            .unwrap_or(0);
        let mut keep = self.segments[t].versions.partition_point(|&x| x <= v);
        if self.segments[t].sealed
            && keep == self.segments[t].versions.len()
            && t + 1 < self.segments.len()
        {
            // All of t is kept; the cut is at the start of the next segment (which exists: a later block is > v).
            t += 1;
            keep = 0;
        }
        while self.segments.len() > t + 1 {
            if let Some(seg) = self.segments.pop() {
                let path = seg.path.clone();
                drop(seg);
                fsutil::remove_file(&*self.opts.storage, &path)?;
                fsutil::sync_dir(&*self.opts.storage, &self.dir)?;
            }
        }
        let fs = self.opts.storage.clone();
        let seg = self.active();
        let cut = seg.offsets.get(keep).copied().unwrap_or(seg.records_end);
        if seg.sealed {
            seg.file = fsutil::open_rw(&*fs, &seg.path)?;
        }
        seg.file
            .set_len(cut)
            .and_then(|()| seg.file.sync_all())
            .map_err(|e| io_err(&seg.path, e))?;
        seg.versions.truncate(keep);
        seg.offsets.truncate(keep);
        seg.records_end = cut;
        seg.len = cut;
        seg.sealed = false;
        Ok(())
    }

    /// Cuts the tail: deletes the sealed segments whose blocks are all below `below`, lowest id first, fsyncing
    /// the directory after each (BLOCKSTORE-FORMAT.md §7: a crash leaves the ids contiguous from the new lowest).
    /// The active segment is never deleted, so blocks below `below` may stay in the oldest segment left. Returns
    /// the segments and bytes removed. A failure poisons the store as a write would.
    pub fn cut_tail(&mut self, below: u64) -> Result<(u64, u64)> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let (mut segments, mut bytes) = (0, 0);
        while self.segments.len() > 1
            && self.segments[0].sealed
            && self.segments[0].versions.last().is_some_and(|&l| l < below)
        {
            let seg = self.segments.remove(0);
            let (path, len) = (seg.path.clone(), seg.len);
            drop(seg);
            let r = fsutil::remove_file(&*self.opts.storage, &path)
                .and_then(|()| fsutil::sync_dir(&*self.opts.storage, &self.dir));
            if let Err(e) = r {
                self.poisoned = true;
                return Err(e);
            }
            segments += 1;
            bytes += len;
        }
        Ok((segments, bytes))
    }

    /// Whether the tail was ever cut (the oldest segment is not the first one written): blocks below
    /// [`BlockStore::first_version`] were stored once and are gone.
    pub fn tail_cut(&self) -> bool {
        self.segments.first().is_some_and(|s| s.id > 1)
    }

    /// Total size of the segment files in bytes.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// The segment files, oldest first; the last one is the active segment.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|s| SegmentInfo {
                id: s.id,
                path: s.path.clone(),
                first_version: s.versions.first().copied(),
                last_version: s.versions.last().copied(),
                blocks: s.versions.len(),
                sealed: s.sealed,
                bytes: s.len,
            })
            .collect()
    }
}
