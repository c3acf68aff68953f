//! A policy whose `reconcile` asks for one ConfigMap named by its params
//! (`{"name": "settings", "data": {"k": "v"}}`), whoever holds that name: a
//! team's own ConfigMap, another DataJob's child. The host must refuse the
//! result (`ChildConflict`, with an Event naming the object and its
//! controller) unless the name is free or the object is this DataJob's own
//! child; nothing is adopted, changed or deleted. The `data` it asks for
//! lets a test drop a key the child was created with.

use std::collections::BTreeMap;

use policyhost_sdk::{Child, Context, DesiredChild, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;
use serde_json::json;

/// Claims a name it was given.
pub struct ClaimsName;

policyhost_sdk::export!(ClaimsName);

/// `spec.params`.
#[derive(Debug, Deserialize)]
pub struct Params {
    /// The ConfigMap's name.
    pub name: String,
    /// More data keys for the ConfigMap, beside `claimedBy`.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

impl Policy for ClaimsName {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let mut data = params.data;
        data.insert("claimedBy".into(), job.name.clone());
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": params.name },
            "data": data,
        });
        let child = DesiredChild::from_manifest("v1", "ConfigMap", &params.name, &manifest)?;
        Ok(Reconcile::new(Status::new(Phase::Running)).child(child))
    }
}
