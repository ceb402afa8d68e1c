//! The one seeded pseudo-random generator of the tests and benchmarks
//! (xorshift64, feature `test-support`): the same seed gives the same run, so failures replay.

/// xorshift64: tiny, seedable, good enough to pick actions, sizes and bytes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed` (0, which xorshift cannot leave,
    /// is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 pseudo-random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index into something `len` long (`len` > 0).
    pub fn index(&mut self, len: usize) -> usize {
        (self.next() % len as u64) as usize
    }

    /// A copy of one element of `items`, or `None` when it is empty.
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        let i = self.index(items.len());
        items.get(i).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_replays_and_zero_is_not_stuck() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next()
            })
            .collect();
        let mut r = Rng::new(7);
        assert_eq!(a, (0..4).map(|_| r.next()).collect::<Vec<_>>());
        let mut zero = Rng::new(0);
        assert_ne!(zero.next(), 0);
        assert!((0..1000).all(|_| zero.below(10) < 10));
        assert_eq!(zero.pick::<u8>(&[]), None);
        let mut seen = [false; 3];
        for _ in 0..100 {
            let i = zero.pick(&[0usize, 1, 2]).unwrap();
            seen[i] = true;
        }
        assert_eq!(seen, [true; 3], "pick reaches every element");
    }
}
