//! Tests of index files and the MemIndexTable against a `BTreeMap` model, and of corruption detection.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::error::{Error, Result};
use crate::metrics::Counters;

type Model = BTreeMap<PageKey, Vec<u8>>;

use letus_workload::Rng;

fn counters() -> Arc<Counters> {
    Arc::new(Counters::default())
}

fn kind(delta: bool) -> PageKind {
    if delta {
        PageKind::Delta
    } else {
        PageKind::Base
    }
}

/// A handful of pages at several depths, including depth 64.
fn pages() -> Vec<PageId> {
    let r = PageId::ROOT;
    vec![
        r,
        r.child(0, 0),
        r.child(0, 1),
        r.child(3, 0xa),
        r.child(0xf, 0xf),
        r.child(3, 0xa).child(0, 7),
        r.child(3, 0xa).child(0, 7).child(0xc, 2),
        PageId::new(64, &[0xab; 32]).unwrap(),
    ]
}

fn meta_for(model: &Model) -> FileMeta {
    let lo = model.keys().map(|k| k.version).min().unwrap_or(0);
    let hi = model.keys().map(|k| k.version).max().unwrap_or(0);
    FileMeta {
        min_version: lo,
        max_version: hi,
        replay_from: (3, 12345),
        records: model.len() as u64,
    }
}

fn write_file(path: &Path, model: &Model, meta: &FileMeta) -> u64 {
    let mut w = IndexFileWriter::create(&crate::storage::local(), path, counters()).unwrap();
    for (k, v) in model {
        w.add(k, v).unwrap();
    }
    w.finish(meta).unwrap()
}

fn open(path: &Path, file_no: u64, cache_bytes: u64) -> Result<IndexFile> {
    IndexFile::open(
        path,
        file_no,
        counters(),
        Arc::new(BlockCache::new(cache_bytes)),
    )
}

fn model_floor(model: &Model, key: &PageKey) -> Option<(PageKey, Vec<u8>)> {
    let (k, v) = model.range(..=*key).next_back()?;
    k.same_page(key).then(|| (*k, v.clone()))
}

/// Asserts `r` is `Error::Corrupt` naming `path`; returns the offset.
#[track_caller]
fn assert_corrupt<T: Debug>(r: Result<T>, path: &Path) -> u64 {
    match r {
        Err(Error::Corrupt {
            path: p, offset, ..
        }) => {
            assert_eq!(p, path);
            offset
        }
        other => panic!("expected Corrupt naming {}, got {other:?}", path.display()),
    }
}

/// Random model: `n` records over the pages of `pages()`, three tries, versions 1..=`max_v`, both kinds.
fn random_model(rng: &mut Rng, n: usize, max_v: u64, max_len: u64) -> Model {
    let pages = pages();
    let mut m = Model::new();
    while m.len() < n {
        let key = PageKey::new(
            rng.below(3) as u32,
            pages[rng.below(pages.len() as u64) as usize],
            1 + rng.below(max_v),
            kind(rng.below(2) == 1),
        );
        let len = rng.below(max_len + 1) as usize;
        let rec = rng.bytes(len);
        m.insert(key, rec);
    }
    m
}

/// Queries around every page: every version from 0 to `max_v + 1`, both kinds, plus tries and pages that are absent.
fn queries(max_v: u64) -> Vec<PageKey> {
    let mut pages = pages();
    pages.push(PageId::ROOT.child(9, 9)); // never written
    let mut q = Vec::new();
    for tid in 0..4u32 {
        for &p in &pages {
            for v in 0..=max_v + 1 {
                for k in [PageKind::Base, PageKind::Delta] {
                    q.push(PageKey::new(tid, p, v, k));
                }
            }
            q.push(PageKey::new(tid, p, u64::MAX, PageKind::Delta));
        }
    }
    q.push(PageKey::new(u32::MAX, PageId::ROOT, 0, PageKind::Base));
    q
}

fn check_against_model(f: &IndexFile, model: &Model, queries: &[PageKey]) {
    for q in queries {
        assert_eq!(f.floor(q).unwrap(), model_floor(model, q), "floor {q:?}");
        assert_eq!(f.get(q).unwrap(), model.get(q).cloned(), "get {q:?}");
    }
}

fn check_mem_against_model(t: &MemIndexTable, model: &Model, queries: &[PageKey]) {
    for q in queries {
        let got = t.floor(q).map(|(k, v)| (k, v.to_vec()));
        assert_eq!(got, model_floor(model, q), "mem floor {q:?}");
        assert_eq!(
            t.get(q).map(|v| v.to_vec()),
            model.get(q).cloned(),
            "mem get {q:?}"
        );
    }
}

#[test]
fn lsvps_round_trip_many_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000001.idx.tmp");
    let mut rng = Rng::new(1);
    let max_v = 150;
    let model = random_model(&mut rng, 6000, max_v, 300);
    let meta = meta_for(&model);
    let wc = counters();
    let mut w = IndexFileWriter::create(&crate::storage::local(), &path, wc.clone()).unwrap();
    for (k, v) in &model {
        w.add(k, v).unwrap();
    }
    assert_eq!(w.records(), model.len() as u64);
    let size = w.finish(&meta).unwrap();
    assert_eq!(size, std::fs::metadata(&path).unwrap().len());
    assert_eq!(wc.snapshot().bytes_written, size);

    // A small cache (about 8 blocks) so that blocks are evicted and re-read.
    let rc = counters();
    let cache = Arc::new(BlockCache::new(48 << 10));
    let f = IndexFile::open(&path, 1, rc.clone(), cache.clone()).unwrap();
    assert_eq!(f.meta(), &meta);
    assert_eq!(f.size(), size);
    assert_eq!(f.path(), path.as_path());
    // Compact entries: blocks of at most 1 KiB holding about as many entries as the 70 a 4 KiB block of format 2
    // held, back to back from the end of the page blocks.
    let layout = f.index_block_layout();
    assert_eq!(layout.len(), f.index_blocks());
    assert!(layout.len() >= 2, "{}", layout.len());
    assert!(layout.len() <= model.len().div_ceil(MAX_ENTRIES_PER_BLOCK));
    assert!(layout.iter().all(|&(_, _, len)| len <= 1024));
    assert!(layout
        .windows(2)
        .all(|w| w[0].0 + u64::from(w[0].2) == w[1].0));
    assert_eq!(f.keys().unwrap(), model.keys().copied().collect::<Vec<_>>());
    assert_eq!(f.verify().unwrap(), model.len() as u64);

    let qs = queries(max_v);
    check_against_model(&f, &model, &qs);
    for (k, v) in &model {
        assert_eq!(f.get(k).unwrap().as_ref(), Some(v));
    }
    let s = rc.snapshot();
    assert!(
        s.page_reads > 0 && s.index_block_reads > 0 && s.block_cache_hits > 0,
        "{s:?}"
    );
    assert!(cache.weight() <= cache.capacity(), "{cache:?}");

    // Many threads read one file at once.
    std::thread::scope(|sc| {
        for t in 0..4 {
            let (f, model, qs) = (&f, &model, &qs);
            sc.spawn(move || {
                for q in qs.iter().skip(t).step_by(4) {
                    assert_eq!(f.floor(q).unwrap(), model_floor(model, q));
                }
            });
        }
    });

    // Reopening with a fresh cache gives the same answers; evicting this file's blocks empties the cache.
    let f2 = open(&path, 2, 1 << 20).unwrap();
    check_against_model(&f2, &model, &qs[..qs.len() / 4]);
    f.evict_from_cache();
    assert!(cache.is_empty());
}

#[test]
fn lsvps_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.idx");
    let meta = FileMeta {
        min_version: 5,
        max_version: 4,
        replay_from: (0, 0),
        records: 0,
    };
    let size = write_file(&path, &Model::new(), &meta);
    assert_eq!(size, HEADER_LEN + 8 + FOOTER_LEN);
    let f = open(&path, 0, 1 << 20).unwrap();
    assert_eq!(f.meta(), &meta);
    assert_eq!(f.index_blocks(), 0);
    assert!(f.keys().unwrap().is_empty());
    assert_eq!(f.verify().unwrap(), 0);
    for q in queries(3) {
        assert_eq!(f.floor(&q).unwrap(), None);
        assert_eq!(f.get(&q).unwrap(), None);
    }
}

#[test]
fn lsvps_add_out_of_order_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("order.idx");
    let p = PageId::ROOT.child(1, 1);
    let k1 = PageKey::new(0, p, 1, PageKind::Base);
    let k2 = PageKey::new(0, p, 1, PageKind::Delta);
    let k3 = PageKey::new(0, p, 2, PageKind::Base);
    let mut w = IndexFileWriter::create(&crate::storage::local(), &path, counters()).unwrap();
    w.add(&k2, b"two").unwrap();
    assert!(w.add(&k1, b"one").is_err(), "smaller key");
    assert!(w.add(&k2, b"again").is_err(), "equal key");
    // An invalid page id (odd depth) is rejected too.
    let bad = PageKey::new(
        0,
        PageId {
            depth: 3,
            prefix: [0xff; 32],
        },
        3,
        PageKind::Base,
    );
    assert!(w.add(&bad, b"x").is_err());
    // A rejected add writes nothing: the writer goes on.
    w.add(&k3, b"three").unwrap();
    let meta = FileMeta {
        min_version: 1,
        max_version: 2,
        replay_from: (0, 0),
        records: 2,
    };
    w.finish(&meta).unwrap();
    let f = open(&path, 0, 1 << 20).unwrap();
    assert_eq!(f.keys().unwrap(), vec![k2, k3]);
    assert_eq!(f.get(&k2).unwrap().as_deref(), Some(&b"two"[..]));
    assert_eq!(f.get(&k1).unwrap(), None);
    // Floor at (v1, Base) sees nothing: the Delta of version 1 sorts after the Base of version 1.
    assert_eq!(f.floor(&k1).unwrap(), None);
    assert_eq!(f.floor(&k2).unwrap(), Some((k2, b"two".to_vec())));
}

#[test]
fn lsvps_finish_checks_meta_and_record_size() {
    let dir = tempfile::tempdir().unwrap();
    let key = PageKey::new(0, PageId::ROOT, 10, PageKind::Base);
    let meta = FileMeta {
        min_version: 10,
        max_version: 10,
        replay_from: (0, 0),
        records: 1,
    };
    for (i, bad) in [
        FileMeta { records: 2, ..meta },
        FileMeta {
            min_version: 11,
            max_version: 12,
            ..meta
        },
        FileMeta {
            min_version: 1,
            max_version: 9,
            ..meta
        },
    ]
    .iter()
    .enumerate()
    {
        let path = dir.path().join(format!("bad{i}.idx"));
        let mut w = IndexFileWriter::create(&crate::storage::local(), &path, counters()).unwrap();
        w.add(&key, b"r").unwrap();
        assert!(w.finish(bad).is_err(), "{bad:?}");
        // No footer was written: the file does not open.
        assert_corrupt(open(&path, 0, 0), &path);
    }
    let path = dir.path().join("big.idx");
    let mut w = IndexFileWriter::create(&crate::storage::local(), &path, counters()).unwrap();
    let big = vec![0u8; MAX_RECORD_LEN + 1];
    assert!(matches!(w.add(&key, &big), Err(Error::TooLarge { .. })));
    w.add(&key, &big[..MAX_RECORD_LEN]).unwrap();
    w.finish(&meta).unwrap();
    let f = open(&path, 0, 0).unwrap();
    assert_eq!(f.get(&key).unwrap().map(|v| v.len()), Some(MAX_RECORD_LEN));
    // The writer refuses to overwrite an existing file.
    assert!(IndexFileWriter::create(&crate::storage::local(), &path, counters()).is_err());
}

#[test]
fn lsvps_torn_file_without_footer_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torn.idx.tmp");
    let mut rng = Rng::new(2);
    let model = random_model(&mut rng, 300, 20, 40);
    let mut w = IndexFileWriter::create(&crate::storage::local(), &path, counters()).unwrap();
    for (k, v) in &model {
        w.add(k, v).unwrap();
    }
    w.write_buffered().unwrap();
    drop(w); // crash before finish: page blocks only
    assert!(std::fs::metadata(&path).unwrap().len() > HEADER_LEN);
    assert_corrupt(open(&path, 0, 0), &path);
}

/// Region boundaries of a finished file, read from its footer: (index_offset, lookup_offset, footer_offset).
fn regions(bytes: &[u8]) -> (u64, u64, u64) {
    let f = bytes.len() - FOOTER_LEN as usize;
    let u = |at: usize| u64::from_le_bytes(bytes[f + at..f + at + 8].try_into().unwrap());
    (u(32), u(40), f as u64)
}

fn flip(path: &Path, at: u64, mask: u8) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    file.read_exact_at(&mut b, at).unwrap();
    b[0] ^= mask;
    file.write_all_at(&b, at).unwrap();
}

/// A file of `n` random records with versions up to `max_v`, and its model.
fn random_file(dir: &Path, name: &str, n: usize, max_v: u64) -> (PathBuf, Model) {
    let path = dir.join(name);
    let mut rng = Rng::new(3);
    let model = random_model(&mut rng, n, max_v, 12);
    write_file(&path, &model, &meta_for(&model));
    (path, model)
}

/// A small file (150 records, one index block) and its model.
fn small_file(dir: &Path, name: &str) -> (PathBuf, Model) {
    random_file(dir, name, 150, 30)
}

/// A file of 1,200 records in at least three index blocks, and its model.
fn multi_block_file(dir: &Path, name: &str) -> (PathBuf, Model) {
    random_file(dir, name, 1200, 80)
}

#[test]
fn lsvps_flipped_byte_in_each_structure_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = multi_block_file(dir.path(), "flip.idx");
    let bytes = std::fs::read(&path).unwrap();
    let (index_off, lookup_off, footer_off) = regions(&bytes);
    assert!(open(&path, 0, 0).unwrap().index_blocks() >= 3);

    // A page block: the first record (the page block right after the header), byte 3 of its record.
    let first = *model.keys().next().unwrap();
    let rec_len = model[&first].len() as u64;
    let at = HEADER_LEN + PAGE_BLOCK_HEADER_LEN + rec_len.saturating_sub(1);
    flip(&path, at, 0x10);
    {
        let f = open(&path, 0, 1 << 20).unwrap(); // index intact: opens
        assert_eq!(assert_corrupt(f.get(&first), &path), HEADER_LEN);
        assert_eq!(assert_corrupt(f.floor(&first), &path), HEADER_LEN);
        assert_corrupt(f.verify(), &path);
        // Other records are still served.
        let last = model.keys().next_back().unwrap();
        assert_eq!(f.get(last).unwrap().as_ref(), Some(&model[last]));
    }
    flip(&path, at, 0x10);

    // The record length of the first page block.
    flip(&path, HEADER_LEN, 0x01);
    assert_eq!(
        assert_corrupt(open(&path, 0, 0).unwrap().get(&first), &path),
        HEADER_LEN
    );
    flip(&path, HEADER_LEN, 0x01);

    // An index block: the second one (its offset is recorded in the lookup block), one byte inside its first
    // entry.
    let (second_block, second_first, _) = open(&path, 0, 1 << 20).unwrap().index_block_layout()[1];
    assert!(second_block > index_off);
    let key_in_second = *model.range(second_first..).nth(1).unwrap().0;
    flip(&path, second_block + 13, 0x04);
    {
        let f = open(&path, 0, 1 << 20).unwrap();
        assert_eq!(assert_corrupt(f.floor(&key_in_second), &path), second_block);
        assert_eq!(assert_corrupt(f.get(&key_in_second), &path), second_block);
        assert_corrupt(f.keys(), &path);
        assert_eq!(f.get(&first).unwrap().as_ref(), Some(&model[&first])); // block 0 is fine
    }
    flip(&path, second_block + 13, 0x04);

    // The lookup block, the footer and the header: the file does not open.
    for at in [
        lookup_off,
        lookup_off + 30,
        footer_off - 1,
        footer_off,
        footer_off + 40,
        footer_off + 79,
        0,
        9,
        15,
    ] {
        flip(&path, at, 0x20);
        assert_corrupt(open(&path, 0, 0), &path);
        flip(&path, at, 0x20);
    }

    // Restored: the file reads back intact.
    let f = open(&path, 0, 1 << 20).unwrap();
    assert_eq!(f.verify().unwrap(), model.len() as u64);
    check_against_model(&f, &model, &queries(30));
}

/// Every single-byte change anywhere in the file is reported as corruption naming the file, at open or when the
/// damaged structure is read: every byte is covered by exactly one checksum.
#[test]
fn lsvps_every_flipped_byte_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = small_file(dir.path(), "every.idx");
    let size = std::fs::metadata(&path).unwrap().len();
    for at in 0..size {
        for mask in [0x01u8, 0xff] {
            flip(&path, at, mask);
            match open(&path, at, 0) {
                Err(e) => {
                    assert_corrupt::<()>(Err(e), &path);
                }
                Ok(f) => {
                    assert_corrupt(f.verify(), &path);
                }
            }
            flip(&path, at, mask);
        }
    }
    let f = open(&path, 0, 0).unwrap();
    assert_eq!(f.verify().unwrap(), model.len() as u64);
}

#[test]
fn lsvps_truncated_file_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path(), "trunc.idx");
    let size = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for len in (0..size).rev() {
        file.set_len(len).unwrap();
        assert_corrupt(open(&path, 0, 0), &path);
    }
}

#[test]
fn lsvps_newer_format_version_is_unsupported_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_file(dir.path(), "v2.idx");
    let orig = std::fs::read(&path).unwrap();
    let f_at = orig.len() - FOOTER_LEN as usize;
    let newer = index_file::FORMAT_VERSION + 1;
    let set_version = |b: &mut Vec<u8>, version: u32, header: bool, footer: bool| {
        if header {
            b[8..12].copy_from_slice(&version.to_le_bytes());
            let c = crate::fsutil::crc(&b[0..12]);
            b[12..16].copy_from_slice(&c.to_le_bytes());
        }
        if footer {
            b[f_at + 64..f_at + 68].copy_from_slice(&version.to_le_bytes());
            let c = crate::fsutil::crc(&b[f_at..f_at + 68]);
            b[f_at + 68..f_at + 72].copy_from_slice(&c.to_le_bytes());
        }
    };
    // Files of formats 1 and 2 (58-byte index entries) are read by tests/compat.rs from its fixtures. A compact
    // file relabelled as format 2 is damage: its index region does not parse as 58-byte entries.
    std::fs::write(&path, &orig).unwrap();
    assert_eq!(open(&path, 0, 0).unwrap().meta().records, 150);
    let mut relabelled = orig.clone();
    set_version(
        &mut relabelled,
        index_file::COMPACT_INDEX_VERSION - 1,
        true,
        true,
    );
    std::fs::write(&path, &relabelled).unwrap();
    assert_corrupt(open(&path, 0, 0), &path);
    let mut both = orig.clone();
    set_version(&mut both, newer, true, true);
    std::fs::write(&path, &both).unwrap();
    assert!(
        matches!(open(&path, 0, 0), Err(Error::UnsupportedFormat { found, path: ref p }) if p == &path && found == newer),
        "{:?}",
        open(&path, 0, 0)
    );
    // Only one end says a newer version: damage, not a newer format.
    for (h, ft) in [(true, false), (false, true)] {
        let mut one = orig.clone();
        set_version(&mut one, newer, h, ft);
        std::fs::write(&path, &one).unwrap();
        assert_corrupt(open(&path, 0, 0), &path);
    }
    // Version 0 in both ends never existed.
    let mut zero = orig.clone();
    zero[8..12].copy_from_slice(&0u32.to_le_bytes());
    let c = crate::fsutil::crc(&zero[0..12]);
    zero[12..16].copy_from_slice(&c.to_le_bytes());
    zero[f_at + 64..f_at + 68].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(&path, &zero).unwrap();
    assert_corrupt(open(&path, 0, 0), &path);
}

#[test]
fn lsvps_mem_table_matches_index_file_after_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mem.idx");
    let mut rng = Rng::new(4);
    let pages = pages();
    let mut t = MemIndexTable::new();
    let mut model = Model::new();
    // Inserts with many replacements (the active DeltaPage growing).
    for _ in 0..4000 {
        let key = PageKey::new(
            rng.below(2) as u32,
            pages[rng.below(pages.len() as u64) as usize],
            1 + rng.below(40),
            kind(rng.below(2) == 1),
        );
        let n = rng.below(64) as usize;
        let rec = rng.bytes(n);
        let old = t.insert(key, rec.clone());
        assert_eq!(old.map(|o| o.to_vec()), model.insert(key, rec));
    }
    assert_eq!(t.len(), model.len());
    let bytes: usize = model.values().map(|v| v.len() + ENTRY_OVERHEAD).sum();
    assert_eq!(t.bytes(), bytes);
    let lo = model.keys().map(|k| k.version).min().unwrap();
    let hi = model.keys().map(|k| k.version).max().unwrap();
    assert_eq!(t.version_range(), Some((lo, hi)));
    assert!(t.iter().map(|(k, _)| *k).eq(model.keys().copied()));

    let qs = queries(41);
    check_mem_against_model(&t, &model, &qs);

    let mut w = IndexFileWriter::create(&crate::storage::local(), &path, counters()).unwrap();
    t.write_to(&mut w).unwrap();
    let meta = t.file_meta(1, 41, (1, 2));
    w.finish(&meta).unwrap();
    let f = open(&path, 0, 1 << 20).unwrap();
    assert_eq!(f.meta(), &meta);
    for q in &qs {
        let mem = t.floor(q).map(|(k, v)| (k, v.to_vec()));
        assert_eq!(f.floor(q).unwrap(), mem, "floor {q:?}");
        assert_eq!(f.get(q).unwrap(), t.get(q).map(|v| v.to_vec()), "get {q:?}");
    }

    t.clear();
    assert!(t.is_empty());
    assert_eq!(t.bytes(), 0);
    assert_eq!(t.version_range(), None);
    assert_eq!(t.floor(&qs[5]), None);
}

#[test]
fn lsvps_block_cache_is_bounded_and_counts_hits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.idx");
    let mut rng = Rng::new(5);
    let model = random_model(&mut rng, 3000, 100, 8);
    write_file(&path, &model, &meta_for(&model));
    let c = counters();
    // A few decoded blocks.
    let cache = Arc::new(BlockCache::new(20 << 10));
    let f = IndexFile::open(&path, 9, c.clone(), cache.clone()).unwrap();
    assert!(f.index_blocks() >= 8, "{}", f.index_blocks());
    let k = *model.keys().nth(1000).unwrap();
    f.get(&k).unwrap();
    let s1 = c.snapshot();
    assert_eq!(
        (s1.index_block_reads, s1.block_cache_hits, s1.page_reads),
        (1, 0, 1)
    );
    f.get(&k).unwrap();
    let s2 = c.snapshot();
    assert_eq!(
        (s2.index_block_reads, s2.block_cache_hits, s2.page_reads),
        (1, 1, 2)
    );
    for k in model.keys() {
        f.get(k).unwrap();
    }
    assert!(cache.weight() <= cache.capacity(), "{cache:?}");
    assert!(!cache.is_empty());
}

fn arb_key() -> impl Strategy<Value = PageKey> {
    let pages = pages();
    (0u32..3, 0..pages.len(), 0u64..25, any::<bool>())
        .prop_map(move |(tid, p, v, d)| PageKey::new(tid, pages[p], v, kind(d)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Differential test: an index file and a MemIndexTable built from random inserts (with replacements) answer
    /// floor and get exactly like `BTreeMap::range(..=key).next_back()` restricted to the same page.
    #[test]
    fn lsvps_proptest_floor_get_match_btreemap(
        inserts in proptest::collection::vec((arb_key(), proptest::collection::vec(any::<u8>(), 0..24)), 0..400),
        qs in proptest::collection::vec(arb_key(), 1..100),
    ) {
        let mut model = Model::new();
        let mut t = MemIndexTable::new();
        for (k, v) in &inserts {
            model.insert(*k, v.clone());
            t.insert(*k, v.clone());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        write_file(&path, &model, &meta_for(&model));
        let f = open(&path, 0, 8 << 10).unwrap();
        prop_assert_eq!(f.keys().unwrap(), model.keys().copied().collect::<Vec<_>>());
        for q in &qs {
            let want = model_floor(&model, q);
            prop_assert_eq!(&f.floor(q).unwrap(), &want);
            prop_assert_eq!(&t.floor(q).map(|(k, v)| (k, v.to_vec())), &want);
            prop_assert_eq!(f.get(q).unwrap(), model.get(q).cloned());
            prop_assert_eq!(t.get(q).map(|v| v.to_vec()), model.get(q).cloned());
        }
        // Every stored key is found by get and by floor.
        for (k, v) in &model {
            prop_assert_eq!(f.floor(k).unwrap(), Some((*k, v.clone())));
        }
    }

    /// Decoding arbitrary bytes never panics, and whatever decodes re-encodes to the same bytes.
    #[test]
    fn lsvps_proptest_key_decode_total(bytes in proptest::collection::vec(any::<u8>(), 46)) {
        if let Some(k) = PageKey::decode(&bytes) {
            prop_assert_eq!(k.encode().to_vec(), bytes);
            prop_assert!(k.page.is_valid());
        }
    }
}

#[test]
fn lsvps_types_are_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<IndexFile>();
    assert_send_sync::<BlockCache>();
    assert_send_sync::<MemIndexTable>();
    assert_send_sync::<IndexFileWriter>();
}

/// A file with more index entries than the writer keeps in memory (its index blocks go through the side file):
/// every record is found, and the side file is gone.
#[test]
fn lsvps_a_file_whose_index_outgrows_memory_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.idx");
    let mut model = Model::new();
    let mut i = 0u64;
    // ~5.9 MB of index entries (58 bytes each): above the 4 MiB kept in memory.
    while model.len() < 102_000 {
        let mut prefix = [0u8; 32];
        prefix[..8].copy_from_slice(&i.to_be_bytes());
        let id = PageId::new(16, &prefix).unwrap();
        model.insert(
            PageKey::new(0, id, 1 + i % 5, kind(i.is_multiple_of(2))),
            i.to_le_bytes().to_vec(),
        );
        i += 1;
    }
    write_file(&path, &model, &meta_for(&model));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("big.idx")]);
    let f = open(&path, 1, 1 << 20).unwrap();
    assert_eq!(f.meta().records, model.len() as u64);
    for (k, v) in model.iter().step_by(97).chain(model.iter().last()) {
        assert_eq!(f.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
}

#[test]
fn lsvps_records_read_as_one_span_are_those_read_one_by_one_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = small_file(dir.path(), "span.idx");
    let f = open(&path, 0, 1 << 20).unwrap();
    let keys: Vec<PageKey> = model.keys().copied().collect();
    let entries: Vec<IndexEntry> = keys[10..20]
        .iter()
        .map(|k| f.locate(k).unwrap().unwrap())
        .collect();
    let records = f.read_entries(&entries).unwrap();
    assert_eq!(records.len(), 10);
    for (k, r) in keys[10..20].iter().zip(&records) {
        assert_eq!(r, &model[k], "{k:?}");
    }
    // Not adjacent, and out of order: the same.
    let picked = [entries[7], entries[2]];
    let records = f.read_entries(&picked).unwrap();
    assert_eq!(
        (&records[0], &records[1]),
        (&model[&keys[17]], &model[&keys[12]])
    );
    // A flipped byte in one record of the span fails the read with that record's offset.
    let e = entries[5];
    flip(&path, e.offset + PAGE_BLOCK_HEADER_LEN, 0x20);
    let f = open(&path, 0, 1 << 20).unwrap();
    assert_eq!(assert_corrupt(f.read_entries(&entries), &path), e.offset);
}

#[test]
fn lsvps_a_base_file_is_format_4_and_holds_base_pages_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000003.1.idx");
    let mut w =
        IndexFileWriter::create_bases_only(&crate::storage::local(), &path, counters()).unwrap();
    let page = PageId::ROOT;
    w.add(&PageKey::new(1, page, 4, PageKind::Base), b"base at 4")
        .unwrap();
    // A DeltaPage key is refused, and nothing is written for it.
    assert!(w
        .add(&PageKey::new(1, page, 7, PageKind::Delta), b"delta")
        .is_err());
    w.add(&PageKey::new(1, page, 9, PageKind::Base), b"base at 9")
        .unwrap();
    let meta = FileMeta {
        min_version: 1,
        max_version: 9,
        replay_from: (1, 0),
        records: 2,
    };
    w.finish(&meta).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let footer = bytes.len() - FOOTER_LEN as usize;
    assert_eq!(&bytes[8..12], &index_file::BASES_ONLY_VERSION.to_le_bytes());
    assert_eq!(
        &bytes[footer + 64..footer + 68],
        &index_file::BASES_ONLY_VERSION.to_le_bytes()
    );
    let f = open(&path, 0, 1 << 20).unwrap();
    assert!(f.bases_only());
    assert_eq!(f.meta(), &meta);
    assert_eq!(
        f.get(&PageKey::new(1, page, 9, PageKind::Base)).unwrap(),
        Some(b"base at 9".to_vec())
    );
    // An ordinary index file is format 3.
    let (plain, _) = small_file(dir.path(), "000004.idx");
    let plain_bytes = std::fs::read(&plain).unwrap();
    assert_eq!(
        &plain_bytes[8..12],
        &index_file::WRITE_FORMAT_VERSION.to_le_bytes()
    );
    assert!(!open(&plain, 1, 1 << 20).unwrap().bases_only());

    // A file that says format 4 but holds a DeltaPage is corrupt where that page's index block is read: a
    // reader of a base file answers DeltaPage keys with BasePages, so it must never find one.
    let (relabelled, model) = small_file(dir.path(), "000005.1.idx");
    let delta = *model
        .keys()
        .find(|k| k.kind == PageKind::Delta)
        .expect("the random model has DeltaPages");
    let mut bytes = std::fs::read(&relabelled).unwrap();
    let format = index_file::BASES_ONLY_VERSION.to_le_bytes();
    bytes[8..12].copy_from_slice(&format);
    let crc = crate::fsutil::crc(&bytes[0..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    let footer = bytes.len() - FOOTER_LEN as usize;
    bytes[footer + 64..footer + 68].copy_from_slice(&format);
    let crc = crate::fsutil::crc(&bytes[footer..footer + 68]);
    bytes[footer + 68..footer + 72].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&relabelled, &bytes).unwrap();
    let f = open(&relabelled, 2, 1 << 20).unwrap();
    assert!(f.bases_only());
    assert_corrupt(f.get(&delta), &relabelled);
}

/// Found by review: the pinned ranges were found as if keys started with the depth (they start with the trie), so
/// a file holding several tries pinned the top of one trie at most, or nearly all of the first.
#[test]
fn hot_ranges_hold_the_top_pages_of_every_trie_and_nothing_deeper() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000001.idx");
    let mut rng = Rng::new(5);
    // Many tries, many records each: the index blocks fill, and tries start inside them.
    let mut model = Model::new();
    for tid in 0..5u32 {
        for (i, &page) in pages().iter().enumerate() {
            for v in 1..=(40 + i as u64) {
                let len = rng.below(300) as usize;
                model.insert(PageKey::new(tid, page, v, kind(v % 3 == 0)), rng.bytes(len));
            }
        }
    }
    let meta = meta_for(&model);
    write_file(&path, &model, &meta);
    let f = open(&path, 1, 1 << 20).unwrap();
    for depth in [2u8, 4, 6] {
        let ranges = f.hot_ranges(depth).unwrap();
        assert!(
            ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
            "{ranges:?}"
        );
        assert_eq!(ranges[0].0, 0);
        let inside = |s: u64, e: u64| ranges.iter().any(|&(a, l)| a <= s && e <= a + l);
        for key in model.keys() {
            let e = f.locate(key).unwrap().unwrap();
            assert_eq!(e.key, *key);
            let pinned = inside(e.offset, e.end());
            assert_eq!(pinned, key.page.depth < depth, "{key:?} at depth {depth}");
        }
    }
}
