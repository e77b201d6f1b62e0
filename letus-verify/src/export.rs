//! The state export stream (SPEC.md §9.2), read incrementally so that an export of any size is verified with
//! memory bounded by one record plus the trie depth (plus the chunk being read). [`ExportReader`] either only
//! checks the records ([`ExportReader::feed`]) or also hands each one to its caller as it is decoded
//! ([`ExportReader::push`], [`ExportReader::next_record`]), which is how `letus import` streams an export into a
//! store.
//!
//! ## Format
//! header `"LETUSEXP" || 0x01 || u32le(tid) || u64le(version) || root[32]`, then records
//! `0x01 || u32le(key_len) || u32le(value_len) || key || value` sorted by path, then trailer `0xff || u64le(count)`.

use std::vec::Vec;

use crate::error::{DecodeError, ExportError};
use crate::full::FullVerifier;
use crate::wire::Reader;
use crate::{Hash, Limits, TrieId, Version};

/// The 8 magic bytes that open an export.
pub const MAGIC: &[u8; 8] = b"LETUSEXP";
/// Header length.
pub const HEADER_LEN: usize = 8 + 1 + 4 + 8 + 32;
const RECORD: u8 = 0x01;
const TRAILER: u8 = 0xff;
const RECORD_HEAD: usize = 1 + 4 + 4;
const TRAILER_LEN: usize = 1 + 8;

/// What the exporter claims: which trie, which version, which root (not trusted by itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportHeader {
    /// Trie id.
    pub tid: TrieId,
    /// Version.
    pub version: Version,
    /// The root the exporter claims.
    pub root: Hash,
}

impl ExportHeader {
    /// The encoded header.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        out.extend_from_slice(MAGIC);
        out.push(crate::FORMAT_VERSION);
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.root.0);
        out
    }
}

/// Appends one encoded record to `out`.
pub fn encode_record(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(RECORD);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// The encoded trailer for `count` records.
pub fn encode_trailer(count: u64) -> [u8; TRAILER_LEN] {
    let mut t = [TRAILER; TRAILER_LEN];
    t[1..].copy_from_slice(&count.to_le_bytes());
    t
}

/// A record as [`ExportReader::next_record`] hands it out: `(key, value)`, borrowed from the reader.
pub type Record<'a> = (&'a [u8], &'a [u8]);

/// The result of a verified export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportSummary {
    /// The header.
    pub header: ExportHeader,
    /// Number of pairs.
    pub records: u64,
    /// Bytes read.
    pub bytes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Records,
    Done,
}

/// Incremental export reader and verifier. Either [`ExportReader::feed`] chunks as they arrive, or, to act on the
/// records as they are decoded (an importer), [`ExportReader::push`] a chunk and take its records with
/// [`ExportReader::next_record`] until it answers `None`; then [`ExportReader::finish`] with a root you trust.
///
/// The reader keeps only the bytes of the record (or header, or trailer) it has not completed yet, plus the chunk
/// last pushed until its records are taken.
pub struct ExportReader {
    limits: Limits,
    /// Bytes pushed and not yet consumed from `pos` on; `..pos` is dropped at the next push.
    buf: Vec<u8>,
    pos: usize,
    state: State,
    header: Option<ExportHeader>,
    verifier: FullVerifier,
    bytes: u64,
}

impl ExportReader {
    /// A reader enforcing `limits` on key and value sizes.
    pub fn new(limits: Limits) -> Self {
        ExportReader {
            limits,
            buf: Vec::new(),
            pos: 0,
            state: State::Header,
            header: None,
            verifier: FullVerifier::new(),
            bytes: 0,
        }
    }

    /// The header, once read.
    pub fn header(&self) -> Option<&ExportHeader> {
        self.header.as_ref()
    }

    /// Pairs verified so far.
    pub fn records(&self) -> u64 {
        self.verifier.count()
    }

    /// Bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Feeds the next chunk of the stream and checks every record it completes.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), ExportError> {
        self.push(chunk);
        let result = loop {
            match self.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.compact();
        result
    }

    /// Drops the bytes already consumed.
    fn compact(&mut self) {
        if self.pos > 0 {
            self.buf.drain(..self.pos.min(self.buf.len()));
            self.pos = 0;
        }
    }

    /// Appends the next chunk of the stream without decoding it: take its header with
    /// [`ExportReader::read_header`] and its records with [`ExportReader::next_record`].
    pub fn push(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        self.compact();
        self.buf.extend_from_slice(chunk);
    }

    /// Decodes the header from the bytes pushed so far: `Ok(None)` while they do not hold all of it.
    pub fn read_header(&mut self) -> Result<Option<&ExportHeader>, ExportError> {
        if self.state == State::Header {
            let avail = self.buf.get(self.pos..).unwrap_or(&[]);
            // Reject a wrong magic as soon as the bytes seen contradict it.
            let seen = avail.len().min(MAGIC.len());
            if avail.get(..seen) != MAGIC.get(..seen) {
                return Err(DecodeError::BadMagic.into());
            }
            // And a wrong format as soon as its byte is seen (SPEC.md §9.2: the first problem met, in order).
            if let Some(&format) = avail.get(MAGIC.len()) {
                if format != crate::FORMAT_VERSION {
                    return Err(DecodeError::UnsupportedFormat(u64::from(format)).into());
                }
            }
            if avail.len() < HEADER_LEN {
                return Ok(None);
            }
            let mut r = Reader::new(avail);
            r.take(MAGIC.len())?;
            let format = r.u8()?;
            if format != crate::FORMAT_VERSION {
                return Err(DecodeError::UnsupportedFormat(u64::from(format)).into());
            }
            self.header = Some(ExportHeader {
                tid: r.u32()?,
                version: r.u64()?,
                root: r.hash()?,
            });
            self.pos += HEADER_LEN;
            self.state = State::Records;
        }
        Ok(self.header.as_ref())
    }

    /// Decodes and checks the next record of the bytes pushed so far (reading the header first if needed):
    /// `Ok(Some((key, value)))`, or `Ok(None)` when they hold no complete record (push more) or the trailer was
    /// read (then [`ExportReader::finish`]). A record handed out has passed the size limits and the path-order
    /// check, but the stream is verified only once [`ExportReader::finish`] compares its root: until then, treat
    /// what the records build as unverified.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, ExportError> {
        if self.read_header()?.is_none() {
            return Ok(None);
        }
        loop {
            let avail = self.buf.get(self.pos..).unwrap_or(&[]);
            if self.state == State::Done {
                if !avail.is_empty() {
                    return Err(DecodeError::TrailingData(avail.len()).into());
                }
                return Ok(None);
            }
            let Some(&tag) = avail.first() else {
                return Ok(None);
            };
            match tag {
                RECORD => {
                    if avail.len() < RECORD_HEAD {
                        return Ok(None);
                    }
                    let mut r = Reader::new(avail);
                    r.u8()?;
                    let key_len = r.u32()? as usize;
                    let value_len = r.u32()? as usize;
                    if key_len > self.limits.max_key_bytes {
                        return Err(too_large("key", key_len, self.limits.max_key_bytes));
                    }
                    if value_len > self.limits.max_value_bytes {
                        return Err(too_large("value", value_len, self.limits.max_value_bytes));
                    }
                    // Both lengths are within limits a caller may raise near usize::MAX (on wasm32 too).
                    let Some(len) = key_len.checked_add(value_len) else {
                        return Err(too_large("record", usize::MAX, self.limits.max_value_bytes));
                    };
                    if r.remaining() < len {
                        return Ok(None);
                    }
                    let key = r.take(key_len)?;
                    let value = r.take(value_len)?;
                    self.verifier.update(key, value)?;
                    self.pos += RECORD_HEAD + len;
                    return Ok(Some((key, value)));
                }
                TRAILER => {
                    if avail.len() < TRAILER_LEN {
                        return Ok(None);
                    }
                    let mut r = Reader::new(avail);
                    r.u8()?;
                    let declared = r.u64()?;
                    if declared != self.verifier.count() {
                        return Err(DecodeError::CountMismatch {
                            declared,
                            read: self.verifier.count(),
                        }
                        .into());
                    }
                    self.pos += TRAILER_LEN;
                    self.state = State::Done;
                }
                other => return Err(DecodeError::UnknownTag(other).into()),
            }
        }
    }

    /// Ends the stream and compares the recomputed root with `trusted_root`.
    pub fn finish(self, trusted_root: &Hash) -> Result<ExportSummary, ExportError> {
        let (State::Done, Some(header)) = (self.state, self.header) else {
            return Err(DecodeError::Truncated.into());
        };
        let records = self.verifier.verify(trusted_root)?;
        Ok(ExportSummary {
            header,
            records,
            bytes: self.bytes,
        })
    }
}

fn too_large(what: &'static str, size: usize, limit: usize) -> ExportError {
    DecodeError::TooLarge {
        what,
        size: size as u64,
        limit: limit as u64,
    }
    .into()
}

/// Verifies a whole export held in memory against `trusted_root`.
pub fn verify_export(
    bytes: &[u8],
    trusted_root: &Hash,
    limits: &Limits,
) -> Result<ExportSummary, ExportError> {
    let mut r = ExportReader::new(*limits);
    r.feed(bytes)?;
    r.finish(trusted_root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::KeyPath;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    /// `n` pairs with values of varied sizes, in path order, their export and its root.
    fn export(n: u32) -> (Pairs, Vec<u8>, Hash) {
        let mut pairs: Pairs = (0..n)
            .map(|i| {
                let key = i.to_le_bytes().to_vec();
                let value = std::vec![i as u8; (i as usize * 37) % 300];
                (key, value)
            })
            .collect();
        pairs.sort_by_key(|(k, _)| KeyPath::of(k));
        let mut f = FullVerifier::new();
        for (k, v) in &pairs {
            f.update(k, v).unwrap();
        }
        let root = f.finalize();
        let mut out = ExportHeader {
            tid: 7,
            version: 9,
            root,
        }
        .encode();
        for (k, v) in &pairs {
            encode_record(k, v, &mut out);
        }
        out.extend_from_slice(&encode_trailer(pairs.len() as u64));
        (pairs, out, root)
    }

    /// Pushes `stream` in chunks of `chunk` bytes and takes every record: the records and the verdict.
    fn stream(stream: &[u8], chunk: usize, root: &Hash) -> (Pairs, Result<u64, &'static str>) {
        let mut r = ExportReader::new(Limits::default());
        let mut got = Vec::new();
        let longest = 9 + 4 + 300;
        for c in stream.chunks(chunk) {
            r.push(c);
            // What the reader holds: the chunk and at most the rest of one record before it.
            assert!(r.buf.len() <= c.len() + longest.max(HEADER_LEN));
            loop {
                match r.next_record() {
                    Ok(Some((k, v))) => got.push((k.to_vec(), v.to_vec())),
                    Ok(None) => break,
                    Err(e) => return (got, Err(e.code())),
                }
            }
        }
        let verdict = r.finish(root).map(|s| s.records).map_err(|e| e.code());
        (got, verdict)
    }

    fn fed(stream: &[u8], chunk: usize, root: &Hash) -> Result<u64, &'static str> {
        let mut r = ExportReader::new(Limits::default());
        for c in stream.chunks(chunk) {
            r.feed(c).map_err(|e| e.code())?;
            assert!(
                r.buf.len() < 9 + 4 + 300 + HEADER_LEN,
                "feed keeps only an unfinished item"
            );
        }
        r.finish(root).map(|s| s.records).map_err(|e| e.code())
    }

    #[test]
    fn next_record_hands_out_every_record_in_any_chunking() {
        let (pairs, bytes, root) = export(300);
        for chunk in [1, 2, 9, 53, 64, 1000, bytes.len()] {
            let (got, verdict) = stream(&bytes, chunk, &root);
            assert_eq!(verdict, Ok(300), "chunk {chunk}");
            assert_eq!(got, pairs, "chunk {chunk}");
            assert_eq!(fed(&bytes, chunk, &root), Ok(300), "chunk {chunk}");
        }
        // An empty export: a header and a trailer.
        let (pairs, bytes, root) = export(0);
        assert_eq!(root, crate::EMPTY);
        assert_eq!(stream(&bytes, 5, &root), (pairs, Ok(0)));
    }

    #[test]
    fn read_header_waits_for_the_whole_header_and_rejects_a_bad_magic_early() {
        let (_, bytes, root) = export(3);
        let mut r = ExportReader::new(Limits::default());
        r.push(&bytes[..HEADER_LEN - 1]);
        assert_eq!(r.read_header().unwrap(), None);
        assert_eq!(r.next_record().unwrap(), None);
        r.push(&bytes[HEADER_LEN - 1..HEADER_LEN]);
        let h = *r.read_header().unwrap().unwrap();
        assert_eq!((h.tid, h.version, h.root), (7, 9, root));
        assert_eq!(
            r.read_header().unwrap(),
            Some(&h),
            "read again, not re-decoded"
        );
        let mut bad = ExportReader::new(Limits::default());
        bad.push(b"LETUX");
        assert_eq!(bad.read_header().map_err(|e| e.code()), Err("bad_magic"));
    }

    /// Streamed and fed, a damaged export gets the same verdict; a streamed one hands out only the records before
    /// the damage (and, for a damage only the root reveals, all of them: the caller must wait for `finish`).
    #[test]
    fn a_damaged_export_gets_the_same_verdict_streamed_or_fed() {
        let (pairs, bytes, root) = export(50);
        let record0 = HEADER_LEN;
        let len0 = RECORD_HEAD + pairs[0].0.len() + pairs[0].1.len();
        let record1 = record0 + len0;
        let mut flipped = bytes.clone();
        // The last byte of record 0's value (every value here but one is non-empty).
        let at = if pairs[0].1.is_empty() {
            record1 + RECORD_HEAD + pairs[1].0.len() + pairs[1].1.len() - 1
        } else {
            record1 - 1
        };
        flipped[at] ^= 1;
        let mut swapped = ExportHeader {
            tid: 7,
            version: 9,
            root,
        }
        .encode();
        encode_record(&pairs[1].0, &pairs[1].1, &mut swapped);
        encode_record(&pairs[0].0, &pairs[0].1, &mut swapped);
        let mut trailing = bytes.clone();
        trailing.push(0);
        let mut tag = bytes.clone();
        tag[record1] = 0x05;
        let cases: [(&[u8], &str, usize); 6] = [
            (&flipped, "root_mismatch", 50),
            (&bytes[..bytes.len() - 1], "truncated", 50),
            (&bytes[..record1 + 3], "truncated", 1),
            (&swapped, "out_of_order", 1),
            (&trailing, "trailing_data", 50),
            (&tag, "unknown_tag", 1),
        ];
        for (s, code, handed_out) in cases {
            for chunk in [1, 10, 4096] {
                let (got, verdict) = stream(s, chunk, &root);
                assert_eq!(verdict, Err(code), "{code} chunk {chunk}");
                assert_eq!(fed(s, chunk, &root), Err(code), "{code} chunk {chunk}");
                assert_eq!(got.len(), handed_out, "{code} chunk {chunk}");
            }
        }
    }
}
