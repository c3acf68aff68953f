//! What devcluster knows of each kind's shape: the merge metadata shared by
//! strategic merge patch and server-side apply (here), and the structural
//! schema of a custom resource, which prunes and defaults its writes
//! ([`structural`]).
//!
//! ## Merge metadata
//!
//! Both patch semantics need to know, for each list of an object, whether it is
//! replaced whole or merged item by item (and by which key), and for each map
//! whether it is merged key by key. Built-in kinds carry that knowledge in the
//! tags of their Go types (`patchStrategy`, `patchMergeKey`, `+listType`,
//! `+listMapKey`, `+mapType`, `+structType`); custom resources carry it in the
//! `openAPIV3Schema` of their CRD (`x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`,
//! `x-kubernetes-preserve-unknown-fields`). A [`Schema`] holds either, as one
//! tree, so that both patch implementations read the same table.
//!
//! ```
//! use devcluster::{kinds, schema::Schema};
//!
//! let pods = kinds::schema("", "v1", "Pod").expect("pods are built in");
//! assert!(pods.supports_strategic_merge());
//! assert!(!Schema::untyped().supports_strategic_merge());
//! ```

pub(crate) mod build;
mod crd;
pub(crate) mod structural;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::gotypes::GoType;

pub use crd::{Error, Result};

/// How the fields of one kind merge: the schema both patch semantics walk.
///
/// Built-in kinds come from [`crate::kinds::schema`]; custom resources from
/// [`Schema::from_crd`] or [`Schema::from_openapi_v3`]; anything else can use
/// [`Schema::untyped`].
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    pub(crate) root: Node,
    status_subresource: bool,
    strategic: bool,
    /// The Go type of a built-in kind: what each field holds.
    types: Option<GoType>,
}

impl Schema {
    pub(crate) fn new(root: Node, status_subresource: bool, strategic: bool) -> Self {
        Self {
            root,
            status_subresource,
            strategic,
            types: None,
        }
    }

    /// Sets the Go type of the kind, which a patched object is read into,
    /// and an apply's configuration checked against, as kube-apiserver does.
    pub(crate) fn with_types(mut self, types: Option<GoType>) -> Self {
        self.types = types;
        self
    }

    /// The Go type of the kind, for a built-in kind.
    pub(crate) fn types(&self) -> Option<GoType> {
        self.types
    }

    /// A schema that knows nothing about the kind: objects merge key by key,
    /// lists are replaced whole (the default for server-side apply), and
    /// `metadata` is the standard object metadata. Strategic merge patch is
    /// not supported on it.
    #[must_use]
    pub fn untyped() -> Self {
        Self::new(build::root().build(), false, false)
    }

    /// Whether the kind has a `status` subresource. When it has one, a write to
    /// the main resource leaves `status` alone, and a write to the subresource
    /// touches only `status`.
    #[must_use]
    pub fn has_status_subresource(&self) -> bool {
        self.status_subresource
    }

    /// Sets whether the kind has a `status` subresource.
    #[must_use]
    pub fn with_status_subresource(mut self, status_subresource: bool) -> Self {
        self.status_subresource = status_subresource;
        self
    }

    /// Leaves out what the Go types of a built-in kind do not encode: the empty or
    /// null Go maps (`labels`, a ConfigMap's `data`) and lists the table describes, all
    /// `omitempty`, except the fields always encoded (a PodSpec's `containers`). A
    /// real API server decodes every write into those types, so `data: {}` is stored
    /// as no `data` and is owned by no one.
    pub(crate) fn omit_empty(&self, value: &mut Value) {
        omit_empty_at(&self.root, value);
    }

    /// Whether `application/strategic-merge-patch+json` is accepted for the
    /// kind: true for the built-in kinds only, as on a real API server, which
    /// answers 415 Unsupported Media Type for custom resources.
    #[must_use]
    pub fn supports_strategic_merge(&self) -> bool {
        self.strategic
    }
}

fn omit_empty_at(node: &Node, value: &mut Value) {
    match (node, value) {
        (Node::Object(object), Value::Object(map)) => {
            map.retain(|key, child| {
                let Some(field) = object.fields.get(key) else {
                    return true;
                };
                let omittable = !field.embedded
                    && match &field.node {
                        Node::Object(o) => matches!(o.rest, Rest::Entries(_)),
                        Node::List(_) => true,
                        _ => false,
                    };
                let empty = match child {
                    Value::Null => true,
                    Value::Object(m) => m.is_empty(),
                    Value::Array(a) => a.is_empty(),
                    _ => false,
                };
                !(omittable && empty)
            });
            for (key, child) in map.iter_mut() {
                if let Some(field) = object.fields.get(key) {
                    omit_empty_at(&field.node, child);
                }
            }
        }
        (Node::List(list), Value::Array(items)) => {
            for item in items {
                omit_empty_at(&list.item, item);
            }
        }
        _ => {}
    }
}

/// What one position of an object is, for merging.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    /// A scalar, or a map or list replaced whole (`atomic`).
    Atomic,
    /// A map merged key by key, with some keys described.
    Object(Box<ObjectNode>),
    /// A list, with its merge rules.
    List(Box<ListNode>),
    /// A part of a built-in kind that the table does not describe: objects
    /// are structs merged field by field, lists are atomic.
    Untyped,
    /// A `x-kubernetes-preserve-unknown-fields` subtree: objects are maps
    /// merged key by key (each key a map entry), lists are atomic.
    Deduced,
}

/// A map merged key by key.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ObjectNode {
    /// The described keys.
    pub(crate) fields: BTreeMap<String, Field>,
    /// What the other keys are.
    pub(crate) rest: Rest,
}

/// A described key of an [`ObjectNode`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Field {
    pub(crate) node: Node,
    /// A non-pointer struct of a built-in type: always present in the typed
    /// object, so its own appearance is never an ownership change.
    pub(crate) embedded: bool,
}

/// What the undescribed keys of an [`ObjectNode`] are.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Rest {
    /// Struct fields of the given shape (a built-in type, or a CRD property
    /// list without `additionalProperties`).
    Fields(Node),
    /// Map entries of the given shape (`additionalProperties`,
    /// `x-kubernetes-preserve-unknown-fields`): each key is owned as such.
    Entries(Node),
}

/// A list and its merge rules.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListNode {
    /// How server-side apply merges it.
    pub(crate) kind: ListKind,
    /// How strategic merge patch merges it.
    pub(crate) strategy: Strategy,
    /// What its items are.
    pub(crate) item: Node,
}

/// How server-side apply merges a list (`x-kubernetes-list-type`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ListKind {
    /// Replaced whole.
    Atomic,
    /// A set of scalars, merged by value.
    Set,
    /// Objects merged by the values of their key fields.
    Map(Vec<MapKey>),
}

/// One key field of an associative list.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MapKey {
    pub(crate) name: String,
    /// The value an item that omits the key is identified by (for example
    /// `protocol: TCP` of container ports).
    pub(crate) default: Option<Value>,
}

/// How strategic merge patch merges a list (`patchStrategy`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Strategy {
    /// Replaced whole by the patch's list.
    Replace,
    /// Merged: objects by the `patchMergeKey` field, scalars (no key) by value.
    Merge {
        /// The `patchMergeKey`; `None` for lists of scalars.
        key: Option<String>,
    },
}

/// A child position of an object node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Child<'a> {
    pub(crate) node: &'a Node,
    /// The key is a map entry (owned as such), not a struct field.
    pub(crate) entry: bool,
    pub(crate) embedded: bool,
}

static ATOMIC: Node = Node::Atomic;
static UNTYPED: Node = Node::Untyped;
static DEDUCED: Node = Node::Deduced;

impl Node {
    /// The position of `key` in an object at this node.
    pub(crate) fn child(&self, key: &str) -> Child<'_> {
        let plain = |node, entry| Child {
            node,
            entry,
            embedded: false,
        };
        match self {
            Node::Object(object) => match object.fields.get(key) {
                Some(field) => Child {
                    node: &field.node,
                    entry: false,
                    embedded: field.embedded,
                },
                None => match &object.rest {
                    Rest::Fields(node) => plain(node, false),
                    Rest::Entries(node) => plain(node, true),
                },
            },
            Node::Untyped => plain(&UNTYPED, false),
            Node::Deduced => plain(&DEDUCED, true),
            Node::Atomic | Node::List(_) => plain(&ATOMIC, false),
        }
    }

    /// The list rules at this node, if it is a described list.
    pub(crate) fn list(&self) -> Option<&ListNode> {
        match self {
            Node::List(list) => Some(list),
            _ => None,
        }
    }

    /// The position of the items of a list found at this node.
    pub(crate) fn items(&self) -> &Node {
        match self {
            Node::List(list) => &list.item,
            Node::Untyped => &UNTYPED,
            Node::Deduced => &DEDUCED,
            Node::Atomic | Node::Object(_) => &ATOMIC,
        }
    }

    /// Whether an object found at this node merges key by key.
    pub(crate) fn merges_objects(&self) -> bool {
        matches!(self, Node::Object(_) | Node::Untyped | Node::Deduced)
    }
}
