//! `letus`: the letus command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod client;
mod demo;
mod serve;
mod tools;

/// The allocator the engine's figures in docs/BENCHMARKS.md were measured with (see `letus-alloc`).
#[global_allocator]
static GLOBAL: letus_alloc::MiMalloc = letus_alloc::MiMalloc;

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
    /// Run a sharding router: the API of one node in front of shard nodes (`letus serve --shard-prefixes`) that
    /// hold the 256 subtrees between them, with the roots and proofs one node would give.
    Route(serve::RouteArgs),
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
    letus_alloc::init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => serve::run(*a),
        Command::Route(a) => serve::run_route(a),
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
