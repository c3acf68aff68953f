//! A policy that waits forever: `reconcile` and `cleanup` subscribe to the
//! WASI monotonic clock for the longest duration there is (`u64::MAX`
//! nanoseconds, ~584 years) and `block` on it. Under wasmtime-wasi's clocks
//! that call never returns and holds its thread for good. The host's clocks
//! are virtual and refuse a wait past the call's deadline: the call must end
//! at once with `DeadlineExceeded`, and the next call be served.

use policyhost_sdk::{
    Child, Cleanup, Context, Job, NoParams, Phase, Policy, Reconcile, Result, Status,
};

/// Waits forever on every call.
pub struct EndlessWait;

policyhost_sdk::export!(EndlessWait);

#[cfg(target_arch = "wasm32")]
mod wasi {
    wit_bindgen::generate!({ path: "../wasi-waits.wit", world: "waits", generate_all });
}

/// Blocks on an endless clock subscription.
#[cfg(target_arch = "wasm32")]
fn wait_forever() {
    use wasi::wasi::clocks::monotonic_clock;
    monotonic_clock::subscribe_duration(u64::MAX).block();
}

/// The closest native equivalent (never called by the tests).
#[cfg(not(target_arch = "wasm32"))]
fn wait_forever() {
    std::thread::sleep(std::time::Duration::MAX);
}

impl Policy for EndlessWait {
    type Params = NoParams;

    fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        wait_forever();
        Ok(Reconcile::new(
            Status::new(Phase::Running).message("the wait ended"),
        ))
    }

    fn cleanup(_: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        wait_forever();
        Ok(Cleanup::Done)
    }
}
