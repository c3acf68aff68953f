//! A policy that polls thousands of WASI clock pollables. `reconcile`
//! subscribes `count` pollables (params, default 5,000), the `i`-th due
//! after `(i % buckets + 1) * stepMs` (defaults: 10 buckets, 1 hour), then
//! polls the ones not yet ready until none is left, and reports
//! `{"polls": n, "waitedMs": ms}`. Under wasmtime-wasi's `poll` this sleeps
//! for real for the whole span (hours by default). The host's poll is
//! virtual: each poll is answered at once, moving the clock to the earliest
//! due time, and a poll that would move it past the deadline ends the call
//! with `DeadlineExceeded`. With a span under the deadline (e.g. `stepMs:
//! 10`) the call returns after `buckets` polls with `waitedMs = buckets *
//! stepMs`. `cleanup` polls the same way and answers `done`.

use policyhost_sdk::{Child, Cleanup, Context, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;
use serde_json::json;

/// Polls many pollables on every call.
pub struct PollMany;

policyhost_sdk::export!(PollMany);

/// `spec.params`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Params {
    /// How many pollables.
    pub count: u32,
    /// How many distinct due times.
    pub buckets: u32,
    /// The step between due times, in milliseconds.
    pub step_ms: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            count: 5_000,
            buckets: 10,
            step_ms: 3_600_000,
        }
    }
}

/// How many polls it took, and the monotonic time they spanned (ms).
#[cfg(target_arch = "wasm32")]
fn poll_all(params: &Params) -> (u32, u64) {
    use wasi::wasi::clocks::monotonic_clock;
    use wasi::wasi::io::poll;
    let started = monotonic_clock::now();
    let buckets = u64::from(params.buckets.max(1));
    let mut pending: Vec<poll::Pollable> = (0..u64::from(params.count))
        .map(|i| {
            monotonic_clock::subscribe_duration((i % buckets + 1) * params.step_ms * 1_000_000)
        })
        .collect();
    let mut polls = 0;
    while !pending.is_empty() {
        let ready = poll::poll(&pending.iter().collect::<Vec<_>>());
        polls += 1;
        let mut index = 0;
        pending.retain(|_| {
            let keep = !ready.contains(&index);
            index += 1;
            keep
        });
    }
    (polls, (monotonic_clock::now() - started) / 1_000_000)
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    wit_bindgen::generate!({ path: "../wasi-waits.wit", world: "waits", generate_all });
}

/// Natively there is nothing to poll: the span is what the clocks would say.
#[cfg(not(target_arch = "wasm32"))]
fn poll_all(params: &Params) -> (u32, u64) {
    let buckets = params.buckets.max(1).min(params.count);
    (buckets, u64::from(buckets) * params.step_ms)
}

impl Policy for PollMany {
    type Params = Params;

    fn reconcile(_: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let (polls, waited_ms) = poll_all(&params);
        let outputs = json!({ "polls": polls, "waitedMs": waited_ms });
        Ok(Reconcile::new(
            Status::new(Phase::Running).outputs(&outputs)?,
        ))
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        poll_all(&job.params::<Params>()?);
        Ok(Cleanup::Done)
    }
}
