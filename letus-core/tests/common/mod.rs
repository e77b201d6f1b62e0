//! Shared helpers for the engine's integration tests.
#![allow(dead_code)]

use letus_core::Options;

/// The engine's workload generator, with the helpers tests need.
pub struct Rng(letus_workload::Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(letus_workload::Rng::new(seed))
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let n = self.below(max_len + 1);
        (0..n).map(|_| self.0.next_u64() as u8).collect()
    }
}

/// Options that make every mechanism run often: tiny DeltaPages, frequent BasePages, a tiny MemIndexTable,
/// small value-log files.
pub fn small_options() -> Options {
    Options {
        delta_threshold: 4,
        base_threshold: 9,
        memtable_bytes: 16 * 1024,
        vdls_file_bytes: 64 * 1024,
        // Far smaller than the state of most tests (a few thousand keys need about 400 KiB of pages): pages are
        // evicted and reloaded constantly.
        memory_budget_bytes: 128 * 1024,
        // A latest-value index of 64 slots: most gets at the latest version go through it, and it evicts and
        // collides constantly.
        latest_index_bytes: 12 * 64,
        ..Options::default()
    }
}

pub fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}
