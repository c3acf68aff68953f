//! A policy that sleeps: `reconcile` and `cleanup` call
//! `std::thread::sleep(ms)` (params `{"ms": 5000}` by default), which the
//! standard library turns into a WASI monotonic-clock subscription and a
//! `block` on it. The host's WASI clocks are virtual: the wait is answered at
//! once and the clocks move by what was waited, so under a deadline longer
//! than the sleep the call returns at once with `{"sleptMs": ms, "nowMs":
//! now + ms}` in its outputs (what `Instant` and `SystemTime` saw), and under
//! a shorter one it ends at once with `DeadlineExceeded`. Either way it never
//! holds a call thread.

use std::time::{Duration, Instant, SystemTime};

use policyhost_sdk::{Child, Cleanup, Context, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;
use serde_json::json;

/// Sleeps on every call.
pub struct Sleeper;

policyhost_sdk::export!(Sleeper);

/// `spec.params`.
#[derive(Debug, Deserialize)]
pub struct Params {
    /// How long to sleep, in milliseconds.
    #[serde(default = "five_seconds")]
    pub ms: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self { ms: five_seconds() }
    }
}

fn five_seconds() -> u64 {
    5_000
}

/// Sleeps `ms`, and says how long the clocks saw it last and where the wall
/// clock stands after it.
fn sleep(ms: u64) -> serde_json::Value {
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(ms));
    let slept = started.elapsed();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    json!({ "sleptMs": slept.as_millis(), "nowMs": now.as_millis() })
}

impl Policy for Sleeper {
    type Params = Params;

    fn reconcile(_: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let outputs = sleep(params.ms);
        Ok(Reconcile::new(
            Status::new(Phase::Running).outputs(&outputs)?,
        ))
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        sleep(job.params::<Params>()?.ms);
        Ok(Cleanup::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natively_the_sleep_is_real_and_measured() {
        let outputs = sleep(5);
        assert!(outputs["sleptMs"].as_u64().unwrap() >= 5);
    }
}
