//! devcluster integration tests: the conformance suite driven by kube-rs, and the same
//! scenarios driven by the real `kubectl`.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test by panicking"
)]

mod apply;
mod common;
mod crud;
mod differential;
mod executable;
mod faults;
mod finalizers;
mod gc;
mod kubectl;
mod pods;
mod reads;
mod status;
mod watch;
