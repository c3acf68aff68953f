//! The peers of the benchmarks: `bench/peers/`, the `fanout` policy as a
//! controller-runtime operator, checked and built as every Go program of
//! the repository is ([`crate::go_program`]) into `<target>/kube/peers/peers`.
//!
//! It shares Go's module and build caches with the control plane's build
//! (the same `k8s.io` modules, v0.37.2, built with the same `-trimpath`), so
//! only controller-runtime and the peers' own package are compiled on top
//! of it.
//!
//! The binary has a directory of its own, not `<target>/kube/bin`: the test
//! run spares the programs there after its real pass, while the control plane
//! is still up, and a peers process a test left behind must be named then.

use std::path::PathBuf;

use crate::go_program::GoProgram;
use crate::target_dir;

fn program() -> GoProgram {
    GoProgram {
        module: "bench/peers",
        name: "peers",
        dir: target_dir().join("kube").join("peers"),
        also: String::new(),
    }
}

/// Checks and builds the peers unless the stamp says the binary is current.
pub fn build() -> Result<PathBuf, String> {
    program().build()
}
