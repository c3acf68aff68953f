//! A policy whose `cleanup` follows a plan read from its params, as a pure
//! function of `ctx.attempt`: attempts `1..=failures` fail (a policy error,
//! a panic, or a spin until the deadline), the next `retries` attempts ask to
//! be called again after `retryAfterMs`, and every later attempt is done.
//!
//! Because the plan depends only on the attempt number, the host must carry
//! that number across failures, requeues and restarts: a DataJob with
//! `failures: 3` is released only if the host called cleanup with attempt 4 or
//! more, that is after it recorded three failed attempts. `reconcile` creates
//! `configMaps` ConfigMaps, so tests can watch them being garbage-collected
//! once the DataJob is released.

use policyhost_sdk::build::ConfigMap;
use policyhost_sdk::{
    Child, Cleanup, Context, DesiredChild, Job, Phase, Policy, PolicyError, Reconcile, Result,
    Status,
};
use serde::Deserialize;
use serde_json::json;

/// The policy.
pub struct FlakyCleanup;

policyhost_sdk::export!(FlakyCleanup);

/// How a planned failure fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Fault {
    /// `PolicyError::Failed` naming the attempt.
    #[default]
    Error,
    /// A panic: the instance traps.
    Panic,
    /// A loop that never ends: the host's deadline or fuel limit stops it.
    Spin,
}

/// `spec.params`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Params {
    /// Cleanup attempts that fail before any succeeds.
    pub failures: u32,
    /// How they fail.
    pub fault: Fault,
    /// Attempts after the failures that answer `retry-after`.
    pub retries: u32,
    /// The delay those attempts ask for.
    pub retry_after_ms: Option<u64>,
    /// ConfigMaps `reconcile` creates (default 1).
    pub config_maps: Option<u32>,
}

/// The delay of a `retry-after` answer when `retryAfterMs` is unset.
pub const DEFAULT_RETRY_AFTER_MS: u64 = 500;

/// The text of every planned failure.
pub const MARKER: &str = "planned cleanup failure";

impl Policy for FlakyCleanup {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let children = (0..params.config_maps.unwrap_or(1))
            .map(|i| {
                ConfigMap::new(format!("{}-state-{i}", job.name))
                    .data("failures", params.failures.to_string())
                    .build()
            })
            .collect::<Result<Vec<DesiredChild>, _>>()?;
        let status = Status::new(Phase::Running)
            .message(format!(
                "cleanup will fail {} time(s), then retry {} time(s), then succeed",
                params.failures, params.retries
            ))
            .outputs(&json!({ "failures": params.failures, "retries": params.retries }))?;
        Ok(Reconcile::new(status).children(children))
    }

    fn cleanup(job: &Job, _: &[Child], ctx: &Context) -> Result<Cleanup> {
        let params: Params = job.params()?;
        plan(&params, ctx.attempt, &job.name)
    }
}

/// What cleanup attempt `attempt` answers under `params`.
///
/// # Errors
///
/// The planned failures of the `error` fault.
pub fn plan(params: &Params, attempt: u32, job: &str) -> Result<Cleanup> {
    if attempt <= params.failures {
        return match params.fault {
            Fault::Error => Err(PolicyError::failed_with(format!(
                "{MARKER} {attempt} of {} for {job}",
                params.failures
            ))),
            Fault::Panic => panic!("{MARKER} {attempt} of {} for {job}", params.failures),
            Fault::Spin => spin(),
        };
    }
    if attempt <= params.failures.saturating_add(params.retries) {
        return Ok(Cleanup::RetryAfter {
            ms: params.retry_after_ms.unwrap_or(DEFAULT_RETRY_AFTER_MS),
        });
    }
    Ok(Cleanup::Done)
}

/// Never returns; the host stops it.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_fails_then_retries_then_is_done() {
        let params = Params {
            failures: 2,
            retries: 1,
            retry_after_ms: Some(10),
            ..Params::default()
        };
        let answers: Vec<String> = (1..=4)
            .map(|attempt| match plan(&params, attempt, "j") {
                Ok(Cleanup::Done) => "done".to_owned(),
                Ok(Cleanup::RetryAfter { ms }) => format!("retry {ms}"),
                Err(error) => error.message().to_owned(),
            })
            .collect();
        assert_eq!(
            answers,
            [
                "planned cleanup failure 1 of 2 for j",
                "planned cleanup failure 2 of 2 for j",
                "retry 10",
                "done"
            ]
        );
    }

    #[test]
    fn no_failures_planned_means_done_at_the_first_attempt() {
        assert_eq!(plan(&Params::default(), 1, "j"), Ok(Cleanup::Done));
    }
}
