//! A small seeded generator: uids, generated names and fault decisions are reproducible per seed.

use std::sync::atomic::{AtomicU64, Ordering};

/// SplitMix64 over an atomic state, so it can be shared without a lock.
#[derive(Debug)]
pub(crate) struct Rng(AtomicU64);

impl Rng {
    /// A generator starting from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed))
    }

    /// Reseeds.
    pub(crate) fn reseed(&self, seed: u64) {
        self.0.store(seed, Ordering::Relaxed);
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&self) -> u64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in `[0, 1)`.
    pub(crate) fn next_f64(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A version-4 UUID string.
    pub(crate) fn uuid(&self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
        let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xFFFF,
            a & 0xFFFF,
            b >> 48,
            b & 0xFFFF_FFFF_FFFF
        )
    }

    /// Five characters for `generateName`, from the alphabet kube-apiserver uses.
    pub(crate) fn name_suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next_u64();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize];
                n /= ALPHABET.len() as u64;
                c as char
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_same_sequence() {
        let (a, b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.uuid(), b.uuid());
        assert_eq!(a.name_suffix(), b.name_suffix());
    }

    #[test]
    fn uuids_are_version_four() {
        let u = Rng::new(1).uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
