//! JSON bodies of `POST /v1/blocks`, `/value`, `/history` and `/proofs`, against one node for the whole run.
#![no_main]
use std::sync::OnceLock;

use letus_node::node::{Node, NodeLimits};

static NODE: OnceLock<(tempfile::TempDir, Node)> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, node) = NODE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let node = Node::open(
            dir.path(),
            letus_core::Options::default(),
            "t".into(),
            NodeLimits::default(),
        )
        .unwrap();
        (dir, node)
    });
    letus_node::fuzzing::request_bodies(node, data);
});
