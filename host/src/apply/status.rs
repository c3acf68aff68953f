//! The DataJob's status: what the policy reported plus what the host knows,
//! written through the status subresource only when it changed.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::cache::{Cached as _, ChildRecord, ObjectKey};
use crate::chain::Chain;
use crate::crd::{ChildCounts, DataJob, DataJobStatus, PolicyRef};
use crate::runtime::ChildPhase;
use crate::runtime::output::ReportedCondition;
use crate::vocabulary::FIELD_MANAGER;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// The condition the host owns: did the last reconcile go through?
pub const READY: &str = "Ready";
/// The condition the host sets while `spec.suspend` is true.
pub const SUSPENDED: &str = "Suspended";
/// The `Ready=False` reason of a status the API server refused.
pub const STATUS_REJECTED: &str = "StatusRejected";

/// The longest refusal message kept in the [`STATUS_REJECTED`] condition.
const MAX_REFUSAL: usize = 512;

/// A condition before the host stamps its transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCondition {
    /// The condition type.
    pub kind: String,
    /// True or False.
    pub status: bool,
    /// One-word reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl NewCondition {
    /// A condition of the given type and outcome.
    #[must_use]
    pub fn new(kind: &str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

impl From<&ReportedCondition> for NewCondition {
    fn from(c: &ReportedCondition) -> Self {
        Self {
            kind: c.kind.clone(),
            status: c.status == "True",
            reason: c.reason.clone(),
            message: c.message.clone(),
        }
    }
}

/// The status to write after one reconcile.
#[derive(Debug, Clone, Default)]
pub struct StatusUpdate {
    /// The phase; `None` keeps the current one (or `Pending` if there is none).
    pub phase: Option<String>,
    /// The message; `None` keeps the current one.
    pub message: Option<String>,
    /// Host conditions first, then the policy's; a policy condition with a
    /// host condition's type is dropped.
    pub conditions: Vec<NewCondition>,
    /// The policy version that acted, if one did.
    pub policy: Option<PolicyRef>,
    /// The policy's outputs; `None` keeps the current ones.
    pub outputs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Builds the full status from the update, the DataJob's current status and
/// its children. Conditions keep their `lastTransitionTime` while their
/// status does not change, so an unchanged reconcile builds an identical status.
#[must_use]
pub fn build(
    job: &DataJob,
    update: StatusUpdate,
    children: &[std::sync::Arc<ChildRecord>],
    now: Timestamp,
) -> DataJobStatus {
    let current = job.status.clone().unwrap_or_default();
    let generation = job.metadata.generation;
    let mut conditions: Vec<Condition> = Vec::with_capacity(update.conditions.len());
    for new in update.conditions {
        if conditions.iter().any(|c| c.type_ == new.kind) {
            continue;
        }
        let status = if new.status { "True" } else { "False" };
        let since = current
            .conditions
            .iter()
            .find(|c| c.type_ == new.kind && c.status == status)
            .map_or(Time(now), |c| c.last_transition_time.clone());
        conditions.push(Condition {
            type_: new.kind,
            status: status.to_owned(),
            reason: new.reason,
            message: new.message,
            last_transition_time: since,
            observed_generation: generation,
        });
    }
    DataJobStatus {
        phase: update
            .phase
            .or(current.phase)
            .or_else(|| Some("Pending".to_owned())),
        message: update.message.or(current.message),
        conditions,
        observed_generation: generation,
        policy: update.policy.or(current.policy),
        children: Some(count(children)),
        cleanup: current.cleanup,
        outputs: update.outputs.or(current.outputs),
        decisions: current.decisions,
    }
}

/// What the operator's own status writes left behind: for each DataJob,
/// the resourceVersion after the last one and a fingerprint of the status
/// it wrote.
///
/// The cache can lag a write: a reconcile that starts before the write's
/// watch event arrives sees the status from before it. If the status it
/// builds equals that stale one (a policy swapped back to the version the
/// stale status names), skipping the write would leave the newer status
/// on the server, and a status-only watch event queues nothing. So a
/// status the cache shows is only taken as already written when the cached
/// copy is the one the last write produced, when the last write wrote this
/// very status (a later change of the DataJob's metadata, an annotation,
/// costs no status write), or when there was no write to lag behind.
#[derive(Debug, Default)]
pub struct Writes(Mutex<HashMap<ObjectKey, Written>>);

/// The last status write to one DataJob.
#[derive(Debug)]
struct Written {
    version: String,
    status: u64,
}

impl Writes {
    /// Whether the server has `status`, which `job`'s cached copy shows.
    fn has(&self, key: &ObjectKey, job: &DataJob, status: &DataJobStatus) -> bool {
        match self.lock().get(key) {
            None => true,
            Some(written) => {
                job.metadata.resource_version.as_ref() == Some(&written.version)
                    || written.status == fingerprint(status)
            }
        }
    }

    fn record(&self, key: ObjectKey, written: &DataJob, status: &DataJobStatus) {
        if let Some(version) = written.metadata.resource_version.clone() {
            let status = fingerprint(status);
            self.lock().insert(key, Written { version, status });
        }
    }

    /// Drops what is known about a DataJob that is gone.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// Plain map operations cannot leave it torn, so a poisoned lock is
    /// still consistent.
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, Written>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A status's fingerprint: its JSON, hashed (one process compares them).
fn fingerprint(status: &DataJobStatus) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(status)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// Writes `status` unless the DataJob already has it (per a cache that has
/// caught up with the last write); true if written.
///
/// # Errors
///
/// The API server's refusal. When it refuses the status itself (too large,
/// invalid: see [`refused`]), the small status [`fallback`] is written first,
/// so the DataJob shows why, and the error is still returned: the caller
/// retries with backoff.
pub async fn write(
    api: &Api<DataJob>,
    writes: &Writes,
    job: &DataJob,
    status: DataJobStatus,
) -> kube::Result<bool> {
    match apply(api, writes, job, &status).await {
        Err(error) if refused(&error) => {
            let fallback = fallback(status, &error);
            tracing::warn!(job = %job.key(), error = %Chain(&error), "the API server refused the status; writing a small one naming the refusal");
            apply(api, writes, job, &fallback).await?;
            Err(error)
        }
        written => written,
    }
}

async fn apply(
    api: &Api<DataJob>,
    writes: &Writes,
    job: &DataJob,
    status: &DataJobStatus,
) -> kube::Result<bool> {
    let key = job.key();
    if job.status.as_ref() == Some(status) && writes.has(&key, job, status) {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": DataJob::api_version(&()),
        "kind": DataJob::kind(&()),
        "status": status,
    });
    let written = api
        .patch_status(
            &job.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
    writes.record(key, &written, status);
    Ok(true)
}

/// True when the API server refused the status as such: a bad request
/// (400, devcluster's answer to a body over 3 MiB), too large (413, or
/// etcd's "request is too large"), or invalid (422). Retrying the same
/// status cannot help.
#[must_use]
pub fn refused(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            matches!(status.code, 400 | 413 | 422) || status.message.contains("too large")
        }
        _ => false,
    }
}

/// What to write when the server refused `status`: only what the host
/// owns, which is small and always accepted — phase, generation, policy
/// version, child counts, the cleanup record (so a Terminating DataJob keeps
/// its attempts and backoff), the bounded decision record and the
/// finalizer's conditions — with
/// `Ready=False` [`STATUS_REJECTED`] quoting the refusal. The policy's
/// message, conditions and outputs are dropped.
#[must_use]
pub fn fallback(status: DataJobStatus, error: &kube::Error) -> DataJobStatus {
    let mut why = crate::chain::display_chain(error);
    crate::runtime::output::status::truncate(&mut why, MAX_REFUSAL);
    let message = format!(
        "the API server refused the status the policy reported ({why}); its message, conditions and outputs are not recorded"
    );
    // Kept while Ready stays False, so that the same refusal writes the same
    // fallback, which is then skipped as unchanged.
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == READY && c.status == "False")
        .map_or_else(
            || Time(Timestamp::now()),
            |c| c.last_transition_time.clone(),
        );
    let mut conditions: Vec<Condition> = status
        .conditions
        .into_iter()
        .filter(|c| {
            c.type_ == SUSPENDED || crate::finalizer::CONDITIONS.contains(&c.type_.as_str())
        })
        .collect();
    conditions.insert(
        0,
        Condition {
            type_: READY.to_owned(),
            status: "False".to_owned(),
            reason: STATUS_REJECTED.to_owned(),
            message: message.clone(),
            last_transition_time: since,
            observed_generation: status.observed_generation,
        },
    );
    let mut phase = status.phase;
    if phase.as_ref().is_some_and(|p| p.len() > 63) {
        phase = None;
    }
    DataJobStatus {
        phase,
        message: Some(message),
        conditions,
        observed_generation: status.observed_generation,
        policy: status.policy,
        children: status.children,
        cleanup: status.cleanup,
        outputs: None,
        decisions: status.decisions,
    }
}

fn count(children: &[std::sync::Arc<ChildRecord>]) -> ChildCounts {
    let mut counts = ChildCounts::default();
    for record in children {
        counts.total += 1;
        match record.child.phase {
            ChildPhase::Pending | ChildPhase::Unknown => counts.pending += 1,
            ChildPhase::Running => counts.running += 1,
            ChildPhase::Succeeded => counts.succeeded += 1,
            ChildPhase::Failed => counts.failed += 1,
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::DataJobSpec;

    #[test]
    fn a_cache_behind_the_last_status_write_is_not_trusted_until_it_catches_up() {
        let writes = Writes::default();
        let at = |version: &str| {
            let mut job = job_with(None);
            job.metadata.namespace = Some("ns".into());
            job.metadata.resource_version = Some(version.into());
            job
        };
        let status = |phase: &str| DataJobStatus {
            phase: Some(phase.into()),
            ..DataJobStatus::default()
        };
        let (stale, written) = (status("Running"), status("Succeeded"));
        let key = at("1").key();
        assert!(writes.has(&key, &at("1"), &stale), "no write to lag behind");
        writes.record(key.clone(), &at("7"), &written);
        assert!(
            !writes.has(&key, &at("6"), &stale),
            "the cache predates the write, which wrote another status"
        );
        assert!(
            writes.has(&key, &at("7"), &stale),
            "the cache shows the write"
        );
        assert!(
            writes.has(&key, &at("8"), &written),
            "a later change of the DataJob: the status written is the one built"
        );
        assert!(
            !writes.has(&key, &at("8"), &stale),
            "a later change, and a status the last write did not write"
        );
        writes.forget(&key);
        assert!(writes.has(&key, &at("6"), &stale));
    }

    fn job_with(status: Option<DataJobStatus>) -> DataJob {
        let mut job = DataJob::new("j", DataJobSpec::default());
        job.metadata.generation = Some(4);
        job.status = status;
        job
    }

    fn ready(status: bool, reason: &str) -> NewCondition {
        NewCondition::new(READY, status, reason, "m")
    }

    #[test]
    fn a_refused_status_falls_back_to_what_the_host_owns_with_the_refusal_named() {
        let mut outputs = serde_json::Map::new();
        outputs.insert("blob".into(), "x".repeat(4 << 20).into());
        let big = DataJobStatus {
            phase: Some("Running".into()),
            message: Some("m".repeat(1000)),
            conditions: vec![
                condition(READY, "True", "Reconciled"),
                condition("PolicyOwn", "True", "Whatever"),
                condition(crate::finalizer::CLEANUP_FAILED, "True", "Trap"),
            ],
            observed_generation: Some(3),
            cleanup: Some(crate::crd::CleanupStatus {
                attempts: 4,
                ..crate::crd::CleanupStatus::default()
            }),
            outputs: Some(outputs),
            ..DataJobStatus::default()
        };
        let error = kube::Error::Api(
            kube::core::Status::failure("request entity too large", "RequestEntityTooLarge")
                .with_code(413)
                .boxed(),
        );
        assert!(refused(&error));
        let small = fallback(big, &error);
        let kinds: Vec<(&str, &str, &str)> = small
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("Ready", "False", STATUS_REJECTED),
                ("CleanupFailed", "True", "Trap")
            ]
        );
        assert!(
            small.conditions[0]
                .message
                .contains("request entity too large")
        );
        assert_eq!(small.outputs, None);
        assert_eq!(
            small.cleanup.as_ref().map(|c| c.attempts),
            Some(4),
            "the backoff survives"
        );
        assert_eq!(small.phase.as_deref(), Some("Running"));
        assert!(serde_json::to_string(&small).unwrap().len() < 2048);
    }

    #[test]
    fn only_refusals_of_the_status_itself_fall_back() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, "R")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(refused(&api(422, "invalid")));
        assert!(refused(&api(400, "cannot read request body")));
        assert!(refused(&api(500, "etcdserver: request is too large")));
        assert!(!refused(&api(409, "conflict")));
        assert!(!refused(&api(503, "unavailable")));
        assert!(!refused(&api(404, "not found")));
    }

    fn condition(kind: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: kind.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::from_second(1).unwrap()),
            observed_generation: None,
        }
    }

    #[test]
    fn an_unchanged_condition_keeps_its_transition_time() {
        let then = Timestamp::from_second(1_000).unwrap();
        let later = Timestamp::from_second(2_000).unwrap();
        let first = build(
            &job_with(None),
            StatusUpdate {
                conditions: vec![ready(true, "Reconciled")],
                ..StatusUpdate::default()
            },
            &[],
            then,
        );
        let job = job_with(Some(first.clone()));
        let second = build(
            &job,
            StatusUpdate {
                conditions: vec![ready(true, "Reconciled")],
                ..StatusUpdate::default()
            },
            &[],
            later,
        );
        assert_eq!(second, first, "the same reconcile builds the same status");
        let flipped = build(
            &job,
            StatusUpdate {
                conditions: vec![ready(false, "Trap")],
                ..StatusUpdate::default()
            },
            &[],
            later,
        );
        assert_eq!(flipped.conditions[0].last_transition_time, Time(later));
        assert_eq!(flipped.conditions[0].observed_generation, Some(4));
    }

    #[test]
    fn host_conditions_win_over_a_policy_condition_of_the_same_type() {
        let status = build(
            &job_with(None),
            StatusUpdate {
                conditions: vec![
                    ready(false, "Trap"),
                    ready(true, "PolicySaysSo"),
                    NewCondition::new("WorkersReady", true, "AllUp", ""),
                ],
                ..StatusUpdate::default()
            },
            &[],
            Timestamp::from_second(1).unwrap(),
        );
        let kinds: Vec<(&str, &str)> = status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(kinds, [("Ready", "Trap"), ("WorkersReady", "AllUp")]);
    }

    #[test]
    fn a_failed_reconcile_keeps_the_previous_phase_and_outputs() {
        let mut outputs = serde_json::Map::new();
        outputs.insert("running".into(), 2.into());
        let previous = DataJobStatus {
            phase: Some("Running".into()),
            outputs: Some(outputs.clone()),
            ..DataJobStatus::default()
        };
        let status = build(
            &job_with(Some(previous)),
            StatusUpdate {
                conditions: vec![ready(false, "OutOfFuel")],
                ..StatusUpdate::default()
            },
            &[],
            Timestamp::from_second(1).unwrap(),
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.outputs, Some(outputs));
        assert_eq!(status.observed_generation, Some(4));
    }
}
