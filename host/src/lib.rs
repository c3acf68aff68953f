//! policyhost: a Kubernetes operator that runs per-object reconcile and cleanup
//! logic as sandboxed WebAssembly components.

pub mod allocator;
pub mod apply;
pub mod asks;
pub mod cache;
pub mod chain;
pub mod controller;
pub mod crd;
pub mod data_keys;
pub mod fair;
pub mod finalizer;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod grants;
pub mod leader;
pub mod metrics;
pub mod oci;
pub mod operator;
pub mod outbound;
pub mod policies;
pub mod projection;
pub mod publisher;
pub mod quantity;
pub mod queue;
pub mod runtime;
pub mod server;
pub mod shadow;
pub mod shard;
pub mod throttle;
pub mod tls;
pub mod traces;
pub mod vocabulary;
pub mod watch;

pub use runtime::{Policy, Runtime};
