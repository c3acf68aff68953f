//! Namespaces: the namespace controller's finalizer, the name label, a deletion that
//! always waits for the controller to empty the namespace, and their status column.

use serde_json::{Value, json};

use crate::object::{md, set_at};
use crate::rand::Rng;
use crate::resource::{ResourceType, Strategy};
use crate::schema::build::{Obj, obj, spec_and_conditions};
use crate::status::Result;
use crate::table::PrinterColumn;

/// The namespace controller's `spec.finalizers` entry.
pub(crate) const NAMESPACE_FINALIZER: &str = "kubernetes";

/// The Namespace strategy.
#[derive(Debug)]
pub(super) struct Namespaces;

impl Strategy for Namespaces {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        body["spec"] = json!({"finalizers": [NAMESPACE_FINALIZER]});
        body["status"] = json!({"phase": "Active"});
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let labels = md(body).entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
        Ok(())
    }

    /// `spec.finalizers` change only through the `finalize` subresource.
    fn prepare_for_update(&self, old: &Value, new: &mut Value) {
        new["spec"] = old["spec"].clone();
    }

    fn finalized_by_controller(&self) -> bool {
        true
    }

    fn begin_deletion(&self, ns: &mut Value) {
        set_at(ns, &["status", "phase"], json!("Terminating"));
    }
}

/// What `kubectl get namespaces` prints after the name.
pub(super) const COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::path("Status", "The status of the namespace", ".status.phase"),
    PrinterColumn::AGE,
];

/// A Namespace's merge schema.
pub(super) fn merge() -> Obj {
    spec_and_conditions(obj())
}
