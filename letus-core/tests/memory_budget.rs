//! The memory budget holds: a store whose state needs several times its budget keeps its caches and its
//! MemIndexTable within their shares at every commit, and every key still reads back. (The process's resident set
//! against the budget is measured at scale by the engine benchmark, `docs/BENCHMARKS.md`: at this size it is the
//! allocator's per-thread arenas that show, not the engine.)

mod common;

use letus_core::{Options, Store};

#[test]
fn a_state_several_times_the_budget_stays_within_it() {
    const BUDGET: u64 = 4 << 20;
    const KEYS: u64 = 120_000;
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memory_budget_bytes: BUDGET,
        ..Options::default()
    };
    let split = opts.memory_split();
    let mut store = Store::open(dir.path(), opts).unwrap();
    let value = |i: u64, round: u64| (i * 31 + round).to_le_bytes().to_vec();
    let mut v = 0;
    for round in 0..2u64 {
        for start in (0..KEYS).step_by(6_000) {
            for i in start..start + 6_000 {
                store.put(0, &common::key(i), &value(i, round)).unwrap();
            }
            v += 1;
            store.commit(v).unwrap();
            let m = store.memory();
            assert!(
                m.page_cache_bytes <= split.page_cache_bytes,
                "page cache {} bytes over its share {}",
                m.page_cache_bytes,
                split.page_cache_bytes
            );
            assert!(m.block_cache_bytes <= split.block_cache_bytes);
            // Flushed once it passes its threshold; one commit's records may come on top, and so may a full table
            // still being written to its index file (`Options::memtable_bytes`).
            assert!(
                m.memtable_bytes <= 2 * split.memtable_bytes as u64 + (2 << 20),
                "MemIndexTable {} bytes over its share {}",
                m.memtable_bytes,
                split.memtable_bytes
            );
        }
    }
    // The state is far larger than the budget: every page of it would need several budgets.
    let m = store.memory();
    assert!(
        store.disk_bytes() > 6 * BUDGET,
        "{} bytes on disk",
        store.disk_bytes()
    );
    // Completeness: every key comes back with its latest value.
    let keys: Vec<Vec<u8>> = (0..KEYS).map(common::key).collect();
    for chunk in keys.chunks(5_000) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let got = store.get_many(0, v, &refs).unwrap();
        assert_eq!(got.len(), refs.len());
        for (k, g) in chunk.iter().zip(got) {
            let i: u64 = std::str::from_utf8(&k[4..]).unwrap().parse().unwrap();
            assert_eq!(g, Some(value(i, 1)), "key {i}");
        }
    }
    // Every page of the state would need several budgets: the cache really was holding only a part of it.
    assert!(
        m.page_cache_pages > 0 && m.page_cache_bytes <= split.page_cache_bytes,
        "{m:?}"
    );
}
