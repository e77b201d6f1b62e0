//! `Options::prefetch_delta_chains` (read a DeltaPage chain's records concurrently) changes how pages are read,
//! never what they hold: the same commits with it on and off give the same roots, values and proofs at every
//! version, with caches so small that every page is read back from its chain again and again.

mod common;

use common::{key, small_options, Rng};
use letus_core::{Options, Store};

#[test]
fn prefetched_chains_read_exactly_what_the_chain_walk_reads() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let opts = |prefetch| Options {
        prefetch_delta_chains: prefetch,
        memtable_bytes: 4 * 1024,
        ..small_options()
    };
    let mut a = Store::open(d1.path(), opts(false)).unwrap();
    let mut b = Store::open(d2.path(), opts(true)).unwrap();
    let mut rng = Rng::new(5);
    const V: u64 = 120;
    for v in 1..=V {
        for _ in 0..30 {
            let k = key(rng.below(400));
            if rng.chance(10) {
                a.delete(1, &k).unwrap();
                b.delete(1, &k).unwrap();
            } else {
                let val = rng.bytes(30);
                a.put(1, &k, &val).unwrap();
                b.put(1, &k, &val).unwrap();
            }
        }
        assert_eq!(a.commit(v).unwrap(), b.commit(v).unwrap(), "roots of {v}");
    }
    a.clear_caches();
    b.clear_caches();
    let before = b.metrics();
    for v in (1..=V).step_by(3) {
        for k in (0..400).step_by(9) {
            let k = key(k);
            assert_eq!(
                a.get_proof(1, v, &k).unwrap(),
                b.get_proof(1, v, &k).unwrap(),
                "{v}"
            );
        }
        b.clear_caches();
    }
    assert!(
        b.metrics().page_reads > before.page_reads,
        "pages were read back"
    );
    // Reopened (every record in index files now), the same.
    drop((a, b));
    let a = Store::open(d1.path(), opts(false)).unwrap();
    let b = Store::open(d2.path(), opts(true)).unwrap();
    for v in (1..=V).step_by(7) {
        for k in (0..400).step_by(13) {
            let k = key(k);
            assert_eq!(a.get(1, v, &k).unwrap(), b.get(1, v, &k).unwrap());
        }
        b.clear_caches();
    }
    let comm = b.digest(1, V).unwrap();
    b.verify_full(1, V, &comm.root).unwrap();
}
