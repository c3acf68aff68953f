//! A policy whose `reconcile` asks for a well-formed Pod whose manifest sets
//! `metadata.namespace` to another namespace than the DataJob's (`kube-system`,
//! or `default` for a DataJob in `kube-system`). The host decides where
//! children go: it must refuse the whole result as `InvalidOutput`, naming the
//! child and the namespace rule, and apply nothing.

use policyhost_sdk::{
    Child, Context, DesiredChild, Job, NoParams, Phase, Policy, Reconcile, Result, Status,
};
use serde_json::json;

/// Aims a child at another namespace.
pub struct ForeignNamespace;

policyhost_sdk::export!(ForeignNamespace);

impl Policy for ForeignNamespace {
    type Params = NoParams;

    fn reconcile(job: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let target = if job.namespace == "kube-system" {
            "default"
        } else {
            "kube-system"
        };
        let name = format!("{}-intruder", job.name);
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "namespace": target },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox:1.36" }],
            },
        });
        let child = DesiredChild::from_manifest("v1", "Pod", name, &manifest)?;
        Ok(Reconcile::new(Status::new(Phase::Pending)).child(child))
    }
}
