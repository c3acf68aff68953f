//! A policy whose `reconcile` asks for a `v1` `Namespace` `<job>-ns`: a
//! cluster-scoped kind, which cannot live in the DataJob's namespace and
//! would outlive every team's boundaries. The host must refuse it wherever
//! it meets it: as a `--child-kind` at operator start, in a policy's
//! `allowedKinds` at load, and in a result (`InvalidOutput`, nothing applied).

use policyhost_sdk::{
    Child, Context, DesiredChild, Job, NoParams, Phase, Policy, Reconcile, Result, Status,
};
use serde_json::json;

/// Asks for a Namespace.
pub struct ClusterScoped;

policyhost_sdk::export!(ClusterScoped);

impl Policy for ClusterScoped {
    type Params = NoParams;

    fn reconcile(job: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let name = format!("{}-ns", job.name);
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name },
        });
        let child = DesiredChild::from_manifest("v1", "Namespace", name, &manifest)?;
        Ok(Reconcile::new(Status::new(Phase::Pending)).child(child))
    }
}
