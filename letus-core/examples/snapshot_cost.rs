//! What serving a joining node costs the source: builds a store of `--accounts` accounts (bulk load), then times
//! the manifest (a walk of every leaf) and every chunk (the pairs of each entry, values read from the value log),
//! single-threaded, with warm and then cold caches; then commits `--versions` versions of `--writes` puts of
//! random accounts and times the changes of each of the last 20 against the version before it (what a following
//! node asks for, `GET /v1/tries/{tid}/changes`).
//!
//! `cargo run --release -p letus-core --example snapshot_cost -- --accounts 1000000 --dir /path/on/the/disk`

use std::time::Instant;

mod common;

use clap::Parser;
use common::account;
use letus_core::{BulkPair, Options, Store};
use letus_verify::Limits;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    #[arg(long)]
    dir: std::path::PathBuf,
    #[arg(long, default_value_t = 16_384)]
    max_pairs: u64,
    /// Versions committed after the load (at least 20) before the changes are timed.
    #[arg(long, default_value_t = 50)]
    versions: u64,
    /// Puts per version.
    #[arg(long, default_value_t = 2000)]
    writes: u64,
}

fn main() {
    let a = Args::parse();
    let _ = std::fs::remove_dir_all(&a.dir);
    let (mut store, took) = common::bulk_accounts(&a.dir, a.accounts);
    println!(
        "bulk load: {:.0} pairs/s",
        a.accounts as f64 / took.as_secs_f64()
    );
    let snap = store.snapshot();
    let root = snap.digest(0, 1).unwrap().root;
    let mut chunks = Vec::new();
    let mut manifest = None;
    for round in ["first", "second"] {
        chunks.clear();
        let t = Instant::now();
        let m = snap
            .snapshot_manifest(0, 1, a.max_pairs, u64::MAX, 1 << 20)
            .unwrap();
        let tm = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut bytes = 0usize;
        for (i, it) in m.items.iter().enumerate() {
            let c = snap
                .snapshot_chunk(0, 1, i as u32, it.depth, &it.prefix, 64 << 20)
                .unwrap();
            bytes += c.len();
            chunks.push(c);
        }
        let tc = t.elapsed().as_secs_f64();
        println!(
            "{round} pass: manifest {tm:.2} s ({:.0} leaves/s), {} chunks {tc:.2} s ({:.0} pairs/s, {:.1} MB)",
            a.accounts as f64 / tm,
            m.items.len(),
            a.accounts as f64 / tc,
            bytes as f64 / 1e6
        );
        manifest = Some(m);
    }
    drop(snap);
    // The joining side: every chunk verified against the manifest, then the pairs bulk-loaded, first hashing
    // them again (`Store::bulk_load`), then with the hashes the verification computed (what a joining node does).
    let m = manifest.unwrap().verify(0, 1, &root).unwrap();
    let t = Instant::now();
    let mut verified = Vec::with_capacity(chunks.len());
    for (i, c) in chunks.iter().enumerate() {
        verified.push(
            m.verify_chunk_hashed(i as u32, c, &Limits::default())
                .unwrap(),
        );
    }
    let tv = t.elapsed().as_secs_f64();
    let joined = a.dir.with_extension("joined");
    let mut rates = Vec::new();
    for with_hashes in [false, true] {
        let _ = std::fs::remove_dir_all(&joined);
        let mut it = verified
            .iter()
            .flat_map(|v| v.chunk.pairs.iter().zip(&v.hashes));
        let t = Instant::now();
        let j = Store::bulk_load_hashed(&joined, Options::default(), 0, 1, None, || {
            Ok(it.next().map(|((key, value), h)| BulkPair {
                key: key.clone(),
                value: value.clone(),
                hashed: with_hashes.then_some(*h),
            }))
        })
        .unwrap();
        rates.push(a.accounts as f64 / t.elapsed().as_secs_f64());
        assert_eq!(j.digest(0, 1).unwrap().root, root);
    }
    let _ = std::fs::remove_dir_all(&joined);
    println!(
        "joiner: chunks verified at {:.0} pairs/s; bulk-loaded at {:.0} pairs/s hashing the pairs, {:.0} pairs/s with the verification's hashes",
        a.accounts as f64 / tv,
        rates[0],
        rates[1]
    );
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for v in 2..=a.versions.max(20) + 1 {
        for _ in 0..a.writes {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (s >> 20) % a.accounts;
            store
                .put(0, &account(i), format!("balance {v} {s}").as_bytes())
                .unwrap();
        }
        store.commit(v).unwrap();
    }
    let last = a.versions.max(20) + 1;
    let snap = store.snapshot();
    for round in ["first", "second"] {
        let t = Instant::now();
        let n: usize = (last - 19..=last)
            .map(|v| {
                snap.changes(0, v - 1, v, usize::MAX, u64::MAX)
                    .unwrap()
                    .len()
            })
            .sum();
        let el = t.elapsed().as_secs_f64();
        println!(
            "{round} pass: the changes of the last 20 versions ({n} keys) in {el:.3} s, {:.1} ms a version",
            el * 1e3 / 20.0
        );
    }
    let _ = std::fs::remove_dir_all(&a.dir);
}
