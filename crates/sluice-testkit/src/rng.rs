//! A small deterministic generator for randomized tests ([`XorShift`]): the same seed gives the
//! same sequence on every machine, so a failing case is found again by its seed. Not for
//! anything but tests.

/// Marsaglia's xorshift64 generator.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0 is replaced: xorshift never leaves 0).
    pub fn new(seed: u64) -> XorShift {
        XorShift(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_its_sequence_and_stays_below_the_bound() {
        let (mut a, mut b) = (XorShift::new(7), XorShift::new(7));
        let xs: Vec<u64> = (0..100).map(|_| a.below(10)).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.below(10)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| *x < 10));
        assert!(xs.iter().any(|x| *x != xs[0]), "not constant: {xs:?}");
        assert_ne!(XorShift::new(0).next_u64(), 0);
    }
}
