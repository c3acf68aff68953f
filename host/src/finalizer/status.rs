//! The DataJob's status while it is Terminating: phase `Terminating`, the
//! cleanup record, and the conditions `CleanupFailed`, `CleanupBlocked` and
//! `PolicyUnavailable`.
//!
//! Unlike a reconcile, which reports the policy's full view, these writes
//! change only what the finalizer owns: other conditions, outputs and
//! children counts stay as the last reconcile left them, so a person sees
//! where the DataJob was when it was deleted.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::machine::Keep;
use super::{CLEANUP_BLOCKED, CLEANUP_FAILED, POLICY_UNAVAILABLE, TERMINATING};
use crate::crd::{CleanupStatus, DataJob, DataJobStatus};

/// What to record.
#[derive(Debug, Clone, Copy)]
pub enum Record<'a> {
    /// A `cleanup` call that did not release the DataJob.
    Kept(&'a Keep),
    /// The policy cannot be called: why.
    PolicyUnavailable(&'a str),
}

/// The status to write for `job` after `record`, at `now`.
#[must_use]
pub fn terminating(job: &DataJob, record: Record<'_>, now: Timestamp) -> DataJobStatus {
    let mut status = job.status.clone().unwrap_or_default();
    let mut conditions = Conditions {
        list: std::mem::take(&mut status.conditions),
        now,
        generation: job.metadata.generation,
    };
    match record {
        Record::Kept(keep) => {
            status.message = Some(message(keep));
            status.cleanup = Some(CleanupStatus {
                attempts: keep.attempts,
                failures: keep.failures,
                last_error: keep
                    .failure
                    .as_ref()
                    .map(|(reason, message)| format!("{reason}: {message}")),
                last_attempt_time: Some(Time(now)),
            });
            match &keep.failure {
                Some((reason, message)) => conditions.set(CLEANUP_FAILED, true, reason, message),
                None => conditions.resolve(
                    CLEANUP_FAILED,
                    "RetryRequested",
                    "the last cleanup call asked to be called again",
                ),
            }
            match &keep.exhausted {
                Some(exhausted) => {
                    conditions.set(
                        CLEANUP_BLOCKED,
                        true,
                        exhausted.reason(),
                        &exhausted.message(),
                    );
                }
                None => conditions.resolve(
                    CLEANUP_BLOCKED,
                    "WithinBudget",
                    "the cleanup budget is not exhausted",
                ),
            }
            conditions.resolve(
                POLICY_UNAVAILABLE,
                "PolicyAvailable",
                "the policy is in service again",
            );
        }
        Record::PolicyUnavailable(why) => {
            status.message = Some(format!(
                "waiting for policy {} to run cleanup: {why}",
                job.spec.policy
            ));
            conditions.set(
                POLICY_UNAVAILABLE,
                true,
                "PolicyUnavailable",
                &format!(
                    "policy {} cannot be called ({why}); the finalizer is kept until it is in service",
                    job.spec.policy
                ),
            );
        }
    }
    status.phase = Some(TERMINATING.to_owned());
    status.conditions = conditions.list;
    status
}

fn message(keep: &Keep) -> String {
    let attempt = keep.attempts;
    let next = format!(
        "next attempt in {}s",
        keep.requeue_after.as_secs_f64().ceil()
    );
    let what = match &keep.failure {
        Some((reason, _)) => format!("cleanup attempt {attempt} failed ({reason}); {next}"),
        None => format!("cleanup in progress (attempt {attempt}); {next}"),
    };
    match &keep.exhausted {
        Some(exhausted) => format!("cleanup blocked ({}): {what}", exhausted.reason()),
        None => what,
    }
}

/// The condition list being edited: transition times are kept while a
/// condition's status does not change.
struct Conditions {
    list: Vec<Condition>,
    now: Timestamp,
    generation: Option<i64>,
}

impl Conditions {
    fn set(&mut self, kind: &str, status: bool, reason: &str, message: &str) {
        let status = if status { "True" } else { "False" };
        let condition = Condition {
            type_: kind.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: Time(self.now),
            observed_generation: self.generation,
        };
        match self.list.iter_mut().find(|c| c.type_ == kind) {
            Some(existing) => {
                let since = if existing.status == status {
                    existing.last_transition_time.clone()
                } else {
                    condition.last_transition_time.clone()
                };
                *existing = Condition {
                    last_transition_time: since,
                    ..condition
                };
            }
            None => self.list.push(condition),
        }
    }

    /// Sets `kind` false, if it is there at all: a condition that never held
    /// is not worth a line.
    fn resolve(&mut self, kind: &str, reason: &str, message: &str) {
        if self.list.iter().any(|c| c.type_ == kind) {
            self.set(kind, false, reason, message);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::crd::DataJobSpec;
    use crate::finalizer::Exhausted;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn failing(attempts: u32) -> Keep {
        Keep {
            attempts,
            failures: attempts,
            failure: Some(("PolicyFailed".into(), "bucket busy".into())),
            exhausted: None,
            newly_blocked: false,
            requeue_after: Duration::from_millis(400),
        }
    }

    fn job() -> DataJob {
        let mut job = DataJob::new(
            "j",
            DataJobSpec {
                policy: "p".into(),
                ..DataJobSpec::default()
            },
        );
        job.metadata.generation = Some(2);
        job.status = Some(DataJobStatus {
            phase: Some("Running".into()),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Reconciled".into(),
                message: String::new(),
                last_transition_time: Time(at(1)),
                observed_generation: Some(2),
            }],
            ..DataJobStatus::default()
        });
        job
    }

    #[test]
    fn a_failure_records_the_attempt_and_keeps_the_other_conditions() {
        let status = terminating(&job(), Record::Kept(&failing(1)), at(10));
        assert_eq!(status.phase.as_deref(), Some(TERMINATING));
        let cleanup = status.cleanup.as_ref().unwrap();
        assert_eq!((cleanup.attempts, cleanup.failures), (1, 1));
        assert_eq!(
            cleanup.last_error.as_deref(),
            Some("PolicyFailed: bucket busy")
        );
        assert_eq!(cleanup.last_attempt_time, Some(Time(at(10))));
        let kinds: Vec<(&str, &str)> = status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(kinds, [("Ready", "True"), (CLEANUP_FAILED, "True")]);
        assert_eq!(
            status.message.as_deref(),
            Some("cleanup attempt 1 failed (PolicyFailed); next attempt in 1s")
        );
    }

    #[test]
    fn a_repeated_failure_keeps_the_transition_time_and_a_retry_resolves_it() {
        let mut job = job();
        job.status = Some(terminating(&job, Record::Kept(&failing(1)), at(10)));
        let again = terminating(&job, Record::Kept(&failing(2)), at(20));
        let failed = again
            .conditions
            .iter()
            .find(|c| c.type_ == CLEANUP_FAILED)
            .unwrap();
        assert_eq!(failed.last_transition_time, Time(at(10)));
        job.status = Some(again);
        let retry = Keep {
            failure: None,
            ..failing(3)
        };
        let resolved = terminating(&job, Record::Kept(&retry), at(30));
        let failed = resolved
            .conditions
            .iter()
            .find(|c| c.type_ == CLEANUP_FAILED)
            .unwrap();
        assert_eq!(
            (failed.status.as_str(), failed.reason.as_str()),
            ("False", "RetryRequested")
        );
        assert_eq!(failed.last_transition_time, Time(at(30)));
        assert_eq!(resolved.cleanup.unwrap().last_error, None);
    }

    #[test]
    fn an_exhausted_budget_sets_cleanup_blocked_with_its_reason() {
        let keep = Keep {
            exhausted: Some(Exhausted::Attempts {
                failures: 3,
                max: 3,
            }),
            newly_blocked: true,
            ..failing(3)
        };
        let status = terminating(&job(), Record::Kept(&keep), at(10));
        let blocked = status
            .conditions
            .iter()
            .find(|c| c.type_ == CLEANUP_BLOCKED)
            .unwrap();
        assert_eq!(
            (blocked.status.as_str(), blocked.reason.as_str()),
            ("True", "MaxAttemptsExceeded")
        );
        assert!(
            status
                .message
                .unwrap()
                .starts_with("cleanup blocked (MaxAttemptsExceeded)")
        );
    }

    #[test]
    fn a_missing_policy_is_a_condition_and_the_cleanup_record_stays() {
        let mut job = job();
        job.status = Some(terminating(&job, Record::Kept(&failing(2)), at(10)));
        let status = terminating(
            &job,
            Record::PolicyUnavailable("no policy of this name is loaded"),
            at(20),
        );
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == POLICY_UNAVAILABLE)
            .unwrap();
        assert_eq!(condition.status, "True");
        assert!(
            condition
                .message
                .contains("policy p cannot be called (no policy of this name is loaded)")
        );
        assert_eq!(status.cleanup.unwrap().attempts, 2);
        // Back in service: the next call resolves it.
        job.status = Some(terminating(&job, Record::PolicyUnavailable("gone"), at(20)));
        let resumed = terminating(&job, Record::Kept(&failing(3)), at(30));
        let condition = resumed
            .conditions
            .iter()
            .find(|c| c.type_ == POLICY_UNAVAILABLE)
            .unwrap();
        assert_eq!(condition.status, "False");
    }
}
