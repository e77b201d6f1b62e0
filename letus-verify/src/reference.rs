//! The reference DMM-Trie: the simplest obviously-correct implementation of SPEC.md §3 and §5, used as the
//! oracle for the streaming verifier here and for the persistent engine in `letus-core`.
//!
//! It keeps the pairs sorted by path and computes every hash from the definition, recursively, with no
//! caching: building a proof costs `O(N)` hashing. Use it for tests, vectors and measurements, not in a store.

use std::collections::BTreeMap;
use std::vec::Vec;

use crate::fold::{fold, fold_range, Frontier};
use crate::hash::{leaf_hash, value_hash};
use crate::proof::{Proof, Record};
use crate::{Hash, KeyPath, EMPTY};

/// An in-memory trie state: a map from key to value, hashed by path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceTrie {
    /// path -> (key, value)
    entries: BTreeMap<KeyPath, (Vec<u8>, Vec<u8>)>,
}

/// A leaf as the trie sees it.
#[derive(Clone, Copy)]
struct Leaf {
    path: KeyPath,
    value_hash: Hash,
}

impl ReferenceTrie {
    /// An empty trie.
    pub fn new() -> Self {
        Self::default()
    }

    /// A trie holding `pairs` (a later duplicate key overwrites an earlier one).
    pub fn from_pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut t = Self::new();
        for (k, v) in pairs {
            t.insert(k.as_ref(), v.as_ref());
        }
        t
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) {
        self.entries
            .insert(KeyPath::of(key), (key.into(), value.into()));
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &[u8]) {
        self.entries.remove(&KeyPath::of(key));
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries
            .get(&KeyPath::of(key))
            .map(|(_, v)| v.as_slice())
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the trie is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(key, value)` pairs in path order: the order of a state export.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries
            .values()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    fn leaves(&self) -> Vec<Leaf> {
        self.entries
            .iter()
            .map(|(p, (_, v))| Leaf {
                path: *p,
                value_hash: value_hash(v),
            })
            .collect()
    }

    /// The root commitment (SPEC.md §3.3).
    pub fn root(&self) -> Hash {
        subtree_hash(&self.leaves(), 0)
    }

    /// The depth of `key`'s leaf, or `None` if absent.
    pub fn depth_of(&self, key: &[u8]) -> Option<usize> {
        let p = KeyPath::of(key);
        let leaves = self.leaves();
        let i = leaves.iter().position(|l| l.path == p)?;
        let neighbour =
            |j: Option<usize>| j.and_then(|j| leaves.get(j)).map(|l| l.path.lcp(&p) + 1);
        if leaves.len() == 1 {
            return Some(0);
        }
        Some(
            neighbour(i.checked_sub(1))
                .unwrap_or(0)
                .max(neighbour(i.checked_add(1)).unwrap_or(0)),
        )
    }

    /// The proof for `keys` (one key: an inclusion or exclusion proof; several: a multi-proof).
    pub fn prove(&self, keys: &[&[u8]]) -> Proof {
        let mut q: Vec<KeyPath> = keys.iter().map(|k| KeyPath::of(k)).collect();
        q.sort();
        q.dedup();
        let mut records = Vec::new();
        if !q.is_empty() {
            prove_node(&self.leaves(), 0, &q, &mut records);
        }
        Proof { records }
    }
}

/// Leaves (sorted by path) whose nibble at `depth` is `c`.
fn child_slice(leaves: &[Leaf], depth: usize, c: u8) -> &[Leaf] {
    let start = leaves
        .iter()
        .position(|l| l.path.nibble(depth) >= c)
        .unwrap_or(leaves.len());
    let len = leaves
        .get(start..)
        .unwrap_or(&[])
        .iter()
        .take_while(|l| l.path.nibble(depth) == c)
        .count();
    leaves.get(start..start + len).unwrap_or(&[])
}

/// The hash of the node at `depth` covering `leaves` (all sharing their first `depth` nibbles).
fn subtree_hash(leaves: &[Leaf], depth: usize) -> Hash {
    match leaves {
        [] => EMPTY,
        [one] => leaf_hash(&one.path, &one.value_hash),
        _ => fold(&children_hashes(leaves, depth)),
    }
}

fn children_hashes(leaves: &[Leaf], depth: usize) -> [Hash; 16] {
    let mut children = [EMPTY; 16];
    for (c, slot) in (0u8..16).zip(children.iter_mut()) {
        *slot = subtree_hash(child_slice(leaves, depth, c), depth + 1);
    }
    children
}

fn prove_node(leaves: &[Leaf], depth: usize, q: &[KeyPath], out: &mut Vec<Record>) {
    match leaves {
        [] => out.push(Record::Empty),
        [one] if q.contains(&one.path) => out.push(Record::Leaf),
        [one] => out.push(Record::OtherLeaf {
            path: one.path,
            value_hash: one.value_hash,
        }),
        _ => {
            let children = children_hashes(leaves, depth);
            let expanded = q.iter().fold(0u16, |m, p| m | 1 << p.nibble(depth));
            let mut mask = 0u8;
            let mut hashes = Vec::new();
            for (i, &(lo, hi)) in Frontier::of(expanded).ranges().iter().enumerate() {
                let h = fold_range(&children, lo.into(), hi.into());
                if !h.is_empty() {
                    mask |= 1 << i;
                    hashes.push(h);
                }
            }
            out.push(Record::Branch { mask, hashes });
            for c in 0u8..16 {
                if expanded >> c & 1 == 1 {
                    let sub: Vec<KeyPath> =
                        q.iter().filter(|p| p.nibble(depth) == c).copied().collect();
                    prove_node(child_slice(leaves, depth, c), depth + 1, &sub, out);
                }
            }
        }
    }
}
