//! JSON bodies of `POST /v1/blocks`, `/value`, `/history` and `/proofs`, against one node for the whole run (its
//! state and block store in memory, `letus_core::storage::Memory`, so that a block write costs no fsync).
#![no_main]
use std::sync::OnceLock;

use letus_node::node::{Node, NodeLimits};

static NODE: OnceLock<Node> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let node = NODE.get_or_init(|| {
        let opts = letus_core::Options {
            storage: std::sync::Arc::new(letus_core::storage::Memory::new()),
            ..letus_core::Options::default()
        };
        Node::open(
            std::path::Path::new("/fuzz-node"),
            opts,
            "t".into(),
            NodeLimits::default(),
        )
        .unwrap()
    });
    letus_node::fuzzing::request_bodies(node, data);
});
