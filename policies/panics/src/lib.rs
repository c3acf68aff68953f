//! A policy whose `reconcile` and `cleanup` panic with a message containing
//! `policyhost-test-panic`. On `wasm32-wasip2` a panic aborts: the standard
//! library writes `panicked at …: policyhost-test-panic: …` to stderr, then
//! the instance traps on `unreachable`. The host must report a `Trap` that
//! carries the guest's message (from the captured stderr) and its backtrace,
//! stay up, and serve the next call.

use policyhost_sdk::{Child, Cleanup, Context, Job, NoParams, Policy, Reconcile, Result};

/// Panics on every call.
pub struct Panics;

policyhost_sdk::export!(Panics);

/// The text every panic message of this policy contains.
pub const MARKER: &str = "policyhost-test-panic";

impl Policy for Panics {
    type Params = NoParams;

    fn reconcile(job: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        panic!("{MARKER}: reconcile of {} gave up", job.name)
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        panic!("{MARKER}: cleanup of {} gave up", job.name)
    }
}
