//! Byte layout of a block-store segment (`BLOCKSTORE-FORMAT.md` is normative): the header, the records and the
//! footer of a sealed segment. Encoding never fails; decoding checks magic, format version, checksums and every
//! length before it is used, and reports what is wrong as a string (the caller adds path and offset).

use letus_core::fsutil::crc;

/// Magic number at byte 0 of every segment: `"LETUSBLK"`.
pub const MAGIC: [u8; 8] = *b"LETUSBLK";
/// Magic number at the start of a sealed segment's footer: `"LETUSBIX"`. Bytes 4..8 (`"SBIX"`), read as the
/// `len` field of a record, are 1 481 196 115, far above [`MAX_BLOCK_BYTES`]: a record scan can never take a
/// footer for a record.
pub const INDEX_MAGIC: [u8; 8] = *b"LETUSBIX";
/// Magic number at the very end of a sealed segment: `"LETUSBKF"`.
pub const TRAILER_MAGIC: [u8; 8] = *b"LETUSBKF";
/// Format version written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Length of the segment header.
pub const HEADER_LEN: u64 = 32;
/// Length of a record before its block bytes: crc, len, version, request_hash.
pub const RECORD_HEADER_LEN: u64 = 48;
/// Largest block accepted (64 MiB).
pub const MAX_BLOCK_BYTES: usize = 64 << 20;
/// Largest record (header + largest block).
pub const MAX_RECORD_LEN: u64 = RECORD_HEADER_LEN + MAX_BLOCK_BYTES as u64;
/// Length of one index entry: version u64, offset u64, len u32.
pub const ENTRY_LEN: u64 = 20;
/// Length of the fixed trailer at the end of a sealed segment.
pub const TRAILER_LEN: u64 = 52;
/// Footer bytes besides the entries: index magic, index crc, trailer.
pub const FOOTER_FIXED_LEN: u64 = 8 + 4 + TRAILER_LEN;

// The engine's bounds-checked readers. Every caller here has checked the length of what it reads first; were a
// buffer short anyway, the field reads as 0, which no checksum, magic or version accepts.
fn u32_at(b: &[u8], at: usize) -> u32 {
    letus_core::fsutil::u32_at(b, at).unwrap_or(0)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    letus_core::fsutil::u64_at(b, at).unwrap_or(0)
}

/// The 32-byte header of segment `id`.
pub fn encode_header(id: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    // 20..28 reserved, zero.
    let c = crc(&h[0..28]);
    h[28..32].copy_from_slice(&c.to_le_bytes());
    h
}

/// Why a header does not decode.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// The magic matches but the format version is newer than this build reads.
    Unsupported(u32),
    /// Too short, wrong magic, bad checksum, or a field out of range.
    Bad(String),
}

/// Decodes a header (`bytes` may be shorter than 32 when the file is); returns the segment id.
pub fn decode_header(bytes: &[u8]) -> Result<u64, HeaderError> {
    if bytes.len() < HEADER_LEN as usize {
        return Err(HeaderError::Bad(format!(
            "file of {} bytes is shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    if bytes[0..8] != MAGIC {
        return Err(HeaderError::Bad("bad segment magic".into()));
    }
    let version = u32_at(bytes, 8);
    if version > FORMAT_VERSION {
        return Err(HeaderError::Unsupported(version));
    }
    if crc(&bytes[0..28]) != u32_at(bytes, 28) {
        return Err(HeaderError::Bad("segment header fails its checksum".into()));
    }
    if version != FORMAT_VERSION {
        return Err(HeaderError::Bad(format!("format version {version}")));
    }
    if u64_at(bytes, 20) != 0 {
        return Err(HeaderError::Bad(
            "reserved header bytes are not zero".into(),
        ));
    }
    Ok(u64_at(bytes, 12))
}

/// Encodes one record: `crc | len | version | request_hash | block`, the crc over everything after it.
/// `block.len()` must be at most [`MAX_BLOCK_BYTES`] (checked by the caller).
pub fn encode_record(version: u64, request_hash: &[u8; 32], block: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(RECORD_HEADER_LEN as usize + block.len());
    r.extend_from_slice(&[0u8; 4]);
    r.extend_from_slice(&(block.len() as u32).to_le_bytes());
    r.extend_from_slice(&version.to_le_bytes());
    r.extend_from_slice(request_hash);
    r.extend_from_slice(block);
    let c = crc(&r[4..]);
    r[0..4].copy_from_slice(&c.to_le_bytes());
    r
}

/// The fixed part of a record, undecoded beyond splitting the fields.
#[derive(Debug, Clone, Copy)]
pub struct RecordHeader {
    /// Stored checksum.
    pub crc: u32,
    /// Block length.
    pub len: u32,
    /// Version.
    pub version: u64,
}

/// Splits the first 48 bytes of a record. `b` must hold at least [`RECORD_HEADER_LEN`] bytes.
pub fn record_header(b: &[u8]) -> RecordHeader {
    RecordHeader {
        crc: u32_at(b, 0),
        len: u32_at(b, 4),
        version: u64_at(b, 8),
    }
}

/// True when `rec` (a whole record) has a block length within bounds that matches `rec.len()` and its
/// checksum holds.
pub fn record_valid(rec: &[u8]) -> bool {
    if rec.len() < RECORD_HEADER_LEN as usize {
        return false;
    }
    let h = record_header(rec);
    h.len as usize <= MAX_BLOCK_BYTES
        && rec.len() == RECORD_HEADER_LEN as usize + h.len as usize
        && crc(&rec[4..]) == h.crc
}

/// Decodes a checked record into (version, request_hash, block).
pub fn record_parts(rec: &[u8]) -> (u64, [u8; 32], &[u8]) {
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&rec[16..48]);
    (u64_at(rec, 8), hash, &rec[RECORD_HEADER_LEN as usize..])
}

/// The footer of a sealed segment whose records end at `index_offset`; `versions[i]` is stored at
/// `offsets[i]`. There must be at least one record.
pub fn encode_footer(id: u64, index_offset: u64, versions: &[u64], offsets: &[u64]) -> Vec<u8> {
    let n = versions.len();
    let mut f = Vec::with_capacity(FOOTER_FIXED_LEN as usize + ENTRY_LEN as usize * n);
    f.extend_from_slice(&INDEX_MAGIC);
    for i in 0..n {
        let end = offsets.get(i + 1).copied().unwrap_or(index_offset);
        f.extend_from_slice(&versions[i].to_le_bytes());
        f.extend_from_slice(&offsets[i].to_le_bytes());
        f.extend_from_slice(&((end - offsets[i]) as u32).to_le_bytes());
    }
    let index_crc = crc(&f);
    f.extend_from_slice(&index_crc.to_le_bytes());
    let t = f.len();
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(&index_offset.to_le_bytes());
    f.extend_from_slice(&(n as u64).to_le_bytes());
    f.extend_from_slice(&versions.first().copied().unwrap_or(0).to_le_bytes());
    f.extend_from_slice(&versions.last().copied().unwrap_or(0).to_le_bytes());
    let trailer_crc = crc(&f[t..]);
    f.extend_from_slice(&trailer_crc.to_le_bytes());
    f.extend_from_slice(&TRAILER_MAGIC);
    f
}

/// The fixed trailer of a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Must equal the header's id.
    pub segment_id: u64,
    /// Offset of the footer (= end of the records).
    pub index_offset: u64,
    /// Number of index entries (records).
    pub count: u64,
    /// Version of the first record.
    pub first_version: u64,
    /// Version of the last record.
    pub last_version: u64,
}

/// Decodes the last [`TRAILER_LEN`] bytes of a segment.
pub fn decode_trailer(b: &[u8; TRAILER_LEN as usize]) -> Result<Trailer, String> {
    if b[44..52] != TRAILER_MAGIC {
        return Err("no footer magic at the end of the segment".into());
    }
    if crc(&b[0..40]) != u32_at(b, 40) {
        return Err("footer trailer fails its checksum".into());
    }
    Ok(Trailer {
        segment_id: u64_at(b, 0),
        index_offset: u64_at(b, 8),
        count: u64_at(b, 16),
        first_version: u64_at(b, 24),
        last_version: u64_at(b, 32),
    })
}

/// One index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Block version.
    pub version: u64,
    /// Offset of the record in the segment.
    pub offset: u64,
    /// Whole record length.
    pub len: u32,
}

/// Splits the index block (`INDEX_MAGIC`, entries, index crc) after checking magic and checksum.
/// Returns the entries' offset within `b` and a message on failure.
pub fn decode_index(b: &[u8]) -> Result<Vec<Entry>, (u64, String)> {
    let body = b.len().saturating_sub(4);
    if b.len() < 12 || !(body - 8).is_multiple_of(ENTRY_LEN as usize) {
        return Err((0, "index block has an impossible length".into()));
    }
    if b[0..8] != INDEX_MAGIC {
        return Err((0, "no index magic at the footer offset".into()));
    }
    if crc(&b[..body]) != u32_at(b, body) {
        return Err((body as u64, "index entries fail their checksum".into()));
    }
    Ok(b[8..body]
        .chunks_exact(ENTRY_LEN as usize)
        .map(|e| Entry {
            version: u64_at(e, 0),
            offset: u64_at(e, 8),
            len: u32_at(e, 16),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blockstore_index_magic_is_never_a_record_length() {
        assert!(u32_at(&INDEX_MAGIC, 4) as usize > MAX_BLOCK_BYTES);
    }

    #[test]
    fn blockstore_header_round_trip_and_damage() {
        let h = encode_header(7);
        assert_eq!(decode_header(&h), Ok(7));
        assert!(matches!(decode_header(&h[..31]), Err(HeaderError::Bad(_))));
        let mut newer = h;
        newer[8] = 2;
        assert_eq!(decode_header(&newer), Err(HeaderError::Unsupported(2)));
        for i in 0..32 {
            let mut d = h;
            d[i] ^= 0x01;
            assert!(decode_header(&d).is_err(), "byte {i}");
        }
    }

    #[test]
    fn blockstore_record_round_trip() {
        let r = encode_record(9, &[3u8; 32], b"block");
        assert!(record_valid(&r));
        let (v, h, b) = record_parts(&r);
        assert_eq!((v, h, b), (9, [3u8; 32], &b"block"[..]));
        for i in 0..r.len() {
            let mut d = r.clone();
            d[i] ^= 0x80;
            assert!(!record_valid(&d), "byte {i}");
        }
    }
}
