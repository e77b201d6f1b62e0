//! Errors of the engine. Corruption always names the file and the offset; it is never returned as data.

use std::fmt;
use std::path::PathBuf;

use letus_verify::{TrieId, Version};

/// What went wrong in a store operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on `path`.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Stored bytes fail their checksum or do not parse.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damaged structure.
        offset: u64,
        /// What was expected there.
        what: String,
    },
    /// A file has a format version this build does not read (newer, or an upgrade is required).
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// Its format version.
        found: u32,
    },
    /// `commit(V)` with `V` not above the last committed version.
    VersionNotIncreasing {
        /// The version asked for.
        requested: Version,
        /// The last committed version.
        last: Version,
    },
    /// A version that was never committed (or is newer than the last commit).
    VersionNotFound(Version),
    /// A trie id that has no data at the requested version.
    UnknownTrie(TrieId),
    /// A version below the oldest one the store holds: it started from a snapshot (or its chain started) at
    /// `oldest`, so it has no state before it.
    BeforeOldest {
        /// The version asked for.
        version: Version,
        /// The oldest version the store holds.
        oldest: Version,
    },
    /// A version below the boundary of a prune ([`crate::Store::prune`]): its pages are gone. Its digest and
    /// history-commitment proofs still answer; reads, proofs and history at it do not.
    Pruned {
        /// The version asked for.
        version: Version,
        /// The oldest version whose state the store still holds.
        oldest: Version,
    },
    /// A value-log record in a data file that value-log GC deleted. Reads at versions the store still holds never
    /// see this (GC deletes a file only once every version that refers to it is pruned); a read that raced the
    /// prune that made its version pruned answers [`Error::Pruned`] instead.
    Collected {
        /// The data file's id.
        file_id: u32,
    },
    /// A snapshot chunk above the size the caller allows.
    ChunkTooLarge {
        /// Its encoded size so far.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// More changes between two versions than the caller takes, or more bytes of them
    /// ([`crate::Snapshot::changes`]).
    TooManyChanges {
        /// The most changes taken.
        max_changes: usize,
        /// The most bytes of value-log records (keys and values) taken.
        max_bytes: u64,
    },
    /// A key or value above the configured limits.
    TooLarge {
        /// "key" or "value".
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Full verification found stored data that does not hash to what the trie says.
    Mismatch {
        /// Where: a leaf, a page, or the root.
        at: String,
        /// The hash stored (or trusted).
        expected: letus_verify::Hash,
        /// The hash recomputed from the values.
        computed: letus_verify::Hash,
    },
    /// The store directory is locked by another process.
    Locked(PathBuf),
    /// An earlier I/O failure left the store in a state where it must be reopened.
    Poisoned,
    /// A history base that cannot be set: the store has commits, or the frontier is malformed.
    InvalidHistoryBase(String),
    /// A history cursor that is not the version of an entry of that key's history.
    InvalidCursor(Version),
    /// A bulk load that cannot proceed: the directory already holds files, or the pairs are not in strictly
    /// increasing key-path order.
    InvalidBulkLoad(String),
    /// The caller's callback asked to stop (e.g. the client of a streamed export went away).
    Cancelled,
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            offset,
            what: what.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "I/O error on {}: {source}", path.display()),
            Error::Corrupt { path, offset, what } => {
                write!(
                    f,
                    "corruption in {} at offset {offset}: {what}",
                    path.display()
                )
            }
            Error::UnsupportedFormat { path, found } => write!(
                f,
                "{} has format version {found}, which this build cannot read",
                path.display()
            ),
            Error::VersionNotIncreasing { requested, last } => write!(
                f,
                "version {requested} is not above the last committed version {last}"
            ),
            Error::VersionNotFound(v) => write!(f, "version {v} was never committed"),
            Error::BeforeOldest { version, oldest } => write!(
                f,
                "version {version} is before the oldest version this store holds ({oldest})"
            ),
            Error::Pruned { version, oldest } => write!(
                f,
                "version {version} is pruned: the oldest version whose state this store holds is {oldest}"
            ),
            Error::Collected { file_id } => write!(
                f,
                "value-log data file {file_id} was deleted by garbage collection"
            ),
            Error::ChunkTooLarge { bytes, limit } => write!(
                f,
                "the snapshot chunk is over {bytes} bytes, above the limit of {limit}: ask for a manifest with smaller entries"
            ),
            Error::TooManyChanges {
                max_changes,
                max_bytes,
            } => write!(
                f,
                "more than {max_changes} changes or {max_bytes} bytes of keys and values between the two versions: ask for fewer versions"
            ),
            Error::UnknownTrie(t) => write!(f, "trie {t} does not exist at that version"),
            Error::TooLarge { what, size, limit } => {
                write!(f, "{what} of {size} bytes is above the limit of {limit}")
            }
            Error::Mismatch {
                at,
                expected,
                computed,
            } => {
                write!(
                    f,
                    "mismatch at {at}: expected {expected}, recomputed {computed}"
                )
            }
            Error::Locked(p) => write!(f, "{} is in use by another process", p.display()),
            Error::Poisoned => write!(f, "an earlier write failed; reopen the store"),
            Error::InvalidHistoryBase(why) => write!(f, "invalid history base: {why}"),
            Error::InvalidCursor(v) => write!(
                f,
                "cursor {v} is not the version of an entry in this key's history"
            ),
            Error::InvalidBulkLoad(why) => write!(f, "bulk load: {why}"),
            Error::Cancelled => write!(f, "stopped by the caller"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
