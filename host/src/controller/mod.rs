//! The DataJob controller: watch streams feed the caches and the queue;
//! workers take keys from the queue and reconcile them through their policy.
//!
//! # Expected flow
//!
//! 1. [`Controller::new`] registers the caches (DataJobs indexed by policy
//!    name, one child cache per kind indexed by owner UID).
//! 2. [`Controller::run`] starts one watch stream per kind and namespace, waits
//!    until every cache has completed its first list, then starts
//!    `workers` workers.
//! 3. A worker takes a key (never one another worker holds; between
//!    policies, fairly by share: see [`crate::fair`]), reconciles it
//!    ([`reconcile::reconcile`]), and tells the queue what next: nothing until
//!    a change, a requeue after the policy's delay, or a retry with
//!    exponential backoff. The finalizer comes first (`finalizer::step`):
//!    it is added before any child is applied, and a deleted DataJob is
//!    cleaned up and released instead of reconciled.
//! 4. A policy swap in the [`Registry`] queues every DataJob that uses it.
//! 5. With leader election, only the leader reconciles: a follower's workers
//!    take the keys its watches queue and drop them (its caches stay warm),
//!    and a replica that becomes leader queues every cached DataJob.
//!
//! # Guarantees
//! - No LIST on the reconcile path: DataJobs come from the cache by key and
//!   children from the owner index.
//! - One DataJob is never reconciled by two workers at once.
//! - A follower reconciles nothing; its writes are fenced in the client
//!   ([`crate::leader::FenceLayer`]).

mod access;
pub mod decisions;
pub mod finalizer;
pub mod reconcile;
mod settle;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::ApiResource;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;
use tracing::{Instrument, debug, field, info, info_span};

use crate::apply::{Events, status};
use crate::asks::Asks;
use crate::cache::{self, Cached, Foreign, Index, ObjectKey, Store};
use crate::crd::DataJob;
use crate::fair::{self, Tenant};
use crate::finalizer::{Budget, machine::Pacing};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::policies::{Registry, Role};
use crate::queue::{Backoff, Cause, Lease, WorkQueue};
use crate::runtime::Runtime;
use crate::shadow::{self, Shadow};
use crate::shard::Serving;
use crate::traces;
use crate::watch::{self, WatchedChildren};

pub use decisions::{DEFAULT_DECISIONS, Decisions};
pub use reconcile::Next;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// What to watch and the instance name.
    pub watch: watch::Config,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Retry pacing of failed reconciles.
    pub backoff: Backoff,
    /// The kinds of children policies may create; each gets a watch and a cache.
    pub child_kinds: Vec<ApiResource>,
    /// The cleanup budget where a DataJob's `spec.cleanup` sets none.
    pub cleanup: Budget,
    /// The floors and caps on what one result may ask for.
    pub asks: Asks,
    /// Whether this replica leads (always, without leader election).
    pub leadership: Leadership,
    /// Whether it writes what one replica writes for all (candidate
    /// summaries): the leader, or one shard.
    pub publishing: Leadership,
    /// The Lease `leadership` follows, if any: the leader Lease, or this
    /// shard's member Lease (the `name` of `leader_election_master_status`).
    pub lease: Option<String>,
    /// How children are cached: [`watch::indexed`], or a baseline a
    /// benchmark measures it against.
    pub children: watch::ChildCaching,
    /// The namespace policy ConfigMaps are loaded from: its DataJobs are
    /// refused (`PolicyNamespace`), since their children could be policies.
    pub policy_namespace: Option<String>,
    /// Where serving calls are recorded (`--record-calls`), if they are.
    pub record_calls: Option<shadow::record::Config>,
    /// Decisions kept per DataJob (`status.decisions`); 0 keeps none.
    pub decision_history: usize,
}

/// What the workers share.
pub struct Shared {
    /// The API client (writes are throttled by its layer).
    pub client: Client,
    /// The policy runtime.
    pub runtime: Runtime,
    /// The policy versions, by role.
    pub registry: Arc<Registry>,
    /// Calls each candidate beside its serving version.
    pub shadow: Arc<Shadow>,
    /// DataJobs, slim.
    pub jobs: Store<DataJob>,
    /// DataJobs by `spec.policy`.
    pub jobs_by_policy: Index<DataJob>,
    /// Children, by kind, indexed by owner.
    pub children: Arc<dyn WatchedChildren>,
    /// Reports objects that name a DataJob of another namespace.
    pub foreign: Foreign,
    /// DataJob keys to reconcile.
    pub queue: Arc<WorkQueue<ObjectKey>>,
    /// Event recorder.
    pub events: Events,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The operator instance (the `managed-by` label value).
    pub instance: String,
    /// The finalizer state machine's settings and memory.
    pub finalizers: finalizer::Finalizers,
    /// Whether this replica leads and may reconcile (sharded: whether its
    /// membership is current).
    pub leadership: Leadership,
    /// The buckets this replica serves: all of them, or a shard's share.
    pub serving: Serving,
    /// What the last status writes left, so a lagging cache cannot hide one.
    pub status_writes: status::Writes,
    /// Each DataJob's last decisions, written with its status.
    pub decisions: Decisions,
    /// DataJobs whose last pass changed children and left the status to
    /// the next one.
    pub settling: settle::Settling,
    /// The floors and caps on what one result may ask for.
    pub asks: Asks,
    /// The namespace of the policy ConfigMaps, whose DataJobs are refused.
    pub policy_namespace: Option<String>,
}

/// The DataJob controller.
pub struct Controller {
    shared: Arc<Shared>,
    config: Config,
}

impl Controller {
    /// Registers the caches and indexes; nothing runs until [`run`](Self::run).
    /// DataJobs are reconciled with the serving versions of `registry`,
    /// and its candidates called beside them.
    #[must_use]
    pub fn new(
        client: Client,
        runtime: Runtime,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        config: Config,
    ) -> Self {
        let scopes = config.watch.scopes.clone();
        let mut jobs = Store::builder();
        let jobs_by_policy = jobs.index("policy", |job: &DataJob| vec![job.spec.policy.clone()]);
        let pending = jobs.index("pending-finalizer", finalizer::pending_index);
        let jobs_by_uid = jobs.index("uid", Foreign::uid_index);
        let jobs = jobs.scopes(scopes.clone()).build();
        let foreign = Foreign::new(jobs.clone(), jobs_by_uid, metrics.foreign_children.clone());
        let children = (config.children)(&config.child_kinds, &scopes);
        let instance = config.watch.instance.clone();
        let queue = WorkQueue::with_tenants(config.backoff, {
            let (jobs, registry) = (jobs.clone(), Arc::clone(&registry));
            move |key: &ObjectKey| tenant_of(&jobs, &registry, key)
        });
        metrics.standard.attach_queue(config.workers.max(1), {
            let queue = Arc::clone(&queue);
            move || queue.stats()
        });
        let shadow = Shadow::new(
            Arc::clone(&registry),
            runtime.clone(),
            Arc::clone(&metrics),
            Some(shadow::Server {
                client: client.clone(),
                children: Arc::clone(&children) as Arc<dyn cache::Children>,
                instance: instance.clone(),
            }),
            config.record_calls.clone(),
        );
        let shared = Arc::new(Shared {
            events: Events::new(
                client.clone(),
                &instance,
                config.asks.events,
                Arc::clone(&metrics),
            ),
            client,
            runtime,
            registry,
            shadow,
            jobs,
            jobs_by_policy,
            children,
            foreign,
            queue,
            metrics,
            instance,
            finalizers: finalizer::Finalizers::new(
                config.cleanup,
                Pacing {
                    backoff: config.backoff,
                    min_retry: config.asks.min_cleanup_retry,
                },
                pending,
            ),
            leadership: config.leadership.clone(),
            serving: config.watch.serving.clone(),
            status_writes: status::Writes::default(),
            decisions: Decisions::new(config.decision_history),
            settling: settle::Settling::default(),
            asks: config.asks,
            policy_namespace: config.policy_namespace.clone(),
        });
        Self { shared, config }
    }

    /// What the workers share (caches, queue, registry), e.g. for readiness
    /// checks and tests.
    #[must_use]
    pub fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Runs until `shutdown` completes; then stops taking work, lets the
    /// reconciles in flight finish, and stops the watches.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let shared = self.shared;
        let mut background = JoinSet::new();
        background.spawn(watch::data_jobs(
            shared.client.clone(),
            self.config.watch.clone(),
            shared.jobs.clone(),
            Arc::clone(&shared.queue),
        ));
        for watch in shared.children.watches(
            shared.client.clone(),
            self.config.watch.clone(),
            Arc::clone(&shared.queue),
            shared.foreign.clone(),
        ) {
            background.spawn(watch);
        }
        background.spawn(requeue_on_policy_change(Arc::clone(&shared)));
        let reporter = shadow::report::Reporter {
            client: shared.client.clone(),
            instance: shared.instance.clone(),
            leadership: self.config.publishing.clone(),
        };
        background.spawn(reporter.run(Arc::clone(&shared.shadow)));
        background.spawn(report_queue(Arc::clone(&shared)));
        background.spawn(finalizer::report_pending(Arc::clone(&shared)));
        background.spawn(resync_on_leadership(
            Arc::clone(&shared),
            self.config.lease.clone(),
        ));
        background.spawn(resync_on_grant(Arc::clone(&shared)));

        let work = async {
            shared.jobs.wait_until_ready().await;
            shared.children.wait_until_ready().await;
            info!(
                datajobs = shared.jobs.len(),
                workers = self.config.workers,
                "caches synced; reconciling"
            );
            let mut workers = JoinSet::new();
            for id in 0..self.config.workers.max(1) {
                workers.spawn(worker(Arc::clone(&shared)).instrument(info_span!("worker", id)));
            }
            workers.join_all().await;
        };
        tokio::pin!(work);
        tokio::select! {
            () = &mut work => {}
            () = shutdown => {
                info!("shutting down: finishing reconciles in flight");
                shared.queue.shut_down();
                work.await;
            }
        }
        background.shutdown().await;
    }
}

/// Takes keys until the queue shuts down.
async fn worker(shared: Arc<Shared>) {
    let queue = Arc::clone(&shared.queue);
    while let Some(lease) = queue.next().await {
        let key = lease.key().clone();
        if !shared.leadership.permits_writes() {
            // A follower: the leader does this work. Taking over queues
            // every DataJob again, so nothing is lost by dropping the key.
            queue.forget(&key);
            continue;
        }
        // A shard calls only for the buckets it serves, and holds the
        // bucket until the pass ends; a key of a bucket it let go (queued,
        // delayed or retried before the move) is dropped: the new owner
        // queues every DataJob it lists. A key no longer cached is gone,
        // and its pass only forgets it.
        let job = shared.jobs.get(&key);
        let in_flight = match &job {
            Some(job) => match shared
                .serving
                .begin(job.metadata.uid.as_deref().unwrap_or_default())
            {
                Some(in_flight) => Some(in_flight),
                None => {
                    queue.forget(&key);
                    continue;
                }
            },
            None => None,
        };
        let attempt = queue.failures(&key).saturating_add(1);
        let started = Instant::now();
        let span = pass_span(&shared, &key, job.as_deref(), attempt, &lease);
        let next = fair::writing_for(
            lease.tenant().clone(),
            reconcile::reconcile(&shared, &key, attempt),
        )
        .instrument(span.clone())
        .await;
        span.record("next", next.name());
        let took = started.elapsed();
        let outcome = next.outcome();
        match next {
            Next::AwaitChange | Next::AwaitFix => queue.forget(&key),
            Next::RequeueAfter(delay) => {
                queue.forget(&key);
                queue.add_after(key.clone(), delay);
            }
            Next::Retry => {
                let delay = queue.add_rate_limited(key.clone());
                debug!(job = %key, ?delay, "reconcile will be retried");
            }
        }
        shared.metrics.standard.reconciled(outcome, took);
        shared
            .metrics
            .reconcile_latency
            .observe(lease.queued_at().elapsed().as_secs_f64());
        drop(in_flight);
        let waited = started.saturating_duration_since(lease.queued_at().into_std());
        drop(lease);
        let worked = started.elapsed();
        shared.metrics.work_duration.observe(worked.as_secs_f64());
        shared.metrics.standard.dequeued(waited, worked);
    }
}

/// The span of one pass over `key`: the log's context of the pass, and the
/// root of its trace, named for what the pass is about to be (a `cleanup`
/// of a deleted DataJob, a `reconcile`, or a `forget` of one no longer
/// there) with the version its policy
/// serves now, and with the wait before it (the delay that queued it, if
/// one did, then the queue) recorded as its first children.
fn pass_span(
    shared: &Shared,
    key: &ObjectKey,
    job: Option<&DataJob>,
    attempt: u32,
    lease: &Lease<ObjectKey>,
) -> tracing::Span {
    let cause = lease.cause();
    let policy = job.map(|job| job.spec.policy.as_str());
    // Shown, not copied: the span formats it once, the log only when it writes.
    let digest = policy
        .and_then(|policy| shared.registry.get(policy).ok())
        .map(|policy| field::display(policy.digest()));
    let span = info_span!(
        target: traces::TARGET,
        parent: None,
        "reconcile",
        "otel.name" = match job {
            None => "forget",
            Some(job) if job.metadata.deletion_timestamp.is_some() => "cleanup",
            Some(_) => "reconcile",
        },
        job = %key,
        attempt,
        cause = cause.as_str(),
        policy,
        digest,
        next = field::Empty,
    );
    let queued = lease.queued_at();
    if let Some(since) = lease.delayed_since() {
        let name = match cause {
            Cause::ChildChanged => "settle window",
            Cause::Retried => "backoff",
            _ => "delay",
        };
        traces::context::interval(&span, name, since, queued, Vec::new());
    }
    traces::context::interval(
        &span,
        "queue wait",
        queued,
        tokio::time::Instant::now(),
        Vec::new(),
    );
    span
}

/// Whose work a DataJob is: its policy's, if that policy is in service
/// (with the policy's share); otherwise the host's, so that DataJobs naming
/// policies that do not exist share one line instead of opening one each.
fn tenant_of(jobs: &Store<DataJob>, registry: &Registry, key: &ObjectKey) -> Tenant {
    jobs.get(key)
        .and_then(|job| registry.get(&job.spec.policy).ok())
        .map_or_else(Tenant::host, |policy| policy.tenant().clone())
}

/// Queues every DataJob of a policy when its serving version changes.
async fn requeue_on_policy_change(shared: Arc<Shared>) {
    let mut changes = shared.registry.subscribe();
    loop {
        match changes.recv().await {
            Ok(change) if change.role != Role::Serving => {}
            Ok(change) => {
                for key in shared
                    .jobs
                    .lookup_keys(shared.jobs_by_policy, &change.policy)
                {
                    shared.queue.add_because(key, Cause::PolicyChanged);
                }
            }
            // Too many changes to tell which: every DataJob may be concerned.
            Err(RecvError::Lagged(_)) => {
                for job in shared.jobs.all() {
                    shared.queue.add_because(job.key(), Cause::PolicyChanged);
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Queues every cached DataJob each time this replica becomes leader (what
/// the old leader had queued, delayed or was retrying is not known here),
/// and publishes the role as the `leader` gauge and as the status of
/// `lease`.
async fn resync_on_leadership(shared: Arc<Shared>, lease: Option<String>) {
    let mut leading = shared.leadership.subscribe();
    loop {
        let now_leading = *leading.borrow_and_update();
        shared.metrics.leader.set(i64::from(now_leading));
        if let Some(lease) = &lease {
            shared.metrics.standard.leading(lease, now_leading);
        }
        if now_leading {
            shared.jobs.wait_until_ready().await;
            let jobs = shared.jobs.all();
            info!(datajobs = jobs.len(), "leading: queueing every DataJob");
            for job in jobs {
                shared.queue.add_because(job.key(), Cause::Resynced);
            }
        }
        if leading.changed().await.is_err() {
            return;
        }
    }
}

/// Queues the cached DataJobs of every bucket a shard starts serving: their
/// keys, queued while the watches listed them, were dropped then.
async fn resync_on_grant(shared: Arc<Shared>) {
    let mut served = shared.serving.served_changes();
    let mut before = *served.borrow_and_update();
    while served.changed().await.is_ok() {
        let now = *served.borrow_and_update();
        let gained = now.without(before);
        before = now;
        if gained.is_empty() {
            continue;
        }
        let jobs: Vec<_> = shared
            .jobs
            .all()
            .into_iter()
            .filter(|job| gained.owns_uid(job.metadata.uid.as_deref().unwrap_or_default()))
            .collect();
        info!(
            datajobs = jobs.len(),
            buckets = gained.len(),
            "serving new buckets: queueing their DataJobs"
        );
        for job in jobs {
            shared.queue.add_because(job.key(), Cause::Resynced);
        }
    }
}

/// Publishes the queue's depth and this replica's share to the metrics
/// once a second.
async fn report_queue(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        shared.metrics.queue_depth.set(gauge(shared.queue.len()));
        let served = shared.serving.served();
        shared.metrics.shard_buckets.set(gauge(served.len()));
        let owned = shared
            .jobs
            .all()
            .iter()
            .filter(|job| served.owns_uid(job.metadata.uid.as_deref().unwrap_or_default()))
            .count();
        shared.metrics.shard_datajobs.set(gauge(owned));
        shared
            .metrics
            .shard_children
            .set(gauge(shared.children.cached()));
        shared
            .metrics
            .queue_delayed
            .set(gauge(shared.queue.delayed()));
    }
}

/// Compile-time check: the controller's future can run on a multi-threaded runtime.
#[allow(dead_code)]
fn controller_future_should_be_send(controller: Controller) {
    fn assert_send<T: Send>(_: T) {}
    assert_send(controller.run(std::future::pending()));
}
