//! History proof generation cost (SPEC.md §8): what a store pays per request for an inclusion proof of the middle
//! entry, a consistency proof from half the history to all of it, and the root of half the history, at 1k and
//! 1M entries. Generation must grow with `log n`, not `n`: compare the two sizes.
//!
//! `cargo bench -p letus-verify --bench history -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use letus_verify::hash::{history_leaf, value_hash};
use letus_verify::HistoryTree;

fn tree(n: u64) -> HistoryTree {
    let mut t = HistoryTree::new();
    for v in 0..n {
        t.push(history_leaf(7, v, &value_hash(&v.to_le_bytes())));
    }
    t
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("history_proof_generation");
    // Flat sampling with few samples: an O(n) generator at 1M entries takes tens of milliseconds per call, and
    // this benchmark is also meant to be run against one to show the difference.
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    for n in [1_000u64, 1_000_000] {
        let t = tree(n);
        let mid = n / 2;
        g.bench_with_input(BenchmarkId::new("inclusion_middle", n), &t, |b, t| {
            b.iter(|| t.inclusion_proof(black_box(mid), black_box(n)).unwrap())
        });
        g.bench_with_input(
            BenchmarkId::new("consistency_half_to_full", n),
            &t,
            |b, t| b.iter(|| t.consistency_proof(black_box(mid), black_box(n)).unwrap()),
        );
        g.bench_with_input(BenchmarkId::new("root_at_half", n), &t, |b, t| {
            b.iter(|| t.root_at(black_box(mid)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
