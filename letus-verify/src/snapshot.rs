//! State snapshots in chunks (SPEC.md §12): a **manifest** lists the subtrees that together hold one trie's state
//! at one version, each with its position, its number of pairs and its hash; it verifies against the trusted root
//! alone. Each **chunk** then carries the pairs of one listed subtree and verifies against its manifest entry on
//! arrival, so a joining node checks every chunk as it comes, can fetch chunks in any order and from any source, and
//! names the one that is bad.
//!
//! [`ManifestBuilder`] is the store's side: it turns the leaves of a trie, in path order, into manifest entries of
//! at most a given number of pairs each.

use std::vec::Vec;

use crate::error::{DecodeError, SnapshotError};
use crate::fold::fold;
use crate::full::FullVerifier;
use crate::hash::{leaf_hash, value_hash};
use crate::wire::{object, Reader};
use crate::{Hash, KeyPath, Limits, TrieId, Version, EMPTY};

/// Encoded size of one manifest entry: depth 1 + prefix 32 + count 8 + hash 32.
pub const ITEM_LEN: usize = 1 + 32 + 8 + 32;
/// Encoded size of a manifest before its entries: format, type, tid, version, root, entry count.
pub const MANIFEST_HEAD_LEN: usize = 2 + 4 + 8 + 32 + 4;
/// Encoded size of a chunk before its records: format, type, tid, version, index, depth, prefix, count.
pub const CHUNK_HEAD_LEN: usize = 2 + 4 + 8 + 4 + 1 + 32 + 8;
const RECORD_HEAD: usize = 4 + 4;

/// One entry of a manifest: the node at `depth` whose path prefix is `prefix`, covering `count` pairs, with
/// its hash. Invariant of a decoded or built item: `depth ≤ 64`, nibbles of `prefix` at and after `depth` are
/// zero, `count ≥ 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotItem {
    /// Depth in nibbles (0..=64).
    pub depth: u8,
    /// The first `depth` nibbles of every path in the subtree; the rest zero.
    pub prefix: [u8; 32],
    /// Number of pairs in the subtree.
    pub count: u64,
    /// The subtree's node hash (SPEC.md §3.3): a leaf hash when `count` is 1.
    pub hash: Hash,
}

impl SnapshotItem {
    /// Nibble `i` of the prefix.
    pub fn nibble(&self, i: usize) -> u8 {
        KeyPath(self.prefix).nibble(i)
    }

    /// Whether `path` lies in this subtree (its first `depth` nibbles are the prefix).
    pub fn covers(&self, path: &KeyPath) -> bool {
        KeyPath(self.prefix).lcp(path) >= usize::from(self.depth)
    }

    fn encode_to(&self, out: &mut Vec<u8>) {
        out.push(self.depth);
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.hash.0);
    }

    fn decode(r: &mut Reader<'_>) -> Result<SnapshotItem, DecodeError> {
        let (depth, prefix, count) = read_position(r)?;
        let hash = r.hash()?;
        // No subtree of one pair or more hashes to EMPTY; an entry that says so would verify against the root (a
        // branch folds an EMPTY child as an absent one) while no chunk could ever match it.
        if hash == crate::EMPTY {
            return Err(DecodeError::NonCanonical(
                "snapshot entry with the empty hash",
            ));
        }
        Ok(SnapshotItem {
            depth,
            prefix,
            count,
            hash,
        })
    }
}

/// The `depth || prefix || count` of an entry or a chunk, checked (SPEC.md §12.1): depth at most 64, zero
/// nibbles after it, at least one pair.
fn read_position(r: &mut Reader<'_>) -> Result<(u8, [u8; 32], u64), DecodeError> {
    let depth = r.u8()?;
    if depth > 64 {
        return Err(DecodeError::Malformed("snapshot depth above 64"));
    }
    let prefix: [u8; 32] = r.array()?;
    if !prefix_is_canonical(depth, &prefix) {
        return Err(DecodeError::NonCanonical(
            "snapshot prefix has non-zero nibbles after its depth",
        ));
    }
    let count = r.u64()?;
    if count == 0 {
        return Err(DecodeError::Malformed(
            "snapshot entry or chunk with no pairs",
        ));
    }
    Ok((depth, prefix, count))
}

/// Whether every nibble of `prefix` at or after `depth` is zero.
fn prefix_is_canonical(depth: u8, prefix: &[u8; 32]) -> bool {
    let p = KeyPath(*prefix);
    (usize::from(depth)..crate::path::NIBBLES).all(|i| p.nibble(i) == 0)
}

/// The first `depth` nibbles of `path`, the rest zero.
pub fn prefix_of(path: &KeyPath, depth: u8) -> [u8; 32] {
    let mut out = path.0;
    let d = usize::from(depth.min(64));
    for (i, b) in out.iter_mut().enumerate() {
        if 2 * i >= d {
            *b = 0;
        } else if 2 * i + 1 == d {
            *b &= 0xf0;
        }
    }
    out
}

/// A manifest: what the source claims the state of trie `tid` at `version` is made of (SPEC.md §12.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Trie id.
    pub tid: TrieId,
    /// Version.
    pub version: Version,
    /// The root the source claims (reported, never trusted: [`Manifest::verify`] takes the trusted one).
    pub root: Hash,
    /// The subtrees, in path order, none a prefix of another.
    pub items: Vec<SnapshotItem>,
}

impl Manifest {
    /// The binary encoding (SPEC.md §12.1).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MANIFEST_HEAD_LEN + self.items.len() * ITEM_LEN);
        out.push(crate::FORMAT_VERSION);
        out.push(object::SNAPSHOT_MANIFEST);
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.root.0);
        out.extend_from_slice(&(self.items.len() as u32).to_le_bytes());
        for it in &self.items {
            it.encode_to(&mut out);
        }
        out
    }

    /// Decodes a manifest; checks each entry's fields, not yet their order or the root.
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Manifest, DecodeError> {
        let mut r = Reader::new(bytes);
        r.header(object::SNAPSHOT_MANIFEST)?;
        let tid = r.u32()?;
        let version = r.u64()?;
        let root = r.hash()?;
        let n = r.u32()?;
        if n as usize > limits.max_snapshot_items {
            return Err(DecodeError::TooLarge {
                what: "snapshot manifest entries",
                size: u64::from(n),
                limit: limits.max_snapshot_items as u64,
            });
        }
        // Never trust the count for an allocation beyond what the input can hold.
        let mut items = Vec::with_capacity((n as usize).min(r.remaining() / ITEM_LEN));
        for _ in 0..n {
            items.push(SnapshotItem::decode(&mut r)?);
        }
        r.finish()?;
        Ok(Manifest {
            tid,
            version,
            root,
            items,
        })
    }

    /// Checks that the manifest describes the state of trie `tid` at `version` whose root is `trusted_root`:
    /// the header names that trie and version, the entries are in path order with none a prefix of another, and
    /// the root recomputed from them (SPEC.md §12.2) is the trusted one.
    pub fn verify(
        self,
        tid: TrieId,
        version: Version,
        trusted_root: &Hash,
    ) -> Result<VerifiedManifest, SnapshotError> {
        if self.tid != tid || self.version != version {
            return Err(SnapshotError::WrongSnapshot {
                expected: (tid, version),
                found: (self.tid, self.version),
            });
        }
        // SPEC.md §12.2 step 2: the sum of all counts first, then the order (one answer for every input).
        let mut total: u64 = 0;
        for it in &self.items {
            total = total.checked_add(it.count).ok_or(SnapshotError::Decode(
                DecodeError::Malformed("snapshot pair counts overflow"),
            ))?;
        }
        for (i, it) in self.items.iter().enumerate() {
            if let Some(prev) = i.checked_sub(1).and_then(|p| self.items.get(p)) {
                if !before(prev, it) {
                    return Err(SnapshotError::OutOfOrder(i as u64));
                }
            }
        }
        let computed = subtree(&self.items, 0);
        if computed != *trusted_root {
            return Err(SnapshotError::RootMismatch {
                expected: *trusted_root,
                computed,
            });
        }
        Ok(VerifiedManifest {
            manifest: self,
            pairs: total,
        })
    }
}

/// Whether item `a` comes strictly before item `b` and neither's prefix is a prefix of the other's.
fn before(a: &SnapshotItem, b: &SnapshotItem) -> bool {
    let shorter = usize::from(a.depth.min(b.depth));
    let l = KeyPath(a.prefix).lcp(&KeyPath(b.prefix)).min(shorter);
    l < shorter && a.nibble(l) < b.nibble(l)
}

/// The hash of the node at depth `depth` covering `items` (all share its prefix; sorted and prefix-free).
/// A node covering one pair in all is that pair's leaf, hoisted to where its prefix becomes unique; an item at
/// exactly this depth is its own hash; otherwise the node is a branch of the nodes one nibble deeper.
fn subtree(items: &[SnapshotItem], depth: usize) -> Hash {
    match items {
        [] => EMPTY,
        [only] if usize::from(only.depth) == depth || only.count == 1 => only.hash,
        _ => {
            let mut children = [EMPTY; 16];
            let mut rest = items;
            while let Some(first) = rest.first() {
                // Every item here is deeper than `depth`: an item at `depth` is alone (prefix-free).
                let c = first.nibble(depth);
                let n = rest.iter().take_while(|it| it.nibble(depth) == c).count();
                let (group, tail) = rest.split_at(n);
                children[usize::from(c)] = subtree(group, depth + 1);
                rest = tail;
            }
            fold(&children)
        }
    }
}

/// A manifest checked against a trusted root: the only thing chunks are verified against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedManifest {
    manifest: Manifest,
    pairs: u64,
}

impl VerifiedManifest {
    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Its entries.
    pub fn items(&self) -> &[SnapshotItem] {
        &self.manifest.items
    }

    /// Number of pairs in the whole state.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }

    /// Decodes and verifies chunk `bytes` as the chunk of entry `index` (SPEC.md §12.3).
    pub fn verify_chunk(
        &self,
        index: u32,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<Chunk, SnapshotError> {
        self.check_chunk(index, bytes, limits, false)
            .map(|v| v.chunk)
    }

    /// [`VerifiedManifest::verify_chunk`], also giving each pair's key path and value hash as the verification
    /// computed them (what a store keeps in its leaves), so that storing the pairs need not hash them again.
    pub fn verify_chunk_hashed(
        &self,
        index: u32,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<VerifiedChunk, SnapshotError> {
        self.check_chunk(index, bytes, limits, true)
    }

    /// What both do; `keep`: whether the hashes are kept.
    fn check_chunk(
        &self,
        index: u32,
        bytes: &[u8],
        limits: &Limits,
        keep: bool,
    ) -> Result<VerifiedChunk, SnapshotError> {
        let (head, mut records) = ChunkHead::decode(bytes, limits)?;
        // The whole chunk decodes before it is checked (SPEC.md §12.3), as `Chunk::decode` would, without copying.
        let mut decoding = records.clone();
        while decoding.next_record()?.is_some() {}
        let item = self
            .manifest
            .items
            .get(index as usize)
            .ok_or(SnapshotError::ChunkMismatch("index beyond the manifest"))?;
        if head.index != index {
            return Err(SnapshotError::ChunkMismatch("another entry's chunk"));
        }
        if head.tid != self.manifest.tid || head.version != self.manifest.version {
            return Err(SnapshotError::WrongSnapshot {
                expected: (self.manifest.tid, self.manifest.version),
                found: (head.tid, head.version),
            });
        }
        if head.depth != item.depth || head.prefix != item.prefix {
            return Err(SnapshotError::ChunkMismatch(
                "another subtree than the entry's",
            ));
        }
        // The pairs are verified in place, before any is copied: what a chunk that does not verify makes the
        // verifier hold is the kept hashes, at most as many as the manifest's count for the entry.
        let mut v = FullVerifier::new();
        let kept = if keep {
            usize::try_from(item.count.min(head.count)).unwrap_or(usize::MAX)
        } else {
            0
        };
        let mut hashes = Vec::with_capacity(kept.min(records.r.remaining() / RECORD_HEAD));
        let mut n = 0u64;
        while let Some((k, val)) = records.next_record()? {
            let i = n;
            n += 1;
            let path = KeyPath::of(k);
            if !item.covers(&path) {
                return Err(SnapshotError::OutsideChunk(i));
            }
            let vh = value_hash(val);
            if hashes.len() < kept {
                hashes.push((path, vh));
            }
            v.update_hashed(path, &vh).map_err(|e| match e {
                crate::FullVerifyError::DuplicateKey(i) => SnapshotError::DuplicateKey(i),
                crate::FullVerifyError::OutOfOrder(i) => SnapshotError::OutOfOrder(i),
                _ => SnapshotError::OutOfOrder(i),
            })?;
        }
        let computed = v.finalize_at(usize::from(item.depth));
        if computed != item.hash {
            return Err(SnapshotError::RootMismatch {
                expected: item.hash,
                computed,
            });
        }
        // The pairs are the entry's subtree (its hash binds them); a count that differs is the manifest's error,
        // which the root check cannot always see (counts above one are not hashed).
        if n != item.count {
            return Err(SnapshotError::CountMismatch {
                manifest: item.count,
                chunk: n,
            });
        }
        let chunk = Chunk::decode(bytes, limits)?;
        Ok(VerifiedChunk { chunk, hashes })
    }
}

/// A chunk that verified, with what its verification computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedChunk {
    /// The chunk.
    pub chunk: Chunk,
    /// `(key path, value hash)` of each of its pairs, in the same order.
    pub hashes: Vec<(KeyPath, Hash)>,
}

/// The pairs of one manifest entry (SPEC.md §12.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Trie id.
    pub tid: TrieId,
    /// Version.
    pub version: Version,
    /// Index of the entry in the manifest.
    pub index: u32,
    /// The entry's depth.
    pub depth: u8,
    /// The entry's prefix.
    pub prefix: [u8; 32],
    /// The pairs, in path order.
    pub pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Chunk {
    /// The encoded chunk header for `count` records; the records follow, each from [`encode_chunk_record`].
    pub fn encode_head(
        tid: TrieId,
        version: Version,
        index: u32,
        item: &SnapshotItem,
        count: u64,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHUNK_HEAD_LEN);
        out.push(crate::FORMAT_VERSION);
        out.push(object::SNAPSHOT_CHUNK);
        out.extend_from_slice(&tid.to_le_bytes());
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&index.to_le_bytes());
        out.push(item.depth);
        out.extend_from_slice(&item.prefix);
        out.extend_from_slice(&count.to_le_bytes());
        out
    }

    /// The whole encoding.
    pub fn encode(&self) -> Vec<u8> {
        let item = SnapshotItem {
            depth: self.depth,
            prefix: self.prefix,
            count: self.pairs.len() as u64,
            hash: EMPTY,
        };
        let mut out = Chunk::encode_head(self.tid, self.version, self.index, &item, item.count);
        for (k, v) in &self.pairs {
            encode_chunk_record(k, v, &mut out);
        }
        out
    }

    /// Decodes a chunk, checking sizes against `limits` before anything is allocated for them.
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Chunk, DecodeError> {
        let (head, mut records) = ChunkHead::decode(bytes, limits)?;
        // A pair costs far more decoded (two vectors) than its 8-byte head: room for what the count claims is
        // made only up to a bound, and the rest as records are really read.
        let cap = usize::try_from(head.count)
            .unwrap_or(usize::MAX)
            .min(records.r.remaining() / RECORD_HEAD)
            .min(1 << 16);
        let mut pairs = Vec::with_capacity(cap);
        while let Some((k, v)) = records.next_record()? {
            pairs.push((k.to_vec(), v.to_vec()));
        }
        Ok(Chunk {
            tid: head.tid,
            version: head.version,
            index: head.index,
            depth: head.depth,
            prefix: head.prefix,
            pairs,
        })
    }
}

/// A chunk's header (everything before its records).
struct ChunkHead {
    tid: TrieId,
    version: Version,
    index: u32,
    depth: u8,
    prefix: [u8; 32],
    count: u64,
}

impl ChunkHead {
    /// The header, and the records after it to be read one by one.
    fn decode<'a>(
        bytes: &'a [u8],
        limits: &'a Limits,
    ) -> Result<(ChunkHead, ChunkRecords<'a>), DecodeError> {
        if bytes.len() > limits.max_chunk_bytes {
            return Err(DecodeError::TooLarge {
                what: "snapshot chunk bytes",
                size: bytes.len() as u64,
                limit: limits.max_chunk_bytes as u64,
            });
        }
        let mut r = Reader::new(bytes);
        r.header(object::SNAPSHOT_CHUNK)?;
        let tid = r.u32()?;
        let version = r.u64()?;
        let index = r.u32()?;
        let (depth, prefix, count) = read_position(&mut r)?;
        let head = ChunkHead {
            tid,
            version,
            index,
            depth,
            prefix,
            count,
        };
        Ok((
            head,
            ChunkRecords {
                r,
                left: count,
                limits,
            },
        ))
    }
}

/// One record's `(key, value)`, borrowed from the chunk.
type Pair<'a> = (&'a [u8], &'a [u8]);

/// A chunk's records, read in place.
#[derive(Clone)]
struct ChunkRecords<'a> {
    r: Reader<'a>,
    left: u64,
    limits: &'a Limits,
}

impl<'a> ChunkRecords<'a> {
    /// The next `(key, value)`; `None` after the last, once the bytes are checked to end there.
    fn next_record(&mut self) -> Result<Option<Pair<'a>>, DecodeError> {
        if self.left == 0 {
            return match self.r.remaining() {
                0 => Ok(None),
                n => Err(DecodeError::TrailingData(n)),
            };
        }
        self.left -= 1;
        let kl = self.r.u32()? as usize;
        let vl = self.r.u32()? as usize;
        if kl > self.limits.max_key_bytes {
            return Err(DecodeError::TooLarge {
                what: "key bytes",
                size: kl as u64,
                limit: self.limits.max_key_bytes as u64,
            });
        }
        if vl > self.limits.max_value_bytes {
            return Err(DecodeError::TooLarge {
                what: "value bytes",
                size: vl as u64,
                limit: self.limits.max_value_bytes as u64,
            });
        }
        let k = self.r.take(kl)?;
        let v = self.r.take(vl)?;
        Ok(Some((k, v)))
    }
}

/// Appends one chunk record: `u32le(key_len) || u32le(value_len) || key || value`.
pub fn encode_chunk_record(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Builds manifest entries from a trie's leaves fed in path order: the subtrees at depth `top_depth`, each split
/// one nibble at a time while it holds more than `max_pairs` pairs.
///
/// Memory: the leaves (64 bytes each) of one subtree at `top_depth` are held until the subtree ends, so a
/// store of `N` keys needs about `64 · N / 16^top_depth` bytes here.
pub struct ManifestBuilder {
    top_depth: u8,
    max_pairs: u64,
    leaves: Vec<(KeyPath, Hash)>,
    items: Vec<SnapshotItem>,
}

impl ManifestBuilder {
    /// A builder; `top_depth` is capped at 64 and `max_pairs` raised to 1.
    pub fn new(top_depth: u8, max_pairs: u64) -> Self {
        ManifestBuilder {
            top_depth: top_depth.min(64),
            max_pairs: max_pairs.max(1),
            leaves: Vec::new(),
            items: Vec::new(),
        }
    }

    /// Feeds the next leaf (strictly after the previous one in path order).
    pub fn push_leaf(&mut self, path: KeyPath, leaf: Hash) -> Result<(), SnapshotError> {
        if let Some((last, _)) = self.leaves.last() {
            if path <= *last {
                return Err(SnapshotError::OutOfOrder(self.leaves.len() as u64));
            }
            if last.lcp(&path) < usize::from(self.top_depth) {
                self.close();
            }
        }
        self.leaves.push((path, leaf));
        Ok(())
    }

    /// Feeds the next pair.
    pub fn push_pair(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        let path = KeyPath::of(key);
        self.push_leaf(path, leaf_hash(&path, &crate::hash::value_hash(value)))
    }

    /// Entries made so far (the leaves of the subtree being fed are not counted yet).
    pub fn entries(&self) -> usize {
        self.items.len()
    }

    /// The entries of every leaf fed.
    pub fn finish(mut self) -> Vec<SnapshotItem> {
        self.close();
        self.items
    }

    fn close(&mut self) {
        let leaves = core::mem::take(&mut self.leaves);
        split(&leaves, self.top_depth, self.max_pairs, &mut self.items);
    }
}

/// Appends the entries of `leaves` (non-empty or nothing to do; all sharing their first `depth` nibbles).
fn split(leaves: &[(KeyPath, Hash)], depth: u8, max_pairs: u64, out: &mut Vec<SnapshotItem>) {
    let Some((first, _)) = leaves.first() else {
        return;
    };
    if leaves.len() as u64 <= max_pairs || depth >= 64 {
        let mut v = FullVerifier::new();
        for (p, h) in leaves {
            // In order and distinct by construction (the builder checked them).
            let _ = v.update_leaf(*p, *h);
        }
        out.push(SnapshotItem {
            depth,
            prefix: prefix_of(first, depth),
            count: leaves.len() as u64,
            hash: v.finalize_at(usize::from(depth)),
        });
        return;
    }
    let mut rest = leaves;
    while let Some((p, _)) = rest.first() {
        let c = p.nibble(usize::from(depth));
        let n = rest
            .iter()
            .take_while(|(q, _)| q.nibble(usize::from(depth)) == c)
            .count();
        let (group, tail) = rest.split_at(n);
        split(group, depth + 1, max_pairs, out);
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FullVerifier;
    use std::format;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    fn state(n: u32) -> (Pairs, Hash) {
        let mut pairs: Pairs = (0..n)
            .map(|i| {
                (
                    format!("k{i}").into_bytes(),
                    format!("v{}", i * 31).into_bytes(),
                )
            })
            .collect();
        pairs.sort_by_key(|(k, _)| KeyPath::of(k));
        let mut v = FullVerifier::new();
        for (k, val) in &pairs {
            v.update(k, val).unwrap();
        }
        (pairs, v.finalize())
    }

    fn manifest(pairs: &Pairs, root: Hash, top: u8, max: u64) -> Manifest {
        let mut b = ManifestBuilder::new(top, max);
        for (k, v) in pairs {
            b.push_pair(k, v).unwrap();
        }
        Manifest {
            tid: 3,
            version: 9,
            root,
            items: b.finish(),
        }
    }

    /// SPEC.md §12.2 step 2: an overflowing sum of counts is `malformed` even when an entry before the overflow
    /// is out of order (the sum is checked over the whole list first, as an outside implementation does).
    #[test]
    fn counts_that_overflow_are_malformed_before_the_order_is_checked() {
        let item = |nibble: u8, count: u64| SnapshotItem {
            depth: 1,
            prefix: {
                let mut p = [0u8; 32];
                p[0] = nibble << 4;
                p
            },
            count,
            hash: Hash([nibble + 1; 32]),
        };
        let m = Manifest {
            tid: 3,
            version: 9,
            root: EMPTY,
            items: [item(1, 1 << 63), item(0, 1), item(2, 1 << 63)].to_vec(),
        };
        match m.verify(3, 9, &EMPTY) {
            Err(SnapshotError::Decode(DecodeError::Malformed(_))) => {}
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    fn chunks(m: &Manifest, pairs: &Pairs) -> Vec<Vec<u8>> {
        m.items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                Chunk {
                    tid: m.tid,
                    version: m.version,
                    index: i as u32,
                    depth: it.depth,
                    prefix: it.prefix,
                    pairs: pairs
                        .iter()
                        .filter(|(k, _)| it.covers(&KeyPath::of(k)))
                        .cloned()
                        .collect(),
                }
                .encode()
            })
            .collect()
    }

    #[test]
    fn every_split_verifies_and_the_chunks_hold_every_pair_once() {
        let l = Limits::default();
        for n in [0u32, 1, 2, 3, 17, 300, 700] {
            let (pairs, root) = state(n);
            for (top, max) in [
                (0u8, 1u64),
                (0, 1000),
                (1, 5),
                (2, 7),
                (2, 100),
                (3, 1),
                (6, 2),
            ] {
                let m = manifest(&pairs, root, top, max);
                assert!(m.items.iter().all(|it| it.count <= max || it.depth == 64));
                let bytes = m.encode();
                let vm = Manifest::decode(&bytes, &l)
                    .unwrap()
                    .verify(3, 9, &root)
                    .unwrap_or_else(|e| panic!("n {n} top {top} max {max}: {e}"));
                assert_eq!(vm.pairs(), u64::from(n));
                let mut got = Vec::new();
                for (i, c) in chunks(&m, &pairs).iter().enumerate() {
                    got.extend(vm.verify_chunk(i as u32, c, &l).unwrap().pairs);
                }
                assert_eq!(got, pairs);
            }
        }
    }

    #[test]
    fn a_wrong_manifest_or_chunk_is_named() {
        let l = Limits::default();
        let (pairs, root) = state(500);
        let m = manifest(&pairs, root, 2, 40);
        let codes = |m: Manifest| m.verify(3, 9, &root).map(|_| ()).map_err(|e| e.code());
        assert_eq!(codes(m.clone()), Ok(()));
        let mut bad = m.clone();
        bad.items.swap(0, 1);
        assert_eq!(codes(bad), Err("out_of_order"));
        let mut bad = m.clone();
        bad.items[3].count += 1;
        assert_eq!(
            codes(bad.clone()),
            Ok(()),
            "counts above one are not hashed"
        );
        let vbad = bad.verify(3, 9, &root).unwrap();
        let c3 = &chunks(&m, &pairs)[3];
        assert_eq!(
            vbad.verify_chunk(3, c3, &l)
                .map(|_| ())
                .map_err(|e| e.code()),
            Err("count_mismatch")
        );
        let mut bad = m.clone();
        bad.items.remove(5);
        assert_eq!(codes(bad), Err("root_mismatch"));
        let mut bad = m.clone();
        bad.items[0].hash.0[0] ^= 1;
        assert_eq!(codes(bad), Err("root_mismatch"));
        assert_eq!(
            m.clone()
                .verify(3, 10, &root)
                .map(|_| ())
                .map_err(|e| e.code()),
            Err("wrong_snapshot")
        );

        let vm = m.clone().verify(3, 9, &root).unwrap();
        let cs = chunks(&m, &pairs);
        let chunk_code =
            |i: u32, b: &[u8]| vm.verify_chunk(i, b, &l).map(|_| ()).map_err(|e| e.code());
        assert_eq!(chunk_code(1, &cs[0]), Err("chunk_mismatch"));
        let mut c = Chunk::decode(&cs[2], &l).unwrap();
        let last = c.pairs.len() - 1;
        c.pairs[last].1.push(b'!');
        assert_eq!(chunk_code(2, &c.encode()), Err("root_mismatch"));
        let mut c = Chunk::decode(&cs[2], &l).unwrap();
        c.pairs.swap(0, 1);
        assert_eq!(chunk_code(2, &c.encode()), Err("out_of_order"));
        let mut c = Chunk::decode(&cs[2], &l).unwrap();
        c.pairs[0] = Chunk::decode(&cs[3], &l).unwrap().pairs[0].clone();
        assert_eq!(chunk_code(2, &c.encode()), Err("outside_chunk"));
        assert_eq!(chunk_code(2, &cs[2][..cs[2].len() - 1]), Err("truncated"));
    }
}
