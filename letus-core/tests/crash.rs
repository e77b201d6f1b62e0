//! Crash tests with real processes: a child process commits versions in a loop and prints each acknowledged
//! version with its root; the parent kills it with SIGKILL at a random moment, reopens the store, and checks that
//! the last acknowledged version and every acknowledged root are intact and equal to the reference model, then
//! lets a new child continue writing. Small thresholds make kills land inside flushes and file rotations too.
//!
//! `LETUS_CRASH_ROUNDS` sets the number of kills (default 12; the long torture run uses hundreds).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{key, small_options, Rng};
use letus_core::Store;
use letus_verify::reference::ReferenceTrie;
use letus_verify::Hash;

/// `(version, value or None for a delete)` of one key.
type Entries = Vec<(u64, Option<Vec<u8>>)>;

/// The writes of version `v`: deterministic, so the parent can rebuild the expected state.
fn writes(v: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = Rng::new(v);
    (0..20 + rng.below(30))
        .map(|_| {
            let k = key(rng.below(3_000));
            if rng.chance(10) {
                (k, None)
            } else {
                (k, Some(rng.bytes(60)))
            }
        })
        .collect()
}

/// Child side: continue from the store's latest version, commit forever, print "v root" after each commit.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("LETUS_CRASH_DIR") else {
        return;
    };
    let mut store = Store::open(&dir, small_options()).unwrap();
    let mut v = store.latest_version().unwrap_or(0);
    loop {
        v += 1;
        for (k, val) in writes(v) {
            match val {
                Some(val) => store.put(0, &k, &val).unwrap(),
                None => store.delete(0, &k).unwrap(),
            }
        }
        let d = store.commit(v).unwrap();
        println!("ack {v} {}", d[0].root);
    }
}

#[test]
fn sigkill_during_commits_loses_nothing_acknowledged() {
    let rounds: u64 = std::env::var("LETUS_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng::new(0xC0FFEE);
    let mut acked: BTreeMap<u64, Hash> = BTreeMap::new();
    let mut model = ReferenceTrie::new();
    // Every write of every key, oldest first (each Put; each Delete of a key that existed).
    let mut history: BTreeMap<Vec<u8>, Entries> = BTreeMap::new();
    let mut modelled_up_to = 0u64;
    // The version each child starts from: what the parent reopened the store at after the previous kill.
    let mut started_at = 0u64;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("LETUS_CRASH_DIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Let it commit for a random while (at least one acknowledgement), then kill it without warning.
        // (libtest prints its own lines first: wait for the child's first "ack".)
        let mut lines = Vec::new();
        loop {
            let l = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("child acknowledges a commit");
            let acked_one = l.contains("ack ");
            lines.push(l);
            if acked_one {
                break;
            }
        }
        let until = Instant::now() + Duration::from_millis(rng.below(400));
        while Instant::now() < until {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(5)) {
                lines.push(l);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        for l in &lines {
            // libtest prints "test crash_child ... " without a newline before the child's first line.
            let Some(at) = l.find("ack ") else { continue };
            let mut parts = l[at..].split_whitespace().skip(1);
            let v: u64 = parts.next().unwrap().parse().unwrap();
            let root = Hash::from_hex(parts.next().unwrap()).unwrap();
            acked.insert(v, root);
        }
        let last_acked = *acked.keys().last().unwrap();

        let store = Store::open(dir.path(), small_options()).unwrap();
        let latest = store.latest_version().unwrap();
        assert!(
            latest >= last_acked,
            "round {round}: reopened at {latest}, but {last_acked} was acknowledged"
        );
        // The store may hold one more version that committed but was not printed before the kill: one beyond the
        // last acknowledgement, or, when this round's child was killed before its first acknowledgement, one beyond
        // where it started (the previous reopen, which may itself hold such a version).
        assert!(
            latest <= last_acked.max(started_at) + 1,
            "round {round}: reopened at {latest} beyond anything written (last acknowledged {last_acked}, the child started at {started_at})"
        );
        started_at = latest;
        while modelled_up_to < latest {
            modelled_up_to += 1;
            // A version writes each key once: its last staged write.
            let last: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
                writes(modelled_up_to).into_iter().collect();
            for (k, val) in last {
                let existed = model.get(&k).is_some();
                match &val {
                    Some(val) => model.insert(&k, val),
                    None => model.remove(&k),
                }
                if val.is_some() || existed {
                    history.entry(k).or_default().push((modelled_up_to, val));
                }
            }
        }
        // Key histories, deletes included, are complete after the kill (the tombstone log is recovered too).
        for _ in 0..20 {
            let k = key(rng.below(3_000));
            let page = store.history(0, &k, None, usize::MAX).unwrap();
            let got: Entries = page
                .entries
                .into_iter()
                .map(|e| (e.version, e.value))
                .collect();
            let mut expected = history.get(&k).cloned().unwrap_or_default();
            expected.reverse();
            assert_eq!(got, expected, "round {round}: history of {k:?}");
        }
        assert_eq!(
            store.digest(0, latest).unwrap().root,
            model.root(),
            "round {round}: latest root"
        );
        for (v, root) in acked.range(acked.keys().next_back().unwrap().saturating_sub(30)..) {
            assert_eq!(
                store.digest(0, *v).unwrap().root,
                *root,
                "round {round}: acknowledged root of v{v}"
            );
        }
        // Reads at the latest version agree with the model.
        for i in (0..3_000).step_by(97) {
            let k = key(i);
            assert_eq!(store.get(0, latest, &k).unwrap().as_deref(), model.get(&k));
        }
        drop(store);
    }
    // Finally a full verification of the last state.
    let store = Store::open(dir.path(), small_options()).unwrap();
    let latest = store.latest_version().unwrap();
    store.verify_full(0, latest, &model.root()).unwrap();
}
