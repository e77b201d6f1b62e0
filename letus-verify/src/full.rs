//! Full verification (SPEC.md §9.1): recompute a trie's root from all its `(key, value)` pairs, streamed in
//! path order, holding at most 64 open branches whatever the number of keys.

use std::vec::Vec;

use crate::error::FullVerifyError;
use crate::fold::{fold, fold_single};
use crate::hash::{leaf_hash, value_hash};
use crate::{Hash, KeyPath, EMPTY};

/// A branch still receiving children: its depth and its 16 child hashes so far.
struct Open {
    depth: usize,
    children: [Hash; 16],
}

/// Streaming root computation: feed pairs sorted by path with [`FullVerifier::update`], then
/// [`FullVerifier::finalize`] or [`FullVerifier::verify`].
///
/// Invariant between calls: the stack holds the open branches along `prev`'s path with strictly increasing
/// depths, and its top is at depth `prev_lcp` (once two pairs were seen).
pub struct FullVerifier {
    stack: Vec<Open>,
    prev: Option<(KeyPath, Hash)>,
    prev_lcp: Option<usize>,
    count: u64,
}

impl Default for FullVerifier {
    fn default() -> Self {
        Self::new()
    }
}

impl FullVerifier {
    /// A verifier that has seen no pair.
    pub fn new() -> Self {
        FullVerifier {
            stack: Vec::with_capacity(crate::path::NIBBLES + 1),
            prev: None,
            prev_lcp: None,
            count: 0,
        }
    }

    /// Number of pairs fed so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Feeds the next pair; pairs must come in strictly increasing path order.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), FullVerifyError> {
        let path = KeyPath::of(key);
        self.update_hashed(path, &value_hash(value))
    }

    /// Feeds the next pair given its path and value hash (what a store keeps in its leaves).
    pub fn update_hashed(
        &mut self,
        path: KeyPath,
        value_hash: &Hash,
    ) -> Result<(), FullVerifyError> {
        self.update_leaf(path, leaf_hash(&path, value_hash))
    }

    /// Feeds the next leaf given its path and leaf hash (what a store keeps in its pages).
    pub fn update_leaf(&mut self, path: KeyPath, leaf: Hash) -> Result<(), FullVerifyError> {
        if let Some((prev_path, prev_hash)) = self.prev {
            if path == prev_path {
                return Err(FullVerifyError::DuplicateKey(self.count));
            }
            if path < prev_path {
                return Err(FullVerifyError::OutOfOrder(self.count));
            }
            let l = prev_path.lcp(&path);
            let depth = self.prev_lcp.map_or(l, |p| p.max(l)) + 1;
            self.place(&prev_path, &prev_hash, depth);
            self.close_above(l, &prev_path);
            self.prev_lcp = Some(l);
        }
        self.prev = Some((path, leaf));
        self.count += 1;
        Ok(())
    }

    fn place(&mut self, path: &KeyPath, leaf: &Hash, depth: usize) {
        let parent = depth - 1;
        if self.stack.last().is_none_or(|top| top.depth < parent) {
            self.stack.push(Open {
                depth: parent,
                children: [EMPTY; 16],
            });
        }
        if let Some(top) = self.stack.last_mut() {
            top.children[usize::from(path.nibble(parent))] = *leaf;
        }
    }

    /// Folds every open branch deeper than `l` into its parent and leaves a branch at depth `l` on top.
    fn close_above(&mut self, l: usize, path: &KeyPath) {
        let mut carry: Option<(usize, Hash)> = None;
        while let Some(mut top) = self.stack.pop_if(|top| top.depth > l) {
            if let Some((cd, h)) = carry {
                top.children[usize::from(path.nibble(top.depth))] =
                    chain(cd, h, top.depth + 1, path);
            }
            carry = Some((top.depth, fold(&top.children)));
        }
        if self.stack.last().is_none_or(|top| top.depth < l) {
            self.stack.push(Open {
                depth: l,
                children: [EMPTY; 16],
            });
        }
        if let (Some((cd, h)), Some(top)) = (carry, self.stack.last_mut()) {
            top.children[usize::from(path.nibble(l))] = chain(cd, h, l + 1, path);
        }
    }

    /// The root of all pairs fed.
    pub fn finalize(self) -> Hash {
        self.finalize_at(0)
    }

    /// The hash of the node at depth `depth` that covers every pair fed (SPEC.md §12.3): the caller guarantees
    /// that all their paths share their first `depth` nibbles (`finalize_at(0)` is [`FullVerifier::finalize`]).
    /// One pair gives its leaf hash, none gives `EMPTY`.
    pub fn finalize_at(mut self, depth: usize) -> Hash {
        let Some((path, leaf)) = self.prev else {
            return EMPTY;
        };
        let Some(lcp) = self.prev_lcp else {
            return leaf;
        };
        // Every lcp is at least `depth`, so the shallowest open branch is at `depth` or below it.
        let depth = depth.min(lcp);
        self.place(&path, &leaf, lcp + 1);
        self.close_above(depth, &path);
        self.stack.pop().map_or(EMPTY, |top| fold(&top.children))
    }

    /// Finalizes and compares with a trusted root.
    pub fn verify(self, expected: &Hash) -> Result<u64, FullVerifyError> {
        let count = self.count;
        let computed = self.finalize();
        if computed != *expected {
            return Err(FullVerifyError::RootMismatch {
                expected: *expected,
                computed,
            });
        }
        Ok(count)
    }
}

/// Wraps the node at depth `from` in single-child branches up to depth `to` (SPEC.md §9.1 `chain`).
fn chain(from: usize, mut h: Hash, to: usize, path: &KeyPath) -> Hash {
    for k in (to..from).rev() {
        h = fold_single(path.nibble(k), &h);
    }
    h
}
