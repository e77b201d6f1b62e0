//! `letus-workload`: the LETUS evaluation workload, shared by the demo, the benchmarks and the load generators so that they all
//! draw the same keys: a small deterministic generator and the 80/20 account choice (80% of the picks fall on
//! 20% of the accounts).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// xorshift64*: tiny, deterministic, good enough to spread keys; not for anything secret.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (`n` >= 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// An account among `n`, 80% of the time one of the first 20% ("hot") accounts.
    pub fn hot_account(&mut self, n: u64) -> u64 {
        let hot = (n / 5).max(1);
        if self.below(10) < 8 {
            self.below(hot)
        } else {
            hot + self.below((n - hot).max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn hot_accounts_get_about_80_percent() {
        let mut r = Rng::new(1);
        let n = 10_000;
        let hot = (0..100_000).filter(|_| r.hot_account(n) < n / 5).count();
        assert!((78_000..82_000).contains(&hot), "{hot}");
        assert!((0..1000).all(|_| r.hot_account(n) < n));
    }
}
