//! PersistentVolumeClaims: a file system by default, `Pending` until a
//! volume binds them (devcluster binds none, as a cluster without a
//! provisioner), a spec an update may not change, the protection finalizer
//! admission adds, which the garbage collector releases once no Pod of the
//! namespace uses the claim (`crate::gc`), and the columns `kubectl get pvc`
//! prints.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{immutable_spec, set_default};
use crate::object::{GroupResource, ObjectKey, Stored, md};
use crate::rand::Rng;
use crate::resource::{ResourceType, Strategy};
use crate::schema::Node;
use crate::schema::build::{Obj, obj, spec_and_conditions};
use crate::status::Result;
use crate::store::{GcWork, Txn};
use crate::table::PrinterColumn;

/// The finalizer of the `StorageObjectInUseProtection` admission plugin.
pub(crate) const CLAIM_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The claims a Pod's volumes name.
fn claims_of(pod: &Value) -> impl Iterator<Item = &str> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|volume| volume["persistentVolumeClaim"]["claimName"].as_str())
}

/// Whether a Pod has finished: it no longer holds what it mounts.
fn finished(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// A Pod, parsed, if its JSON names a claim at all: most Pods mount none,
/// and a Pod write must not pay a parse to learn it.
fn mounting(pod: &Stored) -> Option<Value> {
    if !pod.mentions(b"\"persistentVolumeClaim\"") {
        return None;
    }
    pod.value().ok()
}

/// Whether a Pod of `namespace` that is not finished names claim `name`.
pub(crate) fn in_use(txn: &Txn<'_>, namespace: &str, name: &str) -> bool {
    let pods = GroupResource::new("", "pods");
    txn.in_namespace(namespace)
        .into_iter()
        .filter(|(gr, _)| *gr == pods)
        .filter_map(|(gr, key)| txn.get(&gr, &key).and_then(|pod| mounting(&pod)))
        .any(|pod| !finished(&pod) && claims_of(&pod).any(|claim| claim == name))
}

/// Queues for the collector the claims `pod` mounts once it no longer
/// holds them (it is `gone`, or finished): a deleting one may go now.
pub(super) fn release_claims_of(txn: &mut Txn<'_>, pod: &Arc<Stored>, gone: bool) {
    let Some(value) = mounting(pod) else {
        return;
    };
    if !gone && !finished(&value) {
        return;
    }
    let claims = GroupResource::new("", "persistentvolumeclaims");
    for claim in claims_of(&value) {
        let key = ObjectKey::new(&pod.meta.namespace, claim);
        txn.queue_gc(GcWork::Object(claims.clone(), key));
    }
}

/// The message kube-apiserver gives (before its diff of the two specs).
const FORBIDDEN: &str = "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// The PersistentVolumeClaim strategy.
#[derive(Debug)]
pub(super) struct PersistentVolumeClaims;

impl Strategy for PersistentVolumeClaims {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        defaults(body);
        body["status"] = json!({"phase": "Pending"});
        Ok(())
    }

    fn admit_create(&self, body: &mut Value) {
        let finalizers = md(body).entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == CLAIM_PROTECTION)
        {
            list.push(json!(CLAIM_PROTECTION));
        }
    }

    /// kube-apiserver defaults every object it decodes or applies.
    fn prepare_for_update(&self, _old: &Value, new: &mut Value) {
        defaults(new);
    }

    fn validate_update(&self, rt: &ResourceType, old: &Value, new: &Value) -> Result<()> {
        let bound = old["status"]["phase"] == "Bound";
        if comparable(&old["spec"], bound) != comparable(&new["spec"], bound) {
            return Err(immutable_spec(rt, old, "spec", FORBIDDEN));
        }
        Ok(())
    }
}

/// `spec` without what an update of a claim may change: a bound claim's
/// storage request (an expansion) and volume attributes class.
fn comparable(spec: &Value, bound: bool) -> Value {
    let mut spec = spec.clone();
    if bound && let Some(fields) = spec.as_object_mut() {
        fields.remove("volumeAttributesClassName");
        if let Some(requests) = fields
            .get_mut("resources")
            .and_then(|r| r.get_mut("requests"))
            .and_then(Value::as_object_mut)
        {
            requests.remove("storage");
        }
    }
    spec
}

/// A claim's defaults: a file system unless it asks for a block device.
fn defaults(body: &mut Value) {
    if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
}

/// What `kubectl get persistentvolumeclaims` prints after the name.
pub(super) const COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::computed(
        "Status",
        "phase represents the current phase of PersistentVolumeClaim.",
        status,
    ),
    PrinterColumn::path(
        "Volume",
        "volumeName is the binding reference to the PersistentVolume backing this claim.",
        ".spec.volumeName",
    ),
    PrinterColumn::computed(
        "Capacity",
        "capacity represents the actual resources of the underlying volume.",
        capacity,
    ),
    PrinterColumn::computed(
        "Access Modes",
        "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1",
        access_modes,
    ),
    PrinterColumn::computed("StorageClass", "StorageClass of the pvc", storage_class),
    PrinterColumn::computed(
        "VolumeAttributesClass",
        "VolumeAttributesClass of the pvc",
        attributes_class,
    ),
    PrinterColumn::AGE,
    PrinterColumn::computed(
        "VolumeMode",
        "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.",
        volume_mode,
    )
    .wide(),
];

/// The text at `value`, or `unset`.
fn text(value: &Value, unset: &str) -> Value {
    json!(value.as_str().unwrap_or(unset))
}

/// Whether a volume is bound: capacity and access modes show only then.
fn bound(v: &Value) -> bool {
    v["spec"]["volumeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
}

fn status(v: &Value) -> Value {
    if v["metadata"]["deletionTimestamp"].is_null() {
        text(&v["status"]["phase"], "")
    } else {
        json!("Terminating")
    }
}

fn capacity(v: &Value) -> Value {
    let storage = &v["status"]["capacity"]["storage"];
    text(if bound(v) { storage } else { &Value::Null }, "")
}

/// In this order whatever the claim's, as `GetAccessModesAsString`.
fn access_modes(v: &Value) -> Value {
    let modes = v["status"]["accessModes"].as_array().filter(|_| bound(v));
    let shown: Vec<&str> = [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.is_some_and(|modes| modes.iter().any(|m| m == mode)))
    .map(|(_, short)| *short)
    .collect();
    json!(shown.join(","))
}

fn storage_class(v: &Value) -> Value {
    text(&v["spec"]["storageClassName"], "")
}

fn attributes_class(v: &Value) -> Value {
    match v["spec"]["volumeAttributesClassName"].as_str() {
        Some(name) if !name.is_empty() => json!(name),
        _ => json!("<unset>"),
    }
}

fn volume_mode(v: &Value) -> Value {
    text(&v["spec"]["volumeMode"], "<unset>")
}

/// A claim's merge schema.
pub(super) fn merge() -> Obj {
    // `LabelSelector` is `+structType=atomic`; `accessModes` are atomic lists.
    let spec = obj()
        .field("selector", Node::Atomic)
        .embedded("resources", obj());
    spec_and_conditions(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bound_claim_may_grow() {
        let claim = |storage: &str| json!({"resources": {"requests": {"storage": storage}}, "accessModes": ["ReadWriteOnce"]});
        assert_ne!(
            comparable(&claim("1Gi"), false),
            comparable(&claim("2Gi"), false)
        );
        assert_eq!(
            comparable(&claim("1Gi"), true),
            comparable(&claim("2Gi"), true)
        );
        let mut other_mode = claim("1Gi");
        other_mode["accessModes"] = json!(["ReadWriteMany"]);
        assert_ne!(
            comparable(&claim("1Gi"), true),
            comparable(&other_mode, true)
        );
    }

    #[test]
    fn claim_rows_show_capacity_and_access_only_once_bound() {
        let mut claim = json!({
            "metadata": {"name": "scratch", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}
        });
        let cells = |claim: &Value| crate::table::row(COLUMNS, claim, Value::Null)["cells"].clone();
        let pending = cells(&claim);
        assert_eq!(pending[0], "Pending");
        assert_eq!((&pending[2], &pending[3]), (&json!(""), &json!("")));
        assert_eq!((&pending[4], &pending[5]), (&json!(""), &json!("<unset>")));
        assert_eq!(pending[7], "Filesystem");
        claim["spec"]["volumeName"] = json!("pv-1");
        claim["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                                 "capacity": {"storage": "2Gi"}});
        let bound = cells(&claim);
        assert_eq!((&bound[0], &bound[1]), (&json!("Bound"), &json!("pv-1")));
        assert_eq!((&bound[2], &bound[3]), (&json!("2Gi"), &json!("RWO,RWX")));
    }
}
