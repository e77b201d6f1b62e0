//! What a page slot holds (SPEC.md §3): a key's [`Leaf`], or a reference to a child page ([`Cell::Page`]).
//! Inline branches are not stored: a page derives them from its slots (see [`super::page`]).

use letus_verify::hash::leaf_hash;
use letus_verify::{Hash, KeyPath, Version};

use crate::vdls::Location;

/// A key's leaf: where its value record is and what it hashes to.
///
/// The leaf hash (`leaf_hash(path, value_hash)`) is not cached: a page holds its leaves compactly (88 bytes each)
/// because at tens of millions of keys the leaves are most of the engine's memory, and a commit or a proof only
/// needs the hashes of the few leaves next to the keys it touches.
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
}

impl Leaf {
    /// A leaf.
    pub fn new(path: KeyPath, value_hash: Hash, version: Version, loc: Location) -> Leaf {
        Leaf {
            path,
            value_hash,
            version,
            loc,
        }
    }

    /// `leaf_hash(path, value_hash)`.
    pub fn hash(&self) -> Hash {
        leaf_hash(&self.path, &self.value_hash)
    }
}

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// A key's leaf.
    Leaf(Leaf),
    /// A child page, found by exact version.
    Page {
        /// The hash of the child page's root branch.
        hash: Hash,
        /// The child page's version (the version that last wrote it).
        version: Version,
    },
}

impl Cell {
    /// The hash of the node this cell stands for.
    pub fn hash(&self) -> Hash {
        match self {
            Cell::Leaf(l) => l.hash(),
            Cell::Page { hash, .. } => *hash,
        }
    }
}
