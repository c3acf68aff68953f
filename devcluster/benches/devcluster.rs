//! devcluster benchmarks: `cargo bench -p devcluster`.
//!
//! Loads 50,000 realistic Pods (~4 KB each) through the HTTP API and measures the write
//! rate, the process RSS, a full list, a label-selected list of 100 (50), and the watch
//! fan-out latency to 10 watchers. Figures are printed as a Markdown table for
//! `docs/BENCHMARKS.md`. `DEVCLUSTER_BENCH_PODS` changes the Pod count.
//!
//! `DEVCLUSTER_BENCH_SHAPE` picks the Pods: `bench` (the default: one namespace, no
//! owners, labels `app`, `tier`, `group=g<i/100>`) or `foreign` (the operator scale
//! benchmark's Pods from `tests/common/foreign.rs`: five namespaces, each Pod owned by
//! one of its application's Deployments, fifty Pods per application, 64 creates in flight).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;

use devcluster::{Config, DevCluster};

/// The allocator the `devcluster` binary uses, so RSS is measured as it runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const WATCHERS: usize = 10;
const FANOUT_WRITES: usize = 300;

/// The operator scale benchmark's foreign Pods, the same file so the shapes cannot drift.
#[path = "../../tests/common/foreign.rs"]
mod foreign;

/// Which Pods the benchmark loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// [`pod`]: one namespace, no owners.
    Bench,
    /// [`foreign::pod`]: five namespaces, owned by Deployments.
    Foreign,
}

impl Shape {
    fn from_env() -> anyhow::Result<Self> {
        match std::env::var("DEVCLUSTER_BENCH_SHAPE").as_deref() {
            Err(_) | Ok("bench") => Ok(Self::Bench),
            Ok("foreign") => Ok(Self::Foreign),
            Ok(other) => anyhow::bail!("DEVCLUSTER_BENCH_SHAPE={other}: expected bench or foreign"),
        }
    }

    /// Creates in flight while loading.
    fn in_flight(self) -> usize {
        match self {
            Self::Bench => 32,
            Self::Foreign => 64,
        }
    }

    fn namespace(self, i: usize) -> &'static str {
        match self {
            Self::Bench => "default",
            Self::Foreign => foreign::namespace(i),
        }
    }

    fn name(self, i: usize) -> String {
        match self {
            Self::Bench => format!("pod-{i:06}"),
            Self::Foreign => foreign::name(i),
        }
    }

    fn manifest(self, i: usize, owners: &[String]) -> serde_json::Value {
        match self {
            Self::Bench => pod(i),
            Self::Foreign => foreign::pod(i, &owners[foreign::app(i)]),
        }
    }

    /// Label selector `n` of the selected-list runs and how many of `count` Pods it selects
    /// (all in the namespace of Pod [`Shape::first_selected`]).
    fn selection(self, n: usize, count: usize) -> (String, usize) {
        match self {
            Self::Bench => {
                let group = (n * 7) % count.div_ceil(100);
                (format!("group=g{group}"), (count - group * 100).min(100))
            }
            Self::Foreign => {
                let app = (n * 7) % count.div_ceil(foreign::PODS_PER_APP);
                (
                    format!("app.kubernetes.io/name=app-{app:04}"),
                    (count - app * foreign::PODS_PER_APP).min(foreign::PODS_PER_APP),
                )
            }
        }
    }

    /// The first Pod selected by [`Shape::selection`] `n`.
    fn first_selected(self, n: usize, count: usize) -> usize {
        match self {
            Self::Bench => (n * 7) % count.div_ceil(100) * 100,
            Self::Foreign => {
                (n * 7) % count.div_ceil(foreign::PODS_PER_APP) * foreign::PODS_PER_APP
            }
        }
    }
}

/// Creates the namespaces and owning Deployments the shape's Pods need; returns the
/// owners' uids by application.
async fn prepare(shape: Shape, client: &kube::Client, count: usize) -> anyhow::Result<Vec<String>> {
    if shape == Shape::Bench {
        return Ok(Vec::new());
    }
    for ns in foreign::NAMESPACES {
        create(
            client,
            "/api/v1/namespaces".into(),
            serde_json::to_vec(&json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    }
    futures::stream::iter(0..count.div_ceil(foreign::PODS_PER_APP))
        .map(|app| async move {
            let path = format!(
                "/apis/apps/v1/namespaces/{}/deployments",
                foreign::app_namespace(app)
            );
            let body = create(client, path, serde_json::to_vec(&foreign::deployment(app))?).await?;
            let created: serde_json::Value = serde_json::from_slice(&body)?;
            created["metadata"]["uid"]
                .as_str()
                .map(str::to_owned)
                .context("a created Deployment's uid")
        })
        .buffered(shape.in_flight())
        .try_collect()
        .await
}

/// `POST`s `body` to `path`, expecting 201; returns the answer.
async fn create(
    client: &kube::Client,
    path: String,
    body: Vec<u8>,
) -> anyhow::Result<bytes::Bytes> {
    let req = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(body)?;
    let resp = client.send(req.map(Into::into)).await.context("create")?;
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await?
        .to_bytes();
    anyhow::ensure!(
        status.as_u16() == 201,
        "create answered {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(body)
}

fn pod(i: usize) -> serde_json::Value {
    let env: Vec<_> = (0..12)
        .map(|e| json!({"name": format!("SETTING_{e}"), "value": format!("value-{i}-{e}-abcdefghijklmnop")}))
        .collect();
    let container = |name: &str| {
        json!({
            "name": name,
            "image": format!("registry.example.com/team/{name}:1.{}.{}", i % 17, i % 5),
            "imagePullPolicy": "IfNotPresent",
            "args": ["--port=8080", "--log-level=info", "--metrics-addr=:9090"],
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}, {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("pod-{i:06}"),
            "labels": {"app": "bench", "group": format!("g{}", i / 100), "tier": if i.is_multiple_of(2) { "web" } else { "worker" }, "pod-template-hash": "5d8f7c9b4"},
            "annotations": {"example.com/owner": "team-a", "example.com/description": "x".repeat(200)},
        },
        "spec": {
            "containers": [container("app"), container("sidecar")],
            "volumes": [{"name": "config", "configMap": {"name": "bench-config"}}, {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    })
}

fn rss_mb() -> f64 {
    policyhost_measure::memory(policyhost_measure::Process::This).map_or(0.0, |m| m.rss_mib)
}

/// The `q` quantile (nearest rank) of ascending samples.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    policyhost_measure::percentile(sorted, q).unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and only wants a smoke run.
    let full = std::env::args().any(|a| a == "--bench");
    let count: usize = std::env::var("DEVCLUSTER_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 50_000 } else { 500 });
    let cluster = DevCluster::start(Config {
        pods: None,
        watch_history: 10_000,
        ..Config::default()
    })
    .await?;
    let client = cluster.client()?;
    let shape = Shape::from_env()?;
    let rss_before = rss_mb();
    let owners = prepare(shape, &client, count).await?;
    let sample = serde_json::to_vec(&shape.manifest(0, &owners))?.len();

    // Writes: creates with 32 (64) requests in flight. Bodies are serialised up front and
    // responses read as bytes, so the figure is the server's, not the client's decoding.
    let bodies: Vec<(String, Vec<u8>)> = (0..count)
        .map(|i| {
            let path = format!("/api/v1/namespaces/{}/pods", shape.namespace(i));
            Ok((path, serde_json::to_vec(&shape.manifest(i, &owners))?))
        })
        .collect::<anyhow::Result<_>>()?;
    let start = Instant::now();
    futures::stream::iter(bodies)
        .map(|(path, body)| {
            let client = client.clone();
            async move { create(&client, path, body).await.map(drop) }
        })
        .buffer_unordered(shape.in_flight())
        .try_collect::<Vec<_>>()
        .await?;
    let load = start.elapsed();
    let writes_per_sec = count as f64 / load.as_secs_f64();
    let rss_loaded = rss_mb();

    // Full list, as bytes on the wire and as typed Pods.
    let start = Instant::now();
    let req = axum::http::Request::get("/api/v1/pods").body(Vec::new())?;
    let mut body = client.send(req.map(Into::into)).await?.into_body();
    let mut bytes = 0usize;
    while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len();
        }
    }
    let full_list_wire = start.elapsed();

    // Label-selected list of 100 (50 for the foreign shape).
    let mut selected_wire = Vec::new();
    for n in 0..50 {
        let (sel, expected) = shape.selection(n, count);
        let ns = shape.namespace(shape.first_selected(n, count));
        let start = Instant::now();
        let uri = format!(
            "/api/v1/namespaces/{ns}/pods?labelSelector={}",
            sel.replace('=', "%3D").replace('/', "%2F")
        );
        let req = axum::http::Request::get(uri).body(Vec::new())?;
        let resp = client.send(req.map(Into::into)).await?;
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await?
            .to_bytes();
        selected_wire.push(start.elapsed());
        anyhow::ensure!(
            body.len() > expected * 3000,
            "selected list is {} bytes",
            body.len()
        );
    }
    selected_wire.sort();
    let mut selected = Vec::new();
    for n in 0..50 {
        let (sel, expected) = shape.selection(n, count);
        let pods: Api<Pod> = Api::namespaced(
            client.clone(),
            shape.namespace(shape.first_selected(n, count)),
        );
        let start = Instant::now();
        let l = pods.list(&ListParams::default().labels(&sel)).await?;
        selected.push(start.elapsed());
        anyhow::ensure!(l.items.len() == expected, "selected {}", l.items.len());
    }
    selected.sort();

    // Watch fan-out: 10 watchers, each write's latency until every watcher has it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), shape.namespace(0));
    let (watched, group) = shape.selection(0, count);
    let rv = pods
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let sent: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; FANOUT_WRITES]));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut stream = pods
            .watch(&WatchParams::default().labels(&watched), &rv)
            .await?
            .boxed();
        let sent = sent.clone();
        let latencies = latencies.clone();
        watchers.push(tokio::spawn(async move {
            let mut seen = 0;
            while let Some(Ok(ev)) = stream.next().await {
                if let WatchEvent::Modified(p) = ev {
                    let now = Instant::now();
                    let seq: Option<usize> = p
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("bench/seq"))
                        .and_then(|s| s.parse().ok());
                    let at = seq
                        .and_then(|s| sent.lock().ok().and_then(|v| v.get(s).copied().flatten()));
                    if let (Some(at), Ok(mut l)) = (at, latencies.lock()) {
                        l.push(now - at);
                    }
                    seen += 1;
                    if seen == FANOUT_WRITES {
                        return;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for seq in 0..FANOUT_WRITES {
        let name = shape.name(seq % group);
        if let Ok(mut s) = sent.lock() {
            s[seq] = Some(Instant::now());
        }
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"bench/seq": seq.to_string()}}})),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for w in watchers {
        tokio::time::timeout(Duration::from_secs(30), w).await??;
    }
    let mut fanout = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    fanout.sort();

    // Sustained updates: merge patches with 32 in flight, responses read as bytes.
    let pods: Api<Pod> = Api::all(client.clone());
    let updates = count.min(10_000);
    let start = Instant::now();
    futures::stream::iter(0..updates)
        .map(|i| {
            let client = client.clone();
            async move {
                let req = axum::http::Request::patch(format!(
                    "/api/v1/namespaces/{}/pods/{}",
                    shape.namespace(i),
                    shape.name(i)
                ))
                .header("content-type", "application/merge-patch+json")
                .body(br#"{"metadata":{"labels":{"rev":"2"}}}"#.to_vec())?;
                let resp = client.send(req.map(Into::into)).await.context("patch")?;
                anyhow::ensure!(
                    resp.status().as_u16() == 200,
                    "patch answered {}",
                    resp.status()
                );
                http_body_util::BodyExt::collect(resp.into_body()).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let patches_per_sec = updates as f64 / start.elapsed().as_secs_f64();

    // Last, so the client's decoding does not disturb the server-side figures.
    let start = Instant::now();
    let listed = pods.list(&ListParams::default()).await?;
    let full_list_typed = start.elapsed();
    anyhow::ensure!(
        listed.items.len() == count,
        "listed {} of {count}",
        listed.items.len()
    );
    // Dropping 50,000 typed Pods takes a while; keep it off the server's threads.
    tokio::task::spawn_blocking(move || drop(listed)).await?;

    println!("| figure | target | measured |");
    println!("|---|---|---|");
    println!("Pod shape: {shape:?}");
    println!(
        "| Pods loaded (manifest {sample} B as sent, {:.1} KB stored with defaults and managedFields) | 50,000 | {count} |",
        bytes as f64 / count as f64 / 1000.0
    );
    println!(
        "| process RSS with the Pods loaded (before: {rss_before:.0} MB) | < 600 MB | {rss_loaded:.0} MB |"
    );
    println!(
        "| creates/s ({} in flight over HTTP, client in the same process) | ≥ 2,000 | {writes_per_sec:.0} |",
        shape.in_flight()
    );
    println!("| merge patches/s (32 in flight) | ≥ 2,000 | {patches_per_sec:.0} |");
    println!(
        "| full list, bytes received ({:.0} MB) | ≤ 2 s | {} |",
        bytes as f64 / 1e6,
        ms(full_list_wire)
    );
    println!(
        "| full list, decoded into k8s-openapi Pods | — | {} |",
        ms(full_list_typed)
    );
    println!(
        "| label-selected list of {}, bytes received, p50 / p99 (50 runs) | ≤ 20 ms | {} / {} |",
        shape.selection(0, count).1,
        ms(percentile(&selected_wire, 0.5)),
        ms(percentile(&selected_wire, 0.99))
    );
    println!(
        "| label-selected list of {}, decoded into k8s-openapi Pods, p50 / p99 | — | {} / {} |",
        shape.selection(0, count).1,
        ms(percentile(&selected, 0.5)),
        ms(percentile(&selected, 0.99))
    );
    println!(
        "| watch fan-out to {WATCHERS} watchers, write → event p50 / p99 ({} events) | ≤ 10 ms p99 | {} / {} |",
        fanout.len(),
        ms(percentile(&fanout, 0.5)),
        ms(percentile(&fanout, 0.99))
    );
    cluster.shutdown().await;
    Ok(())
}
