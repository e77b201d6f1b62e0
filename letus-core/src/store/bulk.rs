//! Bulk loading: a new store holding one trie's pairs at one version, built from pairs in key-path order (what an
//! export holds) in memory that does not grow with the number of pairs.
//!
//! A commit of `n` pairs holds its whole write set, its trie update and its value-log group in memory; a bulk load
//! streams instead:
//! - each pair's Put record goes to the value log as it arrives (the group's buffer is written out every
//!   [`SPILL_BYTES`], see `Vdls::spill`; the group is committed once, at the end);
//! - the trie is built bottom-up in one pass: pairs sorted by key path arrive grouped by prefix, so a page is
//!   complete when the next pair leaves its prefix. Only the pages on the path from the root to the current pair
//!   are open (at most 33), and every finished page is written as a BasePage to a sorted run of its depth;
//! - the runs are concatenated into the store's first index file (index files sort records by depth, then prefix,
//!   and a run holds one depth's pages in prefix order), whose writer keeps 58 bytes per page (one page per 6 to
//!   150 pairs), not per pair;
//! - the roots log, the tombstone log and the history base are written as a flush would, so that the store opens
//!   with nothing to replay;
//! - with [`Options::bulk_load_keeps_pages`], the pages built are kept, up to the page cache's share of the
//!   memory budget, and put in the opened store's page cache: its first commits (a joined node catching up with the chain) find them there instead of reading
//!   and rehashing every page they touch. They are the pages a load from disk would give (the head of a BasePage
//!   at the load's version), so the cache holds nothing a read would not.
//!
//! The pages are those a commit of the same pairs into an empty trie produces (same slots, same hashes), so the
//! root is SPEC.md's and later commits, reads and proofs behave exactly as on a store built by commits. The
//! directory is scratch until the load returns: a crash or an error leaves it for the caller to delete.

use std::io::{BufRead, BufReader, Read};

use super::*;
use crate::fsutil::AppendFile;
use crate::lsvps::IndexFileWriter;
use crate::storage::SeqReader;
use crate::trie::page::{self, child_slot, grand_slot, Cell, Page, SlotNo};

/// The value-log group is written out whenever its buffer reaches this size.
const SPILL_BYTES: usize = 4 << 20;
/// Each depth's run is written in pieces of this size.
const RUN_BUFFER: usize = 256 << 10;

/// The nibble `i` of `path`.
fn nibble(path: &KeyPath, i: usize) -> u8 {
    let b = path.0[i / 2];
    if i.is_multiple_of(2) {
        b >> 4
    } else {
        b & 0x0f
    }
}

/// Whether `path` starts with the `depth` nibbles of `id` followed by `more`.
fn under(path: &KeyPath, id: &PageId, more: &[u8]) -> bool {
    let d = usize::from(id.depth);
    path.0[..d / 2] == id.prefix[..d / 2]
        && more
            .iter()
            .enumerate()
            .all(|(i, &n)| nibble(path, d + i) == n)
}

/// The finished pages of one depth, in prefix order: `prefix[32] | u32 len | record` each.
struct Run {
    path: PathBuf,
    file: AppendFile,
    buf: Vec<u8>,
    pages: u64,
}

/// Builds pages bottom-up from leaves in key-path order.
struct Builder<'a> {
    fs: &'a dyn crate::storage::Storage,
    dir: PathBuf,
    version: Version,
    runs: BTreeMap<u8, Run>,
    /// The next leaves (at most two are looked at: a group holds zero, one or several leaves).
    ahead: std::collections::VecDeque<Leaf>,
    next: &'a mut dyn FnMut() -> Result<Option<Leaf>>,
    done: bool,
    /// Pages built, for the opened store's page cache, and what they weigh there.
    keep: Vec<Arc<Page>>,
    kept: u64,
    /// The page cache's capacity (0 without [`Options::bulk_load_keeps_pages`]): pages below the top two levels
    /// stop being kept at three quarters of it, so that the at most 257 pages of those levels (touched by every
    /// update; the root is built last) still fit.
    keep_budget: u64,
}

impl Builder<'_> {
    /// The `i`-th leaf not yet taken (0 or 1), pulled from the source if needed.
    fn peek(&mut self, i: usize) -> Result<Option<&Leaf>> {
        while self.ahead.len() <= i && !self.done {
            match (self.next)()? {
                Some(l) => self.ahead.push_back(l),
                None => self.done = true,
            }
        }
        Ok(self.ahead.get(i))
    }

    /// How many leaves (0, 1 or "2 or more") are under `id` followed by `more`.
    fn count(&mut self, id: &PageId, more: &[u8]) -> Result<u8> {
        let mut n = 0;
        for i in 0..2 {
            match self.peek(i)? {
                Some(l) if under(&l.path, id, more) => n += 1,
                _ => break,
            }
        }
        Ok(n)
    }

    /// Nibble `i` of the next leaf when that leaf is under `id` followed by `more`.
    fn next_nibble(&mut self, id: &PageId, more: &[u8], i: usize) -> Result<Option<u8>> {
        Ok(self
            .peek(0)?
            .filter(|l| under(&l.path, id, more))
            .map(|l| nibble(&l.path, i)))
    }

    fn take(&mut self) -> Result<Leaf> {
        self.ahead
            .pop_front()
            .ok_or_else(|| Error::InvalidBulkLoad("a leaf went missing".into()))
    }

    /// Builds page `id` from every leaf under it (two or more, or any number for the root page), emitting every
    /// page below it first. Only the children the next leaves fall in are looked at: leaves come in path order,
    /// so the next one names the next non-empty child.
    fn page(&mut self, id: PageId) -> Result<Arc<Page>> {
        let d = usize::from(id.depth);
        let mut cells: Vec<(SlotNo, Cell)> = Vec::new();
        if id == PageId::ROOT && self.count(&id, &[])? == 1 {
            cells.push((0, Cell::Leaf(self.take()?)));
        } else {
            while let Some(c) = self.next_nibble(&id, &[], d)? {
                if self.count(&id, &[c])? == 1 {
                    cells.push((child_slot(c), Cell::Leaf(self.take()?)));
                    continue;
                }
                while let Some(g) = self.next_nibble(&id, &[c], d + 1)? {
                    if self.count(&id, &[c, g])? == 1 {
                        cells.push((grand_slot(c, g), Cell::Leaf(self.take()?)));
                        continue;
                    }
                    let child = self.page(id.child(c, g))?;
                    cells.push((
                        grand_slot(c, g),
                        Cell::Page {
                            hash: child.hash(),
                            version: self.version,
                        },
                    ));
                }
            }
        }
        // Child leaves (slots 1-16) come before every grandchild (17 and up) in a page's slot order.
        cells.sort_unstable_by_key(|(slot, _)| *slot);
        // The head a load of its record gives: a BasePage at this version, nothing since.
        let head = page::Head {
            key_version: self.version,
            kind: PageKind::Base,
            since_base: 0,
            delta_updates: 0,
            chain: 1,
        };
        let page = Page::build(id, self.version, Some(head), cells)
            .map_err(|w| Error::InvalidBulkLoad(format!("page {id:?}: {w}")))?;
        self.emit(&page)?;
        let weight = u64::from(page.weight());
        let budget = match id.depth {
            0..=2 => self.keep_budget,
            _ => self.keep_budget / 4 * 3,
        };
        let page = Arc::new(page);
        if self.kept + weight <= budget {
            self.kept += weight;
            self.keep.push(page.clone());
        }
        Ok(page)
    }

    fn emit(&mut self, page: &Page) -> Result<()> {
        let record = page::encode_base(self.version, 0, page.cells());
        let depth = page.id.depth;
        let run = match self.runs.entry(depth) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let path = self.dir.join(format!("bulk-{depth:02}.run"));
                let file = fsutil::create_new(self.fs, &path)?;
                v.insert(Run {
                    path,
                    file: AppendFile { file, end: 0 },
                    buf: Vec::with_capacity(RUN_BUFFER),
                    pages: 0,
                })
            }
        };
        run.buf.extend_from_slice(&page.id.prefix);
        run.buf
            .extend_from_slice(&(record.len() as u32).to_le_bytes());
        run.buf.extend_from_slice(&record);
        run.pages += 1;
        if run.buf.len() >= RUN_BUFFER {
            run.file
                .append(&run.buf)
                .map_err(|e| Error::io(&run.path, e))?;
            run.buf.clear();
        }
        Ok(())
    }
}

/// The pages of one version of one trie taken from a store's page cache ([`Store::cached_pages`]), to be put in
/// the cache of the same store once it is opened again ([`Store::warm`]): a bulk-loaded store that is closed and
/// renamed into place keeps the pages its load built.
#[derive(Clone, Default)]
pub struct CachedPages {
    /// Whose pages they are: the digest of their trie at their version, and the end of the store's value log
    /// (pages name values by their place in it).
    from: Option<(Digest, crate::vdls::Position)>,
    pages: Vec<Arc<Page>>,
}

impl std::fmt::Debug for CachedPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedPages")
            .field("from", &self.from)
            .field("pages", &self.pages.len())
            .finish()
    }
}

impl CachedPages {
    /// How many pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

impl Store {
    /// The pages of trie `tid` at `version` now in the page cache (shared with it, not copied).
    pub fn cached_pages(&self, tid: TrieId, version: Version) -> Result<CachedPages> {
        let digest = self.digest(tid, version)?;
        let e = self.shared.engine();
        let pages = e
            .page_cache
            .iter()
            .filter(|((t, _, v), _)| *t == tid && *v == version)
            .map(|(_, p)| p)
            .collect();
        Ok(CachedPages {
            from: Some((digest, self.vdls.end())),
            pages,
        })
    }

    /// Puts `pages` in the page cache, as far as it holds them, when this store's digest of their trie at their
    /// version and the end of its value log are the ones they were taken with; returns how many were put. A page
    /// names its values by their place in the value log, so they must come from this same store (closed, moved
    /// and opened again, nothing committed since): the checks refuse the pages of another state, or of a store
    /// whose value log differs; a store that holds the same state in the same value log (a second bulk load of
    /// the same pairs) has the same pages.
    pub fn warm(&self, pages: CachedPages) -> usize {
        let Some((d, end)) = pages.from else {
            return 0;
        };
        if self.digest(d.tid, d.version).ok() != Some(d) || self.vdls.end() != end {
            return 0;
        }
        let e = self.shared.engine();
        let n = pages.pages.len();
        for p in pages.pages {
            e.page_cache.insert((d.tid, p.id, p.version), p);
        }
        n
    }
}

/// One pair for [`Store::bulk_load_hashed`].
#[derive(Clone, Debug)]
pub struct BulkPair {
    /// The key.
    pub key: Vec<u8>,
    /// Its value.
    pub value: Vec<u8>,
    /// `(KeyPath::of(key), value_hash(value))` when the caller has them.
    pub hashed: Option<(KeyPath, Hash)>,
}

impl Store {
    /// Creates a store in `dir` (which must not exist or be empty) holding trie `tid` at `version`: the pairs
    /// `next` returns, which must be in strictly increasing key-path order (`KeyPath::of(key)`, the order of an
    /// export), and, if given, the history base `history` of that trie (see [`Store::set_history_base`]). The
    /// store is then opened as [`Store::open`] would, and its root is what a commit of the same pairs gives.
    ///
    /// Memory does not grow with the number of pairs beyond 58 bytes per page of the one index file written, and,
    /// with [`Options::bulk_load_keeps_pages`], the pages kept for the opened store's page cache, at most the
    /// cache's share of `opts`' memory budget (see the module documentation). No pair at all is the trie with the
    /// empty root. On an error `dir` holds an unfinished store: delete it.
    pub fn bulk_load(
        dir: impl AsRef<Path>,
        opts: Options,
        tid: TrieId,
        version: Version,
        history: Option<Frontier>,
        mut next: impl FnMut() -> Result<Option<(Vec<u8>, Vec<u8>)>>,
    ) -> Result<Store> {
        Self::bulk_load_hashed(dir, opts, tid, version, history, || {
            Ok(next()?.map(|(key, value)| BulkPair {
                key,
                value,
                hashed: None,
            }))
        })
    }

    /// [`Store::bulk_load`] of pairs that may come with their key path and value hash already computed (by a
    /// snapshot chunk's verification, [`letus_verify::snapshot::VerifiedChunk`]), which are then not computed
    /// again. They are taken as given: a wrong one makes a store whose root is not the one the pairs give, so a
    /// caller passing them checks the root (a joining node checks it against the trusted one).
    pub fn bulk_load_hashed(
        dir: impl AsRef<Path>,
        opts: Options,
        tid: TrieId,
        version: Version,
        history: Option<Frontier>,
        mut next: impl FnMut() -> Result<Option<BulkPair>>,
    ) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let fs = opts.storage.clone();
        if fs.kind(&dir).map_err(|e| Error::io(&dir, e))?.is_some()
            && !fsutil::list(&*fs, &dir)?.is_empty()
        {
            return Err(Error::InvalidBulkLoad(format!(
                "{} is not empty",
                dir.display()
            )));
        }
        fsutil::ensure_dir(&*fs, &dir)?;
        let lock = lock_dir(&*fs, &dir, LOCK_FILE)?;
        if let Some((size, peaks)) = history {
            HistoryTree::from_frontier(size, peaks.clone())
                .map_err(|e| Error::InvalidHistoryBase(e.to_string()))?;
            history_base::write(&*fs, &dir, &BTreeMap::from([(tid, (size, peaks))]))?;
        }
        let counters = Arc::new(Counters::default());
        let mut vdls = Vdls::open(
            &fs,
            &dir.join("vdls"),
            VdlsOptions {
                file_bytes: opts.vdls_file_bytes,
                sync: opts.sync,
                up_to: None,
            },
            counters.clone(),
            Position::START,
            |_, _, _| Ok(()),
        )?;
        let lsvps_dir = dir.join("lsvps");
        fsutil::ensure_dir(&*fs, &lsvps_dir)?;

        // Pairs become leaves as the builder asks for them: their Put records are appended in the same order.
        let mut last: Option<KeyPath> = None;
        let mut pairs = 0u64;
        let mut source = || -> Result<Option<Leaf>> {
            let Some(BulkPair { key, value, hashed }) = next()? else {
                return Ok(None);
            };
            if key.len() > opts.max_key_bytes || value.len() > opts.max_value_bytes {
                let (what, size, limit) = if key.len() > opts.max_key_bytes {
                    ("key", key.len(), opts.max_key_bytes)
                } else {
                    ("value", value.len(), opts.max_value_bytes)
                };
                return Err(Error::TooLarge { what, size, limit });
            }
            let (path, vh) = hashed.unwrap_or_else(|| (KeyPath::of(&key), value_hash(&value)));
            if last.is_some_and(|l| l >= path) {
                return Err(Error::InvalidBulkLoad(format!(
                    "pair {pairs} is not after the one before it in key-path order"
                )));
            }
            last = Some(path);
            pairs += 1;
            let loc = vdls.append(&Record::Put {
                version,
                tid,
                key,
                value,
                prev: None,
            })?;
            if vdls.buffered_bytes() >= SPILL_BYTES {
                vdls.spill()?;
            }
            Ok(Some(Leaf::new(path, vh, version, loc)))
        };
        let mut b = Builder {
            fs: &*fs,
            dir: lsvps_dir.clone(),
            version,
            runs: BTreeMap::new(),
            ahead: std::collections::VecDeque::new(),
            next: &mut source,
            done: false,
            keep: Vec::new(),
            kept: 0,
            keep_budget: match opts.bulk_load_keeps_pages {
                true => opts.memory_split().page_cache_bytes,
                false => 0,
            },
        };
        let root = b.page(PageId::ROOT)?;
        if b.peek(0)?.is_some() {
            return Err(Error::InvalidBulkLoad(
                "a pair was left after the trie was built".into(),
            ));
        }
        let mut runs = std::mem::take(&mut b.runs);
        let built = std::mem::take(&mut b.keep);
        drop(b);
        for run in runs.values_mut() {
            run.file
                .append(&run.buf)
                .map_err(|e| Error::io(&run.path, e))?;
            run.buf = Vec::new();
        }

        // The value log's group is committed with the root the commit record names.
        let mut payload = Vec::with_capacity(40);
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&tid.to_le_bytes());
        payload.extend_from_slice(&root.hash().0);
        let end = vdls.commit(version, &payload)?;
        drop(vdls);

        // The first index file: the runs in depth order, each in prefix order, is the order of page keys.
        let tmp = lsvps_dir.join("000001.idx.tmp");
        let fin = lsvps_dir.join("000001.idx");
        let mut w = IndexFileWriter::create(&fs, &tmp, counters.clone())?;
        let mut records = 0u64;
        for (&depth, run) in &runs {
            let f = fsutil::open_read(&*fs, &run.path)?;
            let seq = SeqReader::new(&*f).map_err(|e| Error::io(&run.path, e))?;
            let mut r = BufReader::with_capacity(RUN_BUFFER, seq);
            let mut head = [0u8; 36];
            let mut record = Vec::new();
            for _ in 0..run.pages {
                r.read_exact(&mut head)
                    .map_err(|e| Error::io(&run.path, e))?;
                let mut prefix = [0u8; 32];
                prefix.copy_from_slice(&head[..32]);
                let len = fsutil::u32_at(&head, 32).unwrap_or(0) as usize;
                record.resize(len, 0);
                r.read_exact(&mut record)
                    .map_err(|e| Error::io(&run.path, e))?;
                let key = PageKey::new(tid, PageId { depth, prefix }, version, PageKind::Base);
                w.add(&key, &record)?;
                records += 1;
            }
            if !r
                .fill_buf()
                .map_err(|e| Error::io(&run.path, e))?
                .is_empty()
            {
                return Err(Error::InvalidBulkLoad(format!(
                    "{} holds more than its pages",
                    run.path.display()
                )));
            }
        }
        w.finish(&FileMeta {
            min_version: version,
            max_version: version,
            replay_from: (end.file_id, end.offset),
            records,
        })?;
        // What a flush makes durable before its index file counts (the order of a flush): the root of `version`
        // and the tombstone log's marker of it (no key is deleted); then the index file is renamed into place.
        let (mut roots_log, _) = RootsLog::open(&*fs, &dir, None)?;
        roots_log.push(&RootEntry {
            version,
            tid,
            root: root.hash(),
            page_version: version,
        });
        let (roots, _) = roots_log.handle_to_sync()?;
        roots
            .sync_data()
            .map_err(|e| Error::io(dir.join("roots.log"), e))?;
        drop(roots_log);
        drop(TombstoneLog::create(
            &*fs,
            &dir,
            Some(version),
            &Tombstones::new(),
        )?);
        fsutil::rename(&*fs, &tmp, &fin)?;
        for run in runs.values() {
            fsutil::remove_file(&*fs, &run.path)?;
        }
        sync_dir(&*fs, &lsvps_dir)?;

        drop(lock);

        let store = Store::open(&dir, opts)?;
        {
            let e = store.shared.engine();
            for p in built {
                e.page_cache.insert((tid, p.id, p.version), p);
            }
        }
        let digest = store.digest(tid, version)?;
        if store.replayed().versions != 0 || digest.root != root.hash() {
            return Err(Error::InvalidBulkLoad(format!(
                "the loaded store opens with root {} (expected {}) after replaying {} versions",
                digest.root,
                root.hash(),
                store.replayed().versions
            )));
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages taken from a bulk-loaded store go back into its cache once it is closed, moved and opened again, and
    /// into no store of another state.
    #[test]
    fn cached_pages_warm_the_same_store_reopened_only() {
        let d = tempfile::tempdir().unwrap();
        let load = |dir: &Path, n: u32| {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
                .map(|i| (format!("k{i}").into_bytes(), b"v".to_vec()))
                .collect();
            pairs.sort_by_key(|(k, _)| KeyPath::of(k));
            let mut it = pairs.into_iter();
            let opts = Options {
                bulk_load_keeps_pages: true,
                ..Options::default()
            };
            Store::bulk_load(dir, opts, 0, 5, None, || Ok(it.next())).unwrap()
        };
        let s = load(&d.path().join("a"), 5_000);
        let pages = s.cached_pages(0, 5).unwrap();
        assert!(pages.len() > 1);
        s.close().unwrap();
        std::fs::rename(d.path().join("a"), d.path().join("b")).unwrap();
        let s = Store::open(d.path().join("b"), Options::default()).unwrap();
        assert_eq!(s.shared.engine().page_cache.len(), 0);
        // Without the option, a bulk load keeps nothing.
        let mut it = (0..100u32).map(|i| (format!("p{i}").into_bytes(), b"v".to_vec()));
        let mut sorted: Vec<_> = it.by_ref().collect();
        sorted.sort_by_key(|(k, _)| KeyPath::of(k));
        let mut it = sorted.into_iter();
        let plain = Store::bulk_load(
            d.path().join("plain"),
            Options::default(),
            0,
            5,
            None,
            || Ok(it.next()),
        )
        .unwrap();
        assert_eq!(plain.shared.engine().page_cache.len(), 0);
        let other = load(&d.path().join("c"), 4_999);
        let before = other.shared.engine().page_cache.len();
        assert_eq!(other.warm(pages.clone()), 0, "another state's store");
        assert_eq!(other.shared.engine().page_cache.len(), before);
        let n = pages.len();
        assert_eq!(s.warm(pages), n);
        let e = s.shared.engine();
        for ((_, id, v), p) in e.page_cache.iter() {
            assert_eq!(*p, e.read_page(0, id, v).unwrap());
        }
        assert_eq!(e.page_cache.len(), n);
    }

    /// An empty state (an export of a trie whose keys were all deleted) loads as the trie with the empty root, and
    /// reopens so; a later commit writes into it.
    #[test]
    fn an_empty_state_loads_as_an_empty_trie() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s");
        let s = Store::bulk_load(&dir, Options::default(), 3, 7, None, || Ok(None)).unwrap();
        assert_eq!(s.digest(3, 7).unwrap().root, EMPTY);
        s.close().unwrap();
        let mut s = Store::open(&dir, Options::default()).unwrap();
        assert_eq!(s.digest(3, 7).unwrap().root, EMPTY);
        assert_eq!(s.get(3, 7, b"k").unwrap(), None);
        s.put(3, b"k", b"v").unwrap();
        s.commit(8).unwrap();
        assert_eq!(s.get(3, 8, b"k").unwrap().as_deref(), Some(&b"v"[..]));
    }

    /// The pages a bulk load leaves in the page cache are those a read from disk gives, head included: all of
    /// them when they fit, as many as fit otherwise.
    #[test]
    fn the_pages_left_in_the_cache_are_those_a_read_gives() {
        for budget in [64u64 << 20, 256 << 10] {
            let d = tempfile::tempdir().unwrap();
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..20_000u32)
                .map(|i| (format!("k{i}").into_bytes(), format!("v{i}").into_bytes()))
                .collect();
            pairs.sort_by_key(|(k, _)| KeyPath::of(k));
            let mut it = pairs.iter().cloned();
            let opts = Options {
                memory_budget_bytes: budget,
                bulk_load_keeps_pages: true,
                ..Options::default()
            };
            let store =
                Store::bulk_load(d.path().join("s"), opts, 3, 9, None, || Ok(it.next())).unwrap();
            let e = store.shared.engine();
            let cached: Vec<((TrieId, PageId, Version), Arc<Page>)> = e.page_cache.iter().collect();
            assert!(!cached.is_empty(), "budget {budget}");
            for ((tid, id, v), p) in &cached {
                assert_eq!((*tid, *v), (3, 9));
                assert_eq!(**p, e.read_page(3, *id, 9).unwrap(), "page {id:?}");
            }
            let pages = e.files.iter().map(|f| f.meta().records).sum::<u64>();
            if budget > 1 << 20 {
                assert_eq!(cached.len() as u64, pages, "all fit: all are kept");
            } else {
                assert!(
                    (cached.len() as u64) < pages
                        && e.page_cache.weight() <= e.page_cache.capacity(),
                    "budget {budget}: {} of {pages} pages cached",
                    cached.len()
                );
            }
        }
    }
}
