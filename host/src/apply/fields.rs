//! Field ownership of a child the operator created.
//!
//! A create records the fields it set under an `Update` entry of the field
//! manager `policyhost`; a server-side apply records its fields under an
//! `Apply` entry. A field owned by the `Update` entry would stay when a
//! later apply leaves it out (an apply removes only fields no one else
//! owns), so a policy could never drop a label or a data key its child was
//! created with. Before the first apply to a child it created, the operator
//! therefore hands the create's fields to its apply entry, as client-go's
//! `csaupgrade` does for kubectl: one GET and one JSON patch, once in the
//! child's life, and only if its manifest ever changes.

use crate::vocabulary::{FIELD_MANAGER, is_operators};
use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch as JsonPatch, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

/// `entries` with the operator's `Update` entry merged into its `Apply`
/// entry (made from it if there is none); `None` if there is nothing to
/// hand over.
#[must_use]
pub fn handed_over(entries: &[ManagedFieldsEntry]) -> Option<Vec<ManagedFieldsEntry>> {
    let at = entries.iter().position(|e| is_operators(e, "Update"))?;
    let mut entries = entries.to_vec();
    let created = entries.remove(at);
    match entries.iter_mut().find(|e| is_operators(e, "Apply")) {
        Some(applied) => {
            let mut fields = applied
                .fields_v1
                .take()
                .map_or_else(|| Value::Object(Default::default()), |f| f.0);
            if let Some(FieldsV1(created)) = &created.fields_v1 {
                union(&mut fields, created);
            }
            applied.fields_v1 = Some(FieldsV1(fields));
        }
        None => entries.push(ManagedFieldsEntry {
            operation: Some("Apply".into()),
            ..created
        }),
    }
    Some(entries)
}

/// Hands the create's fields of child `name` (the object `uid`) to the
/// operator's apply entry, if it still holds any.
///
/// # Errors
///
/// The API server's error. A patch that finds the object changed since the
/// GET (its `test`s fail) is refused, and the caller retries from fresh
/// state.
pub async fn hand_over(api: &Api<DynamicObject>, name: &str, uid: &str) -> kube::Result<()> {
    let object = api.get(name).await?;
    let meta = &object.metadata;
    if meta.uid.as_deref() != Some(uid) {
        // Replaced: the apply naming `uid` is refused anyway.
        return Ok(());
    }
    let Some(entries) = handed_over(meta.managed_fields.as_deref().unwrap_or_default()) else {
        return Ok(());
    };
    let path = |segments: &[&str]| PointerBuf::from_tokens(segments.iter().copied());
    let test = |field: &str, value: Option<&String>| {
        PatchOperation::Test(TestOperation {
            path: path(&["metadata", field]),
            value: value.map_or(Value::Null, |v| Value::String(v.clone())),
        })
    };
    let patch = JsonPatch(vec![
        test("uid", meta.uid.as_ref()),
        test("resourceVersion", meta.resource_version.as_ref()),
        PatchOperation::Replace(ReplaceOperation {
            path: path(&["metadata", "managedFields"]),
            value: serde_json::to_value(entries).unwrap_or(Value::Null),
        }),
    ]);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::<()>::Json(patch)).await?;
    Ok(())
}

/// Adds every path of the field set `more` to `fields` (FieldsV1 trees are
/// nested maps; a leaf is an empty map).
fn union(fields: &mut Value, more: &Value) {
    let (Value::Object(fields), Value::Object(more)) = (fields, more) else {
        return;
    };
    for (key, value) in more {
        match fields.get_mut(key) {
            Some(existing) => union(existing, value),
            None => {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::vocabulary::created_by_operator;

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: None,
            time: None,
        }
    }

    #[test]
    fn the_creates_fields_become_the_applys() {
        let created = entry(
            FIELD_MANAGER,
            "Update",
            json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}}),
        );
        let kubelet = entry("kubelet", "Update", json!({"f:status": {}}));
        let entries = handed_over(&[created, kubelet.clone()]).expect("something to hand over");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], kubelet, "other managers are left as they are");
        assert_eq!(entries[1].operation.as_deref(), Some("Apply"));
        assert_eq!(
            entries[1].fields_v1,
            Some(FieldsV1(json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}})))
        );
        assert!(created_by_operator(&[entry(
            FIELD_MANAGER,
            "Update",
            json!({})
        )]));
        assert!(!created_by_operator(&entries));
    }

    #[test]
    fn the_creates_fields_merge_into_an_existing_apply_entry() {
        let entries = handed_over(&[
            entry(FIELD_MANAGER, "Apply", json!({"f:data": {"f:a": {}}})),
            entry(
                FIELD_MANAGER,
                "Update",
                json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}),
            ),
        ])
        .expect("something to hand over");
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0].fields_v1,
            Some(FieldsV1(json!({"f:data": {"f:a": {}, "f:b": {}},
                "f:metadata": {"f:labels": {"f:x": {}}}})))
        );
    }

    #[test]
    fn nothing_is_handed_over_without_a_create_entry_or_from_a_subresource() {
        assert_eq!(
            handed_over(&[entry(FIELD_MANAGER, "Apply", json!({}))]),
            None
        );
        let mut status = entry(FIELD_MANAGER, "Update", json!({"f:status": {}}));
        status.subresource = Some("status".into());
        assert_eq!(handed_over(&[status]), None);
    }
}
