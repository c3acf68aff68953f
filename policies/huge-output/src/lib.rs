//! A policy whose `reconcile` returns `children` ConfigMaps (default 100) of
//! `bytesPerChild` bytes of data each (default 1,000,000), about 100 MB in
//! all; params `{"children": N, "bytesPerChild": M}` aim it at either cap.
//! Below the memory cap the host must refuse the result as `OutputTooLarge`
//! (output bytes or children count) and apply nothing; above it the call must
//! end as `MemoryLimitExceeded` while the guest builds the output.

use policyhost_sdk::{Child, Context, DesiredChild, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;

/// Returns as much output as asked for.
pub struct HugeOutput;

policyhost_sdk::export!(HugeOutput);

/// `spec.params`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Params {
    /// How many ConfigMaps to return.
    #[serde(default = "default_children")]
    pub children: u32,
    /// How many bytes of data each carries.
    #[serde(default = "default_bytes")]
    pub bytes_per_child: u32,
}

fn default_children() -> u32 {
    100
}

fn default_bytes() -> u32 {
    1_000_000
}

impl Policy for HugeOutput {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let blob = "x".repeat(params.bytes_per_child as usize);
        let children = (0..params.children).map(|i| {
            let name = format!("{}-blob-{i}", job.name);
            let manifest = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"blob":"{blob}"}}}}"#
            );
            DesiredChild::from_json("v1", "ConfigMap", name, manifest)
        });
        let status = Status::new(Phase::Running).message(format!(
            "{} ConfigMaps of {} bytes",
            params.children, params.bytes_per_child
        ));
        Ok(Reconcile::new(status).children(children))
    }
}
