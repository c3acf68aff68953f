//! Write policyhost DataJob policies in Rust and compile them to WebAssembly
//! components.
//!
//! A policy is one type implementing [`Policy`] plus one [`export!`] line. The
//! host calls `reconcile` for a live DataJob and `cleanup` for one being
//! deleted, each time in a fresh sandboxed instance, handing over the DataJob,
//! its current children and a [`Context`]. The policy answers with the desired
//! children and status ([`Reconcile`]) or whether cleanup is finished
//! ([`Cleanup`]).
//!
//! - [`build`]: builders for Pods, ConfigMaps, Services and batch Jobs.
//! - [`status`]: counting children, deriving a phase, conditions and events.
//! - [`log`]: log lines that end up in the host's log.
//! - [`http`]: requests to the origins the platform team granted (cleanup
//!   of what lives outside the cluster).
//! - [`testing`] (native only): run a policy under `cargo test`.
//!
//! ```
//! use policyhost_sdk::{Child, Cleanup, Context, Job, Phase, Policy, PolicyError, Reconcile, Status, Result};
//! use policyhost_sdk::build::{Container, Pod};
//!
//! /// Runs one Pod per DataJob.
//! pub struct Single;
//!
//! /// `spec.params` of a DataJob using this policy.
//! #[derive(serde::Deserialize)]
//! pub struct Params {
//!     image: String,
//! }
//!
//! impl Policy for Single {
//!     type Params = Params;
//!
//!     fn reconcile(job: &Job, params: Params, children: &[Child], _ctx: &Context)
//!         -> Result<Reconcile>
//!     {
//!         let pod = Pod::new(format!("{}-main", job.name))
//!             .container(Container::new("main", params.image))
//!             .build()?;
//!         let phase = if children.is_empty() { Phase::Pending } else { Phase::Running };
//!         Ok(Reconcile::new(Status::new(phase)).child(pod))
//!     }
//!
//!     fn cleanup(_job: &Job, _children: &[Child], _ctx: &Context) -> Result<Cleanup> {
//!         Ok(Cleanup::Done)
//!     }
//! }
//!
//! policyhost_sdk::export!(Single);
//! # fn main() {}
//! ```

// The generated glue refers to this crate as `::policyhost_sdk`, also from inside it.
#[cfg(target_arch = "wasm32")]
extern crate self as policyhost_sdk;

#[cfg(any(
    test,
    feature = "fuzzing",
    all(target_arch = "wasm32", feature = "allocator")
))]
mod alloc;
pub mod build;
mod child;
mod context;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod http;
mod job;
pub mod log;
pub mod made_with;
mod policy;
mod result;
pub mod status;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use child::{Child, ChildPhase};
pub use context::Context;
pub use error::PolicyError;
pub use job::{Job, KeyValue};
pub use policy::{NoParams, Policy, Result, run_cleanup, run_reconcile};
pub use result::{Cleanup, Condition, DesiredChild, Event, Phase, Reconcile, Status};

/// Not part of the public API: what [`export!`] expands to.
#[doc(hidden)]
pub mod __private {
    pub use crate::policy::{run_cleanup, run_reconcile};

    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen;

    #[cfg(target_arch = "wasm32")]
    #[allow(
        missing_docs,
        unsafe_code,
        unreachable_pub,
        clippy::all,
        clippy::unwrap_used
    )]
    pub mod generated {
        include!("generated.rs");
    }

    #[cfg(target_arch = "wasm32")]
    pub use crate::glue::{cleanup, reconcile};
}

#[cfg(target_arch = "wasm32")]
mod glue;
