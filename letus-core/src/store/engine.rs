//! The engine: the versioned page store over LSVPS (MemIndexTable, index files, caches, the Base/Delta
//! schedule), the trie states, the roots and tombstone logs; it plans commits, publishes them and flushes.

use super::*;

/// The Base/Delta schedule of one page since the last flush.
pub(super) struct PageState {
    /// The page's newest stored record (key version and kind).
    pub(super) last: (Version, PageKind),
    /// Slot updates since the last BasePage.
    pub(super) since_base: u32,
    /// Stored records from `last` back to its BasePage, both included.
    pub(super) chain: u32,
    /// The DeltaPage still growing in the MemIndexTable, if any.
    pub(super) active: Option<ActiveDelta>,
}

/// How a page write continues its DeltaPage chain.
enum Start {
    /// Appends to the active DeltaPage.
    Extend,
    /// A new DeltaPage after this record.
    Delta((Version, PageKind)),
    /// A rebase DeltaPage after this record, relative to the BasePage at this version, with these slots.
    Rebase((Version, PageKind), Version, Vec<page::Change>),
}

/// Pages with at least this many slots are tracked for rebase DeltaPages (a BasePage of fewer costs little).
pub(super) const REBASE_MIN_CELLS: usize = 32;
/// A rebase DeltaPage is written while the slots changed since the BasePage are under this share (numerator,
/// denominator) of the page's slots; past it, a BasePage. A rebase costs about its changed slots; measured on the
/// 10M-account payment chain (docs/BENCHMARKS.md), 5/10 wrote 534 bytes an update and 530 disk bytes a key,
/// 3/10 538 and 554.
const REBASE_MAX_SHARE: (usize, usize) = (5, 10);

/// What a large page changed since its BasePage (see `Engine::rebases`).
pub(super) struct Rebase {
    /// The BasePage's version.
    pub(super) base: Version,
    /// Every slot changed since it.
    pub(super) slots: SlotSet,
}

/// A set of slot numbers (`0..=MAX_SLOT`).
#[derive(Clone, Copy, Default)]
pub(super) struct SlotSet([u64; 5]);

impl SlotSet {
    fn insert(&mut self, s: page::SlotNo) {
        let s = usize::from(s.min(page::MAX_SLOT));
        self.0[s / 64] |= 1 << (s % 64);
    }
    fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    fn iter(&self) -> impl Iterator<Item = page::SlotNo> + '_ {
        (0..=page::MAX_SLOT).filter(|&s| self.0[usize::from(s) / 64] & (1 << (s % 64)) != 0)
    }
}

/// The DeltaPage still growing in the MemIndexTable (its bytes live only there).
pub(super) struct ActiveDelta {
    pub(super) first_version: Version,
    pub(super) updates: u32,
}

pub(super) type PageCache =
    quick_cache::sync::Cache<(TrieId, PageId, Version), Arc<Page>, PageWeighter>;

#[derive(Clone)]
pub(super) struct PageWeighter;

impl quick_cache::Weighter<(TrieId, PageId, Version), Arc<Page>> for PageWeighter {
    fn weight(&self, _: &(TrieId, PageId, Version), page: &Arc<Page>) -> u64 {
        u64::from(page.weight()).max(1)
    }
}

/// Everything but the value log: LSVPS, caches, trie states. Split from [`Store`] so that recovery can replay
/// the value log into it.
pub(super) struct Engine {
    pub(super) dir: PathBuf,
    pub(super) opts: Options,
    /// The MemIndexTable's share of the memory budget: it is flushed when it holds more.
    pub(super) memtable_limit: usize,
    pub(super) counters: Arc<Counters>,
    pub(super) files: Vec<Arc<IndexFile>>,
    pub(super) mem: MemIndexTable,
    pub(super) mem_min_version: Option<Version>,
    /// The MemIndexTable being written as the next index file, if any.
    pub(super) flushing: Option<Flushing>,
    pub(super) next_file_no: u64,
    pub(super) block_cache: Arc<BlockCache>,
    pub(super) page_cache: PageCache,
    /// Where each key's newest value record is (a cache; see `latest_index.rs`).
    pub(super) latest: LatestIndex,
    pub(super) pages: HashMap<(TrieId, PageId), PageState>,
    /// For the large pages whose BasePage this store wrote since it was opened: that BasePage's version and the
    /// slots changed since, so that a full chain can be restarted by a rebase DeltaPage instead of a BasePage.
    /// One entry per large page (at least `REBASE_MIN_CELLS` slots), so a few bytes a key at most.
    pub(super) rebases: HashMap<(TrieId, PageId), Rebase>,
    pub(super) tries: BTreeMap<TrieId, TrieState>,
    pub(super) versions: Vec<Version>,
    pub(super) roots_log: RootsLog,
    /// Keys deleted at the latest version, with their Delete records: a later Put links to it.
    pub(super) tombstones: Tombstones,
    /// `None` only while `open` rebuilds the table of a store written without the log.
    pub(super) tombstone_log: Option<TombstoneLog>,
    /// Versions below this one are pruned (`prune_manifest`): reads, proofs and history there answer `Pruned`
    /// (their pages are gone, or will be at the next prune).
    pub(super) pruned_below: Option<Version>,
    /// The last version of the newest base file (`prune_manifest`), at most `pruned_below`: where the next
    /// incremental prune starts.
    pub(super) base_boundary: Option<Version>,
    /// How many of `files`, from the first, are base files of prunes (`prune_manifest`).
    pub(super) base_files: usize,
    /// Trie-update and publish time of the commits since the last flush: what a recovery would replay
    /// ([`Options::max_replay_millis`]).
    pub(super) unflushed_work: std::time::Duration,
}

/// A change to the tombstone table made by one commit: `Some(loc)` for a key deleted by the Delete record at
/// `loc`, `None` for a key put.
pub(super) type TombstoneChange = (TrieId, KeyPath, Option<Location>);

/// Applies one commit's tombstone changes to the table and, when given, logs the ones that change it.
pub(super) fn apply_tombstones(
    table: &mut Tombstones,
    mut log: Option<&mut TombstoneLog>,
    version: Version,
    changes: Vec<TombstoneChange>,
) {
    for (tid, path, loc) in changes {
        match loc {
            Some(loc) => {
                table.insert((tid, path), loc);
                if let Some(log) = log.as_deref_mut() {
                    log.set(version, tid, &path, loc);
                }
            }
            None => {
                if table.remove(&(tid, path)).is_some() {
                    if let Some(log) = log.as_deref_mut() {
                        log.clear(version, tid, &path);
                    }
                }
            }
        }
    }
}

/// Where the records of a version are looked up.
pub(super) enum Segment<'a> {
    File(&'a Arc<IndexFile>),
    Table(&'a MemIndexTable),
}

/// A computed but not yet published commit.
pub(super) struct Plan {
    pub(super) version: Version,
    pub(super) tries: Vec<(TrieId, Updated)>,
    /// What the commit's records change in the tombstone table (filled in by the caller, who has the records).
    pub(super) tombstones: Vec<TombstoneChange>,
    /// Every key the commit writes, with its new value record (`None`: deleted), for the latest-value index.
    pub(super) latest: Vec<(TrieId, KeyPath, Option<Location>)>,
}

impl PageSource for Engine {
    fn load(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>> {
        let key = (tid, id, version);
        // Single-flight: readers that miss the same page at once (a parallel access list starts with all of them
        // missing the root and the pages under it) wait for one read instead of each reading it. A load that
        // fails drops its guard, and a waiter reads for itself. `read_page` never runs rayon work, so the
        // thread holding a guard cannot pick up a task that waits for that same guard.
        let guard = match self.page_cache.get_value_or_guard(&key, None) {
            quick_cache::sync::GuardResult::Value(p) => {
                Counters::add(&self.counters.page_cache_hits, 1);
                return Ok(p);
            }
            quick_cache::sync::GuardResult::Guard(g) => Some(g),
            quick_cache::sync::GuardResult::Timeout => None,
        };
        Counters::add(&self.counters.page_cache_misses, 1);
        let page = Arc::new(self.read_page(tid, id, version)?);
        match guard {
            // A commit may have replaced the placeholder meanwhile; its page is as good as this one.
            Some(g) => drop(g.insert(page.clone())),
            None => self.page_cache.insert(key, page.clone()),
        }
        Ok(page)
    }

    fn take(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>> {
        if let Some((_, p)) = self.page_cache.remove(&(tid, id, version)) {
            Counters::add(&self.counters.page_cache_hits, 1);
            return Ok(p);
        }
        Counters::add(&self.counters.page_cache_misses, 1);
        Ok(Arc::new(self.read_page(tid, id, version)?))
    }

    fn give_back(&self, tid: TrieId, page: Arc<Page>) {
        self.page_cache.insert((tid, page.id, page.version), page);
    }
}

/// The engine as a page source for walks over the whole state (snapshot manifests and chunks, the changes
/// between versions): pages in the cache are used, pages read from disk are not added to it. A walk of millions
/// of pages would otherwise push out the pages the commits need (at 10M keys a snapshot walk made the source's
/// commits three times slower).
pub(super) struct ScanSource<'a>(pub(super) &'a Engine);

/// What [`Engine::read_slots`] read.
pub(super) struct ReadSlots {
    /// The page's slots at the version asked for.
    pub(super) slots: Vec<(page::SlotNo, Cell)>,
    pub(super) head: Head,
    /// The key of the newest record at or below that version.
    pub(super) head_key: PageKey,
    /// The file it was read from.
    pub(super) path: PathBuf,
}

impl PageSource for ScanSource<'_> {
    fn load(&self, tid: TrieId, id: PageId, version: Version) -> Result<Arc<Page>> {
        if let Some(p) = self.0.page_cache.get(&(tid, id, version)) {
            Counters::add(&self.0.counters.page_cache_hits, 1);
            return Ok(p);
        }
        Counters::add(&self.0.counters.page_cache_misses, 1);
        Ok(Arc::new(self.0.read_page(tid, id, version)?))
    }
}

/// A page's slots as [`ScanSource`] reads them: from the page cache, or read from disk without building the page
/// (with the key version of the page's newest record at or below the version asked for).
pub(super) enum ScanSlots {
    Cached(Arc<Page>),
    Read(Vec<(page::SlotNo, Cell)>, Version),
}

impl ScanSlots {
    /// The key version of the page's newest record at or below its version, when known without a lookup.
    pub(super) fn head_version(&self) -> Option<Version> {
        match self {
            ScanSlots::Cached(p) => p.head.map(|h| h.key_version),
            ScanSlots::Read(_, v) => Some(*v),
        }
    }
}

impl std::ops::Deref for ScanSlots {
    type Target = [(page::SlotNo, Cell)];

    fn deref(&self) -> &Self::Target {
        match self {
            ScanSlots::Cached(p) => p.cells(),
            ScanSlots::Read(v, _) => v,
        }
    }
}

impl trie::SlotSource for ScanSource<'_> {
    type Slots = ScanSlots;

    fn slots(&self, tid: TrieId, id: PageId, version: Version) -> Result<ScanSlots> {
        if let Some(p) = self.0.page_cache.get(&(tid, id, version)) {
            Counters::add(&self.0.counters.page_cache_hits, 1);
            return Ok(ScanSlots::Cached(p));
        }
        Counters::add(&self.0.counters.page_cache_misses, 1);
        let read = self.0.read_slots(tid, id, version)?;
        Ok(ScanSlots::Read(read.slots, read.head_key.version))
    }
}

impl Engine {
    /// Where records of `version` live: an index file, the table being flushed, or the MemIndexTable. Every
    /// record of index file `k` has its version in `(max_version of file k-1, max_version of file k]`, the frozen
    /// table's come after the last file's, the MemIndexTable's after those.
    pub(super) fn segment(&self, version: Version) -> Segment<'_> {
        let i = self
            .files
            .partition_point(|f| f.meta().max_version < version);
        match (self.files.get(i), &self.flushing) {
            (Some(f), _) => Segment::File(f),
            (None, Some(fl)) if version <= fl.max_version => Segment::Table(&fl.table),
            (None, _) => Segment::Table(&self.mem),
        }
    }

    /// The newest record of `key`'s page at or below its version, where it was read, and the rest of its chain
    /// when the index file holds all of it ([`IndexFile::floor_with_chain`]).
    #[allow(clippy::type_complexity)]
    pub(super) fn floor(
        &self,
        key: &PageKey,
    ) -> Result<Option<(PageKey, Vec<u8>, PathBuf, Vec<(PageKey, Vec<u8>)>)>> {
        match self.segment(key.version) {
            Segment::File(f) => Ok(f
                .floor_with_chain(key)?
                .map(|(k, v, chain)| (k, v, f.path().to_path_buf(), chain))),
            Segment::Table(t) => Ok(t
                .floor(key)
                .map(|(k, v)| (k, v.to_vec(), self.dir.join("lsvps/memtable"), Vec::new()))),
        }
    }

    /// The key of the newest record of `key`'s page at or below its version, without reading the record.
    pub(super) fn floor_key(&self, key: &PageKey) -> Result<Option<PageKey>> {
        match self.segment(key.version) {
            Segment::File(f) => Ok(f.locate(key)?.map(|e| e.key)),
            Segment::Table(t) => Ok(t.floor(key).map(|(k, _)| k)),
        }
    }

    /// The key under which the record named `key` is stored. A base file of
    /// [`crate::lsvps::index_file::BASES_ONLY_VERSION`] answers a DeltaPage key with the BasePage of the same
    /// version that stands for it there (FORMAT.md §2.9): the page's state at the base file's boundary, which is
    /// what a later record naming that DeltaPage continues from.
    pub(super) fn stored_key(&self, key: &PageKey) -> PageKey {
        match self.segment(key.version) {
            Segment::File(f) if f.bases_only() && key.kind == PageKind::Delta => PageKey {
                kind: PageKind::Base,
                ..*key
            },
            _ => *key,
        }
    }

    /// The record named `key` (see [`Engine::stored_key`]).
    pub(super) fn exact(&self, key: &PageKey) -> Result<Option<(Vec<u8>, PathBuf)>> {
        let key = self.stored_key(key);
        match self.segment(key.version) {
            Segment::File(f) => Ok(f.get(&key)?.map(|v| (v, f.path().to_path_buf()))),
            Segment::Table(t) => Ok(t
                .get(&key)
                .map(|v| (v.to_vec(), self.dir.join("lsvps/memtable")))),
        }
    }

    /// Loads page `id` at exactly `version`: the newest record at or below it, then back along the DeltaPage chain
    /// to a BasePage, replaying entries up to `version`.
    pub(super) fn read_page(&self, tid: TrieId, id: PageId, version: Version) -> Result<Page> {
        let read = self.read_slots(tid, id, version)?;
        Page::build(id, version, Some(read.head), read.slots).map_err(|w| {
            Error::corrupt(
                &read.path,
                0,
                format!("page record {id:?} of trie {tid}: {w}"),
            )
        })
    }

    /// [`Engine::read_page`] without building the page (nothing hashed): its slots at `version`, with the record
    /// read first (the page's newest at or below `version`) and where it was read. A prune writes pages it reads
    /// this way, and needs their slots and that record only.
    pub(super) fn read_slots(
        &self,
        tid: TrieId,
        id: PageId,
        version: Version,
    ) -> Result<ReadSlots> {
        let probe = PageKey::new(tid, id, version, PageKind::Delta);
        let (head_key, bytes, path, in_file) = self.floor(&probe)?.ok_or_else(|| {
            Error::corrupt(
                self.dir.join("lsvps"),
                0,
                format!("page {id:?} of trie {tid} has no record at version {version}"),
            )
        })?;
        let bad = |path: &Path, why: &str| {
            Error::corrupt(path, 0, format!("page record {id:?} of trie {tid}: {why}"))
        };
        let head_rec = PageRecord::decode(&bytes).map_err(|w| bad(&path, w))?;
        let mut head = match &head_rec {
            PageRecord::Base { since_base, .. } => Head {
                key_version: head_key.version,
                kind: PageKind::Base,
                since_base: *since_base,
                delta_updates: 0,
                chain: 1,
            },
            PageRecord::Delta {
                since_base,
                entries,
                ..
            } => Head {
                key_version: head_key.version,
                kind: PageKind::Delta,
                since_base: *since_base,
                delta_updates: entries.iter().map(|(_, c)| c.len() as u32).sum(),
                chain: 1,
            },
        };
        let mut prefetched = match (&head_rec, self.opts.prefetch_delta_chains) {
            // The whole chain came with the head.
            _ if !in_file.is_empty() => in_file
                .into_iter()
                .map(|(k, b)| (k, (b, path.clone())))
                .collect(),
            (PageRecord::Delta { prev: Some(p), .. }, true) => {
                self.prefetch_chain(tid, id, PageKey::new(tid, id, p.0, p.1))?
            }
            _ => HashMap::new(),
        };
        // Walk back to the base; the writer bounds the chain (Tb updates, max_delta_chain records), and a cycle
        // would be corruption.
        let mut chain = vec![head_rec];
        let mut guard = 0u32;
        // Each link names an older record than the one naming it (a key ordered before it): a chain that loops
        // or points forward is corruption, found at its first such link.
        let mut at = (head_key.version, head_key.kind);
        let base_slots = loop {
            let Some(last) = chain.last() else {
                return Err(bad(&path, "empty chain"));
            };
            let (prev, rebase) = match last {
                PageRecord::Base { slots, .. } => break slots.clone(),
                PageRecord::Delta {
                    prev: Some(p),
                    rebase,
                    ..
                } => (*p, *rebase),
                PageRecord::Delta { prev: None, .. } => {
                    return Err(bad(&path, "delta page without a predecessor"))
                }
            };
            if prev >= at {
                return Err(bad(
                    &path,
                    "a delta page names a record not older than itself",
                ));
            }
            at = prev;
            guard += 1;
            if guard > 1_000_000 {
                return Err(bad(&path, "delta chain does not end"));
            }
            // Under the key it is stored as: as `exact` answers it, and as a prefetch found it.
            let key = self.stored_key(&PageKey::new(tid, id, prev.0, prev.1));
            // A rebase DeltaPage skips to the BasePage it is relative to, unless its predecessor was read with the
            // head already (the rest of that chain then costs no read), or that BasePage is gone (pruned): then
            // the chain goes on through `prev`, whose records its first entry assigns over.
            let skipped = match rebase {
                Some(b) if !prefetched.contains_key(&key) => {
                    let base = PageKey::new(tid, id, b, PageKind::Base);
                    match prefetched.remove(&base) {
                        Some(r) => Some(r),
                        None => self.exact(&base)?,
                    }
                }
                _ => None,
            };
            let found = match skipped {
                Some(r) => Some(r),
                None => match prefetched.remove(&key) {
                    Some(r) => Some(r),
                    None => self.exact(&key)?,
                },
            };
            let (b, p) =
                found.ok_or_else(|| bad(&path, "delta page points at a missing record"))?;
            chain.push(PageRecord::decode(&b).map_err(|w| bad(&p, w))?);
        };
        let mut slots: Vec<(page::SlotNo, Cell)> = base_slots;
        let mut newest = match chain.last() {
            Some(PageRecord::Base { version, .. }) => *version,
            _ => 0,
        };
        for rec in chain.iter().rev() {
            if let PageRecord::Delta { entries, .. } = rec {
                for (v, changes) in entries {
                    if *v <= version {
                        page::apply(&mut slots, changes);
                        newest = newest.max(*v);
                    }
                }
            }
        }
        if newest != version {
            return Err(bad(
                &path,
                &format!("records reach version {newest}, the parent refers to {version}"),
            ));
        }
        // A page at the last depth has no child pages: a reference there is damage (a walk would name a page
        // below depth 64).
        if id.depth >= crate::lsvps::MAX_PAGE_DEPTH
            && slots.iter().any(|(_, c)| matches!(c, Cell::Page { .. }))
        {
            return Err(bad(&path, "a page at depth 64 refers to a child page"));
        }
        head.chain = u32::try_from(chain.len()).unwrap_or(u32::MAX);
        Ok(ReadSlots {
            slots,
            head,
            head_key,
            path,
        })
    }

    /// The records of page `id` from `first` (a DeltaPage's predecessor) back, newest first, down to the first
    /// BasePage (at most `max_delta_chain + 1` of them), read concurrently: they are found through the index blocks
    /// alone (a record's predecessor is the page's record just before it in key order: below a DeltaPage at `v`,
    /// the greatest key `<= (page, v, Base)`, which is a BasePage at `v` in a consolidated file), so that their
    /// reads are in flight together. A record found here that the chain does not use is simply not used; one the
    /// chain needs and this missed is read by the caller.
    fn prefetch_chain(
        &self,
        tid: TrieId,
        id: PageId,
        first: PageKey,
    ) -> Result<HashMap<PageKey, (Vec<u8>, PathBuf)>> {
        let limit = self.opts.max_delta_chain as usize + 1;
        let mut found: Vec<(&Arc<IndexFile>, crate::lsvps::IndexEntry)> = Vec::new();
        let mut probe = first;
        // Bounded by the files walked too: a page untouched for many flushes has no record in most of them.
        for _ in 0..4 * limit + 16 {
            if found.len() >= limit {
                break;
            }
            let Segment::File(f) = self.segment(probe.version) else {
                break; // in memory: nothing to wait for
            };
            // Best effort: a lookup that fails here (an index block of a file the chain may not even use) stops
            // the prefetch; the chain walk reads, and reports, only what it needs.
            let Ok(located) = f.locate(&probe) else {
                break;
            };
            match located {
                Some(e) => {
                    let base = e.key.kind == PageKind::Base;
                    probe = PageKey::new(tid, id, e.key.version, PageKind::Base);
                    found.push((f, e));
                    if base || e.key.version <= 1 {
                        break;
                    }
                }
                None => {
                    let below = f.meta().min_version.min(probe.version);
                    if below <= 1 {
                        break;
                    }
                    probe = PageKey::new(tid, id, below - 1, PageKind::Delta);
                }
            }
        }
        // The records in one file are read with one read (in a consolidated file they sit side by side, and in the
        // cold tier one read is one GET); the files are read concurrently.
        let mut groups: Vec<(&Arc<IndexFile>, Vec<crate::lsvps::IndexEntry>)> = Vec::new();
        for (f, e) in found {
            match groups.last_mut() {
                Some((g, es)) if Arc::ptr_eq(g, f) => es.push(e),
                _ => groups.push((f, vec![e])),
            }
        }
        let read = |f: &Arc<IndexFile>, es: &[crate::lsvps::IndexEntry]| {
            let path = f.path().to_path_buf();
            f.read_entries(es).ok().map(|records| {
                es.iter()
                    .zip(records)
                    .map(|(e, b)| (e.key, (b, path.clone())))
                    .collect::<Vec<_>>()
            })
        };
        if groups.len() < 2 {
            // One read needs no other thread.
            return Ok(groups
                .iter()
                .filter_map(|(f, es)| read(f, es))
                .flatten()
                .collect());
        }
        // A group that could not be read (or whose thread could not start) is left to the chain walk.
        Ok(std::thread::scope(|s| {
            let reads: Vec<_> = groups
                .iter()
                .map(|(f, es)| {
                    std::thread::Builder::new()
                        .spawn_scoped(s, move || read(f, es))
                        .ok()
                })
                .collect();
            reads
                .into_iter()
                .flatten()
                .filter_map(|h| h.join().ok().flatten())
                .flatten()
                .collect()
        }))
    }

    /// `BeforeOldest` for a version below the first committed one (of a store seeded from a snapshot, the
    /// snapshot's version).
    pub(super) fn check_not_before_oldest(&self, version: Version) -> Result<()> {
        match self.versions.first() {
            Some(&oldest) if version < oldest => Err(Error::BeforeOldest { version, oldest }),
            _ => Ok(()),
        }
    }

    /// Where the boundary of a pruned store may be raised for a window of `keep` versions: `keep` below the
    /// latest, but not above the newest flushed version, so that replay never needs a commit group below it
    /// (FORMAT.md §9, "Raising the boundary"). `None` for a store never pruned.
    pub(super) fn window_boundary(&self, keep: u64) -> Option<Version> {
        self.base_boundary?;
        let latest = *self.versions.last()?;
        let flushed = self.files.last()?.meta().max_version;
        Some(latest.saturating_sub(keep).min(flushed))
    }

    /// `Pruned` for a version whose pages a prune removed (its digest and history proofs still answer).
    pub(super) fn check_not_pruned(&self, version: Version) -> Result<()> {
        match self.pruned_below {
            Some(oldest) if version < oldest => Err(Error::Pruned { version, oldest }),
            _ => Ok(()),
        }
    }

    pub(super) fn root_page(&self, tid: TrieId, version: Version) -> Result<Arc<Page>> {
        if self.versions.last().is_none_or(|l| *l < version) {
            return Err(Error::VersionNotFound(version));
        }
        self.check_not_before_oldest(version)?;
        self.check_not_pruned(version)?;
        let t = self.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = t.index_at(version).ok_or(Error::UnknownTrie(tid))?;
        let pv = *t.page_versions.get(i).ok_or(Error::UnknownTrie(tid))?;
        self.load(tid, PageId::ROOT, pv)
    }

    pub(super) fn latest_leaf(&self, tid: TrieId, path: &KeyPath) -> Result<Option<Leaf>> {
        let Some(&v) = self.versions.last() else {
            return Ok(None);
        };
        if !self.tries.contains_key(&tid) {
            return Ok(None);
        }
        let root = self.root_page(tid, v)?;
        trie::get(self, tid, &root, path)
    }

    pub(super) fn exact_index(&self, t: &TrieState, version: Version) -> Result<usize> {
        t.versions
            .binary_search(&version)
            .map_err(|_| Error::VersionNotFound(version))
    }

    pub(super) fn digest(&self, tid: TrieId, version: Version) -> Result<Digest> {
        let t = self.tries.get(&tid).ok_or(Error::UnknownTrie(tid))?;
        let i = self.exact_index(t, version)?;
        Ok(Digest {
            tid,
            version,
            root: t.roots[i],
            history_len: t.history.base() + i as u64 + 1,
            history_root: t.history_roots[i],
        })
    }

    /// Computes the trie updates of a commit without publishing anything.
    pub(super) fn plan(
        &self,
        version: Version,
        writes: &BTreeMap<TrieId, Vec<Write>>,
    ) -> Result<Plan> {
        let mut tries = Vec::new();
        let mut latest = Vec::new();
        for (&tid, ws) in writes {
            if ws.is_empty() {
                continue;
            }
            // Only when the index is on: the list costs a copy of every key path of the commit.
            if self.latest.bytes() > 0 {
                latest.extend(ws.iter().map(|w| (tid, w.path, w.leaf.map(|l| l.loc))));
            }
            let root = match self.tries.get(&tid).and_then(|t| t.page_versions.last()) {
                Some(&pv) => Some(self.take(tid, PageId::ROOT, pv)?),
                None => None,
            };
            tries.push((tid, trie::update(self, tid, root, ws, version)?));
        }
        Ok(Plan {
            version,
            tries,
            tombstones: Vec::new(),
            latest,
        })
    }

    /// The Commit record's payload: every trie's root after the plan. Replay recomputes and compares it.
    pub(super) fn payload(&self, plan: &Plan) -> Vec<u8> {
        let mut roots: BTreeMap<TrieId, Hash> = self
            .tries
            .iter()
            .filter_map(|(t, s)| s.roots.last().map(|r| (*t, *r)))
            .collect();
        for (tid, u) in &plan.tries {
            roots.insert(*tid, u.root);
        }
        let mut out = Vec::with_capacity(4 + roots.len() * 36);
        out.extend_from_slice(&(roots.len() as u32).to_le_bytes());
        for (tid, root) in roots {
            out.extend_from_slice(&tid.to_le_bytes());
            out.extend_from_slice(&root.0);
        }
        out
    }

    /// Publishes a durable commit: page records, caches, roots, history; flushes when the MemIndexTable is full.
    /// `started`: when the commit's trie update began (less any time, like the fsync, that a replay does not
    /// repeat); the work until the end of the publish counts towards [`Options::max_replay_millis`].
    pub(super) fn apply(&mut self, plan: Plan, end: Position, started: Instant) -> Result<()> {
        self.poll_flush()?;
        let version = plan.version;
        let mut new_roots: BTreeMap<TrieId, (Hash, Version)> = BTreeMap::new();
        for (tid, u) in plan.tries {
            let mut root_version = None;
            for pw in u.pages {
                let is_root = pw.new.id == PageId::ROOT;
                let v = self.persist_page(tid, pw, version)?;
                if is_root {
                    root_version = Some(v);
                }
            }
            // An unchanged root page keeps its version.
            let pv = match root_version {
                Some(v) => v,
                None => self
                    .tries
                    .get(&tid)
                    .and_then(|t| t.page_versions.last().copied())
                    .unwrap_or(version),
            };
            new_roots.insert(tid, (u.root, pv));
        }
        for tid in new_roots.keys() {
            self.tries.entry(*tid).or_default();
        }
        let tids: Vec<TrieId> = self.tries.keys().copied().collect();
        for tid in tids {
            let (root, pv) = match new_roots.get(&tid) {
                Some(x) => *x,
                None => {
                    let t = &self.tries[&tid];
                    match (t.roots.last(), t.page_versions.last()) {
                        (Some(r), Some(p)) => (*r, *p),
                        _ => continue,
                    }
                }
            };
            if let Some(t) = self.tries.get_mut(&tid) {
                t.push(tid, version, root, pv);
            }
            self.roots_log.push(&RootEntry {
                version,
                tid,
                root,
                page_version: pv,
            });
        }
        // Published with the version, under the same exclusive hold: a reader sees both or neither.
        for (tid, path, loc) in &plan.latest {
            self.latest.set(*tid, path, *loc);
        }
        self.versions.push(version);
        let mut n = self.roots_log.write()?;
        apply_tombstones(
            &mut self.tombstones,
            self.tombstone_log.as_mut(),
            version,
            plan.tombstones,
        );
        if let Some(log) = &mut self.tombstone_log {
            n += log.write()?;
        }
        Counters::add(&self.counters.bytes_written, n);
        // A flush bounds what a recovery replays: the MemIndexTable's size, and the commit work since the last
        // flush, which a replay after a crash redoes at about the same speed.
        self.unflushed_work += started.elapsed();
        let replay_bound = std::time::Duration::from_millis(self.opts.max_replay_millis);
        if self.mem.bytes() >= self.memtable_limit || self.unflushed_work >= replay_bound {
            self.flush(end)?;
        }
        Ok(())
    }

    /// Stores one page write as a BasePage or DeltaPage in the MemIndexTable; returns the page's version after
    /// it (the old version when nothing changed).
    pub(super) fn persist_page(
        &mut self,
        tid: TrieId,
        pw: PageWrite,
        version: Version,
    ) -> Result<Version> {
        let PageWrite {
            old,
            new: mut page,
            changes,
        } = pw;
        if let Some(old) = &old {
            if changes.is_empty() {
                return Ok(old.version);
            }
        }
        let id = page.id;
        let key = (tid, id);
        // A page that did not exist before (or reappears after collapsing) always starts with a BasePage: a delta
        // must apply to exactly the previous state of the same page.
        let previous = self.pages.remove(&key);
        let state = match &old {
            None => None,
            Some(old) => previous.or_else(|| {
                old.head.map(|h| PageState {
                    last: (h.key_version, h.kind),
                    since_base: h.since_base,
                    chain: h.chain,
                    active: None,
                })
            }),
        };
        let n = changes.len() as u32;
        // The slots a large page changed since its BasePage, for a rebase DeltaPage.
        if page.cells().len() >= REBASE_MIN_CELLS {
            if let Some(r) = self.rebases.get_mut(&key) {
                for (slot, _) in &changes {
                    r.slots.insert(*slot);
                }
            }
        } else {
            self.rebases.remove(&key);
        }
        let head;
        // A delta continues the active DeltaPage while it has room for Td updates, or starts a new one while the
        // chain has room; a full chain is restarted by a rebase DeltaPage while the page's changes since its
        // BasePage are few; otherwise (and for a new page, or Tb updates after the last BasePage) a BasePage.
        let delta = match state {
            Some(mut s) if s.since_base + n < self.opts.base_threshold => match s.active.take() {
                Some(mut a) if a.updates + n <= self.opts.delta_threshold => {
                    a.updates += n;
                    Some((s, a, Start::Extend))
                }
                _ if s.chain <= self.opts.max_delta_chain => {
                    let a = ActiveDelta {
                        first_version: version,
                        updates: n,
                    };
                    let prev = s.last;
                    s.chain += 1;
                    Some((s, a, Start::Delta(prev)))
                }
                _ => self.rebase_changes(&key, &page).map(|(base, merged)| {
                    let a = ActiveDelta {
                        first_version: version,
                        updates: merged.len() as u32,
                    };
                    let prev = s.last;
                    s.chain = 2;
                    (s, a, Start::Rebase(prev, base, merged))
                }),
            },
            _ => None,
        };
        let new_state = match delta {
            Some((s, active, start)) => {
                let since = s.since_base + n;
                let key = PageKey::new(tid, id, active.first_version, PageKind::Delta);
                let bytes = match start {
                    Start::Delta(prev) => page::encode_delta(
                        active.first_version,
                        since,
                        Some(prev),
                        &[(version, changes)],
                    ),
                    Start::Rebase(prev, base, merged) => {
                        Counters::add(&self.counters.rebase_pages, 1);
                        page::encode_rebase(version, since, prev, base, &merged)
                    }
                    Start::Extend => {
                        let current = self.mem.get(&key).ok_or_else(|| {
                            Error::corrupt(
                                self.dir.join("lsvps/memtable"),
                                0,
                                "the growing DeltaPage is missing",
                            )
                        })?;
                        page::extend_delta(&current, since, version, &changes)
                            .map_err(|w| Error::corrupt(self.dir.join("lsvps/memtable"), 0, w))?
                    }
                };
                self.mem_insert(key, bytes, version);
                head = Head {
                    key_version: active.first_version,
                    kind: PageKind::Delta,
                    since_base: since,
                    delta_updates: active.updates,
                    chain: s.chain,
                };
                PageState {
                    last: (active.first_version, PageKind::Delta),
                    since_base: since,
                    chain: s.chain,
                    active: Some(active),
                }
            }
            // A new page, or Tb updates since the last checkpoint: write a BasePage.
            _ => {
                self.mem_insert(
                    PageKey::new(tid, id, version, PageKind::Base),
                    page::encode_base(version, 0, page.cells()),
                    version,
                );
                if page.cells().len() >= REBASE_MIN_CELLS {
                    self.rebases.insert(
                        key,
                        Rebase {
                            base: version,
                            slots: SlotSet::default(),
                        },
                    );
                }
                head = Head {
                    key_version: version,
                    kind: PageKind::Base,
                    since_base: 0,
                    delta_updates: 0,
                    chain: 1,
                };
                PageState {
                    last: (version, PageKind::Base),
                    since_base: 0,
                    chain: 1,
                    active: None,
                }
            }
        };
        self.pages.insert(key, new_state);
        page.head = Some(head);
        // The superseded version is rarely read again (only by historical reads, which reload it); keeping the cache
        // for latest versions is what makes the next commits and reads cheap.
        if let Some(old) = &old {
            self.page_cache.remove(&(tid, id, old.version));
        }
        self.page_cache.insert((tid, id, version), Arc::new(page));
        Ok(version)
    }

    /// The rebase DeltaPage `page` (as of this commit) may write instead of a BasePage: the version of the
    /// BasePage its chain starts at and every slot changed since, with its content now (`None`: emptied). `None`
    /// when the page is small, not tracked since its BasePage (written before this store was opened), or changed
    /// in too many slots for a rebase to be much smaller than a BasePage.
    fn rebase_changes(
        &self,
        key: &(TrieId, PageId),
        page: &Page,
    ) -> Option<(Version, Vec<page::Change>)> {
        let r = self.rebases.get(key)?;
        let changed = r.slots.len();
        if changed * REBASE_MAX_SHARE.1 >= page.cells().len() * REBASE_MAX_SHARE.0 {
            return None;
        }
        let merged = r.slots.iter().map(|s| (s, page.cell(s).copied())).collect();
        Some((r.base, merged))
    }

    pub(super) fn mem_insert(&mut self, key: PageKey, bytes: Vec<u8>, version: Version) {
        self.mem_min_version = Some(self.mem_min_version.map_or(version, |m| m.min(version)));
        self.mem.insert(key, bytes);
    }

    /// Freezes the MemIndexTable and writes it as index file `next_file_no` on a background thread: roots log
    /// fsync (here, before anything else), then, in the background, write + fsync a temporary file, rename,
    /// directory fsync. Every active DeltaPage is frozen by this. Until the file is installed, reads find its records
    /// in the frozen table; a previous flush still running is waited for first, so at most one runs (the commit
    /// that fills a second MemIndexTable before the first is written waits: backpressure, not unbounded memory).
    pub(super) fn flush(&mut self, end: Position) -> Result<()> {
        self.finish_flush()?;
        let (Some(min), Some(&max)) = (self.mem_min_version, self.versions.last()) else {
            return Ok(());
        };
        // Both logs must be durable up to `max` before the index file that names `max` exists; the flush thread
        // fsyncs them first, so the commit that triggers the flush (and the readers it holds up) does not wait.
        let (roots, mut n) = self.roots_log.handle_to_sync()?;
        let mut logs = vec![(self.dir.join("roots.log"), roots)];
        if let Some(log) = &mut self.tombstone_log {
            let (f, m) = log.mark_flushed(max)?;
            logs.push((self.dir.join("tombstones.log"), f));
            n += m;
        }
        Counters::add(&self.counters.bytes_written, n);
        let table = Arc::new(std::mem::take(&mut self.mem));
        self.mem_min_version = None;
        self.unflushed_work = std::time::Duration::ZERO;
        self.pages.clear();
        let no = self.next_file_no;
        self.next_file_no += 1;
        let meta = FileMeta {
            min_version: min,
            max_version: max,
            replay_from: (end.file_id, end.offset),
            records: table.len() as u64,
        };
        let dir = self.dir.join("lsvps");
        let (counters, block_cache, frozen) = (
            self.counters.clone(),
            self.block_cache.clone(),
            table.clone(),
        );
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failed_flag = failed.clone();
        let handle = std::thread::Builder::new()
            .name(format!("letus-flush-{no}"))
            .spawn(move || {
                let r = logs
                    .iter()
                    .try_for_each(|(path, f)| f.sync_data().map_err(|e| Error::io(path, e)))
                    .and_then(|()| {
                        write_index_file(&dir, no, &frozen, &meta, counters, block_cache)
                    });
                if r.is_err() {
                    failed_flag.store(true, std::sync::atomic::Ordering::Release);
                }
                r
            })
            .map_err(|e| Error::io(&self.dir, e))?;
        self.flushing = Some(Flushing {
            table,
            max_version: max,
            handle: Some(handle),
            failed,
        });
        Ok(())
    }

    /// Waits for the background flush, if any, and installs its index file. A flush that failed stays where it
    /// is: its frozen table keeps answering reads of its versions (nothing else holds their page records until the
    /// value log is replayed at the next open), it counts as failed, and every later call answers `Poisoned`.
    pub(super) fn finish_flush(&mut self) -> Result<()> {
        let Some(f) = self.flushing.as_mut() else {
            return Ok(());
        };
        let Some(handle) = f.handle.take() else {
            return Err(Error::Poisoned);
        };
        let joined = handle.join().map_err(|_| {
            Error::io(
                &self.dir,
                std::io::Error::other("the flush thread panicked"),
            )
        });
        match joined.and_then(|r| r) {
            Ok(file) => {
                self.flushing = None;
                self.files.push(Arc::new(file));
                Ok(())
            }
            Err(e) => {
                f.failed.store(true, std::sync::atomic::Ordering::Release);
                Err(e)
            }
        }
    }

    /// Whether the next publish is likely to start a flush while the previous one is still being written, so that
    /// it would wait for it (holding the engine). The committer waits before taking the engine instead.
    pub(super) fn flush_backpressure(&self) -> bool {
        let bound = std::time::Duration::from_millis(self.opts.max_replay_millis);
        self.flushing
            .as_ref()
            .is_some_and(|f| f.handle.as_ref().is_some_and(|h| !h.is_finished()))
            && (self.mem.bytes() >= self.memtable_limit / 16 * 15 || self.unflushed_work >= bound)
    }

    /// Whether the background flush failed (its error reaches the next commit, which then poisons the store).
    pub(super) fn flush_failed(&self) -> bool {
        self.flushing
            .as_ref()
            .is_some_and(|f| f.failed.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Installs the background flush's index file if it is done (never waits).
    pub(super) fn poll_flush(&mut self) -> Result<()> {
        if self
            .flushing
            .as_ref()
            .is_some_and(|f| f.handle.as_ref().is_none_or(|h| h.is_finished()))
        {
            self.finish_flush()?;
        }
        Ok(())
    }
}

/// Writes `table` as index file `no` in `dir`: a temporary file written and fsynced, renamed, the directory
/// fsynced; then opens it. A crash before the rename leaves a `.tmp` file that the next open deletes; the value
/// log still holds everything the file would have (its `replay_from` is not yet the newest).
pub(super) fn write_index_file(
    dir: &Path,
    no: u64,
    table: &MemIndexTable,
    meta: &FileMeta,
    counters: Arc<Counters>,
    block_cache: Arc<BlockCache>,
) -> Result<IndexFile> {
    let tmp = dir.join(format!("{no:06}.idx.tmp"));
    let fin = dir.join(format!("{no:06}.idx"));
    let fs = block_cache.storage();
    let mut w = IndexFileWriter::create(&block_cache.shared_storage(), &tmp, counters.clone())?;
    table.write_to(&mut w)?;
    w.finish(meta)?;
    fsutil::rename(fs, &tmp, &fin)?;
    sync_dir(fs, dir)?;
    IndexFile::open(&fin, no, counters, block_cache)
}

/// A MemIndexTable being written as an index file by a background thread.
pub(super) struct Flushing {
    /// The frozen table, read by lookups until the file is installed.
    pub(super) table: Arc<MemIndexTable>,
    /// The highest version its records may have.
    pub(super) max_version: Version,
    /// `None` once joined: only a failed flush is kept after that.
    pub(super) handle: Option<std::thread::JoinHandle<Result<IndexFile>>>,
    /// Set by the thread when the flush failed (before the next commit joins it and sees the error).
    pub(super) failed: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Engine {
    /// A store dropped while a flush runs waits for it: the directory lock is released with the store, and another
    /// opener must not find a half-written temporary file it would delete under the writer.
    fn drop(&mut self) {
        if let Some(h) = self.flushing.take().and_then(|f| f.handle) {
            let _ = h.join();
        }
    }
}
