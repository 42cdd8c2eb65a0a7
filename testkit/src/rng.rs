//! The kit's pseudo-random numbers: SplitMix64, small enough to keep in the crate.
//!
//! A failure found by a seeded fault run must replay from its seed alone, on every platform and
//! with every version of every dependency; a generator of our own, twenty lines long, cannot
//! change under us. (smoltcp's `FaultInjector` also carries its own xorshift32, there to stay
//! `no_std`; `inproc::Shuffled` keeps a private xorshift64.)

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014):
/// every seed, zero included, is a good one — unlike xorshift, whose zero state is stuck — so
/// tests can seed with small numbers such as a rank or a loop counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole sequence is decided by `seed`: the same seed replays the same
    /// faults.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0). The modulo bias is far below anything a test can
    /// notice, and a multiply-shift would make the mapping from seed to fault harder to follow.
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            n => self.next_u64() % n,
        }
    }
}

/// Whether a draw `x` falls under a chance of `pct` percent (smoltcp's `check_rng`): percents,
/// because that is how a test reads and writes a fault rate.
pub(crate) fn chance(x: u64, pct: u8) -> bool {
    x % 100 < u64::from(pct)
}

/// The seeds a fault test runs: `FAULT_SEED=s` alone (to replay one), else `0..FAULT_SEEDS`,
/// else `0..default`. Not `CH4_*` names: the library refuses `CH4_*` variables it does not
/// know, and these belong to the tests.
pub fn fault_seeds(default: u64) -> Vec<u64> {
    let read = |name: &str| {
        std::env::var(name).ok().map(|v| {
            v.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}={v:?}: a number"))
        })
    };
    match (read("FAULT_SEED"), read("FAULT_SEEDS")) {
        (Some(s), _) => vec![s],
        (None, n) => (0..n.unwrap_or(default)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_zero_is_a_good_seed() {
        let run = |seed| {
            let mut r = SplitMix64::new(seed);
            (0..8).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(run(0), run(0));
        assert_ne!(run(0), run(1));
        assert!(run(0).iter().all(|&x| x != 0));
        let mut r = SplitMix64::new(7);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn chance_is_in_percent() {
        assert!(!chance(0, 0));
        assert!(chance(99, 100));
        assert!(chance(149, 50) && !chance(150, 50));
    }
}
