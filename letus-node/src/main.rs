//! `letus`: the letus command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod client;
mod demo;
mod serve;
mod tools;

/// mimalloc, as in the benchmarks the engine's figures come from (docs/BENCHMARKS.md): with glibc malloc
/// (`MALLOC_ARENA_MAX=2`) the 3M-key engine bench committed 75k updates/s against 94k, and loaded a third slower.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Makes mimalloc return freed memory to the OS after 1 ms instead of its default 10 ms (100 ms for its arenas).
/// The page cache evicts and replaces pages continuously, and at 10M keys the freed memory waiting to be purged
/// was 220 MiB of RSS above the live heap (10M engine bench: peak 2,572 MiB by default, 2,349 with no delay,
/// 2,297 with 1 ms after the boxed-slice change, against 2,286 with none). No delay at all cost warm gets at 1M
/// keys 13-26% (each get's buffers were returned and faulted in again: 222k-263k gets/s against 301k); 1 ms costs
/// 6% (285k). `mi_option_purge_delay` is 15 in mimalloc v3's `mi_option_e` (libmimalloc-sys declares no constant
/// for it). An explicit `MIMALLOC_PURGE_DELAY` in the environment wins (to compare settings).
fn purge_freed_memory_soon() {
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets an allocator option; mimalloc allows this at any time from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1) };
}

#[derive(Parser)]
#[command(
    name = "letus",
    version,
    about = "letus: verifiable multi-version blockchain storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node over a data directory, serving the HTTP API.
    Serve(Box<serve::ServeArgs>),
    /// Start a node on a fresh store and feed it a simulated payment chain; prints the URLs to open.
    Demo(demo::DemoArgs),
    /// Full verification for auditors: recompute the root of a version from the stored data.
    Verify(tools::VerifyArgs),
    /// Prune the state of old versions of a stopped node's store (a running node: `--keep-versions`, or
    /// `POST /v1/admin/prune`).
    Prune(tools::PruneArgs),
    /// Write the state export of one trie at one version (SPEC.md §9.2).
    Export(tools::ExportArgs),
    /// Seed a new store from a state export, after verifying it.
    Import(tools::ImportArgs),
    /// Snapshots in chunks: `letus snapshot fetch` from running nodes into a directory, `letus snapshot import`.
    Snapshot(tools::SnapshotArgs),
    /// Read a value from a node and verify its proof.
    Get(client::GetArgs),
    /// Fetch a proof for one or more keys from a node and verify it.
    Proof(client::ProofArgs),
    /// Show a node's digests and check them against each other.
    Digest(client::DigestArgs),
    /// The storage tiers: `letus tier status` shows where the sealed files are and what the mover did.
    Tier(client::TierArgs),
}

fn main() -> ExitCode {
    purge_freed_memory_soon();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => serve::run(*a),
        Command::Demo(a) => demo::run(a),
        Command::Verify(a) => tools::verify(a),
        Command::Prune(a) => tools::prune(a),
        Command::Export(a) => tools::export(a),
        Command::Import(a) => tools::import(a),
        Command::Snapshot(a) => tools::snapshot(a),
        Command::Get(a) => client::get(a),
        Command::Proof(a) => client::proof(a),
        Command::Digest(a) => client::digest(a),
        Command::Tier(a) => client::tier(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
