//! A small seeded random generator (SplitMix64) for tests that pick random faults and kill points:
//! the seed is printed, and setting `YH_GENIE_TEST_SEED` to it replays the same choices.

use std::time::{SystemTime, UNIX_EPOCH};

pub const SEED_VAR: &str = "YH_GENIE_TEST_SEED";

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// Seeded from `YH_GENIE_TEST_SEED` if set, else from the clock, so that runs explore
    /// different choices. Returns the seed too, for the test to print.
    pub fn from_env() -> (Self, u64) {
        let seed = std::env::var(SEED_VAR).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0x5eed)
        });
        (Rng::new(seed), seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}
