//! Byte encoding of VDLS data-file headers and records. The byte maps are in `FORMAT.md §1`; this file is
//! the only place that knows them.
//!
//! Decoding never panics and never trusts a length read from disk: every length is bounded before anything is
//! allocated, and every slice is taken with `get`.

use super::{Location, Record};
use crate::fsutil::crc;

/// The first 8 bytes of every data file.
pub const MAGIC: [u8; 8] = *b"LETUSVDL";
/// The data-file format version this build writes. Format 2 added the moved record kinds (4 and 5); this build
/// reads formats 1 and 2.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest data-file format this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// Length of the data-file header; the first record of a file starts here.
pub const HEADER_LEN: u64 = 32;
/// Longest key a record may carry (64 KiB).
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// Longest value a record may carry (16 MiB).
pub const MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Longest payload a Commit record may carry (16 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

pub(crate) const KIND_PUT: u8 = 1;
pub(crate) const KIND_DELETE: u8 = 2;
pub(crate) const KIND_COMMIT: u8 = 3;
/// A Put copied by value-log GC out of a file about to be deleted: the bytes of the original Put (its version and
/// prev included) under another kind, so that replay moves the leaf instead of writing the key again.
pub(crate) const KIND_MOVED_PUT: u8 = 4;
/// A Delete copied by value-log GC (see [`KIND_MOVED_PUT`]).
pub(crate) const KIND_MOVED_DELETE: u8 = 5;

/// `crc: u32, len: u32` — enough to bound and checksum a record before parsing it.
pub(crate) const PREFIX_LEN: usize = 8;
/// Offset of the kind byte.
pub(crate) const KIND_AT: usize = 8;
/// Fixed part of a Put record: prefix, kind, version, tid, prev (16), key_len, value_len.
pub(crate) const PUT_HEADER_LEN: usize = 45;
/// Fixed part of a Delete record: prefix, kind, version, tid, prev (16), key_len.
pub(crate) const DELETE_HEADER_LEN: usize = 41;
/// Fixed part of a Commit record: prefix, kind, version, group_start, records, payload_len.
pub(crate) const COMMIT_HEADER_LEN: usize = 33;
/// The shortest possible record (an empty-payload Commit).
pub(crate) const MIN_RECORD_LEN: usize = COMMIT_HEADER_LEN;
/// The longest possible record (a Put with the largest key and value). A length field above this is corruption.
pub(crate) const MAX_RECORD_LEN: usize = PUT_HEADER_LEN + MAX_KEY_BYTES + MAX_VALUE_BYTES;

// Every record kind must fit under MAX_RECORD_LEN, and MAX_RECORD_LEN must fit the u32 length field.
const _: () = assert!(COMMIT_HEADER_LEN + MAX_PAYLOAD_BYTES <= MAX_RECORD_LEN);
const _: () = assert!(DELETE_HEADER_LEN + MAX_KEY_BYTES <= MAX_RECORD_LEN);
const _: () = assert!(MAX_RECORD_LEN <= u32::MAX as usize);
const _: () = assert!(MIN_RECORD_LEN <= DELETE_HEADER_LEN && MIN_RECORD_LEN <= PUT_HEADER_LEN);

/// A decoded file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The file id recorded in the header (must equal the id in the file name).
    pub file_id: u32,
    /// Final length of the previous data file (0 for file 1): rotation only happens once that file is complete,
    /// so a later change to its length (truncation, a cut-out range) is detected at open.
    pub prev_file_len: u64,
}

/// Why a header was rejected.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// Too short, wrong magic, or failing its checksum.
    Bad(String),
    /// A valid-looking header of a format version this build does not read.
    Unsupported(u32),
}

pub(crate) fn encode_header(h: Header) -> [u8; HEADER_LEN as usize] {
    let mut b = [0u8; HEADER_LEN as usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&h.file_id.to_le_bytes());
    b[16..24].copy_from_slice(&h.prev_file_len.to_le_bytes());
    // 24..28 reserved, zero.
    let c = crc(&b[0..28]);
    b[28..32].copy_from_slice(&c.to_le_bytes());
    b
}

/// Checks a header. The magic and version are read before the checksum so that a future format (which keeps
/// magic and version at bytes 0..12 but may change the rest) is reported as unsupported, not as corrupt.
pub(crate) fn decode_header(b: &[u8]) -> Result<Header, HeaderError> {
    if b.len() < HEADER_LEN as usize {
        return Err(HeaderError::Bad(format!(
            "file is {} bytes, shorter than the {HEADER_LEN}-byte header",
            b.len()
        )));
    }
    if b.get(0..8) != Some(&MAGIC[..]) {
        return Err(HeaderError::Bad("bad magic number in file header".into()));
    }
    let version = u32_at(b, 8).unwrap_or(0);
    let stored_crc = u32_at(b, 28).unwrap_or(0);
    let crc_ok = b.get(0..28).map(crc) == Some(stored_crc);
    if version > FORMAT_VERSION {
        return Err(HeaderError::Unsupported(version));
    }
    if !crc_ok {
        return Err(HeaderError::Bad("file header checksum mismatch".into()));
    }
    if version < OLDEST_FORMAT_VERSION {
        return Err(HeaderError::Unsupported(version));
    }
    if u32_at(b, 24) != Some(0) {
        return Err(HeaderError::Bad("reserved header field is not zero".into()));
    }
    Ok(Header {
        file_id: u32_at(b, 12).unwrap_or(0),
        prev_file_len: u64_at(b, 16).unwrap_or(0),
    })
}

/// Why a record did not decode.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The bytes fail the length bounds or the checksum: what a torn or unwritten write looks like.
    Damaged(String),
    /// The checksum holds but the content is invalid. A torn write cannot produce this (short of a 2^-32
    /// checksum collision), so it is always corruption.
    Malformed(String),
}

/// A decoded record plus the Commit-only fields that the public [`Record`] does not expose.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub rec: Record,
    /// A moved copy (kinds 4 and 5) of a Put or Delete written by an earlier version.
    pub moved: bool,
    /// For a Commit: (offset of the group's first record in this file, number of Put/Delete records).
    pub group: Option<(u64, u32)>,
}

/// Reads the `len` field of a record prefix (bytes 4..8).
pub(crate) fn prefix_len(prefix: &[u8]) -> Option<usize> {
    u32_at(prefix, 4).map(|l| l as usize)
}

/// Checks that a length field is inside the bounds of any record.
pub(crate) fn len_in_bounds(len: usize) -> bool {
    (MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&len)
}

/// Decodes the record in `b` (exactly one whole record), which sits at `(file_id, offset)`.
pub(crate) fn decode(b: &[u8], file_id: u32, offset: u64) -> Result<Decoded, DecodeError> {
    let len =
        prefix_len(b).ok_or_else(|| DecodeError::Damaged("shorter than a record prefix".into()))?;
    if !len_in_bounds(len) {
        return Err(DecodeError::Damaged(format!(
            "record length {len} is out of bounds"
        )));
    }
    if len != b.len() {
        return Err(DecodeError::Damaged(format!(
            "record length field {len} does not match the expected length {}",
            b.len()
        )));
    }
    let stored = u32_at(b, 0).unwrap_or(0);
    let body = b.get(4..).unwrap_or(&[]);
    if crc(body) != stored {
        return Err(DecodeError::Damaged("record checksum mismatch".into()));
    }
    // From here on the bytes are what some writer produced; any inconsistency is corruption, not a torn write.
    let m = |s: &str| DecodeError::Malformed(s.to_string());
    let kind = *b.get(KIND_AT).ok_or_else(|| m("missing kind"))?;
    let version = u64_at(b, 9).ok_or_else(|| m("missing version"))?;
    let moved = matches!(kind, KIND_MOVED_PUT | KIND_MOVED_DELETE);
    let kind = match kind {
        KIND_MOVED_PUT => KIND_PUT,
        KIND_MOVED_DELETE => KIND_DELETE,
        k => k,
    };
    match kind {
        KIND_PUT | KIND_DELETE => {
            let tid = u32_at(b, 17).ok_or_else(|| m("missing tid"))?;
            let prev = decode_prev(b, file_id, offset)?;
            let key_len = u32_at(b, 37).ok_or_else(|| m("missing key length"))? as usize;
            if key_len > MAX_KEY_BYTES {
                return Err(m("key length above the limit"));
            }
            let (head, value_len) = if kind == KIND_PUT {
                let vl = u32_at(b, 41).ok_or_else(|| m("missing value length"))? as usize;
                if vl > MAX_VALUE_BYTES {
                    return Err(m("value length above the limit"));
                }
                (PUT_HEADER_LEN, vl)
            } else {
                (DELETE_HEADER_LEN, 0)
            };
            if head + key_len + value_len != len {
                return Err(m(
                    "key and value lengths do not add up to the record length",
                ));
            }
            let key = b
                .get(head..head + key_len)
                .ok_or_else(|| m("key out of range"))?
                .to_vec();
            let rec = if kind == KIND_PUT {
                let value = b
                    .get(head + key_len..len)
                    .ok_or_else(|| m("value out of range"))?
                    .to_vec();
                Record::Put {
                    version,
                    tid,
                    key,
                    value,
                    prev,
                }
            } else {
                Record::Delete {
                    version,
                    tid,
                    key,
                    prev,
                }
            };
            Ok(Decoded {
                rec,
                moved,
                group: None,
            })
        }
        KIND_COMMIT => {
            let group_start = u64_at(b, 17).ok_or_else(|| m("missing group start"))?;
            let records = u32_at(b, 25).ok_or_else(|| m("missing record count"))?;
            let payload_len = u32_at(b, 29).ok_or_else(|| m("missing payload length"))? as usize;
            if payload_len > MAX_PAYLOAD_BYTES {
                return Err(m("commit payload length above the limit"));
            }
            if COMMIT_HEADER_LEN + payload_len != len {
                return Err(m("payload length does not add up to the record length"));
            }
            // The group lies in this file, before its Commit record.
            if group_start < HEADER_LEN || group_start > offset {
                return Err(m(
                    "commit group start is outside the file before the commit record",
                ));
            }
            let payload = b
                .get(COMMIT_HEADER_LEN..len)
                .ok_or_else(|| m("payload out of range"))?
                .to_vec();
            Ok(Decoded {
                rec: Record::Commit { version, payload },
                moved: false,
                group: Some((group_start, records)),
            })
        }
        other => Err(DecodeError::Malformed(format!(
            "unknown record kind {other}"
        ))),
    }
}

/// Decodes the 16-byte prev field at bytes 21..37: `file_id: u32, offset: u64, len: u32`, all zero for "none".
fn decode_prev(b: &[u8], file_id: u32, offset: u64) -> Result<Option<Location>, DecodeError> {
    let m = |s: &str| DecodeError::Malformed(s.to_string());
    let pf = u32_at(b, 21).ok_or_else(|| m("missing prev"))?;
    let po = u64_at(b, 25).ok_or_else(|| m("missing prev"))?;
    let pl = u32_at(b, 33).ok_or_else(|| m("missing prev"))?;
    if pf == 0 {
        // File ids start at 1, so file id 0 means "no previous record"; the other fields must be zero too
        // (one encoding per value).
        return if po == 0 && pl == 0 {
            Ok(None)
        } else {
            Err(m("prev field of an absent previous record is not zero"))
        };
    }
    let prev = Location {
        file_id: pf,
        offset: po,
        len: pl,
    };
    if !prev_is_before(prev, file_id, offset) {
        return Err(m(
            "prev does not point to a valid location strictly before this record",
        ));
    }
    Ok(Some(prev))
}

/// A prev link must be a plausible record strictly before the record at `(file_id, offset)`. This makes every
/// history walk terminate, whatever the disk says.
pub(crate) fn prev_is_before(prev: Location, file_id: u32, offset: u64) -> bool {
    let len = prev.len as usize;
    if prev.file_id == 0 || prev.offset < HEADER_LEN || !len_in_bounds(len) {
        return false;
    }
    match prev.file_id.cmp(&file_id) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Equal => prev
            .offset
            .checked_add(u64::from(prev.len))
            .is_some_and(|end| end <= offset),
        std::cmp::Ordering::Greater => false,
    }
}

/// The fields of a Put (`value: Some`) or Delete (`value: None`) record, borrowed from a [`Record`].
pub(crate) struct Update<'a> {
    pub version: u64,
    pub tid: u32,
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
    pub prev: Option<Location>,
    /// Encoded as a moved copy (kinds 4 and 5).
    pub moved: bool,
}

impl<'a> Update<'a> {
    /// The update fields of a Put or Delete; `None` for a Commit.
    pub fn of(rec: &'a Record) -> Option<Update<'a>> {
        match rec {
            Record::Put {
                version,
                tid,
                key,
                value,
                prev,
            } => Some(Update {
                version: *version,
                tid: *tid,
                key,
                value: Some(value),
                prev: *prev,
                moved: false,
            }),
            Record::Delete {
                version,
                tid,
                key,
                prev,
            } => Some(Update {
                version: *version,
                tid: *tid,
                key,
                value: None,
                prev: *prev,
                moved: false,
            }),
            Record::Commit { .. } => None,
        }
    }

    /// Encoded length (the caller checked the key and value limits, so it fits in u32).
    pub fn encoded_len(&self) -> usize {
        match self.value {
            Some(v) => PUT_HEADER_LEN + self.key.len() + v.len(),
            None => DELETE_HEADER_LEN + self.key.len(),
        }
    }

    /// Appends the encoded record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0u8; 4]); // crc, filled in by seal
        out.extend_from_slice(&(self.encoded_len() as u32).to_le_bytes());
        out.push(match (self.value.is_some(), self.moved) {
            (true, false) => KIND_PUT,
            (false, false) => KIND_DELETE,
            (true, true) => KIND_MOVED_PUT,
            (false, true) => KIND_MOVED_DELETE,
        });
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.tid.to_le_bytes());
        encode_prev(out, self.prev);
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        if let Some(v) = self.value {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(self.key);
        if let Some(v) = self.value {
            out.extend_from_slice(v);
        }
        seal(out, start);
    }
}

/// Appends a Commit record closing a group that starts at `group_start` (in the same file) and holds
/// `records` Put/Delete records.
pub(crate) fn encode_commit(
    out: &mut Vec<u8>,
    version: u64,
    group_start: u64,
    records: u32,
    payload: &[u8],
) {
    let start = out.len();
    let len = (COMMIT_HEADER_LEN + payload.len()) as u32;
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&len.to_le_bytes());
    out.push(KIND_COMMIT);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&group_start.to_le_bytes());
    out.extend_from_slice(&records.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    seal(out, start);
}

fn encode_prev(out: &mut Vec<u8>, prev: Option<Location>) {
    let p = prev.unwrap_or(Location {
        file_id: 0,
        offset: 0,
        len: 0,
    });
    out.extend_from_slice(&p.file_id.to_le_bytes());
    out.extend_from_slice(&p.offset.to_le_bytes());
    out.extend_from_slice(&p.len.to_le_bytes());
}

/// Writes the CRC over bytes `[start + 4, end)` — the length field and everything after it — into the first
/// four bytes of the record that starts at `start`.
fn seal(out: &mut [u8], start: usize) {
    let c = crc(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&c.to_le_bytes());
}

pub(crate) use crate::fsutil::{u32_at, u64_at};
