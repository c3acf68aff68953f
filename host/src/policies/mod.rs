//! Where policies come from and which version of each is in service:
//! ConfigMaps in the operator's namespace (hot-swapped, see [`source`]) and,
//! for development, a local directory ([`dir`]).

pub mod access;
pub mod configmap;
pub mod dir;
pub mod load;
pub mod pins;
pub mod provenance;
pub mod refusal;
mod registry;
pub mod report;
pub mod revisions;
pub mod rollout;
pub mod source;
pub mod tenancy;

pub use registry::{
    Caller, Change, Entry, Pinned, Registry, Rejection, Role, Slot, Unavailable, Version,
};
pub use source::ConfigMapSource;
