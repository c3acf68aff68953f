//! A member's buckets: the shard selector that asks the API server for
//! them, and the check of each object that does not rely on it.

use std::fmt::Write as _;

use super::hash::{BUCKETS, Bucket};

/// The field DataJobs are sharded by.
const UID: &str = "object.metadata.uid";

/// A set of buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Share(u64);

const _: () = assert!(
    BUCKETS == u64::BITS as usize,
    "a Share is one bit per bucket"
);

impl Share {
    /// Every bucket: what a lone replica owns.
    pub const ALL: Self = Self(u64::MAX);

    /// The set of these buckets.
    pub fn from_buckets(buckets: impl IntoIterator<Item = Bucket>) -> Self {
        Self(buckets.into_iter().fold(0, |set, b| set | (1 << b.index())))
    }

    /// How many buckets.
    #[must_use]
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether it has none.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether `bucket` is in it.
    #[must_use]
    pub fn contains(self, bucket: Bucket) -> bool {
        self.0 & (1 << bucket.index()) != 0
    }

    /// Whether the object of this uid is in it: the check every watch
    /// event gets, whatever the server filtered.
    #[must_use]
    pub fn owns_uid(self, uid: &str) -> bool {
        self.contains(Bucket::of_uid(uid))
    }

    /// The buckets in `self` and not in `other`.
    #[must_use]
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// The buckets in both.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The set as 16 hex digits (bit `i` is bucket `i`), as a member
    /// Lease's annotation carries it.
    #[must_use]
    pub fn to_hex(self) -> String {
        format!("{:016x}", self.0)
    }

    /// The set of [`to_hex`](Self::to_hex)'s text; `None` for other text.
    #[must_use]
    pub fn from_hex(text: &str) -> Option<Self> {
        (text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u64::from_str_radix(text, 16).ok())
            .flatten()
            .map(Self)
    }

    /// Its buckets, in hash order.
    pub fn buckets(self) -> impl Iterator<Item = Bucket> {
        Bucket::all().filter(move |&b| self.contains(b))
    }

    /// Its runs of neighbouring buckets, as `(first, last)`.
    #[must_use]
    pub fn runs(self) -> Vec<(Bucket, Bucket)> {
        let mut runs: Vec<(Bucket, Bucket)> = Vec::new();
        for bucket in self.buckets() {
            match runs.last_mut() {
                Some((_, last)) if last.index() + 1 == bucket.index() => *last = bucket,
                _ => runs.push((bucket, bucket)),
            }
        }
        runs
    }

    /// The shard selector of its DataJobs: one `shardRange` on the uid per
    /// run, joined with `||`, bounds as kube-apiserver requires them (16
    /// lowercase hex digits, or 2^64 as the end of the last bucket).
    /// `None` for an empty share, which no selector can name.
    #[must_use]
    pub fn selector(self) -> Option<String> {
        let mut text = String::new();
        for (first, last) in self.runs() {
            if !text.is_empty() {
                text.push_str(" || ");
            }
            let _ = write!(
                text,
                "shardRange({UID}, '{:#018x}', '{:#018x}')",
                first.start(),
                last.end()
            );
        }
        (!text.is_empty()).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::fnv1a_64;

    fn bucket(i: usize) -> Bucket {
        Bucket::new(i).unwrap()
    }

    #[test]
    fn neighbouring_buckets_make_one_range() {
        let share = Share::from_buckets([0, 1, 2, 5, 63].map(bucket));
        assert_eq!(share.len(), 5);
        assert_eq!(
            share.selector().unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0c00000000000000') \
             || shardRange(object.metadata.uid, '0x1400000000000000', '0x1800000000000000') \
             || shardRange(object.metadata.uid, '0xfc00000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            Share::ALL.selector().unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
        );
        assert_eq!(Share::default().selector(), None);
        assert_eq!(Share::from_hex(&share.to_hex()), Some(share));
        assert_eq!(Share::from_hex("+00000000000000f"), None);
        assert_eq!(Share::from_hex("zzzzzzzzzzzzzzzz"), None);
    }

    #[test]
    fn a_uid_is_owned_where_its_hash_falls() {
        let share = Share::from_buckets((0..32).map(bucket));
        for uid in [
            "8c2ffca8-c471-4a0d-95d5-67c18806b21d",
            "b27591ad-73b2-4fbf-859c-789a9ff311fd",
            "9aafaffa",
        ] {
            assert_eq!(
                share.owns_uid(uid),
                fnv1a_64(uid.as_bytes()) < 1 << 63,
                "{uid}"
            );
        }
        assert_eq!(
            Share::ALL.without(share),
            Share::from_buckets((32..64).map(bucket))
        );
        assert_eq!(
            share.and(Share::from_buckets((16..48).map(bucket))),
            Share::from_buckets((16..32).map(bucket))
        );
    }
}
