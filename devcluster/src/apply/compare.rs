//! Which fields a write added, removed and changed: the basis of ownership.

use std::collections::HashMap;

use serde_json::Value;

use super::fieldset::{FieldSet, PathElement};
use super::typed::{Shape, index_items, is_empty, shape};
use crate::schema::{ListNode, Node};

/// The difference between two versions of an object, as field sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Comparison {
    /// Paths present only in the new version: leaves, and maps, lists and
    /// list items that appeared.
    pub(crate) added: FieldSet,
    /// Paths present only in the old version.
    pub(crate) removed: FieldSet,
    /// Leaves present in both with different values.
    pub(crate) modified: FieldSet,
}

impl Comparison {
    /// What the new version set (added or modified), and what it removed.
    pub(crate) fn into_changed_and_removed(self) -> (FieldSet, FieldSet) {
        let Comparison {
            mut added,
            removed,
            modified,
        } = self;
        added.extend(&modified);
        (added, removed)
    }
}

/// Compares two versions of an object of one schema, leaving out
/// `metadata.managedFields`.
pub(crate) fn compare(node: &Node, old: &Value, new: &Value) -> Comparison {
    let mut out = Comparison::default();
    walk(node, Some(old), Some(new), false, &mut Vec::new(), &mut out);
    out
}

fn walk(
    node: &Node,
    old: Option<&Value>,
    new: Option<&Value>,
    embedded: bool,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let in_metadata = matches!(path.as_slice(), [PathElement::Field(f)] if f == "metadata");
    match (old, new) {
        // Most of an object is unchanged by a write: skip it whole.
        (Some(old), Some(new)) if old == new => return,
        (None, Some(new)) => {
            let (below, member) = one_side(node, new, embedded, in_metadata);
            return out.added.graft(path, below, member);
        }
        (Some(old), None) => {
            let (below, member) = one_side(node, old, embedded, in_metadata);
            return out.removed.graft(path, below, member);
        }
        _ => {}
    }
    // Nothing to merge on either side: compare as a leaf, which keeps the
    // difference between null, empty and absent.
    let both_empty = old.is_none_or(is_empty) && new.is_none_or(is_empty);
    let shapes = (old.map(|v| shape(node, v)), new.map(|v| shape(node, v)));
    match shapes {
        _ if both_empty => leaf(old, new, path, out),
        (Some(Shape::Leaf), Some(Shape::Leaf)) | (Some(Shape::Leaf), None) => {
            leaf(old, new, path, out)
        }
        (None, Some(Shape::Leaf)) => leaf(old, new, path, out),
        (Some(Shape::Map(_)), Some(Shape::Map(_)))
        | (Some(Shape::List(..)), Some(Shape::List(..)))
        | (Some(_), None)
        | (None, Some(_)) => granular(node, old, new, embedded, path, out),
        (Some(_), Some(_)) => {
            // The value changed kind: everything old went, everything new came.
            walk(node, old, None, embedded, path, out);
            walk(node, None, new, embedded, path, out);
        }
        (None, None) => {}
    }
}

/// What a value present on one side only adds or removes: the paths under
/// it, and whether its own path counts (it does, unless it is an embedded
/// struct holding something). Built in one pass, as creates add everything.
fn one_side(node: &Node, value: &Value, embedded: bool, in_metadata: bool) -> (FieldSet, bool) {
    let mut below = FieldSet::new();
    if is_empty(value) {
        return (below, true);
    }
    match shape(node, value) {
        Shape::Leaf => return (below, true),
        Shape::Map(map) => {
            for (key, child_value) in map {
                if in_metadata && key == "managedFields" {
                    continue;
                }
                let child = node.child(key);
                let (sub, member) = one_side(child.node, child_value, child.embedded, false);
                below.attach(PathElement::Field(key.clone()), sub, member);
            }
        }
        Shape::List(list, items) => {
            let Some(items) = index_items(list, items) else {
                return (below, true);
            };
            for (element, item) in items {
                let (sub, member) = one_side(&list.item, item, false, false);
                below.attach(element, sub, member);
            }
        }
    }
    (below, !embedded)
}

/// The identified items of a list value (none when absent).
fn items_of<'a>(
    list: &ListNode,
    value: Option<&'a Value>,
) -> Option<Vec<(PathElement, &'a Value)>> {
    let items = value.and_then(Value::as_array).map(Vec::as_slice);
    index_items(list, items.unwrap_or_default())
}

fn leaf(old: Option<&Value>, new: Option<&Value>, path: &[PathElement], out: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        (Some(old), Some(new)) if old != new => out.modified.insert(path),
        _ => {}
    }
}

fn granular(
    node: &Node,
    old: Option<&Value>,
    new: Option<&Value>,
    embedded: bool,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let side = old.or(new).map(|v| shape(node, v));
    match side {
        Some(Shape::Map(_)) => {
            let old_map = old.and_then(Value::as_object);
            let new_map = new.and_then(Value::as_object);
            let in_metadata = matches!(path.as_slice(), [PathElement::Field(f)] if f == "metadata");
            let old_keys = old_map.into_iter().flat_map(|m| m.keys());
            let new_only = new_map
                .into_iter()
                .flat_map(|m| m.keys())
                .filter(|key| !old_map.is_some_and(|m| m.contains_key(*key)));
            for key in old_keys.chain(new_only) {
                if in_metadata && key == "managedFields" {
                    continue;
                }
                let child = node.child(key);
                path.push(PathElement::Field(key.clone()));
                walk(
                    child.node,
                    old_map.and_then(|m| m.get(key)),
                    new_map.and_then(|m| m.get(key)),
                    child.embedded,
                    path,
                    out,
                );
                path.pop();
            }
        }
        Some(Shape::List(list, _)) => {
            let (Some(old_items), Some(new_items)) = (items_of(list, old), items_of(list, new))
            else {
                // Items that cannot be told apart: the list is one value.
                return leaf(old, new, path, out);
            };
            let new_by: HashMap<&PathElement, &Value> =
                new_items.iter().map(|(e, v)| (e, *v)).collect();
            let old_by: HashMap<&PathElement, &Value> =
                old_items.iter().map(|(e, v)| (e, *v)).collect();
            for (element, item) in &old_items {
                path.push(element.clone());
                walk(
                    &list.item,
                    Some(item),
                    new_by.get(element).copied(),
                    false,
                    path,
                    out,
                );
                path.pop();
            }
            for (element, item) in &new_items {
                if !old_by.contains_key(element) {
                    path.push(element.clone());
                    walk(&list.item, None, Some(item), false, path, out);
                    path.pop();
                }
            }
        }
        _ => {}
    }
    // A map, list or item that appeared or went is itself added or removed,
    // unless it is a struct that every typed object has.
    if !embedded {
        match (old, new) {
            (None, Some(_)) => out.added.insert(path),
            (Some(_), None) => out.removed.insert(path),
            _ => {}
        }
    }
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
    fn changed_leaves_are_modified_and_new_items_are_added_with_their_fields() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "v1"}]}});
        let new = json!({"spec": {"containers": [
            {"name": "a", "image": "v2"},
            {"name": "b", "image": "v1"}
        ]}});
        let cmp = compare(&pod().root, &old, &new);
        assert_eq!(
            paths(&cmp.modified),
            vec![".spec.containers[name=\"a\"].image"]
        );
        assert_eq!(
            paths(&cmp.added),
            vec![
                ".spec.containers[name=\"b\"]",
                ".spec.containers[name=\"b\"].image",
                ".spec.containers[name=\"b\"].name"
            ]
        );
        assert!(cmp.removed.is_empty());
    }

    #[test]
    fn a_map_that_appears_is_added_itself_but_embedded_structs_are_not() {
        let cmp = compare(
            &pod().root,
            &json!({}),
            &json!({"metadata": {"labels": {"a": "1"}}, "spec": {"nodeName": "n"}}),
        );
        assert_eq!(
            paths(&cmp.added),
            vec![".metadata.labels", ".metadata.labels.a", ".spec.nodeName"]
        );
    }

    #[test]
    fn removed_items_and_fields_are_removed_and_equal_values_are_nothing() {
        let old = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"}}});
        let new = json!({"metadata": {"finalizers": ["b"], "labels": {"x": "1"}}});
        let cmp = compare(&pod().root, &old, &new);
        assert_eq!(paths(&cmp.removed), vec![".metadata.finalizers[=\"a\"]"]);
        assert!(cmp.added.is_empty() && cmp.modified.is_empty());
    }

    #[test]
    fn atomic_lists_and_kind_changes_are_single_values() {
        let old = json!({"spec": {"tolerations": [{"key": "a"}], "x": {"y": 1}}});
        let new = json!({"spec": {"tolerations": [{"key": "b"}], "x": 5}});
        let cmp = compare(&pod().root, &old, &new);
        assert_eq!(paths(&cmp.modified), vec![".spec.tolerations"]);
        assert_eq!(paths(&cmp.added), vec![".spec.x"]);
        assert_eq!(paths(&cmp.removed), vec![".spec.x", ".spec.x.y"]);
    }
}
