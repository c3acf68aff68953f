//! CustomResourceDefinitions: a definition must describe a servable type; once stored
//! it is served and Established, and its objects go with it.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::clock;
use crate::object::{ObjectKey, Stored};
use crate::rand::Rng;
use crate::resource::{self, Registry, ResourceType, Strategy};
use crate::status::Result;
use crate::status::internal;
use crate::store::{ListQuery, Txn};
use crate::table::PrinterColumn;

/// The CustomResourceDefinition strategy.
#[derive(Debug)]
pub(super) struct CustomResourceDefinitions;

/// The type `crd` defines, or the 422 naming why it cannot be served.
fn defined_type(rt: &ResourceType, crd: &Value) -> Result<ResourceType> {
    resource::from_crd(crd).map_err(|e| {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        rt.field_invalid(name, "", "FieldValueInvalid", e.to_string())
    })
}

/// The status kube-apiserver gives an accepted definition.
fn established(crd: &Value) -> Value {
    let storage: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|x| x["storage"].as_bool() == Some(true))
                .map(|x| x["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let now = clock::now_rfc3339();
    let cond = |t: &str, reason: &str, msg: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": msg});
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": [
            cond("NamesAccepted", "NoConflicts", "no conflicts found"),
            cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": storage,
    })
}

impl Strategy for CustomResourceDefinitions {
    fn prepare_for_create(&self, rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        defined_type(rt, body)?;
        if let Some(o) = body.as_object_mut() {
            o.remove("status");
        }
        Ok(())
    }

    fn validate_update(&self, rt: &ResourceType, _old: &Value, new: &Value) -> Result<()> {
        defined_type(rt, new).map(drop)
    }

    fn after_write(
        &self,
        txn: &mut Txn<'_>,
        registry: &Registry,
        rt: &ResourceType,
        stored: &Arc<Stored>,
    ) -> Result<()> {
        let v = stored.value().map_err(internal)?;
        if let Ok(t) = resource::from_crd(&v) {
            registry.register(t);
        }
        let status = established(&v);
        if let Some(old) = v.get("status")
            && old["acceptedNames"] == status["acceptedNames"]
            && old["storedVersions"] == status["storedVersions"]
        {
            // Transition times stay as they are when nothing changed.
            return Ok(());
        }
        let mut next = v;
        next["status"] = status;
        txn.put(&rt.gr, next).map_err(internal)?;
        Ok(())
    }

    fn after_remove(&self, txn: &mut Txn<'_>, registry: &Registry, gone: &Arc<Stored>) {
        let Some(t) = gone.value().ok().and_then(|v| resource::from_crd(&v).ok()) else {
            return;
        };
        let keys: Vec<ObjectKey> = txn
            .list(&ListQuery::everything(&t.gr))
            .map(|p| p.items.iter().map(|o| o.meta.key()).collect())
            .unwrap_or_default();
        for k in keys {
            if let Some(o) = txn.get(&t.gr, &k)
                && let Ok(last) = o.value()
            {
                let _ = txn.remove(&t.gr, &k, last);
            }
        }
        txn.drop_table(&t.gr);
        registry.unregister(&t.gr);
    }
}

/// What `kubectl get crds` prints after the name: when it was created, not
/// its age.
pub(super) const COLUMNS: &[PrinterColumn] = &[PrinterColumn::computed(
    "Created At",
    "The time the CRD was created.",
    created_at,
)];

fn created_at(v: &Value) -> Value {
    json!(
        v["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
    )
}
