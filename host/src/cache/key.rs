//! The identity of an object in a cache.

use std::fmt;
use std::sync::Arc;

/// Namespace and name of a cached object: a struct that hashes, never a
/// `format!`-ed string.
///
/// Both parts are shared strings so that the store and every index can hold
/// the key without copying the text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    namespace: Option<Arc<str>>,
    name: Arc<str>,
}

impl ObjectKey {
    /// The key of a namespaced object.
    #[must_use]
    pub fn namespaced(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// The key of a namespaced object, from its metadata (empty where unset).
    #[must_use]
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self::namespaced(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// The key of a cluster-scoped object.
    #[must_use]
    pub fn cluster(name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }

    /// The object's namespace, `None` for cluster-scoped objects.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The object's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{namespace}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The DataJob a child belongs to: its namespace and UID.
///
/// ownerReferences are namespace-local in Kubernetes: an object names its
/// owner by UID within its own namespace. A DataJob's children are
/// therefore looked up by both parts, so that an object in another
/// namespace carrying a DataJob's UID is never taken for its child.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerKey {
    namespace: Arc<str>,
    uid: Arc<str>,
}

impl OwnerKey {
    /// The owner with `uid` in `namespace`.
    #[must_use]
    pub fn new(namespace: impl Into<Arc<str>>, uid: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            uid: uid.into(),
        }
    }

    /// The owner's namespace (its children's).
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The owner's `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> &str {
        &self.uid
    }
}

impl fmt::Display for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (uid {})", self.namespace, self.uid)
    }
}

impl fmt::Debug for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_namespace_slash_name_or_just_the_name() {
        assert_eq!(ObjectKey::namespaced("ns", "a").to_string(), "ns/a");
        assert_eq!(ObjectKey::cluster("a").to_string(), "a");
    }

    #[test]
    fn keys_with_the_same_parts_are_equal_and_order_by_namespace_first() {
        assert_eq!(
            ObjectKey::namespaced("ns", "a"),
            ObjectKey::namespaced(String::from("ns"), "a")
        );
        assert!(ObjectKey::cluster("z") < ObjectKey::namespaced("a", "a"));
        assert!(ObjectKey::namespaced("a", "z") < ObjectKey::namespaced("b", "a"));
    }
}
