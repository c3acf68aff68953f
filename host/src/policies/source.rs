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
//! 3. A worker loads the version ([`super::load`]); a good one is swapped
//!    into the [`Registry`] (which re-queues every DataJob of the policy), a
//!    bad one is recorded as rejected and the version in service keeps
//!    serving. Either way the ConfigMap gets an Event and annotations, and
//!    the metrics say so.
//! 4. Deleting the ConfigMap takes the policy out of service.
//! 5. Beside them, a second watch follows the grant ConfigMaps
//!    ([`super::grants`], label `policyhost.dev/grant`); a version is loaded
//!    with its policy's grant, and a change of a grant re-loads its policy.
//!    The policy watch starts once the grants are listed, so a restart
//!    never loads a version without the grant it has.
//!
//! # Guarantees
//! - One bad ConfigMap never stops the others: every failure is a rejection
//!   of that version, reported on its ConfigMap.
//! - A ConfigMap may provide a policy only as the host's tenancy allows
//!   ([`super::tenancy`]): on a strict host, only `policy-<name>` provides
//!   `<name>` (`NameMismatch`).
//! - Two ConfigMaps naming the same policy: the one that provides it keeps
//!   it, the other is rejected (`Conflict`) until the first is deleted, then
//!   takes over. The provider is recorded on its ConfigMap
//!   ([`configmap::PROVIDES_ANNOTATION`]), and on a start the recorded one
//!   keeps the name whatever the order the API server lists them in.
//! - Only `grant-<name>` grants `<name>`; a ConfigMap of another name
//!   labelled as a grant grants nothing and gets a `GrantIgnored` Event.
//! - A ConfigMap that looks like a DataJob's child (an ownerReference, the
//!   host's child labels: [`super::provenance`]) is never loaded and claims
//!   nothing; the version in service keeps serving.
//! - [`ConfigMapSource::ready`] completes once the first list is loaded, so
//!   the controller can start without reporting every DataJob's policy as
//!   unavailable during a restart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::configmap::{self, POLICY_LABEL};
use super::grants::Grants;
use super::load;
use super::provenance::Foreign;
use super::refusal;
use super::registry::Registry;
use super::report::{self, Annotations};
use crate::cache::{self, Cached, Change, Index, ObjectKey, Scope, Store};
use crate::chain::display_chain;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::outbound::grant::GRANT_LABEL;
use crate::queue::{Backoff, WorkQueue};
use crate::runtime::Runtime;

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
}

/// A policy ConfigMap as the cache keeps it: identity, policy name and a
/// fingerprint of its content, never its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// The policy's name: the value of the `policyhost.dev/policy` label.
    pub policy: String,
    /// [`configmap::fingerprint`] of its `data` and `binaryData`.
    pub fingerprint: String,
    /// Why it may not be a policy at all (a DataJob's child), if so.
    pub foreign: Option<Foreign>,
    /// The policy the host last recorded it as providing
    /// ([`configmap::PROVIDES_ANNOTATION`]).
    pub provides: Option<String>,
}

impl Record {
    /// Whether the host recorded it as the provider of the policy it names:
    /// on a start, it keeps the name against any other ConfigMap naming it.
    /// A ConfigMap that may not be a policy at all keeps nothing.
    fn is_recorded_provider(&self) -> bool {
        self.foreign.is_none() && self.provides.as_deref() == Some(self.policy.as_str())
    }
}

impl Cached for Record {
    fn key(&self) -> ObjectKey {
        self.key.clone()
    }

    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// A ConfigMap's content, from its watch event until its load.
struct Content {
    data: BTreeMap<String, String>,
    binary_data: BTreeMap<String, ByteString>,
    /// The compile refusal the host recorded on it.
    refused: Option<crate::runtime::Refusal>,
}

/// What a worker has to do for one ConfigMap.
enum Pending {
    /// Load this content.
    Present(Arc<Record>, Content),
    /// The ConfigMap is gone.
    Gone(Arc<Record>),
    /// Read the ConfigMap again (its content was dropped): it may take over
    /// a policy another ConfigMap served.
    Refetch,
}

/// What each ConfigMap provides.
#[derive(Default)]
struct State {
    /// Policy name → the ConfigMap serving it.
    owners: HashMap<String, ObjectKey>,
    /// ConfigMap → what it last reported.
    reported: HashMap<ObjectKey, Reported>,
}

struct Reported {
    policy: String,
    annotations: Annotations,
}

/// Watches policy ConfigMaps and keeps the registry in step with them.
pub struct ConfigMapSource {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    runtime: Runtime,
    grants: Grants,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    config: Config,
    store: Store<Record>,
    by_policy: Index<Record>,
    queue: Arc<WorkQueue<ObjectKey>>,
    pending: Mutex<HashMap<ObjectKey, Pending>>,
    state: Mutex<State>,
    /// Keys of the first list not yet processed; `None` before it completed.
    first: Mutex<Option<HashSet<ObjectKey>>>,
    ready: watch::Sender<bool>,
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
        let mut store = Store::builder();
        let by_policy = store.index("policy", |record: &Record| vec![record.policy.clone()]);
        let store = store
            .scopes(vec![Scope::Namespace(config.namespace.as_str().into())])
            .build();
        let queue = WorkQueue::new(Backoff {
            base: Duration::from_millis(200),
            max: Duration::from_secs(30),
        });
        let grants = Grants::new(client.clone(), config.namespace.clone());
        Self {
            inner: Arc::new(Inner {
                client,
                runtime,
                grants,
                registry,
                metrics,
                config,
                store,
                by_policy,
                queue,
                pending: Mutex::new(HashMap::new()),
                state: Mutex::new(State::default()),
                first: Mutex::new(None),
                ready: watch::channel(false).0,
            }),
        }
    }

    /// Completes once every ConfigMap of the first list has been loaded or
    /// rejected.
    pub fn ready(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut ready = self.inner.ready.subscribe();
        async move {
            let _ = ready.wait_for(|ready| *ready).await;
        }
    }

    /// True once [`ready`](Self::ready) has completed.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        *self.inner.ready.borrow()
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
        tasks.spawn(watch_grants(Arc::clone(&inner), listed));
        let policies = Arc::clone(&inner);
        tasks.spawn(async move {
            if grants_listed.await.is_ok() {
                watch_configmaps(policies).await;
            }
        });
        tasks.spawn(report_on_leadership(Arc::clone(&inner)));
        tasks.spawn(refresh_secrets(Arc::clone(&inner)));
        for _ in 0..inner.config.workers.max(1) {
            tasks.spawn(work(Arc::clone(&inner)));
        }
        shutdown.await;
        inner.queue.shut_down();
        tasks.shutdown().await;
    }
}

/// Each time this replica becomes leader, writes on each ConfigMap the
/// verdict it reached as a follower: a version pushed while no replica led
/// (say, between a leader's death and its Lease's expiry) is loaded by every
/// replica, and written by none until then.
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
                    warn!(configmap = %key, %error, "cannot annotate the policy ConfigMap");
                }
            }
        }
        if leading.changed().await.is_err() {
            return;
        }
    }
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
                warn!(%namespace, %error, "policy ConfigMap watch failed; retrying");
                continue;
            }
        };
        let relisting = matches!(event, watcher::Event::Init | watcher::Event::InitApply(_));
        let event = match event {
            watcher::Event::Apply(map) => cache::Event::Apply(split(map, &mut contents)),
            watcher::Event::Delete(map) => cache::Event::Delete(record(&map, String::new())),
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

/// Feeds the grant ConfigMaps into [`Grants`] and re-loads the policies
/// whose grant changed; says so on `listed` after the first list.
async fn watch_grants(inner: Arc<Inner>, listed: tokio::sync::oneshot::Sender<()>) {
    let namespace = inner.config.namespace.clone();
    let api: Api<ConfigMap> = Api::namespaced(inner.client.clone(), &namespace);
    let events =
        watcher::watcher(api, watcher::Config::default().labels(GRANT_LABEL)).default_backoff();
    futures::pin_mut!(events);
    let mut listed = Some(listed);
    // The names seen during a re-list: the others are gone.
    let mut seen: Option<HashSet<String>> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                warn!(%namespace, %error, "grant ConfigMap watch failed; retrying");
                continue;
            }
        };
        let name = |map: &ConfigMap| map.metadata.name.clone().unwrap_or_default();
        let changed = match event {
            watcher::Event::Apply(map) => inner.grant_applied(&map).await,
            watcher::Event::Delete(map) => inner.grants.apply(&name(&map), None).changed,
            watcher::Event::Init => {
                seen = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(map) => {
                seen.get_or_insert_default().insert(name(&map));
                inner.grant_applied(&map).await
            }
            watcher::Event::InitDone => {
                let seen = seen.take().unwrap_or_default();
                let gone = inner
                    .grants
                    .names()
                    .into_iter()
                    .filter(|n| !seen.contains(n));
                let changed = gone
                    .flat_map(|n| inner.grants.apply(&n, None).changed)
                    .collect();
                if let Some(listed) = listed.take() {
                    let _ = listed.send(());
                }
                changed
            }
        };
        for policy in changed {
            inner.reload(&policy);
        }
    }
}

/// Reads the Secrets that grants name every `secret_refresh`, and loads
/// again each policy whose credentials changed (or can no longer be read:
/// the new load is then refused, naming the Secret, and the version in
/// service keeps its credentials). A poll, not a watch: the operator's Role
/// may `get` those Secrets by name, and nothing more.
async fn refresh_secrets(inner: Arc<Inner>) {
    let mut ticks = tokio::time::interval(inner.config.secret_refresh);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        for policy in inner.grants.rotated().await {
            info!(%policy, "a Secret its grant names changed");
            inner.reload(&policy);
        }
    }
}

/// Splits a ConfigMap into its record and its content.
fn split(map: ConfigMap, contents: &mut HashMap<ObjectKey, Content>) -> Record {
    let data = map.data.clone().unwrap_or_default();
    let binary_data = map.binary_data.clone().unwrap_or_default();
    let record = record(&map, configmap::fingerprint(&data, &binary_data));
    let refused = refusal::read(map.metadata.annotations.as_ref());
    contents.insert(
        record.key.clone(),
        Content {
            data,
            binary_data,
            refused,
        },
    );
    record
}

fn record(map: &ConfigMap, fingerprint: String) -> Record {
    let meta = &map.metadata;
    Record {
        key: ObjectKey::namespaced(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        ),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        policy: meta
            .labels
            .as_ref()
            .and_then(|labels| labels.get(POLICY_LABEL))
            .cloned()
            .unwrap_or_default(),
        fingerprint,
        foreign: Foreign::of(meta),
        provides: meta
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(configmap::PROVIDES_ANNOTATION))
            .cloned(),
    }
}

/// Takes keys from the queue until it shuts down.
async fn work(inner: Arc<Inner>) {
    while let Some(lease) = inner.queue.next().await {
        let key = lease.key().clone();
        let pending = inner.pending().remove(&key);
        let retry = match pending {
            None => false,
            Some(Pending::Present(record, content)) => {
                inner.present(&record, content).await;
                false
            }
            Some(Pending::Gone(record)) => {
                inner.gone(&record);
                false
            }
            Some(Pending::Refetch) => inner.refetch(&key).await.is_err(),
        };
        if retry {
            inner
                .pending()
                .entry(key.clone())
                .or_insert(Pending::Refetch);
            inner.queue.add_rate_limited(key.clone());
        } else {
            inner.queue.forget(&key);
        }
        drop(lease);
        if !retry {
            inner.processed(&key);
        }
    }
}

/// Why a version was not put in service.
struct Rejection {
    reason: &'static str,
    message: String,
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
                let same = old.is_some_and(|old| {
                    old.fingerprint == new.fingerprint
                        && old.policy == new.policy
                        && old.uid == new.uid
                        && old.foreign == new.foreign
                });
                if same {
                    return;
                }
                let key = new.key.clone();
                let pending = match contents.remove(&key) {
                    Some(content) => Pending::Present(new, content),
                    None => Pending::Refetch,
                };
                self.pending().insert(key.clone(), pending);
                self.queue.add(key);
            }
            Change::Deleted(old) => {
                let key = old.key.clone();
                self.pending().insert(key.clone(), Pending::Gone(old));
                self.queue.add(key);
            }
        }
    }

    /// Loads one version and swaps it in, or records its rejection.
    async fn present(&self, record: &Record, content: Content) {
        if let Some(foreign) = &record.foreign {
            self.ignored(record, foreign).await;
            return;
        }
        let policy = record.policy.as_str();
        let previous = self
            .state()
            .reported
            .get(&record.key)
            .map(|r| r.policy.clone());
        if let Some(previous) = previous.filter(|p| p != policy) {
            // The label now names another policy: this ConfigMap no longer
            // provides the old one.
            self.release(&record.key, &previous);
        }
        if policy.is_empty() {
            let rejection = Rejection {
                reason: "InvalidName",
                message: format!("the `{POLICY_LABEL}` label is empty: it names the policy"),
            };
            self.rejected(record, rejection, false).await;
            return;
        }
        if let Err(error) = self
            .config
            .load
            .tenancy
            .check_provider(record.key.name(), policy)
        {
            let rejection = Rejection {
                reason: error.reason(),
                message: error.to_string(),
            };
            self.rejected(record, rejection, false).await;
            return;
        }
        if let Err(owner) = self.claim(record) {
            let rejection = Rejection {
                reason: "Conflict",
                message: format!(
                    "policy `{policy}` is already provided by ConfigMap {owner}; delete one of them"
                ),
            };
            self.rejected(record, rejection, false).await;
            return;
        }
        let outbound = match self.grants.resolve(policy).await {
            Ok(outbound) => outbound,
            Err(refused) => {
                let rejection = Rejection {
                    reason: refused.reason(),
                    message: display_chain(&refused),
                };
                self.rejected(record, rejection, true).await;
                return;
            }
        };
        let given = load::Given {
            remembered: content.refused,
            outbound,
        };
        let result = load::load(
            &self.runtime,
            &self.config.load,
            policy,
            content.data,
            content.binary_data,
            given,
        )
        .await;
        match result {
            Ok(loaded) => self.serve(record, loaded).await,
            Err(error) => {
                if let Some(refusal) = refusal::to_record(&error) {
                    self.record_refusal(record, refusal).await;
                }
                if let Some(after) = error.retry_after() {
                    // Not compiled for want of compile time: loaded again
                    // once the policy has it, unless newer content comes.
                    self.pending()
                        .entry(record.key.clone())
                        .or_insert(Pending::Refetch);
                    self.queue.add_after(record.key.clone(), after);
                }
                let rejection = Rejection {
                    reason: error.reason(),
                    message: display_chain(&error),
                };
                self.rejected(record, rejection, true).await;
            }
        }
    }

    /// Puts a loaded version in service and reports it.
    async fn serve(&self, record: &Record, loaded: load::Loaded) {
        let policy = Arc::clone(&loaded.policy);
        let digest = policy.digest().to_hex();
        let replaced = self
            .registry
            .install_for(Arc::clone(&policy), loaded.access.clone());
        let replaced_digest = replaced.map(|p| p.digest().to_hex());
        self.metrics
            .policy_swapped(&record.policy, replaced_digest.as_deref(), Some(&digest));
        self.metrics
            .policy_load_duration
            .get_or_create(&crate::metrics::PolicyLabel {
                policy: record.policy.clone(),
            })
            .observe(loaded.took.as_secs_f64());
        info!(
            policy = %record.policy,
            configmap = %record.key,
            %digest,
            replaced = ?replaced_digest,
            source = ?policy.source(),
            took_ms = loaded.took.as_millis(),
            "policy version in service"
        );
        let annotations = Annotations {
            observed: record.fingerprint.clone(),
            loaded_digest: Some(digest),
            loaded_at: Some(format!("{:.0}", Timestamp::now())),
            error: None,
            clamped: report::clamped_text(policy.clamped()),
            provides: Some(record.policy.clone()),
        };
        let note = report::loaded_note(&policy, loaded.compressed, loaded.took.as_millis());
        self.report(record, annotations, false, "PolicyLoaded", &note)
            .await;
    }

    /// Records a rejected version (in the registry when this ConfigMap
    /// provides the policy) and reports it.
    async fn rejected(&self, record: &Record, rejection: Rejection, owner: bool) {
        let Rejection { reason, message } = rejection;
        if owner {
            self.registry
                .reject(&record.policy, reason, message.clone());
        }
        self.metrics.policy_rejected(&record.policy, reason);
        let serving = if owner {
            self.registry
                .get(&record.policy)
                .ok()
                .map(|p| p.digest().to_hex())
        } else {
            None
        };
        warn!(
            policy = %record.policy,
            configmap = %record.key,
            reason,
            error = %message,
            serving = ?serving,
            "policy version rejected"
        );
        // What this ConfigMap has in service stays in its annotations.
        let previous = self
            .state()
            .reported
            .get(&record.key)
            .filter(|r| r.policy == record.policy && owner)
            .map(|r| r.annotations.clone())
            .unwrap_or_default();
        // The provider of the policy stays recorded as such, so that a
        // restart gives it the name again; any other holds no claim.
        let annotations = Annotations {
            observed: record.fingerprint.clone(),
            error: Some(format!("{reason}: {message}")),
            provides: owner.then(|| record.policy.clone()),
            ..previous
        };
        let note = report::rejected_note(reason, &message, serving.as_deref());
        self.report(record, annotations, true, "PolicyRejected", &note)
            .await;
    }

    /// Leaves a ConfigMap that may not be a policy alone: no load, no claim
    /// on the policy (the version in service keeps serving), no annotation
    /// (it is not the host's to write); a warning, the load-error metric and
    /// an Event say why.
    async fn ignored(&self, record: &Record, foreign: &Foreign) {
        let reason = foreign.reason();
        self.metrics.policy_rejected(&record.policy, reason);
        warn!(
            policy = %record.policy,
            configmap = %record.key,
            reason,
            why = %foreign,
            "ConfigMap ignored: not a policy source"
        );
        if !self.config.leadership.permits_writes() {
            return;
        }
        let note = format!("not loaded as policy `{}`: {foreign}", record.policy);
        report::event(
            &self.client,
            &self.config.instance,
            reference(record),
            true,
            "PolicyIgnored",
            &note,
        )
        .await;
    }

    /// Keeps a compile refusal on the ConfigMap (the leader writes it), so
    /// that the next start refuses the same bytes without compiling them.
    async fn record_refusal(&self, record: &Record, refusal: &crate::runtime::Refusal) {
        if !self.config.leadership.permits_writes() {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(
            self.client.clone(),
            record.key.namespace().unwrap_or_default(),
        );
        if let Err(error) = refusal::write(&api, record.key.name(), refusal).await {
            warn!(configmap = %record.key, %error, "cannot record the compile refusal");
        }
    }

    /// Writes the annotations and the Event on the ConfigMap.
    async fn report(
        &self,
        record: &Record,
        annotations: Annotations,
        warning: bool,
        reason: &str,
        note: &str,
    ) {
        let leading = self.config.leadership.permits_writes();
        if leading {
            let api: Api<ConfigMap> = Api::namespaced(
                self.client.clone(),
                record.key.namespace().unwrap_or_default(),
            );
            if let Err(error) = annotations.write(&api, record.key.name()).await {
                warn!(configmap = %record.key, %error, "cannot annotate the policy ConfigMap");
            }
        }
        self.state().reported.insert(
            record.key.clone(),
            Reported {
                policy: record.policy.clone(),
                annotations,
            },
        );
        if !leading {
            debug!(configmap = %record.key, reason, "not leading: the leader reports the load");
            return;
        }
        report::event(
            &self.client,
            &self.config.instance,
            reference(record),
            warning,
            reason,
            note,
        )
        .await;
    }

    /// The ConfigMap is gone: if it provided its policy, the policy is out
    /// of service (DataJobs keep their children and report
    /// `PolicyUnavailable`), and another ConfigMap naming it may take over.
    fn gone(&self, record: &Record) {
        let reported = self.state().reported.remove(&record.key);
        let policy = reported.map_or_else(|| record.policy.clone(), |r| r.policy);
        self.release(&record.key, &policy);
    }

    /// `key` no longer provides `policy`.
    fn release(&self, key: &ObjectKey, policy: &str) {
        {
            let mut state = self.state();
            if state.owners.get(policy) != Some(key) {
                return;
            }
            state.owners.remove(policy);
        }
        let removed = self.registry.remove(policy);
        self.metrics.policy_swapped(
            policy,
            removed.as_ref().map(|p| p.digest().to_hex()).as_deref(),
            None,
        );
        info!(%policy, configmap = %key, "policy out of service: its ConfigMap is gone");
        for other in self.store.lookup_keys(self.by_policy, policy) {
            if &other != key {
                debug!(%policy, configmap = %other, "another ConfigMap may take over the policy");
                self.pending()
                    .entry(other.clone())
                    .or_insert(Pending::Refetch);
                self.queue.add(other);
            }
        }
    }

    /// Loads the current version of `policy` again: its grant changed.
    fn reload(&self, policy: &str) {
        for key in self.store.lookup_keys(self.by_policy, policy) {
            info!(%policy, configmap = %key, "the policy's grant changed: loading it again");
            self.pending().insert(key.clone(), Pending::Refetch);
            self.queue.add(key);
        }
    }

    /// Makes the ConfigMap the provider of its policy, unless another one
    /// that still exists provides it, or (none providing it yet: a start, a
    /// provider gone) another one is recorded as its provider and this one
    /// is not: the record survives a restart, the list order does not.
    fn claim(&self, record: &Record) -> Result<(), ObjectKey> {
        let (key, policy) = (&record.key, record.policy.as_str());
        let mut state = self.state();
        if let Some(owner) = state.owners.get(policy)
            && owner != key
            && self.store.get(owner).is_some()
        {
            return Err(owner.clone());
        }
        if record.provides.as_deref() != Some(policy) {
            let recorded = self
                .store
                .lookup(self.by_policy, policy)
                .into_iter()
                .find(|other| other.key != *key && other.is_recorded_provider());
            if let Some(recorded) = recorded {
                return Err(recorded.key.clone());
            }
        }
        state.owners.insert(policy.to_owned(), key.clone());
        Ok(())
    }

    /// Takes in a grant ConfigMap; one whose name may not grant the policy
    /// it names is reported (a warning, the load-error metric, and a
    /// `GrantIgnored` Event from the leader) and grants nothing. Returns
    /// the policies whose grant changed.
    async fn grant_applied(&self, map: &ConfigMap) -> Vec<String> {
        let name = map.metadata.name.clone().unwrap_or_default();
        let applied = self.grants.apply(&name, Some(map));
        if let Some(misnamed) = &applied.ignored {
            let reason = misnamed.reason();
            self.metrics.policy_rejected(&misnamed.policy, reason);
            warn!(
                policy = %misnamed.policy,
                configmap = %name,
                reason,
                why = %misnamed,
                "grant ConfigMap ignored"
            );
            if self.config.leadership.permits_writes() {
                let meta = &map.metadata;
                let regarding = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("ConfigMap".into()),
                    name: meta.name.clone(),
                    namespace: meta.namespace.clone(),
                    uid: meta.uid.clone(),
                    ..ObjectReference::default()
                };
                let note = misnamed.to_string();
                report::event(
                    &self.client,
                    &self.config.instance,
                    regarding,
                    true,
                    reason,
                    &note,
                )
                .await;
            }
        }
        applied.changed
    }

    /// Reads a ConfigMap again and loads it.
    async fn refetch(&self, key: &ObjectKey) -> kube::Result<()> {
        let api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), key.namespace().unwrap_or_default());
        let Some(map) = api.get_opt(key.name()).await? else {
            return Ok(());
        };
        let mut contents = HashMap::new();
        let record = split(map, &mut contents);
        if record.policy.is_empty() {
            return Ok(());
        }
        if let Some(content) = contents.remove(key) {
            self.present(&record, content).await;
        }
        Ok(())
    }

    /// Once the first list is complete, remembers which ConfigMaps it held.
    fn first_list_done(&self) {
        if !self.store.is_ready() {
            return;
        }
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        if first.is_none() {
            let keys: HashSet<ObjectKey> = self.store.all().iter().map(|r| r.key()).collect();
            info!(
                configmaps = keys.len(),
                namespace = %self.config.namespace,
                "policy ConfigMaps listed"
            );
            let empty = keys.is_empty();
            *first = Some(keys);
            if empty {
                self.ready.send_replace(true);
            }
        }
    }

    /// Counts a ConfigMap of the first list as done.
    fn processed(&self, key: &ObjectKey) {
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = first.as_mut()
            && keys.remove(key)
            && keys.is_empty()
        {
            self.ready.send_replace(true);
        }
    }
}

/// The Event reference to a policy ConfigMap.
fn reference(record: &Record) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(record.key.name().to_owned()),
        namespace: record.key.namespace().map(str::to_owned),
        uid: Some(record.uid.clone()),
        ..ObjectReference::default()
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    use super::*;

    fn map(policy: &str, provides: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("policy-aaa".into()),
                namespace: Some("policyhost-system".into()),
                labels: Some([(POLICY_LABEL.to_owned(), policy.to_owned())].into()),
                annotations: provides
                    .map(|p| [(configmap::PROVIDES_ANNOTATION.to_owned(), p.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn only_a_configmap_recorded_as_providing_the_policy_it_names_keeps_it_on_a_start() {
        let recorded = |map: &ConfigMap| record(map, String::new()).is_recorded_provider();
        assert!(recorded(&map("etl", Some("etl"))));
        assert!(!recorded(&map("etl", None)), "never recorded");
        assert!(
            !recorded(&map("etl", Some("reports"))),
            "recorded for the policy it named before a relabel"
        );
        let mut owned = map("etl", Some("etl"));
        owned.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        }]);
        assert!(!recorded(&owned), "a DataJob's child keeps nothing");
    }
}
