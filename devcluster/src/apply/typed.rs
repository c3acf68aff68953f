//! How a JSON value is seen through a schema: which parts merge granularly,
//! how list items are identified, and which fields a value sets.

use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, PathElement};
use crate::gotypes::{self, Atom, GoType, Numbers};
use crate::schema::{ListKind, ListNode, Node};

/// What a value is at a schema position, for merging.
pub(crate) enum Shape<'a> {
    /// Compared and replaced whole: scalars, nulls, atomic maps and lists.
    Leaf,
    /// A map merged key by key.
    Map(&'a Map<String, Value>),
    /// A set or associative list merged item by item.
    List(&'a ListNode, &'a [Value]),
}

pub(crate) fn shape<'a>(node: &'a Node, value: &'a Value) -> Shape<'a> {
    match value {
        Value::Object(map) if node.merges_objects() => Shape::Map(map),
        Value::Array(items) => match node.list() {
            Some(list) if !matches!(list.kind, ListKind::Atomic) => Shape::List(list, items),
            _ => Shape::Leaf,
        },
        _ => Shape::Leaf,
    }
}

/// Whether a value is null, an empty map or an empty list.
pub(crate) fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// The path element identifying `item` in a set or associative list.
pub(crate) fn item_element(list: &ListNode, item: &Value) -> Result<PathElement, String> {
    match &list.kind {
        ListKind::Set => match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            scalar => Ok(PathElement::Value(scalar.to_string())),
        },
        ListKind::Map(keys) => {
            let Value::Object(fields) = item else {
                return Err(if item.is_null() {
                    "associative list with keys may not have a null element".into()
                } else {
                    "associative list with keys may not have non-map elements".into()
                });
            };
            if let Some(key) = keys.iter().find(|k| {
                fields
                    .get(&k.name)
                    .is_some_and(|v| v.is_object() || v.is_array())
            }) {
                // A key field is a scalar in every schema: a map or list there
                // would change with the merge (its nulls dropped) and name
                // another item the next time.
                return Err(format!(
                    "associative list with keys has an element whose key field {:?} is not a scalar",
                    key.name
                ));
            }
            let mut key: Vec<(String, String)> = keys
                .iter()
                .filter_map(|k| {
                    // A null key names no item: kube-apiserver's validation
                    // refuses such an item (a container without its name).
                    let given = fields.get(&k.name).filter(|v| !v.is_null());
                    let value = given.or(k.default.as_ref())?;
                    Some((k.name.clone(), value.to_string()))
                })
                .collect();
            if key.is_empty() {
                let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
                return Err(format!(
                    "associative list with keys has an element that omits all key fields {names:?} \
                     (and doesn't have default values for any key fields)"
                ));
            }
            key.sort();
            Ok(PathElement::Key(key))
        }
        ListKind::Atomic => Err("invalid indexing of non-associative list".into()),
    }
}

/// The length up to which duplicate items are found by scanning.
const SHORT_LIST: usize = 16;

/// The items of a granular list with their elements, keeping the first of
/// repeated elements; `None` if an item cannot be identified (the list is
/// then handled whole).
pub(crate) fn index_items<'a>(
    list: &ListNode,
    items: &'a [Value],
) -> Option<Vec<(PathElement, &'a Value)>> {
    let mut out: Vec<(PathElement, &Value)> = Vec::with_capacity(items.len());
    let mut seen = HashSet::new();
    for item in items {
        let element = item_element(list, item).ok()?;
        // Lists are short: a scan beats hashing until they are not.
        let repeated = if items.len() <= SHORT_LIST {
            out.iter().any(|(e, _)| *e == element)
        } else {
            !seen.insert(element.clone())
        };
        if !repeated {
            out.push((element, item));
        }
    }
    Some(out)
}

/// One reason an applied configuration does not fit its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Where, as in conflict messages (`.spec.containers`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// All the reasons an applied configuration does not fit its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    /// One error on one line, several as an indented list, as kube-apiserver
    /// prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{}: {}", one.path, one.message),
            many => {
                write!(f, "errors:")?;
                many.iter()
                    .try_for_each(|e| write!(f, "\n  {}: {}", e.path, e.message))
            }
        }
    }
}

/// Checks an applied configuration as structured-merge-diff does before
/// merging it: every set and associative list identifies its items, once
/// each, and, where the kind's Go type is known, every value has its
/// field's type (checked inside atomic maps and lists too). Unknown fields
/// are not checked: the Go type may be older than the server's.
pub(crate) fn validate(
    node: &Node,
    types: Option<GoType>,
    value: &Value,
) -> Result<(), FieldErrors> {
    let mut errors = Vec::new();
    validate_at(node, types, value, &mut String::new(), &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(FieldErrors(errors))
    }
}

fn validate_at(
    node: &Node,
    types: Option<GoType>,
    value: &Value,
    path: &mut String,
    errors: &mut Vec<FieldError>,
) {
    if let Some(message) = types.and_then(|t| type_mismatch(t.atom(), value)) {
        errors.push(FieldError {
            path: path.clone(),
            message,
        });
        return;
    }
    match value {
        Value::Object(map) if node.merges_objects() || types.is_some() => {
            for (key, child) in map {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                let child_types = types.and_then(|t| t.child(key));
                validate_at(node.child(key).node, child_types, child, path, errors);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            let item_types = types.and_then(GoType::item);
            match node.list() {
                Some(list) if !matches!(list.kind, ListKind::Atomic) => {
                    validate_items(list, item_types, items, path, errors);
                }
                _ if item_types.is_some() => {
                    for (index, item) in items.iter().enumerate() {
                        let len = path.len();
                        path.push_str(&PathElement::Index(index).to_string());
                        validate_at(node.items(), item_types, item, path, errors);
                        path.truncate(len);
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// The items of a set or associative list, each under its key.
fn validate_items(
    list: &ListNode,
    types: Option<GoType>,
    items: &[Value],
    path: &mut String,
    errors: &mut Vec<FieldError>,
) {
    let mut seen = HashSet::new();
    for (index, item) in items.iter().enumerate() {
        match item_element(list, item) {
            Ok(element) => {
                if !seen.insert(element.clone()) {
                    errors.push(FieldError {
                        path: path.clone(),
                        message: format!("duplicate entries for key {element}"),
                    });
                    continue;
                }
                let len = path.len();
                path.push_str(&element.to_string());
                validate_at(&list.item, types, item, path, errors);
                path.truncate(len);
            }
            Err(message) => errors.push(FieldError {
                path: path.clone(),
                message: format!("element {index}: {message}"),
            }),
        }
    }
}

/// structured-merge-diff's complaint about a value of the wrong type, in
/// its words: Go's `%v`, `%#v` or `%T` of the value as an apply body holds
/// it (numbers are `float64`s).
fn type_mismatch(atom: Atom, value: &Value) -> Option<String> {
    let numbers = Numbers::Floats;
    // `%v` of the pointer to structured-merge-diff's value.
    let pointer = || format!("&{{{}}}", gotypes::plain(value, numbers));
    let fits = match atom {
        Atom::Any => true,
        Atom::Map => value.is_object(),
        Atom::List => value.is_array(),
        Atom::String => value.is_string(),
        Atom::Numeric => value.is_number(),
        Atom::Boolean => value.is_boolean(),
        Atom::Scalar => !value.is_object() && !value.is_array(),
    };
    if fits || value.is_null() {
        return None;
    }
    Some(match atom {
        Atom::Map => format!("expected map, got {}", pointer()),
        Atom::List => format!("expected list, got {}", pointer()),
        Atom::String => format!(
            "expected string, got &value.valueUnstructured{{Value:{}}}",
            gotypes::go_syntax(value, numbers)
        ),
        Atom::Numeric => format!(
            "expected numeric (int or float), got {}",
            gotypes::type_name(value, numbers)
        ),
        Atom::Boolean => format!("expected boolean, got {}", pointer()),
        Atom::Scalar | Atom::Any => format!("expected any scalar, got {}", pointer()),
    })
}

/// The fields `value` sets, as server-side apply records them for the
/// manager that applies it: every leaf, every item of a granular list, every
/// map entry, and every field set to null or to an empty map.
pub(crate) fn field_set(node: &Node, value: &Value) -> FieldSet {
    fields_under(node, value).unwrap_or_default()
}

/// The fields under a value; `None` for a leaf, which is owned whole.
fn fields_under(node: &Node, value: &Value) -> Option<FieldSet> {
    let mut set = FieldSet::new();
    match shape(node, value) {
        Shape::Leaf => return None,
        Shape::Map(map) => {
            for (key, child_value) in map {
                let child = node.child(key);
                let element = PathElement::Field(key.clone());
                match fields_under(child.node, child_value) {
                    None => set.attach(element, FieldSet::new(), true),
                    Some(below) => {
                        let empty_map = child_value.as_object().is_some_and(Map::is_empty);
                        set.attach(element, below, empty_map || child.entry);
                    }
                }
            }
        }
        Shape::List(list, items) => {
            for (element, item) in index_items(list, items).unwrap_or_default() {
                let below = fields_under(&list.item, item).unwrap_or_default();
                set.attach(element, below, true);
            }
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::apply::fieldset::Path;
    use crate::kinds;
    use crate::schema::Schema;

    fn pod() -> &'static Schema {
        kinds::schema("", "v1", "Pod").expect("built in")
    }

    fn paths(set: &FieldSet) -> Vec<String> {
        set.paths().iter().map(Path::to_string).collect()
    }

    #[test]
    fn the_fields_of_a_pod_config_are_its_leaves_and_list_items() {
        let config = json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx",
                                      "ports": [{"containerPort": 80}]}],
                     "tolerations": [{"key": "k"}]}
        });
        assert_eq!(
            paths(&field_set(&pod().root, &config)),
            vec![
                ".metadata.labels.app",
                ".spec.tolerations",
                ".spec.containers[name=\"c\"]",
                ".spec.containers[name=\"c\"].image",
                ".spec.containers[name=\"c\"].name",
                ".spec.containers[name=\"c\"].ports[containerPort=80,protocol=\"TCP\"]",
                ".spec.containers[name=\"c\"].ports[containerPort=80,protocol=\"TCP\"].containerPort",
            ]
        );
    }

    #[test]
    fn empty_maps_nulls_and_map_entries_are_members() {
        let crd = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"params": {"type": "object",
                                      "x-kubernetes-preserve-unknown-fields": true}}}}});
        let schema = Schema::from_openapi_v3(&crd).expect("valid");
        let config = json!({"spec": {"params": {"a": {"b": 1}, "e": {}, "n": null}}});
        assert_eq!(
            paths(&field_set(&schema.root, &config)),
            vec![
                ".spec.params.a",
                ".spec.params.e",
                ".spec.params.n",
                ".spec.params.a.b"
            ]
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_reported_as_structured_merge_diff_words_them() {
        // kube-apiserver v1.37's answer to the same apply, whose order of
        // the keys of one map is Go's map order (random) and here by name.
        let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pp"},
            "spec": {"containers": [{"name": "a", "image": "x",
                                     "ports": [{"containerPort": "80"}], "args": [1, true]}],
                     "priority": 1.5, "hostNetwork": 1, "nodeSelector": [], "tolerations": {}}});
        let errors = validate(&pod().root, pod().types(), &config).expect_err("invalid");
        assert_eq!(
            errors.to_string(),
            "errors:\n  \
             .spec.containers[name=\"a\"].args[0]: expected string, got \
             &value.valueUnstructured{Value:1}\n  \
             .spec.containers[name=\"a\"].args[1]: expected string, got \
             &value.valueUnstructured{Value:true}\n  \
             .spec.containers[name=\"a\"].ports[containerPort=\"80\",protocol=\"TCP\"].containerPort: \
             expected numeric (int or float), got string\n  \
             .spec.hostNetwork: expected boolean, got &{1}\n  \
             .spec.nodeSelector: expected map, got &{[]}\n  \
             .spec.tolerations: expected list, got &{map[]}"
        );
        let data = json!({"data": {"c": {"x": 1}, "d": [1, "a"], "e": null, "f": 3}});
        let configmap = kinds::schema("", "v1", "ConfigMap").expect("built in");
        assert_eq!(
            validate(&configmap.root, configmap.types(), &data)
                .expect_err("invalid")
                .to_string(),
            "errors:\n  \
             .data.c: expected string, got &value.valueUnstructured{Value:map[string]interface {}{\"x\":1}}\n  \
             .data.d: expected string, got &value.valueUnstructured{Value:[]interface {}{1, \"a\"}}\n  \
             .data.f: expected string, got &value.valueUnstructured{Value:3}"
        );
    }

    #[test]
    fn duplicate_and_keyless_items_are_reported_with_their_path() {
        let config = json!({"spec": {"containers": [
            {"name": "c", "env": [{"name": "A"}, {"name": "A"}]},
            {"image": "x"}
        ]}});
        let errors = validate(&pod().root, None, &config).expect_err("invalid");
        assert_eq!(
            errors.to_string(),
            "errors:\n  .spec.containers[name=\"c\"].env: duplicate entries for key [name=\"A\"]\
             \n  .spec.containers: element 1: associative list with keys has an element that \
             omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
        );
        // Found by the patch fuzz target: a null key was taken as a key.
        let null_key = validate(
            &pod().root,
            None,
            &json!({"spec": {"containers": [{"name": null, "image": "x"}]}}),
        )
        .expect_err("a null key");
        assert!(
            null_key.to_string().contains("omits all key fields"),
            "{null_key}"
        );
        let map_key = validate(
            &pod().root,
            None,
            &json!({"spec": {"containers": [{"name": {"a": null}, "image": "x"}]}}),
        )
        .expect_err("a map as key");
        assert!(map_key.to_string().contains("is not a scalar"), "{map_key}");
        let one = validate(
            &pod().root,
            None,
            &json!({"metadata": {"finalizers": ["a", "a"]}}),
        )
        .expect_err("duplicate");
        assert_eq!(
            one.to_string(),
            ".metadata.finalizers: duplicate entries for key [=\"a\"]"
        );
    }
}
