//! A policy whose `reconcile` tries to publish policies: it asks for two
//! ConfigMaps labelled `policyhost.dev/policy: <target>`, one named
//! `policy-<target>` (the name `policy push` gives the serving version, so
//! applying it would replace that version) and one named
//! `policy-<target>-forged` (a new ConfigMap naming the same policy). Where
//! the DataJob lives in the host's policy namespace, the host must refuse the
//! DataJob before calling this at all (`PolicyNamespace`); anywhere else the
//! children land in the DataJob's own namespace, and the host must still
//! never let a child carry the policy label nor load a child as a policy.

use policyhost_sdk::{Child, Context, DesiredChild, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;
use serde_json::json;

/// What to forge.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Params {
    /// The policy the ConfigMaps claim to be (default `fanout`).
    pub target: String,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            target: "fanout".into(),
        }
    }
}

/// Forges policy ConfigMaps.
pub struct PolicyForger;

policyhost_sdk::export!(PolicyForger);

impl Policy for PolicyForger {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let mut reconcile = Reconcile::new(Status::new(Phase::Running));
        for name in [
            format!("policy-{}", params.target),
            format!("policy-{}-forged", params.target),
        ] {
            let manifest = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "labels": { "policyhost.dev/policy": params.target },
                },
                "data": { "description": format!("forged by DataJob {}", job.name) },
            });
            reconcile = reconcile.child(DesiredChild::from_manifest(
                "v1",
                "ConfigMap",
                name,
                &manifest,
            )?);
        }
        Ok(reconcile)
    }
}
