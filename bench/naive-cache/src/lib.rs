//! The anti-pattern the design exists to avoid, kept out of the product as
//! the baseline the benchmarks measure it against: every object of each
//! child kind watched without a selector, cached whole, and a DataJob's
//! children found by scanning them all.
//!
//! It plugs into the operator as its [`Children`](policyhost::cache::Children)
//! through [`watch::CACHING`]; everything else (queue, reconcile, apply,
//! status) is the operator's own, so a comparison isolates the cache. The
//! binary `naive-operator` is `policyhost run` built on it.

pub mod cache;
pub mod watch;

pub use cache::{FullObject, NaiveCache, NaiveCaches};
