//! The watch streams: one per kind and scope, each feeding its cache and
//! turning what changed into work for the queue.
//!
//! Children are watched with the label selector
//! `policyhost.dev/managed-by=<instance>`, so the API server sends only the
//! operator's own objects: fifty thousand foreign Pods cost nothing here.
//! Each stream is shared by the cache and the queue: the change the cache
//! reports is the change that is queued, so the two never disagree.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::api::{Api, WatchEvent, WatchParams};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use crate::cache::{
    self, Cached, Change, ChildCache, ChildCaches, ChildRecord, Children, Foreign, IndexValue,
    ObjectKey, Scope, Store,
};
use crate::chain::Chain;
use crate::crd::DataJob;
use crate::projection::ChildObject;
use crate::queue::WorkQueue;
use crate::shard::labels::{self, Labeller, Misplaced};
use crate::shard::{Bucket, Serving, Share};
use crate::vocabulary::{FINALIZER, MANAGED_BY_LABEL, SHARD_LABEL};

/// How the operator watches the cluster.
#[derive(Debug, Clone)]
pub struct Config {
    /// The namespaces to watch, or [`Scope::Cluster`] alone for all of them.
    pub scopes: Vec<Scope>,
    /// The operator instance: children are selected by `managed-by=<instance>`.
    pub instance: String,
    /// Start streams with a streaming list (`sendInitialEvents`, Kubernetes
    /// 1.32+ with the `WatchList` feature) instead of a paginated list.
    pub streaming_lists: bool,
    /// How long a child's change waits at most before its DataJob is
    /// queued: the changes of a burst (its children created, scheduled,
    /// started one by one) within it cost one pass and at most one status
    /// write.
    pub child_settle: Duration,
    /// How long a burst of children's own changes (a Pod started, a Job
    /// finished) must go quiet before the pass, within `child_settle`. The
    /// echoes of the operator's writes (a child created or applied) wait
    /// out the whole `child_settle`: what the cluster makes of a write
    /// comes later, and the pass that sees it writes the status once.
    pub child_quiet: Duration,
    /// The buckets to watch: every object, or a shard's share.
    pub serving: Serving,
    /// Whether the API server applies a `shardSelector`; else a shard
    /// selects its DataJobs by their bucket label ([`labels`]).
    pub server_shards: bool,
}

impl Config {
    /// The label selector of the operator's children in `share` (all of
    /// them for `None`).
    #[must_use]
    pub fn child_selector(&self, share: Option<Share>) -> String {
        let mine = format!("{MANAGED_BY_LABEL}={}", self.instance);
        match share {
            Some(share) if share != Share::ALL => format!("{mine},{}", labels::selector(share)),
            _ => mine,
        }
    }

    /// The watcher's settings: these labels selected, if any, and a
    /// streaming list if the server offers one.
    #[must_use]
    pub fn watcher_config(&self, labels: Option<&str>) -> watcher::Config {
        let mut config = watcher::Config::default();
        if let Some(labels) = labels {
            config = config.labels(labels);
        }
        if self.streaming_lists {
            config = config.streaming_lists();
        }
        config
    }
}

/// Children caches the operator keeps current: its indexed
/// [`ChildCaches`], or a baseline a benchmark measures them against.
/// `Any`, so that whoever built one can find its own type again.
pub trait WatchedChildren: Children + std::any::Any {
    /// One task per kind, each keeping its cache current and queueing the
    /// DataJob that controls every child whose change a policy could see;
    /// `foreign` hears of every object naming a DataJob of another
    /// namespace. Each runs until dropped.
    fn watches(
        &self,
        client: Client,
        config: Config,
        queue: Arc<WorkQueue<ObjectKey>>,
        foreign: Foreign,
    ) -> Vec<BoxFuture<'static, ()>>;
}

/// Builds empty children caches for these kinds, fed by one stream per scope.
pub type ChildCaching = fn(&[ApiResource], &[Scope]) -> Arc<dyn WatchedChildren>;

/// The operator's children caches: [`ChildCaches`], indexed by owner.
#[must_use]
pub fn indexed(kinds: &[ApiResource], scopes: &[Scope]) -> Arc<dyn WatchedChildren> {
    Arc::new(ChildCaches::empty(kinds, scopes))
}

impl WatchedChildren for ChildCaches {
    fn watches(
        &self,
        client: Client,
        config: Config,
        queue: Arc<WorkQueue<ObjectKey>>,
        foreign: Foreign,
    ) -> Vec<BoxFuture<'static, ()>> {
        self.iter()
            .map(|cache| {
                let watch = children(
                    client.clone(),
                    config.clone(),
                    cache.clone(),
                    Arc::clone(&queue),
                    foreign.clone(),
                );
                Box::pin(watch) as BoxFuture<'static, ()>
            })
            .collect()
    }
}

/// Keeps the DataJob cache current and queues every DataJob whose change
/// needs a reconcile. Runs until the streams end (they retry with backoff
/// on errors, so: until the task is dropped).
pub async fn data_jobs(
    client: Client,
    config: Config,
    store: Store<DataJob>,
    queue: Arc<WorkQueue<ObjectKey>>,
) {
    // Without the server's shard selectors, the DataJobs carry their
    // bucket as a label, which this shard's labeller writes.
    let labelled = config.serving.is_sharded() && !config.server_shards;
    let (labeller, misplaced) = Labeller::new(
        client.clone(),
        config.serving.clone(),
        config
            .scopes
            .iter()
            .map(|scope| data_job_api(&client, scope))
            .collect(),
    );
    let streams = config.scopes.iter().map(|scope| {
        let stream = config.serving.stream();
        let start = {
            let (client, config, store, queue) = (
                client.clone(),
                config.clone(),
                store.clone(),
                Arc::clone(&queue),
            );
            let scope = scope.clone();
            let misplaced = labelled.then(|| misplaced.clone());
            move |share: Option<Share>| -> BoxFuture<'static, ()> {
                let (client, selector) = match share {
                    Some(share) if labelled => (client.clone(), Some(labels::selector(share))),
                    Some(share) => (with_shard_selector(&client, share), None),
                    None => (client.clone(), None),
                };
                let api = data_job_api(&client, &scope);
                let events = watcher::watcher(api, config.watcher_config(selector.as_deref()));
                let queue = Arc::clone(&queue);
                let owner = match &misplaced {
                    Some(misplaced) => Owner::Labelled(misplaced.clone()),
                    None => Owner::Itself,
                };
                Box::pin(drive(
                    owned(events, share, owner, config.serving.clone(), stream),
                    scope.clone(),
                    store.clone(),
                    cache::slim_data_job,
                    move |change: &Change<DataJob>| {
                        if let Some(key) = data_job_work(change) {
                            queue.add(key);
                        }
                    },
                ))
            }
        };
        sharded(&config, stream, scope, &store, start)
    });
    let streams = futures::future::join_all(streams);
    if labelled {
        futures::future::join(streams, labeller.run()).await;
    } else {
        streams.await;
    }
}

fn data_job_api(client: &Client, scope: &Scope) -> Api<DataJob> {
    match scope {
        Scope::Cluster => Api::all(client.clone()),
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
    }
}

/// Keeps one child kind's cache current and queues the DataJob that
/// controls every child whose change a policy could see; `foreign` hears of
/// every object naming a DataJob of another namespace.
async fn children(
    client: Client,
    config: Config,
    cache: ChildCache,
    queue: Arc<WorkQueue<ObjectKey>>,
    foreign: Foreign,
) {
    let streams = config.scopes.iter().map(|scope| {
        let stream = config.serving.stream();
        let start = {
            let (client, config, cache, queue, foreign) = (
                client.clone(),
                config.clone(),
                cache.clone(),
                Arc::clone(&queue),
                foreign.clone(),
            );
            let scope = scope.clone();
            move |share: Option<Share>| -> BoxFuture<'static, ()> {
                let api = child_api(&client, &scope, &cache.resource);
                let selector = config.child_selector(share);
                let events = watcher::watcher(api, config.watcher_config(Some(&selector)));
                let queue = Arc::clone(&queue);
                let foreign = foreign.clone();
                let kind = cache.resource.kind.clone();
                let (settle, quiet) = (config.child_settle, config.child_quiet);
                Box::pin(drive(
                    owned(
                        events,
                        share,
                        Owner::Controller,
                        config.serving.clone(),
                        stream,
                    ),
                    scope.clone(),
                    cache.store.clone(),
                    |object: ChildObject| ChildRecord::from_object(&object),
                    move |change: &Change<ChildRecord>| {
                        foreign.observe(&kind, change);
                        let echo = echoes_a_write(change);
                        for key in child_work(change) {
                            if echo {
                                queue.add_coalesced(key, settle);
                            } else {
                                queue.add_settled(key, quiet, settle);
                            }
                        }
                    },
                ))
            }
        };
        sharded(&config, stream, scope, &cache.store, start)
    });
    futures::future::join_all(streams).await;
}

/// Runs the watch `start` makes for the share to watch, and starts it
/// again each time that share changes (a shard's membership moved
/// buckets): the new stream's first list replaces what the store held.
/// An empty share watches nothing and empties the store. Unsharded, runs
/// one watch of everything.
async fn sharded<T, V>(
    config: &Config,
    stream: usize,
    scope: &Scope,
    store: &Store<T, V>,
    start: impl Fn(Option<Share>) -> BoxFuture<'static, ()>,
) where
    T: Cached,
    V: IndexValue,
{
    let mut watched = config.serving.watched();
    loop {
        let share = *watched.borrow_and_update();
        match share {
            Some(share) if share.is_empty() => {
                for event in [cache::Event::Init, cache::Event::InitDone] {
                    drop(store.apply_in(scope, event));
                }
                config.serving.listed(stream, share);
                if watched.changed().await.is_err() {
                    return;
                }
            }
            _ => {
                tokio::select! {
                    () = start(share) => return,
                    changed = watched.changed() => if changed.is_err() { return },
                }
            }
        }
    }
}

/// Which uid puts an object in a bucket.
#[derive(Debug, Clone)]
enum Owner {
    /// Its own (a DataJob).
    Itself,
    /// Its own (a DataJob selected by its bucket label): one whose label
    /// names a bucket of this share but not its uid's (kept or not: two
    /// buckets may have one owner) is sent here to be labelled again.
    Labelled(tokio::sync::mpsc::UnboundedSender<Misplaced>),
    /// Its controller's (a child follows its DataJob); an object without
    /// one is kept, as no DataJob reads it.
    Controller,
}

/// The events of `share`'s objects only, whatever the server filtered
/// (watch events carry no `shardInfo`, and a server without the feature
/// gate sends everything); reports the stream `listed` at the end of each
/// list.
fn owned<K: Resource + Send + 'static>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    share: Option<Share>,
    owner: Owner,
    serving: Serving,
    stream: usize,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send {
    let keep = move |object: &K| {
        let Some(share) = share else { return true };
        let meta = object.meta();
        let uid = match &owner {
            Owner::Itself => meta.uid.as_deref(),
            Owner::Labelled(misplaced) => {
                let uid = meta.uid.as_deref().unwrap_or_default();
                let bucket = Bucket::of_uid(uid);
                let labelled = meta.labels.as_ref().and_then(|l| l.get(SHARD_LABEL));
                if labelled != Some(&bucket.index().to_string()) {
                    let _ = misplaced.send(Misplaced {
                        namespace: meta.namespace.clone().unwrap_or_default(),
                        name: meta.name.clone().unwrap_or_default(),
                        uid: uid.to_owned(),
                    });
                }
                return share.contains(bucket);
            }
            Owner::Controller => match meta
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true))
            {
                Some(reference) => Some(reference.uid.as_str()),
                None => return true,
            },
        };
        uid.is_some_and(|uid| share.contains(Bucket::of_uid(uid)))
    };
    events.filter_map(move |event| {
        let event = match event {
            Ok(watcher::Event::Apply(object)) if !keep(&object) => None,
            Ok(watcher::Event::InitApply(object)) if !keep(&object) => None,
            Ok(watcher::Event::InitDone) => {
                serving.listed(stream, share.unwrap_or(Share::ALL));
                Some(Ok(watcher::Event::InitDone))
            }
            other => Some(other),
        };
        std::future::ready(event)
    })
}

/// A client whose every request carries `shardSelector` for `share`: the
/// lists and watches of kube's watcher, which has no such setting.
fn with_shard_selector(client: &Client, share: Share) -> Client {
    let Some(selector) = share.selector() else {
        return client.clone();
    };
    let param = format!(
        "shardSelector={}",
        form_urlencoded::byte_serialize(selector.as_bytes()).collect::<String>()
    );
    let inner = client.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let uri = request.uri().to_string();
        let joined = if uri.contains('?') { '&' } else { '?' };
        if let Ok(uri) = format!("{uri}{joined}{param}").parse() {
            *request.uri_mut() = uri;
        }
        async move { inner.send(request).await }
    });
    Client::new(service, client.default_namespace())
}

/// True when the API server answers a streaming list (`sendInitialEvents`,
/// the `WatchList` feature): it must end the initial events with the
/// `k8s.io/initial-events-end` bookmark. Asked once at start-up, with a
/// selector that matches nothing, on the DataJob resource the operator may
/// watch anyway.
pub async fn streaming_lists_supported(client: &Client, scope: &Scope) -> bool {
    let api: Api<DataJob> = match scope {
        Scope::Cluster => Api::all(client.clone()),
        Scope::Namespace(namespace) => Api::namespaced(client.clone(), namespace),
    };
    let params = WatchParams::streaming_lists()
        .labels("policyhost.dev/probe=streaming-lists")
        .timeout(2);
    let Ok(events) = api.watch(&params, "").await else {
        return false;
    };
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Bookmark(bookmark)) => {
                return bookmark
                    .metadata
                    .annotations
                    .contains_key("k8s.io/initial-events-end");
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

fn child_api(client: &Client, scope: &Scope, resource: &ApiResource) -> Api<ChildObject> {
    match scope {
        Scope::Cluster => Api::all_with(client.clone(), resource),
        Scope::Namespace(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
    }
}

/// Feeds one watch stream into `store` and hands every change to `on_change`.
pub async fn drive<K, T, V>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    scope: Scope,
    store: Store<T, V>,
    project: impl Fn(K) -> T,
    on_change: impl Fn(&Change<T>),
) where
    K: Resource + DeserializeOwned + Clone + std::fmt::Debug + Send + 'static,
    T: Cached,
    V: IndexValue,
{
    let events = events.default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                for change in store.apply_in(&scope, project_event(event, &project)) {
                    on_change(&change);
                }
            }
            // The watcher re-lists after the backoff; the store keeps serving meanwhile.
            Err(error) => warn!(?scope, error = %Chain(&error), "watch stream failed; retrying"),
        }
    }
    debug!(?scope, "watch stream ended");
}

fn project_event<K, T>(event: watcher::Event<K>, project: impl Fn(K) -> T) -> cache::Event<T> {
    match event {
        watcher::Event::Apply(object) => cache::Event::Apply(project(object)),
        watcher::Event::Delete(object) => cache::Event::Delete(project(object)),
        watcher::Event::Init => cache::Event::Init,
        watcher::Event::InitApply(object) => cache::Event::InitApply(project(object)),
        watcher::Event::InitDone => cache::Event::InitDone,
    }
}

/// The DataJob to reconcile after this change, if any. Status-only updates
/// (most of them the operator's own writes) need none, nor the finalizer
/// added: the pass that added it goes on to reconcile the DataJob.
fn data_job_work(change: &Change<DataJob>) -> Option<ObjectKey> {
    match change {
        Change::Applied { old: None, new } => Some(new.key()),
        Change::Applied {
            old: Some(old),
            new,
        } => {
            let (o, n) = (&old.metadata, &new.metadata);
            // The bucket label is the host's own, for the shards' watches.
            let labels = |meta: &kube::api::ObjectMeta| {
                meta.labels
                    .iter()
                    .flatten()
                    .filter(|(key, _)| key.as_str() != SHARD_LABEL)
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect::<Vec<_>>()
            };
            let changed = o.generation != n.generation
                || o.deletion_timestamp != n.deletion_timestamp
                || labels(o) != labels(n)
                || o.annotations != n.annotations
                || (o.finalizers != n.finalizers && !finalizer_added(o, n))
                || o.uid != n.uid;
            changed.then(|| new.key())
        }
        Change::Deleted(old) => Some(old.key()),
    }
}

/// The DataJobs a child change concerns: the controller before and after.
/// A change the policy cannot see (only the resourceVersion, or status
/// fields outside the projection) concerns none.
#[must_use]
pub fn child_work(change: &Change<ChildRecord>) -> Vec<ObjectKey> {
    let owner_key = |record: &ChildRecord| {
        let namespace = record.key.namespace().unwrap_or_default();
        record
            .owner
            .as_ref()
            .map(|owner| ObjectKey::namespaced(namespace, owner.name.as_str()))
    };
    match change {
        Change::Applied { old: None, new } => owner_key(new).into_iter().collect(),
        Change::Applied {
            old: Some(old),
            new,
        } => {
            if old.child == new.child
                && old.owner == new.owner
                && old.applied_hash == new.applied_hash
            {
                return Vec::new();
            }
            let mut keys: Vec<ObjectKey> =
                owner_key(old).into_iter().chain(owner_key(new)).collect();
            keys.dedup();
            keys
        }
        Change::Deleted(old) => owner_key(old).into_iter().collect(),
    }
}

/// Whether the only change of a DataJob's finalizers is the operator's own
/// finalizer appended.
fn finalizer_added(old: &kube::api::ObjectMeta, new: &kube::api::ObjectMeta) -> bool {
    let old = old.finalizers.as_deref().unwrap_or_default();
    match new.finalizers.as_deref().unwrap_or_default().split_last() {
        Some((last, rest)) => last == FINALIZER && rest == old && !old.contains(last),
        None => false,
    }
}

/// Whether a child's change is the operator's own write coming back: a
/// child created, or applied from other content. Anything else (its status
/// moved, it is being deleted or gone) is the cluster's progress.
#[must_use]
pub fn echoes_a_write(change: &Change<ChildRecord>) -> bool {
    match change {
        Change::Applied { old: None, .. } => true,
        Change::Applied {
            old: Some(old),
            new,
        } => old.applied_hash != new.applied_hash,
        Change::Deleted(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::crd::DataJobSpec;

    fn job(generation: i64, phase: Option<&str>) -> Arc<DataJob> {
        let mut job = DataJob::new("j", DataJobSpec::default());
        job.metadata.namespace = Some("ns".into());
        job.metadata.generation = Some(generation);
        job.status = phase.map(|p| crate::crd::DataJobStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        Arc::new(job)
    }

    fn child(phase: &str, rv: &str) -> Arc<ChildRecord> {
        let object = ChildObject::deserialize(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w", "namespace": "ns", "resourceVersion": rv,
                "ownerReferences": [{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                    "name": "j", "uid": "u", "controller": true}]},
            "status": {"phase": phase}}))
        .unwrap();
        Arc::new(ChildRecord::from_object(&object))
    }

    #[test]
    fn a_status_only_update_of_a_datajob_is_not_work() {
        let change = Change::Applied {
            old: Some(job(1, None)),
            new: job(1, Some("Running")),
        };
        assert_eq!(data_job_work(&change), None);
    }

    #[test]
    fn the_operators_finalizer_added_is_not_work_and_any_other_finalizer_change_is() {
        let with = |finalizers: &[&str]| {
            let mut job = (*job(1, None)).clone();
            job.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
            Arc::new(job)
        };
        let change = |old: Arc<DataJob>, new: Arc<DataJob>| {
            data_job_work(&Change::Applied {
                old: Some(old),
                new,
            })
        };
        assert_eq!(change(job(1, None), with(&[FINALIZER])), None);
        assert_eq!(change(with(&["other"]), with(&["other", FINALIZER])), None);
        let work = Some(ObjectKey::namespaced("ns", "j"));
        assert_eq!(change(with(&[FINALIZER]), with(&[])), work, "removed");
        assert_eq!(change(job(1, None), with(&["other"])), work, "another's");
        assert_eq!(
            change(with(&["other"]), with(&[FINALIZER])),
            work,
            "added while another went"
        );
        assert_eq!(
            change(with(&[FINALIZER]), with(&[FINALIZER, FINALIZER])),
            work,
            "a second copy"
        );
    }

    #[test]
    fn a_spec_change_of_a_datajob_is_work() {
        let change = Change::Applied {
            old: Some(job(1, None)),
            new: job(2, None),
        };
        assert_eq!(
            data_job_work(&change),
            Some(ObjectKey::namespaced("ns", "j"))
        );
    }

    #[test]
    fn a_child_phase_change_queues_its_datajob() {
        let change = Change::Applied {
            old: Some(child("Pending", "1")),
            new: child("Running", "2"),
        };
        assert_eq!(child_work(&change), [ObjectKey::namespaced("ns", "j")]);
    }

    #[test]
    fn a_child_update_the_policy_cannot_see_is_not_work() {
        let change = Change::Applied {
            old: Some(child("Running", "1")),
            new: child("Running", "2"),
        };
        assert!(child_work(&change).is_empty());
    }

    #[test]
    fn only_a_child_created_or_applied_anew_echoes_the_operators_write() {
        let applied = |hash: &str| {
            let mut record = (*child("Pending", "2")).clone();
            record.applied_hash = Some(hash.into());
            Arc::new(record)
        };
        let created = Change::Applied {
            old: None,
            new: applied("a"),
        };
        let reapplied = Change::Applied {
            old: Some(applied("a")),
            new: applied("b"),
        };
        let started = Change::Applied {
            old: Some(applied("a")),
            new: {
                let mut record = (*child("Running", "3")).clone();
                record.applied_hash = Some("a".into());
                Arc::new(record)
            },
        };
        assert!(echoes_a_write(&created));
        assert!(echoes_a_write(&reapplied));
        assert!(!echoes_a_write(&started), "a Pod started is progress");
        assert!(!echoes_a_write(&Change::Deleted(applied("a"))));
    }

    #[test]
    fn a_deleted_child_queues_its_datajob() {
        let change = Change::Deleted(child("Running", "1"));
        assert_eq!(child_work(&change), [ObjectKey::namespaced("ns", "j")]);
    }
}
