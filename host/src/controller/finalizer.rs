//! Carries out the finalizer state machine's decisions
//! ([`crate::finalizer::machine`]) against the cluster: `cleanup` calls,
//! finalizer patches, status, Events, metrics and the audit log.
//!
//! The only state kept in memory is which DataJobs' `cleanup` returned `done`
//! (by uid) until the cache shows them released, so that a removal that
//! conflicted is retried without calling `cleanup` again, and a reconcile
//! that still sees the old version does not call it twice. A restart forgets
//! it, and `cleanup` runs again: policies must make it idempotent.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use tracing::{Instrument as _, debug, info, warn};

use super::{Next, Shared};
use crate::apply::status as job_status;
use crate::cache::{Cached as _, Index, ObjectKey, OwnerKey};
use crate::chain::{Chain, display_chain};
use crate::crd::{DataJob, DataJobStatus, PolicyRef};
use crate::finalizer::machine::{
    self, Action, After, Availability, Budget, Observed, Outcome, Pacing, Recall,
};
use crate::finalizer::status::{self, Record};
use crate::finalizer::{CLEANUP_BLOCKED, CLEANUP_FAILED, POLICY_UNAVAILABLE, Pending, patch};
use crate::projection;
use crate::runtime::{self, Cleaned, Context, Input, Policy};
use crate::shadow;
use crate::traces;
use crate::vocabulary::FORCE_RELEASE_ANNOTATION;

/// The log target of force releases: one line per release, for audit.
pub const AUDIT_TARGET: &str = "policyhost::audit";

/// Removal attempts in one reconcile before the key goes back to the queue.
const REMOVAL_TRIES: u32 = 5;

/// The value under which the pending-finalizer index files every DataJob
/// that is Terminating and still holds the finalizer.
const PENDING: &str = "pending";

/// The finalizer's settings and memory, shared by the workers.
pub struct Finalizers {
    budget: Budget,
    pacing: Pacing,
    pending: Index<DataJob>,
    /// What this process remembers of DataJobs (by uid): `cleanup`
    /// returned `done`, or the removal went through; until the cache shows
    /// them released or gone.
    memory: Mutex<HashMap<ObjectKey, (String, Recall)>>,
}

impl Finalizers {
    /// The host's default budget, the spacing of cleanup calls (backoff of
    /// failures, floor on `retry-after`), and the DataJob index registered
    /// with [`pending_index`].
    #[must_use]
    pub fn new(budget: Budget, pacing: Pacing, pending: Index<DataJob>) -> Self {
        Self {
            budget,
            pacing,
            pending,
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// The host's default cleanup budget.
    #[must_use]
    pub fn budget(&self) -> Budget {
        self.budget
    }

    fn recall(&self, key: &ObjectKey, uid: &str) -> Recall {
        match self.memory().get(key) {
            Some((known, recall)) if known == uid => *recall,
            _ => Recall::Nothing,
        }
    }

    fn remember(&self, key: &ObjectKey, uid: &str, recall: Recall) {
        self.memory().insert(key.clone(), (uid.to_owned(), recall));
    }

    /// Forgets a DataJob (released, or gone).
    pub(crate) fn forget(&self, key: &ObjectKey) {
        self.memory().remove(key);
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, (String, Recall)>> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The index function for [`Finalizers::new`]: files Terminating DataJobs
/// that hold the finalizer, so the pending gauge never scans the cache.
#[must_use]
pub fn pending_index(job: &DataJob) -> Vec<String> {
    Pending::of(job)
        .map(|_| PENDING.to_owned())
        .into_iter()
        .collect()
}

/// What the finalizer's part of a pass leaves to the rest of it.
pub(crate) enum Step {
    /// The pass is over.
    Done(Next),
    /// Reconcile this DataJob as usual: `job` held the finalizer, or this
    /// is `job` as the patch that added it returned.
    Reconcile(Arc<DataJob>),
}

/// The finalizer's part of a reconcile of `job`.
pub(crate) async fn step(shared: &Shared, key: &ObjectKey, job: &Arc<DataJob>) -> Step {
    let finalizers = &shared.finalizers;
    let observed = Observed::of(job, finalizers.budget);
    let recall = finalizers.recall(key, &observed.uid);
    // A DataJob that may not call its policy is never cleaned up by it
    // either: the finalizer stays, as for a missing policy.
    let policy = super::access::policy(shared, job);
    let availability = match &policy {
        Ok(_) => Availability::Available,
        Err(why) => Availability::Unavailable(why.to_string()),
    };
    let decision = machine::decide(
        &observed,
        recall,
        &availability,
        Timestamp::now(),
        &finalizers.pacing,
    );
    if matches!(decision, Action::Reconcile) {
        return Step::Reconcile(Arc::clone(job));
    }
    let span = tracing::debug_span!(
        target: traces::TARGET,
        "finalizer",
        "otel.name" = format_args!("finalizer {}", decision.name()),
        action = decision.name(),
        next = tracing::field::Empty,
    );
    let step = act(shared, key, job, &observed, decision, policy)
        .instrument(span.clone())
        .await;
    let next = match &step {
        Step::Done(next) => next.name(),
        Step::Reconcile(_) => "reconcile",
    };
    span.record("next", next);
    step
}

/// Carries out `decision` for `job`.
async fn act(
    shared: &Shared,
    key: &ObjectKey,
    job: &Arc<DataJob>,
    observed: &Observed,
    decision: Action,
    policy: Result<Arc<Policy>, super::access::Denied>,
) -> Step {
    let finalizers = &shared.finalizers;
    let next = match (decision, policy) {
        // `step` reconciles instead of acting; never reached.
        (Action::Reconcile, _) => Next::AwaitChange,
        (Action::AddFinalizer, _) => return add_finalizer(shared, job).await,
        (Action::Nothing, _) => {
            finalizers.forget(key);
            Next::AwaitChange
        }
        (Action::AwaitRelease, _) => Next::AwaitChange,
        (Action::AwaitBackoff { left }, _) => {
            debug!(job = %key, ?left, "cleanup waits out the last attempt's backoff");
            Next::RequeueAfter(left)
        }
        (Action::ForceRelease, policy) => {
            force_release(shared, key, job, observed, policy.ok()).await
        }
        (Action::RemoveFinalizer, _) => release(shared, key, &observed.uid).await,
        (Action::ReportPolicyUnavailable { message, newly }, _) => {
            report_unavailable(shared, job, &message, newly).await
        }
        (Action::CallCleanup { attempt }, Ok(policy)) => {
            clean(shared, key, job, observed, policy, attempt).await
        }
        // `decide` calls cleanup only when the policy is available.
        (Action::CallCleanup { .. }, Err(_)) => Next::Retry,
    };
    Step::Done(next)
}

/// Adds the finalizer, and hands the DataJob as the patch returned it to
/// the reconcile proper, in the same pass: the watch event of this change
/// queues no second one ([`crate::watch`]).
async fn add_finalizer(shared: &Shared, job: &DataJob) -> Step {
    let api = api(shared, job);
    let patch = Patch::Json::<()>(patch::add(job));
    let next = match api
        .patch(&job.name_any(), &PatchParams::default(), &patch)
        .await
    {
        Ok(patched) => {
            debug!(job = %job.key(), "finalizer added");
            return Step::Reconcile(Arc::new(patched));
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Next::AwaitChange,
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 422 => {
            shared.metrics.finalizer_conflicts.inc();
            debug!(job = %job.key(), code = status.code, "finalizer addition raced a change; retrying");
            Next::Retry
        }
        Err(error) => {
            warn!(job = %job.key(), error = %Chain(&error), "cannot add the finalizer");
            Next::Retry
        }
    };
    Step::Done(next)
}

/// Calls `cleanup` and acts on its answer.
async fn clean(
    shared: &Shared,
    key: &ObjectKey,
    job: &DataJob,
    observed: &Observed,
    policy: Arc<Policy>,
    attempt: u32,
) -> Next {
    let acting = PolicyRef {
        name: policy.name().to_owned(),
        digest: policy.digest().to_string(),
    };
    let input = Input {
        job: projection::data_job(job),
        children: shared
            .children
            .of(&OwnerKey::new(
                key.namespace().unwrap_or_default(),
                observed.uid.as_str(),
            ))
            .iter()
            .map(|record| record.child.clone())
            .collect(),
        ctx: Context {
            now_unix_ms: u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0),
            attempt,
            policy_digest: acting.digest.clone(),
        },
    };
    let started = Instant::now();
    let mut decision = shared.decisions.start("cleanup", policy.digest(), &input);
    let version = shadow::Acting {
        digest: policy.digest(),
        pinned: super::access::pinned(shared, job),
    };
    let shadow = shared.shadow.beside(&acting.name, version, &input);
    let called = shared.runtime.cleanup(policy, input).await;
    if let Some(shadow) = shadow {
        shadow.cleanup(&called);
    }
    if let Some(decision) = &mut decision {
        decision.answered(&called);
    }
    let took = started.elapsed();
    let fault = called.result.as_ref().err().map(runtime::Error::reason);
    shared
        .metrics
        .guest_call(&acting.name, &called.report, fault);
    let outcome = match called.result {
        Ok(Cleaned::Done) => Outcome::Done,
        Ok(Cleaned::RetryAfter { retry_after_ms }) => {
            Outcome::RetryAfter(Duration::from_millis(retry_after_ms))
        }
        Err(error) => Outcome::Failed {
            reason: error.reason().to_owned(),
            message: display_chain(&error),
        },
    };
    let result = match &outcome {
        Outcome::Done => "done",
        Outcome::RetryAfter(_) => "retry",
        Outcome::Failed { reason, .. } => reason.as_str(),
    };
    shared.metrics.cleaned(&acting.name, result, took);
    if let Some(decision) = decision {
        let (said, events) = match &outcome {
            Outcome::Done => ("Done", Vec::new()),
            Outcome::RetryAfter(_) => ("RetryAfter", Vec::new()),
            Outcome::Failed { reason, .. } => (reason.as_str(), vec![CLEANUP_FAILED.to_owned()]),
        };
        let decision = decision.decided(said, Vec::new(), events);
        shared.decisions.record(job, decision);
    }

    let now = Timestamp::now();
    let finalizers = &shared.finalizers;
    match machine::after_cleanup(observed, attempt, &outcome, now, &finalizers.pacing) {
        After::Release => {
            debug!(job = %key, attempt, "cleanup done");
            finalizers.remember(key, &observed.uid, Recall::Cleaned);
            release(shared, key, &observed.uid).await
        }
        After::Keep(keep) => {
            if let Some((reason, message)) = &keep.failure {
                warn!(job = %key, attempt, reason, error = %message, "cleanup failed; the finalizer is kept");
                let note = format!("cleanup attempt {attempt} failed ({reason}): {message}");
                shared
                    .events
                    .publish(job, true, "Cleanup", CLEANUP_FAILED, &note)
                    .await;
            }
            if let (true, Some(exhausted)) = (keep.newly_blocked, &keep.exhausted) {
                let message = exhausted.message();
                warn!(job = %key, reason = exhausted.reason(), detail = %message, "cleanup blocked");
                shared
                    .events
                    .publish(job, true, "Cleanup", CLEANUP_BLOCKED, &message)
                    .await;
            }
            let mut status = status::terminating(job, Record::Kept(&keep), now);
            status.policy = Some(acting);
            match write_status(shared, job, status).await {
                Ok(()) => Next::RequeueAfter(keep.requeue_after),
                Err(error) => {
                    warn!(job = %key, error = %Chain(&error), "cannot record the cleanup attempt");
                    Next::Retry
                }
            }
        }
    }
}

/// Releases without cleanup, on a person's request: audit log line and
/// warning Event first.
async fn force_release(
    shared: &Shared,
    key: &ObjectKey,
    job: &DataJob,
    observed: &Observed,
    policy: Option<Arc<Policy>>,
) -> Next {
    let status = job.status.as_ref();
    let digest = policy
        .map(|p| p.digest().to_string())
        .or_else(|| {
            status
                .and_then(|s| s.policy.as_ref())
                .map(|p| p.digest.clone())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let cleanup = status.and_then(|s| s.cleanup.as_ref());
    let last_error = cleanup
        .and_then(|c| c.last_error.clone())
        .unwrap_or_else(|| "none recorded".to_owned());
    let attempts = cleanup.map_or(0, |c| c.attempts);
    warn!(
        target: AUDIT_TARGET,
        job = %key,
        uid = %observed.uid,
        policy = %job.spec.policy,
        digest = %digest,
        attempts,
        last_error = %last_error,
        "finalizer force-released by annotation: the DataJob goes without a successful cleanup"
    );
    let note = format!(
        "released without a successful cleanup by the annotation {FORCE_RELEASE_ANNOTATION}=true; \
         policy {} (digest {digest}), {attempts} cleanup attempts, last error: {last_error}",
        job.spec.policy
    );
    shared
        .events
        .publish(job, true, "ForceRelease", "ForceReleased", &note)
        .await;
    shared.metrics.force_released(&job.spec.policy);
    release(shared, key, &observed.uid).await
}

/// Removes the finalizer from the DataJob `uid` with its preconditions. A
/// conflict (409) or a failed precondition (422) is retried from the cache
/// once it holds a newer version (or after a short wait); the patch is always
/// rebuilt from the cache, so it never removes an entry that is not ours.
async fn release(shared: &Shared, key: &ObjectKey, uid: &str) -> Next {
    let span = tracing::debug_span!(target: traces::TARGET, "release");
    remove(shared, key, uid).instrument(span).await
}

/// The removal of [`release`], tried up to [`REMOVAL_TRIES`] times.
async fn remove(shared: &Shared, key: &ObjectKey, uid: &str) -> Next {
    for attempt in 1..=REMOVAL_TRIES {
        let Some(job) = shared.jobs.get(key) else {
            shared.finalizers.forget(key);
            return Next::AwaitChange;
        };
        let Some(patch) = patch::remove(&job, uid) else {
            // Not ours (any more): released, or a new DataJob of that name.
            shared.finalizers.forget(key);
            return Next::AwaitChange;
        };
        let api = api(shared, &job);
        match api
            .patch(
                &job.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await
        {
            Ok(_) => {
                // Remembered until the cache shows the release: a reconcile
                // meanwhile (a child's change) must not act on it again.
                shared.finalizers.remember(key, uid, Recall::Released);
                info!(job = %key, uid, "finalizer removed");
                return Next::AwaitChange;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                shared.finalizers.forget(key);
                return Next::AwaitChange;
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 422 => {
                shared.metrics.finalizer_conflicts.inc();
                debug!(job = %key, code = status.code, attempt, "finalizer removal conflicted; retrying from the cache");
                let seen = job.metadata.resource_version.clone();
                wait_for_newer(shared, key, seen.as_deref(), attempt).await;
            }
            Err(error) => {
                warn!(job = %key, error = %Chain(&error), "cannot remove the finalizer");
                return Next::Retry;
            }
        }
    }
    Next::Retry
}

/// Waits until the cache holds a version of `key` other than `seen`, at
/// most `25 ms × attempt`.
async fn wait_for_newer(shared: &Shared, key: &ObjectKey, seen: Option<&str>, attempt: u32) {
    let deadline = Instant::now() + Duration::from_millis(25) * attempt;
    while Instant::now() < deadline {
        let current = shared.jobs.get(key);
        if current
            .as_ref()
            .map(|j| j.metadata.resource_version.as_deref())
            != Some(seen)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Keeps the finalizer while the policy is missing; the registry's change
/// feed queues the DataJob again when it returns.
async fn report_unavailable(shared: &Shared, job: &DataJob, message: &str, newly: bool) -> Next {
    if newly {
        warn!(job = %job.key(), policy = %job.spec.policy, error = %message, "cannot clean up: policy unavailable");
        let note = format!(
            "policy {} cannot be called ({message}); the finalizer is kept until it is in service",
            job.spec.policy
        );
        shared
            .events
            .publish(job, true, "Cleanup", POLICY_UNAVAILABLE, &note)
            .await;
    }
    let status = status::terminating(job, Record::PolicyUnavailable(message), Timestamp::now());
    match write_status(shared, job, status).await {
        Ok(()) => Next::AwaitChange,
        Err(error) => {
            warn!(job = %job.key(), error = %Chain(&error), "cannot write status");
            Next::Retry
        }
    }
}

async fn write_status(
    shared: &Shared,
    job: &DataJob,
    mut status: DataJobStatus,
) -> kube::Result<()> {
    shared.decisions.stamp(job, &mut status);
    job_status::write(&api(shared, job), &shared.status_writes, job, status)
        .await
        .map(|_| ())
}

fn api(shared: &Shared, job: &DataJob) -> Api<DataJob> {
    Api::namespaced(shared.client.clone(), &job.namespace().unwrap_or_default())
}

/// Publishes `policyhost_pending_finalizers` once a second, from the index of
/// Terminating DataJobs (the state each one's status shows). Every state of
/// a policy that had pending finalizers is reported, zeros included.
pub(crate) async fn report_pending(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut policies: BTreeSet<String> = BTreeSet::new();
    loop {
        tick.tick().await;
        let mut counts: BTreeMap<(String, Pending), i64> = BTreeMap::new();
        let mut oldest: BTreeMap<String, f64> = BTreeMap::new();
        let now = k8s_openapi::jiff::Timestamp::now();
        for job in shared.jobs.lookup(shared.finalizers.pending, PENDING) {
            if let Some(state) = Pending::of(&job) {
                *counts.entry((job.spec.policy.clone(), state)).or_default() += 1;
                policies.insert(job.spec.policy.clone());
                let age = job
                    .metadata
                    .deletion_timestamp
                    .as_ref()
                    .map_or(0.0, |t| now.duration_since(t.0).as_secs_f64().max(0.0));
                let entry = oldest.entry(job.spec.policy.clone()).or_default();
                *entry = entry.max(age);
            }
        }
        for policy in &policies {
            let age = oldest.get(policy).copied().unwrap_or(0.0);
            shared.metrics.pending_oldest(policy, age);
        }
        for policy in &policies {
            for state in [
                Pending::Cleaning,
                Pending::Failing,
                Pending::Blocked,
                Pending::PolicyUnavailable,
            ] {
                let count = counts.get(&(policy.clone(), state)).copied().unwrap_or(0);
                shared.metrics.pending(policy, state.label(), count);
            }
        }
    }
}
