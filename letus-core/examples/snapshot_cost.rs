//! What serving a snapshot costs the source: builds a store of `--accounts` accounts (bulk load), then times the
//! manifest (a walk of every leaf) and every chunk (the pairs of each entry, values read from the value log),
//! single-threaded, with warm and then cold caches.
//!
//! `cargo run --release -p letus-core --example snapshot_cost -- --accounts 1000000 --dir /path/on/the/disk`

use std::time::Instant;

use clap::Parser;
use letus_core::{Options, Store};
use letus_verify::KeyPath;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    #[arg(long)]
    dir: std::path::PathBuf,
    #[arg(long, default_value_t = 16_384)]
    max_pairs: u64,
}

fn main() {
    let a = Args::parse();
    let _ = std::fs::remove_dir_all(&a.dir);
    let account = |i: u64| format!("account-{i:010}").into_bytes();
    let mut keys: Vec<(KeyPath, u64)> = (0..a.accounts)
        .map(|i| (KeyPath::of(&account(i)), i))
        .collect();
    keys.sort_unstable();
    let mut it = keys.into_iter();
    let t = Instant::now();
    let store = Store::bulk_load(&a.dir, Options::default(), 0, 1, None, || {
        Ok(it
            .next()
            .map(|(_, i)| (account(i), b"balance 100".to_vec())))
    })
    .unwrap();
    println!(
        "bulk load: {:.0} pairs/s",
        a.accounts as f64 / t.elapsed().as_secs_f64()
    );
    let snap = store.snapshot();
    for round in ["first", "second"] {
        let t = Instant::now();
        let m = snap.snapshot_manifest(0, 1, a.max_pairs, 1 << 20).unwrap();
        let tm = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut bytes = 0usize;
        for (i, it) in m.items.iter().enumerate() {
            bytes += snap
                .snapshot_chunk(0, 1, i as u32, it.depth, &it.prefix, 64 << 20)
                .unwrap()
                .len();
        }
        let tc = t.elapsed().as_secs_f64();
        println!(
            "{round} pass: manifest {tm:.2} s ({:.0} leaves/s), {} chunks {tc:.2} s ({:.0} pairs/s, {:.1} MB)",
            a.accounts as f64 / tm,
            m.items.len(),
            a.accounts as f64 / tc,
            bytes as f64 / 1e6
        );
    }
    let _ = std::fs::remove_dir_all(&a.dir);
}
