//! The state export stream (SPEC.md §9.2), read incrementally so that an export of any size is verified with
//! memory bounded by one record plus the trie depth.
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

/// Incremental export reader and verifier: [`ExportReader::feed`] chunks as they arrive, then
/// [`ExportReader::finish`] with a root you trust.
pub struct ExportReader {
    limits: Limits,
    buf: Vec<u8>,
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

    /// Feeds the next chunk of the stream.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), ExportError> {
        self.bytes += chunk.len() as u64;
        if self.state == State::Done {
            if chunk.is_empty() {
                return Ok(());
            }
            return Err(DecodeError::TrailingData(chunk.len()).into());
        }
        self.buf.extend_from_slice(chunk);
        let mut pos = 0usize;
        let result = self.parse(&mut pos);
        self.buf.drain(..pos.min(self.buf.len()));
        result
    }

    /// Parses complete items from `buf[pos..]`, advancing `pos` past each.
    fn parse(&mut self, pos: &mut usize) -> Result<(), ExportError> {
        loop {
            let avail = self.buf.get(*pos..).unwrap_or(&[]);
            match self.state {
                State::Done => {
                    if !avail.is_empty() {
                        return Err(DecodeError::TrailingData(avail.len()).into());
                    }
                    return Ok(());
                }
                State::Header => {
                    // Reject a wrong magic as soon as the bytes seen contradict it.
                    let seen = avail.len().min(MAGIC.len());
                    if avail.get(..seen) != MAGIC.get(..seen) {
                        return Err(DecodeError::BadMagic.into());
                    }
                    if avail.len() < HEADER_LEN {
                        return Ok(());
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
                    *pos += HEADER_LEN;
                    self.state = State::Records;
                }
                State::Records => {
                    let Some(&tag) = avail.first() else {
                        return Ok(());
                    };
                    match tag {
                        RECORD => {
                            if avail.len() < RECORD_HEAD {
                                return Ok(());
                            }
                            let mut r = Reader::new(avail);
                            r.u8()?;
                            let key_len = r.u32()? as usize;
                            let value_len = r.u32()? as usize;
                            if key_len > self.limits.max_key_bytes {
                                return Err(too_large("key", key_len, self.limits.max_key_bytes));
                            }
                            if value_len > self.limits.max_value_bytes {
                                return Err(too_large(
                                    "value",
                                    value_len,
                                    self.limits.max_value_bytes,
                                ));
                            }
                            if r.remaining() < key_len + value_len {
                                return Ok(());
                            }
                            let key = r.take(key_len)?;
                            let value = r.take(value_len)?;
                            self.verifier.update(key, value)?;
                            *pos += RECORD_HEAD + key_len + value_len;
                        }
                        TRAILER => {
                            if avail.len() < TRAILER_LEN {
                                return Ok(());
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
                            *pos += TRAILER_LEN;
                            self.state = State::Done;
                        }
                        other => return Err(DecodeError::UnknownTag(other).into()),
                    }
                }
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
