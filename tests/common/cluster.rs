//! A cluster and an operator for end-to-end tests.
//!
//! Each test gets its own in-process devcluster (fast simulated Pods) and its
//! own operator, watching one namespace. With
//! `POLICYHOST_TEST_KUBECONFIG=<file>` the tests run against that cluster
//! instead — each in a fresh namespace, with its own operator instance — and
//! the checks that need devcluster's request counters or fault injection are
//! skipped.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use devcluster::{Config as ClusterConfig, DevCluster, PodSimulation};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use policyhost::controller::Shared;
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::metrics::Metrics;
use policyhost::operator::{Operator, Options, StreamingLists};
use policyhost::policies::tenancy::Tenancy;
use policyhost::queue::Backoff;
use policyhost::runtime::{CompileBudget, RuntimeConfig};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A devcluster whose simulated Pods schedule, start, run for 600 ms and
/// stop quickly: what the end-to-end tests run against.
pub fn fast_pods() -> ClusterConfig {
    ClusterConfig {
        pods: Some(PodSimulation {
            schedule_delay: Duration::from_millis(10),
            start_delay: Duration::from_millis(50),
            run_time: Some(Duration::from_millis(600)),
            stop_delay: Duration::from_millis(50),
        }),
        ..ClusterConfig::default()
    }
}

/// How long a condition may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `check` every 25 ms until it returns `Some`, or panics after
/// [`PATIENCE`] naming what was awaited.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Like [`eventually`], with its own patience.
pub async fn eventually_within<T, F, Fut>(what: &str, patience: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + patience;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {patience:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `POLICYHOST_TEST_KUBECONFIG`: the kubeconfig of the real cluster the
/// tests run against, if any.
pub fn real_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("POLICYHOST_TEST_KUBECONFIG").map(PathBuf::from)
}

/// The client configuration of [`real_kubeconfig`]'s current context.
pub async fn real_cluster_config() -> Option<kube::Config> {
    let path = real_kubeconfig()?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("read POLICYHOST_TEST_KUBECONFIG {}: {e}", path.display()));
    Some(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a usable kubeconfig context"),
    )
}

/// A unique suffix per environment in this test process.
fn unique() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A cluster, a namespace, the DataJob CRD, and (usually) a running operator.
pub struct Env {
    /// The in-process cluster, unless the tests run against a real one.
    pub cluster: Option<DevCluster>,
    /// A client for the test's own requests.
    pub client: Client,
    /// The test's namespace.
    pub namespace: String,
    /// The namespace of the test operator's policy ConfigMaps (watched for
    /// DataJobs too, which the operator refuses there).
    pub policy_namespace: String,
    config: kube::Config,
    operator: Option<RunningOperator>,
}

/// An operator running in this process.
pub struct RunningOperator {
    /// Its caches, queue and registry.
    pub shared: Arc<Shared>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), policyhost::operator::Error>>,
}

/// Options of a test operator: the given policies, one namespace, quick retries.
pub struct OperatorSetup {
    /// Policy crates to serve (e.g. `fanout`, `panics`).
    pub policies: Vec<String>,
    /// Retry pacing.
    pub backoff: Backoff,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Streaming lists or paginated lists.
    pub streaming_lists: StreamingLists,
    /// The operator's API write limit (writes/s, bursts of twice that), if
    /// not the default.
    pub api_qps: Option<std::num::NonZeroU32>,
    /// Also serve the policy ConfigMaps of the test's policy namespace (hot swap).
    pub policy_configmaps: bool,
    /// `--policy-tenancy` (default: strict).
    pub policy_tenancy: Tenancy,
    /// How children are cached.
    pub children: policyhost::watch::ChildCaching,
    /// The host's longest call deadline (`--max-timeout`), if not the default.
    pub max_timeout: Option<Duration>,
    /// How the operator reaches the API server, if not directly (say,
    /// through a [`FaultProxy`](super::faults::FaultProxy)).
    pub api: Option<kube::Config>,
    /// CAs the client of policies' outbound requests trusts (`--outbound-ca`).
    pub outbound_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Namespaces watched besides the test's (another team's, say).
    pub extra_namespaces: Vec<String>,
    /// Each policy's compile time (`--compile-budget`); `None`: unlimited.
    pub compile_budget: Option<CompileBudget>,
    /// Guest call threads.
    pub call_threads: usize,
    /// Where serving calls are recorded (`--record-calls`), if anywhere.
    pub record_calls: Option<policyhost::shadow::record::Config>,
    /// How policy artifacts are pulled (`--registry-ca`, `--artifact-cache`).
    pub registries: policyhost::operator::Registries,
    /// Which policies each team holds (`--team`).
    pub teams: policyhost::fair::Teams,
    /// Revisions kept per policy (`--policy-history`).
    pub policy_history: usize,
    /// Decisions kept per DataJob (`--decision-history`).
    pub decision_history: usize,
    /// The settle window of children's changes (`--child-settle`), if not
    /// the default.
    pub child_settle: Option<Duration>,
}

impl OperatorSetup {
    /// The named policies, backoff 50 ms .. 5 s, four workers.
    pub fn with(policies: &[&str]) -> Self {
        Self {
            policies: policies.iter().map(|p| (*p).to_owned()).collect(),
            backoff: Backoff {
                base: Duration::from_millis(50),
                max: Duration::from_secs(5),
            },
            workers: 4,
            streaming_lists: StreamingLists::Auto,
            api_qps: None,
            policy_configmaps: false,
            policy_tenancy: Tenancy::Strict,
            children: policyhost::watch::indexed,
            max_timeout: None,
            api: None,
            outbound_roots: Vec::new(),
            extra_namespaces: Vec::new(),
            compile_budget: None,
            call_threads: 2,
            record_calls: None,
            registries: policyhost::operator::Registries::default(),
            teams: policyhost::fair::Teams::default(),
            policy_history: policyhost::policies::revisions::DEFAULT_KEEP,
            decision_history: policyhost::controller::DEFAULT_DECISIONS,
            child_settle: None,
        }
    }

    /// An operator serving only the policy ConfigMaps of the test's policy namespace.
    pub fn configmaps() -> Self {
        Self {
            policy_configmaps: true,
            ..Self::with(&[])
        }
    }
}

impl Env {
    /// A cluster with the CRD and a fresh namespace, and an operator serving `policies`.
    pub async fn start(policies: &[&str]) -> Self {
        Self::start_with(OperatorSetup::with(policies)).await
    }

    /// Like [`start`](Self::start), with custom operator settings.
    pub async fn start_with(setup: OperatorSetup) -> Self {
        let mut env = Self::cluster_only().await;
        env.start_operator(setup).await;
        env
    }

    /// A cluster with the CRD and a fresh namespace, no operator yet.
    pub async fn cluster_only() -> Self {
        Self::cluster_with(devcluster::Features::default()).await
    }

    /// [`cluster_only`](Self::cluster_only), a devcluster with these
    /// feature gates (a real cluster has its own).
    pub async fn cluster_with(features: devcluster::Features) -> Self {
        let (cluster, config) = match real_cluster_config().await {
            Some(config) => (None, config),
            None => {
                let cluster = DevCluster::start(ClusterConfig {
                    features,
                    ..fast_pods()
                })
                .await
                .expect("start devcluster");
                let config = cluster.client_config().expect("devcluster client config");
                (Some(cluster), config)
            }
        };
        let client = Client::try_from(config.clone()).expect("client");
        install_crd(&client).await;
        let namespace = format!("e2e-{}-{}", std::process::id(), unique());
        let policy_namespace = format!("{namespace}-policies");
        for name in [&namespace, &policy_namespace] {
            create_namespace(&client, name).await;
        }
        Self {
            cluster,
            client,
            namespace,
            policy_namespace,
            config,
            operator: None,
        }
    }

    /// Starts an operator for this namespace and waits until its caches are synced.
    pub async fn start_operator(&mut self, setup: OperatorSetup) {
        let defaults = Options::default();
        let mut runtime = RuntimeConfig {
            threads: setup.call_threads,
            cache_dir: Some(super::compile_cache()),
            ..RuntimeConfig::default()
        };
        runtime.compile.budget = setup.compile_budget;
        if let Some(timeout) = setup.max_timeout {
            runtime.engine.maxima.0.timeout = timeout;
        }
        runtime
            .outbound
            .extra_roots
            .clone_from(&setup.outbound_roots);
        let options = Options {
            api_qps: setup.api_qps.unwrap_or(defaults.api_qps),
            api_burst: setup.api_qps.map_or(defaults.api_burst, |qps| {
                qps.saturating_mul(std::num::NonZeroU32::MIN.saturating_add(1))
            }),
            // A cluster-wide operator sees DataJobs in its policy namespace
            // too: watch it, so that the refusal there is tested.
            namespaces: std::iter::once(self.namespace.clone())
                .chain(
                    setup
                        .policy_configmaps
                        .then(|| self.policy_namespace.clone()),
                )
                .chain(setup.extra_namespaces.iter().cloned())
                .collect(),
            instance: self.instance(),
            workers: setup.workers,
            policy_dir: Some(policy_dir(&setup.policies)),
            backoff: setup.backoff,
            streaming_lists: setup.streaming_lists,
            policy_namespace: setup
                .policy_configmaps
                .then(|| self.policy_namespace.clone()),
            policy_tenancy: setup.policy_tenancy,
            teams: setup.teams.clone(),
            // A rotated Secret shows within a test's patience.
            grant_secret_refresh: Duration::from_millis(200),
            children: setup.children,
            runtime,
            record_calls: setup.record_calls.clone(),
            registries: setup.registries.clone(),
            policy_history: setup.policy_history,
            decision_history: setup.decision_history,
            child_settle: setup.child_settle.unwrap_or(defaults.child_settle),
            ..defaults
        };
        let api = setup.api.clone().unwrap_or_else(|| self.config.clone());
        let operator = Operator::new(api, options)
            .await
            .expect("the operator starts");
        let shared = operator.shared();
        let metrics = operator.metrics();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(operator.run(async {
            let _ = stopped.await;
        }));
        let ready = Arc::clone(&shared);
        eventually("the operator's caches to sync", || {
            let ready = Arc::clone(&ready);
            async move { (ready.jobs.is_ready() && ready.children.is_ready()).then_some(()) }
        })
        .await;
        self.operator = Some(RunningOperator {
            shared,
            metrics,
            stop,
            task,
        });
    }

    /// Stops the operator (gracefully) and waits for it.
    pub async fn stop_operator(&mut self) {
        if let Some(operator) = self.operator.take() {
            let _ = operator.stop.send(());
            operator
                .task
                .await
                .expect("operator task")
                .expect("operator stops cleanly");
        }
    }

    /// A kubeconfig file for this environment's cluster, for the binaries
    /// (`policyhost run`, `policyhost status`) and kubectl.
    pub fn kubeconfig_file(&self) -> PathBuf {
        if let Some(path) = real_kubeconfig() {
            return path;
        }
        let path = super::scratch().join(format!(
            "policyhost-e2e-{}-{}.kubeconfig",
            std::process::id(),
            unique()
        ));
        self.cluster
            .as_ref()
            .expect("a devcluster")
            .write_kubeconfig(&path)
            .expect("write the kubeconfig");
        path
    }

    /// The requests this environment's cluster answered, where they can be
    /// read: devcluster's log, or the real API server's audit log.
    pub fn requests(&self) -> Option<super::requests::RequestLog<'_>> {
        match &self.cluster {
            Some(cluster) => Some(super::requests::RequestLog::Dev(cluster)),
            None => super::requests::RequestLog::audit(),
        }
    }

    /// The client configuration of this environment's cluster, for tests
    /// that build an operator themselves.
    pub fn client_config(&self) -> kube::Config {
        self.config.clone()
    }

    /// The operator instance name the tests use for this namespace.
    pub fn instance(&self) -> String {
        format!("test-{}", self.namespace)
    }

    /// The running operator.
    pub fn operator(&self) -> &RunningOperator {
        self.operator.as_ref().expect("an operator is running")
    }

    /// Waits until the operator has nothing queued, in flight or waiting.
    pub async fn wait_idle(&self) {
        let queue = &self.operator().shared.queue;
        eventually("the operator idle", || async {
            (queue.is_empty() && queue.in_flight() == 0 && queue.delayed() == 0).then_some(())
        })
        .await;
    }

    /// DataJobs of the test namespace.
    pub fn jobs(&self) -> Api<DataJob> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Pods of the test namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a DataJob run by `policy` with `params`.
    pub async fn create_job(&self, name: &str, policy: &str, params: Value) -> DataJob {
        let Value::Object(params) = params else {
            panic!("params must be a JSON object");
        };
        let job = DataJob::new(
            name,
            DataJobSpec {
                policy: policy.to_owned(),
                params,
                ..DataJobSpec::default()
            },
        );
        self.jobs()
            .create(&PostParams::default(), &job)
            .await
            .expect("create the DataJob")
    }

    /// Deletes DataJob `name` and waits until it is gone (released by
    /// its cleanup).
    pub async fn delete_job_and_wait(&self, name: &str) {
        self.jobs()
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .expect("delete the DataJob");
        let jobs = self.jobs();
        eventually(&format!("{name} to be released"), || {
            let jobs = jobs.clone();
            async move { matches!(jobs.get_opt(name).await, Ok(None)).then_some(()) }
        })
        .await;
    }

    /// Merge-patches a DataJob's spec.
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        self.jobs()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": spec })),
            )
            .await
            .expect("patch the DataJob");
    }

    /// Waits until the DataJob satisfies `ready`, and returns it.
    pub async fn wait_job(
        &self,
        name: &str,
        what: &str,
        ready: impl Fn(&DataJob) -> bool,
    ) -> DataJob {
        let jobs = self.jobs();
        eventually(&format!("DataJob {name}: {what}"), || {
            let jobs = jobs.clone();
            let ready = &ready;
            async move {
                jobs.get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .filter(|job| ready(job))
            }
        })
        .await
    }

    /// Waits for a warning Event with `reason` on the object `name` in
    /// `namespace`, and returns its message.
    pub async fn warning(&self, namespace: &str, name: &str, reason: &str) -> String {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        eventually(&format!("a {reason} warning Event on {name}"), || {
            let events = events.clone();
            async move {
                events
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find_map(|e| {
                        (e.type_.as_deref() == Some("Warning")
                            && e.reason.as_deref() == Some(reason)
                            && e.involved_object.name.as_deref() == Some(name))
                        .then(|| e.message.unwrap_or_default())
                    })
            }
        })
        .await
    }

    /// Waits until the Pods of DataJob `job` satisfy `ready`, and returns them.
    pub async fn wait_pods(
        &self,
        job: &str,
        what: &str,
        ready: impl Fn(&[Pod]) -> bool,
    ) -> Vec<Pod> {
        let pods = self.pods();
        let selector = format!("policyhost.dev/datajob={job}");
        eventually(&format!("Pods of {job}: {what}"), || {
            let pods = pods.clone();
            let params = ListParams::default().labels(&selector);
            let ready = &ready;
            async move {
                let mut list = pods.list(&params).await.ok()?.items;
                list.sort_by_key(ResourceExt::name_any);
                ready(&list).then_some(list)
            }
        })
        .await
    }
}

/// The DataJob's status phase, if any.
pub fn phase(job: &DataJob) -> Option<&str> {
    job.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// The DataJob's condition of type `kind`, if any.
pub fn condition<'a>(
    job: &'a DataJob,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == kind))
}

/// Creates namespace `name`.
pub async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}

/// Installs (or updates) the DataJob CRD.
pub async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = policyhost::crd::definition();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("policyhost-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("install the DataJob CRD");
}

/// A directory holding just the named policies' components.
pub fn policy_dir(policies: &[String]) -> PathBuf {
    let dir = super::scratch().join(format!(
        "policyhost-e2e-{}-{}",
        std::process::id(),
        unique()
    ));
    std::fs::create_dir_all(&dir).expect("create a policy directory");
    for name in policies {
        let source = super::guest(name);
        let file = source.file_name().expect("a file name");
        std::fs::copy(&source, dir.join(file)).expect("copy the policy");
    }
    dir
}
