//! Strategic merge patch (`application/strategic-merge-patch+json`).
//!
//! A JSON merge patch (RFC 7386) that knows, from the kind's [`Schema`],
//! which lists merge item by item instead of being replaced: `containers`
//! by `name`, `ports` by `containerPort`, `finalizers` as a set, and so on.
//! Directives in the patch steer the merge:
//!
//! - `$patch: replace` in a map replaces the map; in a list item, the list.
//! - `$patch: delete` in a map empties it; in a list item, deletes the items
//!   with that merge key.
//! - `$deleteFromPrimitiveList/<field>: [..]` removes values from a merged
//!   list of scalars.
//! - `$setElementOrder/<field>: [..]` gives the order of a merged list.
//! - `$retainKeys: [..]` drops the keys of the map that are not listed.
//! - `null` deletes a field.
//!
//! This follows kube-apiserver, including the order merged lists come out
//! in: items named by the patch in the patch's order, interleaved with the
//! server's other items at their former places.
//!
//! ```
//! use devcluster::patch::strategic;
//! use devcluster::kinds;
//! use serde_json::json;
//!
//! let pods = kinds::schema("", "v1", "Pod").expect("built in");
//! let live = json!({"spec": {"containers": [{"name": "a", "image": "v1"},
//!                                          {"name": "b", "image": "v1"}]}});
//! let patch = json!({"spec": {"containers": [{"name": "b", "image": "v2"}]}});
//! let patched = strategic::strategic_merge(&live, &patch, pods)?;
//! assert_eq!(patched["spec"]["containers"][1], json!({"name": "b", "image": "v2"}));
//! assert_eq!(patched["spec"]["containers"][0], json!({"name": "a", "image": "v1"}));
//! # Ok::<(), strategic::Error>(())
//! ```

use serde_json::{Map, Value};

use crate::schema::{Node, Schema, Strategy};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Why a strategic merge patch could not be applied. [`Error::code`] and
/// [`Error::reason`] give the response status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kind has no strategic merge schema (a custom resource).
    /// 415 Unsupported Media Type.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    Unsupported,
    /// The patch is not a JSON object. 400 Bad Request.
    #[error("invalid JSON document")]
    BadJsonDoc,
    /// A `$deleteFromPrimitiveList` directive is malformed. 400 Bad Request.
    #[error("invalid patch format of primitive list")]
    BadPrimitiveList,
    /// A `$retainKeys` directive is not a list, or the patch sets a key it
    /// does not retain. 400 Bad Request.
    #[error("invalid patch format of retainKeys")]
    BadRetainKeys,
    /// A `$setElementOrder` directive is malformed. 400 Bad Request.
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrder,
    /// A list holds lists. 422 Unprocessable Entity.
    #[error("lists of lists are not supported")]
    ListOfLists,
    /// A `$patch` directive other than `replace` or `delete` in a map.
    /// 422 Unprocessable Entity.
    #[error("unknown patch type: {directive} in map: {map}")]
    UnknownDirective {
        /// The directive's value.
        directive: String,
        /// The map it was found in.
        map: Value,
    },
    /// A `$patch` directive other than `replace` or `delete` in a list item.
    /// 422 Unprocessable Entity.
    #[error("merging lists cannot yet be specified in the patch")]
    ListMergeDirective,
    /// An item of a merged list lacks the merge key. 422 Unprocessable Entity.
    #[error("map: {map} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The item.
        map: Value,
        /// The merge key.
        key: String,
    },
    /// The items of a merged list are of different types.
    /// 422 Unprocessable Entity.
    #[error("list element types are not identical: {0}")]
    MixedList(Value),
    /// A merged list of objects holds something else. 422 Unprocessable Entity.
    #[error("expected a map, but received {0}")]
    NotAMap(Value),
    /// A `$setElementOrder` list disagrees with the order of the patch list.
    /// 422 Unprocessable Entity.
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    OrderMismatch {
        /// The patch list.
        patch: Value,
        /// The `$setElementOrder` list.
        order: Value,
    },
}

/// The result of a strategic merge patch.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status code of the response.
    ///
    /// kube-apiserver answers 400 for malformed directives and 422 for lists
    /// of lists; its other patch errors surface as 500, which devcluster
    /// answers as 422 instead: the patch is what is wrong.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            Error::Unsupported => 415,
            Error::BadJsonDoc
            | Error::BadPrimitiveList
            | Error::BadRetainKeys
            | Error::BadSetElementOrder => 400,
            _ => 422,
        }
    }

    /// The `Status.reason` of the response.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self.code() {
            415 => "UnsupportedMediaType",
            400 => "BadRequest",
            _ => "Invalid",
        }
    }
}

/// Applies a strategic merge `patch` to `original`.
///
/// # Errors
///
/// [`Error::Unsupported`] when `schema` does not support strategic merge
/// patch (custom resources); the other variants for malformed patches.
pub fn strategic_merge(original: &Value, patch: &Value, schema: &Schema) -> Result<Value> {
    if !schema.supports_strategic_merge() {
        return Err(Error::Unsupported);
    }
    let Value::Object(patch) = patch else {
        return Err(Error::BadJsonDoc);
    };
    let original = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    merge_map(original, patch.clone(), &schema.root).map(Value::Object)
}

/// Merges a patch map into an original map.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    node: &Node,
) -> Result<Map<String, Value>> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => merge_map(Map::new(), patch, node),
            Some("delete") => Ok(Map::new()),
            _ => {
                let text = directive_text(&directive);
                patch.insert(DIRECTIVE.to_owned(), directive);
                Err(Error::UnknownDirective {
                    directive: text,
                    map: Value::Object(patch),
                })
            }
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_orders(&mut original, &mut patch, node)?;

    for (key, value) in patch {
        let (key, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some("") => return Err(Error::BadPrimitiveList),
            Some(field) => (field.to_owned(), true),
            None if key.starts_with("$deleteFromPrimitiveList") => {
                return Err(Error::BadPrimitiveList);
            }
            // Not a field of any kind: dropped, as decoding into the typed
            // object drops it on a real server.
            None if key.starts_with('$') => continue,
            None => (key, false),
        };
        let child = node.child(&key).node;
        if value.is_null() {
            original.remove(&key);
            continue;
        }
        let merged = match (original.remove(&key), value) {
            (None, value) if delete_list => {
                // Nothing to delete from. (kube-apiserver stores the deletion
                // list as the field's value here, which no client relies on.)
                if !value.is_array() {
                    return Err(Error::BadPrimitiveList);
                }
                continue;
            }
            (None, value) => fresh(value, child)?,
            (Some(Value::Object(old)), Value::Object(new)) => {
                Value::Object(merge_map(old, new, child)?)
            }
            (Some(Value::Array(old)), Value::Array(new)) => match child.list() {
                Some(list) => match &list.strategy {
                    Strategy::Merge { key } => Value::Array(merge_list(
                        old,
                        new,
                        &list.item,
                        key.as_deref(),
                        delete_list,
                    )?),
                    Strategy::Replace => fresh(Value::Array(new), child)?,
                },
                None => fresh(Value::Array(new), child)?,
            },
            (Some(_), value) if delete_list && !value.is_array() => {
                return Err(Error::BadPrimitiveList);
            }
            (Some(_), value) => fresh(value, child)?,
        };
        original.insert(key, merged);
    }
    Ok(original)
}

/// A directive as error messages show it: strings bare, anything else as JSON.
fn directive_text(directive: &Value) -> String {
    match directive {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A patch value for a field the original lacks or replaces: merged into
/// nothing, so that its own directives are applied and dropped.
fn fresh(value: Value, node: &Node) -> Result<Value> {
    match value {
        Value::Object(map) => merge_map(Map::new(), map, node).map(Value::Object),
        Value::Array(items) => {
            let merge_key = match node.list().map(|l| &l.strategy) {
                Some(Strategy::Merge { key }) => Some(key.as_deref()),
                _ => None,
            };
            let item = node.list().map_or(&Node::Untyped, |l| &l.item);
            match merge_key {
                Some(key) => merge_list(Vec::new(), items, item, key, false).map(Value::Array),
                None => {
                    let mut out = Vec::with_capacity(items.len());
                    for value in items {
                        out.push(match value {
                            Value::Object(map) => Value::Object(merge_map(Map::new(), map, item)?),
                            other => other,
                        });
                    }
                    Ok(Value::Array(out))
                }
            }
        }
        other => Ok(other),
    }
}

/// Applies `$retainKeys`: keys of the original not listed are dropped, and
/// the patch may set no key that is not listed.
fn retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(Error::BadRetainKeys);
    };
    let listed = |key: &str| retain.iter().any(|k| k.as_str() == Some(key));
    for (key, value) in patch.iter() {
        let directive =
            key.starts_with(DELETE_FROM_PRIMITIVE_LIST) || key.starts_with(SET_ELEMENT_ORDER);
        if !value.is_null() && !directive && !listed(key) {
            return Err(Error::BadRetainKeys);
        }
    }
    original.retain(|key, _| listed(key));
    Ok(())
}

/// Applies every `$setElementOrder/<field>` of the patch, merging the field's
/// list in the process.
fn set_element_orders(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    node: &Node,
) -> Result<()> {
    let directives: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with("$setElementOrder"))
        .cloned()
        .collect();
    for directive in directives {
        let Some(Value::Array(order)) = patch.remove(&directive) else {
            return Err(Error::BadSetElementOrder);
        };
        let field = match directive.strip_prefix(SET_ELEMENT_ORDER) {
            Some(field) if !field.is_empty() => field.to_owned(),
            _ => return Err(Error::BadSetElementOrder),
        };
        let child = node.child(&field).node;
        let (item_node, merges, merge_key) = match child.list() {
            Some(list) => match &list.strategy {
                Strategy::Merge { key } => (&list.item, true, key.clone()),
                Strategy::Replace => (&list.item, false, None),
            },
            None => (&Node::Untyped, false, None),
        };
        let old = match original.remove(&field) {
            Some(Value::Array(items)) => Some(items),
            Some(other) => return Err(Error::MixedList(other)),
            None => None,
        };
        let new = match patch.remove(&field) {
            Some(Value::Array(items)) => Some(items),
            Some(other) => return Err(Error::MixedList(other)),
            None => None,
        };
        check_order(
            new.as_deref().unwrap_or_default(),
            &order,
            merge_key.as_deref(),
        )?;
        let server_order = old.clone().unwrap_or_default();
        let merged = match (old, new) {
            (Some(old), None) => old,
            (None, Some(new)) if merges => {
                merge_list(Vec::new(), new, item_node, merge_key.as_deref(), false)?
            }
            (Some(old), Some(new)) if merges => {
                merge_list(old, new, item_node, merge_key.as_deref(), false)?
            }
            (_, Some(new)) => match fresh(Value::Array(new), child)? {
                Value::Array(items) => items,
                _ => Vec::new(),
            },
            (None, None) => continue,
        };
        let key = merge_key.as_deref();
        let (named, others): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|v| position(&order, v, key).is_some());
        let ordered = interleave(named, others, &order, &server_order, key);
        original.insert(field, Value::Array(ordered));
    }
    Ok(())
}

/// Checks that the items of the patch list come in the relative order of the
/// `$setElementOrder` list.
fn check_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    let items: Vec<&Value> = patch
        .iter()
        .filter(|v| !(key.is_some() && v.get(DIRECTIVE).is_some()))
        .collect();
    let (mut p, mut o) = (0, 0);
    while p < items.len() && o < order.len() {
        if same_item(items[p], &order[o], key) {
            p += 1;
        }
        o += 1;
    }
    if p < items.len() {
        return Err(Error::OrderMismatch {
            patch: Value::Array(patch.to_vec()),
            order: Value::Array(order.to_vec()),
        });
    }
    Ok(())
}

/// Whether two items are the same item: equal merge keys, or equal scalars.
fn same_item(a: &Value, b: &Value, key: Option<&str>) -> bool {
    match key {
        Some(key) => match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        None => a == b,
    }
}

fn position(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    list.iter().position(|v| same_item(v, item, key))
}

/// Merges a patch list into an original list that merges item by item:
/// objects by `key`, scalars (`key` is `None`) as a set, or, for a
/// `$deleteFromPrimitiveList` directive, by removing the patch's values.
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    item: &Node,
    key: Option<&str>,
    delete_list: bool,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let objects = element_kind(&original, &patch)?;
    let (merged, patch) = if !objects {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged = original.clone();
        for value in &patch {
            if !merged.contains(value) {
                merged.push(value.clone());
            }
        }
        (merged, patch)
    } else {
        let Some(key) = key else {
            return Err(Error::MixedList(Value::Array(patch)));
        };
        let (original, patch) = special_items(original, patch, item, key)?;
        let mut merged = original.clone();
        let mut named = Vec::with_capacity(patch.len());
        for value in patch {
            let Value::Object(map) = value else {
                return Err(Error::NotAMap(value));
            };
            let Some(id) = map.get(key).cloned() else {
                return Err(Error::MissingMergeKey {
                    map: Value::Object(map),
                    key: key.to_owned(),
                });
            };
            match merged.iter().position(|v| v.get(key) == Some(&id)) {
                Some(index) => {
                    let old = match std::mem::take(&mut merged[index]) {
                        Value::Object(old) => old,
                        other => return Err(Error::NotAMap(other)),
                    };
                    merged[index] = Value::Object(merge_map(old, map, item)?);
                }
                None => merged.push(Value::Object(merge_map(Map::new(), map, item)?)),
            }
            let mut name = Map::new();
            name.insert(key.to_owned(), id);
            named.push(Value::Object(name));
        }
        return Ok(order_merged(merged, &named, &original, Some(key)));
    };
    Ok(order_merged(merged, &patch, &original, None))
}

/// Puts a merged list in order: the items the patch names in the patch's
/// order, interleaved with the other items in their original order.
fn order_merged(
    merged: Vec<Value>,
    patch: &[Value],
    original: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let (named, others): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| position(patch, v, key).is_some());
    interleave(named, others, patch, original, key)
}

/// Sorts `named` by `patch_order` and `others` by `server_order`, then
/// inserts each of `others` before the first of `named` that comes after it
/// on the server.
fn interleave(
    mut named: Vec<Value>,
    mut others: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let rank = |list: &[Value], v: &Value| position(list, v, key).unwrap_or(usize::MAX);
    named.sort_by_key(|v| rank(patch_order, v));
    others.sort_by_key(|v| rank(server_order, v));
    let mut out = Vec::with_capacity(named.len() + others.len());
    let mut named = named.into_iter().peekable();
    let mut others = others.into_iter().peekable();
    loop {
        let take_other = match (others.peek(), named.peek()) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
            (Some(other), Some(next)) => {
                match (
                    position(server_order, other, key),
                    position(server_order, next, key),
                ) {
                    (Some(a), Some(b)) => a < b,
                    _ => false,
                }
            }
        };
        let next = if take_other {
            others.next()
        } else {
            named.next()
        };
        out.extend(next);
    }
    out
}

/// Whether the items of the lists are objects (`true`) or scalars; lists of
/// lists and mixed lists are errors.
fn element_kind(original: &[Value], patch: &[Value]) -> Result<bool> {
    let mut kind = None;
    for value in original.iter().chain(patch) {
        let this = match value {
            Value::Array(_) => return Err(Error::ListOfLists),
            Value::Object(_) => 0,
            Value::String(_) => 1,
            Value::Number(_) => 2,
            Value::Bool(_) => 3,
            Value::Null => 4,
        };
        match kind {
            None => kind = Some(this),
            Some(k) if k != this => {
                let all = original.iter().chain(patch).cloned().collect();
                return Err(Error::MixedList(Value::Array(all)));
            }
            Some(_) => {}
        }
    }
    Ok(kind == Some(0))
}

/// Applies the `$patch` items of a patch list: `delete` removes the original
/// items with that key, `replace` makes the rest of the patch the list.
fn special_items(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    item: &Node,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for value in patch {
        let Some(directive) = value.get(DIRECTIVE) else {
            rest.push(value);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(id) = value.get(key) else {
                    return Err(Error::MissingMergeKey {
                        map: value.clone(),
                        key: key.to_owned(),
                    });
                };
                original.retain(|v| v.get(key) != Some(id));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(Error::ListMergeDirective),
            _ => {
                return Err(Error::UnknownDirective {
                    directive: directive_text(directive),
                    map: value.clone(),
                });
            }
        }
    }
    if replace {
        let mut replaced = Vec::with_capacity(rest.len());
        for value in rest {
            let Value::Object(map) = value else {
                return Err(Error::NotAMap(value));
            };
            replaced.push(Value::Object(merge_map(Map::new(), map, item)?));
        }
        return Ok((replaced, Vec::new()));
    }
    Ok((original, rest))
}

#[cfg(test)]
mod tests;
