//! The whole operator assembled: client (with the write throttle), runtime,
//! policies, controller and HTTP endpoints. `policyhost run` and
//! `policyhost dev` are thin shells around [`Operator`].

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::client::ClientBuilder;
use kube::client::retry::RetryPolicy;
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, discovery};
use tokio::net::TcpListener;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tracing::{error, info, warn};

use crate::asks::Asks;
use crate::cache::Scope;
use crate::controller::{self, Controller, Shared};
use crate::finalizer::Budget;
use crate::leader::{self, Elector, FenceLayer, Leadership};
use crate::metrics::{Metrics, RequestsLayer};
use crate::policies::{self, ConfigMapSource, Registry, Role};
use crate::queue::Backoff;
use crate::runtime::{self, AllowedKind, Runtime, RuntimeConfig};
use crate::server::{self, Readiness};
use crate::shadow;
use crate::shard::{Membership, Replicas, Serving};
use crate::throttle::WriteThrottleLayer;
use crate::traces;
use crate::watch;

/// How long the controller waits for the first load of the policy
/// ConfigMaps before it reconciles anyway (an unreadable namespace must not
/// stop every other policy).
const POLICY_SYNC_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether watch streams start with a streaming list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamingLists {
    /// Ask the API server once at start-up.
    #[default]
    Auto,
    /// Always (the server must support `sendInitialEvents`).
    Always,
    /// Never: paginated lists.
    Never,
}

/// How to run the operator.
#[derive(Debug, Clone)]
pub struct Options {
    /// Namespaces to watch; empty for the whole cluster.
    pub namespaces: Vec<String>,
    /// The instance name: the `policyhost.dev/managed-by` label of its children.
    pub instance: String,
    /// Concurrent reconciles.
    pub workers: usize,
    /// A directory of `<name>.wasm` policies to load at start-up.
    pub policy_dir: Option<PathBuf>,
    /// Watch policy ConfigMaps (label `policyhost.dev/policy`) in this
    /// namespace and hot-swap them in; `None` watches none.
    pub policy_namespace: Option<String>,
    /// Largest policy component a ConfigMap may carry, after decompression.
    pub max_policy_bytes: u64,
    /// How far the host trusts policy publishers ([`policies::tenancy`]).
    /// Strict (the default, for a host shared by teams): every policy
    /// ConfigMap must say whose DataJobs may use it
    /// (`data.allowedNamespaces`), and only `policy-<name>` may provide the
    /// policy `<name>`, so that RBAC on ConfigMap names is RBAC on policies.
    pub policy_tenancy: policies::tenancy::Tenancy,
    /// Which policies each team holds (`--team`): publication (loads,
    /// pulls, compiles) is fair between teams, and each team has one
    /// compile budget.
    pub teams: crate::fair::Teams,
    /// How often the Secrets that outbound grants name are read again: a
    /// rotated credential loads its policy again within this time.
    pub grant_secret_refresh: Duration,
    /// Versions kept per policy for `policy rollback`, as revision
    /// ConfigMaps in the policy namespace ([`policies::revisions`]); 0
    /// keeps none.
    pub policy_history: usize,
    /// Kinds of children policies may create: each is watched and cached.
    pub child_kinds: Vec<AllowedKind>,
    /// Average API writes per second (default 1,000).
    ///
    /// A DataJob costs about 8 writes to converge (its finalizer, its
    /// children, one status write, an Event), so 1,000 created at once are 8,000 writes: at
    /// 1,000/s after a burst of 2,000 they settle in about 6 s, where the
    /// former 200/s took 38 s. The limit still bounds a reconcile storm, and
    /// the workers bound the writes in flight (one each).
    pub api_qps: NonZeroU32,
    /// API writes allowed at once above the average (default 2,000).
    pub api_burst: NonZeroU32,
    /// Where to serve `/metrics`, `/healthz`, `/readyz`; `None` serves nothing.
    pub listen: Option<SocketAddr>,
    /// Streaming lists or paginated lists.
    pub streaming_lists: StreamingLists,
    /// How long a child's change waits before its DataJob is queued, so that
    /// a burst of them costs one pass (default 1 s: the Pods of a new
    /// DataJob are created, scheduled and started within it, and its status
    /// is written once, not once per Pod).
    pub child_settle: Duration,
    /// How long a burst of children's own changes (Pods started, finished)
    /// must go quiet before its DataJob is queued, within `child_settle`
    /// (default 200 ms: a DataJob's Pods start within it of each other, and
    /// its status follows them that soon, not a whole window later).
    pub child_quiet: Duration,
    /// Record each policy's recent serving calls as golden cases, for
    /// `policy test --replay` (off by default: see [`crate::shadow::record`]
    /// for who may read them).
    pub record_calls: Option<shadow::record::Config>,
    /// Decisions kept per DataJob (`status.decisions`); 0 keeps none.
    pub decision_history: usize,
    /// Retry pacing of failed reconciles.
    pub backoff: Backoff,
    /// The policy runtime.
    pub runtime: RuntimeConfig,
    /// The cleanup budget where a DataJob's `spec.cleanup` sets none.
    pub cleanup: Budget,
    /// The floors and caps on what one result may ask for.
    pub asks: Asks,
    /// Leader election; `None` leads at once, alone (one replica, `dev`).
    pub leader: Option<leader::Config>,
    /// Shards instead of one leader: each replica holds a member Lease
    /// (`<lease_name>-<identity>`) and serves its share of the DataJobs
    /// ([`crate::shard`]). Exclusive with `leader`.
    pub shards: Option<leader::Config>,
    /// How children are cached: [`watch::indexed`] (the design), or a
    /// baseline a benchmark measures it against.
    pub children: watch::ChildCaching,
    /// How policy artifacts are pulled from registries.
    pub registries: Registries,
}

/// How policy artifacts are pulled ([`crate::oci`]).
#[derive(Debug, Clone)]
pub struct Registries {
    /// Certificate authorities trusted besides the web's.
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Where pulled blobs are kept by digest; `None` keeps none.
    pub cache_dir: Option<PathBuf>,
    /// The longest one pull may take.
    pub pull_timeout: Duration,
    /// The platform team's keys: given any, every policy version must be
    /// an artifact one of them signed, or only those that may serve
    /// [`Registries::signed_namespaces`] if set.
    pub trusted: crate::oci::signature::Trusted,
    /// The namespaces whose DataJobs may use only signed versions; `None`:
    /// every namespace (when the host has keys).
    pub signed_namespaces: Option<Vec<String>>,
}

impl Default for Registries {
    fn default() -> Self {
        Self {
            extra_roots: Vec::new(),
            cache_dir: None,
            pull_timeout: Duration::from_secs(60),
            trusted: crate::oci::signature::Trusted::default(),
            signed_namespaces: None,
        }
    }
}

impl Registries {
    /// Which versions must be signed artifacts.
    #[must_use]
    pub fn signed_for(&self) -> policies::load::SignedFor {
        use policies::load::SignedFor;
        match &self.signed_namespaces {
            _ if self.trusted.is_empty() => SignedFor::Nobody,
            None => SignedFor::Everyone,
            Some(namespaces) => SignedFor::Namespaces(namespaces.clone()),
        }
    }

    /// The puller these settings describe; `None` (logged) when the client
    /// cannot take the roots, so that artifacts are refused, not pulled
    /// with less trust than configured.
    #[must_use]
    pub fn puller(&self) -> Option<crate::oci::Puller> {
        let config = crate::oci::ClientConfig {
            extra_roots: self.extra_roots.clone(),
            ..crate::oci::ClientConfig::default()
        };
        match crate::oci::Client::new(&config) {
            Ok(client) => Some(
                crate::oci::Puller::new(
                    client,
                    self.cache_dir
                        .clone()
                        .map(crate::oci::BlobCache::new)
                        .unwrap_or_default(),
                    self.pull_timeout,
                )
                .trusting(self.trusted.clone()),
            ),
            Err(error) => {
                error!(%error, "the registry client cannot start: policies naming artifacts are refused");
                None
            }
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            instance: "policyhost".into(),
            workers: 8,
            policy_dir: None,
            policy_namespace: None,
            max_policy_bytes: policies::load::Config::default().max_module_bytes,
            policy_tenancy: policies::tenancy::Tenancy::default(),
            teams: crate::fair::Teams::default(),
            grant_secret_refresh: Duration::from_secs(60),
            policy_history: policies::revisions::DEFAULT_KEEP,
            child_kinds: AllowedKind::defaults(),
            api_qps: NonZeroU32::new(1000).unwrap_or(NonZeroU32::MIN),
            api_burst: NonZeroU32::new(2000).unwrap_or(NonZeroU32::MIN),
            listen: None,
            streaming_lists: StreamingLists::Auto,
            child_settle: Duration::from_secs(1),
            child_quiet: Duration::from_millis(200),
            record_calls: None,
            decision_history: controller::DEFAULT_DECISIONS,
            backoff: Backoff::default(),
            runtime: RuntimeConfig::default(),
            cleanup: Budget::default(),
            asks: Asks::default(),
            leader: None,
            shards: None,
            children: watch::indexed,
            registries: Registries::default(),
        }
    }
}

/// The client configuration from `kubeconfig`, or else `$KUBECONFIG`,
/// `~/.kube/config` or the in-cluster configuration (as kubectl finds it).
///
/// # Errors
///
/// [`ConfigError`]: the file does not read, has no usable context, or
/// there is neither a kubeconfig nor a cluster around the process.
pub async fn client_config(
    kubeconfig: Option<&std::path::Path>,
) -> Result<kube::Config, ConfigError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(ConfigError::Context)
        }
        None => kube::Config::infer().await.map_err(ConfigError::Infer),
    }
}

/// Why no client configuration was found.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The kubeconfig file does not read.
    #[error("cannot read the kubeconfig {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig has no usable context.
    #[error("the kubeconfig has no usable context")]
    Context(#[source] kube::config::KubeconfigError),
    /// No kubeconfig, and not in a cluster.
    #[error("no kubeconfig and not running in a cluster")]
    Infer(#[source] kube::config::InferConfigError),
}

/// Why the operator could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kube client could not be built from the configuration.
    #[error("cannot build the Kubernetes client")]
    Client(#[source] kube::Error),
    /// A child kind is not served by the API server.
    #[error("the API server does not serve {api_version} {kind}")]
    Discovery {
        /// The kind's `apiVersion`.
        api_version: String,
        /// The kind.
        kind: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// A child kind is cluster-scoped: a child lives in its DataJob's
    /// namespace, so only namespaced kinds can be children.
    #[error(
        "{api_version} {kind} is cluster-scoped: a child kind must be namespaced (remove it from --child-kind)"
    )]
    ClusterScopedKind {
        /// The kind's `apiVersion`.
        api_version: String,
        /// The kind.
        kind: String,
    },
    /// The policy runtime could not start.
    #[error("cannot start the policy runtime")]
    Runtime(#[source] runtime::Error),
    /// The policy directory could not be read.
    #[error(transparent)]
    PolicyDir(#[from] policies::dir::Error),
    /// The HTTP endpoints could not bind.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP endpoints failed while serving.
    #[error("the HTTP endpoints failed")]
    Serve(#[source] std::io::Error),
    /// The leader election settings are unusable.
    #[error("invalid leader election settings")]
    Leader(#[source] leader::Error),
    /// Both a leader election and shards were asked for.
    #[error("leader election and shards exclude each other: choose one")]
    LeaderAndShards,
}

/// An operator ready to run: client built, kinds discovered, policies loaded,
/// endpoints bound.
pub struct Operator {
    controller: Controller,
    policies: Option<ConfigMapSource>,
    metrics: Arc<Metrics>,
    listener: Option<TcpListener>,
    coordinator: Option<Coordinator>,
    leadership: Leadership,
}

/// Who decides what this replica may do: a leader election, or the shards'
/// membership.
enum Coordinator {
    Leader(Box<Elector>),
    Shards(Box<Membership>),
}

impl Coordinator {
    async fn run(self, stop: impl Future<Output = ()>) {
        match self {
            Self::Leader(elector) => elector.run(stop).await,
            Self::Shards(membership) => membership.run(stop).await,
        }
    }
}

impl Operator {
    /// Prepares the operator against the cluster of `config`: its link to
    /// the API server, the policy versions it serves, the controller that
    /// acts on them, and its endpoints.
    pub async fn new(config: kube::Config, options: Options) -> Result<Self, Error> {
        let metrics = Arc::new(Metrics::default());
        let link = Link::connect(config, &options, &metrics).await?;
        let versions = Versions::load(&link, &options, &metrics).await?;
        let listener = listen(options.listen).await?;
        let Link {
            client,
            leadership,
            publishing,
            coordinator,
            lease,
            watch,
            child_kinds,
            replicas: _,
        } = link;
        let controller = Controller::new(
            client,
            versions.runtime,
            versions.registry,
            Arc::clone(&metrics),
            controller::Config {
                watch,
                workers: options.workers,
                backoff: options.backoff,
                child_kinds,
                cleanup: options.cleanup,
                asks: options.asks,
                leadership: leadership.clone(),
                publishing,
                lease,
                children: options.children,
                policy_namespace: options.policy_namespace.clone(),
                record_calls: options.record_calls.clone(),
                decision_history: options.decision_history,
            },
        );
        Ok(Self {
            controller,
            policies: versions.source,
            metrics,
            listener,
            coordinator,
            leadership,
        })
    }

    /// Where the HTTP endpoints listen, if they do.
    #[must_use]
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The controller's shared state (caches, queue, registry).
    #[must_use]
    pub fn shared(&self) -> Arc<Shared> {
        self.controller.shared()
    }

    /// The operator's metrics.
    #[must_use]
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Whether this replica leads (always, without leader election).
    #[must_use]
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Runs until `shutdown` completes, then stops gracefully.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut stop_rx = stop_rx.clone();
            async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            }
        };
        let endpoints = self.listener.map(|listener| {
            let shared = self.controller.shared();
            let ready: Readiness =
                Arc::new(move || shared.jobs.is_ready() && shared.children.is_ready());
            tokio::spawn(server::serve(
                listener,
                Arc::clone(&self.metrics),
                ready,
                self.leadership.clone(),
                stopped(),
            ))
        });
        // The elector stops (and releases the Lease) only after the
        // controller has stopped: until then the reconciles in flight may
        // still write.
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let elector = self.coordinator.map(|coordinator| {
            tokio::spawn(coordinator.run(async {
                let _ = release_rx.await;
            }))
        });
        tokio::pin!(shutdown);
        // The policy ConfigMaps listed first: the registry then expects
        // each policy they offer, and a DataJob of one still loading (or
        // pulling) waits for it quietly instead of reporting it
        // unavailable, while the others reconcile at once.
        let mut stopping = false;
        let policies = match self.policies {
            Some(source) => {
                let listed = source.listed();
                let task = tokio::spawn(source.run(stopped()));
                tokio::select! {
                    () = listed => info!("policy ConfigMaps listed"),
                    () = &mut shutdown => stopping = true,
                    () = tokio::time::sleep(POLICY_SYNC_PATIENCE) => warn!(
                        patience = ?POLICY_SYNC_PATIENCE,
                        "the policy ConfigMaps are not listed yet (can the operator list them?): reconciling anyway"
                    ),
                }
                Some(task)
            }
            None => None,
        };
        let controller = tokio::spawn(self.controller.run(stopped()));
        if !stopping {
            shutdown.await;
        }
        let _ = stop_tx.send(true);
        if let Err(error) = controller.await {
            warn!(%error, "the controller task ended abnormally");
        }
        let _ = release_tx.send(());
        if let Some(Err(error)) = match elector {
            Some(task) => Some(task.await),
            None => None,
        } {
            warn!(%error, "the leader election task ended abnormally");
        }
        if let Some(Err(error)) = match policies {
            Some(task) => Some(task.await),
            None => None,
        } {
            warn!(%error, "the policy ConfigMap task ended abnormally");
        }
        if let Some(endpoints) = endpoints {
            match endpoints.await {
                Ok(result) => result.map_err(Error::Serve)?,
                Err(error) => warn!(%error, "the endpoints task ended abnormally"),
            }
        }
        Ok(())
    }
}

/// The operator's link to the API server: who may write (the leadership
/// and its fence), the clients, the child kinds as served and how the
/// watches start.
struct Link {
    client: Client,
    /// Whether this replica may write at all (the fence).
    leadership: Leadership,
    /// Whether it writes what one replica writes for all (policy
    /// ConfigMaps' reports, candidate summaries): the leader, or the shard
    /// owning the first bucket.
    publishing: Leadership,
    coordinator: Option<Coordinator>,
    /// The Lease this replica holds, if it coordinates: the leader Lease,
    /// or its member Lease.
    lease: Option<String>,
    /// How many replicas share the limits held across calls.
    replicas: Replicas,
    watch: watch::Config,
    child_kinds: Vec<ApiResource>,
}

impl Link {
    async fn connect(
        config: kube::Config,
        options: &Options,
        metrics: &Metrics,
    ) -> Result<Self, Error> {
        let throttle = WriteThrottleLayer::new(options.api_qps, options.api_burst);
        let replicas = Replicas::default();
        let serving = if options.shards.is_some() {
            Serving::sharded()
        } else {
            Serving::everything()
        };
        // A Lease has its own client: renewals must go out although the
        // fence is closed, and must not queue behind throttled writes.
        let (leadership, publishing, coordinator, lease) = match (&options.leader, &options.shards)
        {
            (Some(_), Some(_)) => return Err(Error::LeaderAndShards),
            (Some(election), None) => {
                election.validate().map_err(Error::Leader)?;
                let leadership = Leadership::elected();
                let lease_client = plain_client(config.clone(), options)?;
                let elector = Elector::new(lease_client, election.clone(), leadership.clone())
                    .map_err(Error::Leader)?;
                (
                    leadership.clone(),
                    leadership,
                    Some(Coordinator::Leader(Box::new(elector))),
                    Some(election.lease_name.clone()),
                )
            }
            (None, Some(shards)) => {
                let (leadership, publishing) = (Leadership::elected(), Leadership::elected());
                let lease_client = plain_client(config.clone(), options)?;
                let membership = Membership::new(
                    lease_client,
                    shards.clone(),
                    &options.instance,
                    leadership.clone(),
                    serving.clone(),
                )
                .map_err(Error::Leader)?
                .publishing(publishing.clone())
                .dividing(throttle.clone(), replicas.clone());
                let lease = membership.lease_name();
                (
                    leadership,
                    publishing,
                    Some(Coordinator::Shards(Box::new(membership))),
                    Some(lease),
                )
            }
            (None, None) => (Leadership::unelected(), Leadership::unelected(), None, None),
        };
        let fence = FenceLayer::new(leadership.clone(), Some(metrics.fenced_writes.clone()));
        let requests = metrics.standard.requests_layer(&api_host(&config));
        let client = client(config, options, &requests, &fence, &throttle)?;
        let child_kinds = discover(&client, &options.child_kinds).await?;
        let scopes: Vec<Scope> = if options.namespaces.is_empty() {
            vec![Scope::Cluster]
        } else {
            options
                .namespaces
                .iter()
                .map(|ns| Scope::Namespace(ns.as_str().into()))
                .collect()
        };
        let streaming_lists = match options.streaming_lists {
            StreamingLists::Always => true,
            StreamingLists::Never => false,
            StreamingLists::Auto => watch::streaming_lists_supported(&client, &scopes[0]).await,
        };
        let server_shards = match &options.shards {
            Some(shards) => {
                match crate::shard::probe::server_filters(&client, &shards.namespace).await {
                    Ok(filters) => {
                        info!(
                            server_shards = filters,
                            "{}",
                            if filters {
                                "the API server filters DataJobs by shard"
                            } else {
                                "the API server ignores shard selectors (feature gate ShardedListAndWatch off?): every DataJob is sent and each shard keeps its own"
                            }
                        );
                        filters
                    }
                    Err(error) => {
                        warn!(error = %crate::chain::Chain(&error), "cannot tell whether the API server filters by shard: each shard checks every DataJob itself");
                        false
                    }
                }
            }
            None => false,
        };
        info!(
            streaming_lists,
            "watch streams start with {}",
            if streaming_lists {
                "a streaming list"
            } else {
                "a paginated list"
            }
        );
        Ok(Self {
            client,
            leadership,
            publishing,
            coordinator,
            lease,
            replicas,
            watch: watch::Config {
                scopes,
                instance: options.instance.clone(),
                streaming_lists,
                child_settle: options.child_settle,
                child_quiet: options.child_quiet,
                serving,
                server_shards,
            },
            child_kinds,
        })
    }
}

/// The policy versions the operator keeps: the runtime that runs them,
/// the registry of versions by role, and the source that loads them from
/// ConfigMaps (none with `--policy-dir` alone).
struct Versions {
    runtime: Runtime,
    registry: Arc<Registry>,
    source: Option<ConfigMapSource>,
}

impl Versions {
    async fn load(link: &Link, options: &Options, metrics: &Arc<Metrics>) -> Result<Self, Error> {
        let runtime = Runtime::new(options.runtime.clone()).map_err(Error::Runtime)?;
        let registry = Registry::new();
        if let Some(dir) = &options.policy_dir {
            let loaded = policies::dir::load(&runtime, &registry, dir).await?;
            info!(installed = ?loaded.installed, rejected = ?loaded.rejected, dir = %dir.display(), "policies loaded");
            for (name, version) in registry.versions(Role::Serving) {
                metrics.policy_swapped(&name, None, Some(&version.digest()));
            }
        }
        let source = options.policy_namespace.as_ref().map(|namespace| {
            ConfigMapSource::new(
                link.client.clone(),
                runtime.clone(),
                Arc::clone(&registry),
                Arc::clone(metrics),
                policies::source::Config {
                    namespace: namespace.clone(),
                    streaming_lists: link.watch.streaming_lists,
                    load: policies::load::Config {
                        max_module_bytes: options.max_policy_bytes,
                        child_kinds: options.child_kinds.clone(),
                        tenancy: options.policy_tenancy,
                        puller: options.registries.puller(),
                        signed_for: options.registries.signed_for(),
                        teams: options.teams.clone(),
                    },
                    // One load at a time, as there is one compile slot: a
                    // second worker would only wait for the slot, and hold
                    // the turn of the team it took next.
                    workers: 1,
                    secret_refresh: options.grant_secret_refresh,
                    instance: options.instance.clone(),
                    leadership: link.publishing.clone(),
                    history: options.policy_history,
                    replicas: link.replicas.clone(),
                },
            )
        });
        Ok(Self {
            runtime,
            registry,
            source,
        })
    }
}

/// The HTTP endpoints' socket, bound now so that a busy port fails the start.
async fn listen(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, Error> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    server::bind(addr)
        .await
        .map(Some)
        .map_err(|source| Error::Listen { addr, source })
}

/// The kube client with the write throttle under it. Requests carry the
/// User-Agent `policyhost/<version> (<instance>)`, so audit logs (and
/// devcluster's request records) tell the operator's traffic apart.
///
/// The leader fence is innermost but for the request count, so every
/// request is checked right before it is sent: after a wait for a throttle
/// token, and on each retry. (kube's own retry layer sits under any added
/// layer, where it would resend a fenced write later, so it is replaced by
/// the same policy above the fence.)
fn client(
    config: kube::Config,
    options: &Options,
    requests: &RequestsLayer,
    fence: &FenceLayer,
    throttle: &WriteThrottleLayer,
) -> Result<Client, Error> {
    let mut config = with_user_agent(config, options);
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).map_err(Error::Client)?;
    Ok(builder
        .with_layer(requests)
        .with_layer(&traces::api::Attempts)
        .with_layer(fence)
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        .with_layer(throttle)
        .with_layer(&traces::api::RequestSpans)
        .build())
}

/// The API server's `host:port`, as client-go labels its requests.
fn api_host(config: &kube::Config) -> String {
    config
        .cluster_url
        .authority()
        .map_or_else(String::new, |authority| authority.as_str().to_owned())
}

/// The client of the leader Lease: same User-Agent, no fence, no throttle,
/// no retries (the elector retries at its own pace, each attempt bounded by
/// its deadline).
fn plain_client(config: kube::Config, options: &Options) -> Result<Client, Error> {
    let mut config = with_user_agent(config, options);
    config.default_retry = false;
    Client::try_from(config).map_err(Error::Client)
}

/// `config` with the User-Agent `policyhost/<version> (<instance>)`.
fn with_user_agent(mut config: kube::Config, options: &Options) -> kube::Config {
    let agent = format!(
        "policyhost/{} ({})",
        env!("CARGO_PKG_VERSION"),
        options.instance
    );
    if let Ok(agent) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    config
}

/// Finds the API resource (plural) of every child kind, and refuses a
/// cluster-scoped one: the scope is what discovery reports, not a list the
/// host keeps.
async fn discover(client: &Client, kinds: &[AllowedKind]) -> Result<Vec<ApiResource>, Error> {
    let mut resources = Vec::with_capacity(kinds.len());
    for kind in kinds {
        let (group, version) = match kind.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", kind.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
        let (resource, capabilities) =
            discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| Error::Discovery {
                    api_version: kind.api_version.clone(),
                    kind: kind.kind.clone(),
                    source,
                })?;
        if capabilities.scope != discovery::Scope::Namespaced {
            return Err(Error::ClusterScopedKind {
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
            });
        }
        resources.push(resource);
    }
    Ok(resources)
}
