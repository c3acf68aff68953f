//! A policy that recurses without bound. With params `{}` or
//! `{"mode": "wasm"}` each frame lives on the WebAssembly call stack only, so
//! the call ends with wasmtime's stack-overflow trap ("call stack
//! exhausted"); with `{"mode": "shadow"}` each frame also keeps 1 KiB on
//! Rust's shadow stack in linear memory, which overflows below address 0 and
//! traps as an out-of-bounds memory access. Either way the host must report a
//! `Trap`, stay up, and serve the next call.

use policyhost_sdk::{Child, Cleanup, Context, Job, Policy, PolicyError, Reconcile, Result};
use serde::Deserialize;

/// Recurses until the stack overflows.
pub struct DeepRecursion;

policyhost_sdk::export!(DeepRecursion);

/// Which stack to overflow.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// The WebAssembly call stack (the engine's stack limit).
    #[default]
    Wasm,
    /// The shadow stack in linear memory (the guest's `-zstack-size`).
    Shadow,
}

/// `spec.params`.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    /// Which stack to overflow.
    #[serde(default)]
    pub mode: Mode,
}

/// Recursion on the WebAssembly stack: the result of the inner call is used
/// after it returns, so the call cannot become a loop. `limit` comes from the
/// input and is never reached.
#[allow(clippy::only_used_in_recursion)]
fn dive(depth: u64, limit: u64) -> u64 {
    if depth == limit {
        return depth;
    }
    dive(depth + 1, limit).wrapping_mul(31).wrapping_add(depth)
}

/// Recursion that also keeps a 1 KiB buffer per frame in linear memory.
fn dive_shadow(depth: u64, limit: u64, parent: &[u8; 1024]) -> u64 {
    if depth == limit {
        return u64::from(parent[0]);
    }
    let mut frame = [0_u8; 1024];
    frame[(depth % 1024) as usize] = parent[((depth + 1) % 1024) as usize].wrapping_add(1);
    let inner = dive_shadow(depth + 1, limit, &frame);
    inner
        .wrapping_mul(31)
        .wrapping_add(u64::from(frame[(inner % 1024) as usize]))
}

fn overflow(mode: &Mode, job: &Job) -> PolicyError {
    // The limit depends on the input, so the optimiser cannot bound the depth.
    let limit = u64::MAX - job.generation;
    let result = match mode {
        Mode::Wasm => dive(0, limit),
        Mode::Shadow => dive_shadow(0, limit, &[0; 1024]),
    };
    PolicyError::failed_with(format!("recursion returned {result}"))
}

impl Policy for DeepRecursion {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        Err(overflow(&params.mode, job))
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        let params: Params = job.params()?;
        Err(overflow(&params.mode, job))
    }
}
