//! Page ids and the page key `K_P = (tid, page id, version, kind)` with their fixed-size encoding.
//!
//! Nibble convention (SPEC.md §2 of `letus-verify`): nibble `i` of a 32-byte path `p` is `p[i/2] >> 4` when `i` is
//! even and `p[i/2] & 0x0f` when `i` is odd (high nibble first).

use std::fmt;

use letus_verify::{TrieId, Version};

/// Deepest page depth, in nibbles: a page at depth 64 holds only the 32-byte path itself.
pub const MAX_PAGE_DEPTH: u8 = 64;

/// A page of the DMM-Trie: its depth (even, `0..=64`, in nibbles) and its path prefix.
///
/// Invariant (checked by [`PageId::new`] and [`PageKey::decode`], kept by [`PageId::child`]): `depth` is even and at
/// most 64, and every nibble of `prefix` at or after `depth` is zero, so that one page has exactly one `PageId`.
/// Because `depth` is even, the prefix ends on a byte boundary: bytes `depth/2..32` are zero.
///
/// The derived `Ord` compares `depth` first, then `prefix`: this is the page order inside index files.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageId {
    /// Depth of the page's top node, in nibbles.
    pub depth: u8,
    /// The first `depth` nibbles of every path below the page; the rest zero.
    pub prefix: [u8; 32],
}

impl PageId {
    /// The root page: depth 0, empty prefix.
    pub const ROOT: PageId = PageId {
        depth: 0,
        prefix: [0; 32],
    };

    /// The page at `depth` on the way to `path` (the path's first `depth` nibbles). `None` if `depth` is odd or
    /// above 64.
    pub fn new(depth: u8, path: &[u8; 32]) -> Option<PageId> {
        if depth & 1 != 0 || depth > MAX_PAGE_DEPTH {
            return None;
        }
        let mut prefix = [0u8; 32];
        let n = usize::from(depth / 2);
        prefix[..n].copy_from_slice(&path[..n]);
        Some(PageId { depth, prefix })
    }

    /// Whether the invariant holds (even depth ≤ 64, zero nibbles after the prefix). Values built by [`PageId::new`],
    /// [`PageId::child`] and [`PageKey::decode`] always satisfy it; a struct literal may not.
    pub fn is_valid(&self) -> bool {
        self.depth & 1 == 0
            && self.depth <= MAX_PAGE_DEPTH
            && self.prefix[usize::from(self.depth / 2)..]
                .iter()
                .all(|&b| b == 0)
    }

    /// Nibble `i` of the prefix (zero at and after `depth`). `i` must be below 64.
    pub fn nibble(&self, i: usize) -> u8 {
        let b = self.prefix[i / 2];
        if i & 1 == 0 {
            b >> 4
        } else {
            b & 0x0f
        }
    }

    /// The page two nibbles deeper, below nibbles `n1` then `n2`.
    ///
    /// # Panics
    /// If this page is at depth 64 (it has no child pages) or a nibble is above 15: both are caller bugs.
    pub fn child(&self, n1: u8, n2: u8) -> PageId {
        assert!(
            self.depth < MAX_PAGE_DEPTH,
            "a page at depth 64 has no children"
        );
        assert!(n1 < 16 && n2 < 16, "nibbles are below 16");
        let mut prefix = self.prefix;
        prefix[usize::from(self.depth / 2)] = (n1 << 4) | n2;
        PageId {
            depth: self.depth + 2,
            prefix,
        }
    }

    /// The page two nibbles up, or `None` for the root.
    #[cfg(test)]
    pub fn parent(&self) -> Option<PageId> {
        if self.depth < 2 {
            return None;
        }
        let mut prefix = self.prefix;
        prefix[usize::from(self.depth / 2 - 1)] = 0;
        Some(PageId {
            depth: self.depth - 2,
            prefix,
        })
    }
}

impl fmt::Debug for PageId {
    /// `PageId(depth 4: 3a7f)`: the prefix as its `depth` nibbles in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageId(depth {}: ", self.depth)?;
        for i in 0..usize::from(self.depth.min(MAX_PAGE_DEPTH)) {
            write!(f, "{:x}", self.nibble(i))?;
        }
        write!(f, ")")
    }
}

/// Whether a page record is a full checkpoint of the page or the changes since the last one.
///
/// The discriminants are the on-disk byte. `Base < Delta`: at one version, a floor lookup for a `Delta` key finds the
/// `Delta` record first and a lookup for a `Base` key never sees the `Delta` record of the same version.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum PageKind {
    /// A BasePage: the whole page.
    Base = 0,
    /// A DeltaPage: changes since the page's last BasePage.
    Delta = 1,
}

impl PageKind {
    /// Parses the on-disk byte.
    pub fn from_u8(b: u8) -> Option<PageKind> {
        match b {
            0 => Some(PageKind::Base),
            1 => Some(PageKind::Delta),
            _ => None,
        }
    }
}

/// The key of a page record, `K_P = (tid, page id, version, kind)`.
///
/// The derived `Ord` is `(tid, page.depth, page.prefix, version, kind)` (field order): all records of one page of
/// one trie are contiguous, ordered by version, so "the newest record of a page at or below version V" is a floor
/// lookup in that order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PageKey {
    /// The trie.
    pub tid: TrieId,
    /// The page.
    pub page: PageId,
    /// The version the record was written at.
    pub version: Version,
    /// Base or delta.
    pub kind: PageKind,
}

impl PageKey {
    /// Size of [`PageKey::encode`]: tid 4 + depth 1 + prefix 32 + version 8 + kind 1.
    pub const ENCODED_LEN: usize = 46;

    /// A key.
    pub fn new(tid: TrieId, page: PageId, version: Version, kind: PageKind) -> PageKey {
        PageKey {
            tid,
            page,
            version,
            kind,
        }
    }

    /// Whether `other` is a record of the same page of the same trie.
    pub fn same_page(&self, other: &PageKey) -> bool {
        self.tid == other.tid && self.page == other.page
    }

    /// The fixed-size little-endian encoding:
    /// `tid u32 @0 | depth u8 @4 | prefix [u8;32] @5 | version u64 @37 | kind u8 @45` (46 bytes).
    ///
    /// The encoding is not order-preserving as bytes (integers are little-endian); readers compare decoded keys.
    pub fn encode(&self) -> [u8; PageKey::ENCODED_LEN] {
        let mut b = [0u8; PageKey::ENCODED_LEN];
        b[0..4].copy_from_slice(&self.tid.to_le_bytes());
        b[4] = self.page.depth;
        b[5..37].copy_from_slice(&self.page.prefix);
        b[37..45].copy_from_slice(&self.version.to_le_bytes());
        b[45] = self.kind as u8;
        b
    }

    /// Parses [`PageKey::encode`]'s output. `None` unless `bytes` is exactly 46 bytes with an even depth ≤ 64, zero
    /// nibbles after the prefix and a kind of 0 or 1. Never panics.
    pub fn decode(bytes: &[u8]) -> Option<PageKey> {
        let b: &[u8; PageKey::ENCODED_LEN] = bytes.try_into().ok()?;
        let mut prefix = [0u8; 32];
        prefix.copy_from_slice(&b[5..37]);
        let page = PageId {
            depth: b[4],
            prefix,
        };
        if !page.is_valid() {
            return None;
        }
        Some(PageKey {
            tid: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            page,
            version: u64::from_le_bytes([b[37], b[38], b[39], b[40], b[41], b[42], b[43], b[44]]),
            kind: PageKind::from_u8(b[45])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsvps_page_id_child_parent_new() {
        let c = PageId::ROOT.child(0xa, 0x3).child(0xf, 0x0);
        assert_eq!(c.depth, 4);
        assert_eq!(c.prefix[0], 0xa3);
        assert_eq!(c.prefix[1], 0xf0);
        assert!(c.prefix[2..].iter().all(|&b| b == 0));
        assert!(c.is_valid());
        assert_eq!(c.parent().unwrap().parent().unwrap(), PageId::ROOT);
        assert_eq!(PageId::ROOT.parent(), None);
        let mut path = [0x11u8; 32];
        path[0] = 0xa3;
        path[1] = 0xf0;
        assert_eq!(PageId::new(4, &path), Some(c));
        assert_eq!(PageId::new(3, &path), None);
        assert_eq!(PageId::new(66, &path), None);
        assert_eq!(PageId::new(64, &path).unwrap().prefix, path);
        assert_eq!(format!("{c:?}"), "PageId(depth 4: a3f0)");
    }

    #[test]
    fn lsvps_page_key_order_is_tid_depth_prefix_version_kind() {
        let p1 = PageId::ROOT.child(1, 2);
        let p2 = PageId::ROOT.child(0, 0).child(0, 0);
        let k = |tid, page, version, kind| PageKey::new(tid, page, version, kind);
        let mut keys = vec![
            k(1, PageId::ROOT, 0, PageKind::Base),
            k(0, p2, 0, PageKind::Base),
            k(0, p1, 5, PageKind::Delta),
            k(0, p1, 5, PageKind::Base),
            k(0, p1, 4, PageKind::Delta),
            k(0, PageId::ROOT, 9, PageKind::Base),
        ];
        keys.sort();
        assert_eq!(
            keys,
            vec![
                k(0, PageId::ROOT, 9, PageKind::Base),
                k(0, p1, 4, PageKind::Delta),
                k(0, p1, 5, PageKind::Base),
                k(0, p1, 5, PageKind::Delta),
                k(0, p2, 0, PageKind::Base),
                k(1, PageId::ROOT, 0, PageKind::Base),
            ]
        );
    }

    #[test]
    fn lsvps_page_key_encode_decode() {
        let key = PageKey::new(
            0xdead_beef,
            PageId::ROOT.child(1, 2).child(3, 4),
            0x0102_0304_0506_0708,
            PageKind::Delta,
        );
        let b = key.encode();
        assert_eq!(PageKey::decode(&b), Some(key));
        assert_eq!(PageKey::decode(&b[..45]), None);
        // Bad kind, odd depth, too deep, garbage after the prefix.
        for (i, v) in [(45, 2u8), (4, 3), (4, 66), (10, 1)] {
            let mut bad = b;
            bad[i] = v;
            assert_eq!(PageKey::decode(&bad), None, "byte {i} = {v}");
        }
    }
}
