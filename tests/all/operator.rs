//! The operator end to end: a DataJob's children and status, self-healing,
//! pruning, suspend, guest faults, invalid params, retries with backoff, no
//! LIST on the reconcile path, and watches cut mid-stream.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt as _;
use policyhost::cache::ObjectKey;
use policyhost::metrics::PolicyResult;
use policyhost::operator::StreamingLists;
use serde_json::{Value, json};

use crate::common::cluster::{Env, OperatorSetup, condition, eventually, phase};
use crate::common::faults::FaultProxy;
use crate::common::load;

/// The annotations that make devcluster's simulated Pods run forever / fail.
const RUN_FOREVER: (&str, &str) = ("devcluster.policyhost.dev/run-seconds", "-1");
const EXIT_CODE: &str = "devcluster.policyhost.dev/exit-code";

fn fanout(replicas: u32, backoff_limit: u32) -> Value {
    json!({"replicas": replicas, "image": "busybox:1.36", "command": ["true"], "backoffLimit": backoff_limit})
}

fn fanout_forever(replicas: u32) -> Value {
    let mut params = fanout(replicas, 1);
    params["podAnnotations"] = json!({ RUN_FOREVER.0: RUN_FOREVER.1 });
    params
}

fn names(pods: &[k8s_openapi::api::core::v1::Pod]) -> Vec<String> {
    pods.iter().map(ResourceExt::name_any).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datajob_gets_owned_labelled_children_and_reaches_succeeded() {
    let env = Env::start(&["fanout"]).await;
    let job = env.create_job("etl", "fanout", fanout(3, 1)).await;
    let uid = job.uid().expect("a uid");

    let pods = env
        .wait_pods("etl", "three workers", |pods| pods.len() == 3)
        .await;
    assert_eq!(
        names(&pods),
        ["etl-worker-0", "etl-worker-1", "etl-worker-2"]
    );
    for pod in &pods {
        let owners = pod.owner_references();
        assert_eq!(
            owners.len(),
            1,
            "{}: exactly the DataJob owns it",
            pod.name_any()
        );
        assert_eq!(owners[0].uid, uid);
        assert_eq!(owners[0].kind, "DataJob");
        assert_eq!(owners[0].controller, Some(true));
        let labels = pod.labels();
        assert_eq!(labels["policyhost.dev/datajob"], "etl");
        assert_eq!(
            labels["policyhost.dev/managed-by"],
            format!("test-{}", env.namespace)
        );
        assert_eq!(pod.namespace().as_deref(), Some(env.namespace.as_str()));
    }

    let done = env
        .wait_job("etl", "phase Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    let status = done.status.as_ref().expect("a status");
    assert_eq!(status.observed_generation, done.metadata.generation);
    let policy = status.policy.as_ref().expect("the acting policy");
    assert_eq!(policy.name, "fanout");
    assert_eq!(policy.digest.len(), 64, "a SHA-256 digest");
    let children = status.children.as_ref().expect("children counts");
    assert_eq!((children.total, children.succeeded), (3, 3));
    assert_eq!(status.outputs.as_ref().expect("outputs")["succeeded"], 3);
    let ready = condition(&done, "Ready").expect("a Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Reconciled")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_converges_with_paginated_lists_too() {
    let mut setup = OperatorSetup::with(&["fanout"]);
    setup.streaming_lists = StreamingLists::Never;
    let env = Env::start_with(setup).await;
    env.create_job("paged", "fanout", fanout(2, 1)).await;
    env.wait_job("paged", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_converges_with_the_naive_cache_too() {
    let mut setup = OperatorSetup::with(&["fanout"]);
    setup.children = policyhost_naive_cache::watch::CACHING;
    let env = Env::start_with(setup).await;
    let foreign: Pod = serde_json::from_value(json!({
        "metadata": {"name": "foreign", "labels": {"app": "someone-else"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .expect("a Pod");
    env.pods()
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create a foreign Pod");
    env.create_job("scanned", "fanout", fanout(2, 1)).await;
    env.wait_job("scanned", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    // The naive cache holds what the indexed one never sees: the foreign Pod, whole.
    let children = &env.operator().shared.children;
    let naive = policyhost_naive_cache::watch::of(&**children).expect("the naive caches");
    let pods = naive
        .kinds()
        .iter()
        .find(|c| c.resource.kind == "Pod")
        .expect("a naive Pod cache");
    let key = ObjectKey::namespaced(env.namespace.as_str(), "foreign");
    eventually("the foreign Pod in the naive cache", || async {
        pods.store.get(&key).map(drop)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_pods_fail_the_datajob_past_its_backoff_limit() {
    let env = Env::start(&["fanout"]).await;
    // One worker, one failure tolerated: it fails, its replacement fails too.
    let mut params = fanout(1, 1);
    params["podAnnotations"] = json!({ EXIT_CODE: "1" });
    env.create_job("flaky", "fanout", params).await;

    let failed = env
        .wait_job("flaky", "phase Failed", |j| phase(j) == Some("Failed"))
        .await;
    let outputs = failed
        .status
        .as_ref()
        .and_then(|s| s.outputs.clone())
        .expect("outputs");
    assert!(
        outputs["failed"].as_u64().is_some_and(|n| n > 1),
        "more failures than the backoff limit of 1: {outputs:?}"
    );
    // The failed Pods stay as the record; one replacement was made first.
    let pods = env
        .wait_pods("flaky", "failed Pods kept", |p| p.len() >= 2)
        .await;
    assert!(
        names(&pods).iter().any(|n| n.contains("-r1")),
        "a replacement Pod was created: {:?}",
        names(&pods)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_deleted_by_someone_else_is_recreated() {
    let env = Env::start(&["fanout"]).await;
    env.create_job("heal", "fanout", fanout_forever(2)).await;
    let pods = env.wait_pods("heal", "two workers", |p| p.len() == 2).await;
    let first_uid = pods[0].uid().expect("uid");

    env.pods()
        .delete("heal-worker-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete a worker");
    env.wait_pods("heal", "worker-0 back with a new uid", |pods| {
        pods.iter().any(|p| {
            p.name_any() == "heal-worker-0"
                && p.uid() != Some(first_uid.clone())
                && p.metadata.deletion_timestamp.is_none()
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_params_change_the_desired_set_and_prune_the_rest() {
    let env = Env::start(&["fanout"]).await;
    env.create_job("shrink", "fanout", fanout_forever(3)).await;
    env.wait_pods("shrink", "three workers", |p| p.len() == 3)
        .await;

    env.patch_spec("shrink", json!({"params": {"replicas": 1}}))
        .await;
    let pods = env
        .wait_pods("shrink", "only worker-0 left", |p| p.len() == 1)
        .await;
    assert_eq!(names(&pods), ["shrink-worker-0"]);
    let job = env
        .wait_job("shrink", "status of generation 2", |j| {
            j.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
        })
        .await;
    assert_eq!(
        job.status.and_then(|s| s.outputs).expect("outputs")["desired"],
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scratch_claim_is_a_child_every_worker_mounts_and_it_goes_with_the_datajob() {
    let env = Env::start(&["fanout"]).await;
    if env.cluster.is_none() {
        // The real control plane binds claims (no provisioner): a volume
        // for this one, so that the scheduler places its workers.
        let volumes: Api<PersistentVolume> = Api::all(env.client.clone());
        let volume: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("scratch-{}", env.namespace)},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "hostPath": {"path": "/tmp/scratch"},
                     "claimRef": {"namespace": env.namespace, "name": "etl-scratch"}},
        }))
        .expect("a volume");
        volumes
            .create(&PostParams::default(), &volume)
            .await
            .expect("create the volume");
    }
    let mut params = fanout(2, 1);
    params["scratch"] = json!({"size": "1Gi"});
    let job = env.create_job("etl", "fanout", params).await;
    let uid = job.uid().expect("a uid");

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), &env.namespace);
    let claim = eventually("the scratch claim", || async {
        claims.get_opt("etl-scratch").await.ok().flatten()
    })
    .await;
    let owner = &claim.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (uid.as_str(), Some(true))
    );
    assert_eq!(claim.labels()["policyhost.dev/datajob"], "etl");
    let spec = claim.spec.as_ref().expect("a spec");
    assert_eq!(
        spec.access_modes.as_deref(),
        Some(&["ReadWriteMany".to_owned()][..])
    );
    let requests = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    assert_eq!(requests.map(|r| r["storage"].0.as_str()), Some("1Gi"));

    let pods = env
        .wait_pods("etl", "two workers", |pods| pods.len() == 2)
        .await;
    for pod in &pods {
        let spec = pod.spec.as_ref().expect("a spec");
        let volume = &spec.volumes.as_ref().expect("volumes")[0];
        let source = volume.persistent_volume_claim.as_ref().expect("a claim");
        assert_eq!(
            (volume.name.as_str(), source.claim_name.as_str()),
            ("scratch", "etl-scratch")
        );
        let mount = &spec.containers[0].volume_mounts.as_ref().expect("mounts")[0];
        assert_eq!(
            (mount.name.as_str(), mount.mount_path.as_str()),
            ("scratch", "/scratch")
        );
    }
    let done = env
        .wait_job("etl", "phase Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    let children = done
        .status
        .and_then(|s| s.children)
        .expect("children counts");
    assert_eq!(children.total, 3, "two workers and the claim");

    // The cleanup waits for the workers, never for the claim, which goes
    // with them.
    env.jobs()
        .delete("etl", &DeleteParams::default())
        .await
        .expect("delete the DataJob");
    eventually("the DataJob and its claim gone", || async {
        let job = env.jobs().get_opt("etl").await.ok()?;
        let claim = claims.get_opt("etl-scratch").await.ok()?;
        (job.is_none() && claim.is_none()).then_some(())
    })
    .await;
    if env.cluster.is_none() {
        let volumes: Api<PersistentVolume> = Api::all(env.client.clone());
        let name = format!("scratch-{}", env.namespace);
        volumes
            .delete(&name, &DeleteParams::default())
            .await
            .expect("delete the volume");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_datajob_creates_no_children_until_resumed() {
    let env = Env::start(&["fanout"]).await;
    let mut job = policyhost::crd::DataJob::new(
        "paused",
        policyhost::crd::DataJobSpec {
            policy: "fanout".into(),
            params: match fanout_forever(2) {
                Value::Object(map) => map,
                _ => unreachable!("fanout params are an object"),
            },
            suspend: true,
            cleanup: None,
        },
    );
    job.metadata.namespace = Some(env.namespace.clone());
    env.jobs()
        .create(&Default::default(), &job)
        .await
        .expect("create");
    let suspended = env
        .wait_job("paused", "condition Suspended", |j| {
            condition(j, "Suspended").is_some_and(|c| c.status == "True")
        })
        .await;
    assert!(
        condition(&suspended, "Ready").is_none(),
        "the policy was not called"
    );
    let pods = env
        .pods()
        .list(&ListParams::default().labels("policyhost.dev/datajob=paused"))
        .await
        .expect("list");
    assert!(pods.items.is_empty(), "no child while suspended");

    env.patch_spec("paused", json!({"suspend": false})).await;
    env.wait_pods("paused", "workers after resuming", |p| p.len() == 2)
        .await;
    let resumed = env
        .wait_job("paused", "Suspended condition gone", |j| {
            condition(j, "Suspended").is_none()
        })
        .await;
    assert!(condition(&resumed, "Ready").is_some());
}

/// Each adversarial guest and the reasons its fault may be reported with.
const FAULTS: &[(&str, &[&str])] = &[
    ("panics", &["Trap"]),
    ("infinite-loop", &["DeadlineExceeded", "OutOfFuel"]),
    ("memory-hog", &["MemoryLimitExceeded"]),
    ("deep-recursion", &["Trap"]),
    ("huge-output", &["OutputTooLarge", "MemoryLimitExceeded"]),
    ("malformed-manifest", &["InvalidOutput"]),
    ("foreign-namespace", &["InvalidOutput"]),
    ("forbidden-kind", &["InvalidOutput"]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_guest_fault_is_a_condition_and_a_warning_event_and_nothing_is_applied() {
    let mut policies: Vec<&str> = FAULTS.iter().map(|(policy, _)| *policy).collect();
    policies.push("fanout");
    let env = Env::start(&policies).await;
    for (policy, _) in FAULTS {
        env.create_job(policy, policy, json!({})).await;
    }
    env.create_job("healthy", "fanout", fanout(2, 1)).await;

    for (policy, reasons) in FAULTS {
        let job = env
            .wait_job(policy, "Ready=False", |j| {
                condition(j, "Ready").is_some_and(|c| c.status == "False")
            })
            .await;
        let ready = condition(&job, "Ready").expect("Ready");
        assert!(
            reasons.contains(&ready.reason.as_str()),
            "{policy}: reason {} is not one of {reasons:?} ({})",
            ready.reason,
            ready.message
        );
        assert!(
            !ready.message.is_empty(),
            "{policy}: the message explains the fault"
        );
    }
    // Every fault was also recorded as a warning Event on its DataJob.
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let warned: BTreeSet<String> = eventually("a warning Event per faulty DataJob", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let warned: BTreeSet<String> = list
                .items
                .iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| e.involved_object.name.clone())
                .collect();
            FAULTS
                .iter()
                .all(|(policy, _)| warned.contains(*policy))
                .then_some(warned)
        }
    })
    .await;
    assert!(!warned.contains("healthy"));

    // The healthy DataJob converged meanwhile, and no faulty one got a child.
    env.wait_job("healthy", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    for kind_list in [
        env.pods()
            .list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .iter()
            .map(|p| p.labels().get("policyhost.dev/datajob").cloned())
            .collect::<Vec<_>>(),
        Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
            .list(&ListParams::default())
            .await
            .expect("configmaps")
            .items
            .iter()
            .map(|c| c.labels().get("policyhost.dev/datajob").cloned())
            .collect(),
    ] {
        for owner in kind_list.into_iter().flatten() {
            assert_eq!(owner, "healthy", "a faulty policy's output was applied");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reconciles_are_retried_with_growing_intervals() {
    let mut setup = OperatorSetup::with(&["panics"]);
    setup.backoff.base = Duration::from_millis(100);
    let env = Env::start_with(setup).await;
    env.create_job("crashy", "panics", json!({})).await;

    let counter = env
        .operator()
        .metrics
        .reconcile_total
        .get_or_create(&PolicyResult {
            policy: "panics".into(),
            result: "Trap".into(),
        })
        .clone();
    let mut seen = 0;
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while times.len() < 5 {
        assert!(
            Instant::now() < deadline,
            "only {} attempts in 30 s",
            times.len()
        );
        let now = counter.get();
        if now > seen {
            seen = now;
            times.push(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let intervals: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // Each wait is at least the doubling backoff (100, 200, 400, 800 ms, less
    // the 5 ms polling grain); the time a reconcile takes only adds to it.
    for (i, interval) in intervals.iter().enumerate() {
        let backoff = Duration::from_millis(100 << i);
        assert!(
            *interval + Duration::from_millis(10) >= backoff,
            "attempt {} came after {interval:?}, before its backoff of {backoff:?}: {intervals:?}",
            i + 2
        );
    }
    assert!(
        intervals.windows(2).all(|pair| pair[1] > pair[0]),
        "retry intervals grow: {intervals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_params_get_a_condition_naming_the_field() {
    let env = Env::start(&["fanout"]).await;
    env.create_job(
        "typo",
        "fanout",
        json!({"replicas": "three", "image": "busybox:1.36"}),
    )
    .await;
    let job = env
        .wait_job("typo", "Ready=False", |j| {
            condition(j, "Ready").is_some_and(|c| c.status == "False")
        })
        .await;
    let ready = condition(&job, "Ready").expect("Ready");
    assert_eq!(ready.reason, "InvalidParams");
    assert!(
        ready.message.contains("params.replicas"),
        "{}",
        ready.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconcile_path_issues_no_list_requests() {
    let env = Env::start(&["fanout"]).await;
    let Some(log) = env.requests() else {
        eprintln!("skipped: no request log (devcluster's, or an audit log)");
        return;
    };
    let since = log.mark();
    let operator = |verb: &str| {
        log.operator_since(since, &env.namespace)
            .iter()
            .filter(|r| r.verb == verb)
            .count()
    };
    for i in 0..5 {
        env.create_job(&format!("job-{i}"), "fanout", fanout(2, 1))
            .await;
    }
    for i in 0..5 {
        env.wait_job(&format!("job-{i}"), "Succeeded", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
    }
    assert!(
        operator("patch") > 0,
        "the operator did write (children, status)"
    );
    assert_eq!(operator("list"), 0, "the operator listed during reconciles");
}

/// Children that change within the settle window (`--child-settle`) are
/// answered by one call and one status write: five workers that finish
/// together move their DataJob to Succeeded at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_changing_together_cost_one_status_write() {
    let env = Env::start(&["fanout"]).await;
    let Some(log) = env.requests() else {
        eprintln!("skipped: no request log (devcluster's, or an audit log)");
        return;
    };
    env.create_job("batch", "fanout", fanout_forever(5)).await;
    env.wait_job("batch", "five workers Running", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.children.as_ref())
            .is_some_and(|c| c.running == 5)
    })
    .await;
    env.wait_idle().await;
    let since = log.mark();
    // Every worker exits at once, as a kubelet (or kwok) reports it.
    let pods = env.wait_pods("batch", "five", |p| p.len() == 5).await;
    let api = env.pods();
    futures::future::try_join_all(pods.iter().map(|pod| {
        let api = &api;
        async move {
            let exited = load::exited(pod)?;
            api.patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(exited),
            )
            .await?;
            anyhow::Ok(())
        }
    }))
    .await
    .expect("the workers' exits");
    env.wait_job("batch", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    env.wait_idle().await;
    let writes: Vec<String> = log
        .operator_since(since, &env.namespace)
        .into_iter()
        .filter(|r| r.resource == "datajobs" && r.subresource == "status")
        .map(|r| format!("{} {}", r.verb, r.name))
        .collect();
    assert_eq!(writes, ["patch batch"], "one status write for five changes");
}

/// The echoes of a new DataJob's own creates wait out the settle window;
/// its Pods' starts only until they go quiet. With a window of two minutes,
/// longer than the test waits, the DataJob is Running all the same, and
/// its first status already counts a started Pod: none was written for
/// Pods only created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_starting_are_answered_once_quiet_not_a_window_after_their_creation() {
    let env = Env::start_with(OperatorSetup {
        child_settle: Some(Duration::from_secs(120)),
        ..OperatorSetup::with(&["fanout"])
    })
    .await;
    let first_status = {
        let config = kube::runtime::watcher::Config::default().fields("metadata.name=batch");
        let statuses = kube::runtime::watcher(env.jobs(), config)
            .applied_objects()
            .try_filter_map(|job| async move { Ok(job.status.and_then(|s| s.children)) });
        tokio::spawn(async move {
            futures::pin_mut!(statuses);
            statuses.try_next().await
        })
    };
    env.create_job("batch", "fanout", fanout_forever(5)).await;
    env.wait_job(
        "batch",
        "five workers Running, well within the window",
        |j| {
            j.status
                .as_ref()
                .and_then(|s| s.children.as_ref())
                .is_some_and(|c| c.running == 5)
        },
    )
    .await;
    let first = first_status
        .await
        .expect("the status watch")
        .expect("the watch")
        .expect("a status");
    assert!(
        first.running > 0,
        "the first status written counts a started Pod: {first:?}"
    );
}

/// Watches cut mid-stream (a dropped connection, an API server restarting)
/// are resumed from the last resourceVersion the operator saw: a DataJob
/// created while they were down is reconciled, and nothing is listed again.
/// The cuts come from a proxy between the operator and the API server, so
/// this holds on both servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_cut_mid_stream_are_resumed_without_a_relist_and_miss_nothing() {
    let mut env = Env::cluster_only().await;
    let proxy = FaultProxy::start(env.client_config()).await;
    env.start_operator(OperatorSetup {
        api: Some(proxy.config()),
        ..OperatorSetup::with(&["fanout"])
    })
    .await;
    let succeeded = |j: &policyhost::crd::DataJob| phase(j) == Some("Succeeded");
    env.create_job("before", "fanout", fanout(2, 1)).await;
    env.wait_job("before", "Succeeded", succeeded).await;
    let count = |verb: &str| proxy.passed().iter().filter(|t| t.verb == verb).count();
    let (lists, watches) = (count("list"), count("watch"));

    let cut = proxy.cut_watches();
    assert!(
        cut >= 2,
        "the operator's watches (DataJobs, children) were open: {cut}"
    );
    env.create_job("after", "fanout", fanout(2, 1)).await;
    env.wait_job("after", "Succeeded", succeeded).await;
    assert!(
        count("watch") >= watches + cut,
        "each cut watch was opened again ({watches} before, {} now, {cut} cut)",
        count("watch")
    );
    assert_eq!(count("list"), lists, "a cut watch was resumed by a relist");
}
