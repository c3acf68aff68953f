//! The words built-in kinds' merge schemas are written in (`crate::kinds`
//! writes each kind's), read from the Go types of `k8s.io/api`: struct tags
//! `patchStrategy` and `patchMergeKey` for strategic merge patch, markers
//! `+listType`, `+listMapKey`, `+mapType` and `+structType` for server-side
//! apply. A kind lists only the positions where it departs from the
//! defaults: an undescribed object merges field by field, an undescribed list
//! is replaced whole (`tolerations`, `command`, `containerStatuses`, ...).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Field, ListKind, ListNode, MapKey, Node, ObjectNode, Rest, Strategy};

/// Builds an [`ObjectNode`] whose undescribed keys are struct fields.
pub(crate) struct Obj(ObjectNode);

pub(crate) fn obj() -> Obj {
    Obj(ObjectNode {
        fields: BTreeMap::new(),
        rest: Rest::Fields(Node::Untyped),
    })
}

impl Obj {
    /// Describes a pointer field (or a map or list).
    pub(crate) fn field(mut self, name: &str, node: Node) -> Self {
        let field = Field {
            node,
            embedded: false,
        };
        self.0.fields.insert(name.to_owned(), field);
        self
    }

    /// Describes a non-pointer struct field, present in every typed object.
    pub(crate) fn embedded(self, name: &str, node: Obj) -> Self {
        self.always(name, node.build())
    }

    /// Describes a field the typed object always serializes (no
    /// `omitempty`), even as `null`.
    pub(crate) fn always(mut self, name: &str, node: Node) -> Self {
        let field = Field {
            node,
            embedded: true,
        };
        self.0.fields.insert(name.to_owned(), field);
        self
    }

    pub(crate) fn build(self) -> Node {
        Node::Object(Box::new(self.0))
    }
}

fn list(kind: ListKind, strategy: Strategy, item: Node) -> Node {
    Node::List(Box::new(ListNode {
        kind,
        strategy,
        item,
    }))
}

/// `+listType=map` keyed by `keys` (with optional defaults), merged by
/// strategic merge patch on `keys[0]`, the `patchMergeKey`.
pub(crate) fn keyed(keys: &[(&str, Option<&str>)], item: Node) -> Node {
    let merge_key = keys.first().map(|(name, _)| (*name).to_owned());
    keyed_with(keys, Strategy::Merge { key: merge_key }, item)
}

pub(crate) fn keyed_with(keys: &[(&str, Option<&str>)], strategy: Strategy, item: Node) -> Node {
    let keys = keys
        .iter()
        .map(|(name, default)| MapKey {
            name: (*name).to_owned(),
            default: default.map(|d| Value::String(d.to_owned())),
        })
        .collect();
    list(ListKind::Map(keys), strategy, item)
}

/// `+listType=map` on `name`, `patchMergeKey:"name"`.
pub(crate) fn by_name(item: Node) -> Node {
    keyed(&[("name", None)], item)
}

/// `+listType=set`, merged as a set of scalars by strategic merge patch too
/// when `strategic` (`patchStrategy:"merge"` without a key).
pub(crate) fn set(strategic: bool) -> Node {
    let strategy = if strategic {
        Strategy::Merge { key: None }
    } else {
        Strategy::Replace
    };
    list(ListKind::Set, strategy, Node::Atomic)
}

/// A Go map (`map[string]string`, `map[string][]byte`): merged key by key,
/// and, being `omitempty`, left out of the typed object when empty.
pub(crate) fn map() -> Node {
    Node::Object(Box::new(ObjectNode {
        fields: BTreeMap::new(),
        rest: Rest::Entries(Node::Atomic),
    }))
}

/// `+listType=atomic` but `patchStrategy:"merge"` on `key`.
pub(crate) fn atomic_merged_by(key: &str) -> Node {
    let strategy = Strategy::Merge {
        key: Some(key.to_owned()),
    };
    list(ListKind::Atomic, strategy, Node::Untyped)
}

/// `metav1.ObjectMeta`.
pub(crate) fn metadata() -> Obj {
    obj()
        .field("labels", map())
        .field("annotations", map())
        .field("finalizers", set(true))
        // `OwnerReference` is `+structType=atomic`: each is owned whole.
        .field("ownerReferences", keyed(&[("uid", None)], Node::Atomic))
        .field("managedFields", Node::Atomic)
}

/// Every kind: `metadata` and nothing else described.
pub(crate) fn root() -> Obj {
    obj().embedded("metadata", metadata())
}

/// A kind of `spec` whose status holds `conditions` keyed by `type`.
pub(crate) fn spec_and_conditions(spec: Obj) -> Obj {
    let status = obj().field("conditions", keyed(&[("type", None)], Node::Untyped));
    root().embedded("spec", spec).embedded("status", status)
}
