//! policyhost: a Kubernetes operator that runs per-object reconcile and cleanup
//! logic as sandboxed WebAssembly components.

pub mod cache;
pub mod chain;
pub mod crd;
pub mod metrics;
pub mod policies;
pub mod projection;
pub mod queue;
pub mod runtime;
pub mod server;
pub mod throttle;

pub use runtime::{Policy, Runtime};
