//! `letus-node`: the letus store as a service — HTTP API, block store, and the `letus` command's subcommands.
#![forbid(unsafe_code)]

pub mod api;
pub mod blockstore;
pub mod body_budget;
pub mod error;
pub mod export;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod join;
pub mod metrics;
pub mod node;
pub mod server;
pub mod sharding;
pub mod wire;

#[cfg(test)]
mod panic_tests;
