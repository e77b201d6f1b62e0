//! The history commitment (SPEC.md §8): an append-only Merkle tree (RFC 9162 shape) over each trie's
//! `(tid, version, root)` entries, with inclusion and consistency proofs.

use std::vec::Vec;

use serde::{Deserialize, Serialize};

use crate::error::{DecodeError, HistoryError};
use crate::hash::history_node;
use crate::limits::MAX_HISTORY_PROOF_HASHES;
use crate::wire::{object, Reader};
use crate::{Hash, EMPTY};

/// Proves that entry `index` is in a history of `tree_size` entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InclusionProof {
    /// Position of the entry (0-based).
    pub index: u64,
    /// Number of entries in the history the proof is for.
    pub tree_size: u64,
    /// Audit path, bottom-up.
    pub hashes: Vec<Hash>,
}

/// Proves that the history of `old_size` entries is a prefix of the history of `new_size` entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistencyProof {
    /// Size of the older history.
    pub old_size: u64,
    /// Size of the newer history.
    pub new_size: u64,
    /// Consistency path.
    pub hashes: Vec<Hash>,
}

fn check_count(n: usize) -> Result<(), DecodeError> {
    if n > MAX_HISTORY_PROOF_HASHES {
        return Err(DecodeError::TooLarge {
            what: "history proof hash count",
            size: n as u64,
            limit: MAX_HISTORY_PROOF_HASHES as u64,
        });
    }
    Ok(())
}

fn encode_proof(ty: u8, a: u64, b: u64, hashes: &[Hash]) -> Result<Vec<u8>, DecodeError> {
    check_count(hashes.len())?;
    let mut out = Vec::with_capacity(19 + 32 * hashes.len());
    out.extend_from_slice(&[crate::FORMAT_VERSION, ty]);
    out.extend_from_slice(&a.to_le_bytes());
    out.extend_from_slice(&b.to_le_bytes());
    out.push(hashes.len() as u8);
    for h in hashes {
        out.extend_from_slice(&h.0);
    }
    Ok(out)
}

fn decode_proof(ty: u8, bytes: &[u8]) -> Result<(u64, u64, Vec<Hash>), DecodeError> {
    let mut r = Reader::new(bytes);
    r.header(ty)?;
    let a = r.u64()?;
    let b = r.u64()?;
    let n = usize::from(r.u8()?);
    check_count(n)?;
    let mut hashes = Vec::with_capacity(n);
    for _ in 0..n {
        hashes.push(r.hash()?);
    }
    r.finish()?;
    Ok((a, b, hashes))
}

impl InclusionProof {
    /// Binary form: `0x01 || 0x03 || u64le(index) || u64le(tree_size) || u8(count) || hashes`.
    pub fn encode(&self) -> Result<Vec<u8>, DecodeError> {
        encode_proof(
            object::HISTORY_INCLUSION,
            self.index,
            self.tree_size,
            &self.hashes,
        )
    }

    /// Decodes the binary form.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (index, tree_size, hashes) = decode_proof(object::HISTORY_INCLUSION, bytes)?;
        Ok(InclusionProof {
            index,
            tree_size,
            hashes,
        })
    }

    /// Checks that `leaf` (a [`crate::hash::history_leaf`]) is entry `index` of the history with root
    /// `history_root` and `tree_size` entries (SPEC.md §8.2).
    pub fn verify(
        &self,
        history_root: &Hash,
        tree_size: u64,
        leaf: &Hash,
    ) -> Result<(), HistoryError> {
        if self.tree_size != tree_size {
            return Err(HistoryError::SizeMismatch);
        }
        if self.index >= tree_size {
            return Err(HistoryError::IndexOutOfRange {
                index: self.index,
                size: tree_size,
            });
        }
        let (mut fn_, mut sn) = (self.index, tree_size - 1);
        let mut r = *leaf;
        for p in &self.hashes {
            if sn == 0 {
                return Err(HistoryError::ProofLength);
            }
            if fn_ & 1 == 1 || fn_ == sn {
                r = history_node(p, &r);
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            } else {
                r = history_node(&r, p);
            }
            fn_ >>= 1;
            sn >>= 1;
        }
        if sn != 0 {
            return Err(HistoryError::ProofLength);
        }
        if r != *history_root {
            return Err(HistoryError::RootMismatch);
        }
        Ok(())
    }
}

impl ConsistencyProof {
    /// Binary form: `0x01 || 0x04 || u64le(old_size) || u64le(new_size) || u8(count) || hashes`.
    pub fn encode(&self) -> Result<Vec<u8>, DecodeError> {
        encode_proof(
            object::HISTORY_CONSISTENCY,
            self.old_size,
            self.new_size,
            &self.hashes,
        )
    }

    /// Decodes the binary form.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (old_size, new_size, hashes) = decode_proof(object::HISTORY_CONSISTENCY, bytes)?;
        Ok(ConsistencyProof {
            old_size,
            new_size,
            hashes,
        })
    }

    /// Checks that the history `(old_size, old_root)` is a prefix of `(new_size, new_root)` (SPEC.md §8.3).
    pub fn verify(
        &self,
        old_size: u64,
        old_root: &Hash,
        new_size: u64,
        new_root: &Hash,
    ) -> Result<(), HistoryError> {
        if self.old_size != old_size || self.new_size != new_size || old_size > new_size {
            return Err(HistoryError::SizeMismatch);
        }
        if old_size == new_size {
            if !self.hashes.is_empty() {
                return Err(HistoryError::ProofLength);
            }
            return if old_root == new_root {
                Ok(())
            } else {
                Err(HistoryError::RootMismatch)
            };
        }
        if old_size == 0 {
            return if self.hashes.is_empty() {
                Ok(())
            } else {
                Err(HistoryError::ProofLength)
            };
        }
        let mut path: Vec<Hash> = Vec::with_capacity(self.hashes.len() + 1);
        if old_size.is_power_of_two() {
            path.push(*old_root);
        }
        path.extend_from_slice(&self.hashes);
        let (first, rest) = path.split_first().ok_or(HistoryError::ProofLength)?;
        let (mut fn_, mut sn) = (old_size - 1, new_size - 1);
        while fn_ & 1 == 1 {
            fn_ >>= 1;
            sn >>= 1;
        }
        let (mut fr, mut sr) = (*first, *first);
        for c in rest {
            if sn == 0 {
                return Err(HistoryError::ProofLength);
            }
            if fn_ & 1 == 1 || fn_ == sn {
                fr = history_node(c, &fr);
                sr = history_node(c, &sr);
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            } else {
                sr = history_node(&sr, c);
            }
            fn_ >>= 1;
            sn >>= 1;
        }
        if sn != 0 {
            return Err(HistoryError::ProofLength);
        }
        if fr != *old_root || sr != *new_root {
            return Err(HistoryError::RootMismatch);
        }
        Ok(())
    }
}

/// An in-memory history: appends leaves, computes roots and generates proofs (RFC 9162 §2.1).
///
/// Appending and the current root cost `O(log n)` through the list of perfect-subtree peaks; proofs for
/// arbitrary past sizes cost `O(n)` hashing, which a store may replace with cached subtree roots.
#[derive(Clone, Debug, Default)]
pub struct HistoryTree {
    leaves: Vec<Hash>,
    /// Roots of the perfect subtrees that make up the history, largest first, with their heights.
    peaks: Vec<(u32, Hash)>,
}

impl HistoryTree {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.leaves.len() as u64
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// The leaf hashes.
    pub fn leaves(&self) -> &[Hash] {
        &self.leaves
    }

    /// Appends a leaf hash ([`crate::hash::history_leaf`]).
    pub fn push(&mut self, leaf: Hash) {
        self.leaves.push(leaf);
        let mut node = (0u32, leaf);
        while let Some(&(h, left)) = self.peaks.last() {
            if h != node.0 {
                break;
            }
            self.peaks.pop();
            node = (h + 1, history_node(&left, &node.1));
        }
        self.peaks.push(node);
    }

    /// `MTH` of all entries.
    pub fn root(&self) -> Hash {
        let mut it = self.peaks.iter().rev();
        let Some(&(_, mut acc)) = it.next() else {
            return EMPTY;
        };
        for (_, left) in it {
            acc = history_node(left, &acc);
        }
        acc
    }

    /// `MTH` of the first `size` entries (`None` if `size > len`).
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        Some(mth(self.leaves.get(..usize::try_from(size).ok()?)?))
    }

    /// Inclusion proof of entry `index` in the history of the first `size` entries.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Option<InclusionProof> {
        let leaves = self.leaves.get(..usize::try_from(size).ok()?)?;
        if index >= size {
            return None;
        }
        let mut hashes = Vec::new();
        path(usize::try_from(index).ok()?, leaves, &mut hashes);
        Some(InclusionProof {
            index,
            tree_size: size,
            hashes,
        })
    }

    /// Consistency proof from the first `old` entries to the first `new` entries.
    pub fn consistency_proof(&self, old: u64, new: u64) -> Option<ConsistencyProof> {
        let leaves = self.leaves.get(..usize::try_from(new).ok()?)?;
        if old > new {
            return None;
        }
        let mut hashes = Vec::new();
        if old > 0 && old < new {
            subproof(usize::try_from(old).ok()?, leaves, true, &mut hashes);
        }
        Some(ConsistencyProof {
            old_size: old,
            new_size: new,
            hashes,
        })
    }
}

fn split_point(n: usize) -> usize {
    // Largest power of two strictly below n (n >= 2).
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// `MTH(D)` of RFC 9162 over leaf hashes.
pub fn mth(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => EMPTY,
        [one] => *one,
        _ => {
            let (l, r) = leaves.split_at(split_point(leaves.len()));
            history_node(&mth(l), &mth(r))
        }
    }
}

/// RFC 9162 `PATH(m, D)`, bottom-up.
fn path(m: usize, d: &[Hash], out: &mut Vec<Hash>) {
    if d.len() <= 1 {
        return;
    }
    let k = split_point(d.len());
    let (l, r) = d.split_at(k);
    if m < k {
        path(m, l, out);
        out.push(mth(r));
    } else {
        path(m - k, r, out);
        out.push(mth(l));
    }
}

/// RFC 9162 `SUBPROOF(m, D, b)`.
fn subproof(m: usize, d: &[Hash], b: bool, out: &mut Vec<Hash>) {
    let n = d.len();
    if m == n {
        if !b {
            out.push(mth(d));
        }
        return;
    }
    let k = split_point(n);
    let (l, r) = d.split_at(k);
    if m <= k {
        subproof(m, l, b, out);
        out.push(mth(r));
    } else {
        subproof(m - k, r, false, out);
        out.push(mth(l));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::history_leaf;

    fn tree(n: u64) -> HistoryTree {
        let mut t = HistoryTree::new();
        for v in 0..n {
            t.push(history_leaf(
                0,
                v * 3 + 1,
                &crate::hash::value_hash(&v.to_le_bytes()),
            ));
        }
        t
    }

    #[test]
    fn incremental_root_equals_mth() {
        let t = tree(40);
        for n in 0..=40u64 {
            let mut prefix = HistoryTree::new();
            for l in &t.leaves()[..n as usize] {
                prefix.push(*l);
            }
            assert_eq!(prefix.root(), t.root_at(n).unwrap(), "n = {n}");
        }
    }

    #[test]
    fn every_inclusion_and_consistency_proof_verifies_and_bites() {
        let t = tree(21);
        for n in 1..=21u64 {
            let root = t.root_at(n).unwrap();
            for i in 0..n {
                let p = t.inclusion_proof(i, n).unwrap();
                let leaf = t.leaves()[i as usize];
                p.verify(&root, n, &leaf).unwrap();
                assert_eq!(InclusionProof::decode(&p.encode().unwrap()).unwrap(), p);
                assert!(p.verify(&root, n, &crate::hash::value_hash(b"x")).is_err());
                if let Some(first) = p.hashes.first() {
                    let mut bad = p.clone();
                    bad.hashes[0] = crate::hash::inner(first, first);
                    assert_eq!(bad.verify(&root, n, &leaf), Err(HistoryError::RootMismatch));
                }
            }
            for m in 0..=n {
                let p = t.consistency_proof(m, n).unwrap();
                let old = t.root_at(m).unwrap();
                p.verify(m, &old, n, &root).unwrap();
                assert_eq!(ConsistencyProof::decode(&p.encode().unwrap()).unwrap(), p);
                if m > 0 && m < n {
                    let wrong_old = crate::hash::value_hash(b"fork");
                    assert!(p.verify(m, &wrong_old, n, &root).is_err());
                }
            }
        }
    }
}
