//! Readers that miss the same page at once read it once: the others wait for that read (a parallel access list
//! starts with every read missing the root and the pages under it). With a cache large enough to keep what is
//! read, the page records read by many concurrent reads of one key equal those of one read alone; before the page
//! cache's single-flight, a `get_many` of 64 copies of one key read its pages up to once per read thread.

mod common;

use common::{key, Rng};
use letus_core::{Options, Store};

fn store_with_history(dir: &std::path::Path) -> Store {
    let opts = Options {
        memtable_bytes: 64 * 1024,
        ..Options::default()
    };
    let mut s = Store::open(dir, opts.clone()).unwrap();
    let mut rng = Rng::new(11);
    for v in 1..=40u64 {
        for _ in 0..500 {
            s.put(1, &key(rng.below(20_000)), &rng.bytes(24)).unwrap();
        }
        s.commit(v).unwrap();
    }
    drop(s);
    // Reopened: every record is in an index file, so a page load is real reads.
    Store::open(dir, opts).unwrap()
}

#[test]
fn concurrent_misses_of_one_page_read_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = store_with_history(dir.path());
    let k = key(4_242);
    let want = s.get(1, 40, &k).unwrap();
    assert!(want.is_some());

    s.clear_caches();
    let m0 = s.metrics();
    assert_eq!(s.get(1, 40, &k).unwrap(), want);
    let one = s.metrics().page_reads - m0.page_reads;
    assert!(
        one >= 3,
        "a get from a cleared cache reads its pages ({one})"
    );

    // 64 copies of the key in one access list, on the read pool's 32 threads.
    s.clear_caches();
    let m0 = s.metrics();
    let keys: Vec<&[u8]> = vec![&k; 64];
    let got = s.get_many(1, 40, &keys).unwrap();
    assert!(got.iter().all(|g| *g == want));
    assert_eq!(s.metrics().page_reads - m0.page_reads, one);

    // 16 threads of snapshots, released at once.
    s.clear_caches();
    let m0 = s.metrics();
    let reader = s.reader();
    let start = std::sync::Barrier::new(16);
    std::thread::scope(|sc| {
        for _ in 0..16 {
            sc.spawn(|| {
                let snap = reader.snapshot();
                start.wait();
                assert_eq!(snap.get(1, 40, &k).unwrap(), want);
            });
        }
    });
    assert_eq!(s.metrics().page_reads - m0.page_reads, one);
}
