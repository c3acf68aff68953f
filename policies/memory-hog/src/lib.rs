//! A policy whose `reconcile` and `cleanup` allocate 1 MiB chunks, touch a
//! byte in each and keep them all, until an allocation fails. The linear
//! memory grows without bound; the host's memory limiter must refuse the
//! growth at the policy's cap, the call must end as `MemoryLimitExceeded` (the
//! guest aborts on the failed allocation), and the host's own memory must stay
//! bounded by the cap.

use policyhost_sdk::{Child, Cleanup, Context, Job, NoParams, Policy, Reconcile, Result};

/// Grows memory until refused.
pub struct MemoryHog;

policyhost_sdk::export!(MemoryHog);

const CHUNK: usize = 1 << 20;

fn hog() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0_u8; CHUNK];
        chunk[chunks.len() % CHUNK] = 1;
        chunks.push(std::hint::black_box(chunk));
    }
}

impl Policy for MemoryHog {
    type Params = NoParams;

    fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        hog()
    }

    fn cleanup(_: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        hog()
    }
}
