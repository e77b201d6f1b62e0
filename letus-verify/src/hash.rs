//! Domain-separated hashing (SPEC.md §2): every hash is `BLAKE3(tag || data)` with a one-byte tag naming the
//! layout of `data`, so that no two kinds of object can ever hash the same input.

use core::fmt;
use std::string::String;

use crate::{TrieId, Version};

/// A 32-byte BLAKE3 output (or [`EMPTY`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash(pub [u8; 32]);

/// The hash of an empty subtree and of an empty history: 32 zero bytes (SPEC.md §1).
pub const EMPTY: Hash = Hash([0u8; 32]);

/// The domain tags of SPEC.md §2.
pub mod tag {
    /// `path(key) = H(KEY_PATH, key)`.
    pub const KEY_PATH: u8 = 0x00;
    /// `value_hash(value) = H(VALUE, value)`.
    pub const VALUE: u8 = 0x01;
    /// `leaf_hash(path, vh) = H(LEAF, path || vh)`.
    pub const LEAF: u8 = 0x02;
    /// `inner(l, r) = H(INNER, l || r)` unless both are empty.
    pub const INNER: u8 = 0x03;
    /// A history entry `H(HISTORY_LEAF, u32le(tid) || u64le(V) || root)`.
    pub const HISTORY_LEAF: u8 = 0x10;
    /// An inner node of the history tree.
    pub const HISTORY_NODE: u8 = 0x11;
}

impl Hash {
    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether this is [`EMPTY`].
    pub fn is_empty(&self) -> bool {
        *self == EMPTY
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        crate::hex::encode(&self.0)
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Option<Hash> {
        let v = crate::hex::decode(s)?;
        Some(Hash(<[u8; 32]>::try_from(v.as_slice()).ok()?))
    }

    /// Builds a hash from a slice of exactly 32 bytes.
    pub fn from_slice(b: &[u8]) -> Option<Hash> {
        Some(Hash(<[u8; 32]>::try_from(b).ok()?))
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({self})")
    }
}

impl From<[u8; 32]> for Hash {
    fn from(b: [u8; 32]) -> Self {
        Hash(b)
    }
}

impl serde::Serialize for Hash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Hash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Hash::from_hex(&s).ok_or_else(|| {
            <D::Error as serde::de::Error>::custom("malformed: a hash is 64 hex digits")
        })
    }
}

fn tagged(tag: u8, parts: &[&[u8]]) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(&[tag]);
    for p in parts {
        h.update(p);
    }
    Hash(*h.finalize().as_bytes())
}

/// `path(key)`: where a key lives in the trie.
pub fn key_path(key: &[u8]) -> crate::KeyPath {
    crate::KeyPath(tagged(tag::KEY_PATH, &[key]).0)
}

/// `value_hash(value)`.
pub fn value_hash(value: &[u8]) -> Hash {
    tagged(tag::VALUE, &[value])
}

/// `leaf_hash(path, value_hash)`.
pub fn leaf_hash(path: &crate::KeyPath, value_hash: &Hash) -> Hash {
    tagged_pair(tag::LEAF, &path.0, &value_hash.0)
}

/// `H(tag || a || b)` for two 32-byte strings: the same bytes as [`tagged`], hashed in one call from one buffer.
/// Leaf and inner hashes are most of the engine's hashing; the incremental hasher's bookkeeping was a fifth of
/// their cost.
fn tagged_pair(tag: u8, a: &[u8; 32], b: &[u8; 32]) -> Hash {
    let mut buf = [0u8; 65];
    buf[0] = tag;
    buf[1..33].copy_from_slice(a);
    buf[33..].copy_from_slice(b);
    Hash(*blake3::hash(&buf).as_bytes())
}

/// `inner(l, r)`: [`EMPTY`] when both sides are empty, so empty parts of a node weigh nothing.
pub fn inner(l: &Hash, r: &Hash) -> Hash {
    if l.is_empty() && r.is_empty() {
        EMPTY
    } else {
        tagged_pair(tag::INNER, &l.0, &r.0)
    }
}

/// The leaf hash of history entry `(tid, version, root)` (SPEC.md §8).
pub fn history_leaf(tid: TrieId, version: Version, root: &Hash) -> Hash {
    tagged(
        tag::HISTORY_LEAF,
        &[&tid.to_le_bytes(), &version.to_le_bytes(), &root.0],
    )
}

/// An inner node of the history tree.
pub fn history_node(l: &Hash, r: &Hash) -> Hash {
    tagged(tag::HISTORY_NODE, &[&l.0, &r.0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_separate_domains() {
        // The same 64 bytes hashed as a leaf and as an inner node must differ.
        let a = Hash([1; 32]);
        let b = Hash([2; 32]);
        assert_ne!(leaf_hash(&crate::KeyPath(a.0), &b), inner(&a, &b));
        assert_ne!(inner(&a, &b), history_node(&a, &b));
        assert_ne!(value_hash(b"k").0, key_path(b"k").0);
    }

    #[test]
    fn inner_of_empties_is_empty_and_order_matters() {
        assert_eq!(inner(&EMPTY, &EMPTY), EMPTY);
        let a = Hash([7; 32]);
        assert_ne!(inner(&a, &EMPTY), inner(&EMPTY, &a));
        assert_ne!(inner(&a, &EMPTY), EMPTY);
    }

    #[test]
    fn hex_round_trip() {
        let h = value_hash(b"x");
        assert_eq!(Hash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(Hash::from_hex(&h.to_hex().to_uppercase()), Some(h));
        assert_eq!(Hash::from_hex("00"), None);
    }
}
