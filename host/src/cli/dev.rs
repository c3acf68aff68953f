//! `policyhost dev`: the whole system on the embedded devcluster, no cluster
//! needed: an API server, the DataJob CRD, the operator with the local
//! policies (published as ConfigMaps and republished whenever a `.wasm`
//! is rebuilt, so the operator hot-swaps them), and optionally some objects
//! to start with.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use devcluster::{Config, DevCluster};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt, discovery};
use policyhost::cache::{ObjectKey, owner_key_of};
use policyhost::controller::Shared;

use policyhost::operator::Operator;
use policyhost::projection;
use policyhost::runtime::ChildPhase;

use super::dev_rollout::{self, RolloutArg};
use super::duration::{self, DurationArg};
use super::leader::LeaderArgs;
use super::operate::OperatorArgs;
use super::reload;
use super::terminal::println;
use policyhost::publisher::dev_registry::LocalRegistry;
use policyhost::traces::jaeger::LocalJaeger;

/// The field manager of objects `dev --apply` creates.
const DEV_MANAGER: &str = "policyhost-dev";

/// Arguments of `dev`.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// Port of the embedded API server; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Run on the cluster of this kubeconfig instead of an embedded
    /// devcluster: the CRD is installed there, the policies are published in
    /// its policy namespace, and the operator runs here.
    #[arg(long, value_name = "KUBECONFIG")]
    pub(crate) cluster: Option<PathBuf>,
    /// Where to write the kubeconfig of the embedded cluster.
    #[arg(
        long,
        default_value = "target/devcluster.kubeconfig",
        value_name = "FILE"
    )]
    kubeconfig: PathBuf,
    #[command(flatten)]
    operator: OperatorArgs,
    #[command(flatten)]
    leader: LeaderArgs,
    /// Where to serve /metrics, /healthz, /readyz and /leaderz.
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    listen: SocketAddr,
    /// Create or update the objects in FILE (YAML) once the operator runs (repeatable).
    #[arg(long = "apply", value_name = "FILE")]
    apply: Vec<PathBuf>,
    /// Exit once every DataJob from `--apply` has finished (Succeeded or
    /// Failed); the exit code is non-zero unless all succeeded.
    #[arg(long)]
    until_settled: bool,
    /// How long `--until-settled` waits.
    #[arg(long, default_value = "120s", value_name = "DURATION", value_parser = duration::seconds_before)]
    settle_timeout: DurationArg,
    /// Run this CNCF distribution registry binary (`cargo xtask registry`
    /// builds it) on loopback, and ship the policy directory's policies
    /// through it as OCI artifacts: pushed, named by digest in
    /// their ConfigMaps, pulled by the operator with a grant and pull secret.
    #[arg(long, value_name = "BINARY")]
    registry: Option<PathBuf>,
    /// Where `--registry` keeps its state, certificates and credentials.
    #[arg(long, default_value = "target/dev-registry", value_name = "DIR")]
    registry_dir: PathBuf,
    /// Once the DataJobs of `--apply` have settled, roll the component
    /// FILE out as the candidate of POLICY (half of its DataJobs, then all,
    /// 3 s a step), print each step, and promote it when the rollout
    /// completes.
    #[arg(long, value_name = "POLICY=FILE", requires = "until_settled")]
    rollout: Option<RolloutArg>,
    /// Run this Jaeger binary (`cargo xtask jaeger` builds it) on loopback
    /// and send it a trace of every pass: its address is printed; search
    /// the service `policyhost` by the tag `job=NAMESPACE/NAME`.
    #[arg(long, value_name = "BINARY", conflicts_with = "otlp_endpoint")]
    jaeger: Option<PathBuf>,
    /// Where `--jaeger` keeps its configuration and log.
    #[arg(long, default_value = "target/dev-jaeger", value_name = "DIR")]
    jaeger_dir: PathBuf,
}

impl DevArgs {
    /// Starts Jaeger if `--jaeger` asks for it, and says where to look.
    pub(crate) fn start_jaeger(&self) -> anyhow::Result<Option<LocalJaeger>> {
        let Some(binary) = &self.jaeger else {
            return Ok(None);
        };
        let jaeger = LocalJaeger::start(binary, &self.jaeger_dir)?;
        println!(
            "jaeger: traces on http://{query} (query API: /api/traces?service=policyhost&tags={{\"job\":\"NAMESPACE/NAME\"}}), OTLP on {otlp}",
            query = jaeger.query(),
            otlp = jaeger.otlp_endpoint(),
        );
        Ok(Some(jaeger))
    }

    /// The traces' configuration: to `jaeger`, if it runs.
    pub(crate) fn traces(&self, jaeger: Option<&LocalJaeger>) -> policyhost::traces::Config {
        let mut config = self.operator.traces.config();
        if let Some(jaeger) = jaeger {
            config.endpoint = Some(jaeger.otlp_endpoint());
        }
        config
    }
}

pub(crate) fn run(args: &DevArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(dev(args))
}

async fn dev(args: &DevArgs) -> anyhow::Result<ExitCode> {
    let (cluster, config) = match &args.cluster {
        Some(kubeconfig) => (None, existing_cluster(kubeconfig).await?),
        None => {
            let cluster = embedded_cluster(args).await?;
            let config = cluster.client_config()?;
            (Some(cluster), config)
        }
    };
    let client = kube::Client::try_from(config.clone()).context("cannot connect to the cluster")?;
    install_crd(&client).await?;

    // Policies take the production path: each `.wasm` of the directory is
    // published as a policy ConfigMap, and republished when it changes.
    let namespace = args
        .operator
        .policy_namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    ensure_namespace(&client, &namespace).await?;
    let registry = match &args.registry {
        Some(binary) => {
            let registry = LocalRegistry::start(binary, &args.registry_dir).await?;
            let dir = registry.dir();
            println!(
                "registry serving on https://{host} (user {user}; push with --oci {host}/policies/NAME:TAG --registry-auth {} --registry-ca {})",
                dir.join("config.json").display(),
                dir.join("ca.pem").display(),
                host = registry.host(),
                user = policyhost::publisher::dev_registry::USER,
            );
            Some(Arc::new(registry))
        }
        None => None,
    };
    let mut watcher = args.operator.policy_dir.clone().map(|dir| {
        reload::DirWatcher::new(dir, client.clone(), namespace.clone(), registry.clone())
    });
    let published = match &mut watcher {
        Some(watcher) => watcher.publish_all().await?,
        None => Vec::new(),
    };
    let mut options = args.operator.options(Some(args.listen))?;
    (options.leader, options.shards) =
        args.leader
            .coordination(false, args.operator.instance(), &config.default_namespace);
    options.policy_dir = None;
    options.policy_namespace = Some(namespace.clone());
    if let Some(registry) = &registry {
        options.registries.extra_roots.push(registry.ca());
        options.registries.cache_dir = Some(registry.artifact_cache());
    }
    let operator = Operator::new(config, options).await?;
    if let Some(addr) = operator.listen_addr() {
        println!("operator metrics on http://{addr}/metrics");
    }
    let shared = operator.shared();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(operator.run(async {
        let _ = stopped.await;
    }));
    for map in &published {
        reload::print_verdict(&client, map).await;
    }
    match &args.operator.policy_dir {
        Some(dir) => println!(
            "watching {} for rebuilt policies (published as ConfigMaps in {namespace})",
            dir.display()
        ),
        None => println!(
            "serving the policy ConfigMaps of namespace {namespace} (policyhost policy push ... --namespace {namespace})"
        ),
    }
    let watching = watcher.map(|watcher| tokio::spawn(watcher.run()));

    let mut jobs = Vec::new();
    for file in &args.apply {
        jobs.extend(apply_file(&client, file).await?);
    }
    let code = if args.until_settled {
        let settled = settle(&shared, &jobs, args.settle_timeout.0).await;
        print_summary(&shared, &jobs);
        let mut succeeded = settled?;
        if let Some(rollout) = &args.rollout {
            let serving =
                dev_rollout::roll_out(&client, &namespace, rollout, args.settle_timeout.0).await?;
            succeeded &= match serving {
                Some(digest) => reconciled_by(&shared, &jobs, &digest, args.settle_timeout.0).await,
                None => false,
            };
            print_summary(&shared, &jobs);
        }
        if succeeded {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    } else {
        println!("running; Ctrl-C to stop");
        super::shutdown_signal().await;
        ExitCode::SUCCESS
    };
    if let Some(watching) = watching {
        watching.abort();
    }
    let _ = stop.send(());
    running.await.context("the operator task failed")??;
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    Ok(code)
}

/// Starts the embedded devcluster and writes its kubeconfig.
async fn embedded_cluster(args: &DevArgs) -> anyhow::Result<DevCluster> {
    let cluster = DevCluster::start(Config {
        port: args.port,
        ..Config::default()
    })
    .await
    .context("cannot start devcluster")?;
    if let Some(dir) = args
        .kubeconfig
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    cluster
        .write_kubeconfig(&args.kubeconfig)
        .context("cannot write the kubeconfig")?;
    println!("devcluster serving on {}", cluster.url());
    println!(
        "  kubectl --kubeconfig {} get datajobs,pods",
        args.kubeconfig.display()
    );
    Ok(cluster)
}

/// The client configuration of `kubeconfig`'s current context.
async fn existing_cluster(kubeconfig: &Path) -> anyhow::Result<kube::Config> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .with_context(|| format!("no usable context in {}", kubeconfig.display()))?;
    println!("running on the cluster at {}", config.cluster_url);
    println!(
        "  kubectl --kubeconfig {} get datajobs,pods",
        kubeconfig.display()
    );
    Ok(config)
}

/// Creates (or updates) the DataJob CRD.
async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = policyhost::crd::definition();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply(DEV_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .context("cannot install the DataJob CRD")?;
    Ok(())
}

/// Creates the namespace unless it exists.
async fn ensure_namespace(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .patch(
            namespace,
            &PatchParams::apply(DEV_MANAGER),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("cannot create namespace {namespace}"))?;
    Ok(())
}

/// Server-side applies every object of a YAML file; returns the DataJobs' keys.
async fn apply_file(client: &Client, file: &Path) -> anyhow::Result<Vec<ObjectKey>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut jobs = Vec::new();
    for value in projection::objects_from_yaml(&text)? {
        let object: DynamicObject = serde_json::from_value(value).with_context(|| {
            format!(
                "{} holds an object that is not a Kubernetes object",
                file.display()
            )
        })?;
        let types = object
            .types
            .clone()
            .with_context(|| format!("an object in {} has no apiVersion/kind", file.display()))?;
        let gvk = GroupVersionKind::try_from(&types)
            .with_context(|| format!("bad apiVersion {}", types.api_version))?;
        let (resource, capabilities) =
            discovery::pinned_kind(client, &gvk)
                .await
                .with_context(|| {
                    format!(
                        "the cluster does not serve {} {}",
                        types.api_version, types.kind
                    )
                })?;
        let name = object.name_any();
        let (api, key): (Api<DynamicObject>, ObjectKey) = match capabilities.scope {
            Scope::Cluster => (
                Api::all_with(client.clone(), &resource),
                ObjectKey::cluster(name.as_str()),
            ),
            Scope::Namespaced => {
                let namespace = object.namespace().unwrap_or_else(|| "default".into());
                let api = Api::namespaced_with(client.clone(), &namespace, &resource);
                (api, ObjectKey::namespaced(namespace, name.as_str()))
            }
        };
        api.patch(
            &name,
            &PatchParams::apply(DEV_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("cannot apply {} {key}", types.kind))?;
        println!("applied {} {key}", types.kind);
        if types.kind == "DataJob" {
            jobs.push(key);
        }
    }
    Ok(jobs)
}

/// Waits until every DataJob has finished; true if all succeeded.
async fn settle(
    shared: &Arc<Shared>,
    jobs: &[ObjectKey],
    timeout: Duration,
) -> anyhow::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let phases: Vec<Option<String>> = jobs
            .iter()
            .map(|key| {
                shared
                    .jobs
                    .get(key)
                    .and_then(|job| job.status.as_ref().and_then(|s| s.phase.clone()))
            })
            .collect();
        let finished = |p: &Option<String>| matches!(p.as_deref(), Some("Succeeded" | "Failed"));
        if phases.iter().all(finished) {
            return Ok(phases.iter().all(|p| p.as_deref() == Some("Succeeded")));
        }
        if Instant::now() > deadline {
            bail!("DataJobs did not finish within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `digest` last reconciled every DataJob; false on timeout.
async fn reconciled_by(
    shared: &Shared,
    jobs: &[ObjectKey],
    digest: &str,
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let all = jobs.iter().all(|key| {
            shared.jobs.get(key).is_some_and(|job| {
                job.status
                    .as_ref()
                    .and_then(|status| status.policy.as_ref())
                    .is_some_and(|policy| policy.digest == digest)
            })
        });
        if all {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn phase_name(phase: ChildPhase) -> &'static str {
    match phase {
        ChildPhase::Pending => "Pending",
        ChildPhase::Running => "Running",
        ChildPhase::Succeeded => "Succeeded",
        ChildPhase::Failed => "Failed",
        ChildPhase::Unknown => "Unknown",
    }
}

fn print_summary(shared: &Shared, jobs: &[ObjectKey]) {
    println!(
        "{:<28} {:<12} {:<10} {:<14} CHILDREN",
        "DATAJOB", "POLICY", "PHASE", "DIGEST"
    );
    for key in jobs {
        let Some(job) = shared.jobs.get(key) else {
            println!("{key:<28} (gone)");
            continue;
        };
        let status = job.status.clone().unwrap_or_default();
        let digest = status.policy.as_ref().map_or("-".into(), |p| {
            p.digest.chars().take(12).collect::<String>()
        });
        let counts = status.children.unwrap_or_default();
        println!(
            "{:<28} {:<12} {:<10} {:<14} {} total, {} succeeded, {} failed",
            key.to_string(),
            job.spec.policy,
            status.phase.unwrap_or_default(),
            digest,
            counts.total,
            counts.succeeded,
            counts.failed
        );
        for record in owner_key_of(&job)
            .map(|owner| shared.children.of(&owner))
            .unwrap_or_default()
        {
            println!(
                "    {} {:<30} {}",
                record.child.kind,
                record.child.name,
                phase_name(record.child.phase)
            );
        }
    }
}
