//! In-memory DMM-Trie nodes (SPEC.md §3). A node is empty, a leaf, an inline branch, or a reference to the page
//! that holds the branch at this position. Every non-empty node knows the version of the newest data below it.
//!
//! Invariant (the page shape): inside a page rooted at depth `2j`, the root is a [`Node::Branch`] (or, for the root
//! page only, empty or a leaf), its children at depth `2j+1` are empty, leaves or branches, and their children at
//! depth `2j+2` are empty, leaves or [`Node::Page`] references: a branch at an even depth > 0 is always its own page.

use std::sync::Arc;

use letus_verify::fold::fold;
use letus_verify::hash::leaf_hash;
use letus_verify::{Hash, KeyPath, Version, EMPTY};

use crate::vdls::Location;

/// A key's leaf: where its value record is and what it hashes to.
///
/// Invariant: `hash() == leaf_hash(path, value_hash)`, computed once by [`Leaf::new`] (the only way to build a
/// leaf: the cached hash is private). Every branch a commit rebuilds and every proof needs the hashes of its leaf
/// children; recomputing them was a large share of both. Code that needs another path or value hash builds a new
/// leaf rather than assigning the fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// The key path.
    pub path: KeyPath,
    /// `value_hash(value)`.
    pub value_hash: Hash,
    /// The version that wrote this value.
    pub version: Version,
    /// The value record in VDLS.
    pub loc: Location,
    hash: Hash,
}

impl Leaf {
    /// A leaf, with its hash.
    pub fn new(path: KeyPath, value_hash: Hash, version: Version, loc: Location) -> Leaf {
        Leaf {
            path,
            value_hash,
            version,
            loc,
            hash: leaf_hash(&path, &value_hash),
        }
    }

    /// `leaf_hash(path, value_hash)`.
    pub fn hash(&self) -> Hash {
        self.hash
    }
}

/// A branch held inline in a page, with its cached hash and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// The 16 children.
    pub children: [Node; 16],
    /// `fold` of the children's hashes.
    pub hash: Hash,
    /// Newest version among the children.
    pub version: Version,
    /// [`Node::heap_bytes`] of this branch, summed once when it is built (a page's cache weight is needed for
    /// every page a commit writes; walking the page's nodes for it cost more than building them).
    heap: u32,
}

/// One node of the trie.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Node {
    /// No key below.
    #[default]
    Empty,
    /// Exactly one key below. (`Arc`: page versions share unchanged nodes, so copying a page is cheap.)
    Leaf(Arc<Leaf>),
    /// A branch stored in the current page.
    Branch(Arc<Branch>),
    /// A branch stored as its own page, found by exact version.
    Page {
        /// The hash of the page's root branch.
        hash: Hash,
        /// The page's version (the newest version of data in it).
        version: Version,
    },
}

impl Node {
    /// The node's hash.
    pub fn hash(&self) -> Hash {
        match self {
            Node::Empty => EMPTY,
            Node::Leaf(l) => l.hash(),
            Node::Branch(b) => b.hash,
            Node::Page { hash, .. } => *hash,
        }
    }

    /// Newest version of data below (0 for empty).
    pub fn version(&self) -> Version {
        match self {
            Node::Empty => 0,
            Node::Leaf(l) => l.version,
            Node::Branch(b) => b.version,
            Node::Page { version, .. } => *version,
        }
    }

    /// Whether the node is empty.
    pub fn is_empty(&self) -> bool {
        matches!(self, Node::Empty)
    }

    /// Builds a branch from its children, computing hash and version.
    pub fn branch(children: [Node; 16]) -> Node {
        let hashes: [Hash; 16] = std::array::from_fn(|i| children[i].hash());
        let version = children.iter().map(Node::version).max().unwrap_or(0);
        let heap =
            std::mem::size_of::<Branch>() + children.iter().map(Node::heap_bytes).sum::<usize>();
        Node::Branch(Arc::new(Branch {
            hash: fold(&hashes),
            version,
            heap: u32::try_from(heap).unwrap_or(u32::MAX),
            children,
        }))
    }

    /// Applies the canonical-shape rule (SPEC.md §3.2) to a branch: no children → empty; exactly one child that is
    /// a leaf → that leaf moves up; otherwise a branch.
    pub fn normalize(children: [Node; 16]) -> Node {
        let mut nonempty = children.iter().filter(|c| !c.is_empty());
        match (nonempty.next(), nonempty.next()) {
            (None, _) => Node::Empty,
            (Some(Node::Leaf(l)), None) => Node::Leaf(l.clone()),
            _ => Node::branch(children),
        }
    }

    /// Rough heap size in bytes, for cache weighting.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Node::Leaf(_) => std::mem::size_of::<Leaf>(),
            Node::Branch(b) => b.heap as usize,
            Node::Empty | Node::Page { .. } => 0,
        }
    }
}
