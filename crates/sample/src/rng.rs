//! The generator's own pseudo-random numbers, also the workspace's one
//! splitmix64 (layout's partitioning hash, loadcost's run order and the
//! demo summary's bootstrap draw from
//! [`Rng::next_u64`]).
//!
//! The sample app is ground truth for other tests, so the same seed must
//! give the same program forever. A published RNG crate may change its
//! output between versions; splitmix64 is a dozen lines and never will.

/// A splitmix64 stream (Steele, Lea and Flood, "Fast splittable
/// pseudorandom number generators", 2014).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// An independent stream for one purpose and one item, so that adding a
    /// draw in one part of the generator does not shift every other part.
    pub(crate) fn stream(seed: u64, purpose: u64, item: u64) -> Self {
        Rng::new(mix(
            mix(seed ^ mix(purpose.wrapping_add(GOLDEN_GAMMA))) ^ item
        ))
    }

    /// The next output: the published splitmix64 sequence for this seed.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    pub(crate) fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A number in `0..bound`; `bound` must not be zero. Multiply-shift
    /// rather than modulo: its bias is below 2^-32 for every bound used here.
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    pub(crate) fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u32, high: u32) -> u32 {
        debug_assert!(low <= high);
        low + self.below(u64::from(high - low) + 1) as u32
    }

    /// True with probability `percent` / 100.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_splitmix64_sequence() {
        // First outputs for seed 1234567 from the reference C implementation
        // (Vigna, prng.di.unimi.it/splitmix64.c).
        let mut rng = Rng::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(rng.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn below_stays_in_range_and_reaches_both_ends() {
        let mut rng = Rng::new(7);
        let draws: Vec<u64> = (0..1000).map(|_| rng.below(5)).collect();
        assert!(draws.iter().all(|&d| d < 5));
        assert!(draws.contains(&0) && draws.contains(&4));
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut rng = Rng::new(99);
        let mut items: Vec<u32> = (0..50).collect();
        rng.shuffle(&mut items);
        assert_ne!(items, (0..50).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..50).collect::<Vec<_>>());
    }
}
