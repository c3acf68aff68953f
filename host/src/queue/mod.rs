//! The work queue between watch events and reconcile workers: keys are
//! deduplicated, never worked on twice at once, delayed on request, and backed
//! off exponentially when they fail.

mod backoff;
mod cause;
mod work_queue;

pub use backoff::Backoff;
pub use cause::Cause;
pub use work_queue::{Lease, Stats, WorkQueue};
