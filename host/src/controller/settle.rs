//! When a pass that changed children writes the status.
//!
//! A pass computes the status from the children as it found them. When it
//! creates, updates or prunes some, that status is behind before it is
//! written, and the watch events of those very writes bring the DataJob
//! back to a pass that sees them. So a pass that changed children leaves
//! the status (and the policy's Events, which compare with the status) to
//! that next pass: a new DataJob costs one status write, not two.
//!
//! A policy that changes children in every pass (one that creates in
//! stages, or one that never settles) still gets its status written every
//! other pass: a pass defers only if the one before it did not.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::cache::ObjectKey;

/// The DataJobs whose last pass changed children and left the status to
/// the next one.
#[derive(Debug, Default)]
pub struct Settling(Mutex<HashSet<ObjectKey>>);

impl Settling {
    /// After a pass that changed the children of `key`: true if it leaves
    /// the status to the next pass, false if it must write it (the pass
    /// before it already deferred).
    pub fn defer(&self, key: &ObjectKey) -> bool {
        let mut deferred = self.lock();
        if deferred.remove(key) {
            return false;
        }
        deferred.insert(key.clone());
        true
    }

    /// After a pass that wrote the status of `key`, or of a DataJob that is
    /// gone: the next pass that changes children may defer again.
    pub fn settled(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// Plain set operations cannot leave it torn, so a poisoned lock is
    /// still consistent.
    fn lock(&self) -> MutexGuard<'_, HashSet<ObjectKey>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_that_changed_children_defers_unless_the_one_before_it_did() {
        let settling = Settling::default();
        let key = ObjectKey::namespaced("team-a", "etl");
        let other = ObjectKey::namespaced("team-a", "report");
        assert!(settling.defer(&key), "the first pass that creates defers");
        assert!(settling.defer(&other), "each DataJob on its own");
        assert!(!settling.defer(&key), "two in a row: the second writes");
        assert!(settling.defer(&key), "then the next may defer again");
        settling.settled(&key);
        assert!(settling.defer(&key), "a written status ends the deferral");
    }
}
