//! CPython's `random.Random`: MT19937 seeded from an integer exactly as CPython's `random_seed` does, and its
//! `random()`, so a seed draws the same numbers here as in the Python model ("the same seed drops the same
//! frames"). The link's seeded loss and the MMU's ECN draws use it.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// The Mersenne Twister state of a `random.Random`.
#[derive(Clone, Debug)]
pub struct CpythonRandom {
    state: [u32; N],
    index: usize,
}

impl CpythonRandom {
    /// `random.Random(n)` for an integer whose magnitude is `key`, 32-bit words least significant first.
    ///
    /// CPython seeds with `abs(n)` split into as many words as it needs (one for 0), so high zero words
    /// are dropped here: `[5, 0]` seeds as `[5]`, and an empty key as `[0]`.
    pub fn from_int_seed(key: &[u32]) -> Self {
        let used = key
            .iter()
            .rposition(|&word| word != 0)
            .map_or(0, |top| top + 1);
        match key.get(..used) {
            Some(words) if !words.is_empty() => Self::by_array(words),
            _ => Self::by_array(&[0]),
        }
    }

    /// `random.Random(seed)` for a non-negative integer seed.
    pub fn from_u64(seed: u64) -> Self {
        Self::from_int_seed(&[seed as u32, (seed >> 32) as u32])
    }

    /// MT19937's `init_genrand`.
    fn by_genrand(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        CpythonRandom { state, index: N }
    }

    /// MT19937's `init_by_array` (non-empty `key`), as CPython's `_randommodule.c` runs it.
    fn by_array(key: &[u32]) -> Self {
        let mut rng = Self::by_genrand(19_650_218);
        let mt = &mut rng.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1];
            mt[i] = (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1];
            mt[i] =
                (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        rng
    }

    /// The next N words of the sequence.
    fn generate(&mut self) {
        let mt = &mut self.state;
        let mag = |y: u32| if y & 1 == 1 { MATRIX_A } else { 0 };
        for k in 0..N {
            let y = (mt[k] & UPPER_MASK) | (mt[(k + 1) % N] & LOWER_MASK);
            mt[k] = mt[(k + M) % N] ^ (y >> 1) ^ mag(y);
        }
        self.index = 0;
    }

    /// The next 32-bit word (`getrandbits(32)`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.generate();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: a float in [0, 1) from 53 random bits, two words as CPython takes them.
    pub fn random(&mut self) -> f64 {
        let a = self.next_u32() >> 5;
        let b = self.next_u32() >> 6;
        (f64::from(a) * 67_108_864.0 + f64::from(b)) * (1.0 / 9_007_199_254_740_992.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `(key, getrandbits(32) draws 1, 2 and 1000, random() draws 1 and 2 as bits)` from CPython 3.11.
    #[allow(clippy::type_complexity)]
    const CPYTHON: &[(&[u32], [u32; 3], [u64; 2])] = &[
        (
            &[0x0],
            [0xd82c07cd, 0x629f6fbe, 0xb1182d23],
            [0x3feb0580f98a7dbe, 0x3fe84129978f9c1a],
        ),
        (
            &[0x1],
            [0x2265b1f5, 0x91b7584a, 0x6fea51ca],
            [0x3fc132d8f91b7584, 0x3feb1e2d5b3584f8],
        ),
        (
            &[0x2a],
            [0xa3b1799d, 0x1c80317f, 0xfb10987f],
            [0x3fe4762f307200c5, 0x3f999c6b5eeb2060],
        ),
        (
            &[0x1b5f],
            [0x9b7c55a9, 0x88307939, 0xa426f367],
            [0x3fe36f8ab620c1e4, 0x3fd7bb74f21dbf8e],
        ),
        (
            &[0xffffffff],
            [0xa2a6c909, 0x9e9c04f4, 0xd76a294d],
            [0x3fe454d9227a7013, 0x3fca0274a3720bf8],
        ),
        (
            &[0x0, 0x1],
            [0x1ced31d7, 0x59ef8bbc, 0x006685a3],
            [0x3fbced31cb3df170, 0x3fdabdb5477a4f26],
        ),
        (
            &[0xffffffff, 0xffffffff],
            [0x05965e7e, 0x3faff328, 0xd35b440a],
            [0x3f9659799fd7f980, 0x3fd5a35a94f333d8],
        ),
        (
            &[0x5, 0x0, 0x1],
            [0x82b543b3, 0xb7e58860, 0x9a67a22c],
            [0x3fe056a876df9621, 0x3fec26fb9e44efaf],
        ),
        (
            &[0x6e398115, 0x46bec9b1, 0x27e41b32],
            [0x995e2eb4, 0x0f296853, 0x69ece5b0],
            [0x3fe32bc5d43ca5a1, 0x3fe640faf0f6f108],
        ),
    ];

    #[test]
    fn the_generator_draws_cpythons_sequence() {
        for (key, words, floats) in CPYTHON {
            let mut rng = CpythonRandom::from_int_seed(key);
            let first = [rng.next_u32(), rng.next_u32()];
            for _ in 0..997 {
                rng.next_u32();
            }
            assert_eq!(
                [first[0], first[1], rng.next_u32()],
                *words,
                "seed {key:x?}"
            );
            let mut rng = CpythonRandom::from_int_seed(key);
            assert_eq!(
                [rng.random().to_bits(), rng.random().to_bits()],
                *floats,
                "seed {key:x?}"
            );
        }
    }

    #[test]
    fn high_zero_words_and_an_empty_key_seed_as_cpython_does() {
        let draws = |mut rng: CpythonRandom| [rng.next_u32(), rng.next_u32()];
        assert_eq!(
            draws(CpythonRandom::from_int_seed(&[])),
            draws(CpythonRandom::from_u64(0))
        );
        assert_eq!(
            draws(CpythonRandom::from_int_seed(&[42, 0, 0])),
            draws(CpythonRandom::from_u64(42))
        );
        assert_eq!(
            draws(CpythonRandom::from_u64(1 << 32)),
            [0x1ced31d7, 0x59ef8bbc]
        );
    }

    proptest! {
        /// Seeds beyond 64 bits and high zero words seed as CPython does.
        #[test]
        fn high_zero_words_never_change_the_sequence(key in proptest::collection::vec(any::<u32>(), 0..5)) {
            let mut padded = key.clone();
            padded.extend([0, 0]);
            let (mut a, mut b) = (CpythonRandom::from_int_seed(&key), CpythonRandom::from_int_seed(&padded));
            for _ in 0..700 {
                prop_assert_eq!(a.next_u32(), b.next_u32());
            }
        }
    }
}
