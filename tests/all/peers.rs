//! The peers of the benchmarks (`bench/peers/`), each mode on the real
//! control plane: ten `fanout` DataJobs run to `Succeeded` with the right
//! counts, then deleted, and gone once the peers released their finalizer.
//!
//! Real clusters only (kwok runs the workers there): on devcluster each test
//! says `skipped` and passes. The peers act on the `fanout` DataJobs of every
//! namespace they watch, and `naive` watches them all, so no policyhost
//! operator may run beside them: `cargo xtask test` runs this module alone,
//! first on its fresh control plane, and its tests take turns.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use policyhost::crd::DataJob;
use serde_json::json;
use tokio::sync::Mutex;

use crate::common::cluster::{Env, eventually, eventually_within, phase, real_kubeconfig};
use crate::common::peers::{FINALIZER, MANAGED_BY, Peers};
use crate::common::scratch;

/// DataJobs per mode.
const JOBS: usize = 10;

/// One mode at a time: `naive` would act on the others' DataJobs.
static TURN: Mutex<()> = Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_runs_fanout_datajobs_to_succeeded_and_releases_them_when_deleted() {
    runs_and_releases("naive").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_runs_fanout_datajobs_to_succeeded_and_releases_them_when_deleted() {
    runs_and_releases("indexed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_runs_fanout_datajobs_to_succeeded_and_releases_them_when_deleted() {
    runs_and_releases("best").await;
}

/// Replicas of DataJob `i`: 1 to 3, so that each DataJob's counts are its own.
fn replicas(i: usize) -> u32 {
    1 + (i % 3) as u32
}

fn name(i: usize) -> String {
    format!("peers-{i}")
}

async fn runs_and_releases(mode: &str) {
    if real_kubeconfig().is_none() {
        eprintln!("skipped: needs a real cluster (POLICYHOST_TEST_KUBECONFIG)");
        return;
    }
    let _turn = TURN.lock().await;
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let log = scratch().join(format!("peers-{mode}-{}.log", env.namespace));
    let namespaces = match mode {
        "naive" => vec![],
        _ => vec![env.namespace.as_str()],
    };
    let mut peers = Peers::start(mode, &kubeconfig, &namespaces, &log);
    eventually_within(
        &format!("the peers ({mode}) to start their workers"),
        Duration::from_secs(120),
        || {
            let started = peers.started();
            let exited = (!peers.running()).then(|| peers.logs());
            async move {
                if let Some(logs) = exited {
                    panic!("the peers exited:\n{logs}");
                }
                started.then_some(())
            }
        },
    )
    .await;

    for i in 0..JOBS {
        // Workers finish after kwok's default 0.6 s.
        let params = json!({"replicas": replicas(i), "image": "busybox:1.36", "command": ["true"]});
        env.create_job(&name(i), "fanout", params).await;
    }
    for i in 0..JOBS {
        let want = replicas(i);
        let job = env
            .wait_job(
                &name(i),
                &format!("Succeeded, {want} workers succeeded"),
                |job| {
                    phase(job) == Some("Succeeded")
                        && job.status.as_ref().is_some_and(|s| {
                            s.observed_generation == job.metadata.generation
                                && s.children.as_ref().is_some_and(|c| {
                                    c.total == want && c.succeeded == want && c.failed == 0
                                })
                        })
                },
            )
            .await;
        assert!(
            job.finalizers().iter().any(|f| f == FINALIZER),
            "{} holds the peers' finalizer: {:?}",
            name(i),
            job.finalizers()
        );
        let pods = env
            .pods()
            .list(&ListParams::default().labels(&format!("policyhost.dev/datajob={}", name(i))))
            .await
            .expect("list the workers");
        let mut names: Vec<String> = pods.items.iter().map(ResourceExt::name_any).collect();
        names.sort();
        let expected: Vec<String> = (0..want)
            .map(|w| format!("{}-worker-{w}", name(i)))
            .collect();
        assert_eq!(names, expected, "the workers of {}", name(i));
        for pod in &pods.items {
            assert_controlled(pod, &job);
        }
    }

    for i in 0..JOBS {
        env.jobs()
            .delete(&name(i), &DeleteParams::default())
            .await
            .expect("delete a DataJob");
    }
    let jobs = env.jobs();
    eventually("every DataJob gone, its finalizer released", || {
        let jobs = jobs.clone();
        async move {
            jobs.list_metadata(&ListParams::default())
                .await
                .ok()
                .filter(|list| list.items.is_empty())
                .map(drop)
        }
    })
    .await;
    let logs = peers.logs();
    assert!(
        peers.stop(Duration::from_secs(10)),
        "the peers stop on SIGTERM:\n{logs}"
    );
}

/// The Pod is the peers' child of `job`: controlled by it and labelled.
fn assert_controlled(pod: &Pod, job: &DataJob) {
    let controller = pod
        .owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true))
        .unwrap_or_else(|| panic!("{} has a controller", pod.name_any()));
    assert_eq!(
        (
            controller.kind.as_str(),
            controller.name.as_str(),
            &controller.uid
        ),
        (
            "DataJob",
            job.name_any().as_str(),
            job.uid().as_ref().expect("a uid")
        ),
        "the controller of {}",
        pod.name_any()
    );
    assert_eq!(
        pod.labels()
            .get("policyhost.dev/managed-by")
            .map(String::as_str),
        Some(MANAGED_BY),
        "{} is labelled as the peers'",
        pod.name_any()
    );
}
