//! A policy that increments a `static` counter on every call and reports it:
//! `reconcile` writes `{"calls": n}` to `status.outputs`, and `cleanup` fails
//! with `calls=n` unless `n` is 1. The host creates a fresh instance for every
//! call, so it must see `{"calls": 1}` every time; any other number means
//! state leaked between calls (e.g. a reused instance).

use std::sync::atomic::{AtomicU32, Ordering};

use policyhost_sdk::{
    Child, Cleanup, Context, Job, NoParams, Phase, Policy, PolicyError, Reconcile, Result, Status,
};
use serde_json::json;

/// Counts its calls.
pub struct StaticCounter;

policyhost_sdk::export!(StaticCounter);

static CALLS: AtomicU32 = AtomicU32::new(0);

fn count_call() -> u32 {
    CALLS.fetch_add(1, Ordering::Relaxed) + 1
}

impl Policy for StaticCounter {
    type Params = NoParams;

    fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let calls = count_call();
        let status = Status::new(Phase::Running)
            .message(format!("call number {calls} in this instance"))
            .outputs(&json!({ "calls": calls }))?;
        Ok(Reconcile::new(status))
    }

    fn cleanup(_: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        match count_call() {
            1 => Ok(Cleanup::Done),
            calls => Err(PolicyError::failed_with(format!("calls={calls}"))),
        }
    }
}
