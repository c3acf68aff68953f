//! Reads the merge rules of a custom resource from its CRD's `openAPIV3Schema`.
//!
//! Lists are atomic unless `x-kubernetes-list-type` says `set` or `map`
//! (with `x-kubernetes-list-map-keys`); objects merge key by key unless
//! `x-kubernetes-map-type: atomic`; `additionalProperties` and
//! `x-kubernetes-preserve-unknown-fields` make map entries. `metadata` is
//! always the standard object metadata, whatever the schema says of it.

use serde_json::{Map, Value};

use super::build::metadata;
use super::{Field, ListKind, ListNode, MapKey, Node, ObjectNode, Rest, Schema, Strategy};

/// Why a CRD schema could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CRD has no version of that name.
    #[error("the CustomResourceDefinition has no version {version:?}")]
    UnknownVersion {
        /// The version asked for.
        version: String,
    },
    /// A list declares `x-kubernetes-list-type` other than atomic, set or map.
    #[error("{path}: unknown x-kubernetes-list-type {value}")]
    UnknownListType {
        /// Where in the schema, as a JSON path.
        path: String,
        /// The value found.
        value: Value,
    },
    /// A `map` list without key names.
    #[error("{path}: x-kubernetes-list-type map needs x-kubernetes-list-map-keys")]
    MissingMapKeys {
        /// Where in the schema, as a JSON path.
        path: String,
    },
}

impl Error {
    /// The HTTP status code a server answers with: 422, the schema is invalid.
    #[must_use]
    pub fn code(&self) -> u16 {
        422
    }

    /// The `Status.reason` a server answers with.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        "Invalid"
    }
}

/// The result of reading a schema.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Schema {
    /// The schema of a custom resource from the `openAPIV3Schema` of one CRD
    /// version. The kind has no status subresource until
    /// [`Schema::with_status_subresource`] says so; [`Schema::from_crd`] reads
    /// both.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownListType`] and [`Error::MissingMapKeys`] for list
    /// declarations the API server would reject too.
    pub fn from_openapi_v3(schema: &Value) -> Result<Schema> {
        let mut root = match node(schema, "")? {
            Node::Object(object) => *object,
            // `x-kubernetes-preserve-unknown-fields` at the root: every key but the
            // standard ones is a map entry.
            Node::Deduced => ObjectNode {
                fields: Default::default(),
                rest: Rest::Entries(Node::Deduced),
            },
            _ => ObjectNode {
                fields: Default::default(),
                rest: Rest::Fields(Node::Untyped),
            },
        };
        root.fields.insert(
            "metadata".to_owned(),
            Field {
                node: metadata().build(),
                embedded: false,
            },
        );
        Ok(Schema::new(Node::Object(Box::new(root)), false, false))
    }

    /// The schema of the custom resources of `crd` (a whole
    /// `CustomResourceDefinition` object) at `version`, with its status
    /// subresource when the version declares one.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownVersion`] when the CRD does not list `version`, and
    /// the errors of [`Schema::from_openapi_v3`].
    pub fn from_crd(crd: &Value, version: &str) -> Result<Schema> {
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let entry = versions
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
            .ok_or_else(|| Error::UnknownVersion {
                version: version.to_owned(),
            })?;
        let status = entry.pointer("/subresources/status").is_some();
        let schema = match entry.pointer("/schema/openAPIV3Schema") {
            Some(schema) => Schema::from_openapi_v3(schema)?,
            None => Schema::untyped(),
        };
        Ok(schema.with_status_subresource(status))
    }
}

fn flag(schema: &Map<String, Value>, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// Converts one schema position.
fn node(schema: &Value, path: &str) -> Result<Node> {
    let Some(schema) = schema.as_object() else {
        return Ok(Node::Deduced);
    };
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    if flag(schema, "x-kubernetes-int-or-string") {
        return Ok(Node::Atomic);
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let ty = schema.get("type").and_then(Value::as_str);
    match ty {
        Some("array") => array(schema, path),
        Some("object") | None if ty.is_some() || properties.is_some() || preserve => {
            if schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
                return Ok(Node::Atomic);
            }
            let rest = match additional {
                Some(Value::Object(items)) => {
                    Rest::Entries(node(&Value::Object(items.clone()), &format!("{path}.*"))?)
                }
                Some(Value::Bool(true)) => Rest::Entries(Node::Deduced),
                _ if preserve => Rest::Entries(Node::Deduced),
                _ => Rest::Fields(Node::Untyped),
            };
            if properties.is_none() && preserve {
                return Ok(Node::Deduced);
            }
            let mut fields = std::collections::BTreeMap::new();
            for (name, property) in properties.into_iter().flatten() {
                let field = Field {
                    node: node(property, &format!("{path}.{name}"))?,
                    embedded: false,
                };
                fields.insert(name.clone(), field);
            }
            Ok(Node::Object(Box::new(ObjectNode { fields, rest })))
        }
        None => Ok(Node::Deduced),
        Some(_) => Ok(Node::Atomic),
    }
}

fn array(schema: &Map<String, Value>, path: &str) -> Result<Node> {
    let items = schema.get("items").cloned().unwrap_or(Value::Null);
    let item = match &items {
        Value::Null => Node::Deduced,
        items => node(items, &format!("{path}[*]"))?,
    };
    let kind = match schema.get("x-kubernetes-list-type") {
        None => return Ok(Node::Atomic),
        Some(Value::String(t)) if t == "atomic" => return Ok(Node::Atomic),
        Some(Value::String(t)) if t == "set" => ListKind::Set,
        Some(Value::String(t)) if t == "map" => {
            let names: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| keys.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if names.is_empty() {
                return Err(Error::MissingMapKeys {
                    path: path.to_owned(),
                });
            }
            let keys = names
                .into_iter()
                .map(|name| MapKey {
                    name: name.to_owned(),
                    default: items
                        .pointer(&format!("/properties/{}/default", escape(name)))
                        .cloned(),
                })
                .collect();
            ListKind::Map(keys)
        }
        Some(other) => {
            return Err(Error::UnknownListType {
                path: path.to_owned(),
                value: other.clone(),
            });
        }
    };
    Ok(Node::List(Box::new(ListNode {
        kind,
        strategy: Strategy::Replace,
        item,
    })))
}

/// Escapes a key for a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn datajob_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "spec": {
                "group": "policyhost.dev",
                "versions": [{
                    "name": "v1alpha1",
                    "served": true,
                    "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "policy": {"type": "string"},
                                    "params": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": true
                                    },
                                    "ports": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["port", "protocol"],
                                        "items": {"type": "object", "properties": {
                                            "port": {"type": "integer"},
                                            "protocol": {"type": "string", "default": "TCP"}
                                        }}
                                    },
                                    "tags": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "set",
                                        "items": {"type": "string"}
                                    },
                                    "args": {"type": "array", "items": {"type": "string"}},
                                    "selector": {
                                        "type": "object",
                                        "x-kubernetes-map-type": "atomic",
                                        "additionalProperties": {"type": "string"}
                                    },
                                    "env": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"}
                                    }
                                }
                            },
                            "status": {"type": "object"}
                        }
                    }}
                }]
            }
        })
    }

    #[test]
    fn a_crd_version_gives_list_types_map_types_and_the_status_subresource() {
        let schema = Schema::from_crd(&datajob_crd(), "v1alpha1").expect("valid");
        assert!(schema.has_status_subresource());
        assert!(!schema.supports_strategic_merge());
        let spec = schema.root.child("spec").node;
        let ports = spec.child("ports").node.list().expect("map list");
        let ListKind::Map(keys) = &ports.kind else {
            panic!("map list")
        };
        assert_eq!(keys[1].default, Some(json!("TCP")));
        assert!(matches!(
            spec.child("tags").node.list().map(|l| &l.kind),
            Some(ListKind::Set)
        ));
        assert!(matches!(spec.child("args").node, Node::Atomic));
        assert!(matches!(spec.child("selector").node, Node::Atomic));
        assert!(matches!(spec.child("params").node, Node::Deduced));
        assert!(spec.child("env").node.child("X").entry);
        assert!(!spec.child("policy").entry);
    }

    #[test]
    fn metadata_is_standard_object_metadata_whatever_the_schema_says() {
        let schema = Schema::from_openapi_v3(&json!({"type": "object"})).expect("valid");
        let metadata = schema.root.child("metadata").node;
        let finalizers = metadata.child("finalizers").node.list().expect("set");
        assert!(matches!(finalizers.kind, ListKind::Set));
    }

    #[test]
    fn a_map_list_without_keys_is_rejected_with_its_path() {
        let bad = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"xs": {"type": "array", "x-kubernetes-list-type": "map"}}}}});
        let err = Schema::from_openapi_v3(&bad).expect_err("no keys");
        assert_eq!(
            err.to_string(),
            ".spec.xs: x-kubernetes-list-type map needs x-kubernetes-list-map-keys"
        );
        assert_eq!((err.code(), err.reason()), (422, "Invalid"));
    }

    #[test]
    fn an_unknown_list_type_and_an_unknown_version_are_errors() {
        let bad = json!({"type": "object", "properties": {
            "xs": {"type": "array", "x-kubernetes-list-type": "bag"}}});
        let err = Schema::from_openapi_v3(&bad).expect_err("bad type");
        assert_eq!(
            err.to_string(),
            ".xs: unknown x-kubernetes-list-type \"bag\""
        );
        let err = Schema::from_crd(&datajob_crd(), "v9").expect_err("no such version");
        assert_eq!(
            err.to_string(),
            "the CustomResourceDefinition has no version \"v9\""
        );
    }
}
