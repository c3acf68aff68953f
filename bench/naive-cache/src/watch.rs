//! The watches of the anti-pattern: every object of each child kind, with
//! no label selector, kept whole; each change that concerns a DataJob
//! queued exactly as the operator's own watches queue it.

use std::any::Any;
use std::sync::Arc;

use futures::future::{BoxFuture, Either};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::watcher;
use policyhost::cache::{Change, Foreign, ObjectKey, Scope};
use policyhost::queue::WorkQueue;
use policyhost::watch::{self, ChildCaching, Config, WatchedChildren};

use crate::cache::{FullObject, NaiveCache, NaiveCaches, controller_uid, record};

/// The baseline's [`ChildCaching`]: full caches of these kinds, fed by
/// unselected watches.
pub const CACHING: ChildCaching = caches;

fn caches(kinds: &[ApiResource], scopes: &[Scope]) -> Arc<dyn WatchedChildren> {
    Arc::new(NaiveCaches::new(
        kinds
            .iter()
            .map(|resource| NaiveCache::new(resource.clone(), scopes.to_vec()))
            .collect(),
    ))
}

/// The baseline's caches among an operator's: `None` for any other kind.
#[must_use]
pub fn of(children: &dyn WatchedChildren) -> Option<&NaiveCaches> {
    (children as &dyn Any).downcast_ref()
}

impl WatchedChildren for NaiveCaches {
    /// Foreign objects are not reported: the full caches do not tell a
    /// child from a bystander before the scan.
    fn watches(
        &self,
        client: Client,
        config: Config,
        queue: Arc<WorkQueue<ObjectKey>>,
        _foreign: Foreign,
    ) -> Vec<BoxFuture<'static, ()>> {
        self.kinds()
            .iter()
            .map(|cache| {
                let watch = watch_kind(
                    client.clone(),
                    config.clone(),
                    cache.clone(),
                    Arc::clone(&queue),
                );
                Box::pin(watch) as BoxFuture<'static, ()>
            })
            .collect()
    }
}

/// Keeps one kind's full cache current from an unselected watch (every
/// object of the kind in the scopes, whole), and queues the DataJob that
/// controls every child whose change a policy could see.
async fn watch_kind(
    client: Client,
    config: Config,
    cache: NaiveCache,
    queue: Arc<WorkQueue<ObjectKey>>,
) {
    let streams = config.scopes.iter().map(|scope| {
        let on_change = {
            let queue = Arc::clone(&queue);
            let resource = cache.resource.clone();
            let settle = config.child_settle;
            move |change: &Change<FullObject>| {
                for key in child_work(change, &resource) {
                    queue.add_coalesced(key, settle);
                }
            }
        };
        let store = cache.store.clone();
        if FullObject::is_pod(&cache.resource) {
            let api: Api<Pod> = match scope {
                Scope::Cluster => Api::all(client.clone()),
                Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
            };
            let events = watcher::watcher(api, config.watcher_config(None));
            let project = |pod: Pod| FullObject::Pod(Box::new(pod));
            Either::Left(watch::drive(
                events,
                scope.clone(),
                store,
                project,
                on_change,
            ))
        } else {
            let api: Api<DynamicObject> = match scope {
                Scope::Cluster => Api::all_with(client.clone(), &cache.resource),
                Scope::Namespace(namespace) => {
                    Api::namespaced_with(client.clone(), namespace, &cache.resource)
                }
            };
            let events = watcher::watcher(api, config.watcher_config(None));
            let project = |object: DynamicObject| FullObject::Dynamic(Box::new(object));
            Either::Right(watch::drive(
                events,
                scope.clone(),
                store,
                project,
                on_change,
            ))
        }
    });
    futures::future::join_all(streams).await;
}

/// [`watch::child_work`] for a change of a full object: objects no DataJob
/// controls (nearly all of them) are dismissed before any projection.
fn child_work(change: &Change<FullObject>, resource: &ApiResource) -> Vec<ObjectKey> {
    let controlled = |object: &FullObject| controller_uid(object.metadata()).is_some();
    let record = |object: &FullObject| Arc::new(record(object, resource));
    let change = match change {
        Change::Applied { old, new } => {
            if !controlled(new) && !old.as_deref().is_some_and(controlled) {
                return Vec::new();
            }
            Change::Applied {
                old: old.as_deref().map(record),
                new: record(new),
            }
        }
        Change::Deleted(old) => {
            if !controlled(old) {
                return Vec::new();
            }
            Change::Deleted(record(old))
        }
    };
    watch::child_work(&change)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    fn full_pod(controller: Option<&str>, phase: &str, rv: &str) -> Arc<FullObject> {
        let owners: Vec<serde_json::Value> = controller
            .map(|kind| {
                let api_version = if kind == "DataJob" { "policyhost.dev/v1alpha1" } else { "apps/v1" };
                json!({"apiVersion": api_version, "kind": kind, "name": "j", "uid": "u", "controller": true})
            })
            .into_iter()
            .collect();
        Arc::new(FullObject::Pod(Box::new(
            Pod::deserialize(&json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "w", "namespace": "ns", "resourceVersion": rv,
                    "ownerReferences": owners},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                "status": {"phase": phase}}))
            .unwrap(),
        )))
    }

    fn pods() -> ApiResource {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "Pod"))
    }

    #[test]
    fn a_foreign_object_is_never_work() {
        let change = Change::Applied {
            old: Some(full_pod(Some("ReplicaSet"), "Pending", "1")),
            new: full_pod(Some("ReplicaSet"), "Running", "2"),
        };
        assert!(child_work(&change, &pods()).is_empty());
        let deleted = Change::Deleted(full_pod(None, "Running", "1"));
        assert!(child_work(&deleted, &pods()).is_empty());
    }

    #[test]
    fn a_child_phase_change_queues_its_datajob_as_the_operators_caches_do() {
        let change = Change::Applied {
            old: Some(full_pod(Some("DataJob"), "Pending", "1")),
            new: full_pod(Some("DataJob"), "Running", "2"),
        };
        assert_eq!(
            child_work(&change, &pods()),
            [ObjectKey::namespaced("ns", "j")]
        );
        let unseen = Change::Applied {
            old: Some(full_pod(Some("DataJob"), "Running", "1")),
            new: full_pod(Some("DataJob"), "Running", "2"),
        };
        assert!(child_work(&unseen, &pods()).is_empty());
    }
}
