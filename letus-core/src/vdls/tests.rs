//! Tests of VDLS: encoding, replay, torn tails, corruption, rotation, history, bogus locations, and property
//! tests of crash and damage models.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use tempfile::TempDir;

use super::record::COMMIT_HEADER_LEN;
use super::*;

type Replayed = Vec<(Location, Record)>;

fn opts(file_bytes: u64) -> VdlsOptions {
    VdlsOptions {
        file_bytes,
        sync: true,
        up_to: None,
    }
}

fn open_collect(dir: &Path, o: VdlsOptions, from: Position) -> Result<(Vdls, Replayed)> {
    let mut got = Vec::new();
    let v = Vdls::open(
        &crate::storage::local(),
        dir,
        o,
        Arc::new(Counters::default()),
        from,
        |l, r, _| {
            got.push((l, r.clone()));
            Ok(())
        },
    )?;
    Ok((v, got))
}

fn path_of(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:06}.vdl"))
}

fn set_len(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn file_ids(dir: &Path) -> Vec<u32> {
    let mut ids: Vec<u32> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_suffix(".vdl").map(|s| s.parse().unwrap())
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn copy_dir(src: &Path, dst: &Path) {
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

/// One committed group as the writer saw it.
#[derive(Clone, Debug)]
struct Committed {
    recs: Replayed,
    commit: (Location, Record),
    end: Position,
}

impl Committed {
    /// Offset of the group's first byte in its file.
    fn start(&self) -> u64 {
        self.recs
            .first()
            .map_or(self.commit.0.offset, |(l, _)| l.offset)
    }
}

/// Tracks the newest location of every key so that `prev` links are right.
#[derive(Default, Clone)]
struct Writer {
    last: HashMap<Vec<u8>, Location>,
}

impl Writer {
    /// Appends `updates` (value `None` = delete) at `version` and commits with `payload`.
    fn commit(
        &mut self,
        v: &mut Vdls,
        version: u64,
        updates: &[(Vec<u8>, Option<Vec<u8>>)],
        payload: &[u8],
    ) -> Committed {
        let mut recs = Vec::new();
        for (k, val) in updates {
            let prev = self.last.get(k).copied();
            let rec = match val {
                Some(val) => Record::Put {
                    version,
                    tid: 7,
                    key: k.clone(),
                    value: val.clone(),
                    prev,
                },
                None => Record::Delete {
                    version,
                    tid: 7,
                    key: k.clone(),
                    prev,
                },
            };
            let loc = v.append(&rec).unwrap();
            self.last.insert(k.clone(), loc);
            recs.push((loc, rec));
        }
        let end = v.commit(version, payload).unwrap();
        let clen = (COMMIT_HEADER_LEN + payload.len()) as u32;
        let commit = (
            Location {
                file_id: end.file_id,
                offset: end.offset - u64::from(clen),
                len: clen,
            },
            Record::Commit {
                version,
                payload: payload.to_vec(),
            },
        );
        Committed { recs, commit, end }
    }
}

fn flatten(groups: &[Committed]) -> Replayed {
    groups
        .iter()
        .flat_map(|g| {
            g.recs
                .iter()
                .cloned()
                .chain(std::iter::once(g.commit.clone()))
        })
        .collect()
}

fn simple_updates(version: u64, n: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    (0..n)
        .map(|i| {
            let key = format!("key-{}", i % 3).into_bytes();
            let val = if (version as usize + i) % 4 == 3 {
                None
            } else {
                Some(format!("value-{version}-{i}").into_bytes())
            };
            (key, val)
        })
        .collect()
}

/// Writes `n` groups into a fresh log; returns the groups.
fn build(dir: &Path, o: VdlsOptions, n: u64) -> Vec<Committed> {
    let (mut v, got) = open_collect(dir, o, Position::START).unwrap();
    assert!(got.is_empty());
    let mut w = Writer::default();
    (1..=n)
        .map(|ver| {
            w.commit(
                &mut v,
                ver,
                &simple_updates(ver, (ver % 4) as usize),
                format!("root-{ver}").as_bytes(),
            )
        })
        .collect()
}

fn assert_corrupt<T: std::fmt::Debug>(r: Result<T>) -> (PathBuf, u64) {
    match r {
        Err(Error::Corrupt { path, offset, .. }) => (path, offset),
        other => panic!("expected Error::Corrupt, got {other:?}"),
    }
}

#[test]
fn round_trip_every_record_kind() {
    let d = TempDir::new().unwrap();
    let (mut v, _) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    assert_eq!(v.end(), Position::START);
    let put = Record::Put {
        version: 5,
        tid: 3,
        key: b"alice".to_vec(),
        value: b"50".to_vec(),
        prev: None,
    };
    let l1 = v.append(&put).unwrap();
    assert_eq!(l1.offset, HEADER_LEN);
    let del = Record::Delete {
        version: 5,
        tid: 3,
        key: b"bob".to_vec(),
        prev: Some(l1),
    };
    let l2 = v.append(&del).unwrap();
    let empty = Record::Put {
        version: 5,
        tid: u32::MAX,
        key: Vec::new(),
        value: Vec::new(),
        prev: Some(Location {
            file_id: 1,
            offset: HEADER_LEN,
            len: l1.len,
        }),
    };
    let l3 = v.append(&empty).unwrap();
    let big = Record::Put {
        version: 5,
        tid: 0,
        key: vec![0xAB; MAX_KEY_BYTES],
        value: vec![0xCD; 100_000],
        prev: None,
    };
    let l4 = v.append(&big).unwrap();
    let end = v.commit(5, b"payload").unwrap();
    assert_eq!(end, v.end());
    assert_eq!(v.disk_bytes(), end.offset);
    for (l, r) in [(l1, &put), (l2, &del), (l3, &empty), (l4, &big)] {
        assert_eq!(&v.read(l).unwrap(), r);
    }
    let clen = (COMMIT_HEADER_LEN + 7) as u32;
    let cl = Location {
        file_id: 1,
        offset: end.offset - u64::from(clen),
        len: clen,
    };
    let commit = Record::Commit {
        version: 5,
        payload: b"payload".to_vec(),
    };
    assert_eq!(v.read(cl).unwrap(), commit);
    drop(v);
    let (v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    assert_eq!(
        got,
        vec![(l1, put), (l2, del), (l3, empty), (l4, big), (cl, commit)]
    );
    assert_eq!(v.end(), end);
}

#[test]
fn replay_delivers_exactly_complete_groups() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 6);
    // An uncommitted group buffered at drop time is never written.
    {
        let (mut v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
        assert_eq!(got, flatten(&groups));
        v.append(&Record::Put {
            version: 7,
            tid: 0,
            key: b"x".to_vec(),
            value: b"y".to_vec(),
            prev: None,
        })
        .unwrap();
    }
    let (v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    assert_eq!(got, flatten(&groups));
    assert_eq!(v.end(), groups[5].end);
    drop(v);
    // Replaying from a commit position delivers exactly the later groups.
    for k in 0..groups.len() {
        let (_, got) = open_collect(d.path(), opts(1 << 20), groups[k].end).unwrap();
        assert_eq!(got, flatten(&groups[k + 1..]), "from group {k}");
    }
}

#[test]
fn torn_tail_at_every_offset_is_cut_and_appends_continue() {
    let src = TempDir::new().unwrap();
    let groups = build(src.path(), opts(1 << 20), 7);
    let last = groups.last().unwrap();
    let e = groups[5].end.offset;
    assert!(last.end.offset > e + 40, "the last group has records");
    let full = fs::read(path_of(src.path(), 1)).unwrap();
    for t in e..last.end.offset {
        let d = TempDir::new().unwrap();
        fs::write(path_of(d.path(), 1), &full[..t as usize]).unwrap();
        let (mut v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
        assert_eq!(got, flatten(&groups[..6]), "truncated at {t}");
        assert_eq!(v.end(), groups[5].end);
        assert_eq!(
            fs::metadata(path_of(d.path(), 1)).unwrap().len(),
            e,
            "file cut at the last commit"
        );
        // Appends continue at the cut; the new group replays after reopen.
        let mut w = Writer::default();
        for g in &groups[..6] {
            for (l, r) in &g.recs {
                w.last.insert(r.key().unwrap().to_vec(), *l);
            }
        }
        let g = w.commit(&mut v, 7, &simple_updates(9, 2), b"again");
        assert_eq!(g.start(), e);
        drop(v);
        let (_, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
        let mut want = groups[..6].to_vec();
        want.push(g);
        assert_eq!(got, flatten(&want), "after reappend at {t}");
    }
}

#[test]
fn garbage_tail_is_cut() {
    let garbage: Vec<Vec<u8>> = vec![
        vec![0; 4096],
        vec![0xFF; 100],
        (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
        vec![7],
        // A plausible prefix whose length points past the end.
        [0u8, 0, 0, 0, 200, 0, 0, 0, 1].to_vec(),
    ];
    for (i, g) in garbage.iter().enumerate() {
        let d = TempDir::new().unwrap();
        let groups = build(d.path(), opts(1 << 20), 3);
        let p = path_of(d.path(), 1);
        let mut bytes = fs::read(&p).unwrap();
        bytes.extend_from_slice(g);
        fs::write(&p, &bytes).unwrap();
        let (mut v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
        assert_eq!(got, flatten(&groups), "garbage {i}");
        assert_eq!(fs::metadata(&p).unwrap().len(), groups[2].end.offset);
        let g4 = Writer::default().commit(&mut v, 4, &simple_updates(4, 3), b"");
        drop(v);
        let (_, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
        let mut want = groups.clone();
        want.push(g4);
        assert_eq!(got, flatten(&want));
    }
}

#[test]
fn uncommitted_records_vanish() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 3);
    // Records on disk without their Commit record (crash between the two): cut off the last Commit record.
    let last = groups.last().unwrap();
    assert!(!last.recs.is_empty());
    set_len(&path_of(d.path(), 1), last.commit.0.offset);
    let (mut v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    assert_eq!(got, flatten(&groups[..2]));
    assert_eq!(v.end(), groups[1].end);
    // abort drops a buffered group; the next group takes its place.
    let mut w = Writer::default();
    v.append(&Record::Put {
        version: 3,
        tid: 0,
        key: b"gone".to_vec(),
        value: b"gone".to_vec(),
        prev: None,
    })
    .unwrap();
    v.abort();
    let g3 = w.commit(&mut v, 3, &[(b"kept".to_vec(), Some(b"v".to_vec()))], b"p");
    assert_eq!(g3.start(), groups[1].end.offset);
    drop(v);
    let (_, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    let mut want = groups[..2].to_vec();
    want.push(g3);
    assert_eq!(got, flatten(&want));
}

#[test]
fn rotation_across_files_with_reopen() {
    let d = TempDir::new().unwrap();
    let o = opts(200);
    let groups = build(d.path(), o, 20);
    let ids = file_ids(d.path());
    assert!(ids.len() >= 4, "several files: {ids:?}");
    assert_eq!(ids, (1..=ids.len() as u32).collect::<Vec<_>>());
    for g in &groups {
        // A group never spans files.
        assert!(g.recs.iter().all(|(l, _)| l.file_id == g.end.file_id));
        assert_eq!(g.commit.0.file_id, g.end.file_id);
    }
    // Every file except the last is larger than file_bytes (rotation only after passing it).
    for id in &ids[..ids.len() - 1] {
        assert!(fs::metadata(path_of(d.path(), *id)).unwrap().len() > 200);
    }
    let (mut v, got) = open_collect(d.path(), o, Position::START).unwrap();
    assert_eq!(got, flatten(&groups));
    let total: u64 = ids
        .iter()
        .map(|i| fs::metadata(path_of(d.path(), *i)).unwrap().len())
        .sum();
    assert_eq!(v.disk_bytes(), total);
    for (l, r) in flatten(&groups) {
        assert_eq!(v.read(l).unwrap(), r);
    }
    // Continue after reopen, then replay from the middle.
    let mut w = Writer::default();
    for (l, r) in flatten(&groups) {
        if let Some(k) = r.key() {
            w.last.insert(k.to_vec(), l);
        }
    }
    let mut all = groups.clone();
    for ver in 21..=30 {
        all.push(w.commit(&mut v, ver, &simple_updates(ver, 3), b"x"));
    }
    drop(v);
    let (v, got) = open_collect(d.path(), o, Position::START).unwrap();
    assert_eq!(got, flatten(&all));
    assert_eq!(v.end(), all.last().unwrap().end);
    drop(v);
    let (_, got) = open_collect(d.path(), o, all[9].end).unwrap();
    assert_eq!(got, flatten(&all[10..]));
    // Histories cross files.
    let (v, _) = open_collect(d.path(), o, all.last().unwrap().end).unwrap();
    let (l, _) = all.last().unwrap().recs[0].clone();
    let h = v.history(l, usize::MAX).unwrap();
    assert!(h.len() > 5);
    assert!(h
        .windows(2)
        .all(|p| p[1].0 < p[0].0 && p[1].1.key() == p[0].1.key()));
    assert!(
        h.iter()
            .map(|(l, _)| l.file_id)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 2
    );
}

#[test]
fn torn_rotation_is_cleaned_up() {
    // Crash points during and right after rotation: the new file's header torn, header only, header plus a
    // torn group. In every case the new file goes away and the old log is intact.
    let src = TempDir::new().unwrap();
    let o = opts(100);
    let groups = build(src.path(), o, 4);
    let last_id = groups[3].end.file_id;
    assert!(
        last_id > groups[2].end.file_id,
        "the last group opened a new file"
    );
    let new_len = fs::metadata(path_of(src.path(), last_id)).unwrap().len();
    let mut cuts: Vec<u64> = (0..=HEADER_LEN).collect();
    cuts.extend([HEADER_LEN + 1, HEADER_LEN + 9, new_len - 1]);
    for t in cuts {
        let d = TempDir::new().unwrap();
        copy_dir(src.path(), d.path());
        set_len(&path_of(d.path(), last_id), t);
        let (mut v, got) = open_collect(d.path(), o, Position::START).unwrap();
        assert_eq!(got, flatten(&groups[..3]), "cut at {t}");
        assert_eq!(v.end(), groups[2].end);
        assert!(
            !path_of(d.path(), last_id).exists(),
            "cut at {t}: new file removed"
        );
        // The next commit rotates again and recreates the file.
        let g = Writer::default().commit(&mut v, 4, &simple_updates(4, 2), b"r");
        assert_eq!(g.end.file_id, last_id);
        drop(v);
        let (_, got) = open_collect(d.path(), o, Position::START).unwrap();
        let mut want = groups[..3].to_vec();
        want.push(g);
        assert_eq!(got, flatten(&want));
    }
    // Replaying from a position in the removed file's header is the same point as the previous file's end.
    let d = TempDir::new().unwrap();
    copy_dir(src.path(), d.path());
    set_len(&path_of(d.path(), last_id), 5);
    let from = Position {
        file_id: last_id,
        offset: HEADER_LEN,
    };
    let (v, got) = open_collect(d.path(), o, from).unwrap();
    assert!(got.is_empty());
    assert_eq!(v.end(), groups[2].end);
    // A fresh log whose first file's creation was torn.
    let d = TempDir::new().unwrap();
    fs::write(path_of(d.path(), 1), b"LETUS").unwrap();
    let (v, got) = open_collect(d.path(), o, Position::START).unwrap();
    assert!(got.is_empty());
    assert_eq!(v.end(), Position::START);
}

/// Flips one byte of file `id` at `at`.
fn flip(dir: &Path, id: u32, at: u64) {
    let p = path_of(dir, id);
    let mut b = fs::read(&p).unwrap();
    b[at as usize] ^= 0x10;
    fs::write(&p, &b).unwrap();
}

#[test]
fn flipped_byte_in_committed_record_is_corrupt() {
    // Last file, a later group follows: read and open both report the damaged record.
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 5);
    let (l, _) = groups[1].recs[0].clone();
    flip(d.path(), 1, l.offset + u64::from(l.len) - 1);
    let (v, _) = open_collect(d.path(), opts(1 << 20), groups[4].end).unwrap();
    let (path, off) = assert_corrupt(v.read(l));
    assert_eq!((path, off), (path_of(d.path(), 1), l.offset));
    assert!(v.read(groups[0].recs[0].0).is_ok());
    drop(v);
    let (path, off) = assert_corrupt(open_collect(d.path(), opts(1 << 20), Position::START));
    assert_eq!((path, off), (path_of(d.path(), 1), l.offset));
    // Opening after the damage does not look at it.
    assert!(open_collect(d.path(), opts(1 << 20), groups[2].end).is_ok());

    // A flipped length byte (the record would seem huge) and a flipped byte in a Commit record.
    for (at_len, which) in [(true, 0usize), (false, 1)] {
        let d = TempDir::new().unwrap();
        let groups = build(d.path(), opts(1 << 20), 4);
        let l = if which == 0 {
            groups[1].recs[0].0
        } else {
            groups[1].commit.0
        };
        flip(
            d.path(),
            1,
            if at_len { l.offset + 7 } else { l.offset + 9 },
        );
        let (_, off) = assert_corrupt(open_collect(d.path(), opts(1 << 20), Position::START));
        assert_eq!(off, l.offset);
    }

    // Damage in a file that has a successor is corruption even in that file's last group.
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(100), 4);
    let g = &groups[1];
    assert!(g.end.file_id < groups[3].end.file_id);
    flip(d.path(), g.end.file_id, g.commit.0.offset + 12);
    let (path, off) = assert_corrupt(open_collect(d.path(), opts(100), Position::START));
    assert_eq!(
        (path, off),
        (path_of(d.path(), g.end.file_id), g.commit.0.offset)
    );
}

#[test]
fn damage_in_the_last_group_is_a_torn_tail() {
    // Documented limitation: damage inside the last group, with no complete group after it, looks exactly like a
    // crash that persisted the group's pages out of order, so the group is dropped (FORMAT.md §1).
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 3);
    let l = groups[2].recs[0].0;
    flip(d.path(), 1, l.offset + 20);
    let (v, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    assert_eq!(got, flatten(&groups[..2]));
    assert_eq!(v.end(), groups[1].end);
}

/// Found by review: after damage in the last file, recovery searches the rest of it for a Commit record of a later
/// group, checksumming each candidate. A tail of values crafted to hold a plausible Commit header every 33 bytes,
/// each claiming 16 MiB, asked for terabytes of checksums (an open that seemed to hang). The search now stops at
/// its byte bound with a clear corruption error.
#[test]
fn a_tail_of_crafted_commit_headers_stops_the_search_at_its_bound() {
    let d = TempDir::new().unwrap();
    build(d.path(), opts(1 << 30), 2);
    let p = path_of(d.path(), 1);
    let mut b = fs::read(&p).unwrap();
    let x = b.len() as u64;
    b.push(0xff);
    let len = (record::COMMIT_HEADER_LEN + record::MAX_PAYLOAD_BYTES) as u32;
    let mut head = Vec::new();
    head.extend_from_slice(&[0; 4]);
    head.extend_from_slice(&len.to_le_bytes());
    head.push(record::KIND_COMMIT);
    head.extend_from_slice(&[0; 20]);
    head.extend_from_slice(&(record::MAX_PAYLOAD_BYTES as u32).to_le_bytes());
    assert_eq!(head.len(), record::COMMIT_HEADER_LEN);
    while b.len() < (x as usize) + 2 * len as usize {
        b.extend_from_slice(&head);
    }
    fs::write(&p, &b).unwrap();
    match open_collect(d.path(), opts(1 << 30), Position::START) {
        Err(Error::Corrupt { offset, what, .. }) => {
            assert_eq!(offset, x);
            assert!(what.contains("cannot be told"), "{what}");
        }
        other => panic!("{:?}", other.map(|(_, g)| g.len())),
    }
}

#[test]
fn changes_to_earlier_files_are_corrupt() {
    let src = TempDir::new().unwrap();
    let groups = build(src.path(), opts(100), 6);
    let first_last_group = groups.iter().rfind(|g| g.end.file_id == 1).unwrap().clone();
    // Truncating an earlier file exactly at a group boundary leaves it parseable; the next header catches it.
    let d = TempDir::new().unwrap();
    copy_dir(src.path(), d.path());
    set_len(&path_of(d.path(), 1), first_last_group.start());
    let (path, _) = assert_corrupt(open_collect(d.path(), opts(100), Position::START));
    assert_eq!(path, path_of(d.path(), 1));
    // A missing file in the middle.
    let d = TempDir::new().unwrap();
    copy_dir(src.path(), d.path());
    fs::remove_file(path_of(d.path(), 2)).unwrap();
    let (path, _) = assert_corrupt(open_collect(d.path(), opts(100), Position::START));
    assert_eq!(path, path_of(d.path(), 2));
    // Garbage header in a file with records, and in an earlier file.
    for id in [1, groups[5].end.file_id] {
        let d = TempDir::new().unwrap();
        copy_dir(src.path(), d.path());
        flip(d.path(), id, 2);
        let (path, off) = assert_corrupt(open_collect(d.path(), opts(100), Position::START));
        assert_eq!((path, off), (path_of(d.path(), id), 0));
    }
    // A newer format version is reported as such.
    let d = TempDir::new().unwrap();
    copy_dir(src.path(), d.path());
    let p = path_of(d.path(), 1);
    let mut b = fs::read(&p).unwrap();
    b[8] = 3;
    fs::write(&p, &b).unwrap();
    match open_collect(d.path(), opts(100), Position::START) {
        Err(Error::UnsupportedFormat { found: 3, path }) => assert_eq!(path, p),
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn from_outside_the_log_is_corrupt() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 2);
    let end = groups[1].end;
    for from in [
        Position {
            file_id: 1,
            offset: end.offset + 1,
        },
        Position {
            file_id: 2,
            offset: HEADER_LEN,
        },
        Position {
            file_id: 0,
            offset: HEADER_LEN,
        },
        Position {
            file_id: 1,
            offset: 3,
        },
    ] {
        assert_corrupt(open_collect(d.path(), opts(1 << 20), from));
    }
    // A position inside a group (not a commit boundary) is caught by the group checks.
    let inside = Position {
        file_id: 1,
        offset: groups[1].recs[0].0.offset + 1,
    };
    assert_corrupt(open_collect(d.path(), opts(1 << 20), inside));
    // An empty directory replays from START only.
    let e = TempDir::new().unwrap();
    assert_corrupt(open_collect(&e.path().join("v"), opts(1 << 20), end));
    let (v, _) = open_collect(&e.path().join("v"), opts(1 << 20), Position::START).unwrap();
    assert_eq!(v.end(), Position::START);
}

#[test]
fn history_walks() {
    let d = TempDir::new().unwrap();
    let (mut v, _) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    let mut w = Writer::default();
    let k = b"acct".to_vec();
    let mut locs = Vec::new();
    for ver in 1..=6u64 {
        let val = if ver == 4 {
            None
        } else {
            Some(ver.to_le_bytes().to_vec())
        };
        let g = w.commit(
            &mut v,
            ver,
            &[(b"other".to_vec(), Some(vec![1])), (k.clone(), val)],
            b"",
        );
        locs.push(g.recs[1].0);
    }
    let h = v.history(locs[5], 100).unwrap();
    assert_eq!(
        h.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        locs.iter().rev().copied().collect::<Vec<_>>()
    );
    assert_eq!(
        h.iter().map(|(_, r)| r.version()).collect::<Vec<_>>(),
        vec![6, 5, 4, 3, 2, 1]
    );
    assert!(matches!(h[2].1, Record::Delete { .. }));
    assert_eq!(h[5].1.prev(), None);
    assert_eq!(v.history(locs[5], 2).unwrap().len(), 2);
    assert!(v.history(locs[5], 0).unwrap().is_empty());
    assert_eq!(v.history(locs[0], 10).unwrap().len(), 1);
    // A byte bound stops before the record that would pass it, but always reads the first.
    let len = |i: usize| u64::from(locs[i].len);
    let r = v.reader();
    assert_eq!(r.history_down_to(locs[5], 100, None, 0).unwrap().len(), 1);
    let two = len(5) + len(4);
    assert_eq!(r.history_down_to(locs[5], 100, None, two).unwrap().len(), 2);
    assert_eq!(
        r.history_down_to(locs[5], 100, None, two + len(3) - 1)
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        r.history_down_to(locs[5], 100, None, two + len(3))
            .unwrap()
            .len(),
        3
    );
    // A link to another key's record is corruption.
    let other = w.last[&b"other".to_vec()];
    w.last.insert(b"bad".to_vec(), other);
    let g = w.commit(&mut v, 7, &[(b"bad".to_vec(), Some(vec![2]))], b"");
    let (_, off) = assert_corrupt(v.history(g.recs[0].0, 10));
    assert_eq!(off, other.offset);
}

#[test]
fn bogus_locations_are_errors() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 3);
    let (mut v, _) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    let good = groups[1].recs[0].0;
    let end = v.end().offset;
    let bogus = [
        Location { file_id: 0, ..good },
        Location { file_id: 2, ..good },
        Location {
            file_id: u32::MAX,
            ..good
        },
        Location { len: 0, ..good },
        Location {
            len: u32::MAX,
            ..good
        },
        Location {
            len: good.len - 1,
            ..good
        },
        Location {
            len: good.len + 1,
            ..good
        },
        Location {
            offset: good.offset + 1,
            ..good
        },
        Location { offset: 0, ..good },
        Location {
            offset: end,
            ..good
        },
        Location {
            offset: end - 10,
            ..good
        },
        Location {
            offset: u64::MAX - 3,
            ..good
        },
    ];
    for b in bogus {
        assert_corrupt(v.read(b));
        assert!(v.history(b, 5).is_err());
    }
    let res = v.reader().read_many(&bogus);
    assert!(res.iter().all(|r| matches!(r, Err(Error::Corrupt { .. }))));
    // A buffered, uncommitted record cannot be read.
    let l = v
        .append(&Record::Put {
            version: 4,
            tid: 0,
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            prev: None,
        })
        .unwrap();
    assert_corrupt(v.read(l));
}

/// A log of 40 groups in files of 300 bytes, opened with counters of its own.
fn forty_groups_in_small_files(dir: &Path) -> (Vec<Committed>, Vdls, Arc<Counters>) {
    let groups = build(dir, opts(300), 40);
    let c = Arc::new(Counters::default());
    let v = Vdls::open(
        &crate::storage::local(),
        dir,
        opts(300),
        c.clone(),
        groups[39].end,
        |_, _, _| Ok(()),
    )
    .unwrap();
    (groups, v, c)
}

#[test]
fn read_many_matches_read_and_counts() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Vdls>();
    let d = TempDir::new().unwrap();
    let (groups, v, c) = forty_groups_in_small_files(d.path());
    let all = flatten(&groups);
    let locs: Vec<Location> = all.iter().rev().map(|(l, _)| *l).collect();
    let before = c.snapshot();
    let got = v.reader().read_many(&locs);
    let after = c.snapshot() - before;
    assert_eq!(after.value_reads, locs.len() as u64);
    assert_eq!(
        after.bytes_read,
        locs.iter().map(|l| u64::from(l.len)).sum::<u64>()
    );
    for ((_, want), got) in all.iter().rev().zip(got) {
        assert_eq!(&got.unwrap(), want);
    }
}

#[test]
fn api_checks_and_poisoning() {
    let d = TempDir::new().unwrap();
    let (mut v, _) = open_collect(d.path(), opts(0), Position::START).unwrap();
    let put = |version: u64, key: Vec<u8>, value: Vec<u8>| Record::Put {
        version,
        tid: 0,
        key,
        value,
        prev: None,
    };
    assert!(matches!(
        v.append(&put(1, vec![0; MAX_KEY_BYTES + 1], vec![])),
        Err(Error::TooLarge { what: "key", .. })
    ));
    assert!(matches!(
        v.append(&put(1, vec![], vec![0; MAX_VALUE_BYTES + 1])),
        Err(Error::TooLarge { what: "value", .. })
    ));
    assert!(v
        .append(&Record::Commit {
            version: 1,
            payload: vec![]
        })
        .is_err());
    // A prev link that does not point strictly backwards is refused before it reaches the disk.
    let self_ref = Record::Put {
        version: 1,
        tid: 0,
        key: b"k".to_vec(),
        value: vec![],
        prev: Some(Location {
            file_id: 9,
            offset: HEADER_LEN,
            len: 50,
        }),
    };
    assert!(v.append(&self_ref).is_err());
    let c1 = {
        v.append(&put(1, b"a".to_vec(), b"1".to_vec())).unwrap();
        assert!(
            v.append(&put(2, b"b".to_vec(), b"2".to_vec())).is_err(),
            "one version per group"
        );
        assert!(
            v.commit(2, b"").is_err(),
            "commit version must match the records"
        );
        v.commit(1, b"").unwrap()
    };
    // With file_bytes 0 every group opens a new file (file 1 holds only its header).
    assert_eq!(c1.file_id, 2);
    assert!(matches!(
        v.commit(1, b""),
        Err(Error::VersionNotIncreasing {
            requested: 1,
            last: 1
        })
    ));
    assert!(matches!(
        v.commit(3, &vec![0; MAX_PAYLOAD_BYTES + 1]),
        Err(Error::TooLarge { .. })
    ));
    // Make the next rotation fail: a directory squats on the next file's name.
    fs::create_dir(path_of(d.path(), 3)).unwrap();
    v.append(&put(3, b"c".to_vec(), b"3".to_vec())).unwrap();
    assert!(matches!(v.commit(3, b""), Err(Error::Io { .. })));
    assert!(matches!(v.commit(4, b""), Err(Error::Poisoned)));
    assert!(matches!(
        v.append(&put(4, b"d".to_vec(), vec![])),
        Err(Error::Poisoned)
    ));
    // Committed data stays readable.
    assert_eq!(v.end(), c1);
    assert_eq!(
        v.read(Location {
            file_id: 2,
            offset: HEADER_LEN,
            len: 45 + 2
        })
        .unwrap(),
        put(1, b"a".to_vec(), b"1".to_vec())
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Property tests.

type Spec = Vec<Vec<(u8, Option<Vec<u8>>)>>;

fn spec_strategy(min_groups: usize) -> impl Strategy<Value = Spec> {
    prop::collection::vec(
        prop::collection::vec(
            (
                0u8..5,
                prop::option::of(prop::collection::vec(any::<u8>(), 0..24)),
            ),
            0..5,
        ),
        min_groups..9,
    )
}

fn updates_of(g: &[(u8, Option<Vec<u8>>)]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    g.iter().map(|(k, v)| (vec![b'k', *k], v.clone())).collect()
}

/// Writes the spec; group i has version i + 1 and payload `[i]`. Returns the groups and the writer state.
fn write_spec(dir: &Path, o: VdlsOptions, spec: &Spec) -> Vec<Committed> {
    let (mut v, _) = open_collect(dir, o, Position::START).unwrap();
    let mut w = Writer::default();
    spec.iter()
        .enumerate()
        .map(|(i, g)| w.commit(&mut v, i as u64 + 1, &updates_of(g), &[i as u8]))
        .collect()
}

fn writer_after(groups: &[Committed]) -> Writer {
    let mut w = Writer::default();
    for (l, r) in flatten(groups) {
        if let Some(k) = r.key() {
            w.last.insert(k.to_vec(), l);
        }
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Crash model: with `sync`, only the bytes of the last group (whose commit had not returned) can be missing
    /// or zero after a crash; in a new file the header was fsynced before, unless the crash hit the rotation
    /// itself. After reopen, replay yields every acknowledged group, plus the last one exactly when its bytes all
    /// survived; appends continue and survive another reopen.
    #[test]
    fn crash_before_fsync_keeps_acknowledged_prefix(
        spec in spec_strategy(1),
        file_bytes in prop_oneof![Just(40u64), Just(300u64), Just(1u64 << 20)],
        mode in 0u8..3,
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        let d = TempDir::new().unwrap();
        let o = opts(file_bytes);
        let groups = write_spec(d.path(), o, &spec);
        let n = groups.len();
        let last = &groups[n - 1];
        let durable_end = if n >= 2 { groups[n - 2].end } else { Position::START };
        let rotated = last.end.file_id != durable_end.file_id;
        let p = path_of(d.path(), last.end.file_id);
        let before = fs::read(&p).unwrap();
        let len = before.len() as u64;
        // The in-flight region of the last file.
        let lo = if rotated { 0 } else { durable_end.offset };
        let mut survived = true;
        match mode {
            0 => {
                // The file ends somewhere in the in-flight region.
                let t = lo + a % (len - lo + 1);
                set_len(&p, t);
                survived = t == len;
            }
            1 => {
                // Pages of the in-flight region lost (read back as zeros), the size already extended.
                let zlo = if rotated { HEADER_LEN } else { lo };
                let s = zlo + a % (len - zlo + 1);
                let e = s + b % (len - s + 1);
                let mut after = before.clone();
                after[s as usize..e as usize].fill(0);
                survived = after == before;
                fs::write(&p, &after).unwrap();
            }
            _ => {
                if rotated {
                    // Crash before the new file was created.
                    fs::remove_file(&p).unwrap();
                    survived = false;
                }
            }
        }
        let want_n = if survived { n } else { n - 1 };
        let (mut v, got) = open_collect(d.path(), o, Position::START).unwrap();
        prop_assert_eq!(&got, &flatten(&groups[..want_n]));
        prop_assert_eq!(v.end(), if survived { last.end } else { durable_end });
        for (l, r) in flatten(&groups[..want_n]) {
            prop_assert_eq!(v.read(l).unwrap(), r);
        }
        // Appends continue; prev links only point at surviving records.
        let mut w = writer_after(&groups[..want_n]);
        let fresh = w.commit(&mut v, n as u64 + 1, &updates_of(&spec[0]), b"fresh");
        drop(v);
        let (v, got) = open_collect(d.path(), o, Position::START).unwrap();
        let mut want = groups[..want_n].to_vec();
        want.push(fresh);
        prop_assert_eq!(&got, &flatten(&want));
        for (l, _) in flatten(&want) {
            if let Ok(h) = v.history(l, usize::MAX) {
                prop_assert!(h.windows(2).all(|p| p[1].1.key() == p[0].1.key()));
            } else {
                prop_assert!(false, "history from {:?} failed", l);
            }
        }
    }

    /// Damage model: changing the bytes of a committed group that is followed by another committed group
    /// (flipping a byte, zeroing a range, or cutting a range out) is reported as corruption, never accepted as a
    /// torn tail.
    #[test]
    fn damage_before_a_later_commit_is_corrupt(
        spec in spec_strategy(2),
        file_bytes in prop_oneof![Just(40u64), Just(300u64), Just(1u64 << 20)],
        mode in 0u8..3,
        k in any::<usize>(),
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        let d = TempDir::new().unwrap();
        let o = opts(file_bytes);
        let groups = write_spec(d.path(), o, &spec);
        let k = k % (groups.len() - 1);
        let g = &groups[k];
        let (lo, hi) = (g.start(), g.end.offset);
        let p = path_of(d.path(), g.end.file_id);
        let before = fs::read(&p).unwrap();
        let s = lo + a % (hi - lo);
        let mut after = before.clone();
        match mode {
            0 => after[s as usize] ^= 1u8 << (b % 8),
            1 => {
                let e = s + 1 + b % (hi - s);
                after[s as usize..e as usize].fill(0);
            }
            _ => {
                let e = s + 1 + b % (hi - s);
                after.drain(s as usize..e as usize);
            }
        }
        prop_assume!(after != before);
        fs::write(&p, &after).unwrap();
        let r = open_collect(d.path(), o, Position::START);
        prop_assert!(matches!(r, Err(Error::Corrupt { .. })), "got {:?}", r.map(|(_, g)| g.len()));
    }
}

/// Opens `dir`, returning every replayed record with its moved flag.
type ReplayedMoved = Vec<(Location, Record, bool)>;

fn open_moved(dir: &Path, from: Position) -> Result<(Vdls, ReplayedMoved)> {
    let mut got = Vec::new();
    let v = Vdls::open(
        &crate::storage::local(),
        dir,
        opts(100),
        Arc::new(Counters::default()),
        from,
        |l, r, moved| {
            got.push((l, r.clone(), moved));
            Ok(())
        },
    )?;
    Ok((v, got))
}

#[test]
fn moved_records_replay_as_moved_and_read_as_the_original() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(100), 6);
    let (orig_loc, orig) = groups[1].recs[0].clone();
    let (mut v, _) = open_moved(d.path(), Position::START).unwrap();
    // Not older than its group: refused.
    assert!(v.append_moved(&orig, orig.version()).is_err());
    let at = v.append_moved(&orig, 7).unwrap();
    v.commit(7, b"root-7").unwrap();
    assert_eq!(v.read(at).unwrap(), orig);
    assert_eq!(at.len, orig_loc.len);
    drop(v);
    let (_, got) = open_moved(d.path(), Position::START).unwrap();
    let moved: Vec<_> = got.iter().filter(|(_, _, m)| *m).collect();
    assert_eq!(moved.len(), 1);
    assert_eq!((moved[0].0, &moved[0].1), (at, &orig));
}

#[test]
fn deleted_files_are_listed_and_an_open_finishes_a_deletion() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(100), 12);
    let (mut v, _) = open_moved(d.path(), Position::START).unwrap();
    let last = *file_ids(d.path()).last().unwrap();
    assert!(last >= 4, "{last}");
    let doomed: BTreeSet<u32> = [1, 2].into_iter().collect();
    let active: BTreeSet<u32> = [last].into_iter().collect();
    assert!(v.reader().delete_files(&active, || Ok(())).is_err());
    let held = std::cell::Cell::new(false);
    v.reader()
        .delete_files(&doomed, || {
            held.set(true);
            Ok(())
        })
        .unwrap();
    assert!(held.get());
    assert_eq!(file_ids(d.path())[0], 3);
    let in_first = groups.iter().find(|g| !g.recs.is_empty()).unwrap().recs[0].0;
    assert!(matches!(
        v.read(in_first),
        Err(Error::Collected { file_id: 1 })
    ));
    // The log goes on, and reopens from any position after the gap.
    let next = groups.last().unwrap().end;
    v.append(&Record::Put {
        version: 13,
        tid: 0,
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        prev: None,
    })
    .unwrap();
    v.commit(13, b"root-13").unwrap();
    drop(v);
    let (_, got) = open_moved(d.path(), next).unwrap();
    assert_eq!(got.len(), 2);
    // A crash after the list was written and before the unlinks: the open deletes what it lists.
    let doomed: BTreeSet<u32> = [1, 2, 3].into_iter().collect();
    collected::write(&*crate::storage::local(), d.path(), &doomed).unwrap();
    assert!(path_of(d.path(), 3).exists());
    let (v, _) = open_moved(d.path(), next).unwrap();
    assert!(!path_of(d.path(), 3).exists());
    assert_eq!(v.reader().collected_ids(), doomed);
    drop(v);
    // A file missing that the list does not name is corruption.
    fs::remove_file(path_of(d.path(), 5)).unwrap();
    let (path, _) = assert_corrupt(open_moved(d.path(), next));
    assert_eq!(path, path_of(d.path(), 5));
}

#[test]
fn format_1_files_are_still_read() {
    let d = TempDir::new().unwrap();
    let groups = build(d.path(), opts(1 << 20), 3);
    let p = path_of(d.path(), 1);
    let mut b = fs::read(&p).unwrap();
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    let c = crate::fsutil::crc(&b[0..28]);
    b[28..32].copy_from_slice(&c.to_le_bytes());
    fs::write(&p, &b).unwrap();
    let (_, got) = open_collect(d.path(), opts(1 << 20), Position::START).unwrap();
    assert_eq!(got.len(), flatten(&groups).len());
}

/// Found by review: an open that finds a data file beside its compaction (a crash between the compaction's rename
/// and the original's removal) removed the original before it had checked the compaction: a damaged `.vdc` then
/// took the intact `.vdl` with it. The `.vdc` is now checked first.
#[test]
fn a_damaged_compaction_does_not_take_its_original_with_it() {
    let d = TempDir::new().unwrap();
    let (groups, v, _) = forty_groups_in_small_files(d.path());
    let all = flatten(&groups);
    let victim = all[all.len() / 2].0.file_id;
    let kept: Vec<Location> = all
        .iter()
        .filter(|(l, r)| l.file_id == victim && !matches!(r, Record::Commit { .. }))
        .map(|(l, _)| *l)
        .collect();
    let bytes: u64 = kept.iter().map(|l| u64::from(l.len)).sum();
    let original = fs::read(path_of(d.path(), victim)).unwrap();
    v.reader()
        .compact(
            victim,
            &|offset| kept.iter().any(|l| l.offset == offset),
            bytes,
        )
        .unwrap();
    drop(v);
    let vdc = compacted::path(d.path(), victim);
    let good = fs::read(&vdc).unwrap();
    // The original back beside its compaction, whose header is damaged: the open fails and both stay.
    fs::write(path_of(d.path(), victim), &original).unwrap();
    let mut bad = good.clone();
    bad[20] ^= 1;
    fs::write(&vdc, &bad).unwrap();
    assert_corrupt(open_collect(d.path(), opts(300), groups[39].end));
    assert_eq!(fs::read(path_of(d.path(), victim)).unwrap(), original);
    // With the compaction whole, the open removes the original and reads through the compaction.
    fs::write(&vdc, &good).unwrap();
    let (v, _) = open_collect(d.path(), opts(300), groups[39].end).unwrap();
    assert!(!path_of(d.path(), victim).exists());
    assert!(v.read(kept[0]).is_ok());
}

#[test]
fn reads_in_stored_order_give_what_single_reads_give() {
    let d = TempDir::new().unwrap();
    let (groups, v, c) = forty_groups_in_small_files(d.path());
    let all = flatten(&groups);
    // A sealed file compacted down to every other record: the dropped ones read as collected, the kept ones at
    // their new offsets.
    let victim = all[all.len() / 2].0.file_id;
    let in_victim: Vec<u64> = all
        .iter()
        .filter(|(l, r)| l.file_id == victim && !matches!(r, Record::Commit { .. }))
        .map(|(l, _)| l.offset)
        .collect();
    assert!(in_victim.len() >= 2);
    let kept: BTreeSet<u64> = in_victim.iter().step_by(2).copied().collect();
    let kept_bytes = all
        .iter()
        .filter(|(l, _)| l.file_id == victim && kept.contains(&l.offset))
        .map(|(l, _)| u64::from(l.len))
        .sum();
    v.reader()
        .compact(victim, &|offset| kept.contains(&offset), kept_bytes)
        .unwrap();
    let good = all[3].0;
    let mut locs: Vec<Location> = all.iter().map(|(l, _)| *l).collect();
    // Out of order, with repeats and locations that fail in each way a single read fails.
    let mut rng = 7u64;
    for i in (1..locs.len()).rev() {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        locs.swap(i, (rng >> 33) as usize % (i + 1));
    }
    locs.extend_from_within(..10);
    locs.insert(
        5,
        Location {
            file_id: 999,
            ..good
        },
    );
    locs.insert(
        9,
        Location {
            len: good.len + 1,
            ..good
        },
    );
    locs.insert(
        11,
        Location {
            offset: good.offset + 1,
            ..good
        },
    );
    locs.push(Location {
        len: u32::MAX,
        ..good
    });
    let before = c.snapshot();
    let got = v.reader().read_in_order(&locs);
    let reads = (c.snapshot() - before).value_reads;
    assert_eq!(got.len(), locs.len());
    let mut collected = 0;
    for (l, g) in locs.iter().zip(&got) {
        let want = v.reader().read(*l);
        assert_eq!(format!("{g:?}"), format!("{want:?}"), "at {l:?}");
        collected += usize::from(matches!(g, Err(Error::Collected { .. })));
    }
    assert!(collected > 0);
    assert!(got.iter().filter(|r| r.is_ok()).count() > all.len() / 2);
    // Neighbours share reads: fewer reads than files plus the records that failed their own.
    let files: BTreeSet<u32> = locs.iter().map(|l| l.file_id).collect();
    assert!(
        reads <= files.len() as u64 + 4,
        "{reads} reads for {} files",
        files.len()
    );
}
