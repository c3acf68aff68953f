//! Everything the operator writes for a DataJob: its children (create,
//! server-side apply and prune, of objects it controls only), its status,
//! its Events.

pub mod children;
pub mod dry_run;
pub mod events;
pub mod fields;
pub mod ownership;
mod slow_start;
pub mod status;

pub use events::Events;
