//! One reconcile of one DataJob: read it and its children from the cache,
//! call its policy, apply what the policy wants, write status and Events.
//!
//! Nothing here lists anything: the DataJob comes from the cache by key and
//! its children from the owner index.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use tracing::{debug, warn};

use super::decisions::Called;
use super::finalizer::Step;
use super::{Shared, access};
use crate::apply::children::{self, Summary};
use crate::apply::status::{self, NewCondition, READY, SUSPENDED, StatusUpdate};
use crate::cache::{Cached as _, ChildRecord, ObjectKey, owner_key_of};
use crate::chain::{Chain, display_chain};
use crate::crd::{DataJob, PolicyRef};
use crate::metrics::standard::Outcome;
use crate::policies::Unavailable;
use crate::policies::rollout::Signal;
use crate::projection;
use crate::runtime::{self, Context, Input, Policy, Reconciled};
use crate::shadow;

/// The phase a policy reports for a run that failed.
const FAILED: &str = "Failed";

/// What the queue should do with the key after a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing until the DataJob or its children change.
    AwaitChange,
    /// Call again after this long (the policy asked for it).
    RequeueAfter(Duration),
    /// It failed in a way a retry may fix: back off and retry.
    Retry,
    /// It failed in a way only a change can fix (of the DataJob, its
    /// policy or a child): nothing until then.
    AwaitFix,
}

impl Next {
    /// What comes next, as a trace attribute shows it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::AwaitChange => "await-change",
            Self::RequeueAfter(_) => "requeue-after",
            Self::Retry => "retry",
            Self::AwaitFix => "await-fix",
        }
    }

    /// How the pass ended, as controller-runtime counts it.
    #[must_use]
    pub fn outcome(self) -> Outcome {
        match self {
            Self::AwaitChange => Outcome::Success,
            Self::RequeueAfter(_) => Outcome::RequeueAfter,
            Self::Retry => Outcome::Error,
            Self::AwaitFix => Outcome::TerminalError,
        }
    }
}

/// Why a reconcile did not go through, as a condition reason.
#[derive(Debug)]
enum Failure {
    /// The policy named in the spec has no version in service, or the
    /// DataJob may not call it (its namespace).
    Denied(access::Denied),
    /// The guest faulted, or reported its own error.
    Guest(runtime::Error),
    /// The API server refused a write.
    Apply(children::Error),
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Self::Denied(denied) => denied.reason(),
            Self::Guest(error) => error.reason(),
            Self::Apply(error) => error.reason(),
        }
    }

    fn message(&self) -> String {
        match self {
            Self::Denied(denied) => denied.to_string(),
            Self::Guest(error) => display_chain(error),
            Self::Apply(error) if error.is_immutable_change() => format!(
                "{} (the update strategy Recreate replaces such a child, OnDelete keeps it)",
                display_chain(error)
            ),
            Self::Apply(error) => display_chain(error),
        }
    }

    /// What the pass came to for a rollout's gates: a guest's fault, or a
    /// write the API server refused; none when no version was called.
    fn signal(&self) -> Option<Signal> {
        match self {
            Self::Denied(_) => None,
            Self::Guest(_) => Some(Signal::Fault),
            Self::Apply(_) => Some(Signal::Refused),
        }
    }

    /// Invalid params only change with the spec, which re-queues the DataJob
    /// anyway; a missing or refusing policy re-queues it when the policy
    /// changes.
    fn next(&self) -> Next {
        match self {
            Self::Denied(_) => Next::AwaitFix,
            Self::Guest(runtime::Error::PolicyError(runtime::PolicyError::InvalidParams(_))) => {
                Next::AwaitFix
            }
            // The same answer cannot change what may not change: a new
            // version, a new spec or the child's deletion queues it again.
            Self::Apply(error) if error.is_immutable_change() => Next::AwaitFix,
            Self::Guest(_) | Self::Apply(_) => Next::Retry,
        }
    }
}

/// Reconciles the DataJob `key`; `attempt` counts tries since it last succeeded.
pub async fn reconcile(shared: &Shared, key: &ObjectKey, attempt: u32) -> Next {
    let Some(job) = shared.jobs.get(key) else {
        // Gone: its children go with it through garbage collection.
        shared.finalizers.forget(key);
        shared.status_writes.forget(key);
        shared.decisions.forget(key);
        shared.settling.settled(key);
        return Next::AwaitChange;
    };
    // The version is chosen once per pass: the pass calls it and no other.
    let access = match access::policy(shared, &job) {
        // A policy still loading after a start: nothing is done or written
        // until it serves or is refused, either of which queues the DataJob.
        Err(access::Denied::Policy(Unavailable::Loading)) => return Next::AwaitChange,
        // A DataJob refused for its namespace gets nothing, not even the
        // finalizer: no call, no cleanup to wait for when it is deleted.
        Err(denied) if job.metadata.deletion_timestamp.is_none() && denied.refuses_the_job() => {
            let started = Instant::now();
            let children = owner_key_of(&job)
                .map(|owner| shared.children.of(&owner))
                .unwrap_or_default();
            let denied = Failure::Denied(denied);
            let done = fail(shared, &job, None, &denied, &children, None, Vec::new()).await;
            shared
                .metrics
                .reconciled(&job.spec.policy, done.result, started.elapsed());
            return done.next;
        }
        access => access,
    };
    // The finalizer first: added before any side effect; a deleted DataJob
    // is cleaned up, never reconciled.
    let job = match super::finalizer::step(shared, key, &job).await {
        Step::Done(next) => return next,
        Step::Reconcile(job) => job,
    };
    let started = Instant::now();
    let policy_name = job.spec.policy.clone();
    let children = owner_key_of(&job)
        .map(|owner| shared.children.of(&owner))
        .unwrap_or_default();

    if job.spec.suspend {
        let update = StatusUpdate {
            conditions: vec![NewCondition::new(
                SUSPENDED,
                true,
                "SpecSuspend",
                "spec.suspend is true: the policy is not called and no child is created",
            )],
            ..StatusUpdate::default()
        };
        return match write_status(shared, &job, update, &children).await {
            Ok(()) => Next::AwaitChange,
            Err(error) => {
                warn!(job = %job.key(), error = %Chain(&error), "cannot write status");
                Next::Retry
            }
        };
    }

    let acting = access.as_ref().ok().map(|policy| policy.digest());
    let done = match run_policy(shared, &job, access, &children, attempt).await {
        Ok((policy, reconciled, called)) => {
            succeed(shared, &job, &policy, reconciled, &children, called).await
        }
        Err((policy, failure, called)) => {
            fail(
                shared,
                &job,
                policy,
                &failure,
                &children,
                called,
                Vec::new(),
            )
            .await
        }
    };
    if let (Some(digest), Some(signal)) = (acting, done.signal) {
        shared.registry.observe(&policy_name, digest, signal);
    }
    shared
        .metrics
        .reconciled(&policy_name, done.result, started.elapsed());
    done.next
}

/// How a reconcile ended: what to do next, the result label for metrics,
/// and what the pass came to for a rollout's gates (none: no version acted).
struct Done {
    next: Next,
    result: &'static str,
    signal: Option<Signal>,
}

type PolicyOutcome =
    Result<(PolicyRef, Reconciled, Option<Called>), (Option<PolicyRef>, Failure, Option<Called>)>;

/// Calls the DataJob's policy with its children and a fresh context.
async fn run_policy(
    shared: &Shared,
    job: &Arc<DataJob>,
    access: Result<Arc<Policy>, access::Denied>,
    children: &[Arc<ChildRecord>],
    attempt: u32,
) -> PolicyOutcome {
    let policy = access.map_err(|denied| (None, Failure::Denied(denied), None))?;
    let acting = PolicyRef {
        name: policy.name().to_owned(),
        digest: policy.digest().to_string(),
    };
    let input = Input {
        job: projection::data_job(job),
        children: children.iter().map(|r| r.child.clone()).collect(),
        ctx: Context {
            now_unix_ms: now_unix_ms(),
            attempt,
            policy_digest: acting.digest.clone(),
        },
    };
    let mut called = shared.decisions.start("reconcile", policy.digest(), &input);
    let version = shadow::Acting {
        digest: policy.digest(),
        pinned: access::pinned(shared, job),
    };
    let shadow = shared.shadow.beside(&acting.name, version, &input);
    let tenant = policy.tenant().clone();
    let outcome = shared.runtime.reconcile(policy, input).await;
    if let Some(called) = &mut called {
        called.answered(&outcome);
    }
    if let Some(shadow) = shadow {
        shadow.reconcile(&outcome, || shadow::Applying {
            job: Arc::clone(job),
            children: children.to_vec(),
            tenant,
        });
    }
    let fault = outcome.result.as_ref().err().map(runtime::Error::reason);
    shared
        .metrics
        .guest_call(&acting.name, &outcome.report, fault);
    match outcome.result {
        Ok(reconciled) => Ok((acting, reconciled, called)),
        Err(error) => Err((Some(acting), Failure::Guest(error), called)),
    }
}

/// Applies a successful result: children, status, the policy's Events.
async fn succeed(
    shared: &Shared,
    job: &DataJob,
    policy: &PolicyRef,
    reconciled: Reconciled,
    children: &[Arc<ChildRecord>],
    called: Option<Called>,
) -> Done {
    let mut summary = Summary::default();
    let applied = children::reconcile_children(
        &shared.client,
        &*shared.children,
        &shared.instance,
        job,
        &reconciled.children,
        children,
        &mut summary,
    )
    .await;
    let writes = summary.writes.iter().map(ToString::to_string).collect();
    if let Err(error) = applied {
        let failure = Failure::Apply(error);
        let policy = Some(policy.clone());
        return fail(shared, job, policy, &failure, children, called, writes).await;
    }
    debug!(job = %job.key(), ?summary, "children reconciled");
    let ready = ready(reconciled.children.len(), &summary);
    if let Some(called) = called {
        let events = reconciled.events.iter().map(|e| e.reason.clone()).collect();
        let decision = called.decided(&ready.reason, writes, events);
        shared.decisions.record(job, decision);
    }
    let key = job.key();
    if summary.wrote() && shared.settling.defer(&key) {
        // The watch events of these writes bring the DataJob back, to a
        // pass that sees the children as they now are (`settle`).
        return Done {
            next: Next::AwaitChange,
            result: "success",
            signal: Some(Signal::Answered),
        };
    }
    shared.settling.settled(&key);
    let turned_failed = reconciled.status.phase == FAILED
        && job
            .status
            .as_ref()
            .and_then(|status| status.phase.as_deref())
            != Some(FAILED);
    let signal = if turned_failed {
        Signal::Failed
    } else {
        Signal::Answered
    };
    let mut conditions = vec![ready];
    conditions.extend(reconciled.status.conditions.iter().map(NewCondition::from));
    let update = StatusUpdate {
        phase: Some(reconciled.status.phase.clone()),
        message: Some(reconciled.status.message.clone()),
        conditions,
        policy: Some(policy.clone()),
        outputs: reconciled.status.outputs.as_object().cloned(),
    };
    if let Err(error) = write_status(shared, job, update, children).await {
        warn!(job = %job.key(), error = %Chain(&error), "cannot write status");
        return Done {
            next: Next::Retry,
            result: "StatusFailed",
            signal: Some(signal),
        };
    }
    shared
        .events
        .publish_result(job, "Reconcile", &reconciled.events)
        .await;
    Done {
        next: reconciled.requeue_after_ms.map_or(Next::AwaitChange, |ms| {
            Next::RequeueAfter(shared.asks.requeue_after(ms))
        }),
        result: "success",
        signal: Some(signal),
    }
}

/// The `Ready` condition after the children were reconciled: true only
/// when every desired child exists as the policy asked. A desired child
/// that is being deleted is created again once it is gone (its Deleted
/// event queues the DataJob); until then the DataJob is not ready.
///
/// The message states what holds, not what this pass did (that is logged):
/// a pass that finds the children as the last one left them writes the same
/// condition, so the status is not written again.
fn ready(desired: usize, summary: &Summary) -> NewCondition {
    match summary.terminating.as_slice() {
        [] if summary.held > 0 => NewCondition::new(
            READY,
            true,
            "Reconciled",
            format!(
                "{desired} desired children, as the policy asked ({} kept in their earlier form by their update strategy)",
                summary.held
            ),
        ),
        [] => NewCondition::new(
            READY,
            true,
            "Reconciled",
            format!("{desired} desired children, as the policy asked"),
        ),
        [(kind, name), rest @ ..] => {
            let more = match rest.len() {
                0 => String::new(),
                n => format!(" (and {n} more)"),
            };
            NewCondition::new(
                READY,
                false,
                "ChildTerminating",
                format!(
                    "{kind} {name}{more} is being deleted; created again once it is gone ({desired} desired children)"
                ),
            )
        }
    }
}

/// Records a failure: a `Ready=False` condition naming it and a warning Event,
/// and the decision of the call that led to it, if one did (`writes`: those
/// that went through before it). Nothing more is applied.
async fn fail(
    shared: &Shared,
    job: &DataJob,
    policy: Option<PolicyRef>,
    failure: &Failure,
    children: &[Arc<ChildRecord>],
    called: Option<Called>,
    mut writes: Vec<String>,
) -> Done {
    let reason = failure.reason();
    let message = failure.message();
    warn!(job = %job.key(), reason, error = %message, "reconcile failed");
    if let Some(called) = called {
        if let Failure::Apply(error) = failure {
            writes.push(format!("refused: {}", display_chain(error)));
        }
        let decision = called.decided(reason, writes, vec![reason.to_owned()]);
        shared.decisions.record(job, decision);
    }
    let update = StatusUpdate {
        conditions: vec![NewCondition::new(READY, false, reason, message.clone())],
        policy,
        ..StatusUpdate::default()
    };
    let written = write_status(shared, job, update, children).await;
    shared
        .events
        .publish(job, true, "Reconcile", reason, &message)
        .await;
    let next = match written {
        Ok(()) => failure.next(),
        Err(error) => {
            warn!(job = %job.key(), error = %Chain(&error), "cannot write status");
            Next::Retry
        }
    };
    Done {
        next,
        result: reason,
        signal: failure.signal(),
    }
}

async fn write_status(
    shared: &Shared,
    job: &DataJob,
    update: StatusUpdate,
    children: &[Arc<ChildRecord>],
) -> kube::Result<()> {
    let mut status = status::build(job, update, children, Timestamp::now());
    shared.decisions.stamp(job, &mut status);
    let api: Api<DataJob> =
        Api::namespaced(shared.client.clone(), &job.namespace().unwrap_or_default());
    status::write(&api, &shared.status_writes, job, status)
        .await
        .map(|_| ())
}

fn now_unix_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_true_only_when_no_desired_child_is_being_deleted() {
        let summary = Summary {
            writes: vec![children::Written {
                verb: children::Verb::Created,
                kind: "Pod".into(),
                name: "w-0".into(),
            }],
            unchanged: 2,
            terminating: Vec::new(),
            ..Summary::default()
        };
        let ok = ready(3, &summary);
        assert!(ok.status);
        assert_eq!(ok.reason, "Reconciled");
        assert_eq!(ok.message, "3 desired children, as the policy asked");
        let steady = Summary {
            writes: Vec::new(),
            unchanged: 3,
            ..summary.clone()
        };
        assert_eq!(ready(3, &steady), ok, "the same state, the same condition");
        let kept = ready(
            3,
            &Summary {
                held: 1,
                ..steady.clone()
            },
        );
        assert!(kept.status, "a child kept by its strategy is as asked");
        assert_eq!(
            kept.message,
            "3 desired children, as the policy asked (1 kept in their earlier form by their update strategy)"
        );

        let pod = |name: &str| ("Pod".to_owned(), name.to_owned());
        let one = Summary {
            terminating: vec![pod("w-1")],
            ..summary.clone()
        };
        let held = ready(3, &one);
        assert!(!held.status);
        assert_eq!(held.reason, "ChildTerminating");
        assert_eq!(
            held.message,
            "Pod w-1 is being deleted; created again once it is gone (3 desired children)"
        );
        let two = Summary {
            terminating: vec![pod("w-1"), pod("w-2")],
            ..summary
        };
        assert!(
            ready(3, &two)
                .message
                .starts_with("Pod w-1 (and 1 more) is being deleted")
        );
    }
}
