//! Where policies come from and which version of each is in service.

pub mod dir;
mod registry;

pub use registry::{Entry, Registry, Rejection, Unavailable};
