//! Typed errors. Each kind of operation has its own `#[non_exhaustive]` enum; every variant maps to one stable
//! error code of SPEC.md §10 through `code()`, which is what the test vectors and the JS package use.

use core::fmt;

use crate::{Hash, TrieId, Version};

/// Decoding a binary or JSON object failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends inside an object.
    Truncated,
    /// The format byte is not 1.
    UnsupportedFormat(u64),
    /// The type byte names another object.
    WrongType {
        /// The type this decoder reads.
        expected: u8,
        /// The type found.
        found: u8,
    },
    /// An unknown record tag.
    UnknownTag(u8),
    /// Bytes follow the end of the object.
    TrailingData(usize),
    /// A field has an impossible value.
    Malformed(&'static str),
    /// A limit of SPEC.md §6 is exceeded.
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// An encoding no honest store produces (e.g. a written EMPTY hash).
    NonCanonical(&'static str),
    /// Not a letus state export.
    BadMagic,
    /// The export trailer's record count differs from the records read.
    CountMismatch {
        /// Count in the trailer.
        declared: u64,
        /// Records read.
        read: u64,
    },
}

impl DecodeError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::Truncated => "truncated",
            DecodeError::UnsupportedFormat(_) => "unsupported_format",
            DecodeError::WrongType { .. } => "wrong_type",
            DecodeError::UnknownTag(_) => "unknown_tag",
            DecodeError::TrailingData(_) => "trailing_data",
            DecodeError::Malformed(_) => "malformed",
            DecodeError::TooLarge { .. } => "too_large",
            DecodeError::NonCanonical(_) => "non_canonical",
            DecodeError::BadMagic => "bad_magic",
            DecodeError::CountMismatch { .. } => "count_mismatch",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "input ends inside an object"),
            DecodeError::UnsupportedFormat(v) => {
                write!(f, "unsupported format version {v} (this verifier reads 1)")
            }
            DecodeError::WrongType { expected, found } => {
                write!(
                    f,
                    "object type {found:#04x} where {expected:#04x} was expected"
                )
            }
            DecodeError::UnknownTag(t) => write!(f, "unknown record tag {t:#04x}"),
            DecodeError::TrailingData(n) => write!(f, "{n} bytes after the end of the object"),
            DecodeError::Malformed(why) => write!(f, "malformed: {why}"),
            DecodeError::TooLarge { what, size, limit } => {
                write!(f, "{what} is {size}, above the limit of {limit}")
            }
            DecodeError::NonCanonical(why) => write!(f, "non-canonical encoding: {why}"),
            DecodeError::BadMagic => write!(f, "not a letus state export (bad magic)"),
            DecodeError::CountMismatch { declared, read } => write!(
                f,
                "export trailer declares {declared} records but {read} were read"
            ),
        }
    }
}

impl core::error::Error for DecodeError {}

/// A state proof did not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProofError {
    /// The proof could not be decoded.
    Decode(DecodeError),
    /// No claims, or more than the limit.
    TooManyKeys {
        /// Claims given.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The same key was claimed twice (index of the second claim in the caller's order).
    DuplicateKey(usize),
    /// The proof has fewer records than the walk needs.
    ProofExhausted,
    /// The proof has more records than the walk needs.
    UnusedRecords(usize),
    /// The claim at this index says present, the proof shows it absent.
    ExpectedPresent(usize),
    /// The claim at this index says absent (or a second present claim shares a leaf), the proof shows a leaf.
    ExpectedAbsent(usize),
    /// An OTHER_LEAF record is not on the claimed key's path, or is the key itself.
    OtherLeafMismatch(usize),
    /// A branch record at depth 64.
    DepthExceeded,
    /// A node shape no honest store produces.
    NonCanonical(&'static str),
    /// The recomputed root differs from the trusted one.
    RootMismatch {
        /// The trusted root.
        expected: Hash,
        /// The root the proof leads to.
        computed: Hash,
    },
}

impl ProofError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ProofError::Decode(e) => e.code(),
            ProofError::TooManyKeys { .. } => "too_many_keys",
            ProofError::DuplicateKey(_) => "duplicate_key",
            ProofError::ProofExhausted => "proof_exhausted",
            ProofError::UnusedRecords(_) => "unused_records",
            ProofError::ExpectedPresent(_) => "expected_present",
            ProofError::ExpectedAbsent(_) => "expected_absent",
            ProofError::OtherLeafMismatch(_) => "other_leaf_mismatch",
            ProofError::DepthExceeded => "depth_exceeded",
            ProofError::NonCanonical(_) => "non_canonical",
            ProofError::RootMismatch { .. } => "root_mismatch",
        }
    }
}

impl fmt::Display for ProofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProofError::Decode(e) => write!(f, "cannot decode proof: {e}"),
            ProofError::TooManyKeys { count, limit } => {
                write!(f, "{count} claims; a proof checks 1 to {limit}")
            }
            ProofError::DuplicateKey(i) => write!(f, "claim {i} repeats an earlier key"),
            ProofError::ProofExhausted => write!(f, "the proof ends before every claim is covered"),
            ProofError::UnusedRecords(n) => {
                write!(f, "{n} proof records are not used by any claim")
            }
            ProofError::ExpectedPresent(i) => {
                write!(
                    f,
                    "claim {i} says the key is present, the proof shows it absent"
                )
            }
            ProofError::ExpectedAbsent(i) => {
                write!(
                    f,
                    "claim {i} says the key is absent, the proof shows it present"
                )
            }
            ProofError::OtherLeafMismatch(i) => write!(
                f,
                "the leaf offered as proof of absence for claim {i} is not on its path"
            ),
            ProofError::DepthExceeded => write!(f, "the proof goes deeper than 64 levels"),
            ProofError::NonCanonical(why) => write!(f, "non-canonical proof: {why}"),
            ProofError::RootMismatch { expected, computed } => write!(
                f,
                "the proof leads to root {computed}, not the trusted root {expected}"
            ),
        }
    }
}

impl core::error::Error for ProofError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ProofError::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DecodeError> for ProofError {
    fn from(e: DecodeError) -> Self {
        ProofError::Decode(e)
    }
}

/// A history inclusion or consistency proof did not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistoryError {
    /// The proof could not be decoded.
    Decode(DecodeError),
    /// The proof's sizes disagree with the digests, or the old history is longer than the new one.
    SizeMismatch,
    /// The inclusion index is not below the tree size.
    IndexOutOfRange {
        /// The index.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// The proof has the wrong number of hashes.
    ProofLength,
    /// The recomputed history root differs.
    RootMismatch,
}

impl HistoryError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            HistoryError::Decode(e) => e.code(),
            HistoryError::SizeMismatch => "history_size_mismatch",
            HistoryError::IndexOutOfRange { .. } => "history_index_out_of_range",
            HistoryError::ProofLength => "history_proof_length",
            HistoryError::RootMismatch => "history_root_mismatch",
        }
    }
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::Decode(e) => write!(f, "cannot decode history proof: {e}"),
            HistoryError::SizeMismatch => {
                write!(f, "history proof sizes do not match the digests")
            }
            HistoryError::IndexOutOfRange { index, size } => {
                write!(
                    f,
                    "history index {index} is outside a history of {size} entries"
                )
            }
            HistoryError::ProofLength => write!(f, "history proof has the wrong number of hashes"),
            HistoryError::RootMismatch => {
                write!(f, "history proof does not lead to the trusted history root")
            }
        }
    }
}

impl core::error::Error for HistoryError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            HistoryError::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DecodeError> for HistoryError {
    fn from(e: DecodeError) -> Self {
        HistoryError::Decode(e)
    }
}

/// Full verification (streaming root computation) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FullVerifyError {
    /// Pair number `index` (0-based) is not after the previous one in path order.
    OutOfOrder(u64),
    /// Pair number `index` repeats the previous key.
    DuplicateKey(u64),
    /// The recomputed root differs from the trusted one.
    RootMismatch {
        /// The trusted root.
        expected: Hash,
        /// The root computed from the pairs.
        computed: Hash,
    },
}

impl FullVerifyError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            FullVerifyError::OutOfOrder(_) => "out_of_order",
            FullVerifyError::DuplicateKey(_) => "duplicate_key",
            FullVerifyError::RootMismatch { .. } => "root_mismatch",
        }
    }
}

impl fmt::Display for FullVerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FullVerifyError::OutOfOrder(i) => {
                write!(f, "pair {i} is out of path order")
            }
            FullVerifyError::DuplicateKey(i) => write!(f, "pair {i} repeats the previous key"),
            FullVerifyError::RootMismatch { expected, computed } => write!(
                f,
                "recomputed root {computed} differs from the trusted root {expected}"
            ),
        }
    }
}

impl core::error::Error for FullVerifyError {}

/// Reading and verifying a state export stream failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportError {
    /// The stream is malformed.
    Decode(DecodeError),
    /// The pairs do not produce the trusted root, or are out of order.
    Verify(FullVerifyError),
}

impl ExportError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ExportError::Decode(e) => e.code(),
            ExportError::Verify(e) => e.code(),
        }
    }
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Decode(e) => write!(f, "bad export stream: {e}"),
            ExportError::Verify(e) => write!(f, "export does not verify: {e}"),
        }
    }
}

impl core::error::Error for ExportError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ExportError::Decode(e) => Some(e),
            ExportError::Verify(e) => Some(e),
        }
    }
}

impl From<DecodeError> for ExportError {
    fn from(e: DecodeError) -> Self {
        ExportError::Decode(e)
    }
}

impl From<FullVerifyError> for ExportError {
    fn from(e: FullVerifyError) -> Self {
        ExportError::Verify(e)
    }
}

/// A snapshot manifest or chunk did not verify (SPEC.md §12).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The object could not be decoded.
    Decode(DecodeError),
    /// The object is for another trie or version than the one asked for.
    WrongSnapshot {
        /// `(tid, version)` asked for.
        expected: (TrieId, Version),
        /// `(tid, version)` the object names.
        found: (TrieId, Version),
    },
    /// Manifest entry or chunk pair number `index` is not after the previous one (for entries: or lies inside it).
    OutOfOrder(u64),
    /// Chunk pair number `index` repeats the previous key.
    DuplicateKey(u64),
    /// Chunk pair number `index` is not in the entry's subtree.
    OutsideChunk(u64),
    /// The chunk names another entry, subtree or index than the one it is checked as.
    ChunkMismatch(&'static str),
    /// The recomputed hash (of the manifest's root, or of a chunk's subtree) differs from the trusted one.
    RootMismatch {
        /// The trusted hash.
        expected: Hash,
        /// The recomputed hash.
        computed: Hash,
    },
    /// The chunk's pairs verify, but the manifest's count for the entry is wrong: the manifest is at fault.
    CountMismatch {
        /// Count in the manifest.
        manifest: u64,
        /// Pairs in the chunk.
        chunk: u64,
    },
}

impl SnapshotError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            SnapshotError::Decode(e) => e.code(),
            SnapshotError::WrongSnapshot { .. } => "wrong_snapshot",
            SnapshotError::OutOfOrder(_) => "out_of_order",
            SnapshotError::DuplicateKey(_) => "duplicate_key",
            SnapshotError::OutsideChunk(_) => "outside_chunk",
            SnapshotError::ChunkMismatch(_) => "chunk_mismatch",
            SnapshotError::RootMismatch { .. } => "root_mismatch",
            SnapshotError::CountMismatch { .. } => "count_mismatch",
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Decode(e) => write!(f, "bad snapshot object: {e}"),
            SnapshotError::WrongSnapshot { expected, found } => write!(
                f,
                "object is for trie {} version {}, not trie {} version {}",
                found.0, found.1, expected.0, expected.1
            ),
            SnapshotError::OutOfOrder(i) => write!(f, "entry or pair {i} is out of path order"),
            SnapshotError::DuplicateKey(i) => write!(f, "pair {i} repeats the previous key"),
            SnapshotError::OutsideChunk(i) => write!(f, "pair {i} lies outside the chunk's subtree"),
            SnapshotError::ChunkMismatch(why) => write!(f, "chunk does not match its entry: {why}"),
            SnapshotError::RootMismatch { expected, computed } => write!(
                f,
                "recomputed hash {computed} differs from the trusted hash {expected}"
            ),
            SnapshotError::CountMismatch { manifest, chunk } => write!(
                f,
                "the chunk verifies with {chunk} pairs but the manifest says {manifest}: the manifest is wrong"
            ),
        }
    }
}

impl core::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            SnapshotError::Decode(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DecodeError> for SnapshotError {
    fn from(e: DecodeError) -> Self {
        SnapshotError::Decode(e)
    }
}
