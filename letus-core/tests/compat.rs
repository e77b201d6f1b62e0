//! On-disk compatibility: small stores written by the format-version-2 engine (`tests/fixtures/format-v2/`), by
//! the format-version-6 engine (`tests/fixtures/format-v6/`, whose index files hold rebase DeltaPages), by the
//! format-version-7 engine (`tests/fixtures/format-v7/`, compact index blocks) and by the format-version-9 engine
//! (`tests/fixtures/format-v9/`: pruned twice, so it holds base files of index-file format 4 and a prune
//! manifest, and value-log GC left compacted `.vdc` files) are kept in the repository and must open and verify in
//! every later version.
//!
//! THE FIXTURE IS THE CONTRACT. `store/` holds the files exactly as that engine left them (index files, value
//! log files, roots and tombstone logs, a history base, and commits after the last flush that only the value log
//! holds, so an open replays them); `expected.txt` holds what it must answer: every digest, reads of present and
//! absent keys at committed and in-between versions, and the full history of some keys. The answers come from the
//! generator's own model of what it wrote, not from reading the store back.
//!
//! If the format changes, this test must keep passing on the old fixture: the new engine either reads it as it
//! is, migrates it at open (then the test checks the migrated store), or refuses it with a clear
//! `Error::UnsupportedFormat`; in that last case change the test to expect that error, deliberately. Never
//! regenerate `format-v2` to make this test pass: write a new `format-vN` fixture next to it instead. The
//! generator refuses to overwrite an existing fixture; it runs only when asked:
//!
//! ```text
//! LETUS_WRITE_FIXTURES=1 cargo test -p letus-core --test compat -- write_fixture --nocapture
//! ```
//!
//! The check copies the fixture to a temporary directory first (an open takes a lock file, replays and cuts
//! logs), so the repository's copy is never modified.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{small_options, Rng};
use letus_core::{Digest, Error, Frontier, Hash, Options, Store, TrieId, Version};
use letus_verify::{verify_multi_proof, verify_proof, Claim, Limits};

/// The fixture this build writes (the format version of FORMAT.md).
const WRITE_AS: &str = "format-v9";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

// ---------------------------------------------------------------------------------------------------------------
// expected.txt: one fact a line, fields separated by one space. Bytes are `x` followed by lowercase hex (`x` alone
// is the empty string), or `r<hh>*<n>` for n bytes hh; `-` is "absent" (a get) or a delete (a history entry).
//
//   versions <v> <v> ...                          every committed version, oldest first
//   tries <tid> <tid> ...                         the tries at the latest version
//   base <tid> <size> <height>:<hash> ...          a history base set before the first commit
//   digest <tid> <version> <root> <history_len> <history_root>
//   get <tid> <version> <key> <value|->            at any version (also one between two commits)
//   history <tid> <key> <version>=<value|-> ... [...]   a key's whole history at the latest version, newest
//                                                 first; `...` at the end: older entries exist, pruned
//   pruned <version>                              the store was pruned: the oldest version whose state it holds
// ---------------------------------------------------------------------------------------------------------------

fn hex(b: &[u8]) -> String {
    if b.len() >= 16 && b.iter().all(|&x| x == b[0]) {
        return format!("r{:02x}*{}", b[0], b.len());
    }
    let mut s = String::from("x");
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

fn unhex(s: &str) -> Vec<u8> {
    if let Some((b, n)) = s.strip_prefix('r').and_then(|r| r.split_once('*')) {
        return vec![u8::from_str_radix(b, 16).unwrap(); n.parse().unwrap()];
    }
    let h = s
        .strip_prefix('x')
        .unwrap_or_else(|| panic!("bad bytes {s}"));
    assert!(h.len().is_multiple_of(2), "bad bytes {s}");
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

fn opt_hex(v: &Option<Vec<u8>>) -> String {
    v.as_ref().map_or("-".into(), |v| hex(v))
}

fn opt_unhex(s: &str) -> Option<Vec<u8>> {
    (s != "-").then(|| unhex(s))
}

fn hash(s: &str) -> Hash {
    Hash::from_hex(s).unwrap_or_else(|| panic!("bad hash {s}"))
}

/// A value, or `None`: absent (a read) or a delete (a history entry).
type Value = Option<Vec<u8>>;
/// A key's history, newest first.
type Writes = Vec<(Version, Value)>;

#[derive(Default, Debug)]
struct Expected {
    versions: Vec<Version>,
    tries: Vec<TrieId>,
    /// `(tid, (size, peaks))`.
    bases: Vec<(TrieId, Frontier)>,
    digests: Vec<Digest>,
    /// `(tid, version, key, value)`.
    gets: Vec<(TrieId, Version, Vec<u8>, Value)>,
    /// `(tid, key, history, whether older entries were pruned)`.
    histories: Vec<(TrieId, Vec<u8>, Writes, bool)>,
    /// The oldest version whose state a pruned store holds: below it, reads answer `Pruned`.
    pruned: Option<Version>,
}

impl Expected {
    fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# letus-core compatibility fixture: what the store next to this file must answer.\n\
             # Written by tests/compat.rs (write_fixture); the format is described there. Do not edit.\n",
        );
        let join = |v: &[u64]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!("versions {}\n", join(&self.versions)));
        let tries: Vec<u64> = self.tries.iter().map(|&t| u64::from(t)).collect();
        out.push_str(&format!("tries {}\n", join(&tries)));
        for (tid, (size, peaks)) in &self.bases {
            let peaks: Vec<String> = peaks
                .iter()
                .map(|(h, p)| format!("{h}:{}", p.to_hex()))
                .collect();
            out.push_str(&format!("base {tid} {size} {}\n", peaks.join(" ")));
        }
        for d in &self.digests {
            out.push_str(&format!(
                "digest {} {} {} {} {}\n",
                d.tid,
                d.version,
                d.root.to_hex(),
                d.history_len,
                d.history_root.to_hex()
            ));
        }
        for (tid, v, k, val) in &self.gets {
            out.push_str(&format!("get {tid} {v} {} {}\n", hex(k), opt_hex(val)));
        }
        for (tid, k, entries, older) in &self.histories {
            let e: Vec<String> = entries
                .iter()
                .map(|(v, val)| format!("{v}={}", opt_hex(val)))
                .collect();
            let mut line = vec![format!("history {tid} {}", hex(k))];
            line.extend(e);
            if *older {
                line.push("...".into());
            }
            out.push_str(&line.join(" "));
            out.push('\n');
        }
        if let Some(b) = self.pruned {
            out.push_str(&format!("pruned {b}\n"));
        }
        out
    }

    fn parse(text: &str) -> Expected {
        let mut e = Expected::default();
        for (n, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split(' ').collect();
            let bad = format!("expected.txt line {}: {line}", n + 1);
            match f[0] {
                "versions" => e.versions = f[1..].iter().map(|x| x.parse().unwrap()).collect(),
                "tries" => e.tries = f[1..].iter().map(|x| x.parse().unwrap()).collect(),
                "base" => e.bases.push((
                    f[1].parse().unwrap(),
                    (
                        f[2].parse().unwrap(),
                        f[3..]
                            .iter()
                            .map(|p| {
                                let (h, x) = p.split_once(':').expect(&bad);
                                (h.parse().unwrap(), hash(x))
                            })
                            .collect(),
                    ),
                )),
                "digest" if f.len() == 6 => e.digests.push(Digest {
                    tid: f[1].parse().unwrap(),
                    version: f[2].parse().unwrap(),
                    root: hash(f[3]),
                    history_len: f[4].parse().unwrap(),
                    history_root: hash(f[5]),
                }),
                "get" if f.len() == 5 => e.gets.push((
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    unhex(f[3]),
                    opt_unhex(f[4]),
                )),
                "history" if f.len() >= 3 => {
                    let older = f.last() == Some(&"...");
                    let entries = &f[3..f.len() - usize::from(older)];
                    e.histories.push((
                        f[1].parse().unwrap(),
                        unhex(f[2]),
                        entries
                            .iter()
                            .map(|x| {
                                let (v, val) = x.split_once('=').expect(&bad);
                                (v.parse().unwrap(), opt_unhex(val))
                            })
                            .collect(),
                        older,
                    ))
                }
                "pruned" if f.len() == 2 => e.pruned = Some(f[1].parse().unwrap()),
                _ => panic!("{bad}"),
            }
        }
        assert!(
            !e.versions.is_empty() && !e.digests.is_empty() && !e.gets.is_empty(),
            "expected.txt is incomplete"
        );
        e
    }

    fn digest(&self, tid: TrieId, version: Version) -> Option<&Digest> {
        self.digests
            .iter()
            .find(|d| d.tid == tid && d.version == version)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The check (runs in CI).
// ---------------------------------------------------------------------------------------------------------------

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn count_files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(ext)
        })
        .count()
}

/// Everything `expected` says, checked against the open store `s`.
fn check(s: &Store, e: &Expected) {
    assert_eq!(s.versions(), e.versions, "committed versions");
    assert_eq!(s.pruned_below(), e.pruned, "the prune boundary");
    let pruned = |v: Version| e.pruned.is_some_and(|b| v < b);
    assert_eq!(s.latest_version(), e.versions.last().copied());
    assert_eq!(s.tries(), e.tries, "tries at the latest version");
    let limits = Limits::default();

    // Digests, and the history commitments between them.
    for d in &e.digests {
        assert_eq!(
            s.digest(d.tid, d.version).unwrap(),
            *d,
            "digest of trie {} at {}",
            d.tid,
            d.version
        );
    }
    let latest = *e.versions.last().unwrap();
    for &tid in &e.tries {
        let newest = e
            .digest(tid, latest)
            .expect("a digest at the latest version");
        let mut older: Option<&Digest> = None;
        for d in e.digests.iter().filter(|d| d.tid == tid) {
            let p = s.history_inclusion_proof(tid, d.version, latest).unwrap();
            newest
                .verify_includes(d.version, &d.root, &p)
                .unwrap_or_else(|err| panic!("trie {tid} entry {}: {err}", d.version));
            if let Some(o) = older {
                let p = s
                    .history_consistency_proof(tid, o.version, d.version)
                    .unwrap();
                d.verify_extends(o, &p).unwrap();
            }
            older = Some(d);
        }
        // The whole trie at the latest version, every page hash and value.
        let full = s.verify_full(tid, latest, &newest.root).unwrap();
        assert_eq!(full.root, newest.root);
    }
    // A history base is visible as the frontier before the trie's first entry.
    for (tid, (size, peaks)) in &e.bases {
        let first = e
            .digests
            .iter()
            .find(|d| d.tid == *tid)
            .expect("a digest of a trie with a base");
        assert_eq!(first.history_len, size + 1);
        assert_eq!(
            s.history_frontier(*tid, first.version).unwrap(),
            (*size, peaks.clone())
        );
    }

    // Reads, with single proofs at committed versions, and one multi-proof per (trie, version).
    let mut batches: BTreeMap<(TrieId, Version), Vec<Claim>> = BTreeMap::new();
    for (tid, v, key, value) in &e.gets {
        if pruned(*v) {
            // Below the boundary a read is refused, with or without a proof: never a wrong answer.
            assert!(
                matches!(s.get(*tid, *v, key), Err(Error::Pruned { .. })),
                "get trie {tid} version {v} key {}: pruned",
                hex(key)
            );
            if e.digest(*tid, *v).is_some() {
                assert!(matches!(
                    s.get_proof(*tid, *v, key),
                    Err(Error::Pruned { .. })
                ));
            }
            continue;
        }
        assert_eq!(
            s.get(*tid, *v, key).unwrap(),
            *value,
            "get trie {tid} version {v} key {}",
            hex(key)
        );
        let Some(d) = e.digest(*tid, *v) else {
            continue; // between two commits: no digest of its own
        };
        let (got, proof) = s.get_proof(*tid, *v, key).unwrap();
        assert_eq!(got, *value);
        let read = verify_proof(&d.root, key, value.as_deref(), &proof, &limits)
            .unwrap_or_else(|err| panic!("proof trie {tid} version {v} key {}: {err}", hex(key)));
        assert_eq!(read.value(), value.as_deref());
        // The opposite claim must not verify.
        let wrong = match value {
            Some(_) => None,
            None => Some(b"not the value".as_slice()),
        };
        assert!(verify_proof(&d.root, key, wrong, &proof, &limits).is_err());
        batches.entry((*tid, *v)).or_default().push(Claim {
            key,
            value: value.as_deref(),
        });
    }
    for ((tid, v), claims) in &batches {
        let mut seen = BTreeSet::new();
        let claims: Vec<Claim> = claims
            .iter()
            .filter(|c| seen.insert(c.key))
            .map(|c| Claim {
                key: c.key,
                value: c.value,
            })
            .collect();
        let keys: Vec<&[u8]> = claims.iter().map(|c| c.key).collect();
        let (values, proof) = s.get_multi_proof(*tid, *v, &keys).unwrap();
        let want: Vec<Value> = claims.iter().map(|c| c.value.map(<[u8]>::to_vec)).collect();
        assert_eq!(values, want);
        assert_eq!(s.get_many(*tid, *v, &keys).unwrap(), want);
        let read = verify_multi_proof(&e.digest(*tid, *v).unwrap().root, &claims, &proof, &limits)
            .unwrap();
        assert_eq!(read.entries().len(), claims.len());
    }

    // Histories: whole, and in pages of two following the cursor. Of a pruned store, a history ends with the
    // entry that holds the key's state at the boundary; when older ones were pruned, its cursor names that entry
    // and following it answers `Pruned`.
    for (tid, key, entries, older) in &e.histories {
        let page = s.history(*tid, key, None, 1000).unwrap();
        let end = older.then(|| entries.last().map(|(v, _)| *v)).flatten();
        assert_eq!(page.next, end, "history of trie {tid} key {}", hex(key));
        let got: Vec<(Version, Option<Vec<u8>>)> = page
            .entries
            .into_iter()
            .map(|h| (h.version, h.value))
            .collect();
        assert_eq!(got, *entries, "history of trie {tid} key {}", hex(key));
        let mut paged = Vec::new();
        let mut before = None;
        loop {
            let p = s.history(*tid, key, before, 2).unwrap();
            assert!(p.entries.len() <= 2);
            paged.extend(p.entries.into_iter().map(|h| (h.version, h.value)));
            match p.next {
                Some(n) if pruned(n) || e.pruned == Some(n) => {
                    assert!(matches!(
                        s.history(*tid, key, Some(n), 2),
                        Err(Error::Pruned { .. })
                    ));
                    break;
                }
                Some(n) => before = Some(n),
                None => break,
            }
        }
        assert_eq!(
            paged,
            *entries,
            "paged history of trie {tid} key {}",
            hex(key)
        );
    }
}

/// Opens a copy of the fixture in `src`, checks it, commits one more version on top, reopens, checks again.
fn check_fixture(src: &Path) {
    let e = Expected::parse(&std::fs::read_to_string(src.join("expected.txt")).unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    copy_dir(&src.join("store"), &dir);
    // What the fixture is made of (so that a regenerated fixture cannot quietly lose a mechanism).
    assert!(count_files(&dir.join("lsvps"), ".idx") >= 3, "index files");
    assert!(
        count_files(&dir.join("vdls"), ".vdl") >= 2,
        "value-log files"
    );
    assert!(dir.join("tombstones.log").is_file() && dir.join("history_base").is_file());
    if e.pruned.is_some() {
        assert!(dir.join("pruned").is_file(), "a prune manifest");
        let base_files = std::fs::read_dir(dir.join("lsvps"))
            .unwrap()
            .filter(|f| {
                let name = f.as_ref().unwrap().file_name();
                let name = name.to_string_lossy();
                name.ends_with(".idx") && name.matches('.').count() == 2
            })
            .count();
        assert!(base_files >= 1, "base files (NNNNNN.G.idx)");
        assert!(
            count_files(&dir.join("vdls"), ".vdc") >= 1,
            "compacted value-log files"
        );
    }

    // Default options: nothing of the writer's options is part of the format.
    let mut s = Store::open(&dir, Options::default()).unwrap();
    assert!(
        s.replayed().versions >= 3,
        "the fixture's newest commits are only in the value log: {:?}",
        s.replayed()
    );
    check(&s, &e);

    // The old store keeps working: one more version on top of it. A key of each kind: new, changed, deleted,
    // and put again after a delete (its history goes on through the fixture's Delete record).
    let latest = *e.versions.last().unwrap();
    let next = latest + 1;
    let (tid, readded) = e
        .histories
        .iter()
        .find(|(_, _, h, _)| h.first().is_some_and(|(_, v)| v.is_none()))
        .map(|(t, k, _, _)| (*t, k.clone()))
        .expect("a history of a key deleted now");
    let (ctid, _, changed, _) = e
        .gets
        .iter()
        .find(|(t, v, _, val)| *v == latest && val.is_some() && *t != tid)
        .cloned()
        .expect("a key present at the latest version");
    s.put(tid, &readded, b"back after the upgrade").unwrap();
    s.put(tid, b"new after the upgrade", b"new").unwrap();
    s.put(ctid, &changed, b"changed after the upgrade").unwrap();
    let digests = s.commit(next).unwrap();
    let mut e2 = e;
    e2.versions.push(next);
    for d in &digests {
        let old = e2.digest(d.tid, latest).unwrap();
        assert_eq!(d.history_len, old.history_len + 1);
        let p = s.history_consistency_proof(d.tid, latest, next).unwrap();
        d.verify_extends(old, &p).unwrap();
    }
    e2.digests.extend(digests.iter().copied());
    for (t, k, h, _) in &mut e2.histories {
        if *t == tid && *k == readded {
            h.insert(0, (next, Some(b"back after the upgrade".to_vec())));
        }
        if *t == ctid && *k == changed {
            h.insert(0, (next, Some(b"changed after the upgrade".to_vec())));
        }
    }
    e2.gets.extend([
        (
            tid,
            next,
            readded.clone(),
            Some(b"back after the upgrade".to_vec()),
        ),
        (
            tid,
            next,
            b"new after the upgrade".to_vec(),
            Some(b"new".to_vec()),
        ),
        (
            ctid,
            next,
            changed.clone(),
            Some(b"changed after the upgrade".to_vec()),
        ),
        (tid, latest, readded.clone(), None),
    ]);
    check(&s, &e2);
    s.close().unwrap();
    // Reopened after a clean close: everything is in index files.
    let s = Store::open(&dir, Options::default()).unwrap();
    assert_eq!(s.replayed().versions, 0);
    check(&s, &e2);
}

#[test]
fn format_v2_fixture_opens_and_verifies() {
    check_fixture(&fixtures().join("format-v2"));
}

#[test]
fn format_v6_fixture_opens_and_verifies() {
    check_fixture(&fixtures().join("format-v6"));
}

#[test]
fn format_v7_fixture_opens_and_verifies() {
    check_fixture(&fixtures().join("format-v7"));
}

#[test]
fn format_v9_fixture_opens_and_verifies() {
    check_fixture(&fixtures().join("format-v9"));
}

// ---------------------------------------------------------------------------------------------------------------
// The generator (only with LETUS_WRITE_FIXTURES=1).
// ---------------------------------------------------------------------------------------------------------------

/// What the generator wrote: every write of every key, with the store's rule that a delete of an absent key
/// writes nothing.
#[derive(Default)]
struct Model {
    /// Oldest first.
    writes: BTreeMap<(TrieId, Vec<u8>), Writes>,
}

impl Model {
    fn at(&self, tid: TrieId, key: &[u8], v: Version) -> Option<Vec<u8>> {
        self.writes
            .get(&(tid, key.to_vec()))
            .and_then(|w| w.iter().rev().find(|(at, _)| *at <= v))
            .and_then(|(_, val)| val.clone())
    }

    fn record(&mut self, tid: TrieId, key: &[u8], v: Version, value: Option<Vec<u8>>) {
        if value.is_none() && self.at(tid, key, v).is_none() {
            return;
        }
        self.writes
            .entry((tid, key.to_vec()))
            .or_default()
            .push((v, value));
    }
}

#[test]
fn write_fixture() {
    if std::env::var_os("LETUS_WRITE_FIXTURES").is_none() {
        return;
    }
    let out = fixtures().join(WRITE_AS);
    assert!(
        !out.exists(),
        "{} exists: a fixture is never regenerated over (see the top of tests/compat.rs)",
        out.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    // Several value-log files; no time-based flush (it would make the fixture depend on the machine's speed).
    // Up to the 14th commit a tiny MemIndexTable flushes by itself besides the explicit flushes; then the store is
    // reopened with one that does not fill up, so the newest commits stay in the value log only.
    // Chains of one DeltaPage and no BasePage by update count: large pages restart their chains with rebase
    // DeltaPages (format 6).
    let opts = Options {
        vdls_file_bytes: 12 * 1024,
        memtable_bytes: 6 * 1024,
        max_replay_millis: u64::MAX,
        max_delta_chain: 1,
        base_threshold: 1_000,
        ..small_options()
    };
    let later = Options {
        memtable_bytes: 1 << 20,
        memory_budget_bytes: 8 << 20,
        ..opts.clone()
    };
    let mut rng = Rng::new(0x001e_705c_03a7);
    let mut model = Model::default();
    let mut e = Expected::default();
    let mut s = Store::open(&dir, opts).unwrap();
    let mut rebases = 0;

    // Trie 0 continues a history of 5 entries (as after `letus import`); the peaks are made up, the engine
    // takes them as given.
    let base = vec![(2u32, Hash([0xa5; 32])), (0u32, Hash([0x5a; 32]))];
    s.set_history_base(0, 5, base.clone()).unwrap();
    e.bases.push((0, (5, base)));

    // Keys: 40 per trie, plus a few unusual ones in trie 0.
    let keys = |tid: TrieId| -> Vec<Vec<u8>> {
        // Trie 4 is large enough for its root page to be rebased (at least 32 slots).
        let n = if tid == 4 { 200 } else { 40 };
        let mut k: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("t{tid}-key-{i:02}").into_bytes())
            .collect();
        if tid == 0 {
            k.push(Vec::new());
            k.push(vec![0, 0xff, 0x80, 0x01]);
            k.push(vec![b'L'; 300]);
        }
        k
    };
    let never = b"never-written".to_vec();
    const COMMITS: u64 = 24;
    const UNFLUSHED: u64 = 5;
    // The last prune keeps this many versions before the one it ran at.
    const KEEP: u64 = 6;
    let (mut compacted, mut deleted) = (0, 0);
    // Versions are not contiguous: 3, 6, 9, ... (reads between two commits see the older one).
    for i in 1..=COMMITS {
        let v = 3 * i;
        // Trie 0 from the start, trie 1 from the 2nd commit, trie 2 from the 10th; trie 3 holds one key for two
        // commits and is empty after that; trie 4 (format 6) gets 200 keys at once, then 3 writes a commit.
        let mut live: Vec<TrieId> = vec![0, 4];
        if i >= 2 {
            live.push(1);
        }
        if i >= 10 {
            live.push(2);
        }
        let mut touched: Vec<(TrieId, Vec<u8>)> = Vec::new();
        for &tid in &live {
            let ks = keys(tid);
            let mut chosen = BTreeSet::new();
            let n = if tid == 4 {
                if i == 1 {
                    200
                } else {
                    3
                }
            } else if i == 1 || (tid == 2 && i == 10) {
                30
            } else {
                6
            };
            while chosen.len() < n {
                chosen.insert(rng.below(ks.len() as u64) as usize);
            }
            for k in chosen {
                let key = &ks[k];
                let value = if i > 1 && rng.chance(30) {
                    None
                } else if rng.chance(5) {
                    Some(vec![b'v'; 1500 + rng.below(500) as usize])
                } else if rng.chance(10) {
                    // The same value again is a write too.
                    model.at(tid, key, v).or_else(|| Some(rng.bytes(12)))
                } else {
                    Some(rng.bytes(24))
                };
                match &value {
                    Some(val) => s.put(tid, key, val).unwrap(),
                    None => s.delete(tid, key).unwrap(),
                }
                model.record(tid, key, v, value);
                touched.push((tid, key.clone()));
            }
        }
        // A scripted key of trie 0: put, delete, put again, delete, put again ...
        let flip = b"flip-flop".to_vec();
        let fv = (i % 2 == 1).then(|| format!("flip {i}").into_bytes());
        match &fv {
            Some(val) => s.put(0, &flip, val).unwrap(),
            None => s.delete(0, &flip).unwrap(),
        }
        model.record(0, &flip, v, fv);
        touched.push((0, flip));
        // Trie 3: created, emptied, then only deletes of absent keys (they write nothing).
        if i == 4 {
            s.put(3, b"short-lived", b"x").unwrap();
            model.record(3, b"short-lived", v, Some(b"x".to_vec()));
        }
        if i >= 6 {
            s.delete(3, b"short-lived").unwrap();
            model.record(3, b"short-lived", v, None);
        }
        if i >= 4 {
            touched.push((3, b"short-lived".to_vec()));
        }
        let digests = s.commit(v).unwrap();
        e.versions.push(v);
        e.digests.extend(digests.iter().copied());
        let tries: Vec<TrieId> = digests.iter().map(|d| d.tid).collect();

        // What each trie must answer at v: the keys written now, three others, one never written; and the same
        // keys at v - 1 (before this commit).
        for &tid in &tries {
            let mut sample: BTreeSet<Vec<u8>> = touched
                .iter()
                .filter(|(t, _)| *t == tid)
                .map(|(_, k)| k.clone())
                .collect();
            let ks = keys(tid);
            for _ in 0..3 {
                sample.insert(ks[rng.below(ks.len() as u64) as usize].clone());
            }
            sample.insert(never.clone());
            for k in &sample {
                e.gets.push((tid, v, k.clone(), model.at(tid, k, v)));
            }
            // (A trie created by this commit has nothing to read before it: `UnknownTrie`.)
            if e.tries.contains(&tid) {
                for k in sample.iter().take(4) {
                    e.gets
                        .push((tid, v - 1, k.clone(), model.at(tid, k, v - 1)));
                }
            }
        }
        e.tries = tries;

        if i == 8 || i == 16 || i == COMMITS - UNFLUSHED {
            s.flush().unwrap();
        }
        // Pruned twice (format 9): a first base file of the pages up to the first boundary, a second of those
        // changed up to the second; each prune followed by a value-log GC pass, the second of which compacts the
        // files the first chose (the boundary has passed the version they were chosen at).
        if i == 16 || i == COMMITS - UNFLUSHED {
            let keep = if i == 16 { 9 } else { KEEP };
            s.prune(keep)
                .unwrap()
                .expect("index files below the window");
            assert_eq!(s.pruned_below(), Some(v - keep));
            let gc = s.vlog_gc().unwrap();
            compacted += gc.files_compacted;
            deleted += gc.files_deleted;
        }
        if i == 14 {
            // Dropped, not closed: the reopen replays what was not flushed.
            rebases += s.metrics().rebase_pages;
            drop(s);
            s = Store::open(&dir, later.clone()).unwrap();
        }
    }
    // Dropped without `close`: the last commits are only in the value log.
    rebases += s.metrics().rebase_pages;
    assert!(rebases > 0, "the fixture holds rebase DeltaPages");
    drop(s);
    std::fs::remove_file(dir.join("LOCK")).unwrap();

    // Histories: every key of trie 0 and trie 3 that was ever written, a few of trie 1 and 2. Of the pruned
    // store: the entries above the boundary, then the one that holds the key's state at it.
    let boundary = 3 * (COMMITS - UNFLUSHED) - KEEP;
    e.pruned = Some(boundary);
    for ((tid, key), writes) in &model.writes {
        if *tid == 0 || *tid == 3 || key.ends_with(b"0") {
            let mut h = writes.clone();
            h.reverse();
            let kept = h
                .iter()
                .position(|(v, _)| *v <= boundary)
                .map_or(h.len(), |i| i + 1);
            let older = kept < h.len();
            h.truncate(kept);
            e.histories.push((*tid, key.clone(), h, older));
        }
    }
    e.histories.push((1, never.clone(), Vec::new(), false));

    // The store must answer what the model says before it becomes a fixture.
    let check_dir = tmp.path().join("check");
    copy_dir(&dir, &check_dir);
    let s = Store::open(&check_dir, Options::default()).unwrap();
    check(&s, &e);
    let replayed = s.replayed();
    drop(s);
    println!(
        "{} index files, {} value-log files ({} compacted), {} versions replayed at open, {rebases} rebase \
         DeltaPages; GC compacted {compacted} files and deleted {deleted}",
        count_files(&dir.join("lsvps"), ".idx"),
        count_files(&dir.join("vdls"), ".vdl"),
        count_files(&dir.join("vdls"), ".vdc"),
        replayed.versions
    );

    // The check of CI, on what is about to be written; only then into the repository.
    let fixture = tmp.path().join("fixture");
    copy_dir(&dir, &fixture.join("store"));
    std::fs::write(fixture.join("expected.txt"), e.render()).unwrap();
    check_fixture(&fixture);
    copy_dir(&fixture, &out);
    println!("wrote {}", out.display());
}
