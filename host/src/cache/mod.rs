//! The operator's indexed in-memory cache: slim projections of watched objects,
//! looked up through secondary indexes instead of scans.
//!
//! Lesson one of the design: never scan, always index. A reconcile finds a
//! DataJob's children with one hash lookup in the owner index, however many
//! other objects the cluster holds, and the cache only ever holds objects the
//! operator watches (its own children, selected by label).
//!
//! `naive` keeps the anti-pattern as a baseline to measure against
//! (`--cache naive`, feature `bench-baseline`): every object of each child
//! kind in full, scanned.

mod children;
mod foreign;
mod key;
#[cfg(feature = "bench-baseline")]
pub mod naive;
mod records;
mod store;

pub use children::{ChildCache, ChildCaches, Mode};
pub use foreign::Foreign;
pub use key::{ObjectKey, OwnerKey};
#[cfg(feature = "bench-baseline")]
pub use naive::{FullObject, NaiveCache};
pub use records::{ChildRecord, Owner, controlling_datajob, owner_key_of, slim_data_job};
pub use store::{Cached, Change, Event, Index, IndexValue, Scope, Store, StoreBuilder};
