//! Block store tests: round trips across segments, torn tails at every offset, corruption, truncation, crashes
//! during sealing, and garbage that must never panic.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use letus_core::Error;

use super::format::{self, FOOTER_FIXED_LEN, HEADER_LEN, RECORD_HEADER_LEN};
use super::*;

fn opts(segment_bytes: u64) -> BlockStoreOptions {
    BlockStoreOptions {
        segment_bytes,
        sync: true,
        ..BlockStoreOptions::default()
    }
}

fn fast(segment_bytes: u64) -> BlockStoreOptions {
    BlockStoreOptions {
        segment_bytes,
        sync: false,
        ..BlockStoreOptions::default()
    }
}

fn hash_of(v: u64) -> [u8; 32] {
    let mut h = [0xA5u8; 32];
    h[..8].copy_from_slice(&v.to_le_bytes());
    h
}

/// A block of a length that varies with the version (0 for some versions).
fn block_of(v: u64) -> Vec<u8> {
    let len = (v.wrapping_mul(37) % 97) as usize;
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(v) as u8)
        .collect()
}

fn record_of(v: u64) -> BlockRecord {
    BlockRecord {
        version: v,
        request_hash: hash_of(v),
        block: block_of(v),
    }
}

fn record_bytes(v: u64) -> u64 {
    RECORD_HEADER_LEN + block_of(v).len() as u64
}

fn append_all(s: &mut BlockStore, versions: &[u64]) {
    for &v in versions {
        s.append(v, hash_of(v), &block_of(v)).unwrap();
    }
}

fn check_all(s: &BlockStore, versions: &[u64]) {
    for &v in versions {
        assert_eq!(s.get(v).unwrap(), Some(record_of(v)), "version {v}");
    }
    assert_eq!(s.latest_version(), versions.last().copied());
    assert_eq!(s.first_version(), versions.first().copied());
}

fn seg(dir: &Path, id: u64) -> PathBuf {
    segment_path(dir, id)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

fn set_len(p: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn xor_byte(p: &Path, at: u64, mask: u8) {
    let f = OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, at).unwrap();
}

fn write_at(p: &Path, at: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

fn segment_ids_on_disk(dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".seg").map(|n| n.parse().unwrap())
        })
        .collect();
    ids.sort();
    ids
}

/// Strictly increasing versions with gaps, starting at 0.
fn versions(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 3 + (i % 2)).collect()
}

fn assert_corrupt_at(r: Result<BlockStore>, path: &Path, offset: u64) {
    match r {
        Err(Error::Corrupt {
            path: p, offset: o, ..
        }) => {
            assert_eq!(p, path);
            assert_eq!(o, offset);
        }
        Err(e) => panic!("expected corruption at {offset}, got {e}"),
        Ok(_) => panic!("expected corruption at {offset}, the store opened"),
    }
}

#[test]
fn blockstore_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<BlockStore>();
}

#[test]
fn blockstore_round_trip_across_segments_with_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("blocks"); // created by open
    let all = versions(60);
    let (first, rest) = all.split_at(40);
    {
        let mut s = BlockStore::open(&dir, opts(400)).unwrap();
        assert_eq!(s.latest_version(), None);
        append_all(&mut s, first);
        check_all(&s, first);
        let segs = s.segments();
        assert!(segs.len() >= 4, "{segs:?}");
        let (last, sealed) = segs.split_last().unwrap();
        assert!(!last.sealed);
        for (i, info) in sealed.iter().enumerate() {
            assert!(info.sealed);
            assert_eq!(info.id, i as u64 + 1);
            assert!(info.blocks >= 1);
            assert_eq!(info.bytes, file_len(&info.path));
            // Sealed once larger than segment_bytes: the records before the last were not.
            assert!(info.bytes > 400);
        }
        // Segments hold consecutive runs of the versions, in order.
        let listed: Vec<u64> = segs
            .iter()
            .filter_map(|i| i.first_version.zip(i.last_version))
            .flat_map(|(a, b)| first.iter().copied().filter(move |&v| v >= a && v <= b))
            .collect();
        assert_eq!(listed, first);
        let on_disk: u64 = segment_ids_on_disk(&dir)
            .into_iter()
            .map(|id| file_len(&seg(&dir, id)))
            .sum();
        assert_eq!(s.disk_bytes(), on_disk);
        assert_eq!(s.dir(), dir);
    }
    let before;
    {
        let mut s = BlockStore::open(&dir, opts(400)).unwrap();
        check_all(&s, first);
        before = s.segments();
        append_all(&mut s, rest);
        check_all(&s, &all);
    }
    let s = BlockStore::open(&dir, opts(400)).unwrap();
    check_all(&s, &all);
    let after = s.segments();
    // The sealed segments of the first session are unchanged.
    assert_eq!(&after[..before.len() - 1], &before[..before.len() - 1]);
}

#[test]
fn blockstore_sync_off_round_trip_and_default_options() {
    let d = BlockStoreOptions::default();
    assert_eq!((d.segment_bytes, d.sync), (64 << 20, true));
    let tmp = tempfile::tempdir().unwrap();
    let all = versions(30);
    {
        let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
        append_all(&mut s, &all);
    }
    let s = BlockStore::open(tmp.path(), BlockStoreOptions::default()).unwrap();
    check_all(&s, &all);
}

#[test]
fn blockstore_sealed_segment_opens_alone_from_its_footer() {
    let tmp = tempfile::tempdir().unwrap();
    let all = versions(40);
    let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
    append_all(&mut s, &all);
    let info = s.segments()[1].clone();
    assert!(info.sealed);
    drop(s);

    // The footer alone gives the index, without reading a record.
    let f = fsutil::open_read(&letus_core::storage::Local, &info.path).unwrap();
    let footer = recovery::read_footer(&*f, &info.path, info.bytes, info.id)
        .unwrap()
        .unwrap();
    assert_eq!(footer.versions.first().copied(), info.first_version);
    assert_eq!(footer.versions.last().copied(), info.last_version);
    assert_eq!(footer.versions.len(), info.blocks);

    // Moved to another directory (another tier) alone, it opens and serves its blocks.
    let other = tempfile::tempdir().unwrap();
    let moved = other.path().join(info.path.file_name().unwrap());
    std::fs::copy(&info.path, &moved).unwrap();
    let s2 = BlockStore::open(other.path(), fast(300)).unwrap();
    let mine: Vec<u64> = all
        .iter()
        .copied()
        .filter(|&v| v >= info.first_version.unwrap() && v <= info.last_version.unwrap())
        .collect();
    check_all(&s2, &mine);
    let segs = s2.segments();
    assert_eq!(segs.len(), 2);
    assert!(segs[0].sealed && !segs[1].sealed);
    assert_eq!(segs[1].id, info.id + 1);
}

#[test]
fn blockstore_tail_cut_by_deleting_oldest_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let all = versions(40);
    let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
    append_all(&mut s, &all);
    let segs = s.segments();
    drop(s);
    std::fs::remove_file(&segs[0].path).unwrap();
    std::fs::remove_file(&segs[1].path).unwrap();
    let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
    let kept: Vec<u64> = all
        .iter()
        .copied()
        .filter(|&v| v > segs[1].last_version.unwrap())
        .collect();
    check_all(&s, &kept);
    for &v in all.iter().filter(|&&v| v <= segs[1].last_version.unwrap()) {
        assert_eq!(s.get(v).unwrap(), None);
    }
    assert_eq!(s.segments()[0].id, 3);
    s.append(1000, hash_of(1000), &block_of(1000)).unwrap();
    assert_eq!(s.get(1000).unwrap(), Some(record_of(1000)));
}

/// Builds a store in `dir` and returns (path of the active segment, start and end of its last record).
fn build_for_tear(dir: &Path, vs: &[u64], segment_bytes: u64) -> (PathBuf, u64, u64) {
    let mut s = BlockStore::open(dir, fast(segment_bytes)).unwrap();
    let (last, init) = vs.split_last().unwrap();
    append_all(&mut s, init);
    let start = s.segments().last().unwrap().bytes;
    s.append(*last, hash_of(*last), &block_of(*last)).unwrap();
    let info = s.segments().last().unwrap().clone();
    assert!(!info.sealed);
    assert_eq!(info.bytes, start + record_bytes(*last));
    (info.path, start, info.bytes)
}

fn check_torn_recovery(dir: &Path, vs: &[u64], path: &Path, start: u64, segment_bytes: u64) {
    let (last, init) = vs.split_last().unwrap();
    {
        let mut s = BlockStore::open(dir, fast(segment_bytes)).unwrap();
        check_all(&s, init);
        assert_eq!(s.get(*last).unwrap(), None);
        assert_eq!(file_len(path), start);
        // Appends continue at the cut.
        s.append(*last, hash_of(*last), &block_of(*last)).unwrap();
        s.append(last + 1, hash_of(last + 1), &block_of(last + 1))
            .unwrap();
    }
    let s = BlockStore::open(dir, fast(segment_bytes)).unwrap();
    let mut all = vs.to_vec();
    all.push(last + 1);
    check_all(&s, &all);
}

#[test]
fn blockstore_torn_tail_at_every_offset_is_truncated() {
    // The last record is the sixth of one active segment, with a block of 19 bytes, then of 93 bytes.
    let vs = [1, 2, 4, 7, 9, 11];
    assert_eq!(block_of(11).len(), 19);
    let vs_big = [1, 2, 4, 7, 9, 13];
    for vs in [&vs[..], &vs_big[..]] {
        let probe = tempfile::tempdir().unwrap();
        let (_, start, end) = build_for_tear(probe.path(), vs, 1 << 20);
        for cut in start..end {
            let tmp = tempfile::tempdir().unwrap();
            let (path, _, _) = build_for_tear(tmp.path(), vs, 1 << 20);
            set_len(&path, cut);
            check_torn_recovery(tmp.path(), vs, &path, start, 1 << 20);
        }
        // The whole record is there but some of its bytes never reached the disk (read back as zeros).
        for from in start..end {
            let tmp = tempfile::tempdir().unwrap();
            let (path, _, _) = build_for_tear(tmp.path(), vs, 1 << 20);
            let n = (end - from).min(7) as usize;
            let mut old = vec![0u8; n];
            std::fs::File::open(&path)
                .unwrap()
                .read_exact_at(&mut old, from)
                .unwrap();
            if old.iter().all(|&b| b == 0) {
                continue; // nothing would change
            }
            write_at(&path, from, &vec![0u8; n]);
            check_torn_recovery(tmp.path(), vs, &path, start, 1 << 20);
        }
    }
}

#[test]
fn blockstore_torn_first_record_of_a_new_segment_is_truncated() {
    // segment_bytes 250: the third record seals segment 1; the fourth is the first of segment 2.
    let vs = [1, 2, 3, 5];
    let probe = tempfile::tempdir().unwrap();
    let (path, start, end) = build_for_tear(probe.path(), &vs, 250);
    assert_eq!(start, HEADER_LEN);
    assert!(path.ends_with("000002.seg"), "{path:?}");
    for cut in start..end {
        let tmp = tempfile::tempdir().unwrap();
        let (path, _, _) = build_for_tear(tmp.path(), &vs, 250);
        set_len(&path, cut);
        check_torn_recovery(tmp.path(), &vs, &path, start, 250);
    }
}

#[test]
fn blockstore_flipped_byte_in_sealed_segment_is_detected() {
    let all = versions(30);
    let probe = tempfile::tempdir().unwrap();
    let info = {
        let mut s = BlockStore::open(probe.path(), fast(300)).unwrap();
        append_all(&mut s, &all);
        assert!(s.segments().len() >= 3);
        s.segments()[1].clone()
    };
    let mine: Vec<u64> = all
        .iter()
        .copied()
        .filter(|&v| v >= info.first_version.unwrap() && v <= info.last_version.unwrap())
        .collect();
    let footer_start = info.bytes - (FOOTER_FIXED_LEN + 20 * info.blocks as u64);
    let (mut at_open, mut at_read) = (0, 0);
    for at in 0..info.bytes {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
        append_all(&mut s, &all);
        drop(s);
        let p = seg(tmp.path(), info.id);
        xor_byte(&p, at, 0x10);
        match BlockStore::open(tmp.path(), fast(300)) {
            Err(Error::Corrupt { path, .. }) => {
                assert_eq!(path, p, "byte {at}");
                at_open += 1;
            }
            Err(Error::UnsupportedFormat { .. }) => assert!((8..12).contains(&at)),
            Err(e) => panic!("byte {at}: {e}"),
            Ok(s) => {
                // Only record bytes are not read at open: the read of that record reports the damage.
                assert!(at >= HEADER_LEN && at < footer_start, "byte {at}");
                let errs: Vec<_> = mine.iter().filter_map(|&v| s.get(v).err()).collect();
                assert_eq!(errs.len(), 1, "byte {at}");
                assert!(matches!(&errs[0], Error::Corrupt { path, .. } if *path == p));
                at_read += 1;
            }
        }
    }
    assert_eq!(at_read, footer_start - HEADER_LEN);
    assert_eq!(at_open, info.bytes - at_read - 4);
}

#[test]
fn blockstore_flipped_byte_in_earlier_record_of_active_segment_is_corrupt() {
    let vs = [1u64, 2, 4, 7, 9, 11];
    let mut offsets = vec![HEADER_LEN];
    for &v in &vs {
        offsets.push(offsets.last().unwrap() + record_bytes(v));
    }
    let last_start = offsets[vs.len() - 1];
    for at in 0..last_start {
        let tmp = tempfile::tempdir().unwrap();
        let (path, start, _) = build_for_tear(tmp.path(), &vs, 1 << 20);
        assert_eq!(start, last_start);
        xor_byte(&path, at, 0x04);
        let r = BlockStore::open(tmp.path(), fast(1 << 20));
        if at < HEADER_LEN {
            assert!(
                matches!(
                    r,
                    Err(Error::Corrupt { .. }) | Err(Error::UnsupportedFormat { .. })
                ),
                "byte {at}"
            );
            continue;
        }
        // Reported at the start of the damaged record.
        let rec = offsets.iter().rposition(|&o| o <= at).unwrap();
        assert_corrupt_at(r, &path, offsets[rec]);
    }
}

#[test]
fn blockstore_damage_in_last_sealed_segment_records_is_corrupt() {
    // A crash after the footer was fsynced but before the next segment existed leaves a sealed last segment;
    // a damaged record in it is not a torn tail: its footer proves later data.
    let tmp = tempfile::tempdir().unwrap();
    let vs = [1u64, 2, 3];
    {
        let mut s = BlockStore::open(tmp.path(), fast(250)).unwrap();
        append_all(&mut s, &vs);
        assert!(s.segments()[0].sealed);
        assert_eq!(s.segments()[0].blocks, 3);
    }
    std::fs::remove_file(seg(tmp.path(), 2)).unwrap();
    let p = seg(tmp.path(), 1);
    let second = HEADER_LEN + record_bytes(1);
    xor_byte(&p, second + 50, 0x01);
    assert_corrupt_at(BlockStore::open(tmp.path(), fast(250)), &p, second);
    // Damage in the last record before the footer too.
    xor_byte(&p, second + 50, 0x01);
    let third = second + record_bytes(2);
    xor_byte(&p, third + 5, 0x01);
    assert_corrupt_at(BlockStore::open(tmp.path(), fast(250)), &p, third);
}

#[test]
fn blockstore_truncate_after_across_segment_boundaries() {
    let all = versions(50);
    let build = |dir: &Path| -> Vec<SegmentInfo> {
        let mut s = BlockStore::open(dir, opts(300)).unwrap();
        append_all(&mut s, &all);
        s.segments()
    };

    // v inside sealed segment 2: segments 3.. are removed, 2 is cut and becomes active.
    let tmp = tempfile::tempdir().unwrap();
    let segs = build(tmp.path());
    assert!(segs.len() >= 5);
    let s2 = &segs[1];
    let v = all
        .iter()
        .copied()
        .filter(|&x| x >= s2.first_version.unwrap() && x < s2.last_version.unwrap())
        .nth(1)
        .unwrap();
    let kept: Vec<u64> = all.iter().copied().filter(|&x| x <= v).collect();
    {
        let mut s = BlockStore::open(tmp.path(), opts(300)).unwrap();
        s.truncate_after(v).unwrap();
        check_all(&s, &kept);
        for &x in all.iter().filter(|&&x| x > v) {
            assert_eq!(s.get(x).unwrap(), None);
        }
        assert_eq!(segment_ids_on_disk(tmp.path()), vec![1, 2]);
        let now = s.segments();
        assert_eq!(now.len(), 2);
        assert!(now[0].sealed && !now[1].sealed);
        let expect_len: u64 = HEADER_LEN
            + kept
                .iter()
                .filter(|&&x| x >= s2.first_version.unwrap())
                .map(|&x| record_bytes(x))
                .sum::<u64>();
        assert_eq!(now[1].bytes, expect_len);
        assert_eq!(file_len(&now[1].path), expect_len);
        assert_eq!(s.disk_bytes(), now[0].bytes + expect_len);
        // Idempotent.
        s.truncate_after(v).unwrap();
        s.truncate_after(v + 1000).unwrap();
        check_all(&s, &kept);
    }
    let mut s = BlockStore::open(tmp.path(), opts(300)).unwrap();
    check_all(&s, &kept);
    // Appends continue and seal again.
    let more: Vec<u64> = (1..=20).map(|i| v + i).collect();
    append_all(&mut s, &more);
    let mut want = kept.clone();
    want.extend(&more);
    check_all(&s, &want);
    assert!(s.segments().len() >= 3);
    drop(s);
    check_all(&BlockStore::open(tmp.path(), opts(300)).unwrap(), &want);

    // v the last version of sealed segment 2: segment 3 stays as an empty active segment.
    let tmp = tempfile::tempdir().unwrap();
    let segs = build(tmp.path());
    let v = segs[1].last_version.unwrap();
    let kept: Vec<u64> = all.iter().copied().filter(|&x| x <= v).collect();
    {
        let mut s = BlockStore::open(tmp.path(), opts(300)).unwrap();
        s.truncate_after(v).unwrap();
        check_all(&s, &kept);
        assert_eq!(segment_ids_on_disk(tmp.path()), vec![1, 2, 3]);
        let now = s.segments();
        assert_eq!(now[..2], segs[..2]);
        assert_eq!(
            (now[2].bytes, now[2].sealed, now[2].blocks),
            (HEADER_LEN, false, 0)
        );
    }
    check_all(&BlockStore::open(tmp.path(), opts(300)).unwrap(), &kept);

    // v below every version: everything goes, segment 1 stays empty.
    let tmp = tempfile::tempdir().unwrap();
    let shifted: Vec<u64> = all.iter().map(|x| x + 10).collect();
    {
        let mut s = BlockStore::open(tmp.path(), opts(300)).unwrap();
        append_all(&mut s, &shifted);
        s.truncate_after(5).unwrap();
        assert_eq!(s.latest_version(), None);
        assert_eq!(s.get(10).unwrap(), None);
        assert_eq!(segment_ids_on_disk(tmp.path()), vec![1]);
        assert_eq!(s.disk_bytes(), HEADER_LEN);
        s.append(6, hash_of(6), &block_of(6)).unwrap();
    }
    check_all(&BlockStore::open(tmp.path(), opts(300)).unwrap(), &[6]);
}

#[test]
fn blockstore_truncate_after_interrupted_is_finished_by_the_next_call() {
    // A crash after the newest segments were removed but before the sealed segment was cut: the store opens
    // (the sealed last segment gets a new active successor) and truncate_after finishes the job.
    let tmp = tempfile::tempdir().unwrap();
    let all = versions(50);
    let segs = {
        let mut s = BlockStore::open(tmp.path(), opts(300)).unwrap();
        append_all(&mut s, &all);
        s.segments()
    };
    for info in segs[2..].iter().rev() {
        std::fs::remove_file(&info.path).unwrap();
    }
    let v = segs[1].first_version.unwrap();
    let mut s = BlockStore::open(tmp.path(), opts(300)).unwrap();
    assert_eq!(s.latest_version(), segs[1].last_version);
    assert_eq!(segment_ids_on_disk(tmp.path()), vec![1, 2, 3]);
    s.truncate_after(v).unwrap();
    let kept: Vec<u64> = all.iter().copied().filter(|&x| x <= v).collect();
    check_all(&s, &kept);
    assert_eq!(segment_ids_on_disk(tmp.path()), vec![1, 2]);
    drop(s);
    check_all(&BlockStore::open(tmp.path(), opts(300)).unwrap(), &kept);
}

#[test]
fn blockstore_versions_must_increase() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = BlockStore::open(tmp.path(), opts(1 << 20)).unwrap();
    s.append(0, hash_of(0), b"genesis").unwrap();
    assert!(matches!(
        s.append(0, hash_of(0), b"again"),
        Err(Error::VersionNotIncreasing {
            requested: 0,
            last: 0
        })
    ));
    s.append(5, hash_of(5), &block_of(5)).unwrap();
    for bad in [5, 4, 0] {
        assert!(matches!(
            s.append(bad, hash_of(bad), b"x"),
            Err(Error::VersionNotIncreasing { last: 5, .. })
        ));
    }
    let too_big = vec![0u8; MAX_BLOCK_BYTES + 1];
    assert!(matches!(
        s.append(6, hash_of(6), &too_big),
        Err(Error::TooLarge { size, limit, .. }) if size == MAX_BLOCK_BYTES + 1 && limit == MAX_BLOCK_BYTES
    ));
    // Refused appends leave the store usable.
    s.append(6, hash_of(6), &block_of(6)).unwrap();
    drop(s);
    let mut s = BlockStore::open(tmp.path(), opts(1 << 20)).unwrap();
    assert!(matches!(
        s.append(6, hash_of(6), b"x"),
        Err(Error::VersionNotIncreasing { last: 6, .. })
    ));
    s.append(u64::MAX, hash_of(7), b"last").unwrap();
    assert_eq!(s.get(u64::MAX).unwrap().unwrap().block, b"last");
    assert_eq!(s.get(0).unwrap().unwrap().block, b"genesis");
}

#[test]
fn blockstore_get_of_unknown_versions_is_none() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
    for v in [0, 1, 100, u64::MAX] {
        assert_eq!(s.get(v).unwrap(), None);
    }
    assert_eq!(s.latest_version(), None);
    let vs: Vec<u64> = (1..=40).map(|i| i * 10).collect();
    append_all(&mut s, &vs);
    assert!(s.segments().len() >= 3);
    for v in (0..=410).filter(|v| v % 10 != 0) {
        assert_eq!(s.get(v).unwrap(), None, "{v}");
    }
    for v in [0, 410, 1000, u64::MAX] {
        assert_eq!(s.get(v).unwrap(), None, "{v}");
    }
    check_all(&s, &vs);
}

#[test]
fn blockstore_crash_during_sealing_recovers() {
    // Three records with segment_bytes 250: the third append seals segment 1 and creates segment 2.
    let vs = [1u64, 2, 3];
    let probe = tempfile::tempdir().unwrap();
    let (sealed_bytes, n) = {
        let mut s = BlockStore::open(probe.path(), opts(250)).unwrap();
        append_all(&mut s, &vs[..2]);
        assert_eq!(s.segments().len(), 1);
        append_all(&mut s, &vs[2..]);
        let segs = s.segments();
        assert_eq!(segs.len(), 2);
        assert!(segs[0].sealed && segs[0].blocks == 3);
        (std::fs::read(&segs[0].path).unwrap(), segs[0].blocks)
    };
    let footer_len = (FOOTER_FIXED_LEN + 20 * n as u64) as usize;
    let f = sealed_bytes.len() - footer_len;
    let header2 = format::encode_header(2);

    // Whatever the crash left, open ends with segment 1 sealed exactly as an uninterrupted sealing leaves it,
    // and segment 2 empty and active.
    let reopen_and_continue = |dir: &Path| {
        {
            let mut s = BlockStore::open(dir, opts(250)).unwrap();
            check_all(&s, &vs);
            let segs = s.segments();
            assert_eq!(segs.len(), 2);
            assert!(segs[0].sealed && !segs[1].sealed);
            assert_eq!(std::fs::read(&segs[0].path).unwrap(), sealed_bytes);
            assert_eq!(std::fs::read(&segs[1].path).unwrap(), header2);
            s.append(4, hash_of(4), &block_of(4)).unwrap();
        }
        let s = BlockStore::open(dir, opts(250)).unwrap();
        check_all(&s, &[1, 2, 3, 4]);
        assert_eq!(s.segments()[1].blocks, 1);
    };

    // The footer partly written (any prefix), segment 2 not yet created.
    for k in 0..=footer_len {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(seg(tmp.path(), 1), &sealed_bytes[..f + k]).unwrap();
        reopen_and_continue(tmp.path());
    }
    // The footer's length written but some of its bytes never reached the disk.
    for from in f..sealed_bytes.len() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = sealed_bytes.clone();
        let to = (from + 9).min(b.len());
        if b[from..to].iter().all(|&x| x == 0) {
            continue;
        }
        b[from..to].fill(0);
        std::fs::write(seg(tmp.path(), 1), &b).unwrap();
        reopen_and_continue(tmp.path());
    }
    // The footer durable, segment 2 created with a partial header.
    for k in 0..=HEADER_LEN as usize {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(seg(tmp.path(), 1), &sealed_bytes).unwrap();
        std::fs::write(seg(tmp.path(), 2), &header2[..k]).unwrap();
        reopen_and_continue(tmp.path());
    }
}

#[test]
fn blockstore_structural_damage_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let mut all = versions(40);
    let segs = {
        let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
        append_all(&mut s, &all);
        if s.segments().last().unwrap().blocks == 0 {
            append_all(&mut s, &[500]);
            all.push(500);
        }
        s.segments()
    };
    assert!(segs.len() >= 4);
    // A sealed segment cut short.
    let keep = std::fs::read(&segs[1].path).unwrap();
    set_len(&segs[1].path, segs[1].bytes - 1);
    assert!(matches!(
        BlockStore::open(tmp.path(), fast(300)),
        Err(Error::Corrupt { path, .. }) if path == segs[1].path
    ));
    std::fs::write(&segs[1].path, &keep).unwrap();
    // A segment missing in the middle.
    std::fs::rename(&segs[2].path, tmp.path().join("moved")).unwrap();
    assert!(matches!(
        BlockStore::open(tmp.path(), fast(300)),
        Err(Error::Corrupt { path, .. }) if path == segs[2].path
    ));
    std::fs::rename(tmp.path().join("moved"), &segs[2].path).unwrap();
    // A newer format version.
    write_at(&segs[0].path, 8, &2u32.to_le_bytes());
    assert!(matches!(
        BlockStore::open(tmp.path(), fast(300)),
        Err(Error::UnsupportedFormat { found: 2, .. })
    ));
    write_at(&segs[0].path, 8, &1u32.to_le_bytes());
    // A bad header with records after it is not an interrupted creation.
    let last = segs.last().unwrap();
    write_at(&last.path, 0, b"XX");
    assert!(matches!(
        BlockStore::open(tmp.path(), fast(300)),
        Err(Error::Corrupt { path, offset: 0, .. }) if path == last.path
    ));
    write_at(&last.path, 0, b"LE");
    check_all(&BlockStore::open(tmp.path(), fast(300)).unwrap(), &all);
    // Unrelated files are ignored.
    std::fs::write(tmp.path().join("notes.txt"), b"hello").unwrap();
    std::fs::write(tmp.path().join("7.seg"), b"not canonical").unwrap();
    check_all(&BlockStore::open(tmp.path(), fast(300)).unwrap(), &all);
}

#[test]
fn blockstore_is_locked_while_open() {
    let tmp = tempfile::tempdir().unwrap();
    let s = BlockStore::open(tmp.path(), fast(300)).unwrap();
    assert!(matches!(
        BlockStore::open(tmp.path(), fast(300)),
        Err(Error::Locked(_))
    ));
    drop(s);
    BlockStore::open(tmp.path(), fast(300)).unwrap();
}

use letus_workload::Rng;

#[test]
fn blockstore_garbage_never_panics() {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let all = versions(20);
    for round in 0..200 {
        let tmp = tempfile::tempdir().unwrap();
        let segs = {
            let mut s = BlockStore::open(tmp.path(), fast(300)).unwrap();
            append_all(&mut s, &all);
            s.segments()
        };
        let victim = &segs[(rng.next_u64() % segs.len() as u64) as usize];
        let len = victim.bytes;
        match round % 4 {
            // Random bytes over a random range.
            0 => {
                let at = rng.next_u64() % len;
                let n = 1 + rng.next_u64() % 64;
                write_at(&victim.path, at, &rng.bytes(n as usize));
            }
            // Random bytes appended.
            1 => {
                let n = 1 + rng.next_u64() % 300;
                write_at(&victim.path, len, &rng.bytes(n as usize));
            }
            // Plausible trailer with random fields (valid magic and checksum).
            2 => {
                let mut t = rng.bytes(40);
                let c = letus_core::fsutil::crc(&t);
                t.extend_from_slice(&c.to_le_bytes());
                t.extend_from_slice(&format::TRAILER_MAGIC);
                write_at(&victim.path, len.saturating_sub(52).max(HEADER_LEN), &t);
            }
            // Record-like garbage with huge or small lengths.
            _ => {
                let at = HEADER_LEN + rng.next_u64() % (len - HEADER_LEN);
                let mut h = rng.bytes(48);
                h[4..8].copy_from_slice(&((rng.next_u64() % 512) as u32).to_le_bytes());
                write_at(&victim.path, at, &h);
            }
        }
        if let Ok(s) = BlockStore::open(tmp.path(), fast(300)) {
            for &v in &all {
                let _ = s.get(v);
            }
        }
    }
}

#[test]
fn cutting_the_tail_removes_whole_old_segments_and_survives_a_crash_between_removals() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("blocks");
    let all = versions(80);
    let mut s = BlockStore::open(&dir, fast(300)).unwrap();
    append_all(&mut s, &all);
    let before = s.segments();
    assert!(before.len() >= 6, "{before:?}");
    assert!(!s.tail_cut());
    let below = all[50];
    let (segments, bytes) = s.cut_tail(below).unwrap();
    let after = s.segments();
    // Exactly the sealed segments wholly below `below` went, oldest first.
    let gone: Vec<_> = before
        .iter()
        .take_while(|i| i.sealed && i.last_version.is_some_and(|l| l < below))
        .collect();
    assert_eq!(segments as usize, gone.len());
    assert!(segments >= 2, "{before:?}");
    assert_eq!(bytes, gone.iter().map(|i| i.bytes).sum::<u64>());
    assert_eq!(after.len(), before.len() - gone.len());
    assert!(s.tail_cut());
    let first = s.first_version().unwrap();
    assert!(first <= below && first > all[0]);
    for &v in &all {
        let got = s.get(v).unwrap();
        if v < first {
            assert_eq!(got, None, "{v}");
        } else {
            assert_eq!(got, Some(record_of(v)), "{v}");
        }
    }
    // Cutting again to the same place does nothing; appends go on.
    assert_eq!(s.cut_tail(below).unwrap(), (0, 0));
    s.append(1_000, hash_of(1_000), &block_of(1_000)).unwrap();
    drop(s);
    // A crash after the removal of only the oldest of the next segments to cut: the ids are still contiguous
    // from the new lowest, and the store opens with every block from there.
    let ids = segment_ids_on_disk(&dir);
    std::fs::remove_file(seg(&dir, ids[0])).unwrap();
    let s = BlockStore::open(&dir, fast(300)).unwrap();
    assert_eq!(segment_ids_on_disk(&dir)[0], ids[1]);
    let first = s.first_version().unwrap();
    for &v in all.iter().filter(|&&v| v >= first) {
        assert_eq!(s.get(v).unwrap(), Some(record_of(v)), "{v}");
    }
    assert_eq!(s.latest_version(), Some(1_000));
}

#[test]
fn segments_sealed_by_block_count_let_the_tail_follow_a_window_of_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let by_blocks = |n| BlockStoreOptions {
        segment_blocks: Some(n),
        ..fast(64 << 20)
    };
    let keep = 10u64;
    let per = super::segment_blocks_for(keep);
    assert_eq!((per, super::segment_blocks_for(100)), (4, 25));
    let mut s = BlockStore::open(tmp.path(), by_blocks(per)).unwrap();
    for v in 1..=100u64 {
        s.append(v, hash_of(v), &block_of(v)).unwrap();
        s.cut_tail((v + 1).saturating_sub(keep)).unwrap();
        let segs = s.segments();
        // Every sealed segment holds exactly `per` blocks; the active one fewer.
        for g in &segs[..segs.len() - 1] {
            assert!(g.sealed && g.blocks == per as usize, "{v}: {g:?}");
        }
        assert!(segs.last().unwrap().blocks < per as usize);
        // The newest `keep` blocks are all there, and at most `per - 1` more.
        let first = s.first_version().unwrap();
        let held = v + 1 - first;
        assert!(
            held >= keep.min(v) && held < keep + per,
            "{v}: {held} blocks held"
        );
        for u in first..=v {
            assert_eq!(s.get(u).unwrap(), Some(record_of(u)));
        }
    }
    s.append(101, hash_of(101), &block_of(101)).unwrap();
    drop(s);
    // A store reopened with a smaller count seals its active segment, as one reopened with smaller bytes does.
    let mut s = BlockStore::open(tmp.path(), by_blocks(1)).unwrap();
    let segs = s.segments();
    let last = &segs[segs.len() - 2];
    assert!(last.sealed && last.last_version == Some(101));
    assert_eq!(segs.last().unwrap().blocks, 0);
    s.append(102, hash_of(102), &block_of(102)).unwrap();
    assert_eq!(s.get(101).unwrap(), Some(record_of(101)));
    assert_eq!(s.get(102).unwrap(), Some(record_of(102)));
}
