//! A policy whose `reconcile` returns a ConfigMap child whose manifest string
//! is cut off mid-object, so it is not JSON. The host must refuse the whole
//! result as `InvalidOutput`, naming the child and saying its manifest is not
//! JSON, and apply nothing; the native harness reports the same error.

use policyhost_sdk::{
    Child, Context, DesiredChild, Job, NoParams, Phase, Policy, Reconcile, Result, Status,
};

/// Returns a broken manifest.
pub struct MalformedManifest;

policyhost_sdk::export!(MalformedManifest);

/// The manifest text it returns.
pub const BROKEN: &str = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "#;

impl Policy for MalformedManifest {
    type Params = NoParams;

    fn reconcile(job: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let child =
            DesiredChild::from_json("v1", "ConfigMap", format!("{}-broken", job.name), BROKEN);
        Ok(Reconcile::new(Status::new(Phase::Pending)).child(child))
    }
}
