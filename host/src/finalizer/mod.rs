//! The finalizer state machine: a DataJob's promise that its policy's
//! `cleanup` succeeds before the DataJob (and, by garbage collection, its
//! children) goes.
//!
//! Lesson two of the design: a finalizer is a promise. This module holds the
//! decisions only — pure functions from what the host observed to what it
//! must do — so that every transition is table-tested and the invariant is
//! property-tested against a model of the API server ([`machine`]). The
//! controller carries the decisions out (`controller::finalizer`).
//!
//! # Expected flow
//!
//! 1. A DataJob without the finalizer [`FINALIZER`](crate::vocabulary::FINALIZER) gets it first, with a
//!    JSON patch that tests the list it extends ([`patch::add`]). Only then
//!    are children applied: the same pass goes on with the DataJob as the
//!    patch returned it.
//! 2. Once deletion is requested, the host calls the policy's `cleanup` with
//!    `ctx.attempt` = recorded attempts + 1 and never applies children again.
//! 3. `done`: the finalizer is removed with a JSON patch that tests the
//!    DataJob's uid and the list entry it removes ([`patch::remove`]);
//!    conflicts are retried from fresh cache state.
//! 4. `retry-after`: called again then, at least the floor
//!    ([`Pacing::min_retry`], `--min-cleanup-retry`) later. A failure
//!    (policy error, trap, out of fuel, deadline): recorded in
//!    `status.cleanup`, condition [`CLEANUP_FAILED`], a warning Event,
//!    exponential backoff (never under the floor either). Every answer
//!    spends the time budget, which counts from the deletion request.
//! 5. Budget exhausted (`spec.cleanup`, host defaults): condition
//!    [`CLEANUP_BLOCKED`] and a warning Event; retries go on at the longest
//!    backoff, and the finalizer stays.
//! 6. The annotation [`FORCE_RELEASE_ANNOTATION`](crate::vocabulary::FORCE_RELEASE_ANNOTATION)`: "true"` releases the
//!    DataJob without cleanup (warning Event, audit log line).
//! 7. The policy missing or rejected: condition [`POLICY_UNAVAILABLE`]; the
//!    registry's change feed re-queues the DataJob when it returns.
//!
//! # Guarantees
//! - The finalizer is removed only after `cleanup` returned `done` for this
//!   uid in this process, or after a force-release annotation.
//! - One `done` answer, one removal: until the watch shows the release, a
//!   reconcile that still sees the old version neither calls `cleanup` nor
//!   force-releases again.
//! - Never someone else's finalizer: removal tests the entry it removes.
//! - Nothing is kept in memory that a restart needs: the attempt count lives
//!   in `status.cleanup`. A restart may call `cleanup` again, even after it
//!   returned `done` (policies must make cleanup idempotent).
//! - The backoff survives restarts: `cleanup` is called no sooner than
//!   `status.cleanup.lastAttemptTime` plus the wait that attempt earned (its
//!   failures' backoff, the longest once blocked, the floor after a
//!   `retry-after`), so a crash-looping operator does not hammer a failing
//!   cleanup, and neither does a child's change that queues the DataJob.

pub mod machine;
pub mod patch;
pub mod status;

#[cfg(test)]
mod model;

pub use machine::{
    Action, After, Availability, Budget, Exhausted, Keep, Observed, Outcome, Pacing, Pending,
    Recall, State,
};

/// The phase a DataJob shows from its first recorded cleanup call on.
pub const TERMINATING: &str = "Terminating";
/// Condition: the last `cleanup` call failed.
pub const CLEANUP_FAILED: &str = "CleanupFailed";
/// Condition: the cleanup budget is exhausted; a person must act.
pub const CLEANUP_BLOCKED: &str = "CleanupBlocked";
/// Condition: the DataJob's policy has no version in service.
pub const POLICY_UNAVAILABLE: &str = "PolicyUnavailable";
/// The conditions the finalizer owns.
pub const CONDITIONS: [&str; 3] = [CLEANUP_FAILED, CLEANUP_BLOCKED, POLICY_UNAVAILABLE];
