//! A store for pruning at scale: bulk-loads `--accounts` accounts into `DIR/state` (a node's data directory),
//! then commits `--versions` versions of `--writes` puts of random accounts, prints the root of the last version
//! and leaves the store there. Then, on that stopped store:
//!
//! ```sh
//! cargo run --release -p letus-core --example prune_scale -- --accounts 10000000 --dir DIR
//! letus prune --data DIR --keep 0 --merge          # one base file of every page of the state
//! letus verify --data DIR --version 31 --root ROOT  # the root it printed, recomputed from the pruned store
//! ```
//!
//! At 10M accounts a level of the trie holds more than 2^20 pages, past which a prune's walk spills a level to a
//! scratch file (`store/page_walk.rs`).

mod common;

use clap::Parser;
use common::account;
use letus_workload::Rng;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000_000)]
    accounts: u64,
    /// The data directory to create (its `state` is the store); replaced if it exists.
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Versions committed after the load (version 1).
    #[arg(long, default_value_t = 30)]
    versions: u64,
    /// Puts per version.
    #[arg(long, default_value_t = 2000)]
    writes: u64,
}

fn main() {
    let a = Args::parse();
    let state = a.dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let (mut s, took) = common::bulk_accounts(&state, a.accounts);
    println!(
        "bulk load of {} accounts: {:.1} s",
        a.accounts,
        took.as_secs_f64()
    );
    let mut rng = Rng::new(7);
    let last = 1 + a.versions;
    for v in 2..=last {
        for _ in 0..a.writes {
            let i = rng.below(a.accounts.max(1));
            s.put(0, &account(i), format!("balance {v}").as_bytes())
                .expect("put");
        }
        s.commit(v).expect("commit");
    }
    let root = s.digest(0, last).expect("digest").root;
    s.close().expect("close");
    println!("version {last}, root {root}");
}
