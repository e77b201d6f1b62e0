//! The block store's size with `--max-traceable-blocks` (issue 13's NeoGo table, the block side), one run:
//! the raw blocks of the bench's payment chain (`--blocks` blocks of `--txs` transfers, each transfer its two
//! account keys and an amount: 44 bytes) appended to one block store per setting, as `letus serve` does after
//! each commit (append fsynced, then the tail cut to the newest N blocks, with segments sealed every
//! `segment_blocks_for(N)` blocks as the node does), for each segment size asked.
//!
//! ```sh
//! cargo run --release -p letus-node --example block_tail -- --blocks 1001
//! ```

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use clap::Parser;
use letus_node::blockstore::{segment_blocks_for, BlockStore, BlockStoreOptions};
use letus_workload::Rng;

#[derive(Parser)]
struct Args {
    /// Accounts.
    #[arg(long, default_value_t = 1_000_000)]
    accounts: u64,
    /// Payment blocks.
    #[arg(long, default_value_t = 1001)]
    blocks: u64,
    /// Transfers per block.
    #[arg(long, default_value_t = 1000)]
    txs: u64,
    /// `max_traceable_blocks` settings besides keeping every block, comma-separated.
    #[arg(long, default_value = "100,10", value_delimiter = ',')]
    keep: Vec<u64>,
    /// Segment sizes in bytes, comma-separated (64 MiB is `letus serve`'s default).
    #[arg(long, default_value = "67108864,4194304", value_delimiter = ',')]
    segment_bytes: Vec<u64>,
    /// Where the stores go (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

fn key(a: u64) -> Vec<u8> {
    format!("account-{a:010}").into_bytes()
}

/// Bytes allocated on disk under `dir`.
fn allocated(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() {
    let a = Args::parse();
    let tmp = tempfile::tempdir_in(a.dir.clone().unwrap_or_else(std::env::temp_dir)).unwrap();
    let mut rng = Rng::new(42);
    let blocks: Vec<Vec<u8>> = (0..a.blocks)
        .map(|_| {
            let mut b = Vec::with_capacity(a.txs as usize * 44);
            for _ in 0..a.txs {
                b.extend(key(rng.hot_account(a.accounts)));
                b.extend(key(rng.hot_account(a.accounts)));
                b.extend(rng.below(100).to_le_bytes());
            }
            b
        })
        .collect();
    let raw: u64 = blocks.iter().map(|b| b.len() as u64).sum();
    println!(
        "{} blocks of {} transfers: {} of raw blocks",
        a.blocks,
        a.txs,
        mib(raw)
    );
    println!("| segment size | max_traceable_blocks | block store on disk | segments | oldest block held | apply time |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &segment_bytes in &a.segment_bytes {
        let mut settings: Vec<Option<u64>> = vec![None];
        settings.extend(a.keep.iter().map(|k| Some(*k)));
        for keep in settings {
            let dir = tmp.path().join(format!("blocks-{segment_bytes}-{keep:?}"));
            let mut bs = BlockStore::open(
                &dir,
                BlockStoreOptions {
                    segment_bytes,
                    // What `letus serve --max-traceable-blocks N` sets.
                    segment_blocks: keep.map(segment_blocks_for),
                    ..BlockStoreOptions::default()
                },
            )
            .unwrap();
            let started = Instant::now();
            for (i, b) in blocks.iter().enumerate() {
                let v = i as u64 + 1;
                bs.append(v, [0; 32], b).unwrap();
                if let Some(n) = keep {
                    // What `letus serve --max-traceable-blocks N` does after each block.
                    bs.cut_tail((v + 1).saturating_sub(n.max(1))).unwrap();
                }
            }
            let secs = started.elapsed().as_secs_f64();
            let segments = bs.segments().len();
            let oldest = bs.first_version().unwrap_or(0);
            drop(bs);
            println!(
                "| {} | {} | {} | {segments} | {oldest} | {secs:.1} s |",
                mib(segment_bytes),
                keep.map_or("every block".into(), |k| k.to_string()),
                mib(allocated(&dir)),
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
