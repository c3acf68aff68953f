//! Structural-schema handling for custom resources, as kube-apiserver does it on every
//! write: unknown fields are pruned and `default`s are filled in.

use serde_json::{Map, Value};

/// Drops fields the schema does not declare, unless it preserves unknown fields.
pub(crate) fn prune(v: &mut Value, schema: &Value) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true && schema.get("properties").is_none()
    {
        return;
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
                map.retain(|k, _| preserve || props.contains_key(k));
                for (k, child) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune(child, s);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for child in map.values_mut() {
                    prune(child, additional);
                }
            } else if schema["type"] == "object"
                && schema["x-kubernetes-preserve-unknown-fields"] != true
                && schema.get("additionalProperties").is_none()
            {
                map.clear();
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default` values for absent fields of present objects.
pub(crate) fn default(v: &mut Value, schema: &Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, s) in props {
                    if !map.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        default(child, s);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for child in map.values_mut() {
                    default(child, additional);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    default(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Prunes and defaults a custom resource; `apiVersion`, `kind` and `metadata` are kept.
pub(crate) fn apply(obj: &mut Value, schema: &Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let kept: Map<String, Value> = ["apiVersion", "kind", "metadata"]
        .iter()
        .filter_map(|k| map.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect();
    prune(obj, schema);
    default(obj, schema);
    if let Some(map) = obj.as_object_mut() {
        map.extend(kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "policy": {"type": "string"},
                    "suspend": {"type": "boolean", "default": false},
                    "params": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                }},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            }
        })
    }

    #[test]
    fn unknown_fields_are_pruned_and_preserved_ones_kept() {
        let mut o = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"policy": "p", "bogus": 1, "params": {"free": {"form": true}}, "labels": {"a": "b"}},
            "status": {"phase": "Running", "extra": "gone"},
            "top": "gone",
        });
        apply(&mut o, &schema());
        assert_eq!(
            o,
            json!({
                "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
                "spec": {"policy": "p", "suspend": false, "params": {"free": {"form": true}}, "labels": {"a": "b"}},
                "status": {"phase": "Running"},
            })
        );
    }

    #[test]
    fn defaults_fill_only_absent_fields() {
        let mut o = json!({"spec": {"suspend": true}});
        apply(&mut o, &schema());
        assert_eq!(o["spec"]["suspend"], true);
    }
}
