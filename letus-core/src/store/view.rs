//! Reads, proofs, digests, history and full verification over the engine, as of a view's latest version.

use super::*;

/// What reads need, borrowed from the engine's read lock: the engine, the value log's read side, the read pool,
/// and the newest version the reads may see (the latest commit, or a snapshot's version).
pub(super) struct View<'a> {
    pub(super) engine: &'a Engine,
    pub(super) vdls: &'a VdlsReader,
    pub(super) read_pool: &'a rayon::ThreadPool,
    pub(super) latest: Option<Version>,
}

impl View<'_> {
    /// `version` for an as-of read: a version above the view's latest reads the latest.
    pub(super) fn at(&self, version: Version) -> Version {
        self.latest.map_or(version, |l| version.min(l))
    }

    /// `version` for an exact read: it must not be above the view's latest.
    pub(super) fn exact(&self, version: Version) -> Result<Version> {
        match self.latest {
            Some(l) if version <= l => {
                self.engine.check_not_before_oldest(version)?;
                Ok(version)
            }
            _ => Err(Error::VersionNotFound(version)),
        }
    }

    pub(super) fn oldest_version(&self) -> Option<Version> {
        self.latest.and(self.engine.versions.first().copied())
    }

    pub(super) fn latest_version(&self) -> Option<Version> {
        self.latest
    }

    pub(super) fn has_version(&self, version: Version) -> bool {
        self.exact(version).is_ok() && self.engine.versions.binary_search(&version).is_ok()
    }

    pub(super) fn versions(&self) -> Vec<Version> {
        let n = self
            .latest
            .map_or(0, |l| self.engine.versions.partition_point(|v| *v <= l));
        self.engine.versions[..n].to_vec()
    }

    pub(super) fn tries(&self) -> Vec<TrieId> {
        self.engine
            .tries
            .iter()
            .filter(|(_, t)| {
                t.versions
                    .first()
                    .is_some_and(|v| self.latest.is_some_and(|l| *v <= l))
            })
            .map(|(tid, _)| *tid)
            .collect()
    }

    /// The value of `key` in trie `tid` as of `version` (the newest commit at or below it).
    pub(super) fn get(&self, tid: TrieId, version: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Counters::add(&self.engine.counters.gets, 1);
        let version = self.at(version);
        let path = KeyPath::of(key);
        let at_latest = self.is_engine_latest(version);
        if at_latest {
            if let Some(value) = self.latest_value(tid, &path, key) {
                return Ok(Some(value));
            }
        }
        let root = self.engine.root_page(tid, version)?;
        match trie::get(self.engine, tid, &root, &path)? {
            Some(leaf) => {
                let value = self.read_value(&leaf, Some(key))?.1;
                if at_latest {
                    self.engine.latest.remember(tid, &path, leaf.loc);
                }
                Ok(Some(value))
            }
            None => Ok(None),
        }
    }

    /// Whether `version` is the engine's newest: the latest-value index describes that version only (a commit
    /// cannot publish a newer one while this view holds the engine).
    fn is_engine_latest(&self, version: Version) -> bool {
        self.engine.versions.last() == Some(&version)
    }

    /// The value of `key` through the latest-value index: one value record read, used only when it is a Put of
    /// this very key in this trie (see `latest_index.rs` for why that makes it the newest). `None`: not in the
    /// index, another key's record, or a record that could not be read; the caller walks the trie.
    fn latest_value(&self, tid: TrieId, path: &KeyPath, key: &[u8]) -> Option<Vec<u8>> {
        let loc = self.engine.latest.get(tid, path)?;
        match self.vdls.read(loc) {
            Ok(Record::Put {
                tid: t,
                key: k,
                value,
                ..
            }) if t == tid && k == key => {
                Counters::add(&self.engine.counters.latest_index_hits, 1);
                Some(value)
            }
            _ => None,
        }
    }

    /// The value of `key` at the latest version.
    pub(super) fn get_latest(&self, tid: TrieId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.latest_version().ok_or(Error::UnknownTrie(tid))?;
        self.get(tid, v, key)
    }

    /// The values of many keys (a block's access list) at `version`, loading pages and values in parallel.
    pub(super) fn get_many(
        &self,
        tid: TrieId,
        version: Version,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let version = self.at(version);
        let root = self.engine.root_page(tid, version)?;
        Counters::add(&self.engine.counters.gets, keys.len() as u64);
        let at_latest = self.is_engine_latest(version);
        // Keys the latest-value index answers first (each one value read, in flight at once), then pages for
        // the rest, then their values, each fetched by many reads in flight at once on the read pool.
        let (known, leaves, records) = self.read_pool.install(|| -> Result<_> {
            let known: Vec<Option<Vec<u8>>> = keys
                .par_iter()
                .map(|k| {
                    at_latest
                        .then(|| self.latest_value(tid, &KeyPath::of(k), k))
                        .flatten()
                })
                .collect();
            let leaves: Vec<Option<Leaf>> = keys
                .par_iter()
                .zip(&known)
                .map(|(k, known)| match known {
                    Some(_) => Ok(None),
                    None => trie::get(self.engine, tid, &root, &KeyPath::of(k)),
                })
                .collect::<Result<_>>()?;
            let locs: Vec<Location> = leaves.iter().flatten().map(|l| l.loc).collect();
            Ok((known, leaves, self.vdls.read_many(&locs)))
        })?;
        let mut records = records.into_iter();
        let mut out = Vec::with_capacity(keys.len());
        for ((leaf, key), known) in leaves.iter().zip(keys).zip(known) {
            match (leaf, known) {
                (_, Some(value)) => out.push(Some(value)),
                (Some(l), None) => {
                    let rec = records
                        .next()
                        .ok_or_else(|| Error::corrupt(&self.engine.dir, 0, "missing record"))??;
                    out.push(Some(self.check_value(l, rec, Some(key))?.1));
                    if at_latest {
                        self.engine.latest.remember(tid, &l.path, l.loc);
                    }
                }
                (None, None) => out.push(None),
            }
        }
        Ok(out)
    }

    pub(super) fn read_value(&self, leaf: &Leaf, key: Option<&[u8]>) -> Result<(Vec<u8>, Vec<u8>)> {
        let rec = self.vdls.read(leaf.loc)?;
        self.check_value(leaf, rec, key)
    }

    /// Checks that a value record is the one the leaf names: same key path, same value hash.
    pub(super) fn check_value(
        &self,
        leaf: &Leaf,
        rec: Record,
        key: Option<&[u8]>,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        check_value(&self.engine.dir, leaf, rec, key)
    }

    /// The value of `key` at `version` and its inclusion or exclusion proof (SPEC.md §5).
    pub(super) fn get_proof(
        &self,
        tid: TrieId,
        version: Version,
        key: &[u8],
    ) -> Result<(Option<Vec<u8>>, Proof)> {
        let (mut values, proof) = self.get_multi_proof(tid, version, &[key])?;
        Ok((values.pop().flatten(), proof))
    }

    /// The values of `keys` at `version` and one multi-proof for all of them.
    pub(super) fn get_multi_proof(
        &self,
        tid: TrieId,
        version: Version,
        keys: &[&[u8]],
    ) -> Result<(Vec<Option<Vec<u8>>>, Proof)> {
        // One key needs no read pool: handing a single read to other threads only adds latency.
        let values = match keys {
            [one] => vec![self.get(tid, version, one)?],
            _ => self.get_many(tid, version, keys)?,
        };
        let root = self.engine.root_page(tid, self.at(version))?;
        let mut paths: Vec<KeyPath> = keys.iter().map(|k| KeyPath::of(k)).collect();
        paths.sort();
        paths.dedup();
        let proof = trie::prove(self.engine, tid, &root, &paths)?;
        Ok((values, proof))
    }

    pub(super) fn subtree_tops(
        &self,
        tid: TrieId,
        version: Version,
    ) -> Result<Option<crate::shard::Tops>> {
        let version = self.exact(version)?;
        let exists = self
            .engine
            .tries
            .get(&tid)
            .is_some_and(|t| t.index_at(version).is_some());
        if !exists {
            return Ok(None);
        }
        let root = self.engine.root_page(tid, version)?;
        Ok(Some(crate::shard::Tops::of_root_page(&root)))
    }

    /// The digest of trie `tid` at exactly the committed `version`.
    pub(super) fn digest(&self, tid: TrieId, version: Version) -> Result<Digest> {
        self.engine.digest(tid, self.exact(version)?)
    }

    /// Digests of every trie at the latest version.
    pub(super) fn latest_digests(&self) -> Result<Vec<Digest>> {
        match self.latest_version() {
            Some(v) => self
                .tries()
                .into_iter()
                .map(|t| self.engine.digest(t, v))
                .collect(),
            None => Ok(Vec::new()),
        }
    }

    /// Proof that trie `tid`'s entry at `version` is in its history as of `at` (SPEC.md §8.2).
    pub(super) fn history_inclusion_proof(
        &self,
        tid: TrieId,
        version: Version,
        at: Version,
    ) -> Result<InclusionProof> {
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let base = t.history.base();
        let i = base + self.engine.exact_index(t, self.exact(version)?)? as u64;
        let n = base + self.engine.exact_index(t, self.exact(at)?)? as u64 + 1;
        t.history
            .inclusion_proof(i, n)
            .ok_or(Error::VersionNotFound(version))
    }

    /// Proof that trie `tid`'s history at `from` is a prefix of its history at `to` (SPEC.md §8.3).
    pub(super) fn history_consistency_proof(
        &self,
        tid: TrieId,
        from: Version,
        to: Version,
    ) -> Result<ConsistencyProof> {
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let base = t.history.base();
        let m = base + self.engine.exact_index(t, self.exact(from)?)? as u64 + 1;
        let n = base + self.engine.exact_index(t, self.exact(to)?)? as u64 + 1;
        t.history
            .consistency_proof(m, n)
            .ok_or(Error::VersionNotFound(from))
    }

    /// The frontier of trie `tid`'s history just before its entry at `version` (size and peaks, SPEC.md §8): what
    /// a store that imports the state of `version` needs ([`Store::set_history_base`]) so that its digests carry
    /// this store's history commitment.
    pub(super) fn history_frontier(&self, tid: TrieId, version: Version) -> Result<Frontier> {
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = t.history.base() + self.engine.exact_index(t, self.exact(version)?)? as u64;
        t.history
            .frontier_at(i)
            .map_err(|e| Error::InvalidHistoryBase(e.to_string()))
    }

    /// Full verification: reads every value of trie `tid` at `version`, recomputes every node hash up to the root,
    /// checks every stored page hash on the way, and compares the root with `comm`. The first mismatch is reported
    /// as an error naming where it is.
    pub(super) fn verify_full(
        &self,
        tid: TrieId,
        version: Version,
        comm: &Hash,
    ) -> Result<FullVerification> {
        self.verify_full_with_progress(tid, version, comm, &mut |_| {})
    }

    /// [`Store::verify_full`], calling `progress` with the number of keys verified so far (every 4096 keys and
    /// at the end).
    pub(super) fn verify_full_with_progress(
        &self,
        tid: TrieId,
        version: Version,
        comm: &Hash,
        progress: &mut dyn FnMut(u64),
    ) -> Result<FullVerification> {
        let root = self.engine.root_page(tid, self.at(version))?;
        let mut stats = FullVerification {
            root: EMPTY,
            keys: 0,
            pages: 0,
        };
        let computed = self.verify_page(tid, &root, &mut stats, progress)?;
        progress(stats.keys);
        if computed != *comm {
            return Err(Error::Mismatch {
                at: format!("root of trie {tid} at version {version}"),
                expected: *comm,
                computed,
            });
        }
        stats.root = computed;
        Ok(stats)
    }

    /// Up to `max` pairs of trie `tid` at `version` whose paths are above `after`, in path order.
    pub(super) fn pairs_after(
        &self,
        tid: TrieId,
        version: Version,
        after: Option<&KeyPath>,
        max: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut leaves = Vec::new();
        self.walk_leaves_after(tid, version, after, &mut |leaf| {
            leaves.push(*leaf);
            Ok(leaves.len() < max)
        })?;
        self.read_values(&leaves)
    }

    /// Calls `f` for every leaf of trie `tid` at `version` whose path is above `after` (all without it), in path
    /// order, until `f` returns `false`; returns whether the walk went to the end. Pages are read as slots
    /// through the scan source: none is built or added to the cache.
    pub(super) fn walk_leaves_after(
        &self,
        tid: TrieId,
        version: Version,
        after: Option<&KeyPath>,
        f: &mut dyn FnMut(&Leaf) -> Result<bool>,
    ) -> Result<bool> {
        let root = self.engine.root_page(tid, self.at(version))?;
        trie::walk_slots_after(
            &ScanSource(self.engine),
            tid,
            root.id,
            root.cells(),
            after,
            f,
        )
    }

    /// The key and value of each leaf, read with few reads ([`VdlsReader::read_in_order`]) and each checked
    /// against its leaf.
    pub(super) fn read_values(&self, leaves: &[Leaf]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let locs: Vec<Location> = leaves.iter().map(|l| l.loc).collect();
        leaves
            .iter()
            .zip(self.vdls.read_in_order(&locs))
            .map(|(leaf, rec)| self.check_value(leaf, rec?, None))
            .collect()
    }

    /// Recomputes the hash of a leaf from its value record.
    pub(super) fn verify_leaf(
        &self,
        l: &Leaf,
        stats: &mut FullVerification,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Hash> {
        let rec = self.vdls.read(l.loc)?;
        let Record::Put { key, value, .. } = rec else {
            return Err(Error::corrupt(
                self.engine.dir.join("vdls"),
                l.loc.offset,
                "leaf points at a non-put record",
            ));
        };
        let path = KeyPath::of(&key);
        let computed = leaf_hash(&path, &value_hash(&value));
        if computed != l.hash() || path != l.path {
            return Err(Error::Mismatch {
                at: format!(
                    "leaf of key {} (value record at file {} offset {})",
                    letus_verify::hex::encode(&key),
                    l.loc.file_id,
                    l.loc.offset
                ),
                expected: l.hash(),
                computed,
            });
        }
        stats.keys += 1;
        if stats.keys.is_multiple_of(4096) {
            progress(stats.keys);
        }
        Ok(computed)
    }

    /// Recomputes the hash of `page` from the values below it, checking every child page's stored hash.
    pub(super) fn verify_page(
        &self,
        tid: TrieId,
        page: &Page,
        stats: &mut FullVerification,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Hash> {
        stats.pages += 1;
        match page.root() {
            Root::Empty => return Ok(EMPTY),
            Root::Leaf(l) => return self.verify_leaf(l, stats, progress),
            Root::Branch => {}
        }
        let mut children = [EMPTY; 16];
        for (c, h) in children.iter_mut().enumerate() {
            let c = c as u8;
            *h = match page.child(c) {
                Child::Empty => EMPTY,
                Child::Leaf(l) => self.verify_leaf(l, stats, progress)?,
                Child::Branch(_) => {
                    let mut grand = [EMPTY; 16];
                    for (slot, cell) in page.grandchildren(c) {
                        let (_, g) = trie::slot_nibbles(*slot);
                        grand[usize::from(g)] = match cell {
                            Cell::Leaf(l) => self.verify_leaf(l, stats, progress)?,
                            Cell::Page { hash, version } => {
                                let id = page.id.child(c, g);
                                let child = self.engine.load(tid, id, *version)?;
                                let computed = self.verify_page(tid, &child, stats, progress)?;
                                if computed != *hash {
                                    return Err(Error::Mismatch {
                                        at: format!(
                                            "page at depth {} (prefix {}) version {version}",
                                            id.depth,
                                            letus_verify::hex::encode(
                                                &id.prefix[..usize::from(id.depth) / 2]
                                            )
                                        ),
                                        expected: *hash,
                                        computed,
                                    });
                                }
                                computed
                            }
                        };
                    }
                    letus_verify::fold::fold(&grand)
                }
            };
        }
        Ok(letus_verify::fold::fold(&children))
    }

    /// The writes of `key` in trie `tid` (newest first): every Put, and every Delete of the key while it existed,
    /// walking the value log's back-links from the key's leaf at the latest version, or from its Delete record
    /// when it is deleted now. A Put of the value the key already had is a write and is listed; a delete of an
    /// absent key writes nothing and is not.
    ///
    /// At most `limit` entries. `before` continues an earlier answer: pass its [`HistoryPage::next`] to get the
    /// entries older than the last one it returned. Anything else that is not the version of one of the key's
    /// entries is [`Error::InvalidCursor`].
    pub(super) fn history(
        &self,
        tid: TrieId,
        key: &[u8],
        before: Option<Version>,
        limit: usize,
    ) -> Result<HistoryPage> {
        self.history_within(tid, key, before, limit, u64::MAX)
    }

    /// [`Self::history`] that also ends the page before an entry whose record would take the records read past
    /// `max_bytes` (at least one entry is read): a key rewritten often with large values answers in pages of
    /// bounded size, each with its cursor.
    pub(super) fn history_within(
        &self,
        tid: TrieId,
        key: &[u8],
        before: Option<Version>,
        limit: usize,
        max_bytes: u64,
    ) -> Result<HistoryPage> {
        let path = KeyPath::of(key);
        // Of a pruned store: the entries above the boundary, then the one that holds the key's state at it (a
        // write at or below it); older entries are pruned history.
        let boundary = self.engine.pruned_below;
        if let (Some(u), Some(b)) = (before, boundary) {
            if u <= b {
                return Err(Error::Pruned {
                    version: u,
                    oldest: b,
                });
            }
        }
        // A snapshot pinned below a boundary raised after it was taken: its version's history is pruned too.
        if let (None, Some(b), Some(l)) = (before, boundary, self.latest) {
            if l < b {
                return Err(Error::Pruned {
                    version: l,
                    oldest: b,
                });
            }
        }
        let start = match before {
            // From the key's state at the engine's newest version; a snapshot pinned below it skips the entries
            // written after its version (few: only those since the snapshot was taken).
            None => {
                let newest = self.engine.versions.last().copied();
                let (mut start, mut skip) = match self.engine.latest_leaf(tid, &path)? {
                    Some(leaf) => (Some(leaf.loc), self.latest < Some(leaf.version)),
                    None => (
                        self.engine.tombstones.get(&(tid, path)).copied(),
                        self.latest < newest,
                    ),
                };
                // Only a snapshot older than the newest version reads records to skip them.
                while let (true, Some(loc)) = (skip, start) {
                    let rec = self.vdls.read(loc)?;
                    if self.latest.is_some_and(|l| rec.version() <= l) {
                        skip = false;
                    } else {
                        start = rec.prev();
                    }
                }
                start
            }
            Some(u) => self.history_link_before(
                tid,
                key,
                &path,
                self.exact(u).map_err(|_| Error::InvalidCursor(u))?,
            )?,
        };
        let Some(start) = start else {
            return Ok(HistoryPage {
                entries: Vec::new(),
                next: None,
            });
        };
        let mut recs = self
            .vdls
            .history_down_to(start, limit, boundary, max_bytes)?;
        if let Some(b) = boundary {
            if let Some(i) = recs.iter().position(|(_, r)| r.version() <= b) {
                recs.truncate(i + 1);
            }
        }
        let more = recs.last().is_some_and(|(_, r)| r.prev().is_some());
        let mut entries = Vec::with_capacity(recs.len());
        for (loc, rec) in recs {
            match rec {
                Record::Put {
                    version,
                    key: k,
                    value,
                    ..
                } if k == key => entries.push(HistoryEntry {
                    version,
                    value: Some(value),
                }),
                Record::Delete {
                    version, key: k, ..
                } if k == key => entries.push(HistoryEntry {
                    version,
                    value: None,
                }),
                _ => {
                    return Err(Error::corrupt(
                        self.engine.dir.join("vdls"),
                        loc.offset,
                        "history link leads to another key",
                    ))
                }
            }
        }
        let next = if more {
            entries.last().map(|e| e.version)
        } else {
            None
        };
        Ok(HistoryPage { entries, next })
    }

    /// The record before `key`'s entry at version `u`, found from the tries (never from anything the caller
    /// supplies but `u`): a Put at `u` is the leaf at `u` and names its predecessor; a Delete at `u` is the key
    /// being absent at `u` and present at the commit before, whose leaf is exactly the Delete's predecessor.
    pub(super) fn history_link_before(
        &self,
        tid: TrieId,
        key: &[u8],
        path: &KeyPath,
        u: Version,
    ) -> Result<Option<Location>> {
        let invalid = || Error::InvalidCursor(u);
        let t = self.engine.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = self.engine.exact_index(t, u).map_err(|_| invalid())?;
        let leaf_at = |v: Version| -> Result<Option<Leaf>> {
            let root = self.engine.root_page(tid, v)?;
            trie::get(self.engine, tid, &root, path)
        };
        match leaf_at(u)? {
            Some(leaf) if leaf.version == u => {
                let rec = self.vdls.read(leaf.loc)?;
                let prev = rec.prev();
                self.check_value(&leaf, rec, Some(key))?;
                Ok(prev)
            }
            Some(_) => Err(invalid()),
            None => {
                let before = i.checked_sub(1).ok_or_else(invalid)?;
                // The state just before `u`; when that version is below the boundary (`u` is above it), the
                // state at the boundary is the same one and is not pruned.
                let at = t.versions[before].max(self.engine.pruned_below.unwrap_or(0));
                match leaf_at(at)? {
                    Some(leaf) => Ok(Some(leaf.loc)),
                    None => Err(invalid()),
                }
            }
        }
    }
}

/// Checks that a value record is the one `leaf` names (same key path, same value hash); `dir` is the store's, for
/// the error. Used by readers that read values without holding the engine.
pub(super) fn check_value(
    dir: &Path,
    leaf: &Leaf,
    rec: Record,
    key: Option<&[u8]>,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let where_ = || dir.join("vdls");
    match rec {
        Record::Put { key: k, value, .. } => {
            // With the key asked for, byte equality is the check (its path led to this leaf); without it the
            // record's key must hash to the leaf's path.
            let wrong = match key {
                Some(key) => key != k.as_slice(),
                None => KeyPath::of(&k) != leaf.path,
            };
            if wrong {
                return Err(Error::corrupt(
                    where_(),
                    leaf.loc.offset,
                    "value record belongs to another key",
                ));
            }
            if value_hash(&value) != leaf.value_hash {
                return Err(Error::corrupt(
                    where_(),
                    leaf.loc.offset,
                    "value record does not match the hash in its leaf",
                ));
            }
            Ok((k, value))
        }
        _ => Err(Error::corrupt(
            where_(),
            leaf.loc.offset,
            "leaf points at a record that is not a put",
        )),
    }
}
