//! What another node needs to take this store's state: snapshot manifests and chunks of a version (SPEC.md §12 of
//! `letus-verify`), and the key changes between two versions (how a node that joined at a snapshot follows the
//! chain). All of it is read from a [`Snapshot`], holding the engine only while a bounded batch is read, so a
//! store serving them keeps committing.

use letus_verify::snapshot::{encode_chunk_record, prefix_of, Chunk, SnapshotItem};

use super::*;

/// The depth of a manifest's first split: the 256 subtrees below the top two levels, each split further while it
/// holds more pairs than asked.
pub const SNAPSHOT_TOP_DEPTH: u8 = 2;

/// The record bytes a snapshot chunk reads at a time.
const VALUE_SLICE_BYTES: u64 = 1 << 20;

/// A key whose value differs between two versions: its new value, or `None` when it is gone.
pub type KeyChange = (Vec<u8>, Option<Vec<u8>>);

impl View<'_> {
    /// Up to `max` leaves of trie `tid` at `version` whose paths start with the first `depth` nibbles of
    /// `prefix` and are above `after` (or from the subtree's first), in path order.
    pub(super) fn leaves_in(
        &self,
        tid: TrieId,
        version: Version,
        depth: u8,
        prefix: &[u8; 32],
        after: Option<&KeyPath>,
        max: usize,
    ) -> Result<Vec<Leaf>> {
        let start = after.copied().or_else(|| before_subtree(prefix));
        let item = SnapshotItem {
            depth,
            prefix: *prefix,
            count: 1,
            hash: EMPTY,
        };
        let mut leaves = Vec::new();
        self.walk_leaves_after(tid, version, start.as_ref(), &mut |leaf| {
            if !item.covers(&leaf.path) {
                return Ok(false);
            }
            leaves.push(*leaf);
            Ok(leaves.len() < max)
        })?;
        Ok(leaves)
    }

    /// Appends to `leaves` the changed leaves of trie `tid` between versions `from` and `to` under child `part`
    /// of the root, in path order (see [`trie::diff::diff_part`]); `false` once there are more than `max` in all.
    /// A trie that does not exist at `from` counts as empty there.
    pub(super) fn change_leaves_part(
        &self,
        tid: TrieId,
        from: Version,
        to: Version,
        part: u8,
        max: usize,
        leaves: &mut Vec<trie::diff::LeafChange>,
    ) -> Result<bool> {
        let new = self.engine.root_page(tid, self.exact(to)?)?;
        let old = match self.engine.root_page(tid, self.exact(from)?) {
            Ok(p) => Some(p),
            Err(Error::UnknownTrie(_)) => None,
            Err(e) => return Err(e),
        };
        // Pages below the roots are compared by their slots, never built.
        trie::diff::diff_part(
            &ScanSource(self.engine),
            tid,
            old.as_deref().map(trie::diff::page_slots),
            Some(trie::diff::page_slots(&new)),
            Some(part),
            max,
            leaves,
        )
    }

    /// Each change as the leaf to read (`true`: present at `to`, else the deleted key's old leaf).
    pub(super) fn change_sides(
        &self,
        leaves: Vec<trie::diff::LeafChange>,
    ) -> Result<Vec<(Leaf, bool)>> {
        leaves
            .into_iter()
            .map(|change| match change {
                (_, Some(n)) => Ok((n, true)),
                (Some(o), None) => Ok((o, false)),
                (None, None) => Err(Error::corrupt(
                    self.engine.dir.join("lsvps"),
                    0,
                    "a trie difference with neither side",
                )),
            })
            .collect::<Result<_>>()
    }
}

/// The path just before the first one of the subtree `prefix` (zeros after its depth), or `None` when that
/// first path is all zeros.
fn before_subtree(prefix: &[u8; 32]) -> Option<KeyPath> {
    let mut p = *prefix;
    for b in p.iter_mut().rev() {
        if *b > 0 {
            *b -= 1;
            return Some(KeyPath(p));
        }
        *b = 0xff;
    }
    None
}

impl Snapshot {
    /// The key and value of `leaf` from its value record `rec`, read without the engine: a record GC deleted
    /// meanwhile is `Pruned` when a prune has passed `version` since (the reader's version is gone), and
    /// `Collected` otherwise.
    fn read_value(
        &self,
        dir: &Path,
        leaf: &Leaf,
        rec: Result<Record>,
        version: Version,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let rec = match rec {
            Err(Error::Collected { .. }) => {
                self.shared.engine().check_not_pruned(version)?;
                return Err(Error::Collected {
                    file_id: leaf.loc.file_id,
                });
            }
            r => r?,
        };
        view::check_value(dir, leaf, rec, None)
    }

    /// The encoded chunk of manifest entry `index` (`depth`, `prefix`) of trie `tid` at `version` (SPEC.md
    /// §12.3), refused with [`Error::ChunkTooLarge`] past `max_bytes`. The server needs no manifest for this:
    /// the receiver checks the chunk against the one it verified.
    pub fn snapshot_chunk(
        &self,
        tid: TrieId,
        version: Version,
        index: u32,
        depth: u8,
        prefix: &[u8; 32],
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        self.digest(tid, version)?;
        let prefix = prefix_of(&KeyPath(*prefix), depth);
        let mut body = Vec::new();
        let mut count = 0u64;
        let mut after: Option<KeyPath> = None;
        // The engine is held while a batch of leaves is found (pages), not while their values are read: the
        // value log's reader is shared without it, so a commit waits at most for one batch's page walk.
        loop {
            let (batch, dir) = self.shared.walk_view(Some(self.version), |v| {
                v.leaves_in(
                    tid,
                    version,
                    depth,
                    &prefix,
                    after.as_ref(),
                    PAIRS_PER_CHUNK,
                )
                .map(|b| (b, v.engine.dir.clone()))
            })?;
            // Read without the engine: a prune may have passed `version` meanwhile and GC deleted the file. The
            // values are read VALUE_SLICE_BYTES of records at a time (or one record), each slice added before the
            // next is read, so that a chunk past `max_bytes` is refused before much more than that is held.
            let mut slice = 0;
            while slice < batch.len() {
                let mut bytes = 0u64;
                let n = batch[slice..]
                    .iter()
                    .take_while(|l| {
                        bytes += u64::from(l.loc.len);
                        bytes <= VALUE_SLICE_BYTES
                    })
                    .count()
                    .max(1);
                let leaves = &batch[slice..slice + n];
                slice += n;
                let locs: Vec<Location> = leaves.iter().map(|l| l.loc).collect();
                for (leaf, rec) in leaves.iter().zip(self.shared.vdls.read_in_order(&locs)) {
                    let (k, val) = self.read_value(&dir, leaf, rec, version)?;
                    encode_chunk_record(&k, &val, &mut body);
                    if body.len() > max_bytes {
                        return Err(Error::ChunkTooLarge {
                            bytes: body.len(),
                            limit: max_bytes,
                        });
                    }
                }
            }
            count += batch.len() as u64;
            match batch.last() {
                Some(l) if batch.len() == PAIRS_PER_CHUNK => after = Some(l.path),
                _ => break,
            }
        }
        let item = SnapshotItem {
            depth,
            prefix,
            count,
            hash: EMPTY,
        };
        let mut out = Chunk::encode_head(tid, version, index, &item, count);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The keys of trie `tid` whose values differ between `from` and `to`, with their values at `to` (`None`:
    /// deleted), in path order. Walks both tries together, skipping every subtree whose hash is unchanged, so the
    /// cost follows the number of changes. A key written with the value it already had is not a change.
    ///
    /// Refused with [`Error::TooManyChanges`] when there are more than `max_changes`, or when the answer's keys
    /// and values take more than `max_bytes` (a key still present counts its whole value-log record, a deleted one
    /// its key): the walk stops at the limit and no new value is read past it. The engine is held for one
    /// sixteenth of the walk at a time (the subtree of one child of the root), not while the values are read.
    pub fn changes(
        &self,
        tid: TrieId,
        from: Version,
        to: Version,
        max_changes: usize,
        max_bytes: u64,
    ) -> Result<Vec<KeyChange>> {
        let too_many = Error::TooManyChanges {
            max_changes,
            max_bytes,
        };
        // One part of the root's 16 children per hold of the engine: a commit waiting to publish (and, behind
        // it, every other reader) waits for one part of the walk, not all of it.
        let mut changed = Vec::new();
        for part in 0..16u8 {
            let complete = self.shared.walk_view(Some(self.version), |v| {
                v.change_leaves_part(tid, from, to, part, max_changes, &mut changed)
            })?;
            if !complete {
                return Err(too_many);
            }
        }
        let (leaves, dir) = self.shared.walk_view(Some(self.version), |v| {
            v.change_sides(changed).map(|l| (l, v.engine.dir.clone()))
        })?;
        // The values at `to` are read together (neighbours in one read); a deleted key's old record only for
        // its key, one at a time, so that an old value the answer does not carry is never held with the others.
        let present: Vec<Location> = leaves
            .iter()
            .filter(|(_, there)| *there)
            .map(|(l, _)| l.loc)
            .collect();
        let mut bytes: u64 = present.iter().map(|l| u64::from(l.len)).sum();
        if bytes > max_bytes {
            return Err(too_many);
        }
        let mut values = self.shared.vdls.read_in_order(&present).into_iter();
        let mut out = Vec::with_capacity(leaves.len());
        for (leaf, there) in &leaves {
            let rec = match there {
                true => values.next().unwrap_or_else(|| {
                    Err(Error::corrupt(
                        &dir,
                        0,
                        "fewer value records than locations",
                    ))
                }),
                false => self.shared.vdls.read(leaf.loc),
            };
            let (k, v) = self.read_value(&dir, leaf, rec, from)?;
            if !there {
                bytes += k.len() as u64;
                if bytes > max_bytes {
                    return Err(too_many);
                }
            }
            out.push((k, there.then_some(v)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use letus_verify::snapshot::Manifest as M;
    use letus_verify::Limits;

    fn store(dir: &Path) -> Store {
        Store::open(dir, Options::default()).unwrap()
    }

    #[test]
    fn a_walk_of_slots_finds_the_leaves_a_walk_of_built_pages_finds() {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        // Pages on disk (a flush), in the MemIndexTable, and in the cache, a lone root leaf in trie 1, and
        // deletes that empty subtrees.
        s.put(1, b"alone", b"v").unwrap();
        for v in 1..=4u64 {
            for i in (0..4000u64).filter(|i| v == 1 || i % 5 == v) {
                s.put(0, &i.to_be_bytes(), &v.to_le_bytes()).unwrap();
            }
            if v == 3 {
                for i in 0..300u64 {
                    s.delete(0, &(i * 7).to_be_bytes()).unwrap();
                }
            }
            s.commit(v).unwrap();
            if v == 2 {
                s.flush().unwrap();
            }
            if v == 3 {
                s.clear_caches();
            }
        }
        let e = s.shared.engine();
        for tid in [0, 1] {
            for version in [1, 3, 4] {
                let root = e.root_page(tid, version).unwrap();
                // The reference: a full walk of built pages (their own path order), which has no start point.
                let mut all = Vec::new();
                trie::walk(&ScanSource(&e), tid, &root, &mut |l| {
                    all.push(*l);
                    Ok(())
                })
                .unwrap();
                assert!(!all.is_empty());
                assert!(all.windows(2).all(|w| w[0].path < w[1].path));
                // From the start, from after each of a spread of leaves and of paths between them, stopping
                // after a few leaves or going to the end.
                let mut starts: Vec<Option<KeyPath>> = vec![None];
                for l in all.iter().step_by(97) {
                    starts.push(Some(l.path));
                    let mut between = l.path;
                    between.0[31] ^= 1;
                    starts.push(Some(between));
                }
                for after in &starts {
                    let rest: Vec<Leaf> = all
                        .iter()
                        .filter(|l| after.is_none_or(|a| l.path > a))
                        .copied()
                        .collect();
                    for max in [1usize, 5, usize::MAX] {
                        let mut out = Vec::new();
                        let done = trie::walk_slots_after(
                            &ScanSource(&e),
                            tid,
                            root.id,
                            root.cells(),
                            after.as_ref(),
                            &mut |l: &Leaf| {
                                out.push(*l);
                                Ok(out.len() < max)
                            },
                        )
                        .unwrap();
                        let expected = &rest[..rest.len().min(max)];
                        assert_eq!(
                            out, expected,
                            "trie {tid} at {version} after {after:?}, max {max}"
                        );
                        assert_eq!(
                            done,
                            rest.len() < max,
                            "trie {tid} at {version} after {after:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn manifest_and_chunks_verify_and_hold_the_state_at_their_version() {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        for i in 0..3000u32 {
            s.put(0, format!("k{i}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        s.commit(1).unwrap();
        for i in 0..500u32 {
            s.put(0, format!("k{i}").as_bytes(), b"changed").unwrap();
        }
        s.commit(2).unwrap();
        let snap = s.snapshot();
        for version in [1u64, 2] {
            let root = snap.digest(0, version).unwrap().root;
            let m = snap
                .snapshot_manifest(0, version, 5, u64::MAX, 1 << 20)
                .unwrap();
            assert!(m.items.len() > 256, "split below depth 2");
            let l = Limits::default();
            let vm = M::decode(&m.encode(), &l)
                .unwrap()
                .verify(0, version, &root)
                .unwrap();
            assert_eq!(vm.pairs(), 3000);
            let mut got = 0u64;
            for (i, it) in vm.items().iter().enumerate() {
                let c = snap
                    .snapshot_chunk(0, version, i as u32, it.depth, &it.prefix, 1 << 20)
                    .unwrap();
                let chunk = vm.verify_chunk(i as u32, &c, &l).unwrap();
                for (k, v) in &chunk.pairs {
                    assert_eq!(snap.get(0, version, k).unwrap().as_deref(), Some(&v[..]));
                }
                got += chunk.pairs.len() as u64;
            }
            assert_eq!(got, 3000);
        }
        let it = snap
            .snapshot_manifest(0, 2, 5, u64::MAX, 1 << 20)
            .unwrap()
            .items[0];
        assert!(matches!(
            snap.snapshot_manifest(0, 2, 1, u64::MAX, 100),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            snap.snapshot_chunk(0, 2, 0, it.depth, &it.prefix, 10),
            Err(Error::ChunkTooLarge { .. })
        ));
    }

    /// Found by review: entries were split by pairs alone, so a subtree of a few large values made an entry whose
    /// chunk every source refused (`ChunkTooLarge`), and a join could never finish.
    #[test]
    fn a_manifest_splits_large_values_into_chunks_a_source_serves() {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        // Keys of one depth-2 subtree (the first byte of their paths), with values of 100 KB, and small keys
        // elsewhere.
        let big: Vec<Vec<u8>> = (0u32..)
            .map(|i| format!("big-{i}").into_bytes())
            .filter(|k| KeyPath::of(k).0[0] == 0x5a)
            .take(12)
            .collect();
        for (i, k) in big.iter().enumerate() {
            s.put(0, k, &vec![i as u8; 100_000]).unwrap();
        }
        for i in 0..2000u32 {
            s.put(0, format!("k{i}").as_bytes(), b"v").unwrap();
        }
        s.commit(1).unwrap();
        let snap = s.snapshot();
        let root = snap.digest(0, 1).unwrap().root;
        let max = 300_000usize;
        // Split by pairs alone, the subtree is one entry whose chunk is refused.
        let by_pairs = snap
            .snapshot_manifest(0, 1, 16_384, u64::MAX, 1 << 20)
            .unwrap();
        assert!(by_pairs.items.iter().any(|it| snap
            .snapshot_chunk(0, 1, 0, it.depth, &it.prefix, max)
            .is_err()));
        let m = snap
            .snapshot_manifest(0, 1, 16_384, max as u64, 1 << 20)
            .unwrap();
        let l = Limits::default();
        let vm = M::decode(&m.encode(), &l)
            .unwrap()
            .verify(0, 1, &root)
            .unwrap();
        assert_eq!(vm.pairs(), 2012);
        let mut got = 0u64;
        for (i, it) in vm.items().iter().enumerate() {
            let c = snap
                .snapshot_chunk(0, 1, i as u32, it.depth, &it.prefix, max)
                .unwrap_or_else(|e| panic!("entry {i} at depth {}: {e}", it.depth));
            got += vm.verify_chunk(i as u32, &c, &l).unwrap().pairs.len() as u64;
        }
        assert_eq!(got, 2012);
    }

    #[test]
    fn changes_are_exactly_the_keys_whose_values_differ() {
        // 400 keys: one or two levels of pages; 20,000 loaded first: child pages two levels down, so the walk
        // compares page references and descends into both versions of a page.
        // 1 and 3 keys: a root page that is a lone leaf, empty, or a branch of leaves from version to version.
        for (keys, preload) in [(1u64, false), (3, false), (400, false), (20_000, true)] {
            changes_match_the_model(keys, preload);
        }
    }

    /// The changes from model state `a` to `b`, in path order.
    fn model_changes(
        a: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
        b: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> Vec<KeyChange> {
        let mut want: Vec<KeyChange> = a
            .keys()
            .chain(b.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| a.get(*k) != b.get(*k))
            .map(|k| (k.clone(), b.get(k).cloned()))
            .collect();
        want.sort_by_key(|(k, _)| KeyPath::of(k));
        want
    }

    /// Found by review: against a trie absent or of one key at `from`, the whole difference was walked in the
    /// first part, in one hold of the engine (a commit waiting to publish waited for all of it).
    #[test]
    fn each_part_of_a_change_walk_holds_its_child_alone_whatever_the_root_was() {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        s.put(0, b"lone", b"1").unwrap();
        s.commit(1).unwrap();
        for i in 0..2000u32 {
            s.put(0, format!("k{i}").as_bytes(), b"v").unwrap();
            s.put(1, format!("k{i}").as_bytes(), b"v").unwrap();
        }
        s.commit(2).unwrap();
        let snap = s.snapshot();
        // Trie 0 was one key at 1, trie 1 did not exist.
        for tid in [0u32, 1] {
            let mut total = 0;
            for part in 0..16u8 {
                let mut leaves = Vec::new();
                assert!(snap
                    .shared
                    .walk_view(Some(snap.version), |v| {
                        v.change_leaves_part(tid, 1, 2, part, usize::MAX, &mut leaves)
                    })
                    .unwrap());
                for (old, new) in &leaves {
                    let l = new.or(*old).unwrap();
                    assert_eq!(l.path.0[0] >> 4, part, "trie {tid}");
                }
                assert!(
                    leaves.len() < 400,
                    "trie {tid} part {part}: {}",
                    leaves.len()
                );
                total += leaves.len();
            }
            assert_eq!(total, 2000, "trie {tid}");
        }
    }

    #[test]
    fn changes_across_root_shapes_and_a_trie_created_later() {
        // Trie 0's root page goes through a lone leaf, a branch, a lone leaf again, empty, and a larger branch;
        // trie 1 first exists at version 3.
        let k = |i: u32| format!("k{i}").into_bytes();
        let states: Vec<Vec<(u32, u32, &[u8])>> = vec![
            vec![(0, 1, b"a")],
            vec![(0, 1, b"a"), (0, 2, b"b"), (0, 3, b"c")],
            vec![(0, 2, b"b"), (1, 7, b"t")],
            vec![(1, 7, b"u")],
            vec![(0, 2, b"x"), (1, 7, b"u")],
            (1..=40)
                .map(|i| (0, i, &b"y"[..]))
                .chain([(1, 8, &b"w"[..])])
                .collect(),
            vec![(0, 5, b"y"), (1, 8, b"w")],
        ];
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        let mut models: Vec<[std::collections::BTreeMap<Vec<u8>, Vec<u8>>; 2]> = Vec::new();
        let mut current: [std::collections::BTreeMap<Vec<u8>, Vec<u8>>; 2] = Default::default();
        for (v, state) in states.iter().enumerate() {
            let mut next: [std::collections::BTreeMap<Vec<u8>, Vec<u8>>; 2] = Default::default();
            for (tid, i, val) in state {
                next[*tid as usize].insert(k(*i), val.to_vec());
            }
            for tid in 0..2u32 {
                for key in current[tid as usize].keys() {
                    if !next[tid as usize].contains_key(key) {
                        s.delete(tid, key).unwrap();
                    }
                }
                for (key, val) in &next[tid as usize] {
                    s.put(tid, key, val).unwrap();
                }
            }
            s.commit(v as u64 + 1).unwrap();
            models.push(next.clone());
            current = next;
        }
        let snap = s.snapshot();
        let n = states.len() as u64;
        for tid in 0..2u32 {
            for from in 1..=n {
                for to in from + 1..=n {
                    let (a, b) = (
                        &models[from as usize - 1][tid as usize],
                        &models[to as usize - 1][tid as usize],
                    );
                    let want = model_changes(a, b);
                    match snap.changes(tid, from, to, usize::MAX, u64::MAX) {
                        Ok(got) => {
                            assert_eq!(got, want, "trie {tid}, {from}..{to}");
                            at_the_limits(&snap, tid, from, to, &want);
                        }
                        // A trie that does not exist at `to` has no state to compare.
                        Err(Error::UnknownTrie(_)) => {
                            assert!(tid == 1 && to < 3, "trie {tid}, {from}..{to}")
                        }
                        Err(e) => panic!("trie {tid}, {from}..{to}: {e}"),
                    }
                }
            }
        }
    }

    fn changes_match_the_model(keys: u64, preload: bool) {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut rng = letus_workload::Rng::new(7);
        let mut states = vec![model.clone()];
        for v in 1..=40u64 {
            if preload && v == 1 {
                for i in 0..keys {
                    let k = format!("key{i}").into_bytes();
                    s.put(0, &k, b"first").unwrap();
                    model.insert(k, b"first".to_vec());
                }
            }
            for _ in 0..(rng.below(60) + 1) {
                let k = format!("key{}", rng.below(keys)).into_bytes();
                match rng.below(10) {
                    0 => {
                        s.delete(0, &k).unwrap();
                        model.remove(&k);
                    }
                    1 => {
                        // A write of the value the key has is not a change.
                        if let Some(old) = model.get(&k).cloned() {
                            s.put(0, &k, &old).unwrap();
                        }
                    }
                    _ => {
                        let val = format!("v{v}-{}", rng.below(1000)).into_bytes();
                        s.put(0, &k, &val).unwrap();
                        model.insert(k, val);
                    }
                }
            }
            s.commit(v).unwrap();
            states.push(model.clone());
        }
        let snap = s.snapshot();
        for (from, to) in [(1u64, 2u64), (5, 6), (1, 40), (39, 40), (10, 30)] {
            let (a, b) = (&states[from as usize], &states[to as usize]);
            let want = model_changes(a, b);
            assert_eq!(
                snap.changes(0, from, to, usize::MAX, u64::MAX).unwrap(),
                want,
                "{keys} keys, {from}..{to}"
            );
            at_the_limits(&snap, 0, from, to, &want);
        }
    }

    #[test]
    fn a_deleted_keys_old_value_does_not_count_against_the_bytes() {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        s.put(0, b"big", &vec![7u8; 100_000]).unwrap();
        s.put(0, b"small", b"v").unwrap();
        s.commit(1).unwrap();
        s.delete(0, b"big").unwrap();
        s.put(0, b"small", b"w").unwrap();
        s.commit(2).unwrap();
        let snap = s.snapshot();
        let want = vec![
            (b"big".to_vec(), None),
            (b"small".to_vec(), Some(b"w".to_vec())),
        ];
        assert_eq!(snap.changes(0, 1, 2, 2, 1_000).unwrap(), want);
        at_the_limits(&snap, 0, 1, 2, &want);
        // Written back, the value counts.
        s.put(0, b"big", &vec![8u8; 100_000]).unwrap();
        s.commit(3).unwrap();
        let snap = s.snapshot();
        assert!(matches!(
            snap.changes(0, 2, 3, 2, 1_000),
            Err(Error::TooManyChanges { .. })
        ));
        assert_eq!(snap.changes(0, 2, 3, 2, 200_000).unwrap().len(), 1);
    }

    /// The changes `want` are given when asked with exactly their number and bytes as limits, and refused when
    /// either limit is one less.
    fn at_the_limits(snap: &Snapshot, tid: TrieId, from: Version, to: Version, want: &[KeyChange]) {
        let records = snap
            .shared
            .walk_view(Some(snap.version), |v| {
                let mut changed = Vec::new();
                for part in 0..16 {
                    assert!(v.change_leaves_part(tid, from, to, part, usize::MAX, &mut changed)?);
                }
                v.change_sides(changed)
            })
            .unwrap();
        // A key still there counts its record; a deleted one its key.
        let bytes: u64 = records
            .iter()
            .zip(want)
            .map(|((l, there), (k, _))| match there {
                true => u64::from(l.loc.len),
                false => k.len() as u64,
            })
            .sum();
        assert_eq!(records.len(), want.len());
        let at = |n: usize, b: u64| snap.changes(tid, from, to, n, b);
        assert_eq!(
            at(want.len(), bytes).unwrap(),
            want,
            "{from}..{to} at the limits"
        );
        if let Some(fewer) = want.len().checked_sub(1) {
            assert!(
                matches!(at(fewer, bytes), Err(Error::TooManyChanges { .. })),
                "{from}..{to}: {fewer} changes allowed of {}",
                want.len()
            );
            assert!(
                matches!(at(want.len(), bytes - 1), Err(Error::TooManyChanges { .. })),
                "{from}..{to}: one byte fewer"
            );
        }
    }
}
