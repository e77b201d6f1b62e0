//! One immutable index file: its writer ([`IndexFileWriter`]) and its reader ([`IndexFile`]).
//!
//! The byte layout, what each checksum covers and the crash argument are in `FORMAT.md §2`; the constants below
//! are the normative sizes. In short:
//!
//! ```text
//! header (16) | page block* | index block* | lookup block | footer (80)
//! ```
//!
//! - a **page block** is one page record: `len u32 | crc u32 | record`, the CRC covering the record's key as well,
//!   so a record served for the wrong key is detected like a flipped byte;
//! - an **index block** maps consecutive keys to their page blocks: since format version
//!   3 `count u32 | first_offset u64 | compact entries | crc u32` in at most 1 KiB (about 11 bytes an entry, so
//!   about 90 keys a block), before it `count u32 | entries | crc u32` with up to 70 entries of 58 bytes;
//! - the **lookup block** gives, for each index block, its first key, its offset and its entry count; it is read
//!   and checked once at open and then kept in memory, so a lookup costs at most one index block read (often a
//!   cache hit) plus one page block read;
//! - the **footer** holds the [`FileMeta`], the offsets of the index region and of the lookup block, the format
//!   version and the magic, under its own CRC.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fsutil::{self, u32_at, u64_at, AppendFile};
use crate::metrics::Counters;
use crate::storage::SharedStorage;

use super::block_cache::BlockCache;
use super::page_key::{PageId, PageKey, PageKind, MAX_PAGE_DEPTH};
use super::sequential;
use crate::varint;

/// The magic number at the start of the header and at the end of the footer.
pub const MAGIC: [u8; 8] = *b"LETUSIDX";
/// The newest format version this build reads and writes. Version 2 may hold rebase DeltaPages (FORMAT.md §2.1);
/// version 3 has compact index blocks (variable-length entries, see [`COMPACT_INDEX_VERSION`]); version 4 is
/// version 3 holding only BasePages ([`BASES_ONLY_VERSION`]).
pub const FORMAT_VERSION: u32 = 4;
/// The format of the index files a flush, a bulk load or a consolidation writes.
pub const WRITE_FORMAT_VERSION: u32 = 3;
/// The oldest format version this build reads (versions 1 and 2 are read as they are: fixed 58-byte entries).
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// The first format version whose index blocks are compact: `count u32 | first_offset u64 | entries | crc u32`,
/// an entry `tid varint | depth u8 | prefix [depth/2] | version varint | kind u8 | len varint`, each page block
/// starting where the previous entry's ended; a lookup entry's `n` is `count << 16 | block length`. A 58-byte
/// entry held 29 zero bytes of prefix and an offset implied by its predecessor: at 10M keys the index blocks were a
/// tenth of every byte written.
pub const COMPACT_INDEX_VERSION: u32 = 3;
/// The format of a base file written by a prune (FORMAT.md §2.9): the layout of version 3, every record a BasePage
/// under a `Base` key, one per page. A BasePage there may stand for the page's DeltaPage of the same key version
/// (the page's state at the base file's boundary, its record's version field the page's version then), so a lookup
/// of `(page, v, Delta)` routed to such a file is answered by `(page, v, Base)`. Older builds refuse the file
/// (`UnsupportedFormat`) rather than follow a DeltaPage's link to a record they cannot find.
pub const BASES_ONLY_VERSION: u32 = 4;
/// Header: `magic [u8;8] | format_version u32 | header_crc u32`.
pub const HEADER_LEN: u64 = 16;
/// The most runs of top pages [`IndexFile::hot_ranges`] gives (the tier manifest lists at most 65,535 ranges per
/// file).
const MAX_HOT_RUNS: usize = 1024;
/// Footer (layout in `FORMAT.md §2` §3.5). Its last 16 bytes (`format_version u32 | footer_crc u32 |
/// magic [u8;8]`) keep their place in every future format version, so any reader can tell "newer format" from
/// "damaged".
pub const FOOTER_LEN: u64 = 80;
/// Page block header: `record_len u32 | crc u32`.
pub const PAGE_BLOCK_HEADER_LEN: u64 = 8;
/// Largest page record. A length above this read from disk is corruption, never an allocation.
pub const MAX_RECORD_LEN: usize = 16 << 20;
/// One entry of an index block or of the lookup block: `key [u8;46] | offset u64 | n u32`.
pub const ENTRY_LEN: usize = PageKey::ENCODED_LEN + 8 + 4;
/// Target size of an index block.
pub const INDEX_BLOCK_TARGET: usize = 4096;
/// Target size of a compact index block (format 3): about 90 entries, as many as a block of format 2 held. A block
/// is decoded whole when it is read, and a 4 KiB block of ~370 compact entries cost so much more to decode that
/// 10M-key gets that missed the block cache ran at 78k/s instead of 116k/s; the lookup block grows instead
/// (58 bytes per block, in memory while the file is open: about 0.6 bytes a record).
pub const COMPACT_BLOCK_TARGET: usize = 1024;
/// The writer's buffer: page blocks reach the file in pieces of about this size.
const WRITE_CHUNK: usize = 256 << 10;
/// Bytes written between two `sync_data` calls while a file is written.
const BYTES_PER_SYNC: u64 = 4 << 20;
/// Index blocks held in memory before they move to the writer's side file. Above what a MemIndexTable flush needs
/// (its compact index is a few MiB): a spilled byte is written twice.
const INDEX_SPILL: usize = 16 << 20;
/// A compact index block's `count u32 | first_offset u64` and trailing CRC.
const COMPACT_BLOCK_OVERHEAD: usize = 4 + 8 + 4;
/// Longest compact entry: tid 5 | depth 1 | prefix 32 | version 10 | kind 1 | len 4 (at most 16 MiB).
const MAX_COMPACT_ENTRY_LEN: usize = 5 + 1 + 32 + 10 + 1 + 4;
/// Shortest compact entry (a root page: one byte each).
const MIN_COMPACT_ENTRY_LEN: usize = 5;
/// Longest compact index block: blocks are sealed before an entry would take them past the target, unless the
/// entry is the block's first.
const MAX_COMPACT_BLOCK_LEN: usize =
    if COMPACT_BLOCK_TARGET > COMPACT_BLOCK_OVERHEAD + MAX_COMPACT_ENTRY_LEN {
        COMPACT_BLOCK_TARGET
    } else {
        COMPACT_BLOCK_OVERHEAD + MAX_COMPACT_ENTRY_LEN
    };
/// Entries per full index block of format versions 1 and 2: `(4096 - 8) / 58 = 70`, so a full block is
/// `8 + 70 * 58 = 4068` bytes.
pub const MAX_ENTRIES_PER_BLOCK: usize = (INDEX_BLOCK_TARGET - 8) / ENTRY_LEN;

/// What the engine records about an index file, stored in its footer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileMeta {
    /// Lowest version a record of this file may have (the previous file's `max_version + 1`, or lower).
    pub min_version: u64,
    /// Highest version a record of this file may have.
    pub max_version: u64,
    /// Where VDLS replay starts to rebuild what came after this file (opaque here: segment, offset).
    pub replay_from: (u32, u64),
    /// Number of page records in the file.
    pub records: u64,
}

/// One decoded entry of an index block: a key and where its page block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub key: PageKey,
    /// Offset of the page block (its `record_len` field).
    pub offset: u64,
    /// Length of the record, without the 8-byte page block header. At most [`MAX_RECORD_LEN`].
    pub len: u32,
}

impl IndexEntry {
    /// Offset just past this entry's page block.
    pub(crate) fn end(&self) -> u64 {
        self.offset + PAGE_BLOCK_HEADER_LEN + u64::from(self.len)
    }
}

/// The largest span [`IndexFile::read_entries`] reads at once (a few cold-tier blocks).
pub(crate) const MAX_SPAN_READ: u64 = 1 << 20;

/// A decoded index block, as cached in the [`BlockCache`]. Entries are strictly increasing by key.
#[derive(Debug)]
pub(crate) struct IndexBlock {
    pub(crate) entries: Vec<IndexEntry>,
}

impl IndexBlock {
    /// Memory held, for the cache's byte budget (never zero).
    pub(crate) fn mem_size(&self) -> usize {
        std::mem::size_of::<IndexBlock>()
            + self.entries.capacity() * std::mem::size_of::<IndexEntry>()
            + 64
    }
}

/// An entry of the lookup block, kept in memory while the file is open.
#[derive(Clone, Copy, Debug)]
struct LookupEntry {
    first_key: PageKey,
    /// Offset of the index block.
    offset: u64,
    /// Its number of entries (at least 1).
    count: u32,
    /// Its length in bytes.
    len: u32,
}

impl LookupEntry {
    fn block_len(&self) -> u64 {
        u64::from(self.len)
    }
}

/// Length of an index block (or of the lookup block) of `n` entries: count, entries, CRC.
fn index_block_len(n: usize) -> u64 {
    8 + (n as u64) * ENTRY_LEN as u64
}

/// CRC of a page block: over the encoded key, the little-endian record length, then the record. Equal to
/// `fsutil::crc` of the concatenation (crc32fast's incremental hasher), computed without copying the record.
fn page_crc(key: &[u8; PageKey::ENCODED_LEN], len: u32, record: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    h.update(&len.to_le_bytes());
    h.update(record);
    h.finalize()
}

/// Appends the compact index entry of `key`, whose record is `len` bytes (format version 3).
fn encode_compact_entry(out: &mut Vec<u8>, key: &PageKey, len: u32) {
    varint::put(out, key.tid.into());
    out.push(key.page.depth);
    out.extend_from_slice(&key.page.prefix[..usize::from(key.page.depth / 2)]);
    varint::put(out, key.version);
    out.push(key.kind as u8);
    varint::put(out, len.into());
}

/// Decodes the compact entry at the start of `b`: key, record length and the entry's length. Rejects what no
/// writer produces (an odd or too deep page, an unknown kind, a tid or length past 32 bits).
fn decode_compact_entry(b: &[u8]) -> std::result::Result<(PageKey, u32, usize), &'static str> {
    let (tid, mut at) = varint::get(b)?;
    let tid = u32::try_from(tid).map_err(|_| "trie id past 32 bits")?;
    let depth = *b.get(at).ok_or("entry ends early")?;
    at += 1;
    if depth & 1 != 0 || depth > MAX_PAGE_DEPTH {
        return Err("invalid page depth");
    }
    let n = usize::from(depth / 2);
    let mut prefix = [0u8; 32];
    prefix[..n].copy_from_slice(b.get(at..at + n).ok_or("entry ends early")?);
    at += n;
    let (version, k) = varint::get(&b[at..])?;
    at += k;
    let kind =
        PageKind::from_u8(*b.get(at).ok_or("entry ends early")?).ok_or("invalid page kind")?;
    at += 1;
    let (len, k) = varint::get(&b[at..])?;
    at += k;
    let len = u32::try_from(len).map_err(|_| "record length past 32 bits")?;
    let key = PageKey::new(tid, PageId { depth, prefix }, version, kind);
    Ok((key, len, at))
}

fn encode_entry(out: &mut Vec<u8>, key: &PageKey, offset: u64, n: u32) {
    out.extend_from_slice(&key.encode());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
}

/// Decodes one `ENTRY_LEN`-byte entry; `None` if the key does not parse.
fn decode_entry(b: &[u8]) -> Option<(PageKey, u64, u32)> {
    let key = PageKey::decode(b.get(..PageKey::ENCODED_LEN)?)?;
    let off = u64_at(b, PageKey::ENCODED_LEN)?;
    let n = u32_at(b, PageKey::ENCODED_LEN + 8)?;
    Some((key, off, n))
}

/// Splits a checksummed block `body | crc u32` and checks the CRC (over `body`). `None` on mismatch or if the
/// buffer is too short to hold a CRC.
fn checked_body(buf: &[u8]) -> Option<&[u8]> {
    let split = buf.len().checked_sub(4)?;
    let (body, crc) = buf.split_at(split);
    (fsutil::crc(body) == u32_at(crc, 0)?).then_some(body)
}

fn invalid_input(path: &Path, msg: String) -> Error {
    Error::io(
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidInput, msg),
    )
}

/// The footer, decoded. Offsets relative to the footer's start `F = file size - 80`:
///
/// ```text
/// F+0  min_version u64      F+32 index_offset u64    F+60 reserved u32 (zero)
/// F+8  max_version u64      F+40 lookup_offset u64   F+64 format_version u32
/// F+16 replay_offset u64    F+48 lookup_len u64      F+68 footer_crc u32 (over F+0..F+68)
/// F+24 records u64          F+56 replay_segment u32  F+72 magic [u8; 8]
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Footer {
    format: u32,
    meta: FileMeta,
    index_offset: u64,
    lookup_offset: u64,
    lookup_len: u64,
}

impl Footer {
    fn encode(&self) -> [u8; FOOTER_LEN as usize] {
        let mut b = [0u8; FOOTER_LEN as usize];
        b[0..8].copy_from_slice(&self.meta.min_version.to_le_bytes());
        b[8..16].copy_from_slice(&self.meta.max_version.to_le_bytes());
        b[16..24].copy_from_slice(&self.meta.replay_from.1.to_le_bytes());
        b[24..32].copy_from_slice(&self.meta.records.to_le_bytes());
        b[32..40].copy_from_slice(&self.index_offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.lookup_offset.to_le_bytes());
        b[48..56].copy_from_slice(&self.lookup_len.to_le_bytes());
        b[56..60].copy_from_slice(&self.meta.replay_from.0.to_le_bytes());
        // 60..64 reserved, zero.
        b[64..68].copy_from_slice(&self.format.to_le_bytes());
        let crc = fsutil::crc(&b[0..68]);
        b[68..72].copy_from_slice(&crc.to_le_bytes());
        b[72..80].copy_from_slice(&MAGIC);
        b
    }
}

fn encode_header(format: u32) -> [u8; HEADER_LEN as usize] {
    let mut b = [0u8; HEADER_LEN as usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&format.to_le_bytes());
    let crc = fsutil::crc(&b[0..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Writes one index file. [`IndexFileWriter::add`] must be called in strictly increasing key order.
///
/// Page blocks are streamed to the file as they are added; index entries are kept in memory (about 11 bytes per
/// record, bounded by the MemIndexTable being flushed; past [`INDEX_SPILL`] in a side file) and written by
/// [`IndexFileWriter::finish`] after the last page
/// block. A writer dropped without `finish` leaves a file without a footer, which [`IndexFile::open`] rejects as
/// corrupt: the engine deletes such a file (it still has its temporary name).
pub struct IndexFileWriter {
    path: PathBuf,
    out: AppendFile,
    /// Bytes not yet written to `out` (written in large pieces, not one `pwrite` per page block).
    pending: Vec<u8>,
    counters: Arc<Counters>,
    /// Bytes added so far: the offset of the next page block.
    pos: u64,
    /// The last key added; every new key must be greater.
    last: Option<PageKey>,
    records: u64,
    /// Lowest and highest version added, checked against the `FileMeta` at `finish`.
    versions: Option<(u64, u64)>,
    /// Entries of the index block being filled (encoded, without count and CRC).
    block: Vec<u8>,
    block_first: Option<PageKey>,
    /// Offset of the page block of `block_first`.
    block_first_offset: u64,
    block_count: u32,
    /// Finished index blocks, back to back, as they will be written (after the first `index_spilled` bytes).
    index: Vec<u8>,
    /// Index blocks moved out of memory into a side file (`<path>.index.tmp`) once `index` reached
    /// [`INDEX_SPILL`]: a file of millions of records (a bulk load) keeps only its lookup entries in memory.
    spill: Option<(PathBuf, AppendFile)>,
    index_spilled: u64,
    fs: SharedStorage,
    /// `(first key, offset relative to the start of the index region, entries, bytes)` of each finished index
    /// block.
    lookup: Vec<(PageKey, u64, u32, u32)>,
    /// Set after an I/O error: the file is in an unknown state and must be deleted.
    failed: bool,
    /// Bytes written since the last `sync_data`.
    unsynced: u64,
    /// [`WRITE_FORMAT_VERSION`], or [`BASES_ONLY_VERSION`] for a prune's base file.
    format: u32,
}

impl IndexFileWriter {
    /// Creates `path` (which must not exist; the engine passes a temporary name and renames it after `finish`) and
    /// writes the header.
    pub fn create(fs: &SharedStorage, path: &Path, counters: Arc<Counters>) -> Result<Self> {
        Self::create_with_format(fs, path, counters, WRITE_FORMAT_VERSION)
    }

    /// [`IndexFileWriter::create`] for a prune's base file ([`BASES_ONLY_VERSION`]): [`IndexFileWriter::add`]
    /// then refuses DeltaPage keys.
    pub fn create_bases_only(
        fs: &SharedStorage,
        path: &Path,
        counters: Arc<Counters>,
    ) -> Result<Self> {
        Self::create_with_format(fs, path, counters, BASES_ONLY_VERSION)
    }

    fn create_with_format(
        fs: &SharedStorage,
        path: &Path,
        counters: Arc<Counters>,
        format: u32,
    ) -> Result<Self> {
        let file = fsutil::create_new(&**fs, path)?;
        let mut w = IndexFileWriter {
            path: path.to_path_buf(),
            out: AppendFile { file, end: 0 },
            pending: Vec::with_capacity(WRITE_CHUNK),
            counters,
            pos: 0,
            last: None,
            records: 0,
            versions: None,
            block: Vec::with_capacity(COMPACT_BLOCK_TARGET),
            block_first: None,
            block_first_offset: 0,
            block_count: 0,
            index: Vec::new(),
            spill: None,
            index_spilled: 0,
            fs: fs.clone(),
            lookup: Vec::new(),
            failed: false,
            unsynced: 0,
            format,
        };
        w.write(&encode_header(format))?;
        Ok(w)
    }

    /// Records added so far.
    #[cfg(test)]
    pub fn records(&self) -> u64 {
        self.records
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.pending.extend_from_slice(bytes);
        self.pos += bytes.len() as u64;
        Counters::add(&self.counters.bytes_written, bytes.len() as u64);
        if self.pending.len() >= WRITE_CHUNK {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Writes what is buffered (what a crash in the middle of a flush may leave on disk).
    #[cfg(test)]
    pub fn write_buffered(&mut self) -> Result<()> {
        self.write_pending()
    }

    fn write_pending(&mut self) -> Result<()> {
        if let Err(e) = self.out.append(&self.pending) {
            self.failed = true;
            return Err(Error::io(&self.path, e));
        }
        // Written back as it goes (RocksDB's `bytes_per_sync`): one fsync of a whole large file at the end would
        // queue the commits' own fsyncs behind all of its dirty pages.
        self.unsynced += self.pending.len() as u64;
        if self.unsynced >= BYTES_PER_SYNC {
            self.unsynced = 0;
            if let Err(e) = self.out.file.sync_data() {
                self.failed = true;
                return Err(Error::io(&self.path, e));
            }
        }
        self.pending.clear();
        Ok(())
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            return Err(invalid_input(
                &self.path,
                "an earlier write to this index file failed".into(),
            ));
        }
        Ok(())
    }

    /// Appends one page record. Errors (nothing written) if `key` is not greater than the previous key, if its page
    /// id breaks the [`super::PageId`] invariant, or if the record is above [`MAX_RECORD_LEN`].
    pub fn add(&mut self, key: &PageKey, record: &[u8]) -> Result<()> {
        self.check_usable()?;
        if let Some(last) = &self.last {
            if key <= last {
                return Err(invalid_input(
                    &self.path,
                    format!("index file keys out of order: {key:?} after {last:?}"),
                ));
            }
        }
        if !key.page.is_valid() {
            return Err(invalid_input(
                &self.path,
                format!("invalid page id {:?}", key.page),
            ));
        }
        if self.format >= BASES_ONLY_VERSION && key.kind != PageKind::Base {
            return Err(invalid_input(
                &self.path,
                format!("a base file holds BasePages only, not {key:?}"),
            ));
        }
        if record.len() > MAX_RECORD_LEN {
            return Err(Error::TooLarge {
                what: "page record",
                size: record.len(),
                limit: MAX_RECORD_LEN,
            });
        }
        let len = record.len() as u32; // fits: at most 16 MiB
        let kb = key.encode();
        let offset = self.pos;
        let mut head = [0u8; PAGE_BLOCK_HEADER_LEN as usize];
        head[0..4].copy_from_slice(&len.to_le_bytes());
        head[4..8].copy_from_slice(&page_crc(&kb, len, record).to_le_bytes());
        self.write(&head)?;
        self.write(record)?;

        let start = self.block.len();
        encode_compact_entry(&mut self.block, key, len);
        if self.block_count > 0 && COMPACT_BLOCK_OVERHEAD + self.block.len() > COMPACT_BLOCK_TARGET
        {
            // The entry starts the next block.
            let entry = self.block.split_off(start);
            self.seal_block()?;
            self.block = entry;
        }
        if self.block_count == 0 {
            self.block_first = Some(*key);
            self.block_first_offset = offset;
        }
        self.block_count += 1;
        self.last = Some(*key);
        self.records += 1;
        self.versions = Some(match self.versions {
            None => (key.version, key.version),
            Some((lo, hi)) => (lo.min(key.version), hi.max(key.version)),
        });
        Ok(())
    }

    /// Moves the index block being filled to `index` and records it for the lookup block; moves `index` to the
    /// side file when it is large.
    fn seal_block(&mut self) -> Result<()> {
        let Some(first) = self.block_first.take() else {
            return Ok(());
        };
        let rel = self.index_spilled + self.index.len() as u64;
        let start = self.index.len();
        self.index
            .extend_from_slice(&self.block_count.to_le_bytes());
        self.index
            .extend_from_slice(&self.block_first_offset.to_le_bytes());
        self.index.extend_from_slice(&self.block);
        let crc = fsutil::crc(&self.index[start..]);
        self.index.extend_from_slice(&crc.to_le_bytes());
        // At most MAX_COMPACT_BLOCK_LEN bytes (1 KiB) and so fewer than 2^16 entries: both fit the lookup's `n`.
        let len = (self.index.len() - start) as u32;
        self.lookup.push((first, rel, self.block_count, len));
        self.block.clear();
        self.block_count = 0;
        if self.index.len() >= INDEX_SPILL {
            if let Err(e) = self.spill_index() {
                self.failed = true;
                return Err(e);
            }
        }
        Ok(())
    }

    fn spill_index(&mut self) -> Result<()> {
        if self.spill.is_none() {
            let mut name = self.path.clone().into_os_string();
            name.push(".index.tmp");
            let path = PathBuf::from(name);
            let file = fsutil::create_new(&*self.fs, &path)?;
            self.spill = Some((path, AppendFile { file, end: 0 }));
        }
        if let Some((path, f)) = &mut self.spill {
            f.append(&self.index).map_err(|e| Error::io(&*path, e))?;
        }
        self.index_spilled += self.index.len() as u64;
        self.index.clear();
        Ok(())
    }

    /// Writes the index blocks, the lookup block and the footer, then fsyncs the file. Returns the file size.
    ///
    /// `meta.records` must equal the number of records added, and every added version must lie in
    /// `meta.min_version..=meta.max_version` (the invariant that lets the engine pick one file per version).
    pub fn finish(mut self, meta: &FileMeta) -> Result<u64> {
        self.check_usable()?;
        if meta.records != self.records {
            return Err(invalid_input(
                &self.path,
                format!(
                    "FileMeta says {} records, {} were added",
                    meta.records, self.records
                ),
            ));
        }
        if let Some((lo, hi)) = self.versions {
            if lo < meta.min_version || hi > meta.max_version {
                return Err(invalid_input(
                    &self.path,
                    format!(
                        "records have versions {lo}..={hi}, outside the file's {}..={}",
                        meta.min_version, meta.max_version
                    ),
                ));
            }
        }
        self.seal_block()?;

        // Index blocks: right after the last page block (first those in the side file, read back in pieces).
        let index_offset = self.pos;
        if let Some((path, side)) = self.spill.take() {
            let mut buf = vec![0u8; WRITE_CHUNK];
            let mut at = 0;
            while at < side.end {
                let n = (side.end - at).min(WRITE_CHUNK as u64) as usize;
                fsutil::read_exact_at(&*side.file, &path, &mut buf[..n], at)?;
                self.write(&buf[..n])?;
                at += n as u64;
            }
            drop(side);
            fsutil::remove_file(&*self.fs, &path)?;
        }
        let index = std::mem::take(&mut self.index);
        self.write(&index)?;

        // Lookup block, with absolute offsets now that the index region's start is known.
        let lookup_offset = self.pos;
        let mut lookup = Vec::with_capacity(index_block_len(self.lookup.len()) as usize);
        lookup.extend_from_slice(&(self.lookup.len() as u32).to_le_bytes());
        for (first, rel, count, len) in &self.lookup {
            encode_entry(&mut lookup, first, index_offset + rel, count << 16 | len);
        }
        let crc = fsutil::crc(&lookup);
        lookup.extend_from_slice(&crc.to_le_bytes());
        self.write(&lookup)?;

        let footer = Footer {
            format: self.format,
            meta: *meta,
            index_offset,
            lookup_offset,
            lookup_len: lookup.len() as u64,
        };
        self.write(&footer.encode())?;

        // Everything reaches the disk before finish returns: the engine renames the file to its final name only
        // after this, so a final name always denotes a complete file.
        self.write_pending()?;
        self.out
            .file
            .sync_all()
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(self.pos)
    }
}

impl std::fmt::Debug for IndexFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFileWriter")
            .field("path", &self.path)
            .field("records", &self.records)
            .field("bytes", &self.pos)
            .finish()
    }
}

/// An open, immutable index file. `Send + Sync`: many threads read it at once with `pread`.
///
/// Every block read is checked against its CRC and parsed with bounds checks; damage is reported as
/// [`Error::Corrupt`] naming this file and the offset of the damaged structure, never returned as data.
pub struct IndexFile {
    path: PathBuf,
    file_no: u64,
    size: u64,
    meta: FileMeta,
    /// End of the page block region (= start of the index blocks).
    pages_end: u64,
    /// The lookup block, decoded: first keys strictly increasing, index blocks back to back from `pages_end`.
    lookup: Vec<LookupEntry>,
    /// Index blocks of format [`COMPACT_INDEX_VERSION`] or later.
    compact: bool,
    /// Format [`BASES_ONLY_VERSION`] or later.
    bases_only: bool,
    counters: Arc<Counters>,
    cache: Arc<BlockCache>,
}

impl IndexFile {
    /// Opens and validates the file: header magic and CRC, footer magic, format version (a newer version in both
    /// header and footer is [`Error::UnsupportedFormat`]), footer CRC, the footer's offsets against the file size,
    /// and the lookup block's CRC and structure. The lookup block stays in memory.
    ///
    /// A file without a valid footer (torn during a flush, or truncated) is [`Error::Corrupt`]; the engine deletes
    /// it only if it still has a temporary name.
    ///
    /// `file_no` keys this file's blocks in `cache`; it must not be reused for another file while `cache` lives.
    pub fn open(
        path: &Path,
        file_no: u64,
        counters: Arc<Counters>,
        cache: Arc<BlockCache>,
    ) -> Result<Self> {
        let file = fsutil::open_read(cache.storage(), path)?;
        let size = file.size().map_err(|e| Error::io(path, e))?;
        let corrupt = |offset: u64, what: String| Error::corrupt(path, offset, what);
        if size < HEADER_LEN + 8 + FOOTER_LEN {
            return Err(corrupt(
                0,
                format!(
                    "{size} bytes is too short for an index file (torn during flush or truncated)"
                ),
            ));
        }

        // Header. Its 16-byte layout is the same in every format version, so its CRC is checked before its version
        // is believed.
        let mut h = [0u8; HEADER_LEN as usize];
        fsutil::read_exact_at(&*file, path, &mut h, 0)?;
        if h[0..8] != MAGIC {
            return Err(corrupt(0, "bad magic: not a letus index file".into()));
        }
        if checked_body(&h).is_none() {
            return Err(corrupt(0, "header checksum mismatch".into()));
        }
        let header_version = u32_at(&h, 8).unwrap_or(0);

        // Footer.
        let foot_at = size - FOOTER_LEN;
        let mut f = [0u8; FOOTER_LEN as usize];
        fsutil::read_exact_at(&*file, path, &mut f, foot_at)?;
        if f[72..80] != MAGIC {
            return Err(corrupt(
                foot_at,
                "no footer: the file was torn during a flush or truncated".into(),
            ));
        }
        let footer_version = u32_at(&f, 64).unwrap_or(0);
        if footer_version != header_version {
            return Err(corrupt(
                foot_at + 64,
                format!("footer format version {footer_version} differs from the header's {header_version}"),
            ));
        }
        // Both ends agree (and the header's CRC holds): a newer version is real, not a flipped byte. Its footer
        // may have another layout, so the footer CRC is only checked for versions we know.
        if header_version > FORMAT_VERSION {
            return Err(Error::UnsupportedFormat {
                path: path.to_path_buf(),
                found: header_version,
            });
        }
        if header_version < OLDEST_FORMAT_VERSION {
            return Err(corrupt(
                8,
                format!("format version {header_version} does not exist"),
            ));
        }
        if checked_body(&f[0..72]).is_none() {
            return Err(corrupt(foot_at, "footer checksum mismatch".into()));
        }
        Counters::add(&counters.bytes_read, HEADER_LEN + FOOTER_LEN);

        let field = |at: usize| u64_at(&f, at).unwrap_or(0);
        let meta = FileMeta {
            min_version: field(0),
            max_version: field(8),
            replay_from: (u32_at(&f, 56).unwrap_or(0), field(16)),
            records: field(24),
        };
        let footer = Footer {
            format: header_version,
            meta,
            index_offset: field(32),
            lookup_offset: field(40),
            lookup_len: field(48),
        };
        // The CRC held, so these are what the writer wrote; checking them still keeps a buggy writer's file (or a
        // crafted one) from leading a reader out of bounds.
        let reserved = u32_at(&f, 60).unwrap_or(1);
        let layout_ok = reserved == 0
            && footer.index_offset >= HEADER_LEN
            && footer.index_offset <= footer.lookup_offset
            && footer.lookup_len >= 8
            && footer.lookup_offset.checked_add(footer.lookup_len) == Some(foot_at)
            && (meta.records == 0 || meta.min_version <= meta.max_version);
        if !layout_ok {
            return Err(corrupt(foot_at, format!("inconsistent footer {footer:?}")));
        }

        // Lookup block. Its length is bounded by the file size (checked above), so the allocation is too.
        let mut buf = vec![0u8; footer.lookup_len as usize];
        fsutil::read_exact_at(&*file, path, &mut buf, footer.lookup_offset)?;
        Counters::add(&counters.bytes_read, footer.lookup_len);
        let compact = header_version >= COMPACT_INDEX_VERSION;
        let lookup = parse_lookup(path, &buf, &footer, compact)?;

        cache.keep_file(file_no, file);
        Ok(IndexFile {
            path: path.to_path_buf(),
            file_no,
            size,
            meta,
            pages_end: footer.index_offset,
            lookup,
            compact,
            bases_only: header_version >= BASES_ONLY_VERSION,
            counters,
            cache,
        })
    }

    /// The metadata stored in the footer.
    pub fn meta(&self) -> &FileMeta {
        &self.meta
    }

    /// Whether every record is a BasePage that may stand for the DeltaPage of its key version
    /// ([`BASES_ONLY_VERSION`]).
    pub fn bases_only(&self) -> bool {
        self.bases_only
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Number of index blocks.
    #[cfg(test)]
    pub fn index_blocks(&self) -> usize {
        self.lookup.len()
    }

    /// Offset, first key and length of each index block.
    #[cfg(test)]
    pub fn index_block_layout(&self) -> Vec<(u64, PageKey, u32)> {
        self.lookup
            .iter()
            .map(|l| (l.offset, l.first_key, l.len))
            .collect()
    }

    /// The record with the greatest key `<= key` whose `(tid, page)` equal `key`'s: the newest record of that page
    /// at or below `key.version` (at equal versions, `Base < Delta`). `None` if this file has no such record.
    ///
    /// Cost: at most one index block read (none on a cache hit) and one page block read.
    pub fn floor(&self, key: &PageKey) -> Result<Option<(PageKey, Vec<u8>)>> {
        let Some(e) = self.floor_entry(key)? else {
            return Ok(None);
        };
        if !e.key.same_page(key) {
            return Ok(None);
        }
        Ok(Some((e.key, self.read_record(&e)?)))
    }

    /// [`IndexFile::floor`], and with it the records the head's chain has in this file, newest first, when they
    /// end at a BasePage in the same index block (empty otherwise): the caller needs no other read to load the page.
    #[allow(clippy::type_complexity)]
    pub(crate) fn floor_with_chain(
        &self,
        key: &PageKey,
    ) -> Result<Option<(PageKey, Vec<u8>, Vec<(PageKey, Vec<u8>)>)>> {
        let Some((block, at)) = self.floor_slot(key)? else {
            return Ok(None);
        };
        let e = block.entries[at];
        if !e.key.same_page(key) {
            return Ok(None);
        }
        // Loading a page from a DeltaPage reads its predecessors next, and those in this file are the page's
        // records just before it, down to a BasePage (in a consolidated file, §2.8, every chain ends in the file
        // at the BasePage of its first version). When that BasePage is in the same index block, read them all at
        // once: in the cold tier that is one GET where the head and the rest could each cost one (the rest is then
        // handed to the chain walk).
        let mut first = at;
        let chain_to_base = e.key.kind == PageKind::Delta
            && loop {
                let Some(p) = first.checked_sub(1) else {
                    break false;
                };
                let b = block.entries[p];
                if !b.key.same_page(&e.key) || e.end() - b.offset > MAX_SPAN_READ {
                    break false;
                }
                first = p;
                if b.key.kind == PageKind::Base {
                    break true;
                }
            };
        if !chain_to_base {
            return Ok(Some((e.key, self.read_record(&e)?, Vec::new())));
        }
        let entries = &block.entries[first..=at];
        let mut records = self.read_entries(entries)?;
        let head = records.pop().unwrap_or_default();
        let chain = entries.iter().map(|e| e.key).zip(records).rev().collect();
        Ok(Some((e.key, head, chain)))
    }

    /// Where the newest record of `key`'s page at or below `key.version` is, without reading it (at most one
    /// index block read): for issuing several record reads at once.
    pub(crate) fn locate(&self, key: &PageKey) -> Result<Option<IndexEntry>> {
        Ok(self.floor_entry(key)?.filter(|e| e.key.same_page(key)))
    }

    /// The record an entry of [`IndexFile::locate`] names (one read).
    pub(crate) fn read_entry(&self, e: &IndexEntry) -> Result<Vec<u8>> {
        self.read_record(e)
    }

    /// The byte ranges `(start, len)` of this file worth keeping on a fast disk when the rest of it moves to a slow
    /// tier, in order and disjoint: the header and the page blocks of pages shallower than `depth` (the top of
    /// every trie, which every proof and every update of an old version reads), and the index blocks, lookup
    /// block and footer (which every lookup reads). Keys are ordered by trie, then depth: each trie's top pages
    /// are one run of records, at the start of that trie's records. Reads (past the block cache) only the index
    /// blocks that can hold such records: those starting above `depth`, and those where a trie starts.
    pub fn hot_ranges(&self, depth: u8) -> Result<Vec<(u64, u64)>> {
        let mut runs: Vec<(u64, u64)> = vec![(0, HEADER_LEN)];
        for (i, l) in self.lookup.iter().enumerate() {
            let next = self.lookup.get(i + 1).map(|n| n.first_key.tid);
            if l.first_key.page.depth >= depth && next == Some(l.first_key.tid) {
                continue;
            }
            for e in self
                .read_block(i)?
                .entries
                .iter()
                .filter(|e| e.key.page.depth < depth)
            {
                match runs.last_mut() {
                    Some(last) if last.1 >= e.offset => last.1 = last.1.max(e.end()),
                    _ => runs.push((e.offset, e.end())),
                }
            }
        }
        // A file of very many tries would give as many runs: neighbours are joined (pinning the records between
        // them too) until few enough are left for the tier manifest to list each.
        while runs.len() > MAX_HOT_RUNS {
            runs = runs.chunks(2).map(|p| (p[0].0, p[p.len() - 1].1)).collect();
        }
        let mut ranges: Vec<(u64, u64)> = runs.into_iter().map(|(s, e)| (s, e - s)).collect();
        ranges.push((self.pages_end, self.size - self.pages_end));
        Ok(ranges)
    }

    /// The record stored under exactly `key`.
    pub fn get(&self, key: &PageKey) -> Result<Option<Vec<u8>>> {
        match self.floor_entry(key)? {
            Some(e) if e.key == *key => Ok(Some(self.read_record(&e)?)),
            _ => Ok(None),
        }
    }

    /// The greatest entry `<= key` in the whole file.
    fn floor_entry(&self, key: &PageKey) -> Result<Option<IndexEntry>> {
        Ok(self.floor_slot(key)?.map(|(block, j)| block.entries[j]))
    }

    /// The index block holding the greatest key `<= key` and that entry's position in it.
    fn floor_slot(&self, key: &PageKey) -> Result<Option<(Arc<IndexBlock>, usize)>> {
        // The last index block whose first key is <= key holds the floor: the next block starts above key. In a
        // sequential scope that is most often the block used last.
        let covers = |n: usize| {
            self.lookup.get(n).is_some_and(|l| l.first_key <= *key)
                && self.lookup.get(n + 1).is_none_or(|l| l.first_key > *key)
        };
        let i = match sequential::active()
            .then(|| sequential::last_block_number(self.file_no))
            .flatten()
        {
            Some(n) if covers(n) => n + 1,
            _ => self.lookup.partition_point(|l| l.first_key <= *key),
        };
        if i == 0 {
            return Ok(None);
        }
        let block = if sequential::active() {
            self.block_sequential(i - 1)?
        } else {
            self.block(i - 1)?
        };
        let j = block.entries.partition_point(|e| e.key <= *key);
        // j >= 1: the block's first key equals the lookup's first key (checked when parsed), which is <= key.
        Ok(j.checked_sub(1).map(|j| (block, j)))
    }

    /// All keys in order, without reading page records. Blocks already cached are used; blocks read from disk are
    /// not added to the cache (a full scan would evict the hot blocks).
    #[cfg(test)]
    pub fn keys(&self) -> Result<Vec<PageKey>> {
        let mut keys =
            Vec::with_capacity(usize::try_from(self.meta.records).unwrap_or(0).min(1 << 24));
        self.scan(|e| {
            keys.push(e.key);
            Ok(())
        })?;
        Ok(keys)
    }

    /// Reads every index block and every page record and checks their checksums and structure (for verification
    /// tools). Returns the number of records.
    #[cfg(test)]
    pub fn verify(&self) -> Result<u64> {
        let mut n = 0u64;
        self.scan(|e| {
            self.read_record(e)?;
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }

    /// Visits every entry in key order, checking the order across blocks and that the page blocks tile the page
    /// region exactly (the checks inside one block are done when it is parsed).
    pub(crate) fn scan(&self, mut visit: impl FnMut(&IndexEntry) -> Result<()>) -> Result<()> {
        let mut prev: Option<PageKey> = None;
        let mut next_offset = HEADER_LEN;
        for (i, l) in self.lookup.iter().enumerate() {
            let block = match self.cache.get(self.file_no, l.offset) {
                Some(b) => {
                    Counters::add(&self.counters.block_cache_hits, 1);
                    b
                }
                None => Arc::new(self.read_block(i)?),
            };
            for e in &block.entries {
                if prev.is_some_and(|p| p >= e.key) || e.offset != next_offset {
                    return Err(Error::corrupt(
                        &self.path,
                        l.offset,
                        format!("index block {i} does not continue the previous one"),
                    ));
                }
                prev = Some(e.key);
                next_offset = e.end();
                visit(e)?;
            }
        }
        if next_offset != self.pages_end {
            return Err(Error::corrupt(
                &self.path,
                next_offset,
                format!(
                    "page blocks end at {next_offset}, the footer says {}",
                    self.pages_end
                ),
            ));
        }
        Ok(())
    }

    /// Index block `i`, from the cache or from disk (then cached).
    fn block(&self, i: usize) -> Result<Arc<IndexBlock>> {
        let l = &self.lookup[i];
        let (block, hit) = self
            .cache
            .get_or_load(self.file_no, l.offset, || self.read_block(i).map(Arc::new))?;
        if hit {
            Counters::add(&self.counters.block_cache_hits, 1);
        }
        Ok(block)
    }

    /// [`IndexFile::block`] in a [`sequential::Sequential`] scope: the block used last in this file when it is
    /// that one, else the cached block, else the block read without adding it to the cache.
    fn block_sequential(&self, i: usize) -> Result<Arc<IndexBlock>> {
        if let Some(b) = sequential::last_block(self.file_no, i) {
            return Ok(b);
        }
        let b = match self.cache.get(self.file_no, self.lookup[i].offset) {
            Some(b) => {
                Counters::add(&self.counters.block_cache_hits, 1);
                b
            }
            None => Arc::new(self.read_block(i)?),
        };
        sequential::remember_block(self.file_no, i, &b);
        Ok(b)
    }

    /// The bytes `[lo, hi)` of the page region: from the [`sequential::Sequential`] scope's window when one is
    /// open, else with one read.
    fn read_pages(&self, lo: u64, hi: u64) -> Result<Vec<u8>> {
        let read = |at: u64, buf: &mut [u8]| -> Result<()> {
            let file = self.cache.file(self.file_no, &self.path)?;
            fsutil::read_exact_at(&*file, &self.path, buf, at)?;
            Counters::add(&self.counters.bytes_read, buf.len() as u64);
            Ok(())
        };
        if let Some(bytes) = sequential::read_span(self.file_no, lo, hi, self.pages_end, read) {
            return bytes;
        }
        let mut buf = vec![0u8; usize::try_from(hi.saturating_sub(lo)).unwrap_or(0)];
        read(lo, &mut buf)?;
        Ok(buf)
    }

    /// Reads, checks and decodes index block `i`.
    fn read_block(&self, i: usize) -> Result<IndexBlock> {
        let l = self.lookup[i];
        // The lookup block was checked at open: the block lies inside the index region and its length is bounded.
        let len = l.block_len() as usize;
        let mut buf = vec![0u8; len];
        let file = self.cache.file(self.file_no, &self.path)?;
        fsutil::read_exact_at(&*file, &self.path, &mut buf, l.offset)?;
        Counters::add(&self.counters.index_block_reads, 1);
        Counters::add(&self.counters.bytes_read, len as u64);
        let corrupt =
            |at: usize, what: String| Error::corrupt(&self.path, l.offset + at as u64, what);

        let body = checked_body(&buf)
            .ok_or_else(|| corrupt(0, format!("index block {i} checksum mismatch")))?;
        if u32_at(body, 0) != Some(l.count) {
            return Err(corrupt(
                0,
                format!("index block {i} entry count differs from the lookup block"),
            ));
        }
        let mut entries: Vec<IndexEntry> = Vec::with_capacity(l.count as usize);
        let mut push = |at: usize, e: IndexEntry| -> Result<()> {
            let in_bounds = e.len as usize <= MAX_RECORD_LEN
                && e.offset >= HEADER_LEN
                && e.offset
                    .checked_add(PAGE_BLOCK_HEADER_LEN + u64::from(e.len))
                    .is_some_and(|end| end <= self.pages_end);
            // Page blocks are written back to back in key order, so within a block each entry starts where the
            // previous one ended.
            let ordered = match entries.last() {
                None => e.key == l.first_key,
                Some(p) => p.key < e.key && p.end() == e.offset,
            };
            let versions_ok =
                e.key.version >= self.meta.min_version && e.key.version <= self.meta.max_version;
            // A base file (format 4) holds BasePages only; its readers rely on it (§2.9).
            let kind_ok = !self.bases_only || e.key.kind == PageKind::Base;
            if !in_bounds || !ordered || !versions_ok || !kind_ok {
                return Err(corrupt(at, format!("inconsistent index entry {e:?}")));
            }
            entries.push(e);
            Ok(())
        };
        if self.compact {
            let mut offset = u64_at(body, 4).unwrap_or(0);
            let mut at = 12;
            for _ in 0..l.count {
                let (key, len, n) = body
                    .get(at..)
                    .ok_or("entry ends early")
                    .and_then(decode_compact_entry)
                    .map_err(|what| corrupt(at, format!("undecodable index entry: {what}")))?;
                push(at, IndexEntry { key, offset, len })?;
                offset = offset.saturating_add(PAGE_BLOCK_HEADER_LEN + u64::from(len));
                at += n;
            }
            if at != body.len() {
                return Err(corrupt(
                    at,
                    format!("index block {i} has bytes after its entries"),
                ));
            }
        } else {
            for (j, chunk) in body[4..].chunks_exact(ENTRY_LEN).enumerate() {
                let at = 4 + j * ENTRY_LEN;
                let (key, offset, len) = decode_entry(chunk)
                    .ok_or_else(|| corrupt(at, "undecodable page key".into()))?;
                push(at, IndexEntry { key, offset, len })?;
            }
        }
        Ok(IndexBlock { entries })
    }

    /// Reads and checks one page record (one `pread` of header and record).
    fn read_record(&self, e: &IndexEntry) -> Result<Vec<u8>> {
        // e.len <= MAX_RECORD_LEN and the block lies inside the page region: checked when the index block was
        // parsed.
        let mut buf = self.read_pages(e.offset, e.end())?;
        Counters::add(&self.counters.page_reads, 1);
        self.check_record(e, &buf)?;
        buf.drain(..PAGE_BLOCK_HEADER_LEN as usize);
        Ok(buf)
    }

    /// The records of `entries` (of this file), read with one read of the span from the first to the last: the
    /// records of one page's DeltaPage chain in a consolidated file (§2.8) sit next to each other, and in the cold
    /// tier one read is one ranged GET where reads of each record could each cost their own. Entries spread over
    /// more than [`MAX_SPAN_READ`] bytes are read one by one.
    pub(crate) fn read_entries(&self, entries: &[IndexEntry]) -> Result<Vec<Vec<u8>>> {
        let lo = entries.iter().map(|e| e.offset).min().unwrap_or(0);
        let hi = entries.iter().map(IndexEntry::end).max().unwrap_or(0);
        if entries.len() < 2 || hi - lo > MAX_SPAN_READ {
            return entries.iter().map(|e| self.read_record(e)).collect();
        }
        let buf = self.read_pages(lo, hi)?;
        Counters::add(&self.counters.page_reads, entries.len() as u64);
        entries
            .iter()
            .map(|e| {
                let at = usize::try_from(e.offset - lo).unwrap_or(usize::MAX);
                let end = usize::try_from(e.end() - lo).unwrap_or(usize::MAX);
                let block = &buf[at..end];
                self.check_record(e, block)?;
                Ok(block[PAGE_BLOCK_HEADER_LEN as usize..].to_vec())
            })
            .collect()
    }

    /// Checks page block `block` (header and record) of `e` against its length and checksum.
    fn check_record(&self, e: &IndexEntry, block: &[u8]) -> Result<()> {
        let stored_len = u32_at(block, 0);
        let stored_crc = u32_at(block, 4);
        let record = &block[PAGE_BLOCK_HEADER_LEN as usize..];
        if stored_len != Some(e.len) || stored_crc != Some(page_crc(&e.key.encode(), e.len, record))
        {
            return Err(Error::corrupt(
                &self.path,
                e.offset,
                format!("page block of {:?} fails its checksum", e.key),
            ));
        }
        Ok(())
    }

    /// Drops this file's index blocks and its descriptor from the shared cache (when the file is deleted).
    pub fn evict_from_cache(&self) {
        for l in &self.lookup {
            self.cache.remove(self.file_no, l.offset);
        }
        self.cache.forget_file(self.file_no);
    }
}

/// Checks and decodes the lookup block against the footer: CRC, entry count, index blocks of plausible sizes (1..=70
/// entries of 58 bytes; compact: at least one entry, at most [`MAX_COMPACT_BLOCK_LEN`] bytes) back to back from
/// `index_offset` to `lookup_offset`, first keys strictly increasing, entry counts summing to `records`.
fn parse_lookup(
    path: &Path,
    buf: &[u8],
    footer: &Footer,
    compact: bool,
) -> Result<Vec<LookupEntry>> {
    let base = footer.lookup_offset;
    let corrupt = |at: usize, what: String| Error::corrupt(path, base + at as u64, what);
    let body =
        checked_body(buf).ok_or_else(|| corrupt(0, "lookup block checksum mismatch".into()))?;
    let count = u32_at(body, 0).unwrap_or(0) as usize;
    if index_block_len(count) != buf.len() as u64 {
        return Err(corrupt(
            0,
            format!(
                "lookup block of {} bytes cannot hold {count} entries",
                buf.len()
            ),
        ));
    }
    let mut out: Vec<LookupEntry> = Vec::with_capacity(count);
    let mut next = footer.index_offset;
    let mut records = 0u64;
    for (i, chunk) in body[4..].chunks_exact(ENTRY_LEN).enumerate() {
        let at = 4 + i * ENTRY_LEN;
        let (first_key, offset, n) =
            decode_entry(chunk).ok_or_else(|| corrupt(at, "undecodable page key".into()))?;
        let (count, len) = if compact {
            (n >> 16, n & 0xffff)
        } else {
            (n, index_block_len(n as usize) as u32)
        };
        let l = LookupEntry {
            first_key,
            offset,
            count,
            len,
        };
        let sized = if compact {
            count >= 1
                && (len as usize) <= MAX_COMPACT_BLOCK_LEN
                && len as usize >= COMPACT_BLOCK_OVERHEAD + count as usize * MIN_COMPACT_ENTRY_LEN
        } else {
            (1..=MAX_ENTRIES_PER_BLOCK as u32).contains(&count)
        };
        let ok = sized && offset == next && out.last().is_none_or(|p| p.first_key < first_key);
        if !ok {
            return Err(corrupt(at, format!("inconsistent lookup entry {l:?}")));
        }
        next += l.block_len();
        records += u64::from(count);
        out.push(l);
    }
    if next != footer.lookup_offset || records != footer.meta.records {
        return Err(corrupt(
            0,
            format!(
                "index blocks end at {next} holding {records} records; the footer says {} and {}",
                footer.lookup_offset, footer.meta.records
            ),
        ));
    }
    if out.is_empty() && footer.index_offset != HEADER_LEN {
        return Err(corrupt(0, "an empty file has page blocks".into()));
    }
    Ok(out)
}

impl std::fmt::Debug for IndexFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFile")
            .field("path", &self.path)
            .field("file_no", &self.file_no)
            .field("size", &self.size)
            .field("meta", &self.meta)
            .field("index_blocks", &self.lookup.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsvps_page_crc_is_crc_of_concatenation() {
        let key = PageKey::new(
            7,
            super::super::PageId::ROOT,
            9,
            super::super::PageKind::Delta,
        );
        let kb = key.encode();
        let record = b"some page record";
        let mut cat = kb.to_vec();
        cat.extend_from_slice(&(record.len() as u32).to_le_bytes());
        cat.extend_from_slice(record);
        assert_eq!(
            page_crc(&kb, record.len() as u32, record),
            fsutil::crc(&cat)
        );
    }

    #[test]
    fn lsvps_sizes() {
        assert_eq!(ENTRY_LEN, 58);
        assert_eq!(MAX_ENTRIES_PER_BLOCK, 70);
        assert_eq!(index_block_len(MAX_ENTRIES_PER_BLOCK), 4068);
        assert_eq!(encode_header(WRITE_FORMAT_VERSION).len() as u64, HEADER_LEN);
    }
}
