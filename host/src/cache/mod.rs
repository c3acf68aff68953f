//! The operator's indexed in-memory cache: slim projections of watched objects,
//! looked up through secondary indexes instead of scans.
//!
//! Lesson one of the design: never scan, always index. A reconcile finds a
//! DataJob's children with one hash lookup in the owner index, however many
//! other objects the cluster holds, and the cache only ever holds objects the
//! operator watches (its own children, selected by label).
//!
//! Reconciles read children through the [`Children`] trait, so that the
//! benchmarks can measure this design against the anti-pattern it avoids
//! (every object of each child kind, whole, scanned) without the product
//! carrying it.

mod children;
mod foreign;
mod key;
mod records;
mod store;

pub use children::{ChildCache, ChildCaches, Children};
pub use foreign::Foreign;
pub use key::{ObjectKey, OwnerKey};
pub use records::{ChildRecord, Owner, controlling_datajob, owner_key_of, slim_data_job};
pub use store::{Cached, Change, Event, Index, IndexValue, Scope, Store, StoreBuilder};
