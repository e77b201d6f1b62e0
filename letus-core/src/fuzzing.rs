//! Entry points for the fuzz targets in `fuzz/` (not part of the engine's API): every decoder of bytes that come
//! from disk, fed arbitrary input. Each returns normally, with the decoded value or a typed error; a panic, a hang
//! or an allocation beyond the input's size is a bug. The same functions run over random and mutated inputs in
//! the unit tests, so CI exercises them without a fuzzer. The files are held in memory ([`Memory`]): the decoders
//! are the ones the engine runs on local files, at the speed of the decoder rather than of the file system.

use std::path::Path;

use letus_verify::KeyPath;

use crate::error::Result;
use crate::lsvps::{BlockCache, IndexFile, PageId, PageKey, PageKind};
use crate::metrics::Counters;
use crate::storage::{Memory, Storage};
use crate::trie::page::{Page, Record};
use crate::vdls::{Position, Vdls, VdlsOptions};

/// A page record (the payload of a BasePage or DeltaPage), and for a BasePage the page built from its slots.
pub fn page_record(bytes: &[u8]) {
    if let Ok(Record::Base { version, slots, .. }) = Record::decode(bytes) {
        let _ = Page::build(PageId::ROOT, version, None, slots.clone());
        if let Some(id) = PageId::new(2, &[0x12; 32]) {
            let _ = Page::build(id, version, None, slots);
        }
    }
}

/// A value-log record at a plausible place (file 1, just after the file header).
pub fn value_record(bytes: &[u8]) {
    let _ = crate::vdls::record::decode(bytes, 1, 32);
}

/// `bytes` as index file 1 in `dir` (a path in memory): opened (header, footer, lookup block), then looked up for
/// a few keys.
pub fn index_file(dir: &Path, bytes: &[u8]) -> Result<()> {
    let path = dir.join("000001.idx");
    let fs = Memory::new();
    fs.put(&path, bytes);
    let counters = std::sync::Arc::new(Counters::default());
    let cache = std::sync::Arc::new(BlockCache::with_open_files(
        std::sync::Arc::new(fs),
        1 << 16,
        4,
    ));
    let f = IndexFile::open(&path, 1, counters, cache)?;
    for (tid, depth, version) in [(0, 0, 1), (0, 2, u64::MAX), (7, 4, f.meta().max_version)] {
        if let Some(id) = PageId::new(depth, &KeyPath::of(b"k").0) {
            for kind in [PageKind::Base, PageKind::Delta] {
                let key = PageKey::new(tid, id, version, kind);
                let _ = f.floor(&key)?;
                let _ = f.get(&key)?;
            }
        }
    }
    Ok(())
}

/// `bytes` as value-log file 1 in `dir` (a path in memory): recovered from its start, every complete group
/// replayed.
pub fn value_log(dir: &Path, bytes: &[u8]) -> Result<u64> {
    let vdir = dir.join("vdls");
    let fs = Memory::new();
    fs.put(&vdir.join("000001.vdl"), bytes);
    let mut records = 0u64;
    let v = Vdls::open(
        &(std::sync::Arc::new(fs) as crate::storage::SharedStorage),
        &vdir,
        VdlsOptions {
            sync: false,
            ..VdlsOptions::default()
        },
        std::sync::Arc::new(Counters::default()),
        Position::START,
        |_, _, _| {
            records += 1;
            Ok(())
        },
    )?;
    drop(v);
    Ok(records)
}

/// `bytes` as the roots log, the tombstone log or the history base (by `which % 3`) of `dir` (a path in memory),
/// opened as if `flushed` were the newest flushed version.
pub fn small_log(dir: &Path, which: u8, flushed: Option<u64>, bytes: &[u8]) -> Result<()> {
    let name = [
        "roots.log",
        "tombstones.log",
        "history_base",
        crate::prune_manifest::FILE_NAME,
        crate::vdls::collected::FILE_NAME,
    ][usize::from(which % 5)];
    let fs = Memory::new();
    fs.put(&dir.join(name), bytes);
    let fs: &dyn Storage = &fs;
    match which % 5 {
        0 => crate::roots_log::RootsLog::open(fs, dir, flushed).map(drop),
        1 => crate::tombstones::TombstoneLog::open(fs, dir, flushed).map(drop),
        2 => crate::history_base::read(fs, dir).map(drop),
        3 => crate::prune_manifest::read(fs, dir).map(drop),
        _ => crate::vdls::collected::read(fs, dir).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bytes, and single-bit flips and truncations of a real store's files, through every entry point:
    /// no panic.
    #[test]
    fn decoders_take_garbage() {
        let mut rng = letus_workload::Rng::new(99);
        let dir = tempfile::tempdir().unwrap();
        // A real store's files to mutate.
        let src = dir.path().join("src");
        {
            let mut s = crate::Store::open(
                &src,
                crate::Options {
                    memtable_bytes: 1 << 20,
                    ..crate::Options::default()
                },
            )
            .unwrap();
            for v in 1..=5u64 {
                for i in 0..40u64 {
                    s.put(0, &(v * 7 + i).to_le_bytes(), &v.to_le_bytes())
                        .unwrap();
                }
                s.delete(0, &(v * 3).to_le_bytes()).unwrap();
                s.commit(v).unwrap();
            }
            s.close().unwrap();
        }
        let seeds: Vec<Vec<u8>> = [
            "vdls/000001.vdl",
            "lsvps/000001.idx",
            "roots.log",
            "tombstones.log",
        ]
        .iter()
        .map(|f| std::fs::read(src.join(f)).unwrap())
        .collect();
        // Unmutated, every file decodes: the entry points reach the decoders (a harness that failed before them,
        // say on a path that does not exist, would fuzz nothing).
        let at = Path::new("/fuzz");
        assert!(value_log(at, &seeds[0]).unwrap() > 0);
        index_file(at, &seeds[1]).unwrap();
        small_log(at, 0, Some(5), &seeds[2]).unwrap();
        small_log(at, 1, Some(5), &seeds[3]).unwrap();
        for round in 0..1_500u64 {
            let which = (round % 5) as usize;
            let bytes = match seeds.get(which) {
                Some(seed) => {
                    let mut b = seed.clone();
                    for _ in 0..1 + rng.below(3) {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] ^= 1 << rng.below(8);
                    }
                    if rng.below(4) == 0 {
                        b.truncate(rng.below(b.len() as u64 + 1) as usize);
                    }
                    b
                }
                None => {
                    let n = rng.below(300) as usize;
                    rng.bytes(n)
                }
            };
            let sub = dir.path().join(format!("r{round}"));
            std::fs::create_dir_all(&sub).unwrap();
            page_record(&bytes);
            value_record(&bytes);
            match which {
                0 => drop(value_log(&sub, &bytes)),
                1 => drop(index_file(&sub, &bytes)),
                2 => drop(small_log(&sub, 0, Some(rng.below(6)), &bytes)),
                3 => drop(small_log(&sub, 1, Some(rng.below(6)), &bytes)),
                _ => {
                    let _ = index_file(&sub, &bytes);
                    let _ = value_log(&sub, &bytes);
                    let _ = small_log(&sub, round as u8, Some(rng.below(6)), &bytes);
                }
            }
            let _ = std::fs::remove_dir_all(&sub);
        }
    }
}
