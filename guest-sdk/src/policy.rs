//! The `Policy` trait and the `export!` macro that turns it into a component.
//!
//! ```
//! use policyhost_sdk::{Child, Cleanup, Context, Job, NoParams, Phase, Policy, PolicyError, Reconcile, Status, Result};
//!
//! /// Succeeds at once and cleans up at once.
//! pub struct Noop;
//!
//! impl Policy for Noop {
//!     type Params = NoParams;
//!
//!     fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
//!         Ok(Reconcile::new(Status::new(Phase::Succeeded)))
//!     }
//!
//!     fn cleanup(_: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
//!         Ok(Cleanup::Done)
//!     }
//! }
//!
//! policyhost_sdk::export!(Noop);
//! ```

use serde::de::DeserializeOwned;

use crate::{Child, Cleanup, Context, Job, PolicyError, Reconcile};

/// `Params` for a policy that takes none: accepts and ignores any `spec.params`.
pub type NoParams = serde::de::IgnoredAny;

/// What a policy's function answers: its result, or the [`PolicyError`]
/// that stands for one (as `std::io::Result` stands for I/O's).
pub type Result<T, E = PolicyError> = core::result::Result<T, E>;

/// A DataJob policy: how a DataJob's children and status follow from its
/// spec, its current children and the time.
///
/// Both functions must be pure: the same inputs give the same result, time
/// comes only from [`Context::now_unix_ms`], and nothing survives between
/// calls (each runs in a fresh instance). Make the result a function of the
/// children the host hands over, never of what an earlier call returned.
///
/// Export the type with [`export!`](crate::export).
pub trait Policy {
    /// `spec.params`, deserialized with serde. A value that does not fit makes
    /// the call fail with [`PolicyError::InvalidParams`] naming the field,
    /// before `reconcile` runs.
    type Params: DeserializeOwned;

    /// Computes the desired children and status of a live DataJob.
    ///
    /// `children` are the DataJob's current children, sorted by kind and name.
    /// Every child missing from the result is deleted by the host.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Failed`] for a failure worth retrying,
    /// [`PolicyError::InvalidParams`] for a spec that cannot work.
    fn reconcile(
        job: &Job,
        params: Self::Params,
        children: &[Child],
        ctx: &Context,
    ) -> Result<Reconcile>;

    /// Decides whether a DataJob being deleted can go; called until it returns
    /// [`Cleanup::Done`].
    ///
    /// It must be idempotent: after a crash the host may call it again, even
    /// after it returned `Done`; [`Context::attempt`] counts the attempts. Params
    /// are not parsed for it (a DataJob with bad params must still be
    /// deletable); read them with [`Job::params`] if needed.
    ///
    /// The default waits until no child is pending or running, retrying every
    /// two seconds.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Failed`]: the host keeps its finalizer and retries with
    /// backoff, within the DataJob's cleanup budget.
    fn cleanup(job: &Job, children: &[Child], ctx: &Context) -> Result<Cleanup> {
        let _ = (job, ctx);
        Ok(Cleanup::once_stopped(children, 2000))
    }
}

/// Parses the params and runs [`Policy::reconcile`]; what the host's call
/// runs inside the component, and what [`crate::testing`] runs natively.
///
/// # Errors
///
/// The policy's own errors, and [`PolicyError::InvalidParams`] for params that
/// do not deserialize.
pub fn run_reconcile<P: Policy>(job: &Job, children: &[Child], ctx: &Context) -> Result<Reconcile> {
    let params = job.params::<P::Params>()?;
    P::reconcile(job, params, children, ctx)
}

/// Runs [`Policy::cleanup`].
///
/// # Errors
///
/// The policy's own errors.
pub fn run_cleanup<P: Policy>(job: &Job, children: &[Child], ctx: &Context) -> Result<Cleanup> {
    P::cleanup(job, children, ctx)
}

/// Exports a [`Policy`] type as the component's `reconcile` and `cleanup`.
///
/// Put it once in the policy crate's `lib.rs` (crate type `cdylib`). It
/// expands to nothing outside WebAssembly, so the same source builds natively
/// for tests.
///
/// ```
/// # use policyhost_sdk::{Child, Context, Job, Phase, Policy, PolicyError, Reconcile, Status, Result};
/// pub struct Idle;
///
/// impl Policy for Idle {
///     type Params = serde_json::Value;
///
///     fn reconcile(_: &Job, _: serde_json::Value, _: &[Child], _: &Context)
///         -> Result<Reconcile>
///     {
///         Ok(Reconcile::new(Status::new(Phase::Succeeded)))
///     }
/// }
///
/// policyhost_sdk::export!(Idle);
/// ```
#[macro_export]
macro_rules! export {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
            struct __PolicyhostExport;

            impl $crate::__private::generated::Guest for __PolicyhostExport {
                fn reconcile(
                    job: $crate::__private::generated::policyhost::reconcile::types::DataJob,
                    children: ::std::vec::Vec<
                        $crate::__private::generated::policyhost::reconcile::types::Child,
                    >,
                    ctx: $crate::__private::generated::policyhost::reconcile::types::Context,
                ) -> ::core::result::Result<
                    $crate::__private::generated::policyhost::reconcile::types::ReconcileResult,
                    $crate::__private::generated::policyhost::reconcile::types::PolicyError,
                > {
                    $crate::__private::reconcile::<$policy>(job, children, ctx)
                }

                fn cleanup(
                    job: $crate::__private::generated::policyhost::reconcile::types::DataJob,
                    children: ::std::vec::Vec<
                        $crate::__private::generated::policyhost::reconcile::types::Child,
                    >,
                    ctx: $crate::__private::generated::policyhost::reconcile::types::Context,
                ) -> ::core::result::Result<
                    $crate::__private::generated::policyhost::reconcile::types::CleanupResult,
                    $crate::__private::generated::policyhost::reconcile::types::PolicyError,
                > {
                    $crate::__private::cleanup::<$policy>(job, children, ctx)
                }
            }

            $crate::__private::generated::__export_datajob_policy!(
                __PolicyhostExport with_types_in $crate::__private::generated
            );

            // What the host reads to tell which world this was built for.
            #[used]
            #[unsafe(link_section = "policyhost-sdk")]
            static __POLICYHOST_SDK: [u8; $crate::made_with::TEXT.len()] = $crate::made_with::BYTES;
        };
    };
}
