//! Subtree sharding: a trie's state split by the first byte of the key path (its first two nibbles) into 256
//! subtrees that several stores hold between them, with one root.
//!
//! A store holding some of the subtrees reports, for a trie at a version, the node at depth 2 of each of its
//! non-empty subtrees ([`Tops`], from its root page alone). From the tops of every store anyone computes the
//! trie's root, the very root one store holding every key has ([`Tops::root`]), and turns a store's proof of keys
//! in one subtree into an ordinary SPEC.md §5 proof against that root ([`Tops::prove`], [`below_top`]).
//!
//! Why depth 2 composes: a node's hash depends only on the pairs below it (SPEC.md §3.3), and a leaf's hash only
//! on its path and value, not on its depth. So a subtree of two keys or more is the same branch, with the same
//! pages under it, in the store that holds it and in the whole trie; a subtree of one key is that key's leaf,
//! which the whole trie hoists to where its path becomes unique (§3.2). The composition does that hoisting, as
//! the manifest root of §12.2 does.

use core::fmt;

use letus_verify::fold::fold;
use letus_verify::proof::Record as ProofRecord;
use letus_verify::{Hash, KeyPath, Proof, EMPTY};

use crate::trie::page::{Child, Page, Root};
use crate::trie::{self, Cell, Leaf};

/// The depth, in nibbles, of the subtrees: two nibbles, the first byte of the path.
pub const SUBTREE_DEPTH: usize = 2;

/// The node at depth 2 of a non-empty subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Top {
    /// The subtree holds one key: its leaf, which the trie hoists.
    Leaf {
        /// The key's path.
        path: KeyPath,
        /// The hash of its value.
        value_hash: Hash,
    },
    /// The subtree holds two keys or more: the hash of its branch.
    Branch(Hash),
}

impl Top {
    /// The node's hash.
    pub fn hash(&self) -> Hash {
        match self {
            Top::Leaf { path, value_hash } => letus_verify::hash::leaf_hash(path, value_hash),
            Top::Branch(h) => *h,
        }
    }
}

/// Why tops or a store's proof do not fit together.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardError {
    /// Two stores report the same subtree, or one reports it twice.
    Overlap {
        /// The subtree (first byte of its paths).
        prefix: u8,
    },
    /// A leaf reported for a subtree its path is not in.
    Misplaced {
        /// The subtree it was reported for.
        prefix: u8,
    },
    /// A branch reported with the empty hash.
    EmptyBranch {
        /// The subtree.
        prefix: u8,
    },
    /// A store's proof of keys in one subtree does not start with the two branches above it.
    ProofShape(&'static str),
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardError::Overlap { prefix } => write!(f, "subtree {prefix:02x} is reported twice"),
            ShardError::Misplaced { prefix } => {
                write!(f, "subtree {prefix:02x}: a leaf whose path is not in it")
            }
            ShardError::EmptyBranch { prefix } => {
                write!(f, "subtree {prefix:02x}: a branch with the empty hash")
            }
            ShardError::ProofShape(what) => write!(f, "a shard's proof: {what}"),
        }
    }
}

impl core::error::Error for ShardError {}

/// The non-empty subtrees of a trie at one version (all of them, or those one store holds), by the first byte of
/// their paths. Invariant: sorted by prefix, each prefix once, a leaf's path in its subtree, no empty branch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tops {
    entries: Vec<(u8, Top)>,
}

impl Tops {
    /// Tops from `(prefix, top)` pairs in any order, checked.
    pub fn new(mut entries: Vec<(u8, Top)>) -> Result<Tops, ShardError> {
        entries.sort_by_key(|(p, _)| *p);
        for w in entries.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(ShardError::Overlap { prefix: w[0].0 });
            }
        }
        for (p, t) in &entries {
            match t {
                Top::Leaf { path, .. } if path.0[0] != *p => {
                    return Err(ShardError::Misplaced { prefix: *p })
                }
                Top::Branch(h) if h.is_empty() => {
                    return Err(ShardError::EmptyBranch { prefix: *p })
                }
                _ => {}
            }
        }
        Ok(Tops { entries })
    }

    /// The tops of a root page: its root, its children and its grandchildren, without loading another page.
    pub(crate) fn of_root_page(page: &Page) -> Tops {
        let leaf = |l: &Leaf| {
            (
                l.path.0[0],
                Top::Leaf {
                    path: l.path,
                    value_hash: l.value_hash,
                },
            )
        };
        let mut entries = Vec::new();
        match page.root() {
            Root::Empty => {}
            Root::Leaf(l) => entries.push(leaf(l)),
            Root::Branch => {
                for c in 0..16u8 {
                    match page.child(c) {
                        Child::Empty => {}
                        Child::Leaf(l) => entries.push(leaf(l)),
                        Child::Branch(_) => {
                            for (slot, cell) in page.grandchildren(c) {
                                let (c, g) = trie::slot_nibbles(*slot);
                                entries.push(match cell {
                                    Cell::Leaf(l) => leaf(l),
                                    Cell::Page { hash, .. } => (c << 4 | g, Top::Branch(*hash)),
                                });
                            }
                        }
                    }
                }
            }
        }
        Tops { entries }
    }

    /// The non-empty subtrees, by prefix.
    pub fn entries(&self) -> &[(u8, Top)] {
        &self.entries
    }

    /// The top of subtree `prefix`, `None` when it is empty.
    pub fn get(&self, prefix: u8) -> Option<&Top> {
        self.entries
            .binary_search_by_key(&prefix, |(p, _)| *p)
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// The tops of several stores together; a subtree reported twice is [`ShardError::Overlap`].
    pub fn merge(parts: impl IntoIterator<Item = Tops>) -> Result<Tops, ShardError> {
        Tops::new(parts.into_iter().flat_map(|t| t.entries).collect())
    }

    /// Only the subtrees whose prefix `keep` accepts.
    pub fn filter(&self, keep: impl Fn(u8) -> bool) -> Tops {
        Tops {
            entries: self
                .entries
                .iter()
                .filter(|(p, _)| keep(*p))
                .copied()
                .collect(),
        }
    }

    /// The trie's root commitment (SPEC.md §3.3): `EMPTY` without subtrees.
    pub fn root(&self) -> Hash {
        node_hash(&self.entries, 0)
    }

    /// The proof (SPEC.md §5) of `paths` (sorted, unique) against [`Tops::root`]: the records of the top two
    /// levels, and for each subtree with a branch top that a path falls in, the records `below(prefix, paths in
    /// it)` returns for the nodes from depth 2 down (a store's own proof of those paths cut by [`below_top`]).
    pub fn prove<E>(
        &self,
        paths: &[KeyPath],
        mut below: impl FnMut(u8, &[KeyPath]) -> Result<Vec<ProofRecord>, E>,
    ) -> Result<Proof, E> {
        let mut records = Vec::new();
        if !paths.is_empty() {
            prove_at(&self.entries, 0, paths, &mut below, &mut records)?;
        }
        Ok(Proof { records })
    }
}

/// Nibble `d` (0 or 1) of a subtree prefix.
fn nibble(prefix: u8, d: usize) -> u8 {
    if d == 0 {
        prefix >> 4
    } else {
        prefix & 0x0f
    }
}

/// The entries whose prefix has nibble `c` at depth `d`, out of `entries` (sorted, sharing the first `d`).
fn child_entries(entries: &[(u8, Top)], d: usize, c: u8) -> &[(u8, Top)] {
    let lo = entries.partition_point(|(p, _)| nibble(*p, d) < c);
    let hi = entries.partition_point(|(p, _)| nibble(*p, d) <= c);
    &entries[lo..hi]
}

fn child_hashes(entries: &[(u8, Top)], d: usize) -> [Hash; 16] {
    let mut h = [EMPTY; 16];
    for (c, slot) in h.iter_mut().enumerate() {
        *slot = node_hash(child_entries(entries, d, c as u8), d + 1);
    }
    h
}

/// The hash of the node at depth `d` (at most 2) over `entries`, which share their first `d` nibbles.
fn node_hash(entries: &[(u8, Top)], d: usize) -> Hash {
    match entries {
        [] => EMPTY,
        [(_, top @ Top::Leaf { .. })] => top.hash(),
        [(_, Top::Branch(h))] if d == SUBTREE_DEPTH => *h,
        _ => fold(&child_hashes(entries, d)),
    }
}

fn prove_at<E>(
    entries: &[(u8, Top)],
    d: usize,
    q: &[KeyPath],
    below: &mut impl FnMut(u8, &[KeyPath]) -> Result<Vec<ProofRecord>, E>,
    out: &mut Vec<ProofRecord>,
) -> Result<(), E> {
    match entries {
        [] => out.push(ProofRecord::Empty),
        [(_, Top::Leaf { path, value_hash })] => out.push(if q.contains(path) {
            ProofRecord::Leaf
        } else {
            ProofRecord::OtherLeaf {
                path: *path,
                value_hash: *value_hash,
            }
        }),
        [(prefix, Top::Branch(_))] if d == SUBTREE_DEPTH => out.extend(below(*prefix, q)?),
        _ => {
            out.push(trie::branch_record(&child_hashes(entries, d), d, q));
            for (c, _, group) in trie::nibble_groups(q, d, |p| p) {
                prove_at(child_entries(entries, d, c), d + 1, group, below, out)?;
            }
        }
    }
    Ok(())
}

/// The records of a store's proof of keys that all lie in one subtree whose top is a branch, from depth 2 down:
/// the store's trie has a branch at depths 0 and 1 above them (they cover two keys or more), each with one
/// expanded child, so its proof starts with those two records and the rest is the subtree's, the same in every
/// store that holds the subtree.
pub fn below_top(proof: Proof) -> Result<Vec<ProofRecord>, ShardError> {
    let mut records = proof.records.into_iter();
    for what in [
        "no branch at depth 0 above a subtree of two keys or more",
        "no branch at depth 1 above a subtree of two keys or more",
    ] {
        match records.next() {
            Some(ProofRecord::Branch { .. }) => {}
            Some(_) => return Err(ShardError::ProofShape(what)),
            None => return Err(ShardError::ProofShape("it ends above depth 2")),
        }
    }
    Ok(records.collect())
}

#[cfg(test)]
mod tests;
