//! The apply merge: an applied configuration laid over the live object, and
//! the removal of fields nobody owns any more.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, PathElement};
use super::typed::{Shape, index_items, is_empty, shape};
use crate::schema::{ListNode, Node};

/// Lays `config` over `live`: maps merge key by key, sets and associative
/// lists item by item, everything else takes the configuration's value. A
/// field the configuration sets to null is left out.
pub(crate) fn merge(node: &Node, live: &Value, config: &Value) -> Value {
    match (shape(node, live), shape(node, config)) {
        (Shape::Map(live_map), Shape::Map(config_map)) => {
            let mut out = Map::new();
            for (key, live_value) in live_map {
                match config_map.get(key) {
                    Some(Value::Null) => {}
                    Some(config_value) => {
                        let merged = merge(node.child(key).node, live_value, config_value);
                        out.insert(key.clone(), merged);
                    }
                    None => {
                        out.insert(key.clone(), live_value.clone());
                    }
                }
            }
            for (key, config_value) in config_map {
                if !live_map.contains_key(key) && !config_value.is_null() {
                    out.insert(key.clone(), without_nulls(config_value));
                }
            }
            Value::Object(out)
        }
        (Shape::List(list, live_items), Shape::List(_, config_items)) => {
            merge_list(list, live_items, config_items).unwrap_or_else(|| without_nulls(config))
        }
        _ => without_nulls(config),
    }
}

/// A configuration value as stored: fields set to null are left out.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Merges a granular list. Items keep the live order, except that the items
/// both sides have follow the configuration's order, and new items come
/// after the configuration item they follow. `None` when live items cannot be
/// told apart (the configuration then replaces the list).
fn merge_list(list: &ListNode, live: &[Value], config: &[Value]) -> Option<Value> {
    let live = index_items(list, live)?;
    let config = index_items(list, config)?;
    let live_by: HashMap<&PathElement, &Value> = live.iter().map(|(e, v)| (e, *v)).collect();
    let config_by: HashMap<&PathElement, &Value> = config.iter().map(|(e, v)| (e, *v)).collect();
    let mut shared: VecDeque<&PathElement> = config
        .iter()
        .map(|(e, _)| e)
        .filter(|e| live_by.contains_key(e))
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged: HashSet<&PathElement> = HashSet::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < config.len() {
        if l < live.len() && r < config.len() {
            let element = &live[l].0;
            if *element == config[r].0 {
                out.push(merge(&list.item, live[l].1, config[r].1));
                merged.insert(element);
                l += 1;
                r += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if config_by.contains_key(element) && next_shared.is_some_and(|s| s != element) {
                // A shared item, but not the one due now: it comes later.
                l += 1;
                continue;
            }
        }
        if l < live.len() {
            let element = &live[l].0;
            if !config_by.contains_key(element) {
                out.push(live[l].1.clone());
                l += 1;
                continue;
            }
            if merged.contains(element) {
                l += 1;
                continue;
            }
        }
        if r < config.len() {
            let (element, item) = &config[r];
            merged.insert(element);
            out.push(match live_by.get(element) {
                Some(live_item) => merge(&list.item, live_item, item),
                None => without_nulls(item),
            });
            r += 1;
            if next_shared == Some(element) {
                next_shared = shared.pop_front();
            }
        }
    }
    Some(Value::Array(out))
}

/// Removes the paths of `set` from `value`. A map or list emptied by the
/// removal goes too, as a typed object would omit it.
pub(crate) fn remove(node: &Node, value: &mut Value, set: &FieldSet) {
    match value {
        Value::Object(map) if node.merges_objects() => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let element = PathElement::Field(key.clone());
                if set.has_member(&element) {
                    map.remove(&key);
                } else if let Some(below) = set.child(&element)
                    && let Some(child) = map.get_mut(&key)
                {
                    let was_empty = is_empty(child);
                    remove(node.child(&key).node, child, below);
                    if !was_empty && is_empty(child) {
                        map.remove(&key);
                    }
                }
            }
        }
        Value::Array(items) => {
            let Some(list) = node.list() else { return };
            let Some(elements) = items
                .iter()
                .map(|item| super::typed::item_element(list, item).ok())
                .collect::<Option<Vec<_>>>()
            else {
                return;
            };
            let mut kept = Vec::with_capacity(items.len());
            for (element, mut item) in elements.into_iter().zip(items.drain(..)) {
                if set.has_member(&element) {
                    continue;
                }
                if let Some(below) = set.child(&element) {
                    remove(&list.item, &mut item, below);
                }
                kept.push(item);
            }
            *items = kept;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kinds;
    use crate::schema::Schema;

    fn pod() -> &'static Schema {
        kinds::schema("", "v1", "Pod").expect("built in")
    }

    fn names(value: &Value) -> Vec<&str> {
        value
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default()
    }

    fn containers(names: &[&str]) -> Value {
        let items: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
        json!({"spec": {"containers": items}})
    }

    #[test]
    fn config_values_win_and_live_only_fields_stay() {
        let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}});
        let config = json!({"metadata": {"labels": {"a": "9", "c": "3"}}, "data": {"x": null}});
        assert_eq!(
            merge(&pod().root, &live, &config),
            json!({"metadata": {"labels": {"a": "9", "b": "2", "c": "3"}}, "data": {}})
        );
    }

    #[test]
    fn associative_lists_merge_items_by_key() {
        let live = json!({"spec": {"containers": [
            {"name": "a", "image": "v1", "env": [{"name": "X", "value": "1"}]}
        ]}});
        let config = json!({"spec": {"containers": [
            {"name": "a", "env": [{"name": "Y", "value": "2"}]}
        ]}});
        assert_eq!(
            merge(&pod().root, &live, &config),
            json!({"spec": {"containers": [{"name": "a", "image": "v1", "env": [
                {"name": "X", "value": "1"}, {"name": "Y", "value": "2"}
            ]}]}})
        );
    }

    #[test]
    fn list_order_follows_the_config_for_shared_items_and_keeps_live_only_items_in_place() {
        let merged = merge(
            &pod().root,
            &containers(&["a", "b", "c"]),
            &containers(&["x", "b"]),
        );
        assert_eq!(names(&merged), vec!["a", "x", "b", "c"]);
        let merged = merge(
            &pod().root,
            &containers(&["a", "b", "c"]),
            &containers(&["c", "a"]),
        );
        assert_eq!(names(&merged), vec!["b", "c", "a"]);
    }

    #[test]
    fn atomic_lists_are_replaced() {
        let live = json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}});
        let config = json!({"spec": {"tolerations": [{"key": "c"}]}});
        assert_eq!(merge(&pod().root, &live, &config), config);
    }

    #[test]
    fn removing_paths_drops_items_fields_and_emptied_maps() {
        let mut value = json!({
            "metadata": {"labels": {"a": "1"}, "finalizers": ["x", "y"]},
            "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b"}]}
        });
        let mut set = FieldSet::new();
        let f = PathElement::field;
        set.insert(&[f("metadata"), f("labels"), f("a")]);
        set.insert(&[
            f("metadata"),
            f("finalizers"),
            PathElement::Value("\"x\"".into()),
        ]);
        let a = PathElement::Key(vec![("name".into(), "\"a\"".into())]);
        set.insert(&[f("spec"), f("containers"), a, f("image")]);
        let b = PathElement::Key(vec![("name".into(), "\"b\"".into())]);
        set.insert(&[f("spec"), f("containers"), b]);
        remove(&pod().root, &mut value, &set);
        assert_eq!(
            value,
            json!({"metadata": {"finalizers": ["y"]}, "spec": {"containers": [{"name": "a"}]}})
        );
    }
}
