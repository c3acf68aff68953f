//! Runs a DataJob as N worker Pods.
//!
//! Params (camelCase): `replicas` (1..=1000, default 1), `image` (required),
//! `command` (default: the image's entrypoint), `backoffLimit` (0..=1000,
//! default 3), `podAnnotations` (annotations of every worker Pod, default none),
//! `scratch` (`{"size": "<quantity>", "storageClass": "<name>"}`, the class
//! optional: a volume shared by the workers; default none).
//!
//! # Children
//!
//! One Pod per index `i` in `0..replicas`, named `<job>-worker-<i>`, restart
//! policy `Never`, labelled `fanout.policyhost.dev/job`, `…/index` and
//! `…/retry`, with `FANOUT_INDEX` in its environment. A Pod's spec depends
//! on its index and the template params only, not on `replicas`: Kubernetes
//! refuses any change to a running Pod's spec, so scaling must leave the
//! Pods that stay as they are.
//! A worker that fails is replaced by `<job>-worker-<i>-r<k>`, `k` counting
//! the failures of that index. Failed Pods stay in the desired set: they are
//! the record of the failures, so the retry count is read back from the
//! children and the policy stays a pure function. Once more than
//! `backoffLimit` workers failed, no replacement is made and the Pods still
//! pending or running are dropped from the desired set (the host deletes
//! them); finished Pods stay for inspection until the DataJob goes.
//!
//! With `scratch`, one more child comes first: the PersistentVolumeClaim
//! `<job>-scratch`, access mode `ReadWriteMany` (every worker mounts it, from
//! whichever node), requesting `size`, of class `storageClass` if given,
//! labelled `fanout.policyhost.dev/job`. Every worker Pod declares it as the
//! volume `scratch` and mounts it at `/scratch`. The claim stays for the
//! DataJob's life, like the finished Pods, so what the workers wrote can be
//! inspected. A malformed `size` or `storageClass` is refused as invalid
//! params. Without `scratch` the Pods are what they were before the param
//! existed, byte for byte; adding, changing or removing it changes every
//! worker's spec, which Kubernetes refuses for a Pod that exists, so set it
//! when the DataJob is created.
//!
//! # Status
//!
//! - `Failed` once more than `backoffLimit` worker Pods failed;
//! - else `Succeeded` once every index has a succeeded Pod;
//! - else `Running` once every unfinished index's current Pod is running;
//! - else `Pending` (Pods missing, pending, or being replaced).
//!
//! Condition `WorkersReady`: every unfinished index's current Pod runs and is
//! ready. Outputs: `{phase, desired, pending, running, succeeded, failed}`,
//! counting the worker Pods by phase (`pending` includes `unknown`); the
//! previous outputs, handed back by the host, let the policy emit an Event
//! on each phase change and when new failures appear, and only then.
//!
//! # Cleanup
//!
//! `done` once no child is pending or running, else `retry-after` 2000 ms.
//! Idempotent: it only reads the children.

mod params;

use std::borrow::Cow;
mod workers;

use policyhost_sdk::build::{
    AccessMode, Container, PersistentVolumeClaim, Pod, PodTemplate, RestartPolicy,
};
use policyhost_sdk::{
    Child, ChildPhase, Cleanup, Condition, Context, DesiredChild, Event, Job, Phase, Policy,
    PolicyError, Reconcile, Result, Status,
};
use serde::{Deserialize, Serialize};

pub use params::{MAX_BACKOFF_LIMIT, MAX_REPLICAS, Params, Scratch};
use workers::Slot;

/// How long cleanup waits before asking again while workers still run.
pub const CLEANUP_RETRY_MS: u64 = 2000;

/// The condition type reporting whether all workers run and are ready.
pub const WORKERS_READY: &str = "WorkersReady";

/// The name of the scratch volume in each worker Pod.
pub const SCRATCH_VOLUME: &str = "scratch";
/// Where each worker mounts the scratch volume.
pub const SCRATCH_PATH: &str = "/scratch";

/// The label naming a child's DataJob.
const JOB_LABEL: &str = "fanout.policyhost.dev/job";

/// The fanout policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fanout;

#[cfg(feature = "export")]
policyhost_sdk::export!(Fanout);

/// `status.outputs` of a fanout DataJob.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outputs {
    /// The phase these outputs were written in.
    pub phase: String,
    /// `replicas`.
    pub desired: u32,
    /// Worker Pods pending (or of unknown phase).
    pub pending: u32,
    /// Worker Pods running.
    pub running: u32,
    /// Worker Pods succeeded.
    pub succeeded: u32,
    /// Worker Pods failed, replaced ones included.
    pub failed: u32,
}

impl Policy for Fanout {
    type Params = Params;

    fn reconcile(
        job: &Job,
        params: Params,
        children: &[Child],
        _ctx: &Context,
    ) -> Result<Reconcile> {
        params.validate()?;
        let (slots, counts) = workers::slots(&job.name, params.replicas, children);
        let failures = counts.failed;
        let phase = phase(&slots, failures, params.backoff_limit);

        let mut desired = Vec::with_capacity(slots.len() + 1);
        let template = worker_template(job, &params)?;
        if let Some(scratch) = &params.scratch {
            desired.push(scratch_claim(job, scratch)?);
        }
        for (index, slot) in (0_u32..).zip(&slots) {
            for &retry in slot.failed.iter().chain(&slot.succeeded) {
                desired.push(worker(&template, job, index, retry)?);
            }
            if phase != Phase::Failed && !slot.is_done() {
                desired.push(worker(&template, job, index, slot.current_retry())?);
            }
        }

        let outputs = Outputs {
            phase: phase.as_str().to_owned(),
            desired: params.replicas,
            pending: counts.pending + counts.unknown,
            running: counts.running,
            succeeded: counts.succeeded,
            failed: counts.failed,
        };
        let previous = job.previous_outputs::<Outputs>();
        let events = events(previous.as_ref(), &outputs, phase, &params);
        let status = Status::new(phase)
            .message(message(phase, &slots, failures, &params))
            .condition(workers_ready(phase, &slots))
            .outputs(&outputs)?;
        let mut result = Reconcile::new(status).children(desired);
        result.events = events;
        Ok(result)
    }

    fn cleanup(_job: &Job, children: &[Child], _ctx: &Context) -> Result<Cleanup> {
        Ok(Cleanup::once_stopped(children, CLEANUP_RETRY_MS))
    }
}

/// The name of the job's scratch claim.
fn scratch_claim_name(job: &Job) -> String {
    format!("{}-scratch", job.name)
}

/// What every worker Pod of one call shares, checked and written once.
fn worker_template<'a>(job: &'a Job, params: &'a Params) -> Result<PodTemplate<'a>, PolicyError> {
    let mut container = Container::new("worker", params.image.as_str())
        .command(params.command.iter().map(String::as_str));
    let mut pod = Pod::new("worker");
    for (key, value) in &params.pod_annotations {
        pod = pod.annotation(key.as_str(), value.as_str());
    }
    if params.scratch.is_some() {
        pod = pod.volume_claim(SCRATCH_VOLUME, scratch_claim_name(job));
        container = container.mount(SCRATCH_VOLUME, SCRATCH_PATH);
    }
    Ok(pod
        .label("app.kubernetes.io/name", "fanout-worker")
        .label(JOB_LABEL, job.name.as_str())
        .restart_policy(RestartPolicy::Never)
        .container(container)
        .template()?)
}

/// The claim every worker mounts; what the builder refuses is a param's fault
/// (the job's name was checked by the workers' template).
fn scratch_claim(job: &Job, scratch: &Scratch) -> Result<DesiredChild, PolicyError> {
    let mut claim = PersistentVolumeClaim::new(scratch_claim_name(job))
        .label(JOB_LABEL, job.name.as_str())
        .storage(scratch.size.as_str())
        .access_mode(AccessMode::ReadWriteMany);
    if let Some(class) = &scratch.storage_class {
        claim = claim.storage_class(class.as_str());
    }
    claim
        .build()
        .map_err(|error| PolicyError::invalid_params(format!("params.scratch: {error}")))
}

/// The manifest of worker `index`, replacement `retry`: the template plus
/// the worker's name, index and retry labels and environment.
fn worker(
    template: &PodTemplate<'_>,
    job: &Job,
    index: u32,
    retry: u32,
) -> Result<DesiredChild, PolicyError> {
    let index_text = index.to_string();
    let retry_text = match retry {
        0 => Cow::Borrowed("0"),
        retry => Cow::Owned(retry.to_string()),
    };
    Ok(template
        .pod(workers::name(&job.name, index, retry))
        .label("fanout.policyhost.dev/index", index_text.as_str())
        .label("fanout.policyhost.dev/retry", retry_text)
        .env("FANOUT_INDEX", index_text.as_str())
        .build()?)
}

fn phase(slots: &[Slot], failures: u32, backoff_limit: u32) -> Phase {
    if failures > backoff_limit {
        Phase::Failed
    } else if slots.iter().all(Slot::is_done) {
        Phase::Succeeded
    } else if slots
        .iter()
        .all(|slot| slot.is_done() || matches!(slot.current, Some((ChildPhase::Running, _))))
    {
        Phase::Running
    } else {
        Phase::Pending
    }
}

fn message(phase: Phase, slots: &[Slot], failures: u32, params: &Params) -> String {
    let replicas = params.replicas;
    let done = slots.iter().filter(|slot| slot.is_done()).count();
    match phase {
        Phase::Failed => format!(
            "{failures} worker failures exceed backoffLimit {}",
            params.backoff_limit
        ),
        Phase::Succeeded => format!("{replicas}/{replicas} workers succeeded"),
        Phase::Running | Phase::Pending => {
            let running = slots
                .iter()
                .filter(|slot| matches!(slot.current, Some((ChildPhase::Running, _))))
                .count();
            format!("{running}/{replicas} workers running, {done} succeeded, {failures} failed")
        }
    }
}

fn workers_ready(phase: Phase, slots: &[Slot]) -> Condition {
    match phase {
        Phase::Failed => Condition::new(
            WORKERS_READY,
            false,
            "BackoffLimitExceeded",
            "too many workers failed; no replacements are started",
        ),
        Phase::Succeeded => {
            Condition::new(WORKERS_READY, false, "Completed", "all workers finished")
        }
        Phase::Running | Phase::Pending => {
            let unready = slots
                .iter()
                .filter(|slot| {
                    !slot.is_done() && !matches!(slot.current, Some((ChildPhase::Running, true)))
                })
                .count();
            if unready == 0 {
                Condition::new(
                    WORKERS_READY,
                    true,
                    "AllReady",
                    "every unfinished worker is running and ready",
                )
            } else {
                Condition::new(
                    WORKERS_READY,
                    false,
                    "WorkersNotReady",
                    format!("{} not running and ready yet", workers(unready as u64)),
                )
            }
        }
    }
}

/// `1 worker`, `3 workers`.
fn workers(count: impl Into<u64>) -> String {
    match count.into() {
        1 => "1 worker".to_owned(),
        count => format!("{count} workers"),
    }
}

/// Events for what changed since the outputs the host handed back.
fn events(previous: Option<&Outputs>, now: &Outputs, phase: Phase, params: &Params) -> Vec<Event> {
    let mut events = Vec::new();
    let previous_failed = previous.map_or(0, |p| p.failed);
    if now.failed > previous_failed {
        events.push(Event::warning(
            "WorkerFailed",
            format!(
                "{} failed ({} in all, backoffLimit {})",
                workers(now.failed - previous_failed),
                now.failed,
                params.backoff_limit
            ),
        ));
    }
    if previous.map(|p| p.phase.as_str()) != Some(phase.as_str()) {
        policyhost_sdk::info!(
            "phase {} -> {phase}",
            previous.map_or("(none)", |p| p.phase.as_str())
        );
        let replicas = params.replicas;
        events.push(match phase {
            Phase::Pending if previous.is_none() => {
                Event::normal("Started", format!("starting {}", workers(replicas)))
            }
            Phase::Pending => Event::normal("Pending", "waiting for workers to start"),
            Phase::Running => Event::normal("Running", format!("{} running", workers(replicas))),
            Phase::Succeeded => {
                Event::normal("Succeeded", format!("{} succeeded", workers(replicas)))
            }
            Phase::Failed => Event::warning(
                "BackoffLimitExceeded",
                format!(
                    "{} worker failures exceed backoffLimit {}",
                    now.failed, params.backoff_limit
                ),
            ),
        });
    }
    events
}
