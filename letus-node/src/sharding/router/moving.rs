//! Moving a subtree from one shard to another while blocks keep coming (API.md, "Moving a subtree").
//!
//! A move rides along the blocks: each new version's decision carries one step of it, so the move is as durable
//! and as crash-safe as the commits themselves (a step is re-sent with its version's parts, never recomputed),
//! and a router that takes over finishes it from the last decision's map.
//!
//! 1. **Clear**: the target's own leftovers of the subtree (none, unless an earlier copy was abandoned) are
//!    deleted, one trie (or piece) per block, read from the target's state at the version before.
//! 2. **Copy**: one trie per block, the source's pairs of the subtree at the version before are fetched as a
//!    snapshot chunk (SPEC.md §12.3) and checked against the source's top of that subtree before they are written
//!    to the target; a trie's part above `move_step_pairs` goes in the 16 pieces one level down, one per block.
//!    From the first copy on, every block's writes in the subtree go to both shards. The target's copy then holds
//!    exactly the source's state: what a trie's chunk (or piece) did not carry was written to both after it.
//! 3. **Handover** at version `W`, once the target's tops of the subtree equal the source's at `W - 1` (checked;
//!    otherwise the copy starts again from Clear): the decision of `W` hands the subtree to the target in the map,
//!    and both shards' parts carry their new subtrees (`holds`). From `W` on, writes and reads of the subtree go to
//!    the target; reads of older versions still go to the source, which keeps their history.
//! 4. **Drop**: the source's copy is deleted, one trie (or piece) per block. The roots never change: a shard's tops count
//!    only for the subtrees the map gives it at each version.

use std::collections::BTreeMap;

use letus_core::shard::Tops;
use letus_verify::hex::encode as hex;
use letus_verify::snapshot::Chunk;
use letus_verify::{FullVerifier, KeyPath, Limits, Version};

use super::super::map::{Handover, MoveTask, Phase, ShardMap};
use super::super::tops_from_json;
use super::Router;
use crate::api::*;
use crate::error::{hex_field, ApiError};

/// A subtree's pairs, in path order.
pub(super) type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Shards' tops at the version before a move step, by shard.
type TopsCache = BTreeMap<usize, BTreeMap<u32, Tops>>;

/// `POST /v1/shard/moves`: move subtree `prefix` to shard `to`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MoveRequest {
    /// The subtree: two hex digits, the first byte of its keys' paths.
    pub prefix: String,
    /// The shard it goes to: its index in the map (the order of the `--shard` flags).
    pub to: usize,
}

/// `GET /v1/shard/map`: the shards, who holds each subtree, the moves done and the one under way.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MapResponse {
    /// The router's last finished version (`null` before the first).
    pub version: Option<Version>,
    /// The shards' URLs, in map order.
    pub shards: Vec<String>,
    /// The subtrees each shard holds after `version`, in map order (`""`: none).
    pub holds: Vec<String>,
    /// The last decision's map: every handover, and the move under way with its phase.
    pub map: ShardMap,
    /// A move asked for that the next block's decision starts.
    pub requested: Option<MoveTask>,
}

impl Router {
    /// The shard map as a client sees it.
    pub fn map_view(&self) -> Result<MapResponse, ApiError> {
        let requested = self.requested_move()?;
        let version = self.finished().latest;
        let map = self.map();
        let n = self.shards.len();
        let after = version.map_or(1, |v| v.saturating_add(1));
        Ok(MapResponse {
            version,
            shards: self.shards.iter().map(|s| s.url.clone()).collect(),
            holds: (0..n)
                .map(|i| {
                    map.holds(i, after, n)
                        .map_or(String::new(), |h| h.to_string())
                })
                .collect(),
            map,
            requested,
        })
    }

    /// The move asked for and not yet started.
    pub(super) fn requested_move(&self) -> Result<Option<MoveTask>, ApiError> {
        Ok(self
            .requested
            .lock()
            .map_err(|_| ApiError::Internal("poisoned".into()))?
            .clone())
    }

    /// Asks for a move; the next block's decision starts it. One move at a time, and a shard keeps at least one
    /// subtree.
    pub fn request_move(&self, req: MoveRequest) -> Result<MapResponse, ApiError> {
        let prefix = match hex_field(&req.prefix, "prefix")?.as_slice() {
            [p] => *p,
            _ => {
                return Err(ApiError::BadRequest(
                    "`prefix` is one byte: two hex digits".into(),
                ))
            }
        };
        let n = self.shards.len();
        if req.to >= n {
            return Err(ApiError::BadRequest(format!(
                "`to` is a shard's index in the map: 0 to {}",
                n - 1
            )));
        }
        {
            let w = self.writer_unfenced()?;
            let latest = self.finished().latest.ok_or(ApiError::Empty)?;
            let map = self.map();
            let mut requested = self
                .requested
                .lock()
                .map_err(|_| ApiError::Internal("poisoned".into()))?;
            if map.task.is_some() || requested.is_some() || w.pending.is_some() {
                return Err(ApiError::MoveRefused(
                    "a move is under way (or a version is in doubt): one at a time".into(),
                ));
            }
            let next = latest.saturating_add(1);
            let from = map.owner(prefix, next, n);
            if from == req.to {
                return Err(ApiError::MoveRefused(format!(
                    "shard {from} already holds subtree {prefix:02x}"
                )));
            }
            if map.holds(from, next, n).is_some_and(|h| h.count() == 1) {
                return Err(ApiError::MoveRefused(format!(
                    "subtree {prefix:02x} is the last one shard {from} holds"
                )));
            }
            tracing::info!(prefix = %format!("{prefix:02x}"), from, to = req.to, "move asked for: the next block starts it");
            let task = MoveTask {
                prefix,
                from,
                to: req.to,
                started: next,
                phase: Phase::Clear,
                tries: Vec::new(),
                handed_over: None,
                piece: None,
            };
            // Durable before it is accepted: a router that restarts (or the next etcd leader) still starts it.
            self.save_request(Some(&task))?;
            *requested = Some(task);
        }
        self.map_view()
    }

    /// Takes the step of the move under way in `map` into the decision of the new version `v`, if it can: a move
    /// never keeps a block from committing. A step that fails (a shard unreachable, an answer that does not fit)
    /// is tried again with the next block, the block's writes in the subtree still going to both shards while
    /// copying; a step too large for a block (a trie's part of the subtree beyond a block's limits) abandons the
    /// move (`map.abandoned` says why; what it copied is invisible and the next move to that shard clears it).
    pub(super) fn take_move_step(
        &self,
        v: Version,
        req: &BlockRequest,
        map: &mut ShardMap,
        parts: &mut [ShardBlockRequest],
    ) {
        let Some(task) = map.task.clone() else {
            return;
        };
        let (mut m, mut p) = (map.clone(), parts.to_vec());
        match self.move_step(v, req, &mut m, &mut p) {
            Ok(()) => match self.too_large(&p) {
                None => {
                    *map = m;
                    parts.clone_from_slice(&p);
                }
                Some(why) => {
                    tracing::error!(prefix = %format!("{:02x}", task.prefix), %why, "move abandoned");
                    map.task = None;
                    map.abandoned = Some(format!(
                        "the move of subtree {:02x} from shard {} to shard {} at version {v}: {why}",
                        task.prefix, task.from, task.to
                    ));
                }
            },
            // A piece larger than a shard serves in one chunk fails the same way at every block: the move
            // cannot go on, and waiting would keep every later move from being asked for.
            Err(e) if refused_as_too_large(&e) => {
                tracing::error!(prefix = %format!("{:02x}", task.prefix), error = ?e, "move abandoned");
                map.task = None;
                map.abandoned = Some(format!(
                    "the move of subtree {:02x} from shard {} to shard {} at version {v}: a piece of it is larger than a shard serves in one chunk ({e:?})",
                    task.prefix, task.from, task.to
                ));
            }
            Err(e) => {
                tracing::warn!(prefix = %format!("{:02x}", task.prefix), error = ?e, "a move step failed: tried again with the next block");
                if task.phase == Phase::Copy {
                    parts[task.to].moving = in_subtree(req, task.prefix).collect();
                }
            }
        }
    }

    /// Why one of `parts` is more than a shard takes in one block, if it is.
    fn too_large(&self, parts: &[ShardBlockRequest]) -> Option<String> {
        let max = self.limits.max_block_writes;
        for (i, part) in parts
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.moving.is_empty())
        {
            if part.moving.len() > max {
                return Some(format!(
                    "{} writes for shard {i}, at most {max} per block",
                    part.moving.len()
                ));
            }
            let bytes = serde_json::to_vec(part).map_or(usize::MAX, |b| b.len());
            if bytes > self.limits.max_body_bytes {
                return Some(format!(
                    "a part of {bytes} bytes for shard {i}, at most {} per request",
                    self.limits.max_body_bytes
                ));
            }
        }
        None
    }

    /// Adds the step of the move under way in `map` to the decision of the new version `v` (the one after the
    /// last finished version), updating `map` to the map after `v`; the block's parts are re-split when the step
    /// hands the subtree over.
    pub(super) fn move_step(
        &self,
        v: Version,
        req: &BlockRequest,
        map: &mut ShardMap,
        parts: &mut [ShardBlockRequest],
    ) -> Result<(), ApiError> {
        let Some(mut task) = map.task.clone() else {
            return Ok(());
        };
        let prev = v - 1;
        let n = self.shards.len();
        let p = task.prefix;
        let at = format!("{p:02x}");
        // Every shard's tops at `prev`, fetched once per step however many phases the step passes through.
        let mut tops = TopsCache::default();
        loop {
            match task.phase {
                Phase::Clear => {
                    match self.delete_step(&mut tops, task.to, p, prev, &mut task.piece)? {
                        Some(d) => {
                            tracing::info!(prefix = %at, deletes = d.len(), version = v, "move: clearing the target's leftovers");
                            parts[task.to].moving = d;
                            break;
                        }
                        None => {
                            task.phase = Phase::Copy;
                            task.piece = None;
                            task.tries = self
                                .tops_at_step(&mut tops, task.from, prev)?
                                .iter()
                                .filter(|(_, t)| t.get(p).is_some())
                                .map(|(tid, _)| *tid)
                                .collect();
                        }
                    }
                }
                Phase::Copy if !task.tries.is_empty() => {
                    let tid = task.tries[0];
                    let tops = self.tops_at_step(&mut tops, task.from, prev)?;
                    let mut moving = Vec::new();
                    let mut next = None;
                    if let Some(t) = tops.get(&tid).filter(|t| t.get(p).is_some()) {
                        let pairs;
                        (pairs, next) = self.step_pairs(task.from, tid, prev, p, t, task.piece)?;
                        tracing::info!(prefix = %at, tid, piece = ?task.piece, pairs = pairs.len(), version = v, "move: copying");
                        moving = pairs
                            .iter()
                            .map(|(k, val)| WriteOp {
                                tid,
                                key: hex(k),
                                value: Some(hex(val)),
                            })
                            .collect();
                    }
                    task.piece = next;
                    if next.is_none() {
                        task.tries.remove(0);
                    }
                    // The block's own writes in the subtree, after the copy (the later write of a key wins).
                    moving.extend(in_subtree(req, p));
                    parts[task.to].moving = moving;
                    break;
                }
                Phase::Copy => {
                    let source = only(self.tops_at_step(&mut tops, task.from, prev)?, p);
                    let target = only(self.tops_at_step(&mut tops, task.to, prev)?, p);
                    if source != target {
                        tracing::error!(prefix = %at, version = prev, "move: the copy differs from the source: copying again");
                        task.phase = Phase::Clear;
                        task.piece = None;
                        continue;
                    }
                    map.moved.entry(p).or_default().push(Handover {
                        from: v,
                        shard: task.to,
                    });
                    task.phase = Phase::Drop;
                    task.piece = None;
                    task.handed_over = Some(v);
                    tracing::info!(prefix = %at, from = task.from, to = task.to, version = v, "move: handed over");
                    // The block's writes in the subtree now go to the target alone.
                    let moving: Vec<Vec<WriteOp>> = parts
                        .iter_mut()
                        .map(|x| std::mem::take(&mut x.moving))
                        .collect();
                    let split = self.split(req, map)?;
                    for ((part, new), m) in parts.iter_mut().zip(split).zip(moving) {
                        *part = new;
                        part.moving = m;
                    }
                    for i in [task.from, task.to] {
                        parts[i].holds = map.holds(i, v, n).map(|h| h.to_string());
                    }
                }
                Phase::Drop => {
                    match self.delete_step(&mut tops, task.from, p, prev, &mut task.piece)? {
                        Some(d) => {
                            tracing::info!(prefix = %at, deletes = d.len(), version = v, "move: dropping the old copy");
                            parts[task.from].moving = d;
                            break;
                        }
                        None => {
                            tracing::info!(prefix = %at, from = task.from, to = task.to, version = v, "move: done");
                            map.task = None;
                            return Ok(());
                        }
                    }
                }
            }
        }
        map.task = Some(task);
        Ok(())
    }

    /// The deletes of this step of emptying shard `i`'s subtree `p` at `v`: in the first trie that has any of it,
    /// all of its pairs or the piece `piece` (advanced here) when they are many (`None`: no trie has any).
    fn delete_step(
        &self,
        cache: &mut TopsCache,
        i: usize,
        p: u8,
        v: Version,
        piece: &mut Option<u8>,
    ) -> Result<Option<Vec<WriteOp>>, ApiError> {
        let tops = self.tops_at_step(cache, i, v)?;
        let Some((tid, t)) = tops.iter().find(|(_, t)| t.get(p).is_some()) else {
            return Ok(None);
        };
        let (pairs, next) = self.step_pairs(i, *tid, v, p, t, *piece)?;
        *piece = next;
        Ok(Some(
            pairs
                .iter()
                .map(|(k, _)| WriteOp {
                    tid: *tid,
                    key: hex(k),
                    value: None,
                })
                .collect(),
        ))
    }

    /// The pairs of shard `i`'s subtree `p` of trie `tid` at `v` that one step of a move handles, and the piece
    /// the next step of this trie takes (`None`: the trie is done). With `piece` `None`, the whole subtree is
    /// fetched and checked against its top: at most `move_step_pairs` pairs are taken at once; more are taken in
    /// the 16 pieces below the subtree's node (depth 3, one per step: piece 0 now, from the checked pairs). A
    /// later piece, fetched at its own version, is checked for lying in its piece and in path order; the
    /// handover's comparison of both shards' tops checks the whole copy.
    fn step_pairs(
        &self,
        i: usize,
        tid: u32,
        v: Version,
        p: u8,
        tops: &Tops,
        piece: Option<u8>,
    ) -> Result<(Pairs, Option<u8>), ApiError> {
        let nibble = |k: &[u8]| KeyPath::of(k).nibble(2);
        match piece {
            None => {
                let all = match self.subtree_pairs(i, tid, v, p, tops) {
                    Ok(all) => all,
                    // More than one chunk holds: piece by piece from the first.
                    Err(e) if refused_as_too_large(&e) => {
                        return Ok((self.piece_pairs(i, tid, v, p, 0)?, Some(1)));
                    }
                    Err(e) => return Err(e),
                };
                if all.len() <= self.move_step_pairs {
                    return Ok((all, None));
                }
                let first = all.into_iter().filter(|(k, _)| nibble(k) == 0).collect();
                Ok((first, Some(1)))
            }
            Some(x) => {
                let pairs = self.piece_pairs(i, tid, v, p, x)?;
                Ok((pairs, (x < 15).then_some(x + 1)))
            }
        }
    }

    /// Piece `x` (depth 3) of shard `i`'s subtree `p` of trie `tid` at `v`, checked for lying in the piece, in
    /// path order.
    pub(super) fn piece_pairs(
        &self,
        i: usize,
        tid: u32,
        v: Version,
        p: u8,
        x: u8,
    ) -> Result<Pairs, ApiError> {
        let s = &self.shards[i];
        let mut prefix = [0u8; 32];
        prefix[0] = p;
        prefix[1] = x << 4;
        let bytes = self.get_bytes(&format!(
            "{}/v1/tries/{tid}/snapshot/chunks/0?version={v}&depth=3&prefix={}",
            s.url,
            hex(&prefix)
        ))?;
        let bad = |why: String| {
            ApiError::ShardInconsistent(format!(
                "{}: piece {p:02x}{x:x} of trie {tid} at {v}: {why}",
                s.url
            ))
        };
        // An empty piece is a chunk head with no pairs, which a chunk of a manifest never is.
        if bytes.len() == letus_verify::snapshot::CHUNK_HEAD_LEN {
            return Ok(Vec::new());
        }
        let chunk = Chunk::decode(&bytes, &Limits::default()).map_err(|e| bad(e.to_string()))?;
        if chunk.tid != tid || chunk.version != v || chunk.depth != 3 || chunk.prefix != prefix {
            return Err(bad("another chunk than asked for".into()));
        }
        let mut last: Option<KeyPath> = None;
        for (k, _) in &chunk.pairs {
            let path = KeyPath::of(k);
            if path.0[0] != p || path.nibble(2) != x {
                return Err(bad("a pair outside the piece".into()));
            }
            if last.is_some_and(|l| l >= path) {
                return Err(bad("pairs out of path order".into()));
            }
            last = Some(path);
        }
        Ok(chunk.pairs)
    }

    /// [`Router::shard_tops_raw`] of shard `i` at `v`, fetched once per move step.
    fn tops_at_step<'c>(
        &self,
        cache: &'c mut TopsCache,
        i: usize,
        v: Version,
    ) -> Result<&'c BTreeMap<u32, Tops>, ApiError> {
        Ok(match cache.entry(i) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(self.shard_tops_raw(i, v)?),
        })
    }

    /// Every trie's tops of shard `i` at `v`, all of them (the subtrees it holds and any it is given or dropping).
    fn shard_tops_raw(&self, i: usize, v: Version) -> Result<BTreeMap<u32, Tops>, ApiError> {
        let s = &self.shards[i];
        let a: ShardTopsResponse = self.get_json(&s.url, &format!("/v1/shard/tops?version={v}"))?;
        if a.version != v {
            return Err(ApiError::ShardInconsistent(format!(
                "{} answered the tops of version {} for {v}",
                s.url, a.version
            )));
        }
        a.tries
            .iter()
            .map(|t| {
                tops_from_json(&t.tops)
                    .map(|x| (t.tid, x))
                    .map_err(|e| ApiError::ShardInconsistent(format!("{}: {e}", s.url)))
            })
            .collect()
    }

    /// The pairs of subtree `p` of trie `tid` on shard `i` at `v`, as a snapshot chunk checked against the
    /// subtree's top in `tops` (the shard's own answer, so a chunk that does not fit is the shard contradicting
    /// itself: `shard_inconsistent`).
    pub(super) fn subtree_pairs(
        &self,
        i: usize,
        tid: u32,
        v: Version,
        p: u8,
        tops: &Tops,
    ) -> Result<Pairs, ApiError> {
        let s = &self.shards[i];
        let top = tops
            .get(p)
            .ok_or_else(|| ApiError::Internal("no top".into()))?;
        let mut prefix = [0u8; 32];
        prefix[0] = p;
        let url = format!(
            "{}/v1/tries/{tid}/snapshot/chunks/0?version={v}&depth=2&prefix={}",
            s.url,
            hex(&prefix)
        );
        let bytes = self.get_bytes(&url)?;
        let bad = |why: String| {
            ApiError::ShardInconsistent(format!(
                "{}: the chunk of subtree {p:02x} of trie {tid} at {v}: {why}",
                s.url
            ))
        };
        let chunk = Chunk::decode(&bytes, &Limits::default()).map_err(|e| bad(e.to_string()))?;
        if chunk.tid != tid || chunk.version != v || chunk.depth != 2 || chunk.prefix != prefix {
            return Err(bad("another chunk than asked for".into()));
        }
        let mut check = FullVerifier::new();
        for (k, val) in &chunk.pairs {
            if KeyPath::of(k).0[0] != p {
                return Err(bad("a pair outside the subtree".into()));
            }
            check.update(k, val).map_err(|e| bad(e.to_string()))?;
        }
        if check.finalize_at(2) != top.hash() {
            return Err(bad("its pairs do not hash to the subtree's top".into()));
        }
        Ok(chunk.pairs)
    }

    /// A key's history when its subtree moved: each shard's entries for the versions it held the subtree, newest
    /// first, as one store holding every key would list them.
    pub(super) fn history_across_moves(
        &self,
        tid: u32,
        key: &[u8],
        req: &HistoryRequest,
        latest: Version,
    ) -> Result<HistoryResponse, ApiError> {
        let map = self.map();
        let n = self.shards.len();
        let prefix = KeyPath::of(key).0[0];
        let limit = req
            .limit
            .unwrap_or(self.limits.max_history)
            .min(self.limits.max_history);
        // (first version, first version after, shard), newest first.
        let mut segments = Vec::new();
        let mut hi: Option<Version> = None;
        for h in map.moved.get(&prefix).into_iter().flatten().rev() {
            segments.push((h.from, hi, h.shard));
            hi = Some(h.from);
        }
        segments.push((0, hi, usize::from(prefix) * n / 256));
        let mut out: Vec<HistoryItem> = Vec::new();
        'segments: for (lo, hi, shard) in segments {
            if req.before.is_some_and(|b| b <= lo) {
                continue;
            }
            let s = &self.shards[shard];
            // `before` is an entry's version (a cursor the router handed out), on the shard whose segment holds it.
            let mut cursor = req.before.filter(|b| hi.is_none_or(|h| *b < h));
            loop {
                let ask = HistoryRequest {
                    key: req.key.clone(),
                    proofs: false,
                    limit: Some(self.limits.max_history),
                    before: cursor,
                };
                let page: HistoryResponse = match self.post_json(
                    &s.url,
                    &format!("/v1/tries/{tid}/history"),
                    &ask,
                    false,
                ) {
                    Ok(a) => a,
                    Err(ApiError::Upstream { detail, .. }) if detail.code == "unknown_trie" => {
                        continue 'segments
                    }
                    Err(e) => return Err(e),
                };
                for e in page.entries {
                    if e.version > latest
                        || hi.is_some_and(|h| e.version >= h)
                        || req.before.is_some_and(|b| e.version >= b)
                    {
                        continue;
                    }
                    if e.version < lo {
                        continue 'segments;
                    }
                    out.push(e);
                    if out.len() > limit {
                        break 'segments;
                    }
                }
                match page.next {
                    // A cursor must go back in time, or a shard could keep this read asking forever.
                    Some(c) if cursor.is_none_or(|prev| c < prev) => cursor = Some(c),
                    Some(c) => {
                        return Err(ApiError::ShardInconsistent(format!(
                            "{} answered a history page whose next ({c}) is not before the page asked for ({cursor:?})",
                            s.url
                        )))
                    }
                    None => continue 'segments,
                }
            }
        }
        let next = (out.len() > limit).then(|| {
            out.truncate(limit);
            out.last().map(|e| e.version)
        });
        Ok(HistoryResponse {
            tid,
            key: hex(key),
            entries: out,
            next: next.flatten(),
        })
    }

    pub(super) fn get_bytes(&self, url: &str) -> Result<Vec<u8>, ApiError> {
        super::read_body(url, self.agent.get(url).call())
    }
}

/// Whether a shard refused a chunk as larger than it serves (`413 too_large`): asking again gets the same answer.
pub(super) fn refused_as_too_large(e: &ApiError) -> bool {
    matches!(e, ApiError::Upstream { detail, .. } if detail.code == "too_large")
}

/// The tops of subtree `p` in every trie that has it.
fn only(tops: &BTreeMap<u32, Tops>, p: u8) -> BTreeMap<u32, letus_verify::Hash> {
    tops.iter()
        .filter_map(|(tid, t)| t.get(p).map(|x| (*tid, x.hash())))
        .collect()
}

/// The block's writes in subtree `p`, in block order (their keys were checked by the split).
fn in_subtree(req: &BlockRequest, p: u8) -> impl Iterator<Item = WriteOp> + '_ {
    req.writes.iter().filter_map(move |w| {
        let key = letus_verify::hex::decode(&w.key)?;
        (KeyPath::of(&key).0[0] == p).then(|| w.clone())
    })
}
