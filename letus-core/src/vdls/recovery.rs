//! Opening the log: header checks, replay of complete commit groups, and the cut of a torn or uncommitted tail.
//!
//! The rule that separates a torn tail from corruption (also in `FORMAT.md §1`). Scanning sequentially from
//! `from`, let X be the first offset where a record fails its length bounds or its checksum, or where the file
//! ends inside a record, in file F; let S be the start of the group being scanned at X (the end of the last
//! complete commit in F, or the end of the header). X is a **torn tail** exactly when
//! 1. F is the last data file (every earlier file was complete and fsynced before its successor was created), and
//! 2. no record after X in F is a checksum-valid Commit record whose group start differs from S.
//!
//! Otherwise it is corruption. Why this is sound: with `sync`, a crash can only damage the bytes of the one group
//! whose commit had not returned, all of which lie at or after S, and the only Commit record among them names S
//! as its group start. Any other valid Commit record after X belongs to a group that was written after the
//! damaged bytes, i.e. acknowledged data lies beyond the damage. A checksum-valid record that does not parse, or a
//! Commit record that contradicts its group (wrong start, record count or version), cannot be produced by a torn
//! write either, and is corruption wherever it is.

use crate::storage::{Storage, StorageFile};
use std::collections::BTreeSet;
use std::path::Path;

use super::record::{self, DecodeError, HeaderError, HEADER_LEN, KIND_AT, KIND_COMMIT, PREFIX_LEN};
use super::{create_data_file, file_path, DataFile, Location, Position, Record};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::metrics::Counters;

/// What `open` hands over to the new [`super::Vdls`].
pub(crate) struct Recovered {
    /// Files after the cut; the last one ends at the last complete commit (or is an empty new file).
    pub files: Vec<DataFile>,
    /// Version of the last replayed commit.
    pub last_version: Option<u64>,
    /// The ids of the data files GC deleted.
    pub collected: BTreeSet<u32>,
}

/// Size of the sequential read window used by the scan.
const CHUNK: usize = 1 << 20;

pub(crate) fn recover(
    fs: &dyn Storage,
    dir: &Path,
    counters: &Counters,
    mut from: Position,
    up_to: Option<Position>,
    mut replay: impl FnMut(Location, &Record, bool) -> Result<()>,
) -> Result<Recovered> {
    fsutil::ensure_dir(fs, dir)?;
    let collected = super::collected::read(fs, dir)?;
    let mut files = open_files(fs, dir, &collected)?;

    // Headers. A bad header is a torn rotation only in the last file and only if the file holds nothing but
    // (part of) a header: records are written to a new file only after its header was fsynced.
    let n = files.len();
    let mut prev_lens = Vec::with_capacity(n);
    let mut torn_last = false;
    for (i, f) in files.iter().enumerate() {
        if f.compacted.is_some() {
            // Checked when opened; it records no predecessor length (and is never the active file).
            if i + 1 == n {
                return Err(Error::corrupt(
                    &f.path,
                    0,
                    "the newest data file is a compacted one (only sealed files are compacted)",
                ));
            }
            prev_lens.push(None);
            continue;
        }
        let mut hb = vec![0u8; f.len.min(HEADER_LEN) as usize];
        fsutil::read_exact_at(&*f.file, &f.path, &mut hb, 0)?;
        Counters::add(&counters.bytes_read, hb.len() as u64);
        match record::decode_header(&hb) {
            Ok(h) if h.file_id == f.id => prev_lens.push(Some(h.prev_file_len)),
            Ok(h) => {
                return Err(Error::corrupt(
                    &f.path,
                    12,
                    format!(
                        "header names file id {} but the file is {}",
                        h.file_id, f.id
                    ),
                ))
            }
            Err(HeaderError::Unsupported(v)) => {
                return Err(Error::UnsupportedFormat {
                    path: f.path.clone(),
                    found: v,
                })
            }
            Err(HeaderError::Bad(why)) => {
                if i + 1 == n && f.len <= HEADER_LEN {
                    torn_last = true;
                } else {
                    return Err(Error::corrupt(&f.path, 0, why));
                }
            }
        }
    }
    if torn_last {
        // Crash during rotation (or during creation of file 1): the file holds no record; remove it durably.
        if let Some(f) = files.pop() {
            let (id, path) = (f.id, f.path.clone());
            drop(f);
            fsutil::remove_file(fs, &path)?;
            fsutil::sync_dir(fs, dir)?;
            if from.file_id == id && from.offset == HEADER_LEN {
                if let Some(p) = files.last() {
                    // The same point of the log, expressed in the previous file.
                    from = Position {
                        file_id: p.id,
                        offset: p.len,
                    };
                }
            }
        }
    }
    // Each file's header records the final length of its predecessor, which was complete and fsynced when the
    // successor was created; any difference means the predecessor changed afterwards. (A predecessor GC deleted
    // cannot be checked, nor needs to be.)
    for (i, f) in files.iter().enumerate() {
        let expected = match i.checked_sub(1).and_then(|p| files.get(p)) {
            Some(p) if p.id + 1 == f.id => p.len,
            Some(_) => continue,
            None if f.id == 1 => 0,
            None => continue,
        };
        let Some(recorded) = prev_lens.get(i).copied().unwrap_or(Some(0)) else {
            continue;
        };
        if recorded != expected {
            let (path, off) = match i.checked_sub(1).and_then(|p| files.get(p)) {
                Some(p) => (&p.path, p.len.min(recorded)),
                None => (&f.path, 16),
            };
            return Err(Error::corrupt(
                path,
                off,
                format!(
                    "file is {expected} bytes but the header of data file {} records {recorded}",
                    f.id
                ),
            ));
        }
    }
    if files.is_empty() {
        if from != Position::START || !collected.is_empty() {
            return Err(Error::corrupt(
                file_path(dir, 1),
                from.offset,
                format!("the log is empty but replay should start at {from:?}"),
            ));
        }
        files.push(create_data_file(fs, dir, 1, 0)?);
        Counters::add(&counters.bytes_written, HEADER_LEN);
    }

    // `from` must be inside the log.
    let from_idx = files
        .binary_search_by_key(&from.file_id, |f| f.id)
        .ok()
        .ok_or_else(|| {
            Error::corrupt(
                file_path(dir, from.file_id),
                from.offset,
                "replay start is in a data file that does not exist",
            )
        })?;
    if let Some(f) = files.get(from_idx) {
        if from.offset < HEADER_LEN || from.offset > f.len {
            return Err(Error::corrupt(
                &f.path,
                from.offset,
                format!(
                    "replay start is outside the file's records ({} bytes)",
                    f.len
                ),
            ));
        }
    }

    // The last file's groups may have been written and never fsynced (a process killed between its write and its
    // fsync): they are whole in the page cache, so the scan replays them, and a flush during the replay (or any
    // after the open) makes an index file and the roots log depend on them. They are made durable before the scan
    // starts. Earlier files were fsynced when their successor was created. (This does not help after an fsync
    // that failed, when the kernel may have marked the pages clean: the reopen that follows passes `up_to`.)
    if let Some(f) = files.last() {
        if f.compacted.is_none() {
            f.file.sync_data().map_err(|e| Error::io(&f.path, e))?;
        }
    }

    // Scan. Records of a group are held until its Commit record proves the group complete, then replayed.
    let last_idx = files.len() - 1;
    // Whether the scan is at `up_to`, between groups: the end the caller knows to be durable.
    let stops_at = |file_id: u32, offset: u64, pending: &[(Location, Record, bool)]| {
        up_to == Some(Position { file_id, offset }) && pending.is_empty()
    };
    let mut last_good = from;
    let mut last_version: Option<u64> = None;
    let mut pending: Vec<(Location, Record, bool)> = Vec::new();
    let mut pending_version: Option<u64> = None;
    'files: for (idx, f) in files.iter().enumerate().skip(from_idx) {
        let mut o = if idx == from_idx {
            from.offset
        } else {
            HEADER_LEN
        };
        if f.compacted.is_some() {
            // Compacted only once every commit group in it was below the prune boundary, so in index files:
            // replay starts at its end at the earliest.
            if o != f.len {
                return Err(Error::corrupt(
                    &f.path,
                    o,
                    "replay would start inside a compacted data file",
                ));
            }
            continue;
        }
        let mut group_start = o;
        let mut r = Reader::new(&*f.file, &f.path, f.len, counters);
        while o < f.len {
            // The end the caller knows to be durable (see `VdlsOptions::up_to`): the rest is cut below.
            if stops_at(f.id, o, &pending) {
                break 'files;
            }
            let (d, len) = match next_record(&mut r, f.id, o)? {
                Step::Record(d, len) => (d, len),
                Step::Damaged(why) => {
                    if idx != last_idx {
                        return Err(Error::corrupt(
                            &f.path,
                            o,
                            format!("{why} (in a data file that was complete before later files were created)"),
                        ));
                    }
                    if let Some(at) = find_foreign_commit(&mut r, f.id, o, group_start)? {
                        return Err(Error::corrupt(
                            &f.path,
                            o,
                            format!("{why}; a valid commit record of a later group follows at offset {at}"),
                        ));
                    }
                    break 'files; // a torn tail: cut below
                }
            };
            let loc = Location {
                file_id: f.id,
                offset: o,
                len,
            };
            let v = d.rec.version();
            // A moved record keeps the version of the write it copies; the group's version is its Commit's.
            if d.moved {
                if last_version.is_some_and(|lv| v > lv) {
                    return Err(Error::corrupt(
                        &f.path,
                        o,
                        format!(
                            "moved record of version {v} is above the previous commit's version"
                        ),
                    ));
                }
                pending.push((loc, d.rec, true));
                o += u64::from(len);
                continue;
            }
            if let Some(pv) = pending_version.filter(|&pv| pv != v) {
                return Err(Error::corrupt(
                    &f.path,
                    o,
                    format!("record of version {v} in the group of version {pv}"),
                ));
            }
            if let Some(lv) = last_version.filter(|&lv| v <= lv) {
                return Err(Error::corrupt(
                    &f.path,
                    o,
                    format!("version {v} is not above the previous commit's version {lv}"),
                ));
            }
            match d.group {
                None => {
                    pending_version = Some(v);
                    pending.push((loc, d.rec, false));
                }
                Some((gs, count)) => {
                    if gs != group_start || count as usize != pending.len() {
                        return Err(Error::corrupt(
                            &f.path,
                            o,
                            format!(
                                "commit record names a group of {count} records at offset {gs}, \
                                 but the group holds {} records from offset {group_start}",
                                pending.len()
                            ),
                        ));
                    }
                    if pending
                        .iter()
                        .any(|(_, r, moved)| *moved && r.version() >= v)
                    {
                        return Err(Error::corrupt(
                            &f.path,
                            o,
                            format!(
                                "the group of version {v} holds a moved record that is not older"
                            ),
                        ));
                    }
                    for (l, rec, moved) in pending.drain(..) {
                        replay(l, &rec, moved)?;
                    }
                    replay(loc, &d.rec, false)?;
                    pending_version = None;
                    last_version = Some(v);
                    group_start = o + u64::from(len);
                    last_good = Position {
                        file_id: f.id,
                        offset: group_start,
                    };
                }
            }
            o += u64::from(len);
        }
        // `up_to` at the very end of this file: a later file holds only what followed it.
        if stops_at(f.id, o, &pending) {
            break 'files;
        }
        if idx != last_idx && !pending.is_empty() {
            // Rotation happens only at commit boundaries, so a file that has a successor ends with a commit.
            return Err(Error::corrupt(
                &f.path,
                group_start,
                "commit group is not closed at the end of a data file that has a successor",
            ));
        }
    }
    drop(pending);

    // Cut: truncate the file holding the last complete commit right after it, fsync it, then remove later files
    // (highest id first, so a crash in between leaves ids contiguous) and fsync the directory. Recovery is
    // idempotent: a crash during the cut leaves a log that the next open cuts the same way.
    let cut_idx = files
        .binary_search_by_key(&last_good.file_id, |f| f.id)
        .unwrap_or(0);
    if let Some(f) = files.get_mut(cut_idx) {
        if f.len > last_good.offset {
            f.file
                .set_len(last_good.offset)
                .and_then(|()| f.file.sync_all())
                .map_err(|e| Error::io(&f.path, e))?;
            f.len = last_good.offset;
        }
    }
    if files.len() > cut_idx + 1 {
        while files.len() > cut_idx + 1 {
            if let Some(f) = files.pop() {
                let path = f.path.clone();
                drop(f);
                fsutil::remove_file(fs, &path)?;
            }
        }
        fsutil::sync_dir(fs, dir)?;
    }
    Ok(Recovered {
        files,
        last_version,
        collected,
    })
}

/// Opens every data file (`NNNNNN.vdl`, or `NNNNNN.vdc` once GC compacted it; ids contiguous from 1 but for the
/// `collected` ones). Other names in `dir` are ignored. A collected file still present (a crash between the
/// list's write and the unlink) is deleted now; so are an unfinished compaction (`.vdc.tmp`) and a data file
/// whose compaction is complete (a crash between the rename and the unlink).
fn open_files(fs: &dyn Storage, dir: &Path, collected: &BTreeSet<u32>) -> Result<Vec<DataFile>> {
    let mut ids = Vec::new();
    let mut compacted_ids = BTreeSet::new();
    let mut leftovers = Vec::new();
    for name in fsutil::list(fs, dir)? {
        if super::compacted::is_tmp(&name) {
            leftovers.push(dir.join(&name));
            continue;
        }
        let (stem, is_compacted) = match (name.strip_suffix(".vdl"), name.strip_suffix(".vdc")) {
            (Some(s), _) => (s, false),
            (_, Some(s)) => (s, true),
            _ => continue,
        };
        if !stem.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        // Only the canonical spelling is ours (so "1.vdl" and "000001.vdl" cannot both count as file 1).
        match stem.parse::<u32>() {
            Ok(id) if format!("{id:06}") == stem => {
                if is_compacted {
                    compacted_ids.insert(id);
                } else {
                    ids.push(id);
                }
            }
            _ => continue,
        }
    }
    for &id in &ids {
        if compacted_ids.contains(&id) || collected.contains(&id) {
            leftovers.push(file_path(dir, id));
        }
    }
    for &id in &compacted_ids {
        if collected.contains(&id) {
            leftovers.push(super::compacted::path(dir, id));
        }
    }
    // Each compacted file is checked before the original it replaces is removed: a damaged `.vdc` must not take
    // the intact `.vdl` with it (the open then fails with both files there, for an operator to decide).
    let mut opened = std::collections::BTreeMap::new();
    for &id in compacted_ids.iter().filter(|id| !collected.contains(id)) {
        let path = super::compacted::path(dir, id);
        let c = super::compacted::open(fs, &path, id)?;
        opened.insert(id, (path, c));
    }
    if !leftovers.is_empty() {
        for p in &leftovers {
            fsutil::remove_file(fs, p)?;
        }
        fsutil::sync_dir(fs, dir)?;
    }
    ids.retain(|id| !collected.contains(id) && !compacted_ids.contains(id));
    ids.extend(compacted_ids.iter().filter(|id| !collected.contains(id)));
    ids.sort_unstable();
    let mut files = Vec::with_capacity(ids.len());
    let mut expected = 1u32;
    for &id in &ids {
        while expected < id && collected.contains(&expected) {
            expected += 1;
        }
        if id != expected {
            return Err(Error::corrupt(
                file_path(dir, expected),
                0,
                "data file is missing (data file ids are contiguous from 1 but for those GC deleted)",
            ));
        }
        expected = id.saturating_add(1);
        if let Some((path, (file, remap, bytes))) = opened.remove(&id) {
            files.push(DataFile {
                id,
                path,
                file,
                len: remap.original_len(),
                compacted: Some((std::sync::Arc::new(remap), bytes)),
            });
            continue;
        }
        let path = file_path(dir, id);
        let file = fsutil::open_rw(fs, &path)?;
        let len = file.size().map_err(|e| Error::io(&path, e))?;
        files.push(DataFile {
            id,
            path,
            file,
            len,
            compacted: None,
        });
    }
    Ok(files)
}

/// A forward read window over one file, so the scan does one large `pread` per MiB instead of two per record.
pub(super) struct Reader<'a> {
    file: &'a dyn StorageFile,
    path: &'a Path,
    len: u64,
    counters: &'a Counters,
    start: u64,
    win: Vec<u8>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(
        file: &'a dyn StorageFile,
        path: &'a Path,
        len: u64,
        counters: &'a Counters,
    ) -> Self {
        Reader {
            file,
            path,
            len,
            counters,
            start: 0,
            win: Vec::new(),
        }
    }

    /// The `n` bytes at `off`; the caller ensures `off + n <= len` (a violation is reported, not panicked on).
    pub(super) fn get(&mut self, off: u64, n: usize) -> Result<&[u8]> {
        let end = off
            .checked_add(n as u64)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| Error::corrupt(self.path, off, "read past the end of the file"))?;
        let win_end = self.start + self.win.len() as u64;
        if off < self.start || end > win_end {
            let want = (n.max(CHUNK) as u64).min(self.len - off) as usize;
            self.win.resize(want, 0);
            fsutil::read_exact_at(self.file, self.path, &mut self.win, off)?;
            Counters::add(&self.counters.bytes_read, want as u64);
            self.start = off;
        }
        let s = (off - self.start) as usize;
        self.win
            .get(s..s + n)
            .ok_or_else(|| Error::corrupt(self.path, off, "read window out of range"))
    }
}

pub(super) enum Step {
    Record(record::Decoded, u32),
    /// Bytes that are not a whole, checksum-valid record: a torn tail or damage (see the module rule).
    Damaged(String),
}

/// Decodes the record at `o`. Length bounds are checked before anything of that length is read.
pub(super) fn next_record(r: &mut Reader<'_>, file_id: u32, o: u64) -> Result<Step> {
    let remain = r.len - o;
    if remain < PREFIX_LEN as u64 {
        return Ok(Step::Damaged(format!(
            "file ends {remain} bytes into a record prefix"
        )));
    }
    let len = record::prefix_len(r.get(o, PREFIX_LEN)?).unwrap_or(0);
    if !record::len_in_bounds(len) {
        return Ok(Step::Damaged(format!(
            "record length {len} is out of bounds"
        )));
    }
    if len as u64 > remain {
        return Ok(Step::Damaged(format!(
            "record of {len} bytes extends past the end of the file ({remain} bytes left)"
        )));
    }
    let bytes = r.get(o, len)?;
    match record::decode(bytes, file_id, o) {
        Ok(d) => Ok(Step::Record(d, len as u32)),
        Err(DecodeError::Damaged(why)) => Ok(Step::Damaged(why)),
        Err(DecodeError::Malformed(why)) => Err(Error::corrupt(r.path, o, why)),
    }
}

/// The most record bytes [`find_foreign_commit`] checksums before it gives up (and reports corruption).
const MAX_FOREIGN_SEARCH_BYTES: u64 = 1 << 30;

/// Looks for evidence that acknowledged data follows the damage at `x`: a checksum-valid Commit record after `x`
/// whose group does not start at `group_start` (the start of the group torn at `x`). Returns its offset.
/// Checks every byte offset (the damage may have any length), but only computes a checksum where the kind byte
/// and the length field fit a Commit record.
fn find_foreign_commit(
    r: &mut Reader<'_>,
    file_id: u32,
    x: u64,
    group_start: u64,
) -> Result<Option<u64>> {
    let min = record::COMMIT_HEADER_LEN as u64;
    let max = (record::COMMIT_HEADER_LEN + record::MAX_PAYLOAD_BYTES) as u64;
    // Bytes checksummed so far: values can hold anything, and a tail crafted to put a plausible Commit header at
    // every few bytes would otherwise make this search checksum megabytes per byte of tail, for hours.
    let mut checked: u64 = 0;
    let mut o = x + 1;
    while o + min <= r.len {
        let head = r.get(o, record::COMMIT_HEADER_LEN)?;
        if head.get(KIND_AT) == Some(&KIND_COMMIT) {
            let len = record::prefix_len(head).unwrap_or(0) as u64;
            // The payload length, in the header, must account for the rest of the record, before any
            // checksum is computed.
            let payload = fsutil::u32_at(head, record::COMMIT_HEADER_LEN - 4).map(u64::from);
            if (min..=max).contains(&len) && o + len <= r.len && payload == Some(len - min) {
                checked += len;
                if checked > MAX_FOREIGN_SEARCH_BYTES {
                    return Err(Error::corrupt(
                        r.path,
                        x,
                        format!(
                            "damage at {x} is followed by more candidate commit records than recovery checks \
                             ({MAX_FOREIGN_SEARCH_BYTES} bytes); whether acknowledged groups follow it cannot be told"
                        ),
                    ));
                }
                let bytes = r.get(o, len as usize)?;
                match record::decode(bytes, file_id, o) {
                    Ok(d) => {
                        if d.group.is_some_and(|(gs, _)| gs != group_start) {
                            return Ok(Some(o));
                        }
                    }
                    // Checksum-valid but invalid: written by something, and not by the torn group.
                    Err(DecodeError::Malformed(_)) => return Ok(Some(o)),
                    Err(DecodeError::Damaged(_)) => {}
                }
            }
        }
        o += 1;
    }
    Ok(None)
}
