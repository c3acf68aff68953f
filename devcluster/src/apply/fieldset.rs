//! Field sets: which paths of an object a manager owns, and their `FieldsV1`
//! encoding in `metadata.managedFields`.
//!
//! A path is a list of [`PathElement`]s: `f:<name>` for a field of a map,
//! `k:{...}` for the item of an associative list with those key values,
//! `v:<json>` for the item of a set, `i:<n>` for a position in an atomic list.
//! A [`FieldSet`] is a tree: at each node, the elements that are owned
//! themselves (members) and the elements under which something is owned
//! (children). `FieldsV1` writes a member as `"<element>": {}` and a node that
//! is both as its children plus `".": {}`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// Why a `fieldsV1` document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A key that is not a path element (`f:`, `k:`, `v:`, `i:` or `.`).
    #[error("invalid path element {0:?} in fieldsV1")]
    PathElement(String),
    /// A value that is not an object.
    #[error("fieldsV1 values must be objects, found {0}")]
    NotAnObject(Value),
}

/// The result of reading field sets.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One step of a path into an object.
///
/// Values of keys and set items are kept as compact JSON text, which gives
/// them an order and is exactly how they are written in `FieldsV1`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of a map (`f:name`).
    Field(String),
    /// An item of an associative list by its key fields, sorted by name
    /// (`k:{"name":"nginx"}`).
    Key(Vec<(String, String)>),
    /// An item of a set by its value (`v:"a"`).
    Value(String),
    /// An item of an atomic list by position (`i:0`).
    Index(usize),
}

impl PathElement {
    /// The element naming field `name`.
    #[must_use]
    pub fn field(name: &str) -> Self {
        PathElement::Field(name.to_owned())
    }

    /// The `FieldsV1` key of this element.
    #[must_use]
    pub fn to_key(&self) -> String {
        match self {
            PathElement::Field(name) => {
                let mut key = String::with_capacity(name.len() + 2);
                key.push_str("f:");
                key.push_str(name);
                key
            }
            PathElement::Key(fields) => {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("{}:{value}", Value::String(name.clone())))
                    .collect();
                format!("k:{{{}}}", body.join(","))
            }
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    /// Reads a `FieldsV1` key; `Ok(None)` for element types this version
    /// does not know, which are dropped as the real server drops them.
    ///
    /// # Errors
    ///
    /// [`Error::PathElement`] for a malformed key.
    pub fn from_key(key: &str) -> Result<Option<Self>> {
        let bad = || Error::PathElement(key.to_owned());
        let Some((kind, body)) = key.split_once(':') else {
            return Err(bad());
        };
        Ok(Some(match kind {
            "f" => PathElement::Field(body.to_owned()),
            "v" => {
                let value: Value = serde_json::from_str(body).map_err(|_| bad())?;
                PathElement::Value(value.to_string())
            }
            "k" => {
                let value: Value = serde_json::from_str(body).map_err(|_| bad())?;
                let Value::Object(fields) = value else {
                    return Err(bad());
                };
                let mut fields: Vec<(String, String)> = fields
                    .into_iter()
                    .map(|(name, value)| (name, value.to_string()))
                    .collect();
                fields.sort();
                PathElement::Key(fields)
            }
            "i" => PathElement::Index(body.parse().map_err(|_| bad())?),
            _ if kind.len() == 1 => return Ok(None),
            _ => return Err(bad()),
        }))
    }
}

impl fmt::Display for PathElement {
    /// The form of conflict messages: `.name`, `[name="nginx"]`, `[="a"]`, `[0]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let body: Vec<String> = fields.iter().map(|(n, v)| format!("{n}={v}")).collect();
                write!(f, "[{}]", body.join(","))
            }
            PathElement::Value(value) => write!(f, "[={value}]"),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// A path into an object, displayed as in conflict messages
/// (`.spec.containers[name="nginx"].image`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|element| write!(f, "{element}"))
    }
}

/// A set of paths, stored as a tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    /// Never holds an empty set.
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set holds no path.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path. The empty path is not a member of anything and is ignored.
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut node = self;
        for element in parents {
            // Clone the element only for a new node: most inserts share a prefix.
            if !node.children.contains_key(element) {
                node.children.insert(element.clone(), FieldSet::new());
            }
            let Some(child) = node.children.get_mut(element) else {
                return;
            };
            node = child;
        }
        if !node.members.contains(last) {
            node.members.insert(last.clone());
        }
    }

    /// Whether `path` was inserted (not merely a prefix of an inserted path).
    #[must_use]
    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    /// The elements owned themselves at this level.
    pub(crate) fn members(&self) -> impl Iterator<Item = &PathElement> {
        self.members.iter()
    }

    /// The elements under which something is owned, with what.
    pub(crate) fn children(&self) -> impl Iterator<Item = (&PathElement, &FieldSet)> {
        self.children.iter()
    }

    /// Whether `element` itself is a member at this level.
    pub(crate) fn has_member(&self, element: &PathElement) -> bool {
        self.members.contains(element)
    }

    /// The paths under `element`, relative to it.
    pub(crate) fn child(&self, element: &PathElement) -> Option<&FieldSet> {
        self.children.get(element)
    }

    /// Drops the members under which `owned` holds paths: a field that holds
    /// fields someone owns is not itself stale (structured-merge-diff keeps
    /// such named fields as members of the owned set).
    pub(crate) fn drop_owned_containers(&mut self, owned: &FieldSet) {
        self.members.retain(|m| owned.child(m).is_none());
        for (element, mine) in &mut self.children {
            if let Some(theirs) = owned.child(element) {
                mine.drop_owned_containers(theirs);
            }
        }
        self.children.retain(|_, child| !child.is_empty());
    }

    /// The set holding only what is under `element` (and `element` itself).
    #[must_use]
    pub fn restrict_to(&self, element: &PathElement) -> FieldSet {
        let mut out = FieldSet::new();
        if self.members.contains(element) {
            out.members.insert(element.clone());
        }
        if let Some(child) = self.children.get(element) {
            out.children.insert(element.clone(), child.clone());
        }
        out
    }

    /// The paths in either set.
    #[must_use]
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.extend(other);
        out
    }

    /// Adds the paths of `other`, in place.
    pub fn extend(&mut self, other: &FieldSet) {
        self.members.extend(other.members.iter().cloned());
        for (element, child) in &other.children {
            match self.children.get_mut(element) {
                Some(mine) => mine.extend(child),
                None => {
                    self.children.insert(element.clone(), child.clone());
                }
            }
        }
    }

    /// Takes away the paths of `other`, in place, in time proportional to
    /// `other`. A member of `other` does not take away the paths under it.
    pub fn subtract(&mut self, other: &FieldSet) {
        for member in &other.members {
            self.members.remove(member);
        }
        for (element, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(element) {
                mine.subtract(theirs);
                if mine.is_empty() {
                    self.children.remove(element);
                }
            }
        }
    }

    /// Adds `below` under `path`, and `path` itself when `member`.
    pub(crate) fn graft(&mut self, path: &[PathElement], below: FieldSet, member: bool) {
        let Some((last, parents)) = path.split_last() else {
            self.extend(&below);
            return;
        };
        let mut node = self;
        for element in parents {
            if !node.children.contains_key(element) {
                node.children.insert(element.clone(), FieldSet::new());
            }
            let Some(child) = node.children.get_mut(element) else {
                return;
            };
            node = child;
        }
        node.attach(last.clone(), below, member);
    }

    /// Adds `element` (when `member`) and `below` under it, at this level.
    pub(crate) fn attach(&mut self, element: PathElement, below: FieldSet, member: bool) {
        if !below.is_empty() {
            match self.children.get_mut(&element) {
                Some(mine) => mine.extend(&below),
                None => {
                    self.children.insert(element.clone(), below);
                }
            }
        }
        if member {
            self.members.insert(element);
        }
    }

    /// Takes away `element` and everything under it, in place.
    pub fn remove_subtree(&mut self, element: &PathElement) {
        self.members.remove(element);
        self.children.remove(element);
    }

    /// The paths in both sets.
    #[must_use]
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(element, mine)| {
                let theirs = other.children.get(element)?;
                let both = mine.intersection(theirs);
                (!both.is_empty()).then(|| (element.clone(), both))
            })
            .collect();
        FieldSet { members, children }
    }

    /// The paths of this set that are not in `other`. A member of `other`
    /// does not take away the paths under it.
    #[must_use]
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.subtract(other);
        out
    }

    /// Every path of the set: the members of a level first, then what is
    /// under each child, in element order.
    #[must_use]
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for member in &self.members {
            prefix.push(member.clone());
            out.push(Path(prefix.clone()));
            prefix.pop();
        }
        for (element, child) in &self.children {
            prefix.push(element.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` document of the set.
    #[must_use]
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.contents())
    }

    fn contents(&self) -> Map<String, Value> {
        let mut out = Map::new();
        for member in &self.members {
            if !self.children.contains_key(member) {
                out.insert(member.to_key(), Value::Object(Map::new()));
            }
        }
        for (element, child) in &self.children {
            let mut inner = child.contents();
            if self.members.contains(element) {
                inner.insert(".".to_owned(), Value::Object(Map::new()));
            }
            out.insert(element.to_key(), Value::Object(inner));
        }
        out
    }

    /// Reads a `FieldsV1` document.
    ///
    /// # Errors
    ///
    /// [`Error`] when the document is not an object of path elements.
    pub fn from_fields_v1(fields: &Value) -> Result<FieldSet> {
        let Value::Object(map) = fields else {
            return Err(Error::NotAnObject(fields.clone()));
        };
        Ok(Self::read(map)?.0)
    }

    /// Reads one level: the set under it, and whether the level is a member
    /// of its parent (`"."`, or nothing at all under it).
    fn read(map: &Map<String, Value>) -> Result<(FieldSet, bool)> {
        let mut set = FieldSet::new();
        let mut member = false;
        for (key, value) in map {
            if key == "." {
                member = true;
                continue;
            }
            let Value::Object(inner) = value else {
                return Err(Error::NotAnObject(value.clone()));
            };
            let Some(element) = PathElement::from_key(key)? else {
                continue;
            };
            let (child, child_member) = Self::read(inner)?;
            if child_member {
                set.members.insert(element.clone());
            }
            if !child.is_empty() {
                set.children.insert(element, child);
            }
        }
        let member = member || set.is_empty();
        Ok((set, member))
    }
}

/// Adds the paths of `set` to a `FieldsV1` document in place, touching only
/// the keys on those paths: an update extends its writer's entry this way
/// without decoding it.
pub(crate) fn extend_fields_v1(fields: &mut Map<String, Value>, set: &FieldSet) {
    for member in set.members() {
        match fields.get_mut(&member.to_key()) {
            Some(Value::Object(node)) => {
                if !node.is_empty() {
                    node.insert(".".to_owned(), Value::Object(Map::new()));
                }
            }
            _ => {
                fields.insert(member.to_key(), Value::Object(Map::new()));
            }
        }
    }
    for (element, below) in set.children() {
        let key = element.to_key();
        let node = match fields.get_mut(&key) {
            Some(Value::Object(node)) => {
                if node.is_empty() {
                    // A member that gains children keeps its membership as ".".
                    node.insert(".".to_owned(), Value::Object(Map::new()));
                }
                node
            }
            _ => {
                fields.insert(key.clone(), Value::Object(Map::new()));
                match fields.get_mut(&key) {
                    Some(Value::Object(node)) => node,
                    _ => continue,
                }
            }
        };
        extend_fields_v1(node, below);
    }
}

/// Takes the paths of `set` away from a `FieldsV1` document in place,
/// touching only the keys on those paths. Keys are matched in their
/// canonical form, the one kube-apiserver and devcluster write.
pub(crate) fn subtract_fields_v1(fields: &mut Map<String, Value>, set: &FieldSet) {
    for member in set.members() {
        let key = member.to_key();
        if let Some(Value::Object(node)) = fields.get_mut(&key) {
            let only_member = node.is_empty() || (node.len() == 1 && node.contains_key("."));
            if only_member {
                fields.remove(&key);
            } else {
                node.remove(".");
            }
        }
    }
    for (element, below) in set.children() {
        let key = element.to_key();
        let Some(Value::Object(node)) = fields.get_mut(&key) else {
            continue;
        };
        if node.is_empty() {
            // A member with nothing under it.
            continue;
        }
        subtract_fields_v1(node, below);
        if node.is_empty() {
            fields.remove(&key);
        } else if node.len() == 1 && node.contains_key(".") {
            node.remove(".");
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn f(name: &str) -> PathElement {
        PathElement::field(name)
    }

    fn key(name: &str, value: Value) -> PathElement {
        PathElement::Key(vec![(name.to_owned(), value.to_string())])
    }

    #[test]
    fn fields_v1_marks_members_with_an_empty_object_and_dot() {
        let mut set = FieldSet::new();
        set.insert(&[f("metadata"), f("labels"), f("app")]);
        let nginx = key("name", json!("nginx"));
        set.insert(&[f("spec"), f("containers"), nginx.clone()]);
        set.insert(&[f("spec"), f("containers"), nginx, f("image")]);
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}}}}
            })
        );
    }

    #[test]
    fn reading_the_kube_apiserver_format_keeps_members_and_children_apart() {
        let doc = json!({
            "f:data": {"f:key": {}},
            "f:metadata": {"f:labels": {".": {}, "f:test-label": {}}},
            "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}},
            "f:finalizers": {"v:\"a\"": {}}
        });
        let set = FieldSet::from_fields_v1(&doc).expect("valid");
        assert!(set.contains(&[f("data"), f("key")]));
        assert!(set.contains(&[f("metadata"), f("labels")]));
        assert!(!set.contains(&[f("metadata")]));
        let port = PathElement::Key(vec![
            ("port".into(), "80".into()),
            ("protocol".into(), "\"TCP\"".into()),
        ]);
        assert!(set.contains(&[f("spec"), f("ports"), port.clone()]));
        assert!(set.contains(&[f("spec"), f("ports"), port, f("port")]));
        assert!(set.contains(&[f("finalizers"), PathElement::Value("\"a\"".into())]));
        assert_eq!(set.to_fields_v1(), doc);
    }

    #[test]
    fn key_elements_are_sorted_by_field_name_and_compact() {
        let element = PathElement::from_key("k:{\"protocol\": \"TCP\", \"containerPort\": 80}")
            .expect("valid")
            .expect("known");
        assert_eq!(
            element.to_key(),
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}"
        );
        assert_eq!(element.to_string(), "[containerPort=80,protocol=\"TCP\"]");
    }

    #[test]
    fn paths_display_like_conflict_messages() {
        let path = Path(vec![
            f("spec"),
            f("containers"),
            key("name", json!("nginx")),
            f("image"),
        ]);
        assert_eq!(path.to_string(), ".spec.containers[name=\"nginx\"].image");
        let set_item = Path(vec![f("finalizers"), PathElement::Value("\"a\"".into())]);
        assert_eq!(set_item.to_string(), ".finalizers[=\"a\"]");
        assert_eq!(
            Path(vec![f("xs"), PathElement::Index(3)]).to_string(),
            ".xs[3]"
        );
    }

    #[test]
    fn malformed_documents_are_errors_and_unknown_element_types_are_dropped() {
        let err = FieldSet::from_fields_v1(&json!({"f:a": 1})).expect_err("not an object");
        assert_eq!(err.to_string(), "fieldsV1 values must be objects, found 1");
        let err = FieldSet::from_fields_v1(&json!({"nope": {}})).expect_err("no colon");
        assert_eq!(err.to_string(), "invalid path element \"nope\" in fieldsV1");
        let err = FieldSet::from_fields_v1(&json!({"k:[1]": {}})).expect_err("not a map");
        assert_eq!(
            err.to_string(),
            "invalid path element \"k:[1]\" in fieldsV1"
        );
        let set = FieldSet::from_fields_v1(&json!({"z:x": {}, "f:a": {}})).expect("valid");
        assert_eq!(set.paths(), vec![Path(vec![f("a")])]);
    }

    #[test]
    fn difference_keeps_children_of_a_removed_member() {
        let mut a = FieldSet::new();
        a.insert(&[f("x")]);
        a.insert(&[f("x"), f("y")]);
        let mut b = FieldSet::new();
        b.insert(&[f("x")]);
        let d = a.difference(&b);
        assert!(!d.contains(&[f("x")]));
        assert!(d.contains(&[f("x"), f("y")]));
    }

    fn element() -> impl Strategy<Value = PathElement> {
        prop_oneof![
            "[a-z]{1,6}".prop_map(PathElement::Field),
            ("[a-z]{1,4}", any::<i32>()).prop_map(|(n, v)| key(&n, json!(v))),
            "[a-z ]{0,4}".prop_map(|v| PathElement::Value(json!(v).to_string())),
            (0usize..50).prop_map(PathElement::Index),
        ]
    }

    fn set() -> impl Strategy<Value = FieldSet> {
        prop::collection::vec(prop::collection::vec(element(), 1..5), 0..12).prop_map(|paths| {
            let mut set = FieldSet::new();
            for path in paths {
                set.insert(&path);
            }
            set
        })
    }

    proptest! {
        #[test]
        fn fields_v1_round_trips(set in set()) {
            let decoded = FieldSet::from_fields_v1(&set.to_fields_v1()).expect("valid");
            prop_assert_eq!(decoded, set);
        }

        #[test]
        fn editing_fields_v1_in_place_agrees_with_the_set_operations(a in set(), b in set()) {
            let Value::Object(mut doc) = a.to_fields_v1() else { panic!("an object") };
            extend_fields_v1(&mut doc, &b);
            let extended = FieldSet::from_fields_v1(&Value::Object(doc.clone())).expect("valid");
            prop_assert_eq!(&extended, &a.union(&b));
            prop_assert_eq!(Value::Object(doc.clone()), a.union(&b).to_fields_v1());
            subtract_fields_v1(&mut doc, &a);
            let rest = FieldSet::from_fields_v1(&Value::Object(doc.clone())).expect("valid");
            prop_assert_eq!(&rest, &a.union(&b).difference(&a));
            prop_assert_eq!(Value::Object(doc), a.union(&b).difference(&a).to_fields_v1());
        }

        #[test]
        fn set_operations_agree_with_membership(a in set(), b in set()) {
            for path in a.paths().into_iter().chain(b.paths()) {
                let (in_a, in_b) = (a.contains(&path.0), b.contains(&path.0));
                prop_assert_eq!(a.union(&b).contains(&path.0), in_a || in_b);
                prop_assert_eq!(a.intersection(&b).contains(&path.0), in_a && in_b);
                prop_assert_eq!(a.difference(&b).contains(&path.0), in_a && !in_b);
            }
        }
    }
}
