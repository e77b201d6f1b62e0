//! Shared helpers for the engine's integration tests.
#![allow(dead_code)]

use letus_core::Options;

/// xorshift64*: a tiny deterministic generator, so that a failing seed can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let n = self.below(max_len + 1);
        (0..n).map(|_| self.next() as u8).collect()
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
        page_cache_bytes: 256 * 1024,
        block_cache_bytes: 64 * 1024,
        ..Options::default()
    }
}

pub fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}
