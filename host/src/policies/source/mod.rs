//! Policies from ConfigMaps: a label-selected watch in one namespace feeds a
//! slim cache and a work queue keyed by ConfigMap; workers load each new
//! version and swap it into the registry.
//!
//! # Expected flow
//!
//! 1. The watch (`policyhost.dev/policy` label, one namespace) projects each
//!    ConfigMap to a [`Record`]: its identity, policy name and a fingerprint
//!    of its content. The bytes are not cached: they are held only from
//!    the event to the load, then dropped (the compiled code lives in the
//!    runtime's cache, keyed by digest).
//! 2. A change of content queues the ConfigMap; the queue coalesces bursts
//!    (the newest content wins) and never loads one ConfigMap twice at once.
//!    Updates that leave the content alone (e.g. the host's own annotations)
//!    are not work.
//! 3. A worker decides whether the ConfigMap may offer the version and
//!    loads it ([`verdict`]); a version named as an artifact is pulled
//!    first, on a task of its own and apart from the loads ([`pulls`]),
//!    then queued again to load. A good one is swapped into the [`Registry`]
//!    in the role its ConfigMap asks for: serving (which re-queues every
//!    DataJob of the policy), or, labelled `policyhost.dev/role:
//!    candidate`, the candidate (called beside the serving version, never
//!    applied: [`crate::shadow`]); a bad one is recorded as rejected for
//!    that role and the version in it keeps serving. Either way the ConfigMap gets an Event and annotations, and
//!    the metrics say so.
//! 4. Deleting the ConfigMap takes the version out of service.
//! 5. Beside them, a second watch follows the grant ConfigMaps
//!    ([`super::grant_watch`], label `policyhost.dev/grant`); a version is loaded
//!    with its policy's grant, and a change of a grant re-loads its policy.
//!    The policy watch starts once the grants are listed, so a restart
//!    never loads a version without the grant it has.
//!
//! # Guarantees
//! - One bad ConfigMap never stops the others: every failure is a rejection
//!   of that version, reported on its ConfigMap.
//! - Publication is fair between teams ([`crate::fair::Teams`]): the load
//!   queue serves the team holding the fewest loads first, one load at a
//!   time (the compile slot is one), and no load waits on a registry. So
//!   another team's version loads within its own load time plus at most
//!   the one load (and compile) running when it came, whatever one team's
//!   registry does.
//! - A ConfigMap may provide a policy only as the host's tenancy allows
//!   ([`super::tenancy`]): on a strict host, only `policy-<name>` provides
//!   `<name>`, and only `candidate-<name>` its candidate (`NameMismatch`).
//!   A candidate is loaded with the policy's own grant, never another.
//! - Two ConfigMaps naming the same policy (or both its candidate): the one that provides it keeps
//!   it, the other is rejected (`Conflict`) until the first is deleted, then
//!   takes over. The provider is recorded on its ConfigMap
//!   ([`PROVIDES_ANNOTATION`](crate::vocabulary::PROVIDES_ANNOTATION)), and on a start the recorded one
//!   keeps the name whatever the order the API server lists them in.
//! - Only `grant-<name>` grants `<name>`; a ConfigMap of another name
//!   labelled as a grant grants nothing and gets a `GrantIgnored` Event.
//! - A ConfigMap that looks like a DataJob's child (an ownerReference, the
//!   host's child labels: [`super::provenance`]) is never loaded and claims
//!   nothing; the version in service keeps serving.
//! - [`ConfigMapSource::listed`] completes once the first list is in the
//!   cache: every policy it offers is then [`Registry::expect`]ed, so a
//!   DataJob of a policy still loading waits for it quietly rather than
//!   reporting it unavailable, and the controller starts at once instead of
//!   waiting for every team's pulls.

mod pinning;
mod pulls;
mod record;
mod rollouts;
pub mod verdict;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use self::pulls::Pulls;
pub use self::record::{Asked, Claim, Record};
use self::record::{Content, split};
use super::load;
use super::registry::{Registry, Role};
use super::report::Annotations;
use super::revisions::Revisions;
use crate::cache::{self, Cached, Change, Index, ObjectKey, Scope, Store, StoreBuilder};
use crate::chain::Chain;
use crate::fair::Tenant;
use crate::grants::GrantWatch;
use crate::grants::Grants;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::queue::{Backoff, WorkQueue};
use crate::runtime::Runtime;
use crate::shard::Replicas;
use crate::vocabulary::POLICY_LABEL;

/// How the ConfigMap source runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The namespace of the policy ConfigMaps (the operator's own).
    pub namespace: String,
    /// Start the watch with a streaming list.
    pub streaming_lists: bool,
    /// What a ConfigMap may ask for.
    pub load: load::Config,
    /// Versions loaded at once.
    pub workers: usize,
    /// How often the Secrets that grants name are read again.
    pub secret_refresh: Duration,
    /// The operator instance, reported in the Events it records.
    pub instance: String,
    /// Whether this replica leads: every replica loads the policies (a
    /// follower stays ready to take over), only the leader reports them.
    pub leadership: Leadership,
    /// Revisions kept per policy for `policy rollback` (`--policy-history`):
    /// 0 keeps none.
    pub history: usize,
    /// How many replicas share each grant's outbound concurrency.
    pub replicas: Replicas,
}

/// What a worker has to do for one ConfigMap.
enum Pending {
    /// Load this content.
    Present(Arc<Record>, Box<Content>),
    /// The ConfigMap is gone.
    Gone(Arc<Record>),
    /// Read the ConfigMap again (its content was dropped): it may take over
    /// a policy another ConfigMap served.
    Refetch,
}

/// What each ConfigMap holds.
#[derive(Default)]
struct State {
    /// A policy's serving version or candidate → the ConfigMap holding it.
    owners: HashMap<Claim, ObjectKey>,
    /// ConfigMap → what it last reported.
    reported: HashMap<ObjectKey, Reported>,
    /// Policy → its rollout in force.
    rollouts: HashMap<String, rollouts::Rollout>,
}

/// What a ConfigMap last reported, and for which claim.
struct Reported {
    claim: Claim,
    annotations: Annotations,
}

/// Watches policy ConfigMaps and keeps the registry in step with them.
pub struct ConfigMapSource {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    runtime: Runtime,
    grants: Arc<Grants>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    config: Config,
    store: Store<Record, Claim>,
    by_claim: Index<Record, Claim>,
    queue: Arc<WorkQueue<ObjectKey>>,
    pending: Mutex<HashMap<ObjectKey, Pending>>,
    state: Mutex<State>,
    /// The serving versions of the first list not yet processed, with the
    /// policy each is expected for; `None` before the list completed.
    first: Mutex<Option<HashMap<ObjectKey, String>>>,
    /// Set once the first list is in the cache.
    listed: watch::Sender<bool>,
    /// The artifacts being pulled, apart from the loads.
    pulls: Arc<Pulls>,
    /// The versions each policy served, for a rollback.
    revisions: Revisions,
}

impl ConfigMapSource {
    /// Prepares the source; nothing runs until [`run`](Self::run).
    #[must_use]
    pub fn new(
        client: Client,
        runtime: Runtime,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        config: Config,
    ) -> Self {
        let mut store = StoreBuilder::<Record, Claim>::default();
        let by_claim = store.index("claim", |record: &Record| vec![record.claim()]);
        let store = store
            .scopes(vec![Scope::Namespace(config.namespace.as_str().into())])
            .build();
        // A ConfigMap's team, from the cache: a key that is gone (a
        // deletion's work) is the host's.
        let (records, teams) = (store.clone(), config.load.teams.clone());
        let queue = WorkQueue::with_tenants(
            Backoff {
                base: Duration::from_millis(200),
                max: Duration::from_secs(30),
            },
            move |key: &ObjectKey| {
                records.get(key).map_or_else(Tenant::host, |record| {
                    teams.team_of(&record.policy).tenant()
                })
            },
        );
        let grants = Arc::new(
            Grants::new(client.clone(), config.namespace.clone())
                .shared_among(config.replicas.clone()),
        );
        let revisions = Revisions::new(client.clone(), &config.namespace, config.history);
        Self {
            inner: Arc::new(Inner {
                client,
                runtime,
                grants,
                registry,
                metrics,
                config,
                store,
                by_claim,
                queue,
                pending: Mutex::new(HashMap::new()),
                state: Mutex::new(State::default()),
                first: Mutex::new(None),
                listed: watch::channel(false).0,
                pulls: Arc::default(),
                revisions,
            }),
        }
    }

    /// Completes once the first list is in the cache and the registry
    /// expects each policy it offers ([`Registry::expect`]).
    pub fn listed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut listed = self.inner.listed.subscribe();
        async move {
            let _ = listed.wait_for(|listed| *listed).await;
        }
    }

    /// The cached policy ConfigMaps.
    #[must_use]
    pub fn records(&self) -> Vec<Arc<Record>> {
        self.inner.store.all()
    }

    /// Watches and loads until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let inner = self.inner;
        let mut tasks = JoinSet::new();
        let (listed, grants_listed) = tokio::sync::oneshot::channel();
        let grants = Arc::new(GrantWatch {
            client: inner.client.clone(),
            namespace: inner.config.namespace.clone(),
            grants: Arc::clone(&inner.grants),
            metrics: Arc::clone(&inner.metrics),
            instance: inner.config.instance.clone(),
            leadership: inner.config.leadership.clone(),
        });
        let (watch, reloads) = (Arc::clone(&grants), Arc::clone(&inner));
        tasks.spawn(async move { watch.watch(listed, |policy| reloads.reload(policy)).await });
        let policies = Arc::clone(&inner);
        tasks.spawn(async move {
            if grants_listed.await.is_ok() {
                watch_configmaps(policies).await;
            }
        });
        tasks.spawn(report_on_leadership(Arc::clone(&inner)));
        let driving = Arc::clone(&inner);
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(rollouts::TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                driving.drive_rollouts().await;
            }
        });
        let (every, reloads) = (inner.config.secret_refresh, Arc::clone(&inner));
        tasks.spawn(async move {
            grants
                .refresh_secrets(every, |policy| reloads.reload(policy))
                .await;
        });
        for _ in 0..inner.config.workers.max(1) {
            tasks.spawn(work(Arc::clone(&inner)));
        }
        shutdown.await;
        inner.queue.shut_down();
        inner.pulls.cancel_all();
        tasks.shutdown().await;
    }
}

/// Each time this replica becomes leader, writes on each ConfigMap the
/// verdict it reached as a follower: a version pushed while no replica led
/// (say, between a leader's death and its Lease's expiry) is loaded by every
/// replica, and written by none until then. Such a version has no revision
/// either: its ConfigMap is loaded again (a compile-cache hit), which keeps
/// one.
async fn report_on_leadership(inner: Arc<Inner>) {
    let mut leading = inner.config.leadership.subscribe();
    loop {
        if *leading.borrow_and_update() {
            let verdicts: Vec<(ObjectKey, Annotations)> = inner
                .state()
                .reported
                .iter()
                .map(|(key, reported)| (key.clone(), reported.annotations.clone()))
                .collect();
            for (key, annotations) in verdicts {
                let api: Api<ConfigMap> =
                    Api::namespaced(inner.client.clone(), key.namespace().unwrap_or_default());
                if let Err(error) = annotations.write(&api, key.name()).await {
                    warn!(configmap = %key, error = %Chain(&error), "cannot annotate the policy ConfigMap");
                }
            }
            let unrecorded = if inner.revisions.keep > 0 {
                unrecorded(&inner.store.all(), &inner.state().reported)
            } else {
                Vec::new()
            };
            for key in unrecorded {
                info!(configmap = %key, "serving a version no leader kept a revision of: loading it again");
                inner
                    .pending()
                    .entry(key.clone())
                    .or_insert(Pending::Refetch);
                inner.queue.add(key);
            }
        }
        if leading.changed().await.is_err() {
            return;
        }
    }
}

/// The serving ConfigMaps whose version in service, as this replica
/// reported it, is not the one their history names last served.
fn unrecorded(records: &[Arc<Record>], reported: &HashMap<ObjectKey, Reported>) -> Vec<ObjectKey> {
    records
        .iter()
        .filter(|record| record.role == Role::Serving.into())
        .filter(|record| {
            reported.get(&record.key).is_some_and(|reported| {
                let serving = reported.annotations.loaded_digest.as_ref();
                serving.is_some() && serving != record.recorded.as_ref()
            })
        })
        .map(|record| record.key.clone())
        .collect()
}

/// Feeds the watch into the store and queues every change of content.
async fn watch_configmaps(inner: Arc<Inner>) {
    let namespace = inner.config.namespace.clone();
    let api: Api<ConfigMap> = Api::namespaced(inner.client.clone(), &namespace);
    let mut config = watcher::Config::default().labels(POLICY_LABEL);
    if inner.config.streaming_lists {
        config = config.streaming_lists();
    }
    let scope = Scope::Namespace(namespace.as_str().into());
    let events = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(events);
    // Contents of the current event (or re-list), by key: what a change
    // reported by the store is loaded from. Dropped after each event.
    let mut contents: HashMap<ObjectKey, Content> = HashMap::new();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                warn!(%namespace, error = %Chain(&error), "policy ConfigMap watch failed; retrying");
                continue;
            }
        };
        let relisting = matches!(event, watcher::Event::Init | watcher::Event::InitApply(_));
        let event = match event {
            watcher::Event::Apply(map) => cache::Event::Apply(split(map, &mut contents)),
            watcher::Event::Delete(map) => cache::Event::Delete(Record::of(&map, String::new())),
            watcher::Event::Init => cache::Event::Init,
            watcher::Event::InitApply(map) => cache::Event::InitApply(split(map, &mut contents)),
            watcher::Event::InitDone => cache::Event::InitDone,
        };
        let changes = inner.store.apply_in(&scope, event);
        if !relisting {
            // Before queueing: a worker may finish a key of the first list
            // before this loop comes round again.
            inner.first_list_done();
        }
        for change in changes {
            inner.changed(change, &mut contents);
        }
        if !relisting {
            contents.clear();
        }
    }
}

/// What became of one piece of work for a ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum After {
    /// Done: loaded, rejected, or nothing to do.
    Done,
    /// To do again after a backoff (its registry was down or slow).
    Retry,
    /// Its artifact is being pulled; the pull queues it again.
    Pulling,
}

/// Takes keys from the queue until it shuts down.
async fn work(inner: Arc<Inner>) {
    while let Some(lease) = inner.queue.next().await {
        let key = lease.key().clone();
        let pending = inner.pending().remove(&key);
        let after = match pending {
            None => After::Done,
            Some(Pending::Present(record, content)) => inner.present(&record, *content).await,
            Some(Pending::Gone(record)) => {
                inner.gone(&record);
                After::Done
            }
            Some(Pending::Refetch) => inner.refetch(&key).await.unwrap_or(After::Retry),
        };
        if after == After::Retry {
            inner
                .pending()
                .entry(key.clone())
                .or_insert(Pending::Refetch);
            inner.queue.add_rate_limited(key.clone());
        } else {
            inner.queue.forget(&key);
        }
        drop(lease);
        if after == After::Done {
            inner.processed(&key);
        }
    }
}

impl Inner {
    fn pending(&self) -> MutexGuard<'_, HashMap<ObjectKey, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a change of content; ignores updates that leave it alone.
    fn changed(&self, change: Change<Record>, contents: &mut HashMap<ObjectKey, Content>) {
        match change {
            Change::Applied { old, new } => {
                if old.is_some_and(|old| new.same_content(&old)) {
                    return;
                }
                let key = new.key.clone();
                let pending = match contents.remove(&key) {
                    Some(content) => Pending::Present(new, Box::new(content)),
                    None => Pending::Refetch,
                };
                self.pending().insert(key.clone(), pending);
                // The older content's pull, if any, pulls nothing wanted.
                self.pulls.cancel(&key);
                self.queue.add(key);
            }
            Change::Deleted(old) => {
                let key = old.key.clone();
                self.pending().insert(key.clone(), Pending::Gone(old));
                self.pulls.cancel(&key);
                self.queue.add(key);
            }
        }
    }

    /// Loads the current versions of `policy` again (the serving one and
    /// the candidate): its grant changed.
    fn reload(&self, policy: &str) {
        for role in Role::ALL {
            let claim = Claim {
                policy: policy.to_owned(),
                role: role.into(),
            };
            for key in self.store.lookup_keys(self.by_claim, &claim) {
                info!(%policy, configmap = %key, "the policy's grant changed: loading it again");
                self.pending().insert(key.clone(), Pending::Refetch);
                self.queue.add(key);
            }
        }
    }

    /// Reads a ConfigMap again and loads it.
    async fn refetch(self: &Arc<Self>, key: &ObjectKey) -> kube::Result<After> {
        let api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), key.namespace().unwrap_or_default());
        let Some(map) = api.get_opt(key.name()).await? else {
            return Ok(After::Done);
        };
        let mut contents = HashMap::new();
        let record = split(map, &mut contents);
        if record.policy.is_empty() {
            return Ok(After::Done);
        }
        Ok(match contents.remove(key) {
            Some(content) => self.present(&Arc::new(record), content).await,
            None => After::Done,
        })
    }

    /// The pull of `record`'s artifact ended: its content, with what was
    /// pulled, goes back to the queue to load, unless newer work for the
    /// ConfigMap came meanwhile (which wins).
    fn fetched(&self, record: Arc<Record>, content: Content) {
        let key = record.key.clone();
        {
            let mut pending = self.pending();
            if pending.contains_key(&key) {
                return;
            }
            pending.insert(key.clone(), Pending::Present(record, Box::new(content)));
        }
        self.queue.add(key);
    }

    /// Once the first list is complete, remembers which ConfigMaps it held.
    fn first_list_done(&self) {
        if !self.store.is_ready() {
            return;
        }
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        if first.is_none() {
            let records = self.store.all();
            let expected: HashMap<ObjectKey, String> = records
                .iter()
                .filter(|record| record.role == Role::Serving.into())
                .map(|record| {
                    self.registry.expect(&record.policy);
                    (record.key(), record.policy.clone())
                })
                .collect();
            info!(
                configmaps = records.len(),
                namespace = %self.config.namespace,
                "policy ConfigMaps listed"
            );
            *first = Some(expected);
            self.listed.send_replace(true);
        }
    }

    /// Counts a ConfigMap of the first list as done: the registry no
    /// longer expects a version from it.
    fn processed(&self, key: &ObjectKey) {
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(policy) = first.as_mut().and_then(|expected| expected.remove(key)) {
            self.registry.settle(&policy);
        }
    }
}

/// Compile-time check: the source's future can run on a multi-threaded runtime.
#[allow(dead_code)]
fn source_future_should_be_send(source: ConfigMapSource) {
    fn assert_send<T: Send>(_: T) {}
    assert_send(source.run(std::future::pending()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_loads_again_only_what_serves_without_a_revision() {
        let serving = |name: &str, recorded: Option<&str>| {
            let mut record = verdict::tests::record(name, name, Role::Serving);
            record.recorded = recorded.map(str::to_owned);
            Arc::new(record)
        };
        let reported = |name: &str, digest: Option<&str>| {
            let record = verdict::tests::record(name, name, Role::Serving);
            let reported = Reported {
                claim: record.claim(),
                annotations: Annotations {
                    loaded_digest: digest.map(str::to_owned),
                    ..Annotations::default()
                },
            };
            (record.key, reported)
        };
        let mut candidate = verdict::tests::record("candidate-c", "c", Role::Candidate);
        candidate.recorded = None;
        let records = [
            serving("kept", Some("d1")),
            serving("missed", Some("d1")),
            serving("never", None),
            serving("refused", None),
            Arc::new(candidate),
        ];
        let reported = HashMap::from([
            reported("kept", Some("d1")),
            reported("missed", Some("d2")),
            reported("never", Some("d3")),
            reported("refused", None),
            reported("candidate-c", Some("d4")),
        ]);
        let keys: Vec<String> = unrecorded(&records, &reported)
            .iter()
            .map(|key| key.name().to_owned())
            .collect();
        assert_eq!(keys, ["missed", "never"]);
    }
}
