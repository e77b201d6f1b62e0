//! `letus-core`: the letus storage engine.
//!
//! A multi-version, verifiable key-value store for blockchains, after the LETUS design:
//! - the **DMM-Trie** (module `trie`): the 16-ary, leaf-compressed Merkle trie of `letus-verify`'s SPEC.md, managed as
//!   pages of two levels, every node and page carrying the version of its newest data;
//! - **LSVPS** (module `lsvps`): pages stored as DeltaPages and BasePages keyed by `(tid, page id, version, kind)` in
//!   immutable, version-ordered index files, with no compaction;
//! - **VDLS** ([`vdls`]): an append-only log of `(version, key, value)` records that leaves point into, and that
//!   doubles as the write-ahead log of each commit.
//!
//! The public API is [`Store`] (the one writer), [`Snapshot`] and [`Reader`] (readers on any thread), [`Options`]
//! and [`Error`]; the trie and LSVPS are internal. The on-disk format, its checksums and the crash argument are
//! in `FORMAT.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod history_base;
pub(crate) mod lsvps;
pub mod metrics;
pub mod options;
pub(crate) mod prune_manifest;
pub mod roots_log;
pub mod shard;
pub mod storage;
pub mod store;
pub(crate) mod tombstones;
pub(crate) mod trie;
pub(crate) mod varint;
pub mod vdls;

pub use error::{Error, Result};
pub use history_base::Frontier;
pub use letus_verify as verify;
pub use letus_verify::{Digest, Hash, Proof, TrieId, Version};
pub use options::{MemorySplit, Options};
pub use store::{
    BulkPair, CachedPages, FullVerification, GcReport, HistoryEntry, HistoryPage, MemoryUse,
    PruneProgress, PruneReport, PruneStatus, Reader, Replayed, Snapshot, Store, VlogFileStatus,
};
