//! VDLS, the Versioned Data Logging Stream: an append-only log of data files holding `(version, tid, key, value)`
//! records. Trie leaves store a record's [`Location`]; each record carries the location of the same key's previous
//! record, so a key's history can be walked backwards ([`Vdls::history`]).
//!
//! The log is also the engine's write-ahead log. A commit appends the Put/Delete records of one version, then a
//! Commit record, writes them with one positional write and fdatasyncs: a commit is durable exactly when its
//! Commit record is on disk. [`Vdls::open`] replays the complete commit groups after a given position and cuts off
//! a torn or uncommitted tail. The byte layout, the checksums and the crash argument are in `FORMAT.md §1`.
//!
//! Invariants (relied on by recovery, see `recovery.rs`):
//! - data files are `NNNNNN.vdl` with ids contiguous from 1, except for the ids of files value-log GC deleted,
//!   which `collected` lists (`collected.rs`); only the last one is ever written to; a sealed file GC compacted
//!   is `NNNNNN.vdc` instead (`compacted.rs`), read through its table of original offsets;
//! - a commit group (records + Commit record) never spans two files;
//! - a data file is complete and fsynced before the next one is created, and the next one's header records its
//!   final length;
//! - nothing is ever overwritten: bytes past the durable end of the last file were never written before (a
//!   recovery truncation is fsynced before any new append).

pub(crate) mod collected;
pub(crate) mod compacted;
pub(crate) mod record;
mod recovery;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::fsutil;
use crate::metrics::Counters;
use crate::storage::{FileRef, SharedStorage};

use record::{Header, Update};
pub use record::{
    FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_KEY_BYTES, MAX_PAYLOAD_BYTES, MAX_VALUE_BYTES,
};

/// Where a record is: data file id, byte offset, and the whole encoded record length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// Data file id (file `NNNNNN.vdl`, ids start at 1).
    pub file_id: u32,
    /// Byte offset of the record in the file.
    pub offset: u64,
    /// Length of the whole encoded record.
    pub len: u32,
}

/// The encoded length of a Put record with a key of `key_len` and a value of `value_len` bytes (its link to the
/// previous record has a fixed size, so the length is known before the link is).
pub fn put_record_len(key_len: usize, value_len: usize) -> u32 {
    u32::try_from(record::PUT_HEADER_LEN + key_len + value_len).unwrap_or(u32::MAX)
}

/// A point in the log: the byte `offset` of data file `file_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Data file id.
    pub file_id: u32,
    /// Byte offset in that file.
    pub offset: u64,
}

impl Position {
    /// The start of the log: the first record of the first file.
    pub const START: Position = Position {
        file_id: 1,
        offset: HEADER_LEN,
    };
}

/// One record of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// `key` has `value` in trie `tid` from `version` on.
    Put {
        /// The version that wrote it.
        version: u64,
        /// The trie.
        tid: u32,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// The same key's previous record, if any.
        prev: Option<Location>,
    },
    /// `key` is deleted from trie `tid` at `version`.
    Delete {
        /// The version that wrote it.
        version: u64,
        /// The trie.
        tid: u32,
        /// The key.
        key: Vec<u8>,
        /// The same key's previous record, if any.
        prev: Option<Location>,
    },
    /// Closes the group of records of `version`; the group is durable once this record is on disk.
    Commit {
        /// The committed version.
        version: u64,
        /// Engine data stored with the commit (opaque to VDLS).
        payload: Vec<u8>,
    },
}

impl Record {
    /// The record's version.
    pub fn version(&self) -> u64 {
        match self {
            Record::Put { version, .. }
            | Record::Delete { version, .. }
            | Record::Commit { version, .. } => *version,
        }
    }

    /// The key of a Put or Delete.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Record::Put { key, .. } | Record::Delete { key, .. } => Some(key),
            Record::Commit { .. } => None,
        }
    }

    /// The previous record of the same key (Put or Delete).
    pub fn prev(&self) -> Option<Location> {
        match self {
            Record::Put { prev, .. } | Record::Delete { prev, .. } => *prev,
            Record::Commit { .. } => None,
        }
    }
}

/// Options of [`Vdls::open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VdlsOptions {
    /// Start a new data file at the next commit once the active one is larger than this (default 256 MiB).
    pub file_bytes: u64,
    /// fdatasync at every commit (default true). `false` only for benchmarks of the CPU path: then a commit is
    /// not durable against an OS crash, and such a crash may even be reported as corruption at open.
    pub sync: bool,
    /// Recovery takes the log to end here at the latest, and cuts what follows as it cuts a torn tail. A reopen
    /// in the same process after a failed write knows where its last durable group ended: what the page cache
    /// holds after it may never reach the disk (after a failed fsync the kernel may have marked those pages
    /// clean), so it must not be replayed and served. `None` (the default): the whole log.
    pub up_to: Option<Position>,
}

impl Default for VdlsOptions {
    fn default() -> Self {
        VdlsOptions {
            file_bytes: 256 * 1024 * 1024,
            sync: true,
            up_to: None,
        }
    }
}

/// One data file. `len` is its committed length: every byte below it is durable (or, with `sync: false`,
/// written), and no byte at or above it is part of the log.
#[derive(Debug)]
struct DataFile {
    id: u32,
    path: PathBuf,
    file: FileRef,
    /// Committed length (of the original file, for a compacted one: what locations are checked against).
    len: u64,
    /// A compacted file's table and size on disk.
    compacted: Option<(Arc<compacted::Remap>, u64)>,
}

/// The uncommitted group being buffered.
#[derive(Debug, Default)]
struct Group {
    /// Whether `file_id`/`start` have been chosen (the first append or the commit of an empty group chooses).
    open: bool,
    /// The file the group will be written to: the active file, or the next one when rotating.
    file_id: u32,
    /// Offset of the group's first record in that file.
    start: u64,
    /// The version of the buffered records (all equal).
    version: Option<u64>,
    /// Number of buffered Put/Delete records.
    records: u32,
    /// Bytes of the group already written to the file by [`Vdls::spill`] (not committed: the file's committed
    /// length stays at `start` until the Commit record is durable).
    spilled: u64,
    /// The encoded records not yet written.
    buf: Vec<u8>,
}

/// A data file as readers share it: `len` is its committed length, advanced by the writer only after the bytes
/// below it are written (and fdatasynced), so a reader that sees a length finds every record below it complete.
#[derive(Debug)]
struct SharedFile {
    id: u32,
    path: PathBuf,
    file: FileRef,
    len: AtomicU64,
    /// A compacted file's table and size on disk (its `len` is the original file's).
    compacted: Option<(Arc<compacted::Remap>, u64)>,
}

impl SharedFile {
    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// Bytes on disk.
    fn bytes(&self) -> u64 {
        self.compacted.as_ref().map_or_else(|| self.len(), |c| c.1)
    }
}

/// One data file's sizes, as [`VdlsReader::file_sizes`] reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSize {
    /// The data file id.
    pub id: u32,
    /// Committed length of the data file as written (a compacted file's original length).
    pub len: u64,
    /// Bytes of records that may be live: after the header, or a compacted file's kept records.
    pub records: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Whether GC compacted it.
    pub compacted: bool,
}

/// The read side of the log, shared by the writer and every reader (`Clone` is cheap). Reads `pread` committed
/// records and never wait for a commit: the file list is behind a lock held only to look a file up or to add one
/// at a rotation.
#[derive(Clone)]
pub struct VdlsReader {
    dir: PathBuf,
    fs: SharedStorage,
    counters: Arc<Counters>,
    /// Data files by ascending id; the ids missing are in `collected`. The last one is the active one. Never
    /// empty.
    files: Arc<RwLock<Vec<Arc<SharedFile>>>>,
    /// The ids of the files GC deleted (the `collected` list as on disk). Held only to read or replace it.
    collected: Arc<RwLock<BTreeSet<u32>>>,
    /// Held by a deletion from start to end (two deletions never interleave).
    deleting: Arc<std::sync::Mutex<()>>,
}

/// What [`VdlsReader::compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Bytes on disk of the file before.
    pub before: u64,
    /// And after.
    pub after: u64,
    /// Records copied.
    pub records: u64,
    /// Their bytes.
    pub copied: u64,
}

/// The log. Appends and commits take `&mut self` (one writer); reads go through [`Vdls::reader`], which any
/// number of threads can use while a commit is being written.
pub struct Vdls {
    fs: SharedStorage,
    dir: PathBuf,
    opts: VdlsOptions,
    counters: Arc<Counters>,
    reader: VdlsReader,
    /// Position after the last committed record; always `(active id, active len)`.
    end: Position,
    /// Version of the last commit seen (replayed or written); `None` when unknown (nothing replayed yet).
    last_version: Option<u64>,
    group: Group,
    /// Set when a write, fsync or file creation failed: nothing can be assumed about the file any more.
    poisoned: bool,
}

impl std::fmt::Debug for Vdls {
    // Not derived: the group buffer can hold megabytes of record bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vdls")
            .field("dir", &self.dir)
            .field("opts", &self.opts)
            .field("files", &self.reader.file_count())
            .field("end", &self.end)
            .field("last_version", &self.last_version)
            .field("buffered_records", &self.group.records)
            .field("buffered_bytes", &self.group.buf.len())
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

impl VdlsReader {
    /// Reads and checks one committed record with one `pread`. A checksum or parse failure, an unknown file id
    /// or a location outside the committed part of a file is [`Error::Corrupt`] naming the file and offset.
    pub fn read(&self, loc: Location) -> Result<Record> {
        let (f, at) = self.locate(loc)?;
        let mut buf = vec![0u8; loc.len as usize];
        fsutil::read_exact_at(&*f.file, &f.path, &mut buf, at)?;
        Counters::add(&self.counters.value_reads, 1);
        Counters::add(&self.counters.bytes_read, u64::from(loc.len));
        decode_at(&f, loc, &buf)
    }

    /// The file holding `loc` and the offset its record is stored at, after checking that `loc` lies inside the
    /// file's committed records.
    fn locate(&self, loc: Location) -> Result<(Arc<SharedFile>, u64)> {
        let f = self.file(loc.file_id, loc.offset)?;
        let len = loc.len as usize;
        if !record::len_in_bounds(len) {
            return Err(Error::corrupt(
                &f.path,
                loc.offset,
                format!("location length {len} is not a possible record length"),
            ));
        }
        let committed = f.len();
        let in_file = loc.offset >= HEADER_LEN
            && loc
                .offset
                .checked_add(u64::from(loc.len))
                .is_some_and(|e| e <= committed);
        if !in_file {
            return Err(Error::corrupt(
                &f.path,
                loc.offset,
                format!(
                    "location of {len} bytes is outside the committed records of the file ({committed} bytes)"
                ),
            ));
        }
        // A compacted file keeps the records at their original offsets in name only.
        let at = match &f.compacted {
            None => loc.offset,
            Some((remap, _)) => match remap.find(loc.offset) {
                Some(e) if e.len == loc.len => e.at,
                Some(_) => {
                    return Err(Error::corrupt(
                        &f.path,
                        loc.offset,
                        "location length differs from the kept record's",
                    ))
                }
                // Not kept: no retained version reads it (a read below the prune boundary that raced GC).
                None => {
                    return Err(Error::Collected {
                        file_id: loc.file_id,
                    })
                }
            },
        };
        Ok((f, at))
    }

    /// Reads many records with few `pread`s: the records are read in stored order, and records of one file
    /// whose stored bytes lie at most [`COALESCE_GAP`] apart are read together, up to [`COALESCE_BYTES`] a read
    /// (a bulk-loaded state's values lie in key order, so a walk's values are mostly neighbours). Each result is
    /// what [`VdlsReader::read`] of that location gives; they are in the order of `locs`.
    pub fn read_in_order(&self, locs: &[Location]) -> Vec<Result<Record>> {
        let mut out: Vec<Option<Result<Record>>> = (0..locs.len()).map(|_| None).collect();
        let mut placed: Vec<(u32, u64, usize, Arc<SharedFile>)> = Vec::with_capacity(locs.len());
        for (i, loc) in locs.iter().enumerate() {
            match self.locate(*loc) {
                Ok((f, at)) => placed.push((loc.file_id, at, i, f)),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        // A compaction can replace a file (same id, other offsets) between two `locate`s: a run reads one
        // version of one file.
        placed.sort_unstable_by_key(|p| (p.0, Arc::as_ptr(&p.3) as usize, p.1));
        let mut buf = Vec::new();
        let mut run_start = 0;
        while run_start < placed.len() {
            let (id, start, first, f) = &placed[run_start];
            let mut end = start + u64::from(locs[*first].len);
            let mut run_end = run_start + 1;
            while let Some((next_id, at, i, next_f)) = placed.get(run_end) {
                let next_end = at + u64::from(locs[*i].len);
                if next_id != id
                    || !Arc::ptr_eq(next_f, f)
                    || *at > end + COALESCE_GAP
                    || next_end - start > COALESCE_BYTES
                {
                    break;
                }
                end = end.max(next_end);
                run_end += 1;
            }
            buf.resize((end - start) as usize, 0);
            match fsutil::read_exact_at(&*f.file, &f.path, &mut buf, *start) {
                Ok(()) => {
                    Counters::add(&self.counters.value_reads, 1);
                    Counters::add(&self.counters.bytes_read, end - start);
                    for (_, at, i, f) in &placed[run_start..run_end] {
                        let from = (at - start) as usize;
                        let bytes = &buf[from..from + locs[*i].len as usize];
                        out[*i] = Some(decode_at(f, locs[*i], bytes));
                    }
                }
                Err(_) => {
                    // A failed read fails only its own records: each is read again alone, so that its error is
                    // the one a single read of it gives.
                    for (_, _, i, _) in &placed[run_start..run_end] {
                        out[*i] = Some(self.read(locs[*i]));
                    }
                }
            }
            run_start = run_end;
        }
        // Every slot was filled above, by its `locate` error or by its run.
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(invalid(&self.dir, "a location was left unread"))))
            .collect()
    }

    /// Reads several records in parallel (rayon); the results are in the order of `locs`.
    pub fn read_many(&self, locs: &[Location]) -> Vec<Result<Record>> {
        locs.par_iter().map(|l| self.read(*l)).collect()
    }

    /// Total bytes of all data files (committed part).
    pub fn disk_bytes(&self) -> u64 {
        self.files().iter().map(|f| f.bytes()).sum()
    }

    /// Walks a key's history backwards from `loc`: the record at `loc`, then its prev, and so on, at most `limit`
    /// records, newest first. Every link must lead to an earlier Put/Delete of the same key and trie with a
    /// version not above the newer one's; otherwise the walk fails with [`Error::Corrupt`]. (Links always point
    /// strictly backwards, so the walk terminates even without `limit`.)
    pub fn history(&self, loc: Location, limit: usize) -> Result<Vec<(Location, Record)>> {
        self.history_down_to(loc, limit, None, u64::MAX)
    }

    /// [`VdlsReader::history`] that stops after the first record of a version at or below `floor` (the record
    /// holding the key's state at a prune boundary: what lies behind it may be gone), and before a record that
    /// would take the records read past `max_bytes` (their encoded lengths; the first record is always read, so
    /// that a walk makes progress whatever the bound).
    pub fn history_down_to(
        &self,
        loc: Location,
        limit: usize,
        floor: Option<u64>,
        max_bytes: u64,
    ) -> Result<Vec<(Location, Record)>> {
        let mut out: Vec<(Location, Record)> = Vec::new();
        let mut bytes = 0u64;
        let mut next = Some(loc);
        while let Some(l) = next {
            if out.len() >= limit {
                break;
            }
            bytes = bytes.saturating_add(u64::from(l.len));
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            if let (Some(f), Some((_, newer))) = (floor, out.last()) {
                if newer.version() <= f {
                    break;
                }
            }
            let rec = self.read(l)?;
            if let Some((_, newer)) = out.last() {
                let same = rec.key().is_some()
                    && rec.key() == newer.key()
                    && tid_of(&rec) == tid_of(newer)
                    && rec.version() <= newer.version();
                if !same {
                    let path = file_path(&self.dir, l.file_id);
                    return Err(Error::corrupt(
                        path,
                        l.offset,
                        "history link leads to a record of another key, trie or a newer version",
                    ));
                }
            }
            next = rec.prev();
            out.push((l, rec));
        }
        Ok(out)
    }

    /// The data file with id `id`; an unknown id is corruption at `offset` of the file that would have it, a
    /// collected one [`Error::Collected`].
    fn file(&self, id: u32, offset: u64) -> Result<Arc<SharedFile>> {
        let files = self.files();
        if let Ok(i) = files.binary_search_by_key(&id, |f| f.id) {
            if let Some(f) = files.get(i) {
                return Ok(f.clone());
            }
        }
        drop(files);
        if self.is_collected(id) {
            return Err(Error::Collected { file_id: id });
        }
        Err(Error::corrupt(
            file_path(&self.dir, id),
            offset,
            "no such data file",
        ))
    }

    /// Whether GC deleted data file `id`.
    pub fn is_collected(&self, id: u32) -> bool {
        self.collected
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&id)
    }

    /// Calls `f` with every committed Put and Delete record of data file `id` (the active one included, up to its
    /// last commit), in file order, reading it a MiB at a time, and whether it is a moved copy (kinds 4 and 5); a
    /// compacted file's kept records at their original locations. Any damage is [`Error::Corrupt`]: the committed
    /// part of a file is complete.
    pub fn scan_file(
        &self,
        id: u32,
        f: &mut dyn FnMut(Location, &Record, bool) -> Result<()>,
    ) -> Result<()> {
        let file = self.file(id, HEADER_LEN)?;
        if let Some((remap, size)) = &file.compacted {
            let mut r = recovery::Reader::new(&*file.file, &file.path, *size, &self.counters);
            for e in remap.entries() {
                let bytes = r.get(e.at, e.len as usize)?;
                match record::decode(bytes, id, e.original) {
                    Ok(d) => f(
                        Location {
                            file_id: id,
                            offset: e.original,
                            len: e.len,
                        },
                        &d.rec,
                        d.moved,
                    )?,
                    Err(record::DecodeError::Damaged(w) | record::DecodeError::Malformed(w)) => {
                        return Err(Error::corrupt(&file.path, e.at, w))
                    }
                }
            }
            return Ok(());
        }
        let len = file.len();
        let mut r = recovery::Reader::new(&*file.file, &file.path, len, &self.counters);
        let mut o = HEADER_LEN;
        while o < len {
            match recovery::next_record(&mut r, id, o)? {
                recovery::Step::Record(d, n) => {
                    if d.group.is_none() {
                        let loc = Location {
                            file_id: id,
                            offset: o,
                            len: n,
                        };
                        f(loc, &d.rec, d.moved)?;
                    }
                    o += u64::from(n);
                }
                recovery::Step::Damaged(why) => return Err(Error::corrupt(&file.path, o, why)),
            }
        }
        Ok(())
    }

    /// Compacts sealed data file `id` (FORMAT.md §1.6): writes `NNNNNN.vdc` with the Put and Delete records whose
    /// original offset `keep` accepts, which must come to `live_bytes` (the caller's accounting: a difference is
    /// [`Error::Corrupt`] and nothing changes), puts it in the file list in place of the file, and removes the
    /// old file. Only the kept records are decoded and checked; the others are skipped by their length fields
    /// (a damaged one would lose the count). The caller guarantees that no retained version reads a record
    /// `keep` refuses. Returns the bytes on disk before and after, and the records and bytes copied.
    pub fn compact(
        &self,
        id: u32,
        keep: &dyn Fn(u64) -> bool,
        live_bytes: u64,
    ) -> Result<Compaction> {
        let _one_at_a_time = self
            .deleting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = {
            let files = self.files();
            if files.last().is_some_and(|f| f.id == id) {
                return Err(invalid(
                    &self.dir,
                    "the active data file cannot be compacted",
                ));
            }
            match files.binary_search_by_key(&id, |f| f.id) {
                Ok(i) => files[i].clone(),
                Err(_) => return Err(invalid(&self.dir, "no such data file to compact")),
            }
        };
        let mut w = compacted::Writer::create(&*self.fs, &self.dir, id, old.len())?;
        let mut records = 0u64;
        let mut take = |original: u64, rec: &[u8], at: u64| -> Result<()> {
            match record::decode(rec, id, original) {
                Ok(d) if d.group.is_none() => {
                    records += 1;
                    w.push(original, rec)
                }
                Ok(_) => Err(Error::corrupt(
                    &old.path,
                    at,
                    "GC's live records name a commit record",
                )),
                Err(record::DecodeError::Damaged(w) | record::DecodeError::Malformed(w)) => {
                    Err(Error::corrupt(&old.path, at, w))
                }
            }
        };
        match &old.compacted {
            Some((remap, size)) => {
                let mut r = recovery::Reader::new(&*old.file, &old.path, *size, &self.counters);
                for e in remap.entries().iter().filter(|e| keep(e.original)) {
                    take(e.original, r.get(e.at, e.len as usize)?, e.at)?;
                }
            }
            None => {
                let len = old.len();
                let mut r = recovery::Reader::new(&*old.file, &old.path, len, &self.counters);
                let mut o = HEADER_LEN;
                while o < len {
                    let n = if len - o >= record::PREFIX_LEN as u64 {
                        record::prefix_len(r.get(o, record::PREFIX_LEN)?).unwrap_or(0)
                    } else {
                        0
                    };
                    if !record::len_in_bounds(n) || n as u64 > len - o {
                        return Err(Error::corrupt(
                            &old.path,
                            o,
                            "record length out of bounds in a sealed data file",
                        ));
                    }
                    if keep(o) {
                        take(o, r.get(o, n)?, o)?;
                    }
                    o += n as u64;
                }
            }
        }
        let copied = w.record_bytes();
        if copied != live_bytes {
            return Err(Error::corrupt(
                &old.path,
                0,
                format!(
                    "the records GC keeps come to {copied} bytes, but {live_bytes} are live: not compacted"
                ),
            ));
        }
        let (file, remap, bytes) = w.finish()?;
        Counters::add(&self.counters.bytes_written, bytes);
        let new = Arc::new(SharedFile {
            id,
            path: compacted::path(&self.dir, id),
            file,
            len: AtomicU64::new(old.len()),
            compacted: Some((Arc::new(remap), bytes)),
        });
        {
            let mut files = self
                .files
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Ok(i) = files.binary_search_by_key(&id, |f| f.id) {
                files[i] = new;
            }
        }
        // Reads that looked the old file up keep their handle; the name goes now (a crash before this leaves
        // both names, and `open` keeps the compacted one).
        if old.compacted.is_none() {
            fsutil::remove_file(&*self.fs, &old.path)?;
            fsutil::sync_dir(&*self.fs, &self.dir)?;
        }
        Ok(Compaction {
            before: old.bytes(),
            after: bytes,
            records,
            copied,
        })
    }

    /// The sizes of every data file, ascending by id; the last one is the active file.
    pub fn file_sizes(&self) -> Vec<FileSize> {
        self.files()
            .iter()
            .map(|f| FileSize {
                id: f.id,
                len: f.len(),
                records: f.compacted.as_ref().map_or_else(
                    || f.len().saturating_sub(HEADER_LEN),
                    |(r, _)| r.record_bytes(),
                ),
                bytes: f.bytes(),
                compacted: f.compacted.is_some(),
            })
            .collect()
    }

    /// Deletes data files `ids` (none of them the active file). They are added to the `collected` list, which is
    /// made durable first (the commit point: an open deletes what it lists); then, while the guard `hold` returns
    /// is held, they leave the file list (reads already past the lookup keep their handle); then they are unlinked.
    /// The caller guarantees that no read holding that guard's lock can ask for them any more. Returns the
    /// committed bytes deleted.
    pub fn delete_files<G>(
        &self,
        ids: &BTreeSet<u32>,
        hold: impl FnOnce() -> Result<G>,
    ) -> Result<u64> {
        let _one_at_a_time = self
            .deleting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (active, doomed): (u32, Vec<Arc<SharedFile>>) = {
            let files = self.files();
            (
                files.last().map_or(0, |f| f.id),
                files
                    .iter()
                    .filter(|f| ids.contains(&f.id))
                    .cloned()
                    .collect(),
            )
        };
        if ids.contains(&active) {
            return Err(invalid(&self.dir, "the active data file cannot be deleted"));
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        let mut next = self.collected_ids();
        next.extend(doomed.iter().map(|f| f.id));
        collected::write(&*self.fs, &self.dir, &next)?;
        *self
            .collected
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        {
            let _held = hold()?;
            self.files
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|f| !ids.contains(&f.id));
        }
        let mut bytes = 0;
        for f in &doomed {
            bytes += f.bytes();
            fsutil::remove_file(&*self.fs, &f.path)?;
        }
        fsutil::sync_dir(&*self.fs, &self.dir)?;
        Ok(bytes)
    }

    /// The ids of the data files GC deleted.
    pub fn collected_ids(&self) -> BTreeSet<u32> {
        self.collected
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn files(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<SharedFile>>> {
        // Nothing panics while holding the lock; a poisoned lock still holds a valid list.
        self.files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn file_count(&self) -> usize {
        self.files().len()
    }
}

/// Neighbouring records of one file whose stored bytes are at most this far apart are read with one `pread`
/// by [`VdlsReader::read_in_order`]: reading a gap this small costs less than another system call.
const COALESCE_GAP: u64 = 4096;

/// The most bytes one `pread` of [`VdlsReader::read_in_order`] reads (its buffer's bound).
const COALESCE_BYTES: u64 = 1 << 20;

/// Decodes and checks the record of `loc`, whose stored bytes are `bytes`.
fn decode_at(f: &SharedFile, loc: Location, bytes: &[u8]) -> Result<Record> {
    match record::decode(bytes, loc.file_id, loc.offset) {
        Ok(d) => Ok(d.rec),
        Err(record::DecodeError::Damaged(w) | record::DecodeError::Malformed(w)) => {
            Err(Error::corrupt(&f.path, loc.offset, w))
        }
    }
}

fn file_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:06}.vdl"))
}

/// A misuse of the API (not a disk problem).
fn invalid(dir: &Path, msg: impl Into<String>) -> Error {
    Error::io(dir, io::Error::new(io::ErrorKind::InvalidInput, msg.into()))
}

impl Vdls {
    /// Opens the log in `dir` (created if missing) and replays every record of every complete commit group after
    /// `from`, in log order, the Commit record included. A torn or uncommitted tail is cut (file truncated and
    /// fsynced, later files removed, directory fsynced); damage before the last complete commit is
    /// [`Error::Corrupt`]. `from` must be [`Position::START`] or a position returned by [`Vdls::commit`] /
    /// [`Vdls::end`]. The rule that separates a torn tail from corruption is in `FORMAT.md §1`.
    pub fn open(
        fs: &SharedStorage,
        dir: &Path,
        opts: VdlsOptions,
        counters: Arc<Counters>,
        from: Position,
        replay: impl FnMut(Location, &Record, bool) -> Result<()>,
    ) -> Result<Vdls> {
        let r = recovery::recover(&**fs, dir, &counters, from, opts.up_to, replay)?;
        let end = Position {
            file_id: r.files.last().map_or(1, |f| f.id),
            offset: r.files.last().map_or(HEADER_LEN, |f| f.len),
        };
        let files = r.files.into_iter().map(|f| Arc::new(f.shared())).collect();
        Ok(Vdls {
            fs: fs.clone(),
            dir: dir.to_path_buf(),
            opts,
            counters: counters.clone(),
            reader: VdlsReader {
                dir: dir.to_path_buf(),
                fs: fs.clone(),
                counters,
                files: Arc::new(RwLock::new(files)),
                collected: Arc::new(RwLock::new(r.collected)),
                deleting: Arc::default(),
            },
            end,
            last_version: r.last_version,
            group: Group::default(),
            poisoned: false,
        })
    }

    /// Buffers a Put or Delete record in memory (nothing is written yet) and returns where it will be once
    /// committed. All records of a group must have the same version, above the last committed one.
    pub fn append(&mut self, rec: &Record) -> Result<Location> {
        let version = rec.version();
        self.append_update(rec, version, false)
    }

    /// Buffers a moved copy of `rec` (a Put or Delete of an earlier version) in the group of `version`: the same
    /// bytes under the moved kind, its version and prev unchanged, so history reads it as the original. Returns
    /// where it will be once committed. Value-log GC of builds before format 8 wrote these; this build compacts
    /// files instead (`compacted.rs`) and only replays them, so this is kept for writing such logs in tests.
    pub fn append_moved(&mut self, rec: &Record, version: u64) -> Result<Location> {
        if rec.version() >= version {
            return Err(invalid(
                &self.dir,
                "a moved record must be older than the group it is moved into",
            ));
        }
        self.append_update(rec, version, true)
    }

    fn append_update(&mut self, rec: &Record, version: u64, moved: bool) -> Result<Location> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let Some(mut u) = Update::of(rec) else {
            return Err(invalid(
                &self.dir,
                "append takes Put or Delete records; use commit",
            ));
        };
        u.moved = moved;
        if u.key.len() > MAX_KEY_BYTES {
            return Err(Error::TooLarge {
                what: "key",
                size: u.key.len(),
                limit: MAX_KEY_BYTES,
            });
        }
        if let Some(v) = u.value {
            if v.len() > MAX_VALUE_BYTES {
                return Err(Error::TooLarge {
                    what: "value",
                    size: v.len(),
                    limit: MAX_VALUE_BYTES,
                });
            }
        }
        self.check_version(version)?;
        if self.group.records == u32::MAX {
            return Err(invalid(&self.dir, "too many records in one commit group"));
        }
        self.begin_group()?;
        let loc = Location {
            file_id: self.group.file_id,
            offset: self.group.start + self.group.spilled + self.group.buf.len() as u64,
            len: u.encoded_len() as u32,
        };
        if let Some(p) = u.prev {
            // Decoding rejects a prev link that is not strictly before its record (that makes history walks
            // terminate); never write one, or the log would become unreadable.
            if !record::prev_is_before(p, loc.file_id, loc.offset) {
                return Err(invalid(
                    &self.dir,
                    format!("prev {p:?} is not a record location before the new record at {loc:?}"),
                ));
            }
        }
        u.encode(&mut self.group.buf);
        self.group.version = Some(version);
        self.group.records += 1;
        Ok(loc)
    }

    /// The locations that Put or Delete records of encoded lengths `lens` get when they are the next ones
    /// appended to the current group, in this order (see [`put_record_len`]). Opens the group, so the data file
    /// of the group is decided here. A commit uses this to point trie leaves at records before it knows their
    /// links to the previous records.
    pub fn next_locations(&mut self, lens: &[u32]) -> Result<Vec<Location>> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        self.begin_group()?;
        let mut offset = self.group.start + self.group.spilled + self.group.buf.len() as u64;
        let mut out = Vec::with_capacity(lens.len());
        for &len in lens {
            out.push(Location {
                file_id: self.group.file_id,
                offset,
                len,
            });
            offset += u64::from(len);
        }
        Ok(out)
    }

    /// Appends the Commit record for `version`, writes the group, fdatasyncs (when `opts.sync`) and returns the
    /// position just after the Commit record. Once it returns `Ok`, the group survives any crash. A group never
    /// spans two files: rotation happens here, before the group is written, and the new file's creation is made
    /// durable first. Any I/O failure poisons the log (later appends and commits return [`Error::Poisoned`]); a
    /// group whose commit failed may or may not be replayed by the next open.
    pub fn commit(&mut self, version: u64, payload: &[u8]) -> Result<Position> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(Error::TooLarge {
                what: "commit payload",
                size: payload.len(),
                limit: MAX_PAYLOAD_BYTES,
            });
        }
        self.check_version(version)?;
        self.begin_group()?;
        let g = &mut self.group;
        record::encode_commit(&mut g.buf, version, g.start, g.records, payload);
        let group = std::mem::take(&mut self.group);
        match self.write_group(&group) {
            Ok(end) => {
                self.end = end;
                self.last_version = Some(version);
                // Keep the buffer's allocation for the next group.
                let mut buf = group.buf;
                buf.clear();
                self.group = Group {
                    buf,
                    ..Group::default()
                };
                Ok(end)
            }
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    /// Writes the buffered records of the open group to its file now, so that a group of any size needs only a
    /// bounded buffer (a bulk load). They are not committed: readers and recovery see them only once
    /// [`Vdls::commit`] made the group's Commit record durable, and a crash before that leaves a tail that recovery
    /// cuts. Only in the active file (a group that starts a new file keeps its buffer until the commit).
    pub fn spill(&mut self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if !self.group.open || self.group.buf.is_empty() || self.group.file_id != self.end.file_id {
            return Ok(());
        }
        let f = self.reader.files().last().cloned().ok_or(Error::Poisoned)?;
        let at = self.group.start + self.group.spilled;
        if let Err(e) = f.file.write_all_at(&self.group.buf, at) {
            self.poisoned = true;
            return Err(Error::io(&f.path, e));
        }
        Counters::add(&self.counters.bytes_written, self.group.buf.len() as u64);
        self.group.spilled += self.group.buf.len() as u64;
        self.group.buf.clear();
        Ok(())
    }

    /// Bytes of the open group held in memory (not yet written by [`Vdls::spill`]).
    pub fn buffered_bytes(&self) -> usize {
        self.group.buf.len()
    }

    /// Drops the buffered records of the uncommitted group.
    pub fn abort(&mut self) {
        // Spilled records are on disk past the committed end; a new group must not be written over them (nothing
        // is ever overwritten), so the log is reopened first, which cuts them.
        if self.group.spilled > 0 {
            self.poisoned = true;
        }
        let mut buf = std::mem::take(&mut self.group.buf);
        buf.clear();
        self.group = Group {
            buf,
            ..Group::default()
        };
    }

    /// The shared read side.
    pub fn reader(&self) -> &VdlsReader {
        &self.reader
    }

    /// See [`VdlsReader::read`].
    pub fn read(&self, loc: Location) -> Result<Record> {
        self.reader.read(loc)
    }

    /// See [`VdlsReader::history`].
    pub fn history(&self, loc: Location, limit: usize) -> Result<Vec<(Location, Record)>> {
        self.reader.history(loc, limit)
    }

    /// Position after the last committed record.
    pub fn end(&self) -> Position {
        self.end
    }

    /// Total bytes of all data files (committed part).
    pub fn disk_bytes(&self) -> u64 {
        self.reader.disk_bytes()
    }

    /// Versions must increase from commit to commit, and all records of a group share the group's version.
    fn check_version(&self, version: u64) -> Result<()> {
        if let Some(last) = self.last_version {
            if version <= last {
                return Err(Error::VersionNotIncreasing {
                    requested: version,
                    last,
                });
            }
        }
        if let Some(gv) = self.group.version {
            if gv != version {
                return Err(invalid(
                    &self.dir,
                    format!("version {version} differs from version {gv} of the records already in the group"),
                ));
            }
        }
        Ok(())
    }

    /// Chooses where the current group goes, once per group: the end of the active file, or the start of a new
    /// file when the active file is larger than `file_bytes`. No I/O happens here; the file is created by
    /// `commit`, so that `append` stays a memory operation.
    fn begin_group(&mut self) -> Result<()> {
        if self.group.open {
            return Ok(());
        }
        let (file_id, start) = if self.end.offset > self.opts.file_bytes {
            let next = self
                .end
                .file_id
                .checked_add(1)
                .ok_or_else(|| invalid(&self.dir, "data file ids exhausted"))?;
            (next, HEADER_LEN)
        } else {
            (self.end.file_id, self.end.offset)
        };
        self.group.open = true;
        self.group.file_id = file_id;
        self.group.start = start;
        Ok(())
    }

    /// Writes a sealed group (records + Commit record) and makes it durable. Order:
    /// 1. if rotating: fdatasync the active file (a no-op with `sync`, needed without), create the new file,
    ///    write its header, fsync it, fsync the directory — before any record goes into it;
    /// 2. one positional write of the whole group at the committed end;
    /// 3. fdatasync (when `opts.sync`).
    ///
    /// Only then is the file's committed length advanced, so `read` never sees a half-written group, and only
    /// then does a new file join the readers' list: until its first group is durable the file before it stays
    /// the newest one there, the active file for value-log GC, which never compacts or deletes it (a crash before
    /// that group is durable leaves the new file empty, and recovery removes it).
    fn write_group(&mut self, g: &Group) -> Result<Position> {
        let active_id = self.end.file_id;
        let new_file = if g.file_id != active_id {
            let active = self.reader.files().last().cloned().ok_or(Error::Poisoned)?;
            active
                .file
                .sync_data()
                .map_err(|e| Error::io(&active.path, e))?;
            Some(Arc::new(
                self.create_file(g.file_id, active.len())?.shared(),
            ))
        } else {
            None
        };
        let f = match &new_file {
            Some(f) => f.clone(),
            None => self.reader.files().last().cloned().ok_or(Error::Poisoned)?,
        };
        debug_assert_eq!(f.id, g.file_id);
        debug_assert_eq!(f.len(), g.start);
        f.file
            .write_all_at(&g.buf, g.start + g.spilled)
            .map_err(|e| Error::io(&f.path, e))?;
        if self.opts.sync {
            f.file.sync_data().map_err(|e| Error::io(&f.path, e))?;
        }
        Counters::add(&self.counters.bytes_written, g.buf.len() as u64);
        let end = g.start + g.spilled + g.buf.len() as u64;
        // Published only now: readers never see a length whose bytes are not all written.
        f.len.store(end, Ordering::Release);
        if let Some(f) = new_file {
            self.reader
                .files
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(f);
        }
        Ok(Position {
            file_id: f.id,
            offset: end,
        })
    }

    /// Creates data file `id` durably: header written, file fsynced, directory fsynced.
    fn create_file(&self, id: u32, prev_file_len: u64) -> Result<DataFile> {
        let df = create_data_file(&*self.fs, &self.dir, id, prev_file_len)?;
        Counters::add(&self.counters.bytes_written, HEADER_LEN);
        Ok(df)
    }
}

/// Creates data file `id` in `dir`: header, file fsync, directory fsync (so the name is durable).
fn create_data_file(
    fs: &dyn crate::storage::Storage,
    dir: &Path,
    id: u32,
    prev_file_len: u64,
) -> Result<DataFile> {
    let path = file_path(dir, id);
    let file = fsutil::create_new(fs, &path)?;
    let h = record::encode_header(Header {
        file_id: id,
        prev_file_len,
    });
    file.write_all_at(&h, 0).map_err(|e| Error::io(&path, e))?;
    file.sync_all().map_err(|e| Error::io(&path, e))?;
    fsutil::sync_dir(fs, dir)?;
    Ok(DataFile {
        id,
        path,
        file,
        len: HEADER_LEN,
        compacted: None,
    })
}

impl DataFile {
    fn shared(self) -> SharedFile {
        SharedFile {
            id: self.id,
            path: self.path,
            file: self.file,
            len: AtomicU64::new(self.len),
            compacted: self.compacted,
        }
    }
}

fn tid_of(r: &Record) -> Option<u32> {
    match r {
        Record::Put { tid, .. } | Record::Delete { tid, .. } => Some(*tid),
        Record::Commit { .. } => None,
    }
}
