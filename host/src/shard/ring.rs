//! Who owns which bucket: a pure function of the live members, so every
//! replica that sees the same Leases computes the same owners.

use super::hash::{BUCKETS, Bucket, fnv1a_64};
use super::share::Share;

/// The set of live members a replica saw, named by a hash of their names:
/// two replicas agree on the owners exactly when they agree on the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Epoch(pub u64);

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The live members and the owner of every bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    members: Vec<String>,
    owners: [u16; BUCKETS],
}

impl Ring {
    /// The ring of these members (order and repeats do not matter). No
    /// member: no bucket has an owner.
    #[must_use]
    pub fn new<S: AsRef<str>>(members: impl IntoIterator<Item = S>) -> Self {
        let mut members: Vec<String> = members.into_iter().map(|m| m.as_ref().to_owned()).collect();
        members.sort();
        members.dedup();
        let owners = owners(&members);
        Self { members, owners }
    }

    /// The members, by name.
    #[must_use]
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The epoch: FNV-1a of the sorted names.
    #[must_use]
    pub fn epoch(&self) -> Epoch {
        Epoch(fnv1a_64(self.members.join("\n").as_bytes()))
    }

    /// The member owning `bucket`; `None` with no members.
    #[must_use]
    pub fn owner(&self, bucket: Bucket) -> Option<&str> {
        self.members
            .get(usize::from(self.owners[bucket.index()]))
            .map(String::as_str)
    }

    /// The buckets `member` owns (none if it is not a member).
    #[must_use]
    pub fn share(&self, member: &str) -> Share {
        Share::from_buckets(Bucket::all().filter(|&b| self.owner(b) == Some(member)))
    }
}

/// Each bucket, in order, to the member ranking it highest among those
/// below the even load ⌈B/N⌉: rendezvous hashing with bounded loads, so a
/// change of members moves about the buckets it must and a few more.
fn owners(members: &[String]) -> [u16; BUCKETS] {
    let mut owners = [u16::MAX; BUCKETS];
    if members.is_empty() {
        return owners;
    }
    let cap = BUCKETS.div_ceil(members.len());
    let mut load = vec![0usize; members.len()];
    let seeds: Vec<u64> = members.iter().map(|m| fnv1a_64(m.as_bytes())).collect();
    for bucket in Bucket::all() {
        let chosen = (0..members.len())
            .filter(|&m| load[m] < cap)
            .max_by_key(|&m| (mix(seeds[m] ^ mix(bucket.index() as u64)), m))
            .unwrap_or(0);
        load[chosen] += 1;
        owners[bucket.index()] = chosen as u16;
    }
    owners
}

/// splitmix64's finaliser: every input bit moves every output bit, which
/// FNV-1a alone does not do for names that differ in their last bytes.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("policyhost-{i}")).collect()
    }

    fn moved(a: &Ring, b: &Ring) -> usize {
        Bucket::all().filter(|&x| a.owner(x) != b.owner(x)).count()
    }

    #[test]
    fn every_bucket_has_one_owner_and_loads_are_even() {
        for n in 1..=12 {
            let ring = Ring::new(names(n));
            let shares: Vec<usize> = ring.members().iter().map(|m| ring.share(m).len()).collect();
            assert_eq!(shares.iter().sum::<usize>(), BUCKETS, "{n} members");
            assert!(
                shares.iter().all(|&s| s <= BUCKETS.div_ceil(n)),
                "{n} members: {shares:?}"
            );
            assert!(Bucket::all().all(|b| ring.owner(b).is_some()));
        }
        assert_eq!(
            Ring::new(Vec::<String>::new()).owner(Bucket::all().next().unwrap()),
            None
        );
    }

    #[test]
    fn every_replica_computes_the_same_ring() {
        let a = Ring::new(["b", "a", "c"]);
        let b = Ring::new(["c", "a", "b", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.epoch(), b.epoch());
        assert_ne!(a.epoch(), Ring::new(["a", "b"]).epoch());
    }

    #[test]
    fn a_change_of_members_moves_about_a_share() {
        // The fewest moves are B/(N+1) on a join and B/N on a leave; the
        // even-load cap costs a few more.
        for n in 1..=9 {
            let before = Ring::new(names(n));
            let joined = Ring::new(names(n + 1));
            let fewest = BUCKETS / (n + 1);
            assert!(
                moved(&before, &joined) <= fewest + BUCKETS / 8,
                "{n} → {}: {} moved, fewest {fewest}",
                n + 1,
                moved(&before, &joined)
            );
        }
        // A member leaving: its buckets move, and few others.
        let three = Ring::new(names(3));
        let gone = &three.members()[1].clone();
        let two = Ring::new(three.members().iter().filter(|m| *m != gone));
        let own = three.share(gone).len();
        assert!(
            moved(&three, &two) <= own + BUCKETS / 8,
            "{} moved",
            moved(&three, &two)
        );
        for b in Bucket::all() {
            if three.owner(b) != Some(gone) && three.owner(b) != two.owner(b) {
                assert!(two.share(two.owner(b).unwrap()).len() <= BUCKETS.div_ceil(2));
            }
        }
    }
}
