//! Key paths and nibbles (SPEC.md §3.1).

use core::fmt;

/// The 32-byte path of a key, read as 64 nibbles, high nibble first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyPath(pub [u8; 32]);

/// Number of nibbles in a path, and so the maximum depth of a leaf.
pub const NIBBLES: usize = 64;

impl KeyPath {
    /// The path of `key`.
    pub fn of(key: &[u8]) -> KeyPath {
        crate::hash::key_path(key)
    }

    /// Nibble `i` (`i < 64`); out-of-range indices read as 0 rather than panic.
    pub fn nibble(&self, i: usize) -> u8 {
        match self.0.get(i / 2) {
            Some(b) if i.is_multiple_of(2) => b >> 4,
            Some(b) => b & 0x0f,
            None => 0,
        }
    }

    /// Number of leading nibbles shared with `other` (64 when equal).
    pub fn lcp(&self, other: &KeyPath) -> usize {
        for (i, (a, b)) in self.0.iter().zip(other.0.iter()).enumerate() {
            if a != b {
                return if a >> 4 != b >> 4 { 2 * i } else { 2 * i + 1 };
            }
        }
        NIBBLES
    }

    /// As a [`crate::Hash`] (the same 32 bytes).
    pub fn as_hash(&self) -> crate::Hash {
        crate::Hash(self.0)
    }
}

impl fmt::Debug for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyPath({})", crate::Hash(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_and_lcp() {
        let mut a = KeyPath([0; 32]);
        a.0[0] = 0xab;
        assert_eq!(a.nibble(0), 0xa);
        assert_eq!(a.nibble(1), 0xb);
        assert_eq!(a.nibble(2), 0);
        assert_eq!(a.nibble(64), 0);
        let mut b = a;
        assert_eq!(a.lcp(&b), 64);
        b.0[0] = 0xac;
        assert_eq!(a.lcp(&b), 1);
        b.0[0] = 0x1b;
        assert_eq!(a.lcp(&b), 0);
        b = a;
        b.0[31] = 0x01;
        assert_eq!(a.lcp(&b), 63);
    }
}
