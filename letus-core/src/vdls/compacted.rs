//! A compacted data file (`NNNNNN.vdc`, FORMAT.md §1.6): the records of sealed data file `NNNNNN` that value-log
//! GC kept, byte for byte, and a table from each one's original offset to where it is now. Locations keep naming
//! the original offsets, so no leaf, tombstone or history link changes when a file is compacted: a read looks
//! the offset up in the table. A record not in the table was dropped as unreachable from every retained version.
//!
//! ```text
//! header (32 bytes): magic "LETUSVDC" | u32 format = 1 | u32 file_id | u64 original_len | u32 count
//!                    | u32 crc32(bytes 0..28)
//! records: the kept records back to back from offset 32, in ascending original offset
//! table:   count x (varint gap | varint len), the records in the same order; gap = original offset less the end
//!          of the previous kept record's original bytes (less 32 for the first)
//! footer:  u32 table_len | u32 crc32(table)
//! ```
//!
//! The table costs 2-4 bytes a record on disk (offsets and lengths as LEB128 varints, `varint.rs`) and 24 in
//! memory.
//!
//! Written whole under `NNNNNN.vdc.tmp`, fsynced, renamed to `NNNNNN.vdc` (replacing an older compaction of the
//! same file) and the directory fsynced: a crash leaves either the old file or the new one whole.

use std::path::{Path, PathBuf};

use super::record::{len_in_bounds, MIN_RECORD_LEN};
use crate::error::{Error, Result};
use crate::fsutil::{self, crc, u32_at, u64_at};
use crate::storage::{FileRef, Storage};
use crate::varint;

const MAGIC: &[u8; 8] = b"LETUSVDC";
const FORMAT: u32 = 1;
/// Bytes of the header.
pub(crate) const HEADER_LEN: u64 = 32;
/// Write buffer of [`Writer`].
const BUF: usize = 1 << 20;
/// The least bytes of a table entry (two one-byte varints).
const MIN_ENTRY_LEN: u64 = 2;
const FOOTER_LEN: u64 = 8;

/// Where one kept record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its offset in the original data file (what locations name).
    pub original: u64,
    /// Its offset in the compacted file.
    pub at: u64,
    pub len: u32,
}

/// The table of a compacted file, in memory (16 bytes a kept record).
#[derive(Debug)]
pub(crate) struct Remap {
    original_len: u64,
    entries: Vec<Entry>,
}

impl Remap {
    /// The committed length of the original data file.
    pub(crate) fn original_len(&self) -> u64 {
        self.original_len
    }

    /// The kept record that started at `original` in the original file.
    pub(crate) fn find(&self, original: u64) -> Option<Entry> {
        self.entries
            .binary_search_by_key(&original, |e| e.original)
            .ok()
            .and_then(|i| self.entries.get(i).copied())
    }

    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Bytes of the kept records.
    pub(crate) fn record_bytes(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.len)).sum()
    }
}

/// `NNNNNN.vdc`.
pub(crate) fn path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:06}.vdc"))
}

fn tmp_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:06}.vdc.tmp"))
}

/// Whether `name` is a compaction a crash left unfinished (deleted by `open`).
pub(crate) fn is_tmp(name: &str) -> bool {
    name.strip_suffix(".vdc.tmp")
        .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

/// Writes the compacted file of data file `id` a record at a time ([`Writer::push`], at most a MiB buffered), under
/// `NNNNNN.vdc.tmp`; [`Writer::finish`] makes it durable under `NNNNNN.vdc`. The original file is not touched.
pub(crate) struct Writer<'a> {
    fs: &'a dyn Storage,
    dir: &'a Path,
    id: u32,
    original_len: u64,
    tmp: PathBuf,
    file: FileRef,
    entries: Vec<Entry>,
    buf: Vec<u8>,
    /// Where the next record goes, and the end of what is written to the file.
    at: u64,
    flushed: u64,
}

impl<'a> Writer<'a> {
    /// Starts the compacted file of data file `id` (committed length `original_len`), replacing an unfinished one.
    pub(crate) fn create(
        fs: &'a dyn Storage,
        dir: &'a Path,
        id: u32,
        original_len: u64,
    ) -> Result<Writer<'a>> {
        let tmp = tmp_path(dir, id);
        if fsutil::is_file(fs, &tmp)? {
            fsutil::remove_file(fs, &tmp)?;
        }
        let file = fsutil::create_new(fs, &tmp)?;
        Ok(Writer {
            fs,
            dir,
            id,
            original_len,
            tmp,
            file,
            entries: Vec::new(),
            buf: Vec::with_capacity(BUF),
            at: HEADER_LEN,
            flushed: HEADER_LEN,
        })
    }

    /// Adds the record `rec` that started at `original` in the original file (after the previous one's bytes).
    pub(crate) fn push(&mut self, original: u64, rec: &[u8]) -> Result<()> {
        let end = self
            .entries
            .last()
            .map_or(HEADER_LEN, |e| e.original + u64::from(e.len));
        let len = u32::try_from(rec.len()).unwrap_or(0);
        let fits = original >= end
            && len_in_bounds(len as usize)
            && original
                .checked_add(u64::from(len))
                .is_some_and(|e| e <= self.original_len);
        if !fits {
            return Err(Error::corrupt(
                &self.tmp,
                self.at,
                "a kept record overlaps another or lies outside its file",
            ));
        }
        self.entries.push(Entry {
            original,
            at: self.at,
            len,
        });
        self.buf.extend_from_slice(rec);
        self.at += u64::from(len);
        if self.buf.len() >= BUF {
            self.flush()?;
        }
        Ok(())
    }

    /// Bytes of the records pushed.
    pub(crate) fn record_bytes(&self) -> u64 {
        self.at - HEADER_LEN
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .write_all_at(&self.buf, self.flushed)
            .map_err(|e| Error::io(&self.tmp, e))?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the table, the footer and the header, fsyncs, renames the file to `NNNNNN.vdc` (replacing an older
    /// compaction of the same file) and fsyncs the directory. Returns the open file, its table and its length.
    pub(crate) fn finish(mut self) -> Result<(FileRef, Remap, u64)> {
        let count = u32::try_from(self.entries.len())
            .map_err(|_| Error::corrupt(&self.tmp, 0, "too many records for one compacted file"))?;
        let table_start = self.buf.len();
        let mut prev_end = HEADER_LEN;
        for e in &self.entries {
            varint::put(&mut self.buf, e.original - prev_end);
            varint::put(&mut self.buf, u64::from(e.len));
            prev_end = e.original + u64::from(e.len);
        }
        let table = &self.buf[table_start..];
        let table_len = u32::try_from(table.len())
            .map_err(|_| Error::corrupt(&self.tmp, 0, "compacted file table too large"))?;
        let table_crc = crc(table);
        self.buf.extend_from_slice(&table_len.to_le_bytes());
        self.buf.extend_from_slice(&table_crc.to_le_bytes());
        self.flush()?;
        let mut h = [0u8; HEADER_LEN as usize];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        h[12..16].copy_from_slice(&self.id.to_le_bytes());
        h[16..24].copy_from_slice(&self.original_len.to_le_bytes());
        h[24..28].copy_from_slice(&count.to_le_bytes());
        let hc = crc(&h[..28]);
        h[28..32].copy_from_slice(&hc.to_le_bytes());
        let io = |e| Error::io(&self.tmp, e);
        self.file.write_all_at(&h, 0).map_err(io)?;
        self.file.sync_all().map_err(io)?;
        let len = self.flushed;
        let to = path(self.dir, self.id);
        fsutil::rename(self.fs, &self.tmp, &to)?;
        fsutil::sync_dir(self.fs, self.dir)?;
        drop(self.file);
        let file = fsutil::open_read(self.fs, &to)?;
        Ok((
            file,
            Remap {
                original_len: self.original_len,
                entries: self.entries,
            },
            len,
        ))
    }
}

/// Opens compacted file `path` of data file `id`: checks its header, table and lengths (each record is checked
/// when read). Returns the file, its table and its length.
pub(crate) fn open(fs: &dyn Storage, path: &Path, id: u32) -> Result<(FileRef, Remap, u64)> {
    let file = fsutil::open_read(fs, path)?;
    let size = file.size().map_err(|e| Error::io(path, e))?;
    let bad = |off: u64, why: &str| Error::corrupt(path, off, why.to_string());
    if size < HEADER_LEN + FOOTER_LEN {
        return Err(bad(
            0,
            "compacted data file shorter than its header and footer",
        ));
    }
    let mut h = [0u8; HEADER_LEN as usize];
    fsutil::read_exact_at(&*file, path, &mut h, 0)?;
    if &h[..8] != MAGIC {
        return Err(bad(0, "bad magic number in compacted data file header"));
    }
    let format = u32_at(&h, 8).unwrap_or(0);
    if format > FORMAT {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: format,
        });
    }
    if u32_at(&h, 28) != Some(crc(&h[..28])) || format != FORMAT {
        return Err(bad(0, "compacted data file header checksum mismatch"));
    }
    if u32_at(&h, 12) != Some(id) {
        return Err(bad(12, "compacted data file header names another file id"));
    }
    let original_len = u64_at(&h, 16).unwrap_or(0);
    let count = u64::from(u32_at(&h, 24).unwrap_or(0));
    let mut footer = [0u8; FOOTER_LEN as usize];
    fsutil::read_exact_at(&*file, path, &mut footer, size - FOOTER_LEN)?;
    let table_len = u64::from(u32_at(&footer, 0).unwrap_or(0));
    let Some(table_at) = (size - FOOTER_LEN)
        .checked_sub(table_len)
        .filter(|&t| t >= HEADER_LEN)
    else {
        return Err(bad(
            size - FOOTER_LEN,
            "compacted data file is shorter than its table",
        ));
    };
    // Bounded before anything of that size is allocated: no two records start within 33 bytes, and an entry
    // is at least two bytes.
    if count > original_len / MIN_RECORD_LEN as u64 + 1 || count * MIN_ENTRY_LEN > table_len {
        return Err(bad(24, "compacted data file names more records than fit"));
    }
    let mut table = vec![0u8; table_len as usize];
    fsutil::read_exact_at(&*file, path, &mut table, table_at)?;
    if u32_at(&footer, 4) != Some(crc(&table)) {
        return Err(bad(table_at, "compacted data file table checksum mismatch"));
    }
    let mut entries = Vec::with_capacity(count as usize);
    let (mut at, mut end, mut pos) = (HEADER_LEN, HEADER_LEN, 0usize);
    let next = |pos: &mut usize| -> Result<u64> {
        let (v, n) = varint::get(table.get(*pos..).unwrap_or(&[]))
            .map_err(|why| bad(table_at + *pos as u64, why))?;
        *pos += n;
        Ok(v)
    };
    for _ in 0..count {
        let gap = next(&mut pos)?;
        let len = next(&mut pos)?;
        let original = end.checked_add(gap);
        let ok = len_in_bounds(len as usize)
            && original
                .and_then(|o| o.checked_add(len))
                .is_some_and(|x| x <= original_len);
        let (Some(original), true) = (original, ok) else {
            return Err(bad(
                table_at,
                "compacted data file table entry out of bounds",
            ));
        };
        entries.push(Entry {
            original,
            at,
            len: len as u32,
        });
        end = original + len;
        at += len;
    }
    if pos != table.len() || at != table_at {
        return Err(bad(
            table_at,
            "compacted data file records and table do not add up",
        ));
    }
    Ok((
        file,
        Remap {
            original_len,
            entries,
        },
        size,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Memory;

    #[test]
    fn a_compacted_file_reads_back_and_damage_is_corruption() {
        let fs = Memory::default();
        let dir = Path::new("/v");
        fs.create_dir_all(dir).unwrap();
        let kept = [(32, 40), (100, 50), (400, 33)];
        let bytes: Vec<u8> = [vec![1u8; 40], vec![2; 50], vec![3; 33]].concat();
        let write = |id: u32, kept: &[(u64, u32)], bytes: &[u8]| {
            let mut w = Writer::create(&fs, dir, id, 1000)?;
            let mut at = 0;
            for &(original, len) in kept {
                w.push(original, &bytes[at..at + len as usize])?;
                at += len as usize;
            }
            w.finish()
        };
        let (_, remap, len) = write(7, &kept, &bytes).unwrap();
        assert_eq!(
            remap.find(100),
            Some(Entry {
                original: 100,
                at: 72,
                len: 50
            })
        );
        assert_eq!(remap.find(101), None);
        assert_eq!(remap.record_bytes(), 123);
        let (f, r2, l2) = open(&fs, &path(dir, 7), 7).unwrap();
        assert_eq!(
            (r2.entries(), l2, r2.original_len()),
            (remap.entries(), len, 1000)
        );
        let mut b = vec![0u8; 50];
        f.read_exact_at(&mut b, 72).unwrap();
        assert_eq!(b, vec![2; 50]);
        assert!(matches!(
            open(&fs, &path(dir, 7), 8),
            Err(Error::Corrupt { .. })
        ));
        // Overlapping records are refused at write.
        assert!(write(8, &[(32, 40), (60, 40)], &[0; 80]).is_err());
        assert!(write(8, &[(980, 40)], &[0; 40]).is_err());
        // Every flipped byte of the header, table and footer is caught (the records' own checksums are checked
        // when read): a 3-entry table of one-byte varints but for the gap 360 (two bytes).
        let whole = fs.read(&path(dir, 7)).unwrap();
        assert_eq!(whole.len(), 32 + 123 + 7 + 8);
        // The layout of FORMAT.md §1.6.1, byte for byte (a format change must change this test deliberately).
        let mut header = b"LETUSVDC".to_vec();
        for w in [1u32, 7] {
            header.extend_from_slice(&w.to_le_bytes());
        }
        header.extend_from_slice(&1000u64.to_le_bytes());
        header.extend_from_slice(&3u32.to_le_bytes());
        let hc = crc(&header);
        header.extend_from_slice(&hc.to_le_bytes());
        assert_eq!(&whole[..32], &header[..]);
        assert_eq!(&whole[32..155], &bytes[..]);
        let table = [0u8, 40, 28, 50, 0xfa, 0x01, 33];
        assert_eq!(&whole[155..162], &table);
        let mut footer = 7u32.to_le_bytes().to_vec();
        footer.extend_from_slice(&crc(&table).to_le_bytes());
        assert_eq!(&whole[162..], &footer[..]);
        for i in (0..32).chain(whole.len() - 15..whole.len()) {
            let mut c = whole.clone();
            c[i] ^= 0x10;
            let p = dir.join(format!("flip{i}"));
            let f = fs.open(&p, crate::storage::OpenMode::CreateNew).unwrap();
            f.write_all_at(&c, 0).unwrap();
            assert!(open(&fs, &p, 7).is_err(), "byte {i}");
        }
    }
}
