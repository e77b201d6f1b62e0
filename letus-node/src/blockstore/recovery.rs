//! Opening a block store: segment listing, header checks, sealed segments from their footers, the active
//! segment by scanning, and the cut of a torn tail.
//!
//! The rule that separates a torn tail from corruption (normative text in `BLOCKSTORE-FORMAT.md`). Scanning the
//! last segment from its header, let X be the first offset where no checksum-valid record starts (the record's
//! length is out of bounds, it runs past the end of the file, or its checksum fails). If the segment ends with a
//! valid footer describing exactly the records before X, the segment is sealed. Otherwise X is a **torn tail**,
//! and the file is cut at X, exactly when
//! 1. the bytes from X to the end could all come from one interrupted write (at most one record, or one footer
//!    for the records before X), and
//! 2. no checksum-valid record with a version above the last good one starts after X and ends either at the end
//!    of the file or where an index magic starts (that is, where the last record of the segment would end).
//!
//! Otherwise it is `Error::Corrupt` at X. Why this is sound: with `sync`, every append is fsynced before it
//! returns and the footer is written only after all records are durable, so a crash can only damage the one
//! write in flight, which lies after every acknowledged record. If instead a record before the last one is
//! damaged, the segment's last record is still intact and ends at the end of the file (or at its footer), and
//! condition 2 finds it.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use letus_core::fsutil::{self, crc};
use letus_core::storage::{Storage, StorageFile};
use letus_core::{Error, Result};

use super::format::{
    self, HeaderError, ENTRY_LEN, FOOTER_FIXED_LEN, HEADER_LEN, INDEX_MAGIC, MAX_BLOCK_BYTES,
    MAX_RECORD_LEN, RECORD_HEADER_LEN, TRAILER_LEN,
};
use super::{corrupt, io_err, segment_path, Segment};

/// Segment files in `dir` (`NNNNNN.seg`, the id zero-padded to at least 6 digits, id ≥ 1), by id. Other names
/// are ignored.
fn list_segments(fs: &dyn Storage, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for name in fsutil::list(fs, dir)? {
        let Some(num) = name.strip_suffix(".seg") else {
            continue;
        };
        if num.len() < 6 || !num.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(id) = num.parse::<u64>() else { continue };
        if id == 0 || format!("{id:06}") != num {
            continue;
        }
        out.push((id, dir.join(&name)));
    }
    out.sort();
    Ok(out)
}

/// Creates segment `id` durably: the file with its header, fsynced, then the directory fsynced.
pub(super) fn create_segment(fs: &dyn Storage, dir: &Path, id: u64) -> Result<Segment> {
    let path = segment_path(dir, id);
    let file = fsutil::create_new(fs, &path)?;
    let header = format::encode_header(id);
    file.write_all_at(&header, 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err(&path, e))?;
    fsutil::sync_dir(fs, dir)?;
    Ok(Segment {
        id,
        path,
        file,
        versions: Vec::new(),
        offsets: Vec::new(),
        records_end: HEADER_LEN,
        len: HEADER_LEN,
        sealed: false,
    })
}

fn file_len(file: &dyn StorageFile, path: &Path) -> Result<u64> {
    file.size().map_err(|e| io_err(path, e))
}

fn read_header(
    file: &dyn StorageFile,
    path: &Path,
    len: u64,
) -> Result<std::result::Result<u64, HeaderError>> {
    let mut hb = vec![0u8; len.min(HEADER_LEN) as usize];
    fsutil::read_exact_at(file, path, &mut hb, 0)?;
    Ok(format::decode_header(&hb))
}

fn check_header(file: &dyn StorageFile, path: &Path, len: u64, id: u64) -> Result<()> {
    match read_header(file, path, len)? {
        Ok(h) if h == id => Ok(()),
        Ok(h) => Err(corrupt(
            path,
            12,
            format!("header names segment {h} but the file is segment {id}"),
        )),
        Err(HeaderError::Unsupported(v)) => Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: v,
        }),
        Err(HeaderError::Bad(why)) => Err(corrupt(path, 0, why)),
    }
}

/// Opens every segment of `dir` and returns them with exactly one active segment, the last.
pub(super) fn recover(fs: &dyn Storage, dir: &Path) -> Result<Vec<Segment>> {
    let mut list = list_segments(fs, dir)?;
    for w in list.windows(2) {
        if w[1].0 != w[0].0 + 1 {
            return Err(corrupt(
                &segment_path(dir, w[0].0 + 1),
                0,
                format!(
                    "segment file missing: segment ids jump from {} to {}",
                    w[0].0, w[1].0
                ),
            ));
        }
    }
    // A bad header is an interrupted segment creation only in the last file and only if the file holds nothing
    // but (part of) a header: records are written to a segment only after its header was fsynced.
    if let Some((_, path)) = list.last() {
        let path = path.clone();
        let file = fsutil::open_read(fs, &path)?;
        let len = file_len(&*file, &path)?;
        if len <= HEADER_LEN && matches!(read_header(&*file, &path, len)?, Err(HeaderError::Bad(_)))
        {
            drop(file);
            fsutil::remove_file(fs, &path)?;
            fsutil::sync_dir(fs, dir)?;
            list.pop();
        }
    }

    let mut segments: Vec<Segment> = Vec::with_capacity(list.len() + 1);
    let n = list.len();
    for (i, (id, path)) in list.into_iter().enumerate() {
        let prev_last = segments.last().and_then(|s| s.versions.last().copied());
        let seg = if i + 1 < n {
            open_sealed(fs, path, id, prev_last)?
        } else {
            open_last(fs, path, id, prev_last)?
        };
        segments.push(seg);
    }
    match segments.last() {
        None => segments.push(create_segment(fs, dir, 1)?),
        // A sealing interrupted after its footer was durable: finish it.
        Some(s) if s.sealed => {
            let id = s.id + 1;
            segments.push(create_segment(fs, dir, id)?);
        }
        Some(_) => {}
    }
    Ok(segments)
}

/// Opens a segment that must be sealed (a later segment exists): header and footer only, no scan.
fn open_sealed(
    fs: &dyn Storage,
    path: PathBuf,
    id: u64,
    prev_last: Option<u64>,
) -> Result<Segment> {
    let file = fsutil::open_read(fs, &path)?;
    let len = file_len(&*file, &path)?;
    check_header(&*file, &path, len, id)?;
    let footer = match read_footer(&*file, &path, len, id)? {
        Ok(f) => f,
        Err((off, why)) => {
            return Err(corrupt(
                &path,
                off,
                format!("{why} (the segment must be sealed: a later segment exists)"),
            ))
        }
    };
    if let (Some(p), Some(&first)) = (prev_last, footer.versions.first()) {
        if first <= p {
            return Err(corrupt(
                &path,
                HEADER_LEN,
                format!("first block version {first} is not above the previous segment's last {p}"),
            ));
        }
    }
    Ok(Segment {
        id,
        path,
        file,
        versions: footer.versions,
        offsets: footer.offsets,
        records_end: footer.index_offset,
        len,
        sealed: true,
    })
}

/// Opens the last segment by scanning its records; recognises a footer after them, cuts a torn tail.
fn open_last(fs: &dyn Storage, path: PathBuf, id: u64, prev_last: Option<u64>) -> Result<Segment> {
    let file = fsutil::open_rw(fs, &path)?;
    let len = file_len(&*file, &path)?;
    check_header(&*file, &path, len, id)?;
    let scan = scan_records(&*file, &path, len, prev_last)?;
    let x = scan.end;
    let mut seg = Segment {
        id,
        path,
        file,
        versions: scan.versions,
        offsets: scan.offsets,
        records_end: x,
        len,
        sealed: false,
    };
    if x == len {
        return Ok(seg);
    }
    let last_good = seg.versions.last().copied().or(prev_last);
    match classify_damage(&seg, len, x, last_good)? {
        Tail::Sealed => seg.sealed = true,
        Tail::Torn => {
            seg.file
                .set_len(x)
                .and_then(|()| seg.file.sync_all())
                .map_err(|e| io_err(&seg.path, e))?;
            seg.len = x;
        }
    }
    Ok(seg)
}

/// A checked footer: the segment's index.
pub(super) struct Footer {
    pub index_offset: u64,
    pub versions: Vec<u64>,
    pub offsets: Vec<u64>,
}

/// Allocates a zeroed buffer, reporting an allocation failure as an error instead of aborting.
fn zeroed(len: u64, path: &Path, offset: u64) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    let n = usize::try_from(len).map_err(|_| corrupt(path, offset, "structure too large"))?;
    v.try_reserve_exact(n).map_err(|_| {
        corrupt(
            path,
            offset,
            format!("cannot allocate {n} bytes for a structure read from disk"),
        )
    })?;
    v.resize(n, 0);
    Ok(v)
}

/// Reads and checks the footer of a segment of `len` bytes. `Ok(Err((offset, why)))` when there is no valid
/// footer; `Err` only for I/O errors.
pub(super) fn read_footer(
    file: &dyn StorageFile,
    path: &Path,
    len: u64,
    id: u64,
) -> Result<std::result::Result<Footer, (u64, String)>> {
    let min = HEADER_LEN + RECORD_HEADER_LEN + FOOTER_FIXED_LEN + ENTRY_LEN;
    if len < min {
        return Ok(Err((
            len,
            format!("{len} bytes are too few for a sealed segment ({min} at least)"),
        )));
    }
    let t_off = len - TRAILER_LEN;
    let mut tb = [0u8; TRAILER_LEN as usize];
    fsutil::read_exact_at(file, path, &mut tb, t_off)?;
    let t = match format::decode_trailer(&tb) {
        Ok(t) => t,
        Err(why) => return Ok(Err((t_off, why))),
    };
    if t.segment_id != id {
        return Ok(Err((
            t_off,
            format!(
                "footer names segment {} but the file is segment {id}",
                t.segment_id
            ),
        )));
    }
    let max_count = (len - HEADER_LEN - FOOTER_FIXED_LEN) / (RECORD_HEADER_LEN + ENTRY_LEN);
    if t.count == 0 || t.count > max_count {
        return Ok(Err((
            t_off,
            format!(
                "footer counts {} entries, impossible in {len} bytes",
                t.count
            ),
        )));
    }
    let index_len = 8 + ENTRY_LEN * t.count + 4;
    if t.index_offset != len - TRAILER_LEN - index_len {
        return Ok(Err((
            t_off,
            format!(
                "footer offset {} does not match {} entries in {len} bytes",
                t.index_offset, t.count
            ),
        )));
    }
    let mut ib = zeroed(index_len, path, t.index_offset)?;
    fsutil::read_exact_at(file, path, &mut ib, t.index_offset)?;
    let entries = match format::decode_index(&ib) {
        Ok(e) => e,
        Err((off, why)) => return Ok(Err((t.index_offset + off, why))),
    };
    let mut versions = Vec::with_capacity(entries.len());
    let mut offsets = Vec::with_capacity(entries.len());
    let mut expect = HEADER_LEN;
    for (i, e) in entries.iter().enumerate() {
        let at = t.index_offset + 8 + ENTRY_LEN * i as u64;
        let rl = u64::from(e.len);
        if e.offset != expect || !(RECORD_HEADER_LEN..=MAX_RECORD_LEN).contains(&rl) {
            return Ok(Err((
                at,
                format!(
                    "index entry {i} (offset {}, length {}) does not follow the previous record at {expect}",
                    e.offset, e.len
                ),
            )));
        }
        if versions.last().is_some_and(|&p| e.version <= p) {
            return Ok(Err((
                at,
                format!("index entry {i}: version {} does not increase", e.version),
            )));
        }
        versions.push(e.version);
        offsets.push(e.offset);
        expect += rl;
    }
    if expect != t.index_offset {
        return Ok(Err((
            t.index_offset,
            format!(
                "index entries end at {expect}, the footer starts at {}",
                t.index_offset
            ),
        )));
    }
    if versions.first() != Some(&t.first_version) || versions.last() != Some(&t.last_version) {
        return Ok(Err((
            t_off,
            "footer's first/last versions disagree with its index".into(),
        )));
    }
    Ok(Ok(Footer {
        index_offset: t.index_offset,
        versions,
        offsets,
    }))
}

struct Scan {
    versions: Vec<u64>,
    offsets: Vec<u64>,
    /// Offset after the last checksum-valid record.
    end: u64,
}

/// Reads records sequentially from the header to the first one that does not check.
fn scan_records(
    file: &dyn StorageFile,
    path: &Path,
    len: u64,
    prev_last: Option<u64>,
) -> Result<Scan> {
    let eof = |e: std::io::Error, at: u64| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            corrupt(path, at, "the file shrank while it was being read")
        } else {
            io_err(path, e)
        }
    };
    let seq = letus_core::storage::SeqReader::new(file).map_err(|e| io_err(path, e))?;
    let mut r = BufReader::with_capacity(1 << 20, seq);
    r.seek(SeekFrom::Start(HEADER_LEN))
        .map_err(|e| io_err(path, e))?;
    let mut versions = Vec::new();
    let mut offsets = Vec::new();
    let mut pos = HEADER_LEN;
    let mut prev = prev_last;
    let mut rec = Vec::new();
    let hl = RECORD_HEADER_LEN as usize;
    while len - pos >= RECORD_HEADER_LEN {
        rec.resize(hl, 0);
        r.read_exact(&mut rec[..hl]).map_err(|e| eof(e, pos))?;
        let h = format::record_header(&rec);
        let rl = RECORD_HEADER_LEN + u64::from(h.len);
        if h.len as usize > MAX_BLOCK_BYTES || rl > len - pos {
            break;
        }
        rec.resize(rl as usize, 0);
        r.read_exact(&mut rec[hl..]).map_err(|e| eof(e, pos))?;
        if !format::record_valid(&rec) {
            break;
        }
        if let Some(p) = prev.filter(|&p| h.version <= p) {
            return Err(corrupt(
                path,
                pos,
                format!(
                    "block version {} is not above the previous block's {p}",
                    h.version
                ),
            ));
        }
        prev = Some(h.version);
        versions.push(h.version);
        offsets.push(pos);
        pos += rl;
    }
    Ok(Scan {
        versions,
        offsets,
        end: pos,
    })
}

enum Tail {
    /// A valid footer follows the records: the segment is sealed.
    Sealed,
    /// The bytes after the records are what an interrupted write left: cut them.
    Torn,
}

/// Most bytes hashed while looking for valid records after damage; past this the damage is reported rather than
/// cut (only crafted data gets near it: see `find_valid_record`).
const SEARCH_BUDGET: u64 = 1 << 30;

/// Decides what the bytes from `x` (the end of the valid records) to the end of the last segment are.
fn classify_damage(seg: &Segment, len: u64, x: u64, last_good: Option<u64>) -> Result<Tail> {
    let path = &seg.path;
    if let Ok(f) = read_footer(&*seg.file, path, len, seg.id)? {
        if f.index_offset == x && f.offsets == seg.offsets && f.versions == seg.versions {
            return Ok(Tail::Sealed);
        }
        return Err(corrupt(
            path,
            x,
            format!(
                "no valid block record here, but the segment ends with a valid footer indexing {} records up to offset {}",
                f.versions.len(),
                f.index_offset
            ),
        ));
    }
    let region = len - x;
    let footer_max = FOOTER_FIXED_LEN + ENTRY_LEN * seg.versions.len() as u64;
    let limit = MAX_RECORD_LEN.max(footer_max);
    if region > limit {
        return Err(corrupt(
            path,
            x,
            format!(
                "no valid block record here, and {region} bytes follow: more than one interrupted write leaves ({limit})"
            ),
        ));
    }
    let mut buf = zeroed(region, path, x)?;
    fsutil::read_exact_at(&*seg.file, path, &mut buf, x)?;
    match find_valid_record(&buf, last_good) {
        Search::None => Ok(Tail::Torn),
        Search::Found(off) => Err(corrupt(
            path,
            x,
            format!(
                "damaged block record followed by a valid one at offset {}",
                x + off as u64
            ),
        )),
        Search::TooCostly => Err(corrupt(
            path,
            x,
            "damaged block record; the bytes after it hold too many record-like candidates to rule out \
             acknowledged data, so they are not cut",
        )),
    }
}

enum Search {
    None,
    Found(usize),
    TooCostly,
}

/// Looks in `region` (the bytes after the damage, `region[0]` being the damaged record's first byte) for a
/// checksum-valid record with a version above `last_good` that ends at the end of the region or where an index
/// magic starts: where the segment's last record ends when the damage is not a torn tail. In bytes that an
/// interrupted write left (zeros, or a prefix of one record's or footer's bytes), such a candidate needs a length
/// field of exactly the right value, so checksums are computed rarely; a block whose bytes were crafted to embed
/// records can make the search report corruption (never a cut of acknowledged data).
fn find_valid_record(region: &[u8], last_good: Option<u64>) -> Search {
    let hl = RECORD_HEADER_LEN as usize;
    let mut ends: Vec<usize> = region
        .windows(INDEX_MAGIC.len())
        .enumerate()
        .filter(|(_, w)| *w == INDEX_MAGIC)
        .map(|(i, _)| i)
        .collect();
    ends.push(region.len());
    let mut budget = SEARCH_BUDGET;
    for off in 1..region.len().saturating_sub(hl - 1) {
        let h = format::record_header(&region[off..]);
        if h.len as usize > MAX_BLOCK_BYTES || last_good.is_some_and(|g| h.version <= g) {
            continue;
        }
        let end = off + hl + h.len as usize;
        if end > region.len() || ends.binary_search(&end).is_err() {
            continue;
        }
        let cost = (end - off) as u64;
        if cost > budget {
            return Search::TooCostly;
        }
        budget -= cost;
        if crc(&region[off + 4..end]) == h.crc {
            return Search::Found(off);
        }
    }
    Search::None
}

/// The ranges of sealed segment `path` that stay on the hot disk when it moves to the cold tier: its header and its
/// footer (index and trailer), which opening the block store reads; the records themselves are read by block
/// reads only. A segment without a valid footer keeps its header only.
pub fn tier_pins(fs: &letus_core::storage::SharedStorage, path: &Path) -> Result<Vec<(u64, u64)>> {
    let file = fsutil::open_read(&**fs, path)?;
    let len = file_len(&*file, path)?;
    let mut pins = vec![(0, len.min(HEADER_LEN))];
    if len >= HEADER_LEN + TRAILER_LEN {
        let mut tb = [0u8; TRAILER_LEN as usize];
        fsutil::read_exact_at(&*file, path, &mut tb, len - TRAILER_LEN)?;
        if let Ok(t) = super::format::decode_trailer(&tb) {
            if t.index_offset >= HEADER_LEN && t.index_offset < len {
                pins.push((t.index_offset, len - t.index_offset));
            }
        }
    }
    Ok(pins)
}
