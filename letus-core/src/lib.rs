//! `letus-core`: the letus storage engine.
//!
//! The persistent engine (DMM-Trie pages in LSVPS, values in VDLS) is built on the hashing and proof rules of
//! `letus-verify`, which this crate re-exports so that users of the engine see one set of types and the
//! prover can never drift from the verifier. What exists today is that shared vocabulary; the store itself is
//! tracked by its own issue.
#![forbid(unsafe_code)]

pub use letus_verify as verify;
pub use letus_verify::{Digest, Hash, Proof, TrieId, Version};
