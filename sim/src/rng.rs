//! The simulator's one source of randomness: xoshiro256** seeded through SplitMix64, written
//! out here so that a seed means the same run on every machine and every version of every
//! crate (a library's generator may change its stream between releases).

/// A small, fast, seedable generator. Every random choice of a run comes from one root `Rng`
/// or from a sub-generator forked from it ([`Rng::fork`]).
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// A generator whose whole stream is a function of `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut mix = seed;
        let mut state = [0u64; 4];
        for word in &mut state {
            *word = splitmix64(&mut mix);
        }
        Rng { state }
    }

    /// A sub-generator: one draw from this one seeds it, so its stream does not depend on how
    /// many draws the parent makes later.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = &mut self.state;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = *s1 << 17;
        *s2 ^= *s0;
        *s3 ^= *s1;
        *s1 ^= *s2;
        *s0 ^= *s3;
        *s2 ^= t;
        *s3 = s3.rotate_left(45);
        result
    }

    /// A value in `0..n` (0 when `n` is 0), by Lemire's multiply-and-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A value in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi, "between({lo}, {hi})");
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p` (per million, so that knobs stay integers).
    pub fn chance_ppm(&mut self, p_ppm: u64) -> bool {
        self.below(1_000_000) < p_ppm
    }

    /// True with probability one half.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_one_stream() {
        let a: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..8)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn below_stays_below() {
        let mut r = Rng::new(1);
        for n in 1..200 {
            assert!(r.below(n) < n);
        }
        assert_eq!(r.below(0), 0);
        for _ in 0..100 {
            let v = r.between(3, 5);
            assert!((3..=5).contains(&v));
        }
    }
}
