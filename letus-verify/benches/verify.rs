//! Native verification cost: one-key inclusion and exclusion proofs in a trie of 1M keys, a 100-key
//! multi-proof, proof decoding, history proofs, and streaming full verification throughput.
//!
//! `cargo bench -p letus-verify --bench verify`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use letus_verify::hash::history_leaf;
use letus_verify::reference::ReferenceTrie;
use letus_verify::{
    verify_multi_proof, verify_proof, Claim, FullVerifier, HistoryTree, Limits, Proof,
};

fn key(i: u64) -> Vec<u8> {
    format!("account-{i}").into_bytes()
}

fn bench(c: &mut Criterion) {
    let n = 1_000_000u64;
    let t = ReferenceTrie::from_pairs((0..n).map(|i| (key(i), (i * 31).to_le_bytes())));
    let root = t.root();
    let limits = Limits::default();

    let k = key(123_457);
    let v = t.get(&k).unwrap().to_vec();
    let inclusion = t.prove(&[&k]).encode();
    let exclusion = t.prove(&[b"missing"]).encode();
    let batch: Vec<Vec<u8>> = (0..100).map(|i| key(i * 9_973)).collect();
    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let multi = t.prove(&refs).encode();
    let claims: Vec<Claim<'_>> = batch
        .iter()
        .map(|k| Claim {
            key: k,
            value: t.get(k),
        })
        .collect();

    let mut g = c.benchmark_group("proof_1M_keys");
    g.bench_function("inclusion_decode_and_verify", |b| {
        b.iter(|| {
            let p = Proof::decode(&inclusion, &limits).unwrap();
            verify_proof(&root, &k, Some(&v), &p, &limits).unwrap()
        })
    });
    g.bench_function("exclusion_decode_and_verify", |b| {
        b.iter(|| {
            let p = Proof::decode(&exclusion, &limits).unwrap();
            verify_proof(&root, b"missing", None, &p, &limits).unwrap()
        })
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("multi_proof_100_keys", |b| {
        b.iter(|| {
            let p = Proof::decode(&multi, &limits).unwrap();
            verify_multi_proof(&root, &claims, &p, &limits).unwrap()
        })
    });
    g.finish();

    let mut h = HistoryTree::new();
    for v in 0..100_000u64 {
        h.push(history_leaf(0, v, &root));
    }
    let incl = h.inclusion_proof(31_337, h.len()).unwrap();
    let cons = h.consistency_proof(77_777, h.len()).unwrap();
    let hroot = h.root();
    let leaf = h.leaves()[31_337];
    let mut g = c.benchmark_group("history_100k_entries");
    g.bench_function("inclusion", |b| {
        b.iter(|| incl.verify(&hroot, h.len(), &leaf).unwrap())
    });
    let old = h.root_at(77_777).unwrap();
    g.bench_function("consistency", |b| {
        b.iter(|| cons.verify(77_777, &old, h.len(), &hroot).unwrap())
    });
    g.finish();

    let small = ReferenceTrie::from_pairs((0..100_000u64).map(|i| (key(i), i.to_le_bytes())));
    let small_root = small.root();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = small
        .pairs()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    let mut g = c.benchmark_group("full_verification");
    g.sample_size(10);
    g.throughput(Throughput::Elements(pairs.len() as u64));
    g.bench_function("stream_100k_pairs", |b| {
        b.iter_batched(
            FullVerifier::new,
            |mut f| {
                for (k, v) in &pairs {
                    f.update(k, v).unwrap();
                }
                f.verify(&small_root).unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
