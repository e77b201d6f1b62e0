//! What `changes(v - 1, v)` costs the source: builds a store of `--accounts` accounts (bulk load), commits
//! `--versions` payment-like versions of `--writes` puts each, then times the changes of each of the last ones.
//!
//! `cargo run --release -p letus-core --example changes_cost -- --accounts 1000000 --dir /path/on/the/disk`

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
    #[arg(long, default_value_t = 50)]
    versions: u64,
    #[arg(long, default_value_t = 2000)]
    writes: u64,
    #[arg(long, default_value_t = 1)]
    rounds: u64,
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
    let mut store = Store::bulk_load(&a.dir, Options::default(), 0, 1, None, || {
        Ok(it
            .next()
            .map(|(_, i)| (account(i), b"balance 100".to_vec())))
    })
    .unwrap();
    let mut s = 0x9e3779b97f4a7c15u64;
    for v in 2..=a.versions + 1 {
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
    let last = a.versions + 1;
    for _ in 0..a.rounds {
        let snap = store.snapshot();
        let t = Instant::now();
        let mut n = 0;
        for v in last - 19..=last {
            n += snap.changes(0, v - 1, v).unwrap().len();
        }
        let el = t.elapsed().as_secs_f64();
        println!(
            "20 versions' changes: {n} keys in {el:.3} s ({:.1} ms a version)",
            el * 1e3 / 20.0
        );
    }
}
