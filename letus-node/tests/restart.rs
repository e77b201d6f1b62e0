//! Restart after SIGKILL, with the real binary: blocks of 200 writes are posted back to back, the node is killed
//! at a random moment, restarted, and must hold every acknowledged version; the time from spawning the node to
//! its first answer is measured at every restart. The node bounds what a restart replays (`max_replay_millis`,
//! 500 ms of commit work by default), so that time does not grow with the run.
//!
//! `LETUS_RESTART_BLOCKS` sets how many blocks the run writes (default 400; the documented long run writes
//! 10,000 and its figures are in docs/BENCHMARKS.md). The test prints the restart times; it asserts no timing.

mod common;

use common::agent;

use std::time::{Duration, Instant};

use letus_node::api::{BlockRequest, WriteOp};
use letus_verify::hex::encode as hex;
use serde_json::Value;

const TOKEN: &str = "restart-token";

fn latest(url: &str) -> Option<u64> {
    let v: Value = agent()
        .get(format!("{url}/v1/digest"))
        .call()
        .ok()?
        .body_mut()
        .read_json()
        .ok()?;
    v["version"].as_u64()
}

#[test]
fn restarts_after_sigkill_keep_every_acknowledged_block_and_stay_short() {
    let total: u64 = std::env::var("LETUS_RESTART_BLOCKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = letus_workload::Rng::new(7);
    let mut acked = 0u64;
    let mut restarts: Vec<Duration> = Vec::new();
    let mut round = 0;
    while acked < total {
        let started = Instant::now();
        let (mut node, url) = common::serve(dir.path(), TOKEN);
        let answered = latest(&url);
        let took = started.elapsed();
        if round > 0 {
            restarts.push(took);
        }
        assert!(
            answered.unwrap_or(0) >= acked,
            "round {round}: the node came back at {answered:?}, {acked} was acknowledged"
        );
        acked = answered.unwrap_or(0);
        // Write for a random number of blocks (at least one), then kill without warning.
        let blocks = 1 + rng.below(300);
        for _ in 0..blocks {
            let v = acked + 1;
            let req = BlockRequest {
                version: v,
                writes: (0..200)
                    .map(|_| WriteOp {
                        tid: 0,
                        key: hex(&rng.below(20_000).to_le_bytes()),
                        value: Some(hex(&v.to_le_bytes())),
                    })
                    .collect(),
                block: Some(hex(format!("block {v}").as_bytes())),
                access_list: vec![],
            };
            let res = agent()
                .post(format!("{url}/v1/blocks"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .send_json(req)
                .unwrap();
            assert_eq!(res.status(), 200, "round {round}: block {v}");
            acked = v;
            if acked >= total {
                break;
            }
        }
        node.kill().unwrap();
        node.wait().unwrap();
        round += 1;
    }
    let (mut node, url) = common::serve(dir.path(), TOKEN);
    assert!(latest(&url).unwrap() >= acked);
    node.kill().unwrap();
    node.wait().unwrap();
    restarts.sort();
    if let Some(max) = restarts.last() {
        let p50 = restarts[restarts.len() / 2];
        println!(
            "restart after SIGKILL: {} restarts over {acked} blocks of 200 writes: median {p50:?}, max {max:?}",
            restarts.len()
        );
    }
}
