//! `letus`: the letus command.
//!
//! Today it runs `letus demo`, which shows the verification layer at work on a simulated payment chain; the
//! node (`serve`, the HTTP API, export/import) is built on `letus-core` by its own issue.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod demo;

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
    /// Simulate a payment chain and show digests, proofs, fork detection and full verification at work.
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
