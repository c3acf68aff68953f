//! A policy whose `reconcile` asks for a `rbac.authorization.k8s.io/v1`
//! `ClusterRoleBinding` granting `cluster-admin` to the namespace's default
//! service account: a kind no policy allow-list should contain. The host must
//! refuse the whole result as `InvalidOutput`, naming the child and its kind,
//! and apply nothing.

use policyhost_sdk::{
    Child, Context, DesiredChild, Job, NoParams, Phase, Policy, Reconcile, Result, Status,
};
use serde_json::json;

/// Asks for cluster-admin.
pub struct ForbiddenKind;

policyhost_sdk::export!(ForbiddenKind);

impl Policy for ForbiddenKind {
    type Params = NoParams;

    fn reconcile(job: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let name = format!("{}-escalate", job.name);
        let manifest = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": "default", "namespace": job.namespace }],
        });
        let child = DesiredChild::from_manifest(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            name,
            &manifest,
        )?;
        Ok(Reconcile::new(Status::new(Phase::Pending)).child(child))
    }
}
