//! The states of a DataJob's finalizer and the decisions between them.
//!
//! Everything here is a pure function of what the host observed (the DataJob
//! from the cache, whether `cleanup` already returned `done` for its uid in
//! this process, whether its policy is in service, the time): no I/O, so each
//! transition is tested on its own and the whole machine against a model of
//! the API server (`model.rs`).
//!
//! ```text
//!                 ┌──────────────┐ add finalizer ┌────────┐
//!   created ────▶ │ Unfinalized  │──────────────▶│ Active │──reconcile──┐
//!                 └──────────────┘               └───┬────┘◀───────────┘
//!                        │ deleted                    │ deleted
//!                        ▼                            ▼
//!                 ┌──────────────┐              ┌─────────────┐ retry-after / failure
//!                 │   Released   │◀─────────────│ Terminating │◀──────┐ (record, back off;
//!                 └──────────────┘   remove     └──┬───┬───┬──┘───────┘  budget → blocked)
//!                        ▲        (precondition)   │   │   │ policy missing
//!                        │                         │   │   └──▶ PolicyUnavailable (await)
//!                        │      ┌─────────┐  done  │   │ annotation
//!                        ├──────│ Cleaned │◀───────┘   ▼
//!                        │      └─────────┘       ForceRelease (Event, audit)
//!                        └────────────────────────────┘
//! ```
//!
//! Terminating waits out what the last recorded call earned before it calls
//! `cleanup` again ([`Observed::wait_left`]): the backoff of its failures, or
//! the floor on `retry-after`. The wait is read from `status.cleanup`, so a
//! restarted (or crash-looping) operator keeps it, and a change that queues
//! the DataJob early does not shorten it.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{CLEANUP_BLOCKED, CLEANUP_FAILED, POLICY_UNAVAILABLE};
use crate::crd::{CleanupSpec, DataJob};
use crate::queue::Backoff;
use crate::vocabulary::{FINALIZER, FORCE_RELEASE_ANNOTATION};

/// How hard the host tries before it reports a DataJob's cleanup blocked.
/// The host's defaults (flags) apply where `spec.cleanup` says nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Failed `cleanup` calls before the DataJob is reported blocked.
    pub max_attempts: u32,
    /// Time since deletion was requested before it is reported blocked.
    pub timeout: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            timeout: Duration::from_secs(3600),
        }
    }
}

impl Budget {
    /// This budget with a DataJob's own `spec.cleanup` settings applied.
    #[must_use]
    pub fn with_spec(self, spec: Option<&CleanupSpec>) -> Self {
        let Some(spec) = spec else { return self };
        Self {
            max_attempts: spec.max_attempts.unwrap_or(self.max_attempts),
            timeout: spec
                .timeout_seconds
                .map_or(self.timeout, Duration::from_secs),
        }
    }
}

/// How far apart the host spaces the `cleanup` calls of one DataJob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Backoff of failed calls, by recorded failures; its `max` is the pace
    /// of a blocked DataJob.
    pub backoff: Backoff,
    /// The shortest time between two calls: the floor on a `retry-after`
    /// answer (a policy asking for 0 ms gets this) and on a failure's backoff.
    pub min_retry: Duration,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            min_retry: Duration::from_secs(1),
        }
    }
}

impl Pacing {
    /// The wait before the next call after one whose answer asked for
    /// `wanted` (a `retry-after`, or a failure's backoff), once the budget is
    /// `exhausted` or not.
    #[must_use]
    pub fn wait(&self, wanted: Duration, exhausted: bool) -> Duration {
        let floored = wanted.max(self.min_retry);
        if exhausted {
            floored.max(self.backoff.max)
        } else {
            floored
        }
    }
}

/// What the machine decides on, read from a DataJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.deletionTimestamp`: deletion was requested.
    pub deletion: Option<Timestamp>,
    /// [`FINALIZER`] is in `metadata.finalizers`.
    pub finalizer: bool,
    /// [`FORCE_RELEASE_ANNOTATION`] is `"true"`.
    pub force_release: bool,
    /// `status.cleanup.attempts`: recorded `cleanup` calls.
    pub attempts: u32,
    /// `status.cleanup.failures`: how many of them failed.
    pub failures: u32,
    /// `status.cleanup.lastAttemptTime`: when the last recorded call ran.
    pub last_attempt: Option<Timestamp>,
    /// The condition [`CLEANUP_FAILED`] is true: the last recorded call failed.
    pub last_failed: bool,
    /// The condition [`CLEANUP_BLOCKED`] is true.
    pub blocked: bool,
    /// The condition [`POLICY_UNAVAILABLE`] is true.
    pub policy_unavailable: bool,
    /// The DataJob's budget: the host's defaults overridden by `spec.cleanup`.
    pub budget: Budget,
}

impl Observed {
    /// Reads `job`, with the host's default budget `defaults`.
    #[must_use]
    pub fn of(job: &DataJob, defaults: Budget) -> Self {
        let status = job.status.as_ref();
        let cleanup = status.and_then(|s| s.cleanup.as_ref());
        let condition = |kind: &str| {
            status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == kind && c.status == "True")
            })
        };
        Self {
            uid: job.uid().unwrap_or_default(),
            deletion: job.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            finalizer: has_finalizer(job),
            force_release: job
                .annotations()
                .get(FORCE_RELEASE_ANNOTATION)
                .is_some_and(|v| v == "true"),
            attempts: cleanup.map_or(0, |c| c.attempts),
            failures: cleanup.map_or(0, |c| c.failures),
            last_attempt: cleanup
                .and_then(|c| c.last_attempt_time.as_ref())
                .map(|t| t.0),
            last_failed: condition(CLEANUP_FAILED),
            blocked: condition(CLEANUP_BLOCKED),
            policy_unavailable: condition(POLICY_UNAVAILABLE),
            budget: defaults.with_spec(job.spec.cleanup.as_ref()),
        }
    }

    /// How long ago deletion was requested (zero if it was not, or if the
    /// clocks disagree).
    #[must_use]
    pub fn deletion_age(&self, now: Timestamp) -> Duration {
        self.deletion.map_or(Duration::ZERO, |since| {
            let ms = now.as_millisecond().saturating_sub(since.as_millisecond());
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        })
    }

    /// How much of the wait the last recorded `cleanup` call earned is left
    /// at `now`: the backoff of its failures (the longest once blocked) or,
    /// after a `retry-after`, the floor `pacing.min_retry` (status does not
    /// keep the delay asked for; the floor is what a restart can promise).
    /// Zero when nothing was recorded. Never more than the whole wait, so a
    /// `lastAttemptTime` in the future (a clock ahead, a hand edit) cannot
    /// hold cleanup back longer than one wait.
    #[must_use]
    pub fn wait_left(&self, now: Timestamp, pacing: &Pacing) -> Duration {
        let Some(last) = self.last_attempt else {
            return Duration::ZERO;
        };
        let earned = if self.last_failed {
            pacing.backoff.delay(self.failures)
        } else {
            Duration::ZERO
        };
        let wait = pacing.wait(earned, self.blocked);
        let since = now.as_millisecond().saturating_sub(last.as_millisecond());
        let since = Duration::from_millis(u64::try_from(since).unwrap_or(0));
        wait.saturating_sub(since)
    }

    /// The budget exhausted after `failures` failed calls at `now`, if it is.
    #[must_use]
    pub fn exhausted(&self, failures: u32, now: Timestamp) -> Option<Exhausted> {
        if failures >= self.budget.max_attempts {
            return Some(Exhausted::Attempts {
                failures,
                max: self.budget.max_attempts,
            });
        }
        let elapsed = self.deletion_age(now);
        (self.deletion.is_some() && elapsed >= self.budget.timeout).then_some(Exhausted::Timeout {
            elapsed,
            limit: self.budget.timeout,
        })
    }
}

/// True when [`FINALIZER`] is in the DataJob's finalizers.
#[must_use]
pub fn has_finalizer(job: &DataJob) -> bool {
    job.finalizers().iter().any(|f| f == FINALIZER)
}

/// What this process remembers of a DataJob's finalizer (for its current
/// uid); a restart forgets it, which is always safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recall {
    /// Nothing.
    #[default]
    Nothing,
    /// `cleanup` returned `done`; the removal has not gone through yet.
    Cleaned,
    /// The removal went through; the cache has not shown it yet.
    Released,
}

/// Where a DataJob's finalizer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not being deleted, and the finalizer is missing: it must be added
    /// before any side effect.
    Unfinalized,
    /// Not being deleted, finalizer present: reconcile as usual.
    Active,
    /// Being deleted, and the finalizer is not on it (it was removed, or
    /// never added because the DataJob was deleted first): nothing to do.
    Released,
    /// Being deleted, and this process removed the finalizer; the cache
    /// still shows the version before.
    Removed,
    /// Being deleted, and a person asked for release without cleanup.
    ForceRelease,
    /// Being deleted, and `cleanup` returned `done` for this uid in this
    /// process: only the finalizer's removal is left.
    Cleaned,
    /// Being deleted, finalizer held: `cleanup` must run.
    Terminating,
}

impl State {
    /// The state of `observed`, given what this process remembers of it.
    /// A `done` answer wins over the force-release annotation: a DataJob
    /// whose cleanup succeeded is released as usual.
    #[must_use]
    pub fn of(observed: &Observed, recall: Recall) -> Self {
        match (observed.deletion.is_some(), observed.finalizer, recall) {
            (false, false, _) => Self::Unfinalized,
            (false, true, _) => Self::Active,
            (true, false, _) => Self::Released,
            (true, true, Recall::Released) => Self::Removed,
            (true, true, Recall::Cleaned) => Self::Cleaned,
            (true, true, Recall::Nothing) if observed.force_release => Self::ForceRelease,
            (true, true, Recall::Nothing) => Self::Terminating,
        }
    }
}

/// Whether the DataJob's policy can be called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// A version is in service.
    Available,
    /// None is: why.
    Unavailable(String),
}

/// What the host does next for a DataJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Add the finalizer, and nothing else this reconcile.
    AddFinalizer,
    /// Reconcile through the policy as usual.
    Reconcile,
    /// Nothing: the DataJob is not (or no longer) the host's to hold; forget it.
    Nothing,
    /// Nothing until the watch shows the removal that went through.
    AwaitRelease,
    /// Remove the finalizer without cleanup: warning Event and audit log first.
    ForceRelease,
    /// Remove the finalizer (with a precondition).
    RemoveFinalizer,
    /// Keep the finalizer and report the missing policy; wait for it.
    ReportPolicyUnavailable {
        /// Why the policy cannot be called.
        message: String,
        /// True when the condition is new (a warning Event is due).
        newly: bool,
    },
    /// Call `cleanup`, telling it this attempt number.
    CallCleanup {
        /// Recorded attempts + 1.
        attempt: u32,
    },
    /// Not yet: the last recorded `cleanup` call earned a wait that is not
    /// over. Look again after this long.
    AwaitBackoff {
        /// What is left of the wait.
        left: Duration,
    },
}

impl Action {
    /// The action as the finalizer step's span names it.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::AddFinalizer => "add-finalizer",
            Self::Reconcile => "reconcile",
            Self::Nothing => "nothing",
            Self::AwaitRelease => "await-release",
            Self::ForceRelease => "force-release",
            Self::RemoveFinalizer => "release",
            Self::ReportPolicyUnavailable { .. } => "report-policy-unavailable",
            Self::CallCleanup { .. } => "cleanup",
            Self::AwaitBackoff { .. } => "await-backoff",
        }
    }
}

/// The decision for a DataJob in `observed` state at `now`.
#[must_use]
pub fn decide(
    observed: &Observed,
    recall: Recall,
    policy: &Availability,
    now: Timestamp,
    pacing: &Pacing,
) -> Action {
    match State::of(observed, recall) {
        State::Unfinalized => Action::AddFinalizer,
        State::Active => Action::Reconcile,
        State::Released => Action::Nothing,
        State::Removed => Action::AwaitRelease,
        State::ForceRelease => Action::ForceRelease,
        State::Cleaned => Action::RemoveFinalizer,
        State::Terminating => match policy {
            Availability::Unavailable(message) => Action::ReportPolicyUnavailable {
                message: message.clone(),
                newly: !observed.policy_unavailable,
            },
            Availability::Available => match observed.wait_left(now, pacing) {
                Duration::ZERO => Action::CallCleanup {
                    attempt: observed.attempts.saturating_add(1),
                },
                left => Action::AwaitBackoff { left },
            },
        },
    }
}

/// What one `cleanup` call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Cleanup is complete.
    Done,
    /// Call again after this long.
    RetryAfter(Duration),
    /// The call failed: a policy error or a guest fault.
    Failed {
        /// One-word reason, e.g. `PolicyFailed`, `Trap`, `OutOfFuel`.
        reason: String,
        /// What went wrong, with its causes.
        message: String,
    },
}

/// Why a DataJob's cleanup budget is exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// Too many failed calls.
    Attempts {
        /// Failed calls so far.
        failures: u32,
        /// The budget.
        max: u32,
    },
    /// Deletion was requested too long ago.
    Timeout {
        /// Since deletion was requested.
        elapsed: Duration,
        /// The budget.
        limit: Duration,
    },
}

impl Exhausted {
    /// The condition reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Attempts { .. } => "MaxAttemptsExceeded",
            Self::Timeout { .. } => "TimeoutExceeded",
        }
    }

    /// A sentence for the condition and the Event: what happened and what a
    /// person can do.
    #[must_use]
    pub fn message(&self) -> String {
        let what = match self {
            Self::Attempts { failures, max } => format!(
                "cleanup failed {failures} times (budget: {max} failed attempts, spec.cleanup.maxAttempts)"
            ),
            Self::Timeout { elapsed, limit } => format!(
                "cleanup has not succeeded {}s after deletion was requested (budget: {}s, spec.cleanup.timeoutSeconds)",
                elapsed.as_secs(),
                limit.as_secs()
            ),
        };
        format!(
            "{what}; the finalizer {FINALIZER} is kept and cleanup is retried at the longest backoff. \
             Fix the cause (see status.cleanup.lastError), or release without cleanup with the \
             annotation {FORCE_RELEASE_ANNOTATION}=true"
        )
    }
}

/// What to record when the finalizer stays after a `cleanup` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keep {
    /// `status.cleanup.attempts` from now on.
    pub attempts: u32,
    /// `status.cleanup.failures` from now on.
    pub failures: u32,
    /// This call's failure (reason, message), if it failed.
    pub failure: Option<(String, String)>,
    /// The budget, if it is exhausted.
    pub exhausted: Option<Exhausted>,
    /// True when the budget is newly exhausted (a warning Event is due).
    pub newly_blocked: bool,
    /// When to call `cleanup` again.
    pub requeue_after: Duration,
}

/// The decision after a `cleanup` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// `done`: remove the finalizer.
    Release,
    /// Keep it; record this, call again later.
    Keep(Keep),
}

/// The decision after `cleanup` attempt `attempt` of `observed` returned
/// `outcome` at `now`. Failures back off exponentially with the recorded
/// failures; a `retry-after` waits what it asked for, at least
/// `pacing.min_retry`; once the budget is exhausted every retry waits the
/// longest backoff. The time budget counts from the deletion request, so
/// every kind of answer spends it: a policy that keeps answering
/// `retry-after` is blocked when it runs out, as one that keeps failing is.
#[must_use]
pub fn after_cleanup(
    observed: &Observed,
    attempt: u32,
    outcome: &Outcome,
    now: Timestamp,
    pacing: &Pacing,
) -> After {
    let (failures, failure, wanted) = match outcome {
        Outcome::Done => return After::Release,
        Outcome::RetryAfter(delay) => (observed.failures, None, *delay),
        Outcome::Failed { reason, message } => {
            let failures = observed.failures.saturating_add(1);
            (
                failures,
                Some((reason.clone(), message.clone())),
                pacing.backoff.delay(failures),
            )
        }
    };
    let exhausted = observed.exhausted(failures, now);
    let requeue_after = pacing.wait(wanted, exhausted.is_some());
    After::Keep(Keep {
        attempts: attempt.max(observed.attempts),
        failures,
        failure,
        newly_blocked: exhausted.is_some() && !observed.blocked,
        exhausted,
        requeue_after,
    })
}

/// Where a Terminating DataJob that still holds the finalizer stands, as
/// its status shows it: the `state` label of `policyhost_pending_finalizers`
/// and what `policyhost status` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pending {
    /// Cleanup runs (or has not run yet) and has not failed last time.
    Cleaning,
    /// The last cleanup call failed; retried with backoff.
    Failing,
    /// The budget is exhausted: a person must act.
    Blocked,
    /// The policy has no version in service.
    PolicyUnavailable,
}

impl Pending {
    /// The state of `job`, if it is Terminating and holds the finalizer.
    #[must_use]
    pub fn of(job: &DataJob) -> Option<Self> {
        if job.metadata.deletion_timestamp.is_none() || !has_finalizer(job) {
            return None;
        }
        let conditions = job.status.as_ref().map(|s| s.conditions.as_slice());
        let holds = |kind: &str| {
            conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == kind && c.status == "True")
        };
        Some(if holds(POLICY_UNAVAILABLE) {
            Self::PolicyUnavailable
        } else if holds(CLEANUP_BLOCKED) {
            Self::Blocked
        } else if holds(CLEANUP_FAILED) {
            Self::Failing
        } else {
            Self::Cleaning
        })
    }

    /// The metric label: `cleaning`, `failing`, `blocked`, `policy-unavailable`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Cleaning => "cleaning",
            Self::Failing => "failing",
            Self::Blocked => "blocked",
            Self::PolicyUnavailable => "policy-unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::crd::{CleanupStatus, DataJobSpec, DataJobStatus};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn pacing() -> Pacing {
        Pacing {
            backoff: Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            min_retry: Duration::from_secs(1),
        }
    }

    /// The time the decision tables decide at: long after any recorded attempt.
    const NOW: i64 = 1_000;

    fn decide_now(observed: &Observed, recall: Recall, policy: &Availability) -> Action {
        decide(observed, recall, policy, at(NOW), &pacing())
    }

    /// A fixture DataJob: `job().finalized().deleted(100)...`.
    #[derive(Clone)]
    struct Fixture(DataJob);

    fn job() -> Fixture {
        let mut job = DataJob::new("j", DataJobSpec::default());
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some("uid-1".into());
        Fixture(job)
    }

    impl Fixture {
        fn finalized(mut self) -> Self {
            self.0.finalizers_mut().push(FINALIZER.to_owned());
            self
        }
        fn deleted(mut self, second: i64) -> Self {
            self.0.metadata.deletion_timestamp = Some(Time(at(second)));
            self
        }
        fn annotated(mut self, key: &str, value: &str) -> Self {
            self.0.annotations_mut().insert(key.into(), value.into());
            self
        }
        fn attempts(mut self, attempts: u32, failures: u32) -> Self {
            let status = self.0.status.get_or_insert_with(DataJobStatus::default);
            status.cleanup = Some(CleanupStatus {
                attempts,
                failures,
                ..CleanupStatus::default()
            });
            self
        }
        fn last_attempt(mut self, second: i64) -> Self {
            let status = self.0.status.get_or_insert_with(DataJobStatus::default);
            status
                .cleanup
                .get_or_insert_with(CleanupStatus::default)
                .last_attempt_time = Some(Time(at(second)));
            self
        }
        fn condition(mut self, kind: &str, status: bool) -> Self {
            let conditions = &mut self
                .0
                .status
                .get_or_insert_with(DataJobStatus::default)
                .conditions;
            conditions.push(Condition {
                type_: kind.into(),
                status: if status { "True" } else { "False" }.into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: Time(at(0)),
                observed_generation: None,
            });
            self
        }
        fn budget(mut self, max_attempts: Option<u32>, timeout_seconds: Option<u64>) -> Self {
            self.0.spec.cleanup = Some(CleanupSpec {
                max_attempts,
                timeout_seconds,
            });
            self
        }
        fn observed(&self) -> Observed {
            Observed::of(&self.0, Budget::default())
        }
    }

    const AVAILABLE: Availability = Availability::Available;

    fn failed(reason: &str) -> Outcome {
        Outcome::Failed {
            reason: reason.into(),
            message: format!("{reason} happened"),
        }
    }

    fn kept(after: After) -> Keep {
        match after {
            After::Keep(keep) => keep,
            After::Release => panic!("expected the finalizer to be kept"),
        }
    }

    // One test per transition.

    #[test]
    fn a_datajob_without_the_finalizer_gets_it_before_anything_else() {
        assert_eq!(
            decide_now(&job().observed(), Recall::Nothing, &AVAILABLE),
            Action::AddFinalizer
        );
        // Even with someone else's finalizer, or with its policy missing.
        let mut other = job();
        other.0.finalizers_mut().push("example.com/other".into());
        assert_eq!(
            decide_now(
                &other.observed(),
                Recall::Nothing,
                &Availability::Unavailable("gone".into())
            ),
            Action::AddFinalizer
        );
    }

    #[test]
    fn a_finalized_datajob_is_reconciled() {
        assert_eq!(
            decide_now(&job().finalized().observed(), Recall::Nothing, &AVAILABLE),
            Action::Reconcile
        );
    }

    #[test]
    fn a_deleted_datajob_without_the_finalizer_is_left_alone() {
        assert_eq!(
            decide_now(&job().deleted(5).observed(), Recall::Nothing, &AVAILABLE),
            Action::Nothing
        );
        // Also once the removal this process made shows in the cache.
        assert_eq!(
            decide_now(&job().deleted(5).observed(), Recall::Released, &AVAILABLE),
            Action::Nothing
        );
    }

    #[test]
    fn a_terminating_datajob_is_cleaned_up_with_the_next_attempt_number() {
        let observed = job().finalized().deleted(5).attempts(3, 2).observed();
        assert_eq!(
            decide_now(&observed, Recall::Nothing, &AVAILABLE),
            Action::CallCleanup { attempt: 4 }
        );
        let first = job().finalized().deleted(5).observed();
        assert_eq!(
            decide_now(&first, Recall::Nothing, &AVAILABLE),
            Action::CallCleanup { attempt: 1 }
        );
    }

    #[test]
    fn a_cleaned_datajob_goes_straight_to_the_removal() {
        let observed = job().finalized().deleted(5).observed();
        assert_eq!(
            decide_now(&observed, Recall::Cleaned, &AVAILABLE),
            Action::RemoveFinalizer
        );
        // Even if a person annotated it meanwhile: cleanup did succeed.
        let annotated = job()
            .finalized()
            .deleted(5)
            .annotated(FORCE_RELEASE_ANNOTATION, "true")
            .observed();
        assert_eq!(
            decide_now(&annotated, Recall::Cleaned, &AVAILABLE),
            Action::RemoveFinalizer
        );
    }

    #[test]
    fn a_removal_that_went_through_waits_for_the_cache_instead_of_repeating() {
        let stale = job()
            .finalized()
            .deleted(5)
            .annotated(FORCE_RELEASE_ANNOTATION, "true")
            .observed();
        assert_eq!(
            decide_now(&stale, Recall::Released, &AVAILABLE),
            Action::AwaitRelease
        );
        let cleaned_before = job().finalized().deleted(5).observed();
        assert_eq!(
            decide_now(&cleaned_before, Recall::Released, &AVAILABLE),
            Action::AwaitRelease
        );
    }

    #[test]
    fn the_force_release_annotation_releases_without_cleanup() {
        let observed = job()
            .finalized()
            .deleted(5)
            .annotated(FORCE_RELEASE_ANNOTATION, "true")
            .observed();
        assert_eq!(
            decide_now(&observed, Recall::Nothing, &AVAILABLE),
            Action::ForceRelease
        );
        let unavailable = Availability::Unavailable("gone".into());
        assert_eq!(
            decide_now(&observed, Recall::Nothing, &unavailable),
            Action::ForceRelease
        );
    }

    #[test]
    fn only_the_value_true_forces_a_release_and_only_once_deleted() {
        for value in ["yes", "True ", "", "false"] {
            let observed = job()
                .finalized()
                .deleted(5)
                .annotated(FORCE_RELEASE_ANNOTATION, value)
                .observed();
            assert_eq!(
                decide_now(&observed, Recall::Nothing, &AVAILABLE),
                Action::CallCleanup { attempt: 1 },
                "{value:?}"
            );
        }
        let active = job()
            .finalized()
            .annotated(FORCE_RELEASE_ANNOTATION, "true");
        assert_eq!(
            decide_now(&active.observed(), Recall::Nothing, &AVAILABLE),
            Action::Reconcile
        );
    }

    #[test]
    fn a_missing_policy_keeps_the_finalizer_and_is_reported_once() {
        let unavailable = Availability::Unavailable("no policy of this name is loaded".into());
        let observed = job().finalized().deleted(5).observed();
        assert_eq!(
            decide_now(&observed, Recall::Nothing, &unavailable),
            Action::ReportPolicyUnavailable {
                message: "no policy of this name is loaded".into(),
                newly: true
            }
        );
        let reported = job()
            .finalized()
            .deleted(5)
            .condition(POLICY_UNAVAILABLE, true)
            .observed();
        assert!(matches!(
            decide_now(&reported, Recall::Nothing, &unavailable),
            Action::ReportPolicyUnavailable { newly: false, .. }
        ));
        // It returns: cleanup resumes.
        assert_eq!(
            decide_now(&reported, Recall::Nothing, &AVAILABLE),
            Action::CallCleanup { attempt: 1 }
        );
    }

    #[test]
    fn done_releases() {
        let observed = job().finalized().deleted(5).attempts(7, 7).observed();
        assert_eq!(
            after_cleanup(&observed, 8, &Outcome::Done, at(10), &pacing()),
            After::Release
        );
    }

    #[test]
    fn retry_after_records_the_attempt_and_requeues_when_asked() {
        let observed = job().finalized().deleted(5).attempts(1, 0).observed();
        let keep = kept(after_cleanup(
            &observed,
            2,
            &Outcome::RetryAfter(Duration::from_millis(2000)),
            at(10),
            &pacing(),
        ));
        assert_eq!(
            keep,
            Keep {
                attempts: 2,
                failures: 0,
                failure: None,
                exhausted: None,
                newly_blocked: false,
                requeue_after: Duration::from_millis(2000),
            }
        );
    }

    #[test]
    fn a_failure_is_recorded_and_backs_off_exponentially() {
        let delays: Vec<u64> = (0..4)
            .map(|failures| {
                let observed = job()
                    .finalized()
                    .deleted(5)
                    .attempts(failures, failures)
                    .observed();
                let keep = kept(after_cleanup(
                    &observed,
                    failures + 1,
                    &failed("Trap"),
                    at(10),
                    &pacing(),
                ));
                assert_eq!(keep.failures, failures + 1);
                assert_eq!(keep.attempts, failures + 1);
                assert_eq!(keep.failure, Some(("Trap".into(), "Trap happened".into())));
                keep.requeue_after.as_secs()
            })
            .collect();
        assert_eq!(delays, [1, 2, 4, 8]);
    }

    #[test]
    fn the_last_failure_within_the_budget_blocks_and_retries_at_the_longest_backoff() {
        let observed = job()
            .finalized()
            .deleted(5)
            .attempts(2, 2)
            .budget(Some(3), None)
            .observed();
        let keep = kept(after_cleanup(
            &observed,
            3,
            &failed("OutOfFuel"),
            at(10),
            &pacing(),
        ));
        assert_eq!(
            keep.exhausted,
            Some(Exhausted::Attempts {
                failures: 3,
                max: 3
            })
        );
        assert!(keep.newly_blocked);
        assert_eq!(keep.requeue_after, pacing().backoff.max);
        // Already blocked: no second Event, still the longest backoff.
        let blocked = job()
            .finalized()
            .deleted(5)
            .attempts(3, 3)
            .budget(Some(3), None)
            .condition(CLEANUP_BLOCKED, true)
            .observed();
        let keep = kept(after_cleanup(
            &blocked,
            4,
            &failed("OutOfFuel"),
            at(10),
            &pacing(),
        ));
        assert!(!keep.newly_blocked);
        assert!(keep.exhausted.is_some());
        assert_eq!(keep.requeue_after, pacing().backoff.max);
    }

    #[test]
    fn the_timeout_blocks_even_a_policy_that_keeps_asking_to_wait() {
        let observed = job()
            .finalized()
            .deleted(100)
            .budget(None, Some(30))
            .observed();
        let wait = Outcome::RetryAfter(Duration::from_secs(2));
        let early = kept(after_cleanup(&observed, 1, &wait, at(129), &pacing()));
        assert_eq!(early.exhausted, None);
        assert_eq!(early.requeue_after, Duration::from_secs(2));
        let late = kept(after_cleanup(&observed, 1, &wait, at(130), &pacing()));
        assert_eq!(
            late.exhausted,
            Some(Exhausted::Timeout {
                elapsed: Duration::from_secs(30),
                limit: Duration::from_secs(30)
            })
        );
        assert_eq!(late.requeue_after, pacing().backoff.max);
    }

    #[test]
    fn done_releases_even_after_the_budget_is_exhausted() {
        let observed = job()
            .finalized()
            .deleted(5)
            .attempts(20, 20)
            .condition(CLEANUP_BLOCKED, true)
            .observed();
        assert_eq!(
            after_cleanup(&observed, 21, &Outcome::Done, at(100_000), &pacing()),
            After::Release
        );
    }

    #[test]
    fn a_raised_budget_unblocks() {
        let observed = job()
            .finalized()
            .deleted(5)
            .attempts(3, 3)
            .budget(Some(10), None)
            .condition(CLEANUP_BLOCKED, true)
            .observed();
        let keep = kept(after_cleanup(
            &observed,
            4,
            &failed("Trap"),
            at(10),
            &pacing(),
        ));
        assert_eq!(keep.exhausted, None);
        assert_eq!(keep.requeue_after, Duration::from_secs(8));
    }

    #[test]
    fn the_spec_budget_overrides_the_host_defaults_field_by_field() {
        let defaults = Budget {
            max_attempts: 4,
            timeout: Duration::from_secs(50),
        };
        let spec = CleanupSpec {
            max_attempts: Some(9),
            timeout_seconds: None,
        };
        assert_eq!(
            defaults.with_spec(Some(&spec)),
            Budget {
                max_attempts: 9,
                timeout: Duration::from_secs(50)
            }
        );
        assert_eq!(defaults.with_spec(None), defaults);
    }

    #[test]
    fn the_pending_state_follows_the_conditions() {
        let terminating = job().finalized().deleted(5);
        assert_eq!(Pending::of(&terminating.0), Some(Pending::Cleaning));
        let failing = terminating.clone().condition(CLEANUP_FAILED, true);
        assert_eq!(Pending::of(&failing.0), Some(Pending::Failing));
        let blocked = failing.clone().condition(CLEANUP_BLOCKED, true);
        assert_eq!(Pending::of(&blocked.0), Some(Pending::Blocked));
        let unavailable = blocked.condition(POLICY_UNAVAILABLE, true);
        assert_eq!(
            Pending::of(&unavailable.0),
            Some(Pending::PolicyUnavailable)
        );
        let recovered = terminating.condition(CLEANUP_FAILED, false);
        assert_eq!(Pending::of(&recovered.0), Some(Pending::Cleaning));
        assert_eq!(Pending::of(&job().finalized().0), None, "not deleted");
        assert_eq!(Pending::of(&job().deleted(5).0), None, "released");
    }

    #[test]
    fn exhausted_messages_say_what_happened_and_what_to_do() {
        let attempts = Exhausted::Attempts {
            failures: 5,
            max: 5,
        }
        .message();
        assert!(
            attempts.starts_with("cleanup failed 5 times (budget: 5 failed attempts"),
            "{attempts}"
        );
        assert!(
            attempts.contains("policyhost.dev/force-release=true"),
            "{attempts}"
        );
        let timeout = Exhausted::Timeout {
            elapsed: Duration::from_secs(90),
            limit: Duration::from_secs(60),
        }
        .message();
        assert!(
            timeout.contains("90s after deletion was requested (budget: 60s"),
            "{timeout}"
        );
    }

    #[test]
    fn a_restarted_host_waits_out_the_backoff_the_recorded_failures_earned() {
        // Three recorded failures, the last at second 100: backoff(3) = 4 s.
        // The status is all a restarted host knows, and all it needs.
        let failing = job()
            .finalized()
            .deleted(5)
            .attempts(3, 3)
            .last_attempt(100)
            .condition(CLEANUP_FAILED, true)
            .observed();
        let table = [
            (
                100,
                Action::AwaitBackoff {
                    left: Duration::from_secs(4),
                },
            ),
            (
                101,
                Action::AwaitBackoff {
                    left: Duration::from_secs(3),
                },
            ),
            (
                103,
                Action::AwaitBackoff {
                    left: Duration::from_secs(1),
                },
            ),
            (104, Action::CallCleanup { attempt: 4 }),
            (500, Action::CallCleanup { attempt: 4 }),
        ];
        for (second, expected) in table {
            assert_eq!(
                decide(&failing, Recall::Nothing, &AVAILABLE, at(second), &pacing()),
                expected,
                "at second {second}"
            );
        }
    }

    #[test]
    fn a_blocked_cleanup_waits_the_longest_backoff_across_restarts() {
        let blocked = job()
            .finalized()
            .deleted(5)
            .attempts(10, 10)
            .last_attempt(100)
            .condition(CLEANUP_FAILED, true)
            .condition(CLEANUP_BLOCKED, true)
            .observed();
        assert_eq!(
            decide(&blocked, Recall::Nothing, &AVAILABLE, at(150), &pacing()),
            Action::AwaitBackoff {
                left: Duration::from_secs(10)
            }
        );
        assert_eq!(
            decide(&blocked, Recall::Nothing, &AVAILABLE, at(160), &pacing()),
            Action::CallCleanup { attempt: 11 }
        );
    }

    #[test]
    fn after_a_retry_after_a_restarted_host_waits_at_least_the_floor() {
        let retrying = job()
            .finalized()
            .deleted(5)
            .attempts(2, 0)
            .last_attempt(100)
            .condition(CLEANUP_FAILED, false)
            .observed();
        assert_eq!(
            decide(&retrying, Recall::Nothing, &AVAILABLE, at(100), &pacing()),
            Action::AwaitBackoff {
                left: Duration::from_secs(1)
            }
        );
        assert_eq!(
            decide(&retrying, Recall::Nothing, &AVAILABLE, at(101), &pacing()),
            Action::CallCleanup { attempt: 3 }
        );
    }

    #[test]
    fn a_last_attempt_in_the_future_holds_cleanup_back_one_wait_at_most() {
        let skewed = job()
            .finalized()
            .deleted(5)
            .attempts(3, 3)
            .last_attempt(10_000)
            .condition(CLEANUP_FAILED, true)
            .observed();
        assert_eq!(
            decide(&skewed, Recall::Nothing, &AVAILABLE, at(100), &pacing()),
            Action::AwaitBackoff {
                left: Duration::from_secs(4)
            }
        );
    }

    #[test]
    fn the_wait_never_applies_to_a_release_or_a_force_release() {
        let waiting = job()
            .finalized()
            .deleted(5)
            .attempts(3, 3)
            .last_attempt(100)
            .condition(CLEANUP_FAILED, true);
        assert_eq!(
            decide(
                &waiting.observed(),
                Recall::Cleaned,
                &AVAILABLE,
                at(100),
                &pacing()
            ),
            Action::RemoveFinalizer
        );
        let annotated = waiting
            .annotated(FORCE_RELEASE_ANNOTATION, "true")
            .observed();
        assert_eq!(
            decide(&annotated, Recall::Nothing, &AVAILABLE, at(100), &pacing()),
            Action::ForceRelease
        );
    }

    #[test]
    fn a_zero_retry_after_and_a_short_failure_backoff_wait_the_floor() {
        let observed = job().finalized().deleted(5).observed();
        let fast = Pacing {
            backoff: Backoff {
                base: Duration::from_millis(50),
                max: Duration::from_secs(60),
            },
            min_retry: Duration::from_secs(1),
        };
        let zero = Outcome::RetryAfter(Duration::ZERO);
        let keep = kept(after_cleanup(&observed, 1, &zero, at(10), &fast));
        assert_eq!(keep.requeue_after, Duration::from_secs(1));
        let keep = kept(after_cleanup(&observed, 1, &failed("Trap"), at(10), &fast));
        assert_eq!(keep.requeue_after, Duration::from_secs(1));
        // What a policy asks above the floor, it gets.
        let long = Outcome::RetryAfter(Duration::from_secs(7));
        let keep = kept(after_cleanup(&observed, 1, &long, at(10), &fast));
        assert_eq!(keep.requeue_after, Duration::from_secs(7));
    }

    #[test]
    fn retries_spend_the_time_budget_so_a_policy_answering_zero_forever_is_blocked() {
        let observed = job()
            .finalized()
            .deleted(100)
            .attempts(5_000, 0)
            .budget(None, Some(60))
            .observed();
        let zero = Outcome::RetryAfter(Duration::ZERO);
        let keep = kept(after_cleanup(&observed, 5_001, &zero, at(160), &pacing()));
        assert_eq!(keep.attempts, 5_001);
        assert!(matches!(keep.exhausted, Some(Exhausted::Timeout { .. })));
        assert!(keep.newly_blocked);
        assert_eq!(keep.requeue_after, pacing().backoff.max);
    }
}
