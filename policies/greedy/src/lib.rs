//! A policy that asks for more than one result may: each part of its result
//! is set by its params, so one crate plays every greedy tenant.
//!
//! - `requeueMs`: `reconcile` asks to be called again after this long
//!   (`0`: at once, forever). Its outputs carry `ctx.now_unix_ms`, so every
//!   call changes the status and would cost a status write.
//! - `retryAfterMs`: `cleanup` answers `retry-after` this long, forever
//!   (unset: `done`).
//! - `events`: Events per result, each with its own reason.
//! - `conditions`, `reason`, `phase`, `messageBytes`: that many conditions
//!   with that reason, that phase, a message that long.
//! - `outputsDepth`, `outputsBytes`: `status.outputs` nested that deep, or
//!   padded to that size.
//!
//! The host must grant at most its floors and caps (docs/operator.md,
//! "Bounded asks"): requeues and retries no faster than the floors, Events
//! capped per result and per minute with the rest reported as dropped,
//! invalid output for the status rules, and a small `StatusRejected`
//! condition when the API server refuses the status.

use policyhost_sdk::{
    Child, Cleanup, Condition, Context, Event, Job, Policy, Reconcile, Result, Status,
};
use serde::Deserialize;

/// The policy.
pub struct Greedy;

policyhost_sdk::export!(Greedy);

/// `spec.params`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Params {
    /// `requeue-after` asked of every reconcile.
    pub requeue_ms: Option<u64>,
    /// `retry-after` answered by every cleanup; unset: done.
    pub retry_after_ms: Option<u64>,
    /// Events per result.
    pub events: u32,
    /// Conditions reported.
    pub conditions: u32,
    /// Their reason (default `Asked`).
    pub reason: Option<String>,
    /// The phase (default `Running`).
    pub phase: Option<String>,
    /// Bytes of the status message.
    pub message_bytes: u32,
    /// Nesting depth of `status.outputs` (0: flat).
    pub outputs_depth: u32,
    /// Bytes of padding in `status.outputs`.
    pub outputs_bytes: u32,
}

impl Policy for Greedy {
    type Params = Params;

    fn reconcile(_: &Job, params: Params, _: &[Child], ctx: &Context) -> Result<Reconcile> {
        Ok(result(&params, ctx.now_unix_ms))
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        Ok(answer(&job.params()?))
    }
}

/// What `cleanup` answers for `params`: `retry-after` as asked, or done.
#[must_use]
pub fn answer(params: &Params) -> Cleanup {
    params
        .retry_after_ms
        .map_or(Cleanup::Done, |ms| Cleanup::RetryAfter { ms })
}

/// The result `reconcile` returns for `params` at `now_unix_ms`.
#[must_use]
pub fn result(params: &Params, now_unix_ms: u64) -> Reconcile {
    let mut status = Status::new(params.phase.clone().unwrap_or_else(|| "Running".into()))
        .message("m".repeat(params.message_bytes as usize));
    let reason = params.reason.clone().unwrap_or_else(|| "Asked".into());
    for i in 0..params.conditions {
        status = status.condition(Condition::new(
            format!("Asked{i}"),
            true,
            reason.clone(),
            "asked for",
        ));
    }
    status.outputs = outputs(params, now_unix_ms);
    let mut reconcile = Reconcile::new(status);
    for i in 0..params.events {
        reconcile = reconcile.event(Event::normal(
            format!("Flood{i}"),
            format!("event {i} of {} at {now_unix_ms}", params.events),
        ));
    }
    if let Some(ms) = params.requeue_ms {
        reconcile = reconcile.requeue_after_ms(ms);
    }
    reconcile
}

/// `{"now": …, "pad": "xx…", "deep": {"d": {"d": … 1}}}`, the whole
/// `outputsDepth` levels deep (the object itself is the first).
fn outputs(params: &Params, now_unix_ms: u64) -> String {
    let pad = "x".repeat(params.outputs_bytes as usize);
    let inner = params.outputs_depth.saturating_sub(1) as usize;
    let deep = format!("{}1{}", r#"{"d":"#.repeat(inner), "}".repeat(inner));
    format!(r#"{{"now":{now_unix_ms},"pad":"{pad}","deep":{deep}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(json: &serde_json::Value) -> usize {
        match json {
            serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    #[test]
    fn outputs_are_nested_as_deep_as_asked_and_change_with_the_time() {
        let params = Params {
            outputs_depth: 5,
            ..Params::default()
        };
        let one: serde_json::Value =
            serde_json::from_str(&result(&params, 1).status.outputs).unwrap();
        assert_eq!(depth(&one), 5);
        assert_eq!(one["now"], 1);
        assert_ne!(result(&params, 1), result(&params, 2));
    }

    #[test]
    fn every_part_is_as_large_as_asked() {
        let params = Params {
            requeue_ms: Some(0),
            events: 5000,
            conditions: 40,
            reason: Some("not a reason".into()),
            message_bytes: 10,
            outputs_bytes: 100,
            ..Params::default()
        };
        let result = result(&params, 7);
        assert_eq!(result.requeue_after_ms, Some(0));
        assert_eq!(result.events.len(), 5000);
        assert_eq!(result.status.conditions.len(), 40);
        assert_eq!(result.status.conditions[0].reason, "not a reason");
        assert_eq!(result.status.message.len(), 10);
        assert!(result.status.outputs.len() > 100);
    }

    #[test]
    fn cleanup_asks_for_the_retry_it_was_given() {
        let params = Params {
            retry_after_ms: Some(0),
            ..Params::default()
        };
        assert_eq!(answer(&params), Cleanup::RetryAfter { ms: 0 });
        assert_eq!(answer(&Params::default()), Cleanup::Done);
    }
}
