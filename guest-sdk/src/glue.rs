//! Moves values between the generated WIT bindings and the SDK's own types.
//!
//! Strings and vectors are moved, not copied: the call's input is consumed.

use crate::__private::generated::policyhost::reconcile::types as wit;
use crate::{
    Child, ChildPhase, Cleanup, Condition, Context, DesiredChild, Event, Job, KeyValue, Policy,
    PolicyError, Reconcile, Status,
};

/// The component's `reconcile` export for policy `P`.
pub fn reconcile<P: Policy>(
    job: wit::DataJob,
    children: Vec<wit::Child>,
    ctx: wit::Context,
) -> Result<wit::ReconcileResult, wit::PolicyError> {
    let (job, children, ctx) = inputs(job, children, ctx, "reconcile");
    crate::policy::run_reconcile::<P>(&job, &children, &ctx)
        .map(reconcile_result)
        .map_err(policy_error)
}

/// The component's `cleanup` export for policy `P`.
pub fn cleanup<P: Policy>(
    job: wit::DataJob,
    children: Vec<wit::Child>,
    ctx: wit::Context,
) -> Result<wit::CleanupResult, wit::PolicyError> {
    let (job, children, ctx) = inputs(job, children, ctx, "cleanup");
    match crate::policy::run_cleanup::<P>(&job, &children, &ctx) {
        Ok(Cleanup::Done) => Ok(wit::CleanupResult::Done),
        Ok(Cleanup::RetryAfter { ms }) => Ok(wit::CleanupResult::RetryAfterMs(ms)),
        Err(error) => Err(policy_error(error)),
    }
}

fn inputs(
    job: wit::DataJob,
    children: Vec<wit::Child>,
    ctx: wit::Context,
    operation: &str,
) -> (Job, Vec<Child>, Context) {
    let job = Job {
        name: job.name,
        namespace: job.namespace,
        uid: job.uid,
        generation: job.generation,
        labels: key_values(job.labels),
        annotations: key_values(job.annotations),
        params_json: job.params,
        status_json: job.status,
        deletion_unix_ms: job.deletion_unix_ms,
    };
    let children = children
        .into_iter()
        .map(|child| Child {
            api_version: child.api_version,
            kind: child.kind,
            name: child.name,
            phase: match child.phase {
                wit::ChildPhase::Pending => ChildPhase::Pending,
                wit::ChildPhase::Running => ChildPhase::Running,
                wit::ChildPhase::Succeeded => ChildPhase::Succeeded,
                wit::ChildPhase::Failed => ChildPhase::Failed,
                wit::ChildPhase::Unknown => ChildPhase::Unknown,
            },
            ready: child.ready,
            deleting: child.deleting,
            labels: key_values(child.labels),
        })
        .collect();
    let ctx = Context::new(ctx.now_unix_ms, ctx.attempt, ctx.policy_digest)
        .for_operation(&job.uid, operation);
    (job, children, ctx)
}

fn key_values(pairs: Vec<wit::KeyValue>) -> Vec<KeyValue> {
    pairs
        .into_iter()
        .map(|kv| KeyValue {
            key: kv.key,
            value: kv.value,
        })
        .collect()
}

fn reconcile_result(result: Reconcile) -> wit::ReconcileResult {
    let Reconcile {
        children,
        status,
        requeue_after_ms,
        events,
    } = result;
    let Status {
        phase,
        message,
        conditions,
        outputs,
    } = status;
    wit::ReconcileResult {
        children: children
            .into_iter()
            .map(|c: DesiredChild| wit::DesiredChild {
                api_version: c.api_version,
                kind: c.kind,
                name: c.name,
                manifest: c.manifest,
            })
            .collect(),
        status: wit::Status {
            phase,
            message,
            conditions: conditions
                .into_iter()
                .map(|c: Condition| wit::Condition {
                    kind: c.kind,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            outputs,
        },
        requeue_after_ms,
        events: events
            .into_iter()
            .map(|e: Event| wit::Event {
                warning: e.warning,
                reason: e.reason,
                message: e.message,
            })
            .collect(),
    }
}

fn policy_error(error: PolicyError) -> wit::PolicyError {
    match error {
        PolicyError::InvalidParams(message) => wit::PolicyError::InvalidParams(message),
        PolicyError::Failed(message) => wit::PolicyError::Failed(message),
    }
}
