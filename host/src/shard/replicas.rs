//! How many replicas share the limits a platform team configures once: one
//! without shards, the live members with them. A limit that holds across
//! calls on each replica (a grant's outbound concurrency) takes its share
//! from it, so that N shards never hold N times what was granted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The live replicas, as the membership last counted them; shared by
/// every limit it divides.
#[derive(Debug, Clone)]
pub struct Replicas(Arc<AtomicUsize>);

impl Default for Replicas {
    /// One replica: alone, each limit is whole.
    fn default() -> Self {
        Self(Arc::new(AtomicUsize::new(1)))
    }
}

impl Replicas {
    /// `count` replicas share the limits from now on (at least one).
    pub fn set(&self, count: usize) {
        self.0.store(count.max(1), Ordering::Relaxed);
    }

    /// This replica's share of `limit`: the limit divided among the
    /// replicas, rounded down, and at least one, so that together they
    /// hold at most the limit (or one each, where it is below their number).
    #[must_use]
    pub fn share(&self, limit: usize) -> usize {
        (limit / self.0.load(Ordering::Relaxed).max(1)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_together_stay_within_the_limit_and_none_is_empty() {
        let replicas = Replicas::default();
        assert_eq!(replicas.share(8), 8, "alone, the whole limit");
        replicas.set(3);
        assert_eq!(replicas.share(8), 2);
        assert!(3 * replicas.share(8) <= 8);
        assert_eq!(replicas.share(2), 1, "below the replicas' number: one each");
        replicas.set(0);
        assert_eq!(replicas.share(8), 8, "no count is one replica");
    }
}
