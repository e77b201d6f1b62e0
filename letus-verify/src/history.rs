//! The history commitment (SPEC.md §8): an append-only Merkle tree (RFC 9162 shape) over each trie's
//! `(tid, version, root)` entries, with inclusion and consistency proofs.

use core::fmt;
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

/// Why a [`HistoryTree`] cannot be built or cannot answer (store side; not a verification error, so it has no
/// SPEC.md §10 code).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistoryTreeError {
    /// The frontier's peak heights are not the binary decomposition of its size, largest first: peak `index`
    /// (0-based; equal to the number of peaks given when one is missing) is wrong or superfluous.
    FrontierShape {
        /// The frontier's size.
        size: u64,
        /// The first peak that does not fit.
        index: usize,
    },
    /// A frontier longer than [`MAX_FRONTIER_SIZE`] entries.
    FrontierTooLong {
        /// The frontier's size.
        size: u64,
    },
    /// A size beyond the number of entries in the tree.
    SizeOutOfRange {
        /// The requested size.
        size: u64,
        /// The number of entries.
        len: u64,
    },
    /// An inclusion index not below the size of the history it is proven in.
    IndexOutOfRange {
        /// The index.
        index: u64,
        /// The history size.
        size: u64,
    },
    /// A consistency proof from a longer history to a shorter one.
    OldAfterNew {
        /// The older size.
        old: u64,
        /// The newer size.
        new: u64,
    },
    /// The answer needs the hash of a subtree that lies inside one of the peaks this tree was started from (see
    /// [`HistoryTree::from_frontier`]); only the peaks themselves are known.
    BeforeFrontier {
        /// The size of the frontier the tree was started from.
        frontier: u64,
    },
}

impl fmt::Display for HistoryTreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryTreeError::FrontierShape { size, index } => write!(
                f,
                "history frontier peak {index} does not follow the binary decomposition of size {size}"
            ),
            HistoryTreeError::FrontierTooLong { size } => write!(
                f,
                "history frontier of {size} entries exceeds {MAX_FRONTIER_SIZE}"
            ),
            HistoryTreeError::SizeOutOfRange { size, len } => {
                write!(f, "history size {size} exceeds the {len} entries held")
            }
            HistoryTreeError::IndexOutOfRange { index, size } => write!(
                f,
                "history index {index} is outside a history of {size} entries"
            ),
            HistoryTreeError::OldAfterNew { old, new } => write!(
                f,
                "history consistency from {old} entries to fewer ({new})"
            ),
            HistoryTreeError::BeforeFrontier { frontier } => write!(
                f,
                "history answer needs entries inside the frontier of {frontier} entries the tree started from"
            ),
        }
    }
}

impl core::error::Error for HistoryTreeError {}

/// The longest frontier [`HistoryTree::from_frontier`] accepts: `2^63` entries. No real history comes near it;
/// the bound guarantees that the entry count cannot overflow a `u64` however often the tree is appended to
/// (every append stores at least 32 bytes, so `2^63` more appends cannot happen).
pub const MAX_FRONTIER_SIZE: u64 = 1 << 63;

/// The stored nodes of one height `k` of a [`HistoryTree`]: `nodes[i]` is `MTH` of the aligned perfect subtree of
/// entries `[(offset + i) * 2^k, (offset + i + 1) * 2^k)`.
///
/// Invariant: `offset + nodes.len() == len >> k` (every complete node is stored, none is missing at the end), and
/// `offset` is `base >> k`, minus one when bit `k` of `base` is set (then `nodes[0]` is that frontier peak), where
/// `base` is the size the tree started from (0 for [`HistoryTree::new`]). So `offset` is even whenever a node is
/// appended at an odd position, and the node's left sibling is stored.
#[derive(Clone, Debug, Default)]
struct Level {
    offset: u64,
    nodes: Vec<Hash>,
}

impl Level {
    fn end(&self) -> u64 {
        // Cannot overflow: `offset + nodes.len() == len >> k <= len`, a u64.
        self.offset + self.nodes.len() as u64
    }
}

/// An in-memory history: appends leaves, computes roots and generates proofs (RFC 9162 §2.1).
///
/// It stores every complete aligned perfect subtree: height `k` holds `MTH` of entries `[j * 2^k, (j + 1) * 2^k)`
/// for each `j` with `(j + 1) * 2^k <= len`, about `2 * len` hashes in all. An append costs amortised `O(1)`
/// hashing (`O(log n)` at worst). Every RFC 9162 subtree a proof or a past root needs is either such a perfect
/// subtree or a right edge made of at most 64 of them, so [`root_at`](Self::root_at),
/// [`inclusion_proof`](Self::inclusion_proof) and [`consistency_proof`](Self::consistency_proof) cost `O(log n)`
/// lookups and hashes, for any past size. The proofs are exactly RFC 9162 `PATH` and `SUBPROOF` (SPEC.md §8).
///
/// A tree can also start from a *frontier* ([`from_frontier`](Self::from_frontier)): the size and the peaks of a
/// history whose entries are not known. It then holds only those peaks below its new entries, and answers
/// only what those determine; see [`from_frontier`](Self::from_frontier).
#[derive(Clone, Debug, Default)]
pub struct HistoryTree {
    /// `levels[k]`: the perfect subtrees of height `k` (see [`Level`]). Levels exist up to the highest bit of the
    /// starting frontier's size, and above it once a node of that height is complete.
    levels: Vec<Level>,
    /// The size of the frontier the tree started from (0 for [`HistoryTree::new`]).
    base: u64,
}

impl HistoryTree {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// A history of `size` entries of which only the frontier is known: `peaks` are the roots of the perfect
    /// subtrees that make it up, `(height, MTH)`, largest first, exactly as [`frontier`](Self::frontier) returns
    /// them. The heights must be the binary decomposition of `size` (for 13: 3, 2, 0) and `size` at most
    /// [`MAX_FRONTIER_SIZE`].
    ///
    /// The tree has [`len`](Self::len) `size`, its [`root`](Self::root) is that of the original history, and it
    /// can be appended to. What needs a subtree strictly inside a frontier peak cannot be derived and is refused
    /// with [`HistoryTreeError::BeforeFrontier`] by the `try_` methods (`None` from the others). Always available:
    /// the root of every size `>= size`, inclusion proofs of every entry `>= size` (and of entry `size - 1` when
    /// `size` is odd, the last peak being that entry), and consistency proofs from every size `>= size`; that is
    /// what a store imported from an export serves about the versions it committed itself.
    pub fn from_frontier(size: u64, peaks: Vec<(u32, Hash)>) -> Result<Self, HistoryTreeError> {
        if size > MAX_FRONTIER_SIZE {
            return Err(HistoryTreeError::FrontierTooLong { size });
        }
        // The set bits of `size`, highest first, must be the heights given, in order.
        let mut bits = (0..64u32).rev().filter(|k| size >> k & 1 == 1);
        for (index, &(height, _)) in peaks.iter().enumerate() {
            if bits.next() != Some(height) {
                return Err(HistoryTreeError::FrontierShape { size, index });
            }
        }
        if bits.next().is_some() {
            return Err(HistoryTreeError::FrontierShape {
                size,
                index: peaks.len(),
            });
        }
        let top = 64 - size.leading_zeros();
        let mut levels: Vec<Level> = (0..top)
            .map(|k| Level {
                offset: size >> k,
                nodes: Vec::new(),
            })
            .collect();
        for (height, hash) in peaks {
            // `height < top` since it is a set bit of `size`; the peak is the node just below `size >> height`.
            if let Some(level) = levels.get_mut(height as usize) {
                level.offset -= 1;
                level.nodes.push(hash);
            }
        }
        Ok(HistoryTree { levels, base: size })
    }

    /// The size and the peaks of the history: the roots of the perfect subtrees that make it up, `(height, MTH)`,
    /// largest first (the input of [`from_frontier`](Self::from_frontier)).
    pub fn frontier(&self) -> (u64, Vec<(u32, Hash)>) {
        let len = self.len();
        let peaks = (0..64u32)
            .rev()
            .filter(|k| len >> k & 1 == 1)
            // Every peak of `len >= base` is stored (the `Level` invariant), so nothing is filtered out here.
            .filter_map(|k| Some((k, self.node(k, (len >> k) - 1)?)))
            .collect();
        (len, peaks)
    }

    /// The frontier of the history's first `size` entries (what [`frontier`](Self::frontier) returned when the
    /// tree had `size` entries): for a store exporting the state of an older version together with the history
    /// commitment that ends at it. Peaks inside a frontier the tree started from are
    /// [`HistoryTreeError::BeforeFrontier`].
    pub fn frontier_at(&self, size: u64) -> Result<(u64, Vec<(u32, Hash)>), HistoryTreeError> {
        let len = self.len();
        if size > len {
            return Err(HistoryTreeError::SizeOutOfRange { size, len });
        }
        let peaks = (0..64u32)
            .rev()
            .filter(|k| size >> k & 1 == 1)
            .map(|k| {
                // Peak `k` of a prefix is the aligned perfect subtree ending at `size` with bits below `k` cleared.
                self.node(k, (size >> k) - 1).map(|h| (k, h)).ok_or(
                    HistoryTreeError::BeforeFrontier {
                        frontier: self.base,
                    },
                )
            })
            .collect::<Result<_, _>>()?;
        Ok((size, peaks))
    }

    /// Number of entries, including those of the frontier the tree started from.
    pub fn len(&self) -> u64 {
        self.levels.first().map_or(self.base, Level::end)
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size of the frontier the tree started from (0 for [`HistoryTree::new`]).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Index of the first leaf hash this tree holds: 0, or for a tree started from a frontier, the frontier's
    /// size (one less when that size is odd, its last peak being a leaf).
    pub fn first_leaf(&self) -> u64 {
        self.levels.first().map_or(self.base, |l| l.offset)
    }

    /// The leaf hashes held, entries [`first_leaf`](Self::first_leaf)`..`[`len`](Self::len): all of them unless
    /// the tree started from a frontier.
    pub fn leaves(&self) -> &[Hash] {
        self.levels.first().map_or(&[], |l| l.nodes.as_slice())
    }

    /// The leaf hash of entry `index`, if held.
    pub fn leaf(&self, index: u64) -> Option<Hash> {
        self.node(0, index)
    }

    /// Appends a leaf hash ([`crate::hash::history_leaf`]).
    pub fn push(&mut self, leaf: Hash) {
        // `node` is the perfect subtree of height `k` just completed, at `position` in that height.
        let (mut node, mut position) = (leaf, self.len());
        for k in 0usize.. {
            if self.levels.len() == k {
                // A new height (levels exist for every height below, as each was just appended to): its first node
                // is this one, which keeps the `Level` invariant.
                self.levels.push(Level {
                    offset: position,
                    nodes: Vec::new(),
                });
            }
            let Some(level) = self.levels.get_mut(k) else {
                return;
            };
            level.nodes.push(node);
            if position & 1 == 0 {
                return;
            }
            // An odd position completes its parent; its left sibling is stored (the `Level` invariant).
            let [.., left, right] = level.nodes.as_slice() else {
                return;
            };
            node = history_node(left, right);
            position >>= 1;
        }
    }

    /// `MTH` of all entries.
    pub fn root(&self) -> Hash {
        // The peaks of `len` are always stored, so this never fails.
        self.subtree(0, self.len()).unwrap_or(EMPTY)
    }

    /// `MTH` of the first `size` entries (`None` if `size > len`, or if it cannot be derived from a frontier).
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        self.try_root_at(size).ok()
    }

    /// `MTH` of the first `size` entries, or why it cannot be given.
    pub fn try_root_at(&self, size: u64) -> Result<Hash, HistoryTreeError> {
        self.check_size(size)?;
        self.subtree(0, size)
    }

    /// Inclusion proof of entry `index` in the history of the first `size` entries (`None` when
    /// [`try_inclusion_proof`](Self::try_inclusion_proof) fails).
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Option<InclusionProof> {
        self.try_inclusion_proof(index, size).ok()
    }

    /// Inclusion proof of entry `index` in the history of the first `size` entries: RFC 9162 `PATH(index,
    /// D[0:size])`, bottom-up, in `O(log size)`.
    pub fn try_inclusion_proof(
        &self,
        index: u64,
        size: u64,
    ) -> Result<InclusionProof, HistoryTreeError> {
        self.check_size(size)?;
        if index >= size {
            return Err(HistoryTreeError::IndexOutOfRange { index, size });
        }
        // `PATH(m, D[start:start+n])` unrolled top-down; each level's sibling is appended after the deeper ones in
        // the RFC recursion, so the list is reversed at the end.
        let (mut m, mut start, mut n) = (index, 0u64, size);
        let mut hashes = Vec::new();
        while n > 1 {
            let k = split_point(n);
            if m < k {
                hashes.push(self.subtree(start + k, n - k)?);
                n = k;
            } else {
                hashes.push(self.subtree(start, k)?);
                m -= k;
                start += k;
                n -= k;
            }
        }
        hashes.reverse();
        Ok(InclusionProof {
            index,
            tree_size: size,
            hashes,
        })
    }

    /// Consistency proof from the first `old` entries to the first `new` entries (`None` when
    /// [`try_consistency_proof`](Self::try_consistency_proof) fails).
    pub fn consistency_proof(&self, old: u64, new: u64) -> Option<ConsistencyProof> {
        self.try_consistency_proof(old, new).ok()
    }

    /// Consistency proof from the first `old` entries to the first `new` entries: RFC 9162 `SUBPROOF(old,
    /// D[0:new], true)` (empty when `old` is 0 or `new`), in `O(log new)`.
    pub fn try_consistency_proof(
        &self,
        old: u64,
        new: u64,
    ) -> Result<ConsistencyProof, HistoryTreeError> {
        self.check_size(new)?;
        if old > new {
            return Err(HistoryTreeError::OldAfterNew { old, new });
        }
        let mut hashes = Vec::new();
        if old > 0 && old < new {
            // `SUBPROOF(m, D[start:start+n], b)` unrolled top-down, reversed at the end as in `try_inclusion_proof`.
            // Invariant: `1 <= m <= n`, so `n >= 2` whenever `m < n` and the split exists.
            let (mut m, mut start, mut n, mut b) = (old, 0u64, new, true);
            loop {
                if m == n {
                    if !b {
                        hashes.push(self.subtree(start, n)?);
                    }
                    break;
                }
                let k = split_point(n);
                if m <= k {
                    hashes.push(self.subtree(start + k, n - k)?);
                    n = k;
                } else {
                    hashes.push(self.subtree(start, k)?);
                    m -= k;
                    start += k;
                    n -= k;
                    b = false;
                }
            }
            hashes.reverse();
        }
        Ok(ConsistencyProof {
            old_size: old,
            new_size: new,
            hashes,
        })
    }

    fn check_size(&self, size: u64) -> Result<(), HistoryTreeError> {
        let len = self.len();
        if size > len {
            return Err(HistoryTreeError::SizeOutOfRange { size, len });
        }
        Ok(())
    }

    /// The stored perfect subtree of height `k` at position `j`.
    fn node(&self, k: u32, j: u64) -> Option<Hash> {
        let level = self.levels.get(usize::try_from(k).ok()?)?;
        let i = usize::try_from(j.checked_sub(level.offset)?).ok()?;
        level.nodes.get(i).copied()
    }

    /// `MTH(D[start:start+n])` for a subtree of the RFC 9162 recursion, whose `start` is a multiple of the
    /// smallest power of two `>= n`. It splits into the perfect subtrees of the binary decomposition of `n`,
    /// largest first, each aligned to its own size and so stored; `MTH` folds them from the right (the RFC split
    /// takes the largest power of two below `n` as the left part, which is the first piece). `O(log n)`.
    fn subtree(&self, start: u64, n: u64) -> Result<Hash, HistoryTreeError> {
        let mut acc: Option<Hash> = None;
        // Pieces from the smallest (rightmost) up: piece `k` starts at `start + (n with bits below k+1 cleared)`.
        for k in 0..64u32 {
            if n >> k & 1 == 0 {
                continue;
            }
            let piece_start = start + ((n >> k >> 1) << k << 1);
            let piece = self
                .node(k, piece_start >> k)
                .ok_or(HistoryTreeError::BeforeFrontier {
                    frontier: self.base,
                })?;
            acc = Some(match acc {
                None => piece,
                Some(right) => history_node(&piece, &right),
            });
        }
        Ok(acc.unwrap_or(EMPTY))
    }
}

fn split_point(n: u64) -> u64 {
    // Largest power of two strictly below n (n >= 2).
    1 << (63 - (n - 1).leading_zeros())
}

/// `MTH(D)` of RFC 9162 over leaf hashes, recomputed from all of them (`O(n)`; [`HistoryTree`] has the stored
/// subtrees).
pub fn mth(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => EMPTY,
        [one] => *one,
        _ => {
            let (l, r) = leaves.split_at(split_point_usize(leaves.len()));
            history_node(&mth(l), &mth(r))
        }
    }
}

fn split_point_usize(n: usize) -> usize {
    // Largest power of two strictly below n (n >= 2).
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// RFC 9162 `PATH(m, D)`, bottom-up, straight from the definition (`O(n)`): the oracle for
/// [`HistoryTree::try_inclusion_proof`].
#[cfg(test)]
fn path(m: usize, d: &[Hash], out: &mut Vec<Hash>) {
    if d.len() <= 1 {
        return;
    }
    let k = split_point_usize(d.len());
    let (l, r) = d.split_at(k);
    if m < k {
        path(m, l, out);
        out.push(mth(r));
    } else {
        path(m - k, r, out);
        out.push(mth(l));
    }
}

/// RFC 9162 `SUBPROOF(m, D, b)`, straight from the definition (`O(n)`): the oracle for
/// [`HistoryTree::try_consistency_proof`].
#[cfg(test)]
fn subproof(m: usize, d: &[Hash], b: bool, out: &mut Vec<Hash>) {
    let n = d.len();
    if m == n {
        if !b {
            out.push(mth(d));
        }
        return;
    }
    let k = split_point_usize(n);
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

    fn naive_inclusion(leaves: &[Hash], index: u64, size: u64) -> Vec<Hash> {
        let mut out = Vec::new();
        path(index as usize, &leaves[..size as usize], &mut out);
        out
    }

    fn naive_consistency(leaves: &[Hash], old: u64, new: u64) -> Vec<Hash> {
        let mut out = Vec::new();
        if old > 0 && old < new {
            subproof(old as usize, &leaves[..new as usize], true, &mut out);
        }
        out
    }

    /// The stored-subtree generator against RFC 9162 `MTH`, `PATH` and `SUBPROOF` computed from all the leaves,
    /// for every size, index and pair of sizes up to 300 entries.
    #[test]
    fn proofs_and_past_roots_equal_the_rfc_definitions_up_to_300() {
        let t = tree(300);
        let leaves = t.leaves();
        for n in 0..=300u64 {
            assert_eq!(
                t.root_at(n),
                Some(mth(&leaves[..n as usize])),
                "root_at({n})"
            );
            for i in 0..n {
                let p = t.try_inclusion_proof(i, n).unwrap();
                assert_eq!((p.index, p.tree_size), (i, n));
                assert_eq!(
                    p.hashes,
                    naive_inclusion(leaves, i, n),
                    "inclusion {i} in {n}"
                );
            }
            for m in 0..=n {
                let p = t.try_consistency_proof(m, n).unwrap();
                assert_eq!((p.old_size, p.new_size), (m, n));
                assert_eq!(
                    p.hashes,
                    naive_consistency(leaves, m, n),
                    "consistency {m} -> {n}"
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// The same comparison at random larger sizes.
        #[test]
        fn proofs_equal_the_rfc_definitions_at_random_sizes(
            len in 300u64..6000,
            a in proptest::prelude::any::<u64>(),
            b in proptest::prelude::any::<u64>(),
        ) {
            let t = tree(len);
            let leaves = t.leaves();
            let n = 1 + b % len;
            let i = a % n;
            let m = a % (n + 1);
            proptest::prop_assert_eq!(t.root_at(n), Some(mth(&leaves[..n as usize])));
            proptest::prop_assert_eq!(t.inclusion_proof(i, n).unwrap().hashes, naive_inclusion(leaves, i, n));
            proptest::prop_assert_eq!(
                t.consistency_proof(m, n).unwrap().hashes,
                naive_consistency(leaves, m, n)
            );
        }
    }

    #[test]
    fn requests_outside_the_history_are_typed_errors() {
        let t = tree(10);
        assert_eq!(
            t.try_root_at(11),
            Err(HistoryTreeError::SizeOutOfRange { size: 11, len: 10 })
        );
        assert_eq!(
            t.try_inclusion_proof(0, 11),
            Err(HistoryTreeError::SizeOutOfRange { size: 11, len: 10 })
        );
        assert_eq!(
            t.try_inclusion_proof(7, 7),
            Err(HistoryTreeError::IndexOutOfRange { index: 7, size: 7 })
        );
        assert_eq!(
            t.try_inclusion_proof(0, 0),
            Err(HistoryTreeError::IndexOutOfRange { index: 0, size: 0 })
        );
        assert_eq!(
            t.try_consistency_proof(5, 4),
            Err(HistoryTreeError::OldAfterNew { old: 5, new: 4 })
        );
        assert_eq!(
            t.try_consistency_proof(3, 11),
            Err(HistoryTreeError::SizeOutOfRange { size: 11, len: 10 })
        );
        assert_eq!(t.root_at(11), None);
        assert_eq!(t.inclusion_proof(7, 7), None);
        assert_eq!(t.consistency_proof(5, 4), None);
        assert_eq!(HistoryTree::new().root(), EMPTY);
        assert_eq!(HistoryTree::new().root_at(0), Some(EMPTY));
    }

    #[test]
    fn frontier_shapes_are_checked() {
        let h = crate::hash::value_hash(b"peak");
        let shape = |size, index| Err(HistoryTreeError::FrontierShape { size, index });
        let f = |size, heights: &[u32]| {
            HistoryTree::from_frontier(size, heights.iter().map(|&k| (k, h)).collect())
                .map(|t| t.len())
        };
        assert_eq!(f(0, &[]), Ok(0));
        assert_eq!(f(13, &[3, 2, 0]), Ok(13));
        assert_eq!(f(13, &[3, 2]), shape(13, 2));
        assert_eq!(f(13, &[3, 2, 0, 0]), shape(13, 3));
        assert_eq!(f(13, &[2, 3, 0]), shape(13, 0));
        assert_eq!(f(13, &[3, 0, 2]), shape(13, 1));
        assert_eq!(f(13, &[3, 1, 0]), shape(13, 1));
        assert_eq!(f(0, &[0]), shape(0, 0));
        assert_eq!(f(1, &[64]), shape(1, 0));
        assert_eq!(f(MAX_FRONTIER_SIZE, &[63]), Ok(MAX_FRONTIER_SIZE));
        assert_eq!(
            f(MAX_FRONTIER_SIZE + 1, &[63, 0]),
            Err(HistoryTreeError::FrontierTooLong {
                size: MAX_FRONTIER_SIZE + 1
            })
        );
    }

    /// A tree started from the frontier of every prefix of a 100-entry history, then given the rest: its roots,
    /// frontiers and proofs are the full tree's wherever it gives one, it gives every one that does not reach
    /// inside a frontier peak, and it refuses the others with `BeforeFrontier`.
    #[test]
    fn a_tree_started_from_a_frontier_answers_what_the_frontier_determines() {
        const N: u64 = 100;
        let full = tree(N);
        let leaves = full.leaves();
        for s in 0..=N {
            let mut prefix = HistoryTree::new();
            for l in &leaves[..s as usize] {
                prefix.push(*l);
            }
            let (size, peaks) = prefix.frontier();
            assert_eq!(size, s);
            assert_eq!(peaks.len(), s.count_ones() as usize);
            let mut t = HistoryTree::from_frontier(size, peaks.clone()).unwrap();
            assert_eq!((t.len(), t.base(), t.root()), (s, s, prefix.root()));
            assert_eq!(t.frontier(), (s, peaks));
            for n in s + 1..=N {
                t.push(leaves[n as usize - 1]);
                assert_eq!(t.root(), full.root_at(n).unwrap(), "s = {s}, n = {n}");
            }
            assert_eq!(t.frontier(), full.frontier());
            assert_eq!(t.first_leaf() as usize + t.leaves().len(), N as usize);
            assert_eq!(t.leaves(), &leaves[t.first_leaf() as usize..]);
            let refused = Err(HistoryTreeError::BeforeFrontier { frontier: s });
            for n in 0..=N {
                // Derivable: sizes from the frontier on, and the sizes whose peaks are the frontier's first ones.
                let prefix_of_frontier =
                    n == 0 || (s >> n.trailing_zeros() << n.trailing_zeros()) == n;
                match t.try_root_at(n) {
                    Ok(r) => assert_eq!(r, mth(&leaves[..n as usize])),
                    e => assert_eq!(e, refused, "root_at({n}) from {s}"),
                }
                assert_eq!(
                    t.root_at(n).is_some(),
                    n >= s || prefix_of_frontier,
                    "s = {s}, n = {n}"
                );
                for i in 0..n {
                    match t.try_inclusion_proof(i, n) {
                        Ok(p) => assert_eq!(p.hashes, naive_inclusion(leaves, i, n)),
                        e => assert_eq!(e.map(|_| ()), refused.clone().map(|_: Hash| ())),
                    }
                    // Derivable in a history reaching past the frontier: the entries from the frontier on, and
                    // its last peak when that is one entry (below the frontier's size it depends on the shape).
                    if n >= s {
                        let derivable = i >= s || (i + 1 == s && s & 1 == 1);
                        assert_eq!(
                            t.inclusion_proof(i, n).is_some(),
                            derivable,
                            "s = {s}, {i} in {n}"
                        );
                    }
                }
                for m in 0..=n {
                    match t.try_consistency_proof(m, n) {
                        Ok(p) => assert_eq!(p.hashes, naive_consistency(leaves, m, n)),
                        e => assert_eq!(e.map(|_| ()), refused.clone().map(|_: Hash| ())),
                    }
                    if m >= s || m == 0 || m == n {
                        assert!(t.consistency_proof(m, n).is_some(), "s = {s}, {m} -> {n}");
                    }
                }
            }
        }
    }

    /// A frontier far larger than anything held in memory: appending to it and proving what follows it works, and
    /// the proofs verify against the tree's own roots.
    #[test]
    fn a_huge_frontier_can_be_appended_to_and_proven_from() {
        let s = (1u64 << 40) + (1 << 17) + 3;
        let peaks = (0..64u32)
            .rev()
            .filter(|k| s >> k & 1 == 1)
            .map(|k| (k, crate::hash::value_hash(&k.to_le_bytes())))
            .collect();
        let mut t = HistoryTree::from_frontier(s, peaks).unwrap();
        let old_root = t.root();
        let mut roots = Vec::new();
        for v in 0..70u64 {
            t.push(history_leaf(1, v, &EMPTY));
            roots.push(t.root());
        }
        assert_eq!(t.len(), s + 70);
        assert_eq!(t.root_at(s), Some(old_root));
        for (j, root) in roots.iter().enumerate() {
            let n = s + j as u64 + 1;
            assert_eq!(t.root_at(n), Some(*root));
            t.consistency_proof(s, n)
                .unwrap()
                .verify(s, &old_root, n, root)
                .unwrap();
            for i in s..n {
                let leaf = t.leaf(i).unwrap();
                t.inclusion_proof(i, n)
                    .unwrap()
                    .verify(root, n, &leaf)
                    .unwrap();
            }
            // The last frontier peak is entry s - 1 itself (s is odd).
            let last = t.leaf(s - 1).unwrap();
            t.inclusion_proof(s - 1, n)
                .unwrap()
                .verify(root, n, &last)
                .unwrap();
        }
        assert_eq!(
            t.try_inclusion_proof(s - 2, s),
            Err(HistoryTreeError::BeforeFrontier { frontier: s })
        );
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

    #[test]
    fn frontier_at_every_prefix_restarts_the_same_history() {
        let leaves: Vec<Hash> = (0..70u8).map(|i| Hash([i; 32])).collect();
        let mut full = HistoryTree::new();
        for l in &leaves {
            full.push(*l);
        }
        for m in 0..=leaves.len() as u64 {
            let (size, peaks) = full.frontier_at(m).unwrap();
            assert_eq!(size, m);
            let mut t = HistoryTree::from_frontier(size, peaks).unwrap();
            assert_eq!(t.root(), full.root_at(m).unwrap(), "prefix {m}");
            for l in &leaves[m as usize..] {
                t.push(*l);
            }
            assert_eq!(t.root(), full.root(), "prefix {m} continued");
        }
        assert!(full.frontier_at(71).is_err());
    }
}
