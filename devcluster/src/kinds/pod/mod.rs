//! Pods: what they are made of (their merge schema, which workloads' Pod
//! templates share), scheduler and container defaults (on every write),
//! admission, a spec that updates may barely change, graceful deletion by
//! the kubelet, and the columns `kubectl get pods` prints.

mod defaults;
mod update;

use std::sync::Arc;

use serde_json::{Value, json};

use super::claim::release_claims_of;
use super::immutable_spec;
use crate::object::Stored;
use crate::rand::Rng;
use crate::resource::{Registry, ResourceType, Strategy};
use crate::schema::Node;
use crate::schema::Strategy as MergeStrategy;
use crate::schema::build::{
    Obj, atomic_merged_by, by_name, keyed, keyed_with, metadata, obj, root,
};
use crate::status::Result;
use crate::store::Txn;
use crate::table::PrinterColumn;

/// The Pod strategy.
#[derive(Debug)]
pub(crate) struct Pods;

/// kube-apiserver's default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE: i64 = 30;

impl Strategy for Pods {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        defaults::spec(body);
        body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        Ok(())
    }

    fn admit_create(&self, body: &mut Value) {
        defaults::admission(body);
    }

    /// kube-apiserver defaults every object it decodes or applies, so a field
    /// an update or an apply leaves out takes its default again.
    fn prepare_for_update(&self, _old: &Value, new: &mut Value) {
        defaults::spec(new);
    }

    fn validate_update(&self, rt: &ResourceType, old: &Value, new: &Value) -> Result<()> {
        if let Some((field, refusal)) = update::forbidden_change(old, new) {
            return Err(immutable_spec(rt, old, field, refusal));
        }
        Ok(())
    }

    /// Pods on a node terminate gracefully: the kubelet stops them, then deletes them with
    /// a zero grace period.
    fn deletion_grace(&self, pod: &Value, requested: Option<i64>) -> Option<i64> {
        if !pod["spec"]["nodeName"].is_string() {
            return None;
        }
        let grace = requested
            .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(DEFAULT_GRACE);
        Some(grace.max(0))
    }

    /// kube-apiserver stores a Pod as deleting (a MODIFIED event) before it removes it,
    /// even with no grace left.
    fn marks_before_removal(&self) -> bool {
        true
    }

    /// A finished Pod no longer holds the claims it mounts.
    fn after_write(
        &self,
        txn: &mut Txn<'_>,
        _registry: &Registry,
        _rt: &ResourceType,
        stored: &Arc<Stored>,
    ) -> Result<()> {
        release_claims_of(txn, stored, false);
        Ok(())
    }

    /// A Pod gone no longer holds the claims it mounted.
    fn after_remove(&self, txn: &mut Txn<'_>, _registry: &Registry, gone: &Arc<Stored>) {
        release_claims_of(txn, gone, true);
    }
}

/// What `kubectl get pods` prints after the name.
pub(super) const COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::computed(
        "Ready",
        "The aggregate readiness state of this pod for accepting traffic.",
        ready,
    ),
    PrinterColumn::computed(
        "Status",
        "The aggregate status of the containers in this pod.",
        status,
    ),
    PrinterColumn::computed(
        "Restarts",
        "The number of times the containers in this pod have been restarted.",
        restarts,
    ),
    PrinterColumn::AGE,
    PrinterColumn::path("IP", "IP address allocated to the pod.", ".status.podIP").wide(),
    PrinterColumn::path(
        "Node",
        "Name of the Node this pod is assigned to.",
        ".spec.nodeName",
    )
    .wide(),
];

/// Ready containers of all: `1/2`.
fn ready(v: &Value) -> Value {
    let total = v["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = v["status"]["containerStatuses"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|s| s["ready"] == true).count());
    json!(format!("{ready}/{total}"))
}

/// The status kubectl shows: a container's waiting or terminated reason,
/// else the phase.
fn status(v: &Value) -> Value {
    if !v["metadata"]["deletionTimestamp"].is_null() {
        return json!("Terminating");
    }
    let finished = matches!(v["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    for c in v["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(r) = c["state"]["waiting"]["reason"].as_str() {
            return json!(r);
        }
        if let Some(r) = c["state"]["terminated"]["reason"].as_str()
            && !finished
        {
            return json!(r);
        }
    }
    json!(match v["status"]["phase"].as_str() {
        Some("Succeeded") => "Completed",
        Some("Failed") => "Error",
        Some(p) => p,
        None => "Unknown",
    })
}

/// The containers' restarts, summed.
fn restarts(v: &Value) -> Value {
    let restarts: i64 = v["status"]["containerStatuses"].as_array().map_or(0, |a| {
        a.iter().filter_map(|s| s["restartCount"].as_i64()).sum()
    });
    json!(restarts.to_string())
}

fn resource_requirements() -> Obj {
    let claims = keyed_with(&[("name", None)], MergeStrategy::Replace, Node::Untyped);
    obj().field("claims", claims)
}

fn container() -> Node {
    let ports = keyed(
        &[("containerPort", None), ("protocol", Some("TCP"))],
        Node::Untyped,
    );
    obj()
        .field("ports", ports)
        .field("env", by_name(Node::Untyped))
        .field("volumeMounts", keyed(&[("mountPath", None)], Node::Untyped))
        .field(
            "volumeDevices",
            keyed(&[("devicePath", None)], Node::Untyped),
        )
        .embedded("resources", resource_requirements())
        .build()
}

fn pod_spec() -> Obj {
    let spread = obj().field("labelSelector", Node::Atomic).build();
    obj()
        .always("containers", by_name(container()))
        .field("initContainers", by_name(container()))
        .field("ephemeralContainers", by_name(container()))
        .field("volumes", by_name(Node::Untyped))
        .field("imagePullSecrets", by_name(Node::Untyped))
        .field("hostAliases", keyed(&[("ip", None)], Node::Untyped))
        .field(
            "topologySpreadConstraints",
            keyed(
                &[("topologyKey", None), ("whenUnsatisfiable", None)],
                spread,
            ),
        )
        .field("schedulingGates", by_name(Node::Untyped))
        .field("resourceClaims", by_name(Node::Untyped))
        .field("nodeSelector", Node::Atomic)
        .field("resources", resource_requirements().build())
}

fn pod_status() -> Obj {
    obj()
        .field("conditions", keyed(&[("type", None)], Node::Untyped))
        .field("hostIPs", atomic_merged_by("ip"))
        .field("podIPs", keyed(&[("ip", None)], Node::Untyped))
        .field("resourceClaimStatuses", by_name(Node::Untyped))
}

/// A `PodTemplateSpec`, which workloads embed.
pub(super) fn template() -> Obj {
    obj()
        .embedded("metadata", metadata())
        .embedded("spec", pod_spec())
}

/// A Pod's merge schema.
pub(super) fn merge() -> Obj {
    root()
        .embedded("spec", pod_spec())
        .embedded("status", pod_status())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ListKind, ListNode, Schema};

    #[test]
    fn only_pods_on_a_node_have_a_grace_period() {
        let unbound = json!({"spec": {}});
        assert_eq!(Pods.deletion_grace(&unbound, Some(5)), None);
        let bound = json!({"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 7}});
        assert_eq!(Pods.deletion_grace(&bound, None), Some(7));
        assert_eq!(Pods.deletion_grace(&bound, Some(2)), Some(2));
        assert_eq!(Pods.deletion_grace(&bound, Some(-3)), Some(0));
        let defaulted = json!({"spec": {"nodeName": "n"}});
        assert_eq!(Pods.deletion_grace(&defaulted, None), Some(DEFAULT_GRACE));
    }

    #[test]
    fn pod_rows_show_ready_and_status() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 0, "state": {"running": {}}}]}
        });
        let row = crate::table::row(COLUMNS, &pod, Value::Null);
        let cells = row["cells"].as_array().expect("cells");
        assert_eq!(cells[..3], [json!("1/1"), json!("Running"), json!("0")]);
    }

    fn list_at<'a>(schema: &'a Schema, path: &[&str]) -> &'a ListNode {
        let node = path
            .iter()
            .fold(&schema.root, |node, key| node.child(key).node);
        node.list().expect("a described list")
    }

    fn pods() -> Schema {
        Schema::new(merge().build(), true, true)
    }

    #[test]
    fn container_ports_are_keyed_by_port_and_defaulted_protocol() {
        let pod = pods();
        let containers = list_at(&pod, &["spec", "containers"]);
        let ports = containers.item.child("ports").node.list().expect("ports");
        let ListKind::Map(keys) = &ports.kind else {
            panic!("ports are a map list")
        };
        assert_eq!(keys[0].name, "containerPort");
        assert_eq!(keys[1].default, Some(Value::String("TCP".into())));
        assert!(matches!(
            &ports.strategy,
            MergeStrategy::Merge { key: Some(k) } if k == "containerPort"
        ));
    }

    #[test]
    fn finalizers_are_a_set_and_tolerations_are_replaced() {
        let pod = pods();
        let finalizers = list_at(&pod, &["metadata", "finalizers"]);
        assert!(matches!(finalizers.kind, ListKind::Set));
        assert!(matches!(
            finalizers.strategy,
            MergeStrategy::Merge { key: None }
        ));
        let spec = pod.root.child("spec").node;
        assert!(spec.child("tolerations").node.list().is_none());
    }
}
