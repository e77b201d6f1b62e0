//! `letus-verify`: the single source of truth for how letus hashes its state and how anyone checks what a
//! letus store says.
//!
//! It implements [`SPEC.md`](https://example.invalid/letus/letus-verify/SPEC.md) (format version 1):
//!
//! - [`hash`]: domain-separated BLAKE3 hashing of key paths, values, leaves and inner nodes;
//! - [`proof`]: the one state-proof format for inclusion, exclusion and batch multi-proofs, and
//!   [`verify_proof`] / [`verify_multi_proof`], which return a [`VerifiedRead`] / [`VerifiedReads`] or a typed
//!   [`ProofError`];
//! - [`digest`]: digests `(tid, version, root)` with their history commitment, and the [`DigestChecker`] that
//!   detects forks and rollbacks;
//! - [`history`]: the append-only Merkle accumulator over `(version, root)` pairs with inclusion and consistency
//!   proofs;
//! - [`full`]: streaming full verification with memory bounded by the trie depth, and [`export`], the state
//!   export stream it reads;
//! - [`snapshot`]: a state in chunks, each verified on arrival against a manifest that verifies against the root;
//! - `reference` (feature `reference`): the obviously-correct in-memory DMM-Trie used as the test oracle.
//!
//! The crate is `no_std` + `alloc` and forbids `unsafe`; it builds for `wasm32-unknown-unknown` and for bare-metal
//! targets such as `thumbv7em-none-eabihf`.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![warn(missing_docs)]

extern crate no_std_compat as std;

pub mod digest;
pub mod error;
pub mod export;
pub mod fold;
pub mod full;
pub mod hash;
pub mod hex;
pub mod history;
pub mod limits;
pub mod path;
pub mod proof;
pub mod proof_json;
pub mod snapshot;
pub mod verify;
mod wire;

#[cfg(feature = "reference")]
pub mod reference;

pub use digest::{Commitment, Digest, DigestChecker, Report, SourceId};
pub use error::{
    DecodeError, ExportError, FullVerifyError, HistoryError, ProofError, SnapshotError,
};
pub use full::FullVerifier;
pub use hash::{Hash, EMPTY};
pub use history::{ConsistencyProof, HistoryTree, HistoryTreeError, InclusionProof};
pub use limits::Limits;
pub use path::KeyPath;
pub use proof::{Proof, Record};
pub use verify::{verify_multi_proof, verify_proof, Claim, VerifiedRead, VerifiedReads};

/// A version number: the block height at which a state was committed. Strictly increasing per store.
pub type Version = u64;

/// Identifies one of the independent tries kept by a store.
pub type TrieId = u32;

/// The format byte that starts every binary object of this specification (SPEC.md §4).
pub const FORMAT_VERSION: u8 = 1;
