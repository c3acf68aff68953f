//! The hash kube-apiserver shards by, and the buckets cut from it.

/// How many buckets the hash space is cut into: enough for an even split
/// over tens of replicas, few enough that a share is one `u64` set and its
/// selector a handful of ranges.
pub const BUCKETS: usize = 64;

/// The bits of the hash that name a bucket (`BUCKETS = 2^BUCKET_BITS`).
const BUCKET_BITS: u32 = BUCKETS.trailing_zeros();

/// 64-bit FNV-1a, as Go's `hash/fnv` and so kube-apiserver's
/// `shardRange` compute it.
#[must_use]
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// One of the [`BUCKETS`] equal slices of the hash space: the hashes
/// `[index·2^64/B, (index+1)·2^64/B)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket(u8);

impl Bucket {
    /// The bucket of the smallest hashes.
    pub const FIRST: Self = Self(0);

    /// Every bucket, in hash order.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..BUCKETS).map(|i| Self(i as u8))
    }

    /// The bucket of `index`, if there is one.
    #[must_use]
    pub fn new(index: usize) -> Option<Self> {
        u8::try_from(index)
            .ok()
            .filter(|_| index < BUCKETS)
            .map(Self)
    }

    /// The bucket of an object's uid.
    #[must_use]
    pub fn of_uid(uid: &str) -> Self {
        Self((fnv1a_64(uid.as_bytes()) >> (64 - BUCKET_BITS)) as u8)
    }

    /// Its position, `0..BUCKETS`.
    #[must_use]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The first hash of the bucket.
    #[must_use]
    pub fn start(self) -> u128 {
        u128::from(self.0) << (64 - BUCKET_BITS)
    }

    /// The first hash after it (2^64 for the last bucket).
    #[must_use]
    pub fn end(self) -> u128 {
        (u128::from(self.0) + 1) << (64 - BUCKET_BITS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_agrees_with_go() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn buckets_tile_the_hash_space() {
        let mut next = 0u128;
        for bucket in Bucket::all() {
            assert_eq!(bucket.start(), next);
            next = bucket.end();
        }
        assert_eq!(next, 1 << 64);
        let uid = "8c2ffca8-c471-4a0d-95d5-67c18806b21d";
        let hash = u128::from(fnv1a_64(uid.as_bytes()));
        let bucket = Bucket::of_uid(uid);
        assert!(bucket.start() <= hash && hash < bucket.end());
        assert_eq!(Bucket::new(BUCKETS), None);
    }
}
