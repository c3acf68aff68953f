//! The caches of every child kind, and a DataJob's children across them.

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::core::ApiResource;

use super::key::{ObjectKey, OwnerKey};
use super::records::ChildRecord;
use super::store::{Index, Scope, Store, StoreBuilder};

/// The cache of one child kind: its API resource, its store of slim
/// records, and the index by controlling DataJob (namespace and UID).
#[derive(Clone)]
pub struct ChildCache {
    /// The kind's API resource (group, version, kind, plural).
    pub resource: ApiResource,
    /// Its objects, as slim records.
    pub store: Store<ChildRecord, OwnerKey>,
    /// Records by the DataJob that controls them: its UID in their own
    /// namespace (ownerReferences do not cross namespaces).
    pub by_owner: Index<ChildRecord, OwnerKey>,
}

impl ChildCache {
    /// An empty cache of `resource`, fed by one stream per scope.
    #[must_use]
    pub fn new(resource: ApiResource, scopes: Vec<Scope>) -> Self {
        let mut builder = StoreBuilder::<ChildRecord, OwnerKey>::default();
        let by_owner = builder.index("owner", |record: &ChildRecord| {
            record.owner_key().into_iter().collect()
        });
        Self {
            resource,
            store: builder.scopes(scopes).build(),
            by_owner,
        }
    }
}

/// How a reconcile reads children: a DataJob's, or one object by name,
/// never with a request to the API server. [`ChildCaches`] is the
/// operator's; a benchmark may plug in a baseline to measure it against.
pub trait Children: Send + Sync {
    /// The children of the DataJob `owner`, in any order: objects in its
    /// namespace whose controller reference carries its UID.
    fn find(&self, owner: &OwnerKey) -> Vec<Arc<ChildRecord>>;

    /// The cached object of `apiVersion` + `kind` with this key, whoever
    /// controls it.
    fn get(&self, api_version: &str, kind: &str, key: &ObjectKey) -> Option<Arc<ChildRecord>>;

    /// The API resource of `apiVersion` + `kind`, if the operator manages that kind.
    fn resource(&self, api_version: &str, kind: &str) -> Option<&ApiResource>;

    /// True once every kind has completed its first list.
    fn is_ready(&self) -> bool;

    /// The objects cached, of every kind.
    fn cached(&self) -> usize;

    /// Waits until every kind has completed its first list.
    fn wait_until_ready(&self) -> BoxFuture<'_, ()>;

    /// The children of the DataJob `owner`, sorted by kind and name: the
    /// order a policy sees, whichever cache found them.
    fn of(&self, owner: &OwnerKey) -> Vec<Arc<ChildRecord>> {
        let mut children = self.find(owner);
        children
            .sort_by(|a, b| (&a.child.kind, &a.child.name).cmp(&(&b.child.kind, &b.child.name)));
        children
    }
}

/// The indexed caches of every kind of child the operator manages: only
/// its own children (a label-selected watch), as slim records, found
/// through the owner index.
#[derive(Clone, Default)]
pub struct ChildCaches {
    kinds: Vec<ChildCache>,
}

impl ChildCaches {
    /// These caches, one per kind.
    #[must_use]
    pub fn new(kinds: Vec<ChildCache>) -> Self {
        Self { kinds }
    }

    /// Empty caches of these kinds, fed by one stream per scope.
    #[must_use]
    pub fn empty(resources: &[ApiResource], scopes: &[Scope]) -> Self {
        Self::new(
            resources
                .iter()
                .map(|resource| ChildCache::new(resource.clone(), scopes.to_vec()))
                .collect(),
        )
    }

    /// The cache of `apiVersion` + `kind`, if the operator manages that kind.
    #[must_use]
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&ChildCache> {
        self.kinds
            .iter()
            .find(|cache| cache.resource.api_version == api_version && cache.resource.kind == kind)
    }

    /// Every kind's cache.
    pub fn iter(&self) -> impl Iterator<Item = &ChildCache> {
        self.kinds.iter()
    }
}

impl Children for ChildCaches {
    /// One index lookup per kind, no scan.
    fn find(&self, owner: &OwnerKey) -> Vec<Arc<ChildRecord>> {
        self.kinds
            .iter()
            .flat_map(|cache| cache.store.lookup(cache.by_owner, owner))
            .collect()
    }

    /// One hash lookup (the watch selects the operator's labels, not an
    /// owner, so another DataJob's child is found too).
    fn get(&self, api_version: &str, kind: &str, key: &ObjectKey) -> Option<Arc<ChildRecord>> {
        self.kind(api_version, kind)?.store.get(key)
    }

    fn resource(&self, api_version: &str, kind: &str) -> Option<&ApiResource> {
        self.kind(api_version, kind).map(|cache| &cache.resource)
    }

    fn is_ready(&self) -> bool {
        self.kinds.iter().all(|cache| cache.store.is_ready())
    }

    fn cached(&self) -> usize {
        self.kinds.iter().map(|cache| cache.store.len()).sum()
    }

    fn wait_until_ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            for cache in &self.kinds {
                cache.store.wait_until_ready().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::cache::Event;
    use crate::projection::ChildObject;

    fn record(kind: &str, api_version: &str, name: &str, owner: &str) -> ChildRecord {
        let object = ChildObject::deserialize(&json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
                "ownerReferences": [{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                    "name": "j", "uid": owner, "controller": true}]}}))
        .unwrap();
        ChildRecord::from_object(&object)
    }

    fn cache(group: &str, version: &str, kind: &str) -> ChildCache {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        ChildCache::new(ApiResource::from_gvk(&gvk), vec![Scope::Cluster])
    }

    #[test]
    fn a_datajobs_children_come_from_every_kind_sorted_by_kind_and_name() {
        let pods = cache("", "v1", "Pod");
        let jobs = cache("batch", "v1", "Job");
        pods.store
            .apply(Event::Apply(record("Pod", "v1", "b", "u1")));
        pods.store
            .apply(Event::Apply(record("Pod", "v1", "a", "u1")));
        pods.store
            .apply(Event::Apply(record("Pod", "v1", "other", "u2")));
        jobs.store
            .apply(Event::Apply(record("Job", "batch/v1", "z", "u1")));
        let caches = ChildCaches::new(vec![pods, jobs]);
        let names: Vec<(String, String)> = caches
            .of(&OwnerKey::new("ns", "u1"))
            .iter()
            .map(|r| (r.child.kind.clone(), r.child.name.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("Job".to_owned(), "z".to_owned()),
                ("Pod".to_owned(), "a".to_owned()),
                ("Pod".to_owned(), "b".to_owned())
            ]
        );
        let other = caches
            .get("v1", "Pod", &ObjectKey::namespaced("ns", "other"))
            .expect("found by name, whoever controls it");
        assert_eq!(other.owner.as_ref().map(|o| o.uid.as_str()), Some("u2"));
        assert!(
            caches
                .get("v1", "Pod", &ObjectKey::namespaced("ns", "gone"))
                .is_none()
        );
        assert!(
            caches
                .get("batch/v1", "Job", &ObjectKey::namespaced("ns", "a"))
                .is_none()
        );
        assert!(caches.kind("batch/v1", "Job").is_some());
        assert!(caches.kind("v1", "Secret").is_none());
    }

    #[test]
    fn an_object_naming_a_datajobs_uid_from_another_namespace_is_not_its_child() {
        let pods = cache("", "v1", "Pod");
        pods.store
            .apply(Event::Apply(record("Pod", "v1", "mine", "u1")));
        let mut elsewhere = record("Pod", "v1", "mine", "u1");
        elsewhere.key = ObjectKey::namespaced("other", "mine");
        pods.store.apply(Event::Apply(elsewhere));
        let caches = ChildCaches::new(vec![pods]);
        let keys: Vec<String> = caches
            .of(&OwnerKey::new("ns", "u1"))
            .iter()
            .map(|r| r.key.to_string())
            .collect();
        assert_eq!(keys, ["ns/mine"]);
        assert_eq!(caches.of(&OwnerKey::new("other", "u1")).len(), 1);
        assert!(caches.of(&OwnerKey::new("third", "u1")).is_empty());
    }

    #[test]
    fn only_a_policyhost_datajob_controller_makes_a_child() {
        let object = |api_version: &str, kind: &str| {
            ChildObject::deserialize(&json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1",
                    "ownerReferences": [{"apiVersion": api_version, "kind": kind,
                        "name": "j", "uid": "u1", "controller": true}]}}))
            .unwrap()
        };
        let owner =
            |api_version, kind| ChildRecord::from_object(&object(api_version, kind)).owner_key();
        assert_eq!(
            owner("policyhost.dev/v1alpha1", "DataJob"),
            Some(OwnerKey::new("ns", "u1"))
        );
        assert_eq!(owner("example.com/v1", "DataJob"), None);
        assert_eq!(owner("apps/v1", "ReplicaSet"), None);
    }
}
