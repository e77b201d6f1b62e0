//! Exports, snapshots and changes through a router (API.md, "Snapshots and joining"), so that a node can join
//! from a sharded cluster and follow it as it follows one node, and a whole trie can be exported from it.
//!
//! - **Export**: the header with the composed root, then each non-empty subtree's pairs in path order, from the
//!   shard holding it at the version, each subtree fetched as a snapshot chunk and checked against its top before
//!   any of its records goes out; then the trailer.
//! - **Manifest**: each shard's manifest of the trie at the version (its entries lie at depth 2 or below, so each
//!   names one subtree), the entries of the subtrees each shard holds at that version kept, merged in path order,
//!   with the composed root; checked against that root before it is answered.
//! - **Chunks**: forwarded to the shard holding the entry's subtree at the version (a chunk echoes the index it is
//!   asked for, so the index in the merged manifest is the chunk's).
//! - **Changes** from `from` to `to`: for each subtree, from the shard holding it at `to`. A subtree handed over at
//!   a version `W` with `from + 1 < W ≤ to` is asked in stretches, each of the shard holding it then: the old
//!   holder from `from` to `W − 1`, the new one from `W − 1` (where the handover checked that its copy equals the
//!   old holder's) onwards. A key changed in more than one stretch is compared with its value at `from`, so that a
//!   key set back to that value is no change, as on one node.

use std::collections::BTreeMap;

use letus_verify::hex::encode as hex;
use letus_verify::snapshot::Manifest;
use letus_verify::{KeyPath, Limits, Version};

use super::Router;
use crate::api::*;
use crate::error::{hex_field, ApiError};

impl Router {
    /// The version an export of trie `tid` at `version` (default latest) is of, checked before its answer starts.
    pub fn export_version(&self, tid: u32, version: Option<Version>) -> Result<Version, ApiError> {
        let f = self.finished();
        let v = f.resolve(version)?;
        f.digest(tid, v)?;
        Ok(v)
    }

    /// Writes the export of trie `tid` at `v` (SPEC.md §9.2) to `sink` in pieces of about 64 KiB (see the module
    /// documentation); `sink` returns `false` when its reader went away. The number of records.
    pub fn export(
        &self,
        tid: u32,
        v: Version,
        mut sink: impl FnMut(Vec<u8>) -> bool,
    ) -> Result<u64, ApiError> {
        use letus_verify::export::{encode_record, encode_trailer, ExportHeader};
        let root = self.finished().digest(tid, v)?.root;
        let all = self.tops_at(v)?;
        let empty = letus_core::shard::Tops::default();
        let tops = all.get(&tid).unwrap_or(&empty);
        let mut buf = ExportHeader {
            tid,
            version: v,
            root,
        }
        .encode();
        let mut n = 0u64;
        for (prefix, top) in tops.entries() {
            let shard = self.owner(*prefix, v);
            let mut emit = |pairs: super::moving::Pairs| {
                for (k, val) in pairs {
                    encode_record(&k, &val, &mut buf);
                    n += 1;
                    if buf.len() >= 64 * 1024 && !sink(std::mem::take(&mut buf)) {
                        return false;
                    }
                }
                true
            };
            match self.subtree_pairs(shard, tid, v, *prefix, tops) {
                Ok(pairs) => {
                    if !emit(pairs) {
                        return Ok(n);
                    }
                }
                // A subtree larger than a chunk comes in its 16 pieces, checked against its top once all went
                // out: a mismatch ends the export without its trailer, which no reader accepts.
                Err(e) if super::moving::refused_as_too_large(&e) => {
                    let mut check = letus_verify::FullVerifier::new();
                    for x in 0..16u8 {
                        let pairs = self.piece_pairs(shard, tid, v, *prefix, x)?;
                        for (k, val) in &pairs {
                            check.update(k, val).map_err(|e| {
                                ApiError::ShardInconsistent(format!("subtree {prefix:02x}: {e}"))
                            })?;
                        }
                        if !emit(pairs) {
                            return Ok(n);
                        }
                    }
                    if check.finalize_at(2) != top.hash() {
                        return Err(ApiError::ShardInconsistent(format!(
                            "the pieces of subtree {prefix:02x} do not hash to its top"
                        )));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        buf.extend_from_slice(&encode_trailer(n));
        sink(buf);
        Ok(n)
    }

    /// The manifest of trie `tid` at `version` (default latest), merged from the shards' (see the module
    /// documentation).
    pub fn snapshot_manifest(
        &self,
        tid: u32,
        version: Option<Version>,
        max_pairs: u64,
    ) -> Result<Vec<u8>, ApiError> {
        let (v, root) = {
            let f = self.finished();
            let v = f.resolve(version)?;
            (v, f.digest(tid, v)?.root)
        };
        let map = self.map();
        let n = self.shards.len();
        let answers = self.each_shard(|_, s| {
            let url = format!(
                "{}/v1/tries/{tid}/snapshot?version={v}&max_pairs={max_pairs}",
                s.url
            );
            match super::read_body(&url, self.agent.get(&url).call()) {
                Ok(b) => Ok(Some(b)),
                // None of the trie's keys ever were in this shard's subtrees.
                Err(ApiError::Upstream { detail, .. }) if detail.code == "unknown_trie" => Ok(None),
                Err(e) => Err(e),
            }
        });
        let limits = Limits::default();
        let mut items = Vec::new();
        for (i, (s, a)) in self.shards.iter().zip(answers).enumerate() {
            let Some(bytes) = a? else { continue };
            let m = Manifest::decode(&bytes, &limits).map_err(|e| {
                ApiError::ShardInconsistent(format!("{}: its manifest: {e}", s.url))
            })?;
            if m.tid != tid || m.version != v {
                return Err(ApiError::ShardInconsistent(format!(
                    "{}: a manifest of trie {} at {} for trie {tid} at {v}",
                    s.url, m.tid, m.version
                )));
            }
            for it in m.items {
                if it.depth < 2 {
                    return Err(ApiError::ShardInconsistent(format!(
                        "{}: a manifest entry above depth 2",
                        s.url
                    )));
                }
                if map.owner(it.prefix[0], v, n) == i {
                    items.push(it);
                }
            }
        }
        // Entries are prefix-free, so their zero-padded prefixes sort in path order.
        items.sort_by_key(|a| (a.prefix, a.depth));
        if items.len() > limits.max_snapshot_items {
            return Err(ApiError::TooLarge(format!(
                "{} entries, at most {}: ask for more pairs per chunk",
                items.len(),
                limits.max_snapshot_items
            )));
        }
        let m = Manifest {
            tid,
            version: v,
            root,
            items,
        };
        let bytes = m.encode();
        m.verify(tid, v, &root).map_err(|e| {
            ApiError::ShardInconsistent(format!(
                "the merged manifest does not verify against the root of version {v}: {e}"
            ))
        })?;
        Ok(bytes)
    }

    /// Chunk `index` of a manifest: the pairs of the subtree at `depth` (2 or more) and `prefix`, from the shard
    /// holding it at `version`.
    pub fn snapshot_chunk(
        &self,
        tid: u32,
        version: Version,
        index: u32,
        depth: u8,
        prefix: &[u8; 32],
    ) -> Result<Vec<u8>, ApiError> {
        if !(2..=64).contains(&depth) {
            return Err(ApiError::BadRequest(
                "a router's chunks are subtrees at depth 2 to 64 (its manifests' entries)".into(),
            ));
        }
        let v = self.finished().resolve(Some(version))?;
        self.finished().digest(tid, v)?;
        let s = &self.shards[self.owner(prefix[0], v)];
        let url = format!(
            "{}/v1/tries/{tid}/snapshot/chunks/{index}?version={v}&depth={depth}&prefix={}",
            s.url,
            hex(prefix)
        );
        super::read_body(&url, self.agent.get(&url).call())
    }

    /// The keys of trie `tid` whose values differ between `from` and `to`, with their values at `to`, in
    /// key-path order (see the module documentation).
    pub fn changes(
        &self,
        tid: u32,
        from: Version,
        to: Version,
    ) -> Result<ChangesResponse, ApiError> {
        if from > to {
            return Err(ApiError::BadRequest("`from` must not be above `to`".into()));
        }
        let (from, to) = {
            let f = self.finished();
            let r = (f.resolve(Some(from))?, f.resolve(Some(to))?);
            f.digest(tid, to)?;
            r
        };
        let map = self.map();
        let n = self.shards.len();
        // Each subtree's stretches `(shard, start, end)`, oldest first.
        let mut stretches: BTreeMap<u8, Vec<(usize, Version, Version)>> = BTreeMap::new();
        for p in 0..=255u8 {
            let mut start = from;
            let mut out = Vec::new();
            for h in map.moved.get(&p).into_iter().flatten() {
                if h.from > from.saturating_add(1) && h.from <= to {
                    out.push((map.owner(p, h.from - 1, n), start, h.from - 1));
                    start = h.from - 1;
                }
            }
            out.push((map.owner(p, to, n), start, to));
            stretches.insert(p, out);
        }
        // One request per distinct (shard, start, end), every shard's at once.
        let mut asks: Vec<(usize, Version, Version)> =
            stretches.values().flatten().copied().collect();
        asks.sort_unstable();
        asks.dedup();
        let answers = self.in_parallel(
            &asks,
            |(i, _, _)| *i,
            |&(i, a, b)| self.shard_changes(i, tid, a, b),
        );
        let mut got: BTreeMap<(usize, Version, Version), BTreeMap<KeyPath, WriteOp>> =
            BTreeMap::new();
        for (ask, a) in asks.iter().zip(answers) {
            got.insert(*ask, a?);
        }
        let mut out: BTreeMap<KeyPath, WriteOp> = BTreeMap::new();
        // Keys changed in more than one stretch, by the shard holding them at `from`.
        let mut recheck: BTreeMap<usize, Vec<KeyPath>> = BTreeMap::new();
        for (p, st) in &stretches {
            let mut seen: BTreeMap<KeyPath, usize> = BTreeMap::new();
            for ask in st {
                for (path, w) in got[ask].range(subtree_range(*p)) {
                    *seen.entry(*path).or_default() += 1;
                    out.insert(*path, w.clone());
                }
            }
            for (path, times) in seen {
                if times > 1 {
                    recheck.entry(st[0].0).or_default().push(path);
                }
            }
        }
        for (i, paths) in recheck {
            let keys: Vec<String> = paths.iter().map(|p| out[p].key.clone()).collect();
            for batch in keys.chunks(self.limits.max_proof_keys.max(1)) {
                let req = MultiProofRequest {
                    keys: batch.to_vec(),
                    version: Some(from),
                };
                let s = &self.shards[i];
                let a: MultiProofResponse =
                    self.post_json(&s.url, &format!("/v1/tries/{tid}/proofs"), &req, false)?;
                if a.values.len() != batch.len() {
                    return Err(ApiError::ShardInconsistent(format!(
                        "{} answered {} values for {} keys",
                        s.url,
                        a.values.len(),
                        batch.len()
                    )));
                }
                for (k, was) in batch.iter().zip(a.values) {
                    let path = KeyPath::of(&hex_field(k, "a shard's key")?);
                    if out.get(&path).is_some_and(|w| w.value == was) {
                        out.remove(&path);
                    }
                }
            }
        }
        if out.len() > crate::node::MAX_CHANGES {
            return Err(ApiError::TooLarge(format!(
                "{} changes; at most {} per answer: ask for fewer versions",
                out.len(),
                crate::node::MAX_CHANGES
            )));
        }
        Ok(ChangesResponse {
            tid,
            from,
            to,
            changes: out.into_values().collect(),
        })
    }

    /// Shard `i`'s changes of trie `tid` from `a` to `b`, by key path (a trie the shard never had: none).
    fn shard_changes(
        &self,
        i: usize,
        tid: u32,
        a: Version,
        b: Version,
    ) -> Result<BTreeMap<KeyPath, WriteOp>, ApiError> {
        let s = &self.shards[i];
        let r: ChangesResponse =
            match self.get_json(&s.url, &format!("/v1/tries/{tid}/changes?from={a}&to={b}")) {
                Ok(r) => r,
                Err(ApiError::Upstream { detail, .. }) if detail.code == "unknown_trie" => {
                    return Ok(BTreeMap::new())
                }
                Err(e) => return Err(e),
            };
        r.changes
            .into_iter()
            .map(|w| {
                let key = hex_field(&w.key, "a shard's key").map_err(|_| {
                    ApiError::ShardInconsistent(format!("{}: a key is not hex", s.url))
                })?;
                Ok((KeyPath::of(&key), w))
            })
            .collect()
    }
}

/// The key paths of subtree `p`.
fn subtree_range(p: u8) -> std::ops::RangeInclusive<KeyPath> {
    let (mut lo, mut hi) = ([0u8; 32], [0xffu8; 32]);
    lo[0] = p;
    hi[0] = p;
    KeyPath(lo)..=KeyPath(hi)
}
