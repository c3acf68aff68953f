//! A policy whose `reconcile` asks for the ConfigMap `<job>-twin` twice,
//! with different data: applied in turn, each would undo the other on every
//! reconcile. The host must refuse the whole result as `InvalidOutput`,
//! naming the second child and the first, and apply nothing.

use policyhost_sdk::{
    Child, Context, DesiredChild, Job, NoParams, Phase, Policy, Reconcile, Result, Status,
};
use serde_json::json;

/// Names one object twice.
pub struct DuplicateChildren;

policyhost_sdk::export!(DuplicateChildren);

impl Policy for DuplicateChildren {
    type Params = NoParams;

    fn reconcile(job: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let name = format!("{}-twin", job.name);
        let twin = |side: &str| {
            let manifest = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": name },
                "data": { "side": side },
            });
            DesiredChild::from_manifest("v1", "ConfigMap", &name, &manifest)
        };
        Ok(Reconcile::new(Status::new(Phase::Running)).children([twin("left")?, twin("right")?]))
    }
}
