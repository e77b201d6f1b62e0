//! `Options::max_replay_millis` bounds what a reopen replays: with a bound of 0 every commit is flushed and a
//! reopen replays nothing (beyond the commit a flush may still have been writing); without a bound, everything
//! since the last flush is replayed. Either way the reopened store has every commit.

mod common;

use common::{key, small_options};
use letus_core::{Options, Store};

fn run(max_replay_millis: u64) -> (letus_core::Replayed, Vec<letus_core::Digest>) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        // Large enough that the MemIndexTable's size never triggers a flush here.
        memtable_bytes: 64 << 20,
        memory_budget_bytes: 1 << 30,
        max_replay_millis,
        ..small_options()
    };
    let mut s = Store::open(dir.path(), opts.clone()).unwrap();
    let mut digests = Vec::new();
    for v in 1..=30u64 {
        for i in 0..50 {
            s.put(0, &key(v * 50 + i), &v.to_le_bytes()).unwrap();
        }
        digests.push(s.commit(v).unwrap()[0]);
    }
    drop(s);
    let s = Store::open(dir.path(), opts).unwrap();
    for (i, d) in digests.iter().enumerate() {
        assert_eq!(s.digest(0, i as u64 + 1).unwrap(), *d);
    }
    (s.replayed(), digests)
}

#[test]
fn the_replay_bound_decides_what_a_reopen_replays() {
    let (unbounded, _) = run(u64::MAX);
    assert_eq!(unbounded.versions, 30);
    assert_eq!(unbounded.updates, 30 * 50);
    let (bounded, _) = run(0);
    assert!(bounded.versions <= 1, "{bounded:?}");
}
