//! The state proof (SPEC.md §5): one format for inclusion, exclusion and multi-key proofs.
//!
//! ## Format
//! `0x01 (format) || 0x01 (type) || records…` where each record is
//! `0x00` EMPTY | `0x01` LEAF | `0x02 || path[32] || value_hash[32]` OTHER_LEAF |
//! `0x03 || mask[1] || popcount(mask) × hash[32]` BRANCH, in depth-first pre-order along the claimed keys.

use std::vec::Vec;

use crate::error::DecodeError;
use crate::wire::{object, Reader};
use crate::{Hash, KeyPath, Limits};

/// Record tags (SPEC.md §5.1).
pub mod record_tag {
    /// An empty node.
    pub const EMPTY: u8 = 0x00;
    /// The leaf of the claimed key below.
    pub const LEAF: u8 = 0x01;
    /// The leaf of a key that was not claimed.
    pub const OTHER_LEAF: u8 = 0x02;
    /// A branch with its frontier hashes.
    pub const BRANCH: u8 = 0x03;
}

/// One node of a proof walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The node is empty: every claimed key below it is absent.
    Empty,
    /// The node is the leaf of the one claimed key below it that is present.
    Leaf,
    /// The node is the leaf of an unclaimed key; every claimed key below it is absent.
    OtherLeaf {
        /// That key's path.
        path: KeyPath,
        /// That key's value hash.
        value_hash: Hash,
    },
    /// A branch: bit `i` of `mask` says frontier subtree `i` is non-empty; `hashes` are those subtrees' hashes.
    Branch {
        /// Non-empty frontier subtrees.
        mask: u8,
        /// Their hashes, in frontier order (never [`crate::EMPTY`]).
        hashes: Vec<Hash>,
    },
}

/// The record counts a decoder allows (SPEC.md §5.4): a walk ends each claim's path at one terminal record
/// (EMPTY, LEAF, OTHER_LEAF), so a proof for at most `max_keys` claims uses at most `max_keys` of them, and at
/// most 64 BRANCH records above each. A proof with more can verify no claim set within the limits; refusing it
/// as it is decoded bounds the decoded records by the claims a verifier accepts (at most `65 * max_keys`, about
/// 47 MB at the defaults) rather than by the input's bytes (a 4 MiB proof of one-byte records decoded to about
/// 300 MB).
pub(crate) struct RecordCounts {
    terminals: u64,
    branches: u64,
    max_terminals: u64,
    max_branches: u64,
}

impl RecordCounts {
    pub(crate) fn new(limits: &Limits) -> Self {
        let keys = limits.max_keys as u64;
        RecordCounts {
            terminals: 0,
            branches: 0,
            max_terminals: keys,
            max_branches: keys.saturating_mul(crate::path::NIBBLES as u64),
        }
    }

    /// Counts a record of tag `tag` (unknown tags are not counted: their decoder rejects them).
    pub(crate) fn count(&mut self, tag: u8) -> Result<(), DecodeError> {
        let (n, limit, what) = match tag {
            record_tag::EMPTY | record_tag::LEAF | record_tag::OTHER_LEAF => (
                &mut self.terminals,
                self.max_terminals,
                "proof's terminal records (EMPTY, LEAF, OTHER_LEAF)",
            ),
            record_tag::BRANCH => (
                &mut self.branches,
                self.max_branches,
                "proof's BRANCH records",
            ),
            _ => return Ok(()),
        };
        *n += 1;
        if *n > limit {
            return Err(DecodeError::TooLarge {
                what,
                size: *n,
                limit,
            });
        }
        Ok(())
    }
}

/// A decoded state proof. Decoding checks the encoding; [`crate::verify_proof`] checks it against claims.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Proof {
    /// Records in pre-order.
    pub records: Vec<Record>,
}

impl Proof {
    /// Decodes the binary form, enforcing `limits.max_proof_bytes`.
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Proof, DecodeError> {
        if bytes.len() > limits.max_proof_bytes {
            return Err(DecodeError::TooLarge {
                what: "proof",
                size: bytes.len() as u64,
                limit: limits.max_proof_bytes as u64,
            });
        }
        let mut r = Reader::new(bytes);
        r.header(object::STATE_PROOF)?;
        // Every record takes at least one byte, so this bounds the allocation by the input size.
        let mut records = Vec::with_capacity(r.remaining().min(1024));
        let mut counts = RecordCounts::new(limits);
        while !r.is_empty() {
            let tag = r.u8()?;
            counts.count(tag)?;
            let record = match tag {
                record_tag::EMPTY => Record::Empty,
                record_tag::LEAF => Record::Leaf,
                record_tag::OTHER_LEAF => Record::OtherLeaf {
                    path: KeyPath(r.array()?),
                    value_hash: r.hash()?,
                },
                record_tag::BRANCH => {
                    let mask = r.u8()?;
                    let n = mask.count_ones() as usize;
                    // Check the length first so a truncated record reports `truncated`, not a partial read.
                    if r.remaining() < 32 * n {
                        return Err(DecodeError::Truncated);
                    }
                    let mut hashes = Vec::with_capacity(n);
                    for _ in 0..n {
                        hashes.push(r.hash()?);
                    }
                    check_branch_hashes(&hashes)?;
                    Record::Branch { mask, hashes }
                }
                other => return Err(DecodeError::UnknownTag(other)),
            };
            records.push(record);
        }
        Ok(Proof { records })
    }

    /// Encodes the binary form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(crate::FORMAT_VERSION);
        out.push(object::STATE_PROOF);
        for r in &self.records {
            match r {
                Record::Empty => out.push(record_tag::EMPTY),
                Record::Leaf => out.push(record_tag::LEAF),
                Record::OtherLeaf { path, value_hash } => {
                    out.push(record_tag::OTHER_LEAF);
                    out.extend_from_slice(&path.0);
                    out.extend_from_slice(&value_hash.0);
                }
                Record::Branch { mask, hashes } => {
                    out.push(record_tag::BRANCH);
                    out.push(*mask);
                    for h in hashes {
                        out.extend_from_slice(&h.0);
                    }
                }
            }
        }
        out
    }

    /// Size of [`Proof::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        2 + self
            .records
            .iter()
            .map(|r| match r {
                Record::Empty | Record::Leaf => 1,
                Record::OtherLeaf { .. } => 65,
                Record::Branch { hashes, .. } => 2 + 32 * hashes.len(),
            })
            .sum::<usize>()
    }

    /// The JSON form of SPEC.md §5.5.
    pub fn to_json_value(&self) -> crate::proof_json::ProofJson {
        crate::proof_json::ProofJson::from(self)
    }
}

/// A branch record never writes the hash of an empty subtree (SPEC.md §5.2).
pub(crate) fn check_branch_hashes(hashes: &[Hash]) -> Result<(), DecodeError> {
    if hashes.iter().any(Hash::is_empty) {
        return Err(DecodeError::NonCanonical(
            "an empty subtree's hash is written",
        ));
    }
    Ok(())
}
