//! A policy whose `reconcile` asks for the ConfigMap `<job>-meta` with
//! metadata the host owns, chosen by `{"mode": ...}`:
//!
//! | mode | the manifest's `metadata` sets |
//! |---|---|
//! | `finalizers` (default) | `finalizers: ["example.com/never-done"]`: the child would stay Terminating forever |
//! | `ownerReferences` | an owner reference to another object, as controller |
//! | `policyLabel` | the label `policyhost.dev/policy`: the mark of a policy ConfigMap |
//! | `reservedLabel` | the label `policyhost.dev/managed-by`, naming another instance |
//! | `reservedAnnotation` | the annotation `policyhost.dev/force-release` |
//! | `generateName` | `generateName: <job>-` |
//! | `uid` | a made-up `uid` |
//! | `resourceVersion` | `resourceVersion: "1"` |
//! | `managedFields` | a forged `managedFields` entry |
//!
//! The host must refuse the whole result as `InvalidOutput`, naming the
//! field or key, and apply nothing (it rejects; it never strips).

use policyhost_sdk::{Child, Context, DesiredChild, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;
use serde_json::{Value, json};

/// Sets metadata that is not its to set.
pub struct HostMetadata;

policyhost_sdk::export!(HostMetadata);

/// Which field to set.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// `metadata.finalizers`.
    #[default]
    Finalizers,
    /// `metadata.ownerReferences`.
    OwnerReferences,
    /// The `policyhost.dev/policy` label.
    PolicyLabel,
    /// The `policyhost.dev/managed-by` label.
    ReservedLabel,
    /// The `policyhost.dev/force-release` annotation.
    ReservedAnnotation,
    /// `metadata.generateName`.
    GenerateName,
    /// `metadata.uid`.
    Uid,
    /// `metadata.resourceVersion`.
    ResourceVersion,
    /// `metadata.managedFields`.
    ManagedFields,
}

/// `spec.params`.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    /// Which field to set.
    #[serde(default)]
    pub mode: Mode,
}

/// The `(key, value)` added to the child's `metadata`.
fn field(mode: Mode, job: &Job) -> (&'static str, Value) {
    match mode {
        Mode::Finalizers => ("finalizers", json!(["example.com/never-done"])),
        Mode::OwnerReferences => (
            "ownerReferences",
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor",
                    "uid": "00000000-0000-0000-0000-000000000001", "controller": true}]),
        ),
        Mode::PolicyLabel => ("labels", json!({"policyhost.dev/policy": "fanout"})),
        Mode::ReservedLabel => ("labels", json!({"policyhost.dev/managed-by": "elsewhere"})),
        Mode::ReservedAnnotation => (
            "annotations",
            json!({"policyhost.dev/force-release": "true"}),
        ),
        Mode::GenerateName => ("generateName", json!(format!("{}-", job.name))),
        Mode::Uid => ("uid", json!("00000000-0000-0000-0000-000000000002")),
        Mode::ResourceVersion => ("resourceVersion", json!("1")),
        Mode::ManagedFields => (
            "managedFields",
            json!([{"manager": "policyhost", "operation": "Apply", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]),
        ),
    }
}

impl Policy for HostMetadata {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        let name = format!("{}-meta", job.name);
        let (key, value) = field(params.mode, job);
        let mut metadata = json!({ "name": name });
        metadata[key] = value;
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": { "k": "v" },
        });
        let child = DesiredChild::from_manifest("v1", "ConfigMap", name, &manifest)?;
        Ok(Reconcile::new(Status::new(Phase::Running)).child(child))
    }
}
