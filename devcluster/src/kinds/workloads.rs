//! Deployments and Jobs: the kinds that hold a Pod template, and the
//! columns `kubectl get deployments` prints.

use serde_json::{Value, json};

use super::pod::template;
use crate::schema::Node;
use crate::schema::build::{Obj, atomic_merged_by, obj, root, set, spec_and_conditions};
use crate::table::PrinterColumn;

/// What `kubectl get deployments` prints after the name.
pub(super) const DEPLOYMENT_COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::computed(
        "Ready",
        "Number of the pod with ready state",
        ready_replicas,
    ),
    PrinterColumn::path(
        "Up-to-date",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
        ".status.updatedReplicas",
    ),
    PrinterColumn::path(
        "Available",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
        ".status.availableReplicas",
    ),
    PrinterColumn::AGE,
];

/// Ready replicas of those wanted: `2/3`.
fn ready_replicas(v: &Value) -> Value {
    json!(format!(
        "{}/{}",
        v["status"]["readyReplicas"].as_i64().unwrap_or(0),
        v["spec"]["replicas"].as_i64().unwrap_or(1)
    ))
}

/// A Deployment's merge schema.
pub(super) fn deployment() -> Obj {
    let spec = obj()
        .field("selector", Node::Atomic)
        .embedded("template", template())
        .embedded("strategy", obj());
    spec_and_conditions(spec)
}

/// A Job's merge schema.
pub(super) fn job() -> Obj {
    let spec = obj()
        .field("selector", Node::Atomic)
        .embedded("template", template());
    let uncounted = obj()
        .field("succeeded", set(false))
        .field("failed", set(false))
        .build();
    let status = obj()
        .field("conditions", atomic_merged_by("type"))
        .field("uncountedTerminatedPods", uncounted);
    root().embedded("spec", spec).embedded("status", status)
}

#[cfg(test)]
mod tests {
    use crate::schema::{ListKind, Strategy as MergeStrategy};

    #[test]
    fn pod_template_containers_merge_by_name_in_deployments_and_jobs() {
        for (group, kind) in [("apps", "Deployment"), ("batch", "Job")] {
            let schema = super::super::schema(group, "v1", kind).expect("built in");
            let containers = ["spec", "template", "spec", "containers"]
                .iter()
                .fold(&schema.root, |node, key| node.child(key).node)
                .list()
                .expect("containers");
            assert!(matches!(
                &containers.strategy,
                MergeStrategy::Merge { key: Some(k) } if k == "name"
            ));
            let env = containers.item.child("env").node.list().expect("env");
            assert!(matches!(&env.kind, ListKind::Map(keys) if keys[0].name == "name"));
        }
    }
}
