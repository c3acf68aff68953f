//! Why a key was queued: what a pass answers, told in its trace.

/// Why a key was queued, the first reason since it was last handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The object itself changed (or was first listed).
    Changed,
    /// One of the objects it owns changed ([`WorkQueue::add_coalesced`]).
    ///
    /// [`WorkQueue::add_coalesced`]: super::WorkQueue::add_coalesced
    ChildChanged,
    /// What decides its work changed: the version of its policy.
    PolicyChanged,
    /// Its last pass asked to come back after a delay.
    Requeued,
    /// Its last pass failed: backed off.
    Retried,
    /// Everything was queued again: leadership taken, a shard's buckets
    /// granted.
    Resynced,
}

impl Cause {
    /// The cause as a trace attribute shows it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::ChildChanged => "child-changed",
            Self::PolicyChanged => "policy-changed",
            Self::Requeued => "requeued",
            Self::Retried => "retried",
            Self::Resynced => "resynced",
        }
    }
}
