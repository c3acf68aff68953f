//! The operator at scale, in each cache mode and on each API server:
//! `cargo xtask bench scale` (which builds the guests and the release
//! binaries first), or `cargo bench -p policyhost-tests --bench scale --
//! [OPTIONS]`.
//!
//! For each server (`--servers devcluster,real`) and each mode (`--modes
//! indexed,naive`), on a fresh server:
//!
//! 1. starts the server: a `devcluster` process (Pod simulation off: Pods
//!    stay Pending), or the real control plane (`xtask cluster up --dir`:
//!    etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok),
//!    where `deploy/` is applied and the operator runs as its ServiceAccount;
//! 2. loads `--pods` foreign Pods over raw HTTP, spread over five tenant
//!    namespaces (≈ 4 KB manifests, Deployment-controlled, not the
//!    operator's), bound to kwok's Node and annotated to run forever, and on
//!    the real server waits until kwok reports them all Running;
//! 3. measures the server: each process's RSS, `--patches` merge patches of
//!    a label, a full list of the Pods paginated by 500 and unpaginated, and
//!    `--watch-writes` writes timed until a watcher receives their event;
//! 4. starts the operator as its own process, serving only the `fanout`
//!    policy, and waits for `/readyz`: `policyhost run` (`indexed`), or
//!    `naive-operator`, the same operator on the naive cache
//!    (`bench/naive-cache`, `naive`), or `policyhost run --decision-history
//!    0` (`unrecorded`: `indexed` without the DataJobs' decision records),
//!    or N processes of `policyhost run --shards` (`shards-N`, 1 ≤ N ≤ 9),
//!    ready once they serve the 64 buckets between them, or `policyhost run
//!    --otlp-endpoint … --otlp-sample-ratio R` exporting to a Jaeger of the
//!    run's own (`traced-R`, 0 ≤ R ≤ 1; `cargo xtask jaeger` builds it);
//! 5. creates `--jobs` DataJobs (`fanout`, `replicas: 5`, workers annotated
//!    to run forever) at once and watches their status until each has
//!    converged: its status written for the current generation and counting
//!    all 5 children;
//! 6. reads the operator's RSS (`/proc/<pid>/status`), its reconcile latency
//!    histogram (`/metrics`) and its requests (devcluster's counters, or the
//!    audit log's events of its ServiceAccount);
//! 7. keeps it running `--steady` seconds, sampling memory, queue depth and
//!    watch requests, to see whether anything grows;
//! 8. with shards, reads each replica's RSS, CPU, buckets and DataJobs,
//!    then SIGKILLs the last replica and times until the others serve all
//!    64 buckets again, counting the requests the move cost.
//!
//! Figures go to stdout as Markdown; the raw series to
//! `<--out>/operator-at-scale.json` and the plot to
//! `<--out>/operator-at-scale.svg` (default `--out`: `docs/plots`).
//! `--plot-only FILE.json` redraws the plot from a recorded run.
//!
//! Options: `--pods N` (50000), `--jobs N` (1000), `--replicas N` (5),
//! `--steady S` (120), `--modes LIST` (indexed,naive), `--servers LIST`
//! (devcluster; `real` needs `<target>/debug/xtask` and the control plane's
//! programs, which `cargo xtask cluster up` builds), `--patches N` (5000),
//! `--watch-writes N` (300), `--workers N`, `--api-qps N`, `--api-burst N`
//! (operator defaults when absent), `--out DIR`, `--plot-only FILE`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use plotters::prelude::RGBColor;
use policyhost::crd::DataJob;
use policyhost::traces::jaeger::LocalJaeger;
use policyhost_measure as measure;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[path = "../common/mod.rs"]
mod common;

use common::bench::Flags;
use common::control_plane::{ControlPlane, client_for, xtask};
use common::deployment::{NAMESPACE as OPERATOR_NAMESPACE, SERVICE_ACCOUNT_USER};
use common::foreign;
use common::load::{
    Created, converged, data_job, foreign_pod, load_foreign_pods, log, pod_count, wait_for,
    wait_running,
};
use common::plot;
use common::process::Spawned;
use common::requests::{Mark, RequestLog};
use common::sampler::{Sample, Sampler, cpu_seconds, memory_mib};

/// The namespace of the DataJobs.
const JOBS_NAMESPACE: &str = "scale";

/// Which API server a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerKind {
    /// The embedded `devcluster`, as its own process.
    Devcluster,
    /// etcd and kube-apiserver with the controllers and kwok.
    Real,
}

impl ServerKind {
    fn parse(name: &str) -> anyhow::Result<Self> {
        match name {
            "devcluster" => Ok(Self::Devcluster),
            "real" => Ok(Self::Real),
            other => bail!("unknown server {other} (devcluster or real)"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Devcluster => "devcluster",
            Self::Real => "real",
        }
    }
}

#[derive(Debug, Clone)]
struct Args {
    pods: usize,
    jobs: usize,
    replicas: usize,
    steady: u64,
    modes: Vec<String>,
    servers: Vec<ServerKind>,
    patches: usize,
    watch_writes: usize,
    workers: Option<String>,
    api_qps: Option<String>,
    api_burst: Option<String>,
    out: PathBuf,
    plot_only: Option<PathBuf>,
}

impl Args {
    fn parse() -> anyhow::Result<Self> {
        let mut args = Self {
            pods: 50_000,
            jobs: 1_000,
            replicas: 5,
            steady: 120,
            modes: vec!["indexed".into(), "naive".into()],
            servers: vec![ServerKind::Devcluster],
            patches: 5_000,
            watch_writes: 300,
            workers: None,
            api_qps: None,
            api_burst: None,
            out: common::workspace().join("docs/plots"),
            plot_only: None,
        };
        let mut flags = Flags::from_env();
        while let Some(flag) = flags.next_flag() {
            let mut value = || flags.value(&flag);
            match flag.as_str() {
                "--pods" => args.pods = value()?.parse()?,
                "--jobs" => args.jobs = value()?.parse()?,
                "--replicas" => args.replicas = value()?.parse()?,
                "--steady" => args.steady = value()?.parse()?,
                "--modes" => {
                    args.modes = value()?.split(',').map(str::to_owned).collect();
                    if let Some(mode) = args.modes.iter().find(|m| {
                        !["indexed", "naive", "unrecorded"].contains(&m.as_str())
                            && shard_count(m).is_none()
                            && trace_ratio(m).is_none()
                    }) {
                        bail!(
                            "unknown mode {mode} (indexed, naive, unrecorded, shards-N or traced-R)"
                        );
                    }
                }
                "--servers" => {
                    args.servers = value()?
                        .split(',')
                        .map(ServerKind::parse)
                        .collect::<anyhow::Result<_>>()?;
                }
                "--patches" => args.patches = value()?.parse()?,
                "--watch-writes" => args.watch_writes = value()?.parse()?,
                "--workers" => args.workers = Some(value()?),
                "--api-qps" => args.api_qps = Some(value()?),
                "--api-burst" => args.api_burst = Some(value()?),
                "--out" => args.out = value()?.into(),
                "--plot-only" => args.plot_only = Some(value()?.into()),
                other => bail!("unknown option {other} (see the header of tests/benches/scale.rs)"),
            }
        }
        Ok(args)
    }
}

/// `<target>/release`: this benchmark runs from `<target>/release/deps/`.
fn release_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("no release directory above the benchmark")
}

fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = release_dir()?.join(name);
    ensure!(
        path.is_file(),
        "{} is missing: `cargo xtask bench scale` builds it (or `cargo build --release -p policyhost -p devcluster -p policyhost-naive-cache --bins`)",
        path.display()
    );
    Ok(path)
}

fn fanout_guest() -> anyhow::Result<PathBuf> {
    let target = release_dir()?
        .parent()
        .map(Path::to_path_buf)
        .context("no target directory")?;
    let path = target.join("wasm32-wasip2/guest/fanout.wasm");
    ensure!(
        path.is_file(),
        "{} is missing: `cargo xtask guests` builds it",
        path.display()
    );
    Ok(path)
}

// ---- the machine and the processes ----

/// The `q` quantile (nearest rank) of ascending samples; `NaN` without any.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    measure::percentile(sorted, q).unwrap_or(f64::NAN)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default()
}

/// A `devcluster` process with Pod simulation off.
async fn start_devcluster(dir: &Path) -> anyhow::Result<(Spawned, Client)> {
    let kubeconfig = dir.join("devcluster.kubeconfig");
    let log = std::fs::File::create(dir.join("devcluster.log"))?;
    let mut child = Command::new(binary("devcluster")?)
        .args(["--port", "0", "--no-pod-simulation", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("start devcluster")?;
    let stdout = child.stdout.take().context("devcluster stdout")?;
    let process = Spawned::new(child, "devcluster");
    // It prints where it listens, then that the kubeconfig is written.
    tokio::task::spawn_blocking(move || {
        for line in BufReader::new(stdout).lines() {
            if line?.starts_with("kubeconfig written") {
                return anyhow::Ok(());
            }
        }
        bail!("devcluster exited before writing its kubeconfig")
    })
    .await??;
    Ok((process, client_for(&kubeconfig).await?))
}

/// The API server of one run, fresh for it.
enum Server {
    Dev(Spawned),
    Real(ControlPlane),
}

/// A server with the CRD and the namespaces installed.
struct Started {
    server: Server,
    /// The benchmark's own client, an admin.
    client: Client,
    /// What the operator presents: devcluster's kubeconfig, or on the real
    /// server a token issued for `deploy/`'s ServiceAccount.
    operator_kubeconfig: PathBuf,
}

impl Started {
    async fn start(kind: ServerKind, dir: &Path, tag: &str) -> anyhow::Result<Self> {
        let started = match kind {
            ServerKind::Devcluster => {
                let (process, client) = start_devcluster(dir).await?;
                Self {
                    server: Server::Dev(process),
                    client,
                    operator_kubeconfig: dir.join("devcluster.kubeconfig"),
                }
            }
            ServerKind::Real => {
                let state = dir.join(format!("cluster-{tag}"));
                let plane = tokio::task::spawn_blocking(move || ControlPlane::up(state)).await??;
                let client = client_for(&plane.kubeconfig).await?;
                // The operator's namespace, ServiceAccount and RBAC, as an
                // admin installs them; shards also as deploy/shards grants
                // them: their member Leases.
                common::deployment::install(&plane.kubeconfig).await;
                if shard_count(tag).is_some() {
                    grant_member_leases(&client).await?;
                }
                let operator_kubeconfig = dir.join(format!("operator-{tag}.kubeconfig"));
                common::deployment::issued_token_kubeconfig(
                    &plane.kubeconfig,
                    OPERATOR_NAMESPACE,
                    "policyhost",
                    &operator_kubeconfig,
                );
                Self {
                    server: Server::Real(plane),
                    client,
                    operator_kubeconfig,
                }
            }
        };
        install(&started.client).await?;
        Ok(started)
    }

    /// VmRSS and VmHWM of each of the server's processes, in MiB, by program.
    fn memory(&self) -> BTreeMap<String, (f64, f64)> {
        match &self.server {
            Server::Dev(process) => memory_mib(process.pid())
                .map(|memory| ("devcluster".to_owned(), memory))
                .into_iter()
                .collect(),
            Server::Real(plane) => plane.memory(),
        }
    }

    /// Where the operator's requests are counted from next (the audit log's
    /// end; devcluster's counters need none).
    fn mark(&self) -> Option<Mark> {
        match &self.server {
            Server::Dev(_) => None,
            Server::Real(plane) => Some(RequestLog::Audit(plane.audit_log.clone()).mark()),
        }
    }

    /// The operator's requests by verb: devcluster's counters of its user
    /// agent, or the audit log's events of its ServiceAccount after `mark`.
    async fn operator_requests(&self, mark: Option<Mark>) -> anyhow::Result<BTreeMap<String, u64>> {
        let Server::Real(plane) = &self.server else {
            return devcluster_requests(&self.client).await;
        };
        let log = RequestLog::Audit(plane.audit_log.clone());
        let requests = match mark {
            Some(mark) => log.since(mark),
            None => log.all(),
        };
        let mut by_verb = BTreeMap::new();
        for request in requests
            .iter()
            .filter(|r| r.identity == SERVICE_ACCOUNT_USER)
        {
            *by_verb
                .entry(verb_key(&request.verb, &request.subresource))
                .or_default() += 1;
        }
        Ok(by_verb)
    }

    fn stop(self) {
        match self.server {
            Server::Dev(process) => drop(process.stop(Duration::from_secs(10))),
            Server::Real(plane) => drop(plane),
        }
    }
}

/// How a request is tallied: its verb, `… status` for the status subresource.
fn verb_key(verb: &str, subresource: &str) -> String {
    if subresource == "status" {
        format!("{verb} status")
    } else {
        verb.to_owned()
    }
}

/// `GET path` on the operator's endpoints: status code and body.
async fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("an HTTP status line")?;
    Ok((code, body.to_owned()))
}

// ---- the scenario ----

async fn install(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "datajobs.policyhost.dev",
        &PatchParams::apply("scale-bench").force(),
        &Patch::Apply(policyhost::crd::definition()),
    )
    .await
    .context("install the DataJob CRD")?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // The operator's own (its Lease, its policy ConfigMaps), unless
    // `deploy/` made it.
    let operator = namespaces
        .get_opt(OPERATOR_NAMESPACE)
        .await?
        .is_none()
        .then_some(&OPERATOR_NAMESPACE);
    for name in foreign::NAMESPACES
        .iter()
        .chain([&JOBS_NAMESPACE])
        .chain(operator)
    {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("create namespace {name}"))?;
    }
    let jobs: Api<DataJob> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
    wait_for("the DataJob resource", Duration::from_secs(30), || {
        let jobs = jobs.clone();
        async move { jobs.list(&ListParams::default().limit(1)).await.is_ok() }
    })
    .await
}

// ---- the server's own figures ----

/// The server under the foreign Pods.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct ServerSide {
    /// `VmRSS` of each server process with the Pods loaded (MiB), by program.
    rss_loaded_mib: BTreeMap<String, f64>,
    /// `VmHWM` of each at the end of the run (MiB).
    hwm_end_mib: BTreeMap<String, f64>,
    /// Foreign Pod creates/s (64 in flight).
    pods_per_second: f64,
    /// Seconds from the first foreign Pod create until all were Running
    /// (the real server; devcluster's stay Pending).
    all_running_s: Option<f64>,
    /// Merge patches of a label, and patches/s (32 in flight).
    patches: usize,
    patches_per_second: f64,
    /// Every Pod listed 500 at a time: seconds, pages, bytes.
    list_paginated_s: f64,
    list_pages: usize,
    list_paginated_bytes: u64,
    /// Every Pod in one list: seconds and bytes.
    list_full_s: f64,
    list_full_bytes: u64,
    /// Write → watch event latencies (ms): p50, p99, samples.
    watch_p50_ms: f64,
    watch_p99_ms: f64,
    watch_samples: usize,
}

/// The Pods of namespace `namespace`, as a request builder.
fn pods_request(namespace: Option<&str>) -> kube::core::Request {
    kube::core::Request::new(match namespace {
        Some(namespace) => format!("/api/v1/namespaces/{namespace}/pods"),
        None => "/api/v1/pods".to_owned(),
    })
}

/// Merge-patches Pod `namespace/name` with `patch`, reading the answer as text.
async fn patch_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &Value,
) -> anyhow::Result<()> {
    let request =
        pods_request(Some(namespace)).patch(name, &PatchParams::default(), &Patch::Merge(patch))?;
    let answer = client.request_text(request).await?;
    let patched: Created = serde_json::from_str(&answer)?;
    ensure!(patched.kind == "Pod", "refused: {answer}");
    Ok(())
}

/// `count` merge patches of a label on the foreign Pods (round robin), 32 in
/// flight; patches/s.
async fn patch_rate(client: &Client, pods: usize, count: usize) -> anyhow::Result<f64> {
    let start = Instant::now();
    futures::stream::iter(0..count)
        .map(|k| async move {
            let i = k % pods;
            let patch =
                json!({"metadata": {"labels": {"bench.policyhost.dev/patched": k.to_string()}}});
            patch_pod(client, foreign::namespace(i), &foreign::name(i), &patch).await
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(count as f64 / start.elapsed().as_secs_f64())
}

/// As much of a list page as paging needs; serde skips the items' content.
#[derive(serde::Deserialize)]
struct Page {
    metadata: PageMeta,
    items: Vec<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct PageMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
}

/// Every Pod of the cluster, `limit` at a time, each page received whole:
/// seconds, pages, bytes; fails unless `expected` Pods came.
async fn list_paginated(
    client: &Client,
    limit: u32,
    expected: usize,
) -> anyhow::Result<(f64, usize, u64)> {
    let start = Instant::now();
    let (mut pages, mut bytes, mut items) = (0, 0u64, 0);
    let mut params = ListParams::default().limit(limit);
    loop {
        let text = client
            .request_text(pods_request(None).list(&params)?)
            .await?;
        let page: Page = serde_json::from_str(&text)?;
        pages += 1;
        bytes += text.len() as u64;
        items += page.items.len();
        match page.metadata.next.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    ensure!(
        items == expected,
        "listed {items} Pods, expected {expected}"
    );
    Ok((seconds, pages, bytes))
}

/// Every Pod of the cluster in one unpaginated list, received (as bytes,
/// not decoded): seconds, bytes.
async fn list_full(client: &Client) -> anyhow::Result<(f64, u64)> {
    use futures::AsyncReadExt as _;
    let start = Instant::now();
    let body = client
        .request_stream(pods_request(None).list(&ListParams::default())?)
        .await?;
    futures::pin_mut!(body);
    let mut buffer = vec![0; 256 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = body.read(&mut buffer).await?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
    }
    Ok((start.elapsed().as_secs_f64(), bytes))
}

/// The annotation the watch latency writes carry: their sequence number.
const SEQ_ANNOTATION: &str = "bench.policyhost.dev/seq";

/// `writes` annotation patches of the Pods of one application (a label
/// selection of 50), one after another, each timed from its sending until a
/// watcher of the selection has decoded its event; latencies in ms, sorted.
async fn watch_latencies(client: &Client, writes: usize) -> anyhow::Result<Vec<f64>> {
    let namespace = foreign::app_namespace(0);
    let selector = "app.kubernetes.io/name=app-0000";
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = api
        .list_metadata(&ListParams::default().labels(selector))
        .await?;
    let names: Vec<String> = listed.items.iter().map(ResourceExt::name_any).collect();
    ensure!(!names.is_empty(), "no Pod is labelled {selector}");
    let version = listed.metadata.resource_version.unwrap_or_default();
    let events = api
        .watch(&WatchParams::default().labels(selector), &version)
        .await?
        .boxed();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            if let Ok(WatchEvent::Modified(pod)) = event
                && let Some(seq) = pod
                    .annotations()
                    .get(SEQ_ANNOTATION)
                    .and_then(|s| s.parse::<usize>().ok())
            {
                let _ = tx.send((seq, Instant::now()));
            }
        }
    });
    let mut latencies = Vec::with_capacity(writes);
    for k in 0..writes {
        let patch = json!({"metadata": {"annotations": {SEQ_ANNOTATION: k.to_string()}}});
        let sent = Instant::now();
        patch_pod(client, namespace, &names[k % names.len()], &patch).await?;
        loop {
            let (seq, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .context("no watch event within 30 s")?
                .context("the watch ended")?;
            if seq == k {
                latencies.push((at - sent).as_secs_f64() * 1000.0);
                break;
            }
        }
    }
    watch.abort();
    latencies.sort_by(f64::total_cmp);
    Ok(latencies)
}

/// Patches, lists and watch latency on the loaded server.
async fn measure_server(client: &Client, args: &Args, side: &mut ServerSide) -> anyhow::Result<()> {
    side.patches = args.patches;
    side.patches_per_second = patch_rate(client, args.pods, args.patches).await?;
    (
        side.list_paginated_s,
        side.list_pages,
        side.list_paginated_bytes,
    ) = list_paginated(client, 500, args.pods).await?;
    (side.list_full_s, side.list_full_bytes) = list_full(client).await?;
    let latencies = watch_latencies(client, args.watch_writes).await?;
    side.watch_p50_ms = percentile(&latencies, 0.5);
    side.watch_p99_ms = percentile(&latencies, 0.99);
    side.watch_samples = latencies.len();
    Ok(())
}

/// The operator's requests so far, by verb (devcluster's counters of the
/// `policyhost/…` User-Agent).
async fn devcluster_requests(client: &Client) -> anyhow::Result<BTreeMap<String, u64>> {
    let request = http::Request::get("/devcluster/v1/counters").body(Vec::new())?;
    let counters: Vec<Value> = serde_json::from_str(&client.request_text(request).await?)?;
    let mut by_verb = BTreeMap::new();
    for counter in counters {
        let key = &counter["key"];
        if key["userAgent"]
            .as_str()
            .is_some_and(|agent| agent.starts_with("policyhost/"))
        {
            let verb = verb_key(
                key["verb"].as_str().unwrap_or_default(),
                key["subresource"].as_str().unwrap_or_default(),
            );
            *by_verb.entry(verb).or_default() += counter["count"].as_u64().unwrap_or(0);
        }
    }
    Ok(by_verb)
}

// ---- the operator's metrics ----

/// `(upper bound, cumulative count)` of each bucket of histogram `name`.
fn histogram(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The `q` quantile of a histogram, interpolated linearly within its bucket.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    if total == 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(upper, count) in buckets {
        if count >= rank {
            if upper.is_infinite() || count == below {
                return lower;
            }
            return lower + (upper - lower) * (rank - below) / (count - below);
        }
        (lower, below) = (upper, count);
    }
    lower
}

/// The sum of every sample of metric `name` (all label sets).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

// ---- one mode ----

/// What the steady state after convergence showed.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Steady {
    seconds: f64,
    rss_start_mib: f64,
    rss_end_mib: f64,
    rss_max_mib: f64,
    queue_depth_max: f64,
    queue_delayed_max: f64,
    reconciles: f64,
    watch_requests: u64,
    list_requests: u64,
    cpu_s: f64,
}

/// The replicas of a `shards-N` mode.
fn shard_count(mode: &str) -> Option<usize> {
    mode.strip_prefix("shards-")?
        .parse()
        .ok()
        .filter(|n| (1..=9).contains(n))
}

/// The sampling ratio of a `traced-R` mode.
fn trace_ratio(mode: &str) -> Option<f64> {
    mode.strip_prefix("traced-")?
        .parse()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
}

/// A Jaeger of the run's own for a `traced-R` mode.
fn start_jaeger(mode: &str, dir: &Path) -> anyhow::Result<Option<LocalJaeger>> {
    if trace_ratio(mode).is_none() {
        return Ok(None);
    }
    let binary = common::target_dir().join("jaeger/bin/jaeger");
    ensure!(
        binary.is_file(),
        "{} is missing: run `cargo xtask jaeger`",
        binary.display()
    );
    Ok(Some(LocalJaeger::start(
        &binary,
        &dir.join(format!("jaeger-{mode}")),
    )?))
}

/// Starts operator `i` of `mode` (`shard-<i>` in a shards mode), as its
/// own process, logging to the run's directory (and tracing to `jaeger`, if
/// given); and where it listens.
fn spawn_operator(
    args: &Args,
    (server, jaeger): (&Started, Option<&LocalJaeger>),
    kind: ServerKind,
    mode: &str,
    dir: &Path,
    i: usize,
) -> anyhow::Result<(Spawned, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let name = match shard_count(mode) {
        Some(_) => format!("shard-{i}"),
        None => format!("policyhost-scale-{mode}"),
    };
    let mut command = match mode {
        "naive" => Command::new(binary("naive-operator")?),
        "unrecorded" => {
            let mut command = Command::new(binary("policyhost")?);
            command.args(["run", "--decision-history", "0"]);
            command
        }
        shards if shard_count(shards).is_some() => {
            let mut command = Command::new(binary("policyhost")?);
            command.args(["run", "--shards"]);
            command
        }
        traced if trace_ratio(traced).is_some() => {
            let mut command = Command::new(binary("policyhost")?);
            command.arg("run");
            if let (Some(jaeger), Some(ratio)) = (jaeger, trace_ratio(traced)) {
                command.args(["--otlp-endpoint", &jaeger.otlp_endpoint()]);
                command.args(["--otlp-sample-ratio", &ratio.to_string()]);
            }
            command
        }
        _indexed => {
            let mut command = Command::new(binary("policyhost")?);
            command.arg("run");
            command
        }
    };
    command
        .arg("--kubeconfig")
        .arg(&server.operator_kubeconfig)
        .arg("--policy-dir")
        .arg(dir.join("policies"))
        .args(["--listen", &addr])
        // As deploy/'s Deployment runs it, which its RBAC is for: Pods the
        // only child kind; the Lease and the policy ConfigMaps in its own
        // namespace (the downward API's `POD_NAMESPACE`).
        .args(["--child-kind", "v1/Pod"])
        .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
        .env("POD_NAME", &name);
    for (flag, value) in [
        ("--workers", &args.workers),
        ("--api-qps", &args.api_qps),
        ("--api-burst", &args.api_burst),
    ] {
        if let Some(value) = value {
            command.args([flag, value]);
        }
    }
    let log = std::fs::File::create(dir.join(format!("operator-{}-{mode}-{i}.log", kind.name())))?;
    let spawned = Spawned::new(
        command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start policyhost run")?,
        "policyhost",
    );
    Ok((spawned, addr))
}

/// The Role rule `deploy/shards` adds to `deploy/`'s: the member Leases.
async fn grant_member_leases(client: &Client) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
    let roles: Api<Role> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let mut role = roles.get("policyhost").await.context("deploy/'s Role")?;
    role.rules.get_or_insert_default().push(PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: ["get", "list", "update", "delete"]
            .map(str::to_owned)
            .to_vec(),
        ..PolicyRule::default()
    });
    roles
        .replace("policyhost", &PostParams::default(), &role)
        .await
        .context("grant the member Leases")?;
    Ok(())
}

/// The buckets the replicas listening at `addrs` serve, together.
async fn buckets_served(addrs: &[String]) -> f64 {
    let mut sum = 0.0;
    for addr in addrs {
        if let Ok((200, metrics)) = http_get(addr, "/metrics").await {
            sum += metric(&metrics, "policyhost_shard_buckets");
        }
    }
    sum
}

/// One replica of a shards mode after convergence.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Shard {
    rss_mib: f64,
    cpu_s: f64,
    buckets: f64,
    datajobs: f64,
    reconciles: f64,
}

/// A shards mode's replicas, and the move after one of them died.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Shards {
    replicas: Vec<Shard>,
    /// From the SIGKILL of the last replica until the others serve all 64
    /// buckets (listed, ready to call): the lease duration and a round.
    takeover_s: Option<f64>,
    /// The operators' requests over that move, by verb.
    takeover_requests: BTreeMap<String, u64>,
}

/// One mode's figures on one server.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Run {
    /// `devcluster` or `real`.
    server: String,
    mode: String,
    server_side: ServerSide,
    ready_s: f64,
    rss_ready_mib: f64,
    jobs_created_at_s: f64,
    create_s: f64,
    converge_s: f64,
    rss_converged_mib: f64,
    hwm_converged_mib: f64,
    cpu_converged_s: f64,
    latency_p50_s: f64,
    latency_p99_s: f64,
    latency_count: f64,
    job_latency_p50_s: f64,
    job_latency_p99_s: f64,
    reconciles: f64,
    requests: BTreeMap<String, u64>,
    /// Decisions in each DataJob's `status.decisions` at convergence (mean).
    decisions_per_job: f64,
    /// Their size as JSON per DataJob (mean bytes).
    decision_bytes_per_job: f64,
    steady: Steady,
    /// In a shards mode: each replica, and the move after one died.
    shards: Option<Shards>,
    /// Spans the operator exported, and dropped, by the end of the steady
    /// period (0 without tracing).
    spans_exported: f64,
    spans_dropped: f64,
    memory: Vec<Sample>,
    /// `(seconds since the DataJobs were created, DataJobs converged)`.
    converged: Vec<(f64, usize)>,
}

/// The DataJobs' decision records: decisions and their bytes as JSON, each
/// a mean per DataJob.
async fn decision_record(client: &Client) -> anyhow::Result<(f64, f64)> {
    let api: Api<DataJob> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
    let jobs = api.list(&ListParams::default()).await?.items;
    let records: Vec<_> = jobs
        .iter()
        .map(|job| {
            job.status
                .as_ref()
                .map(|s| s.decisions.clone())
                .unwrap_or_default()
        })
        .collect();
    let count = records.len().max(1) as f64;
    let decisions = records.iter().map(Vec::len).sum::<usize>() as f64;
    let mut bytes = 0;
    for record in records.iter().filter(|record| !record.is_empty()) {
        bytes += serde_json::to_vec(record)?.len();
    }
    Ok((decisions / count, bytes as f64 / count))
}

async fn run_mode(
    args: &Args,
    kind: ServerKind,
    mode: &str,
    dir: &Path,
    clock: Instant,
) -> anyhow::Result<Run> {
    let mut run = Run {
        server: kind.name().to_owned(),
        mode: mode.to_owned(),
        ..Run::default()
    };
    let label = format!("{} {mode}", kind.name());
    let server = Started::start(kind, dir, mode).await?;
    let client = server.client.clone();
    log(
        clock,
        format_args!("{label}: loading {} foreign Pods", args.pods),
    );
    let (rate, first_create) = load_foreign_pods(&client, args.pods).await?;
    run.server_side.pods_per_second = rate;
    log(
        clock,
        format_args!("{label}: loaded at {rate:.0} creates/s"),
    );
    if kind == ServerKind::Real {
        wait_running(&client).await?;
        let after = first_create.elapsed().as_secs_f64();
        run.server_side.all_running_s = Some(after);
        log(
            clock,
            format_args!("{label}: all Running {after:.1} s after the first create"),
        );
    }
    run.server_side.rss_loaded_mib = server
        .memory()
        .into_iter()
        .map(|(program, (rss, _))| (program, rss))
        .collect();
    log(
        clock,
        format_args!(
            "{label}: server RSS with the Pods {:?} MiB; measuring patches, lists, watch",
            run.server_side.rss_loaded_mib
        ),
    );
    measure_server(&client, args, &mut run.server_side).await?;
    let side = &run.server_side;
    log(
        clock,
        format_args!(
            "{label}: {:.0} patches/s; list by 500 {:.2} s ({} pages, {:.0} MB), unpaginated {:.2} s ({:.0} MB); \
             watch p50 {:.2} ms p99 {:.2} ms",
            side.patches_per_second,
            side.list_paginated_s,
            side.list_pages,
            side.list_paginated_bytes as f64 / 1e6,
            side.list_full_s,
            side.list_full_bytes as f64 / 1e6,
            side.watch_p50_ms,
            side.watch_p99_ms
        ),
    );

    let jaeger = start_jaeger(mode, dir)?;
    let mark = server.mark();
    let started = Instant::now();
    let mut replicas = Vec::new();
    for i in 0..shard_count(mode).unwrap_or(1) {
        let on = (&server, jaeger.as_ref());
        replicas.push(spawn_operator(args, on, kind, mode, dir, i)?);
    }
    let mut others = replicas.split_off(1);
    let (operator, addr) = replicas.pop().context("one operator")?;
    let pid = operator.pid();
    let sampler = Sampler::start(pid, started);
    let memory = |pid| memory_mib(pid).unwrap_or((f64::NAN, f64::NAN));

    for addr in std::iter::once(&addr).chain(others.iter().map(|(_, addr)| addr)) {
        wait_for("the operator's /readyz", Duration::from_secs(900), || {
            let addr = addr.clone();
            async move { matches!(http_get(&addr, "/readyz").await, Ok((200, _))) }
        })
        .await?;
    }
    if shard_count(mode).is_some() {
        let addrs: Vec<String> = std::iter::once(addr.clone())
            .chain(others.iter().map(|(_, addr)| addr.clone()))
            .collect();
        wait_for(
            "the shards to serve every bucket",
            Duration::from_secs(300),
            || {
                let addrs = addrs.clone();
                async move { buckets_served(&addrs).await == 64.0 }
            },
        )
        .await?;
    }
    run.ready_s = started.elapsed().as_secs_f64();
    run.rss_ready_mib = memory(pid).0;
    log(
        clock,
        format_args!(
            "{label}: operator ready after {:.1} s, RSS {:.1} MiB",
            run.ready_s, run.rss_ready_mib
        ),
    );
    // Watch the DataJobs' status from before the first create.
    let t0 = Instant::now();
    run.jobs_created_at_s = started.elapsed().as_secs_f64();
    let (count_tx, mut count_rx) = tokio::sync::watch::channel(0usize);
    let done_at: Arc<Mutex<HashMap<String, f64>>> = Arc::default();
    let watch = tokio::spawn({
        let api: Api<DataJob> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
        let done_at = Arc::clone(&done_at);
        let replicas = args.replicas;
        async move {
            use kube::runtime::WatchStreamExt as _;
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(job) = stream.next().await {
                let Ok(job) = job else { continue };
                if converged(&job, replicas) {
                    let mut done = done_at.lock().unwrap_or_else(|e| e.into_inner());
                    done.entry(job.name_any())
                        .or_insert_with(|| t0.elapsed().as_secs_f64());
                    count_tx.send_replace(done.len());
                }
            }
        }
    });
    let created_at: HashMap<String, f64> = {
        let api: Api<DataJob> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
        futures::stream::iter(0..args.jobs)
            .map(|i| {
                let api = api.clone();
                async move {
                    let job = data_job(i, JOBS_NAMESPACE, args.replicas)?;
                    api.create(&PostParams::default(), &job)
                        .await
                        .context("create a DataJob")?;
                    anyhow::Ok((job.name_any(), t0.elapsed().as_secs_f64()))
                }
            })
            .buffer_unordered(64)
            .try_collect()
            .await?
    };
    run.create_s = t0.elapsed().as_secs_f64();
    log(
        clock,
        format_args!(
            "{label}: {} DataJobs created in {:.2} s",
            args.jobs, run.create_s
        ),
    );
    let jobs = args.jobs;
    tokio::time::timeout(Duration::from_secs(600), count_rx.wait_for(|n| *n >= jobs))
        .await
        .context("the DataJobs did not all converge within 600 s")??;
    run.converge_s = t0.elapsed().as_secs_f64();
    (run.rss_converged_mib, run.hwm_converged_mib) = memory(pid);
    run.cpu_converged_s = cpu_seconds(pid).unwrap_or(f64::NAN);
    watch.abort();
    let metrics = http_get(&addr, "/metrics").await?.1;
    let latency = histogram(&metrics, "policyhost_reconcile_latency_seconds");
    run.latency_p50_s = quantile(&latency, 0.5);
    run.latency_p99_s = quantile(&latency, 0.99);
    run.latency_count = latency.last().map_or(0.0, |b| b.1);
    run.reconciles = metric(&metrics, "policyhost_reconcile_total");
    run.requests = server.operator_requests(mark).await?;
    (run.decisions_per_job, run.decision_bytes_per_job) = decision_record(&client).await?;
    let pods = pod_count(&client).await?;
    ensure!(
        pods == args.pods + args.jobs * args.replicas,
        "{pods} Pods in the cluster at convergence"
    );
    {
        let done = done_at.lock().unwrap_or_else(|e| e.into_inner());
        let mut per_job: Vec<f64> = done
            .iter()
            .filter_map(|(name, at)| Some(at - created_at.get(name)?))
            .collect();
        per_job.sort_by(f64::total_cmp);
        run.job_latency_p50_s = percentile(&per_job, 0.5);
        run.job_latency_p99_s = percentile(&per_job, 0.99);
        let mut times: Vec<f64> = done.values().copied().collect();
        times.sort_by(f64::total_cmp);
        run.converged = std::iter::once((0.0, 0))
            .chain(times.iter().enumerate().map(|(i, t)| (*t, i + 1)))
            .collect();
    }
    log(
        clock,
        format_args!(
            "{label}: converged in {:.2} s; RSS {:.1} MiB (peak {:.1}); latency p50 {:.3} s p99 {:.3} s",
            run.converge_s,
            run.rss_converged_mib,
            run.hwm_converged_mib,
            run.latency_p50_s,
            run.latency_p99_s
        ),
    );

    // The steady state: nothing changes in the cluster; does anything grow?
    let requests_before = run.requests.clone();
    let steady_start = Instant::now();
    let mut steady = Steady {
        rss_start_mib: run.rss_converged_mib,
        ..Steady::default()
    };
    let reconciles_before = run.reconciles;
    while steady_start.elapsed() < Duration::from_secs(args.steady) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let metrics = http_get(&addr, "/metrics").await?.1;
        steady.queue_depth_max = steady
            .queue_depth_max
            .max(metric(&metrics, "policyhost_queue_depth"));
        steady.queue_delayed_max = steady
            .queue_delayed_max
            .max(metric(&metrics, "policyhost_queue_delayed"));
        steady.reconciles = metric(&metrics, "policyhost_reconcile_total") - reconciles_before;
        steady.rss_max_mib = steady.rss_max_mib.max(memory(pid).0);
    }
    steady.seconds = steady_start.elapsed().as_secs_f64();
    steady.rss_end_mib = memory(pid).0;
    // Read after the steady period: the batch processor exports every 5 s.
    let metrics = http_get(&addr, "/metrics").await?.1;
    run.spans_exported = metric(&metrics, "policyhost_trace_spans_exported_total");
    run.spans_dropped = metric(&metrics, "policyhost_trace_spans_dropped_total");
    steady.cpu_s = cpu_seconds(pid).unwrap_or(f64::NAN) - run.cpu_converged_s;
    let requests_after = server.operator_requests(mark).await?;
    let delta = |verb: &str| {
        requests_after.get(verb).copied().unwrap_or(0)
            - requests_before.get(verb).copied().unwrap_or(0)
    };
    steady.watch_requests = delta("watch");
    steady.list_requests = delta("list");
    log(
        clock,
        format_args!(
            "{label}: steady {:.0} s: RSS {:.1} -> {:.1} MiB (max {:.1}), queue depth max {}, \
             {} reconciles, {} watch and {} list requests",
            steady.seconds,
            steady.rss_start_mib,
            steady.rss_end_mib,
            steady.rss_max_mib,
            steady.queue_depth_max,
            steady.reconciles,
            steady.watch_requests,
            steady.list_requests
        ),
    );
    run.steady = steady;
    if shard_count(mode).is_some() {
        run.shards = Some(
            measure_shards(&server, &operator, &addr, &mut others, mark, &label, clock).await?,
        );
    }

    run.memory = sampler.stop();
    run.server_side.hwm_end_mib = server
        .memory()
        .into_iter()
        .map(|(program, (_, hwm))| (program, hwm))
        .collect();
    let _ = operator.stop(Duration::from_secs(20));
    for (other, _) in others {
        let _ = other.stop(Duration::from_secs(20));
    }
    server.stop();
    Ok(run)
}

/// Each replica's figures, then the SIGKILL of the last one and the time
/// until the others serve all its buckets.
async fn measure_shards(
    server: &Started,
    first: &Spawned,
    first_addr: &str,
    others: &mut Vec<(Spawned, String)>,
    mark: Option<Mark>,
    label: &str,
    clock: Instant,
) -> anyhow::Result<Shards> {
    let mut shards = Shards::default();
    let all = std::iter::once((first.pid(), first_addr.to_owned()))
        .chain(others.iter().map(|(s, addr)| (s.pid(), addr.clone())));
    for (pid, addr) in all {
        let metrics = http_get(&addr, "/metrics").await?.1;
        shards.replicas.push(Shard {
            rss_mib: memory_mib(pid).map_or(f64::NAN, |m| m.0),
            cpu_s: cpu_seconds(pid).unwrap_or(f64::NAN),
            buckets: metric(&metrics, "policyhost_shard_buckets"),
            datajobs: metric(&metrics, "policyhost_shard_datajobs"),
            reconciles: metric(&metrics, "policyhost_reconcile_total"),
        });
    }
    log(
        clock,
        format_args!("{label}: replicas {:?}", shards.replicas),
    );
    let Some((victim, _)) = others.pop() else {
        return Ok(shards);
    };
    let before = server.operator_requests(mark).await?;
    let killed = Instant::now();
    let _ = Command::new("kill")
        .args(["-KILL", &victim.pid().to_string()])
        .status();
    drop(victim);
    let addrs: Vec<String> = std::iter::once(first_addr.to_owned())
        .chain(others.iter().map(|(_, addr)| addr.clone()))
        .collect();
    // First the survivors still count the dead replica's buckets as its;
    // then they serve all 64.
    wait_for(
        "the survivors to serve every bucket",
        Duration::from_secs(300),
        || {
            let addrs = addrs.clone();
            async move { buckets_served(&addrs).await == 64.0 }
        },
    )
    .await?;
    shards.takeover_s = Some(killed.elapsed().as_secs_f64());
    let after = server.operator_requests(mark).await?;
    shards.takeover_requests = after
        .iter()
        .map(|(verb, n)| (verb.clone(), n - before.get(verb).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    log(
        clock,
        format_args!(
            "{label}: a killed replica's buckets served again after {:.1} s; requests {:?}",
            killed.elapsed().as_secs_f64(),
            shards.takeover_requests
        ),
    );
    Ok(shards)
}

// ---- the report ----

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Report {
    cpu_model: String,
    cores: usize,
    load_min: f64,
    load_max: f64,
    load_mean: f64,
    pods: usize,
    jobs: usize,
    replicas: usize,
    runs: Vec<Run>,
}

fn markdown(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let find = |server: &str, mode: &str| {
        report
            .runs
            .iter()
            .find(|r| r.server == server && r.mode == mode)
    };
    let _ = writeln!(
        out,
        "Machine: {} ({} cores); load average (1 min) during the run {:.2}–{:.2}, mean {:.2}.\n\
         Scenario: {} foreign Pods, {} DataJobs × {} children.\n",
        report.cpu_model,
        report.cores,
        report.load_min,
        report.load_max,
        report.load_mean,
        report.pods,
        report.jobs,
        report.replicas
    );
    let _ = writeln!(
        out,
        "| figure | {} |",
        report
            .runs
            .iter()
            .map(column)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(report.runs.len()));
    let row = |out: &mut String, name: &str, cell: &dyn Fn(&Run) -> String| {
        let cells: Vec<String> = report.runs.iter().map(cell).collect();
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    };
    row(&mut out, "operator ready after (s)", &|r| {
        format!("{:.1}", r.ready_s)
    });
    row(&mut out, "RSS when ready (MiB)", &|r| {
        format!("{:.1}", r.rss_ready_mib)
    });
    row(&mut out, "RSS after convergence (MiB)", &|r| {
        format!("{:.1}", r.rss_converged_mib)
    });
    row(&mut out, "peak RSS, VmHWM (MiB)", &|r| {
        format!("{:.1}", r.hwm_converged_mib)
    });
    row(&mut out, "DataJobs created in (s)", &|r| {
        format!("{:.2}", r.create_s)
    });
    row(&mut out, "all converged after (s)", &|r| {
        format!("{:.2}", r.converge_s)
    });
    row(&mut out, "reconcile latency p50 / p99 (s)", &|r| {
        format!("{:.3} / {:.3}", r.latency_p50_s, r.latency_p99_s)
    });
    row(&mut out, "reconciles (latency samples)", &|r| {
        format!("{:.0} ({:.0})", r.reconciles, r.latency_count)
    });
    row(
        &mut out,
        "per DataJob, created → converged p50 / p99 (s)",
        &|r| format!("{:.3} / {:.3}", r.job_latency_p50_s, r.job_latency_p99_s),
    );
    row(&mut out, "decisions per DataJob, their JSON bytes", &|r| {
        format!(
            "{:.1}, {:.0} B",
            r.decisions_per_job, r.decision_bytes_per_job
        )
    });
    row(&mut out, "operator CPU until converged (s)", &|r| {
        format!("{:.1}", r.cpu_converged_s)
    });
    row(&mut out, "spans per DataJob (exported, dropped)", &|r| {
        let per_job = |n: f64| n / report.jobs.max(1) as f64;
        format!(
            "{:.1}, {:.1}",
            per_job(r.spans_exported),
            per_job(r.spans_dropped)
        )
    });
    row(&mut out, "operator requests until converged", &|r| {
        r.requests
            .iter()
            .map(|(verb, n)| format!("{verb} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    row(&mut out, "steady: seconds observed", &|r| {
        format!("{:.0}", r.steady.seconds)
    });
    row(&mut out, "steady: RSS start → end (max) (MiB)", &|r| {
        format!(
            "{:.1} → {:.1} ({:.1})",
            r.steady.rss_start_mib, r.steady.rss_end_mib, r.steady.rss_max_mib
        )
    });
    row(&mut out, "steady: queue depth max, delayed max", &|r| {
        format!(
            "{:.0}, {:.0}",
            r.steady.queue_depth_max, r.steady.queue_delayed_max
        )
    });
    row(
        &mut out,
        "steady: reconciles, watch requests, list requests",
        &|r| {
            format!(
                "{:.0}, {}, {}",
                r.steady.reconciles, r.steady.watch_requests, r.steady.list_requests
            )
        },
    );
    row(&mut out, "steady: operator CPU (s)", &|r| {
        format!("{:.2}", r.steady.cpu_s)
    });
    row(&mut out, "server RSS with the Pods loaded (MiB)", &|r| {
        processes(&r.server_side.rss_loaded_mib)
    });
    row(&mut out, "server peak RSS at the end, VmHWM (MiB)", &|r| {
        processes(&r.server_side.hwm_end_mib)
    });
    row(
        &mut out,
        "foreign Pods created at (creates/s, 64 in flight)",
        &|r| format!("{:.0}", r.server_side.pods_per_second),
    );
    row(&mut out, "foreign Pods all Running after (s)", &|r| {
        r.server_side
            .all_running_s
            .map_or("— (Pending)".to_owned(), |s| format!("{s:.1}"))
    });
    row(
        &mut out,
        "merge patches of a label (patches/s, 32 in flight)",
        &|r| {
            format!(
                "{:.0} ({} patches)",
                r.server_side.patches_per_second, r.server_side.patches
            )
        },
    );
    row(
        &mut out,
        "full list, paginated by 500 (s; pages, MB)",
        &|r| {
            let side = &r.server_side;
            format!(
                "{:.2}; {}, {:.0}",
                side.list_paginated_s,
                side.list_pages,
                side.list_paginated_bytes as f64 / 1e6
            )
        },
    );
    row(&mut out, "full list, unpaginated (s; MB)", &|r| {
        let side = &r.server_side;
        format!(
            "{:.2}; {:.0}",
            side.list_full_s,
            side.list_full_bytes as f64 / 1e6
        )
    });
    row(
        &mut out,
        "watch, write → event p50 / p99 (ms; writes)",
        &|r| {
            let side = &r.server_side;
            format!(
                "{:.2} / {:.2}; {}",
                side.watch_p50_ms, side.watch_p99_ms, side.watch_samples
            )
        },
    );
    for run in &report.runs {
        let Some(shards) = &run.shards else { continue };
        let _ = writeln!(
            out,
            "\n{}: each replica after convergence (the table's RSS and CPU are shard-0's)\n\n\
             | replica | RSS (MiB) | CPU (s) | buckets | DataJobs | reconciles |\n|---|---|---|---|---|---|",
            column(run)
        );
        for (i, shard) in shards.replicas.iter().enumerate() {
            let _ = writeln!(
                out,
                "| shard-{i} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} |",
                shard.rss_mib, shard.cpu_s, shard.buckets, shard.datajobs, shard.reconciles
            );
        }
        if let Some(takeover) = shards.takeover_s {
            let requests: Vec<String> = shards
                .takeover_requests
                .iter()
                .map(|(verb, n)| format!("{verb} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "\nThe last replica SIGKILLed: the others serve its buckets after {takeover:.1} s; \
                 the move cost {}.",
                requests.join(", ")
            );
        }
    }
    let mut servers: Vec<&str> = report.runs.iter().map(|r| r.server.as_str()).collect();
    servers.dedup();
    for server in servers {
        if let (Some(indexed), Some(naive)) = (find(server, "indexed"), find(server, "naive")) {
            let _ = writeln!(
                out,
                "\n{server}: naive / indexed, same run: RSS after convergence {:.1}×, peak RSS {:.1}×, \
                 convergence time {:.2}×, p99 latency {:.2}×.",
                naive.rss_converged_mib / indexed.rss_converged_mib,
                naive.hwm_converged_mib / indexed.hwm_converged_mib,
                naive.converge_s / indexed.converge_s,
                naive.latency_p99_s / indexed.latency_p99_s
            );
        }
    }
    out
}

/// A run's column heading: server and mode.
fn column(run: &Run) -> String {
    format!("{} {}", run.server, run.mode).trim().to_owned()
}

/// Memory of the server's processes: devcluster's, or etcd + kube-apiserver
/// (the API server's storage and serving) and then each other component.
fn processes(mib: &BTreeMap<String, f64>) -> String {
    let (Some(etcd), Some(apiserver)) = (mib.get("etcd"), mib.get("kube-apiserver")) else {
        return mib
            .iter()
            .map(|(program, m)| format!("{program} {m:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
    };
    let others: Vec<String> = mib
        .iter()
        .filter(|(program, _)| !matches!(program.as_str(), "etcd" | "kube-apiserver"))
        .map(|(program, m)| format!("{program} {m:.0}"))
        .collect();
    format!(
        "etcd + kube-apiserver {:.0} ({etcd:.0} + {apiserver:.0}); {}",
        etcd + apiserver,
        others.join(", ")
    )
}

fn color(run: &Run) -> RGBColor {
    match (run.server.as_str(), run.mode.as_str()) {
        ("real", "naive") => RGBColor(230, 140, 20),
        ("real", _) => RGBColor(20, 150, 90),
        (_, "naive") => RGBColor(200, 50, 40),
        (_, "unrecorded") => RGBColor(120, 120, 120),
        (_, mode) if trace_ratio(mode).is_some() => {
            let ratio = trace_ratio(mode).unwrap_or(1.0);
            RGBColor(40, 150 + (100.0 * ratio) as u8, 60)
        }
        (_, mode) if shard_count(mode).is_some() => {
            let n = shard_count(mode).unwrap_or(1) as u8;
            RGBColor(40 + 50 * n, 60, 160)
        }
        _ => RGBColor(30, 90, 200),
    }
}

/// RSS of both modes over time (log scale), and DataJobs converged over time.
fn plot(report: &Report, path: &Path) -> anyhow::Result<()> {
    let chart = plot::Chart {
        title: format!("{} DataJobs created at once", report.jobs),
        jobs: report.jobs,
        lines: report
            .runs
            .iter()
            .map(|run| plot::Line {
                name: column(run),
                color: color(run),
                memory: &run.memory,
                marks: vec![
                    (run.ready_s, "ready"),
                    (run.jobs_created_at_s + run.converge_s, "converged"),
                ],
                rss_note: format!("{:.0} MiB after convergence", run.rss_converged_mib),
                converged: &run.converged,
            })
            .collect(),
        rss_target: Some((64.0, "target: 64 MiB".into())),
        converge_target: Some((10.0, "target: 10 s".into())),
    };
    plot::draw(&chart, path)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    if let Some(recorded) = &args.plot_only {
        let report: Report = serde_json::from_slice(&std::fs::read(recorded)?)?;
        plot(&report, &recorded.with_extension("svg"))?;
        println!("{}", markdown(&report));
        return Ok(());
    }
    let clock = Instant::now();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("policyhost-scale-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("policies"))?;
    std::fs::copy(fanout_guest()?, dir.join("policies/fanout.wasm"))?;
    let sample = serde_json::to_vec(&foreign_pod(0, "00000000-0000-4000-8000-000000000000"))?.len();
    log(
        clock,
        format_args!(
            "{} foreign Pods of {sample} bytes, {} DataJobs × {}; logs in {}",
            args.pods,
            args.jobs,
            args.replicas,
            dir.display()
        ),
    );
    if args.servers.contains(&ServerKind::Real) {
        xtask()?;
    }
    let mut runs = Vec::new();
    for &server in &args.servers {
        for mode in &args.modes {
            runs.push(run_mode(&args, server, mode, &dir, clock).await?);
        }
    }
    let loads: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.memory.iter().map(|s| s.load))
        .filter(|l| l.is_finite())
        .collect();
    let report = Report {
        cpu_model: cpu_model(),
        cores: std::thread::available_parallelism().map_or(0, usize::from),
        load_min: loads.iter().copied().fold(f64::INFINITY, f64::min),
        load_max: loads.iter().copied().fold(0.0, f64::max),
        load_mean: loads.iter().sum::<f64>() / loads.len().max(1) as f64,
        pods: args.pods,
        jobs: args.jobs,
        replicas: args.replicas,
        runs,
    };
    std::fs::create_dir_all(&args.out)?;
    let json_path = args.out.join("operator-at-scale.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&report)?)?;
    plot(&report, &json_path.with_extension("svg"))?;
    println!("{}", markdown(&report));
    log(
        clock,
        format_args!("wrote {} and its .svg", json_path.display()),
    );
    Ok(())
}
