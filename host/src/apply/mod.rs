//! Everything the operator writes for a DataJob: its children (server-side
//! apply and prune), its status, its Events.

pub mod children;
pub mod events;
pub mod status;

pub use children::FIELD_MANAGER;
pub use events::Events;
