//! The cache of the anti-pattern: every object of a child kind in full, and a
//! DataJob's children found by scanning them all.
//!
//! This is what an operator gets from an unconfigured informer (or a kube-rs
//! reflector on `Api::<Pod>::all`) plus "list and filter" in its reconcile:
//! the watch has no label selector, so the API server sends every Pod of the
//! cluster, and each is kept as decoded, `managedFields` and all. Pods are
//! decoded into k8s-openapi's typed `Pod`, as a Go informer keeps typed
//! objects; other kinds, which have no type here, as `DynamicObject`s.
//! The scan is the kindest version of it: under one read lock, without
//! copying the objects that do not match (controller-runtime's cached `List`
//! deep-copies every object before the caller filters), so what it costs is
//! a lower bound.
//!
//! Only the children cache differs: the queue, the reconcile, apply and
//! status see the same [`ChildRecord`]s either way, so a comparison with the
//! operator's own caches isolates the cache.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde::Deserialize;

use policyhost::cache::{
    Cached, ChildRecord, Children, ObjectKey, OwnerKey, Scope, Store, controlling_datajob,
};
use policyhost::projection::{ChildObject, ChildStatus};
use policyhost::vocabulary::created_by_operator;

/// An object as the naive cache keeps it: whole, as decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum FullObject {
    /// A Pod, in k8s-openapi's type: what `Api::<Pod>::all` and a reflector
    /// keep, the counterpart of a Go informer's typed objects (and lighter
    /// than a JSON tree).
    Pod(Box<Pod>),
    /// An object of any other kind, as a JSON tree.
    Dynamic(Box<DynamicObject>),
}

impl FullObject {
    /// The object's metadata, `managedFields` included.
    #[must_use]
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Pod(pod) => &pod.metadata,
            Self::Dynamic(object) => &object.metadata,
        }
    }

    /// True for the kind the naive cache decodes into [`FullObject::Pod`].
    #[must_use]
    pub fn is_pod(resource: &ApiResource) -> bool {
        resource.group.is_empty() && resource.version == "v1" && resource.kind == "Pod"
    }
}

/// The full cache of one child kind: every object of the kind in the
/// watched scopes, as decoded, with no index.
#[derive(Clone)]
pub struct NaiveCache {
    /// The kind's API resource (group, version, kind, plural).
    pub resource: ApiResource,
    /// Every object of the kind, whole.
    pub store: Store<FullObject>,
}

impl NaiveCache {
    /// An empty cache of `resource`, fed by one stream per scope.
    #[must_use]
    pub fn new(resource: ApiResource, scopes: Vec<Scope>) -> Self {
        Self {
            resource,
            store: Store::builder().scopes(scopes).build(),
        }
    }

    /// The children of the DataJob `owner`: a scan of every cached object
    /// for a controller ownerReference with its UID, in its namespace.
    #[must_use]
    pub fn children_of(&self, owner: &OwnerKey) -> Vec<Arc<ChildRecord>> {
        self.store
            .scan(|object| {
                let meta = object.metadata();
                meta.namespace.as_deref() == Some(owner.namespace())
                    && controller_uid(meta) == Some(owner.uid())
            })
            .iter()
            .map(|object| Arc::new(record(object, &self.resource)))
            .collect()
    }
}

/// The full caches of every child kind: the baseline's [`Children`].
#[derive(Clone, Default)]
pub struct NaiveCaches {
    kinds: Vec<NaiveCache>,
}

impl NaiveCaches {
    /// These caches, one per kind.
    #[must_use]
    pub fn new(kinds: Vec<NaiveCache>) -> Self {
        Self { kinds }
    }

    /// Every kind's cache.
    #[must_use]
    pub fn kinds(&self) -> &[NaiveCache] {
        &self.kinds
    }

    fn kind(&self, api_version: &str, kind: &str) -> Option<&NaiveCache> {
        self.kinds
            .iter()
            .find(|cache| cache.resource.api_version == api_version && cache.resource.kind == kind)
    }
}

impl Children for NaiveCaches {
    /// A scan of every cached object of every kind.
    fn find(&self, owner: &OwnerKey) -> Vec<Arc<ChildRecord>> {
        self.kinds
            .iter()
            .flat_map(|cache| cache.children_of(owner))
            .collect()
    }

    /// A hash lookup, then the object projected as the reconcile reads it.
    fn get(&self, api_version: &str, kind: &str, key: &ObjectKey) -> Option<Arc<ChildRecord>> {
        let cache = self.kind(api_version, kind)?;
        let object = cache.store.get(key)?;
        Some(Arc::new(record(&object, &cache.resource)))
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

/// The UID of the DataJob that controls an object, if a DataJob does (the
/// same rule as [`ChildRecord::owner`]).
#[must_use]
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    controlling_datajob(meta.owner_references.as_deref().unwrap_or_default())
        .map(|r| r.uid.as_str())
}

/// The record a policy would see for a full object: the same projection as
/// the slim decoder's, from the fields it reads. `resource` names the kind
/// when the object does not (list items may omit `apiVersion` and `kind`).
#[must_use]
pub fn record(object: &FullObject, resource: &ApiResource) -> ChildRecord {
    let meta = object.metadata();
    let (api_version, kind, status) = match object {
        FullObject::Pod(pod) => (
            "v1".to_owned(),
            "Pod".to_owned(),
            pod.status
                .as_ref()
                .and_then(|status| serde_json::to_value(status).ok())
                .and_then(|status| ChildStatus::deserialize(status).ok()),
        ),
        FullObject::Dynamic(object) => {
            let types = object.types.as_ref();
            (
                types.map_or_else(|| resource.api_version.clone(), |t| t.api_version.clone()),
                types.map_or_else(|| resource.kind.clone(), |t| t.kind.clone()),
                object
                    .data
                    .get("status")
                    .and_then(|status| ChildStatus::deserialize(status).ok()),
            )
        }
    };
    let slim = ChildObject {
        api_version: Some(api_version),
        kind: Some(kind),
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
            owner_references: meta.owner_references.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        },
        status,
    };
    ChildRecord {
        fields_from_create: created_by_operator(meta.managed_fields.as_deref().unwrap_or_default()),
        ..ChildRecord::from_object(&slim)
    }
}

impl Cached for FullObject {
    fn key(&self) -> ObjectKey {
        let meta = self.metadata();
        let name = meta.name.as_deref().unwrap_or_default();
        match meta.namespace.as_deref() {
            Some(namespace) => ObjectKey::namespaced(namespace, name),
            None => ObjectKey::cluster(name),
        }
    }

    fn resource_version(&self) -> &str {
        self.metadata()
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;
    use serde_json::{Value, json};

    use policyhost::cache::{ChildCache, ChildCaches, Event};

    use super::*;

    fn pods() -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
    }

    fn config_maps() -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
    }

    /// A Pod in `namespace` controlled by `controller` (kind, uid), with the
    /// bulk of a real manifest: spec, managed fields, labels, annotations.
    fn pod(namespace: &str, name: &str, controller: Option<(&str, &str)>, phase: &str) -> Value {
        let owners: Vec<Value> = controller
            .into_iter()
            .map(|(kind, uid)| {
                json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": kind, "name": "owner",
                    "uid": uid, "controller": true, "blockOwnerDeletion": true})
            })
            .collect();
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "resourceVersion": "42",
                "labels": {"app": "x", "policyhost.dev/datajob": "owner"},
                "annotations": {"policyhost.dev/applied-hash": format!("h-{name}")},
                "ownerReferences": owners,
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}]},
            "status": {"phase": phase, "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": if phase == "Running" { "True" } else { "False" }}]},
        })
    }

    fn config_map(namespace: &str, name: &str, uid: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "resourceVersion": "7",
                "ownerReferences": [{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                    "name": "owner", "uid": uid, "controller": true}]},
            "data": {"k": "v"},
        })
    }

    /// The same objects in both kinds of cache.
    fn both(objects: &[Value]) -> (ChildCaches, NaiveCaches) {
        let indexed =
            [pods(), config_maps()].map(|resource| ChildCache::new(resource, vec![Scope::Cluster]));
        let naive =
            [pods(), config_maps()].map(|resource| NaiveCache::new(resource, vec![Scope::Cluster]));
        for object in objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            let slot = usize::from(kind == "ConfigMap");
            let slim = ChildObject::deserialize(object).unwrap();
            indexed[slot]
                .store
                .apply(Event::Apply(ChildRecord::from_object(&slim)));
            let full = if kind == "Pod" {
                FullObject::Pod(Box::new(Pod::deserialize(object).unwrap()))
            } else {
                FullObject::Dynamic(Box::new(DynamicObject::deserialize(object).unwrap()))
            };
            naive[slot].store.apply(Event::Apply(full));
        }
        (
            ChildCaches::new(indexed.into()),
            NaiveCaches::new(naive.into()),
        )
    }

    #[test]
    fn both_caches_return_the_same_children_for_the_same_objects() {
        let objects = [
            pod("a", "w-2", Some(("DataJob", "u1")), "Running"),
            pod("a", "w-1", Some(("DataJob", "u1")), "Pending"),
            pod("a", "w-3", Some(("DataJob", "u2")), "Succeeded"),
            // Controlled by something else with the same UID: not a child.
            pod("a", "rs-pod", Some(("ReplicaSet", "u1")), "Running"),
            pod("b", "foreign", None, "Running"),
            config_map("a", "cfg", "u1"),
            config_map("b", "other-cfg", "u3"),
        ];
        let (indexed, naive) = both(&objects);
        for (namespace, uid) in [
            ("a", "u1"),
            ("a", "u2"),
            ("b", "u3"),
            ("a", "u3"),
            ("a", "nobody"),
        ] {
            let owner = OwnerKey::new(namespace, uid);
            let expected = indexed.of(&owner);
            let found = naive.of(&owner);
            let deref = |records: &[Arc<ChildRecord>]| -> Vec<ChildRecord> {
                records.iter().map(|r| (**r).clone()).collect()
            };
            assert_eq!(deref(&found), deref(&expected), "children of {owner}");
        }
        let names: Vec<String> = naive
            .of(&OwnerKey::new("a", "u1"))
            .iter()
            .map(|r| format!("{}/{}", r.child.kind, r.child.name))
            .collect();
        assert_eq!(names, ["ConfigMap/cfg", "Pod/w-1", "Pod/w-2"]);
    }

    #[test]
    fn the_naive_cache_keeps_whole_objects_the_indexed_one_keeps_records() {
        let (indexed, naive) = both(&[pod("a", "foreign", None, "Running")]);
        let full = naive.kinds()[0].store.all();
        assert!(full[0].metadata().managed_fields.is_some());
        let FullObject::Pod(pod) = &*full[0] else {
            panic!("a Pod is cached as a typed Pod")
        };
        assert_eq!(pod.spec.as_ref().map(|s| s.containers.len()), Some(1));
        assert_eq!(indexed.iter().map(|c| c.store.len()).sum::<usize>(), 1);
        assert!(naive.of(&OwnerKey::new("a", "uid-foreign")).is_empty());
    }

    #[test]
    fn a_full_object_without_type_fields_takes_them_from_its_resource() {
        let mut object = config_map("a", "c", "u");
        let map = object.as_object_mut().unwrap();
        map.remove("apiVersion");
        map.remove("kind");
        let full = FullObject::Dynamic(Box::new(DynamicObject::deserialize(&object).unwrap()));
        let child = record(&full, &config_maps()).child;
        assert_eq!(
            (child.api_version.as_str(), child.kind.as_str()),
            ("v1", "ConfigMap")
        );
        assert!(FullObject::is_pod(&pods()) && !FullObject::is_pod(&config_maps()));
    }
}
