//! The load of the scale benchmarks: foreign Pods kept Running by kwok
//! (`tests/common/foreign.rs`), `fanout` DataJobs whose workers run until
//! told otherwise, and when a DataJob has converged.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ListParams};
use policyhost::crd::DataJob;
use serde_json::{Value, json};

use super::control_plane::{KWOK_NODE, RUN_SECONDS};
use super::foreign;

/// Prints `message` to stderr after the seconds since `start`.
pub fn log(start: Instant, message: impl std::fmt::Display) {
    eprintln!("[{:7.1}s] {message}", start.elapsed().as_secs_f64());
}

/// Waits for `what` with a timeout, checking every 100 ms.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `POST`s `body` to `path` and returns the created object's UID; a refusal
/// (which comes back as a Status, not as an error) is an error.
pub async fn create_raw(client: &Client, path: String, body: &Value) -> anyhow::Result<String> {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body)?)?;
    let answer = client.request_text(request).await?;
    let created: Created = serde_json::from_str(&answer)?;
    match created.metadata.and_then(|m| m.uid) {
        Some(uid) if created.kind != "Status" => Ok(uid),
        _ => bail!("refused: {answer}"),
    }
}

/// The part of an answer [`create_raw`] reads; serde skips the rest.
#[derive(serde::Deserialize)]
pub struct Created {
    /// The answer's kind: the object's, or `Status` for a refusal.
    pub kind: String,
    /// Its metadata, if it is an object.
    pub metadata: Option<CreatedMeta>,
}

/// The part of an object's metadata [`Created`] reads.
#[derive(serde::Deserialize)]
pub struct CreatedMeta {
    /// The object's UID.
    pub uid: Option<String>,
}

/// Foreign Pod `i` as every server gets it: bound to kwok's Node (where the
/// real server's scheduler would put it) and annotated to run forever, so
/// that kwok keeps it Running.
pub fn foreign_pod(i: usize, owner_uid: &str) -> Value {
    let mut pod = foreign::pod(i, owner_uid);
    pod["spec"]["nodeName"] = json!(KWOK_NODE);
    pod["metadata"]["annotations"][RUN_SECONDS] = json!("-1");
    pod
}

/// Creates the foreign Pods' Deployments, then the Pods, with 64 requests
/// in flight; returns Pod creates/s and when the first Pod create was sent.
pub async fn load_foreign_pods(client: &Client, count: usize) -> anyhow::Result<(f64, Instant)> {
    let apps = count.div_ceil(foreign::PODS_PER_APP);
    let owners: Vec<String> = futures::stream::iter(0..apps)
        .map(|app| {
            let path = format!(
                "/apis/apps/v1/namespaces/{}/deployments",
                foreign::app_namespace(app)
            );
            async move {
                create_raw(client, path, &foreign::deployment(app))
                    .await
                    .context("create a foreign Deployment")
            }
        })
        .buffered(64)
        .try_collect()
        .await?;
    let start = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let path = format!("/api/v1/namespaces/{}/pods", foreign::namespace(i));
            let owner = &owners[foreign::app(i)];
            async move {
                create_raw(client, path, &foreign_pod(i, owner))
                    .await
                    .context("create a foreign Pod")
                    .map(drop)
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    let rate = count as f64 / start.elapsed().as_secs_f64();
    let listed = pod_count(client).await?;
    ensure!(
        listed == count,
        "{listed} Pods in the cluster after creating {count}"
    );
    Ok((rate, start))
}

/// Waits until every Pod is Running (kwok's stages on the real server).
pub async fn wait_running(client: &Client) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let others = ListParams::default()
        .fields("status.phase!=Running")
        .limit(1);
    wait_for("every Pod Running", Duration::from_secs(1800), || {
        let (pods, others) = (pods.clone(), others.clone());
        async move {
            // A selected list scans every Pod once few are left: not too often.
            tokio::time::sleep(Duration::from_secs(1)).await;
            pods.list_metadata(&others)
                .await
                .is_ok_and(|list| list.items.is_empty())
        }
    })
    .await
}

/// How many Pods the cluster holds (a list of one, and the remaining count).
pub async fn pod_count(client: &Client) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods.list_metadata(&ListParams::default().limit(1)).await?;
    let remaining = list.metadata.remaining_item_count.unwrap_or(0);
    Ok(list.items.len() + usize::try_from(remaining)?)
}

/// DataJob `job-<i>` of `namespace`: `fanout` with `replicas` workers that
/// run forever where Pods run (kwok on the real server), as the foreign Pods
/// do; devcluster's stay Pending.
pub fn data_job(i: usize, namespace: &str, replicas: usize) -> anyhow::Result<DataJob> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
        "metadata": {"name": format!("job-{i:04}"), "namespace": namespace},
        "spec": {"policy": "fanout", "params": {
            "replicas": replicas, "image": "busybox:1.36", "command": ["sleep", "3600"],
            "podAnnotations": {RUN_SECONDS: "-1"}}},
    }))?)
}

/// Status written for the current generation, counting every child.
pub fn converged(job: &DataJob, replicas: usize) -> bool {
    job.status.as_ref().is_some_and(|status| {
        status.phase.is_some()
            && status.observed_generation == job.metadata.generation
            && status
                .children
                .as_ref()
                .is_some_and(|c| c.total as usize == replicas)
    })
}

/// The status a kubelet (or kwok) writes when `pod`'s containers exit 0:
/// a merge patch of its `status` that ends a worker that runs until told
/// otherwise.
pub fn exited(pod: &Pod) -> anyhow::Result<Value> {
    let now = serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now()))?;
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .map(|c| {
            json!({"name": c.name, "image": c.image, "ready": false, "started": false,
                "restartCount": 0, "state": {"terminated": {
                    "exitCode": 0, "reason": "Completed", "finishedAt": now}}})
        })
        .collect();
    Ok(json!({"status": {
        "phase": "Succeeded",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
        ],
        "containerStatuses": containers,
    }}))
}
