//! A policy whose `reconcile` reads a file with `std::fs` (params
//! `{"path": "/etc/hostname"}` by default) and reports its length; it imports
//! `wasi:filesystem/types`, `wasi:filesystem/preopens` and
//! `wasi:clocks/wall-clock` for that. The sandbox links the filesystem with
//! no preopened directory: the read fails and the call ends with the
//! guest's own `failed` error naming the path; `Succeeded` would mean a file
//! leaked in.

use policyhost_sdk::{Child, Context, Job, Phase, Policy, PolicyError, Reconcile, Result, Status};
use serde::Deserialize;

/// Reads a file.
pub struct FsRead;

policyhost_sdk::export!(FsRead);

/// `spec.params`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The file to read.
    #[serde(default = "default_path")]
    pub path: String,
}

fn default_path() -> String {
    "/etc/hostname".to_owned()
}

impl Policy for FsRead {
    type Params = Params;

    fn reconcile(_: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        match std::fs::read(&params.path) {
            Ok(bytes) => {
                Ok(Reconcile::new(Status::new(Phase::Succeeded).message(
                    format!("read {} bytes from {}", bytes.len(), params.path),
                )))
            }
            Err(error) => Err(PolicyError::failed_with(format!(
                "cannot read {}: {error}",
                params.path
            ))),
        }
    }
}
