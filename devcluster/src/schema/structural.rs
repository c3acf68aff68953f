//! Structural-schema handling for custom resources, as kube-apiserver does it on every
//! write: unknown fields are pruned and `default`s are filled in.

use serde_json::{Map, Value};

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Drops fields the schema does not declare, unless it preserves unknown fields, and
/// records the paths it dropped.
pub(crate) fn prune(v: &mut Value, schema: &Value, path: &str, dropped: &mut Vec<String>) {
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    if preserve && schema.get("properties").is_none() {
        return;
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                map.retain(|k, _| {
                    let keep = preserve || props.contains_key(k);
                    if !keep {
                        dropped.push(join(path, k));
                    }
                    keep
                });
                for (k, child) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune(child, s, &join(path, k), dropped);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (k, child) in map.iter_mut() {
                    prune(child, additional, &join(path, k), dropped);
                }
            } else if schema["type"] == "object" && schema.get("additionalProperties").is_none() {
                dropped.extend(map.keys().map(|k| join(path, k)));
                map.clear();
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, item_schema, &format!("{path}[{i}]"), dropped);
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
/// Returns the paths of the unknown fields it dropped.
pub(crate) fn apply(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut dropped = Vec::new();
    let Some(map) = obj.as_object_mut() else {
        return dropped;
    };
    let kept: Map<String, Value> = ["apiVersion", "kind", "metadata"]
        .iter()
        .filter_map(|k| map.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect();
    prune(obj, schema, "", &mut dropped);
    default(obj, schema);
    if let Some(map) = obj.as_object_mut() {
        map.extend(kept);
    }
    dropped
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
