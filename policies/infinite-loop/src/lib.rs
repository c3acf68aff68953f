//! A policy whose `reconcile` and `cleanup` never return: they spin in a
//! loop with no import calls and no allocation. The host must stop the call at
//! its wall-clock deadline (epoch interruption) or when its fuel runs out,
//! report `DeadlineExceeded` / `OutOfFuel`, and keep serving other calls; the
//! instance is discarded.

use policyhost_sdk::{Child, Cleanup, Context, Job, NoParams, Policy, Reconcile, Result};

/// Spins forever.
pub struct InfiniteLoop;

policyhost_sdk::export!(InfiniteLoop);

/// Counts up forever; `black_box` keeps the loop from being optimised away.
fn spin() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = std::hint::black_box(counter.wrapping_add(1));
    }
}

impl Policy for InfiniteLoop {
    type Params = NoParams;

    fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        spin()
    }

    fn cleanup(_: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        spin()
    }
}
