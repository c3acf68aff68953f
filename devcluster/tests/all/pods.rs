//! Pod simulation.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use devcluster::{Config, PodSimulation};

use crate::common::{eventually, start, start_with};

fn pod(name: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap()
}

async fn phase(api: &Api<Pod>, name: &str) -> String {
    api.get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
        .unwrap_or_default()
}

#[tokio::test]
async fn simulated_pods_run_then_succeed_or_fail_with_their_exit_code() {
    let c = start_with(Config {
        pods: Some(PodSimulation {
            schedule_delay: Duration::from_millis(10),
            start_delay: Duration::from_millis(50),
            run_time: Some(Duration::from_millis(500)),
            stop_delay: Duration::from_millis(50),
        }),
        ..Config::default()
    })
    .await;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &pod("ok", json!({})))
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    api.create(
        &PostParams::default(),
        &pod("bad", json!({devcluster::pods::EXIT_CODE_ANNOTATION: "3"})),
    )
    .await
    .unwrap();
    eventually("the pod runs", || async {
        phase(&api, "ok").await == "Running"
    })
    .await;
    let running = api.get("ok").await.unwrap();
    let st = running.status.unwrap();
    assert_eq!(
        running.spec.unwrap().node_name.as_deref(),
        Some(devcluster::pods::NODE_NAME)
    );
    assert!(st.pod_ip.is_some() && st.start_time.is_some());
    let conds: Vec<(String, String)> = st
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(
            conds.contains(&(t.to_owned(), "True".to_owned())),
            "{t} in {conds:?}"
        );
    }
    assert!(st.container_statuses.unwrap()[0].ready);
    eventually("the pod succeeds", || async {
        phase(&api, "ok").await == "Succeeded"
    })
    .await;
    eventually("the failing pod fails", || async {
        phase(&api, "bad").await == "Failed"
    })
    .await;
    let bad = api.get("bad").await.unwrap().status.unwrap();
    let term = bad.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 3);
    assert_eq!(term.reason.as_deref(), Some("Error"));
}

#[tokio::test]
async fn deleting_a_running_pod_is_graceful_and_the_kubelet_finishes_it() {
    let c = start_with(Config {
        pods: Some(PodSimulation {
            run_time: None,
            stop_delay: Duration::from_millis(300),
            ..PodSimulation::default()
        }),
        ..Config::default()
    })
    .await;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    api.create(&PostParams::default(), &pod("web", json!({})))
        .await
        .unwrap();
    eventually("the pod runs", || async {
        phase(&api, "web").await == "Running"
    })
    .await;
    let pending = api
        .delete("web", &Default::default())
        .await
        .unwrap()
        .left()
        .expect("terminating");
    assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(
        api.get_opt("web").await.unwrap().is_some(),
        "still terminating"
    );
    eventually("the kubelet removes it", || async {
        api.get_opt("web").await.unwrap().is_none()
    })
    .await;
    // A zero grace period deletes at once.
    api.create(&PostParams::default(), &pod("now", json!({})))
        .await
        .unwrap();
    eventually("the pod runs", || async {
        phase(&api, "now").await == "Running"
    })
    .await;
    let dp = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let gone = api.delete("now", &dp).await.unwrap();
    assert!(
        gone.is_left(),
        "a deleted Pod is answered with its last state"
    );
    assert!(api.get_opt("now").await.unwrap().is_none());
}

#[tokio::test]
async fn a_pods_generation_counts_its_spec_changes_and_the_start_of_its_deletion() {
    let c = start().await;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let generation = |p: Pod| p.metadata.generation;
    let mut p = pod("g", json!({}));
    p.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let created = api.create(&PostParams::default(), &p).await.unwrap();
    assert_eq!(generation(created), Some(1));
    let pp = PatchParams::default();
    let image = json!({"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}});
    let patched = api.patch("g", &pp, &Patch::Strategic(image)).await.unwrap();
    assert_eq!(generation(patched), Some(2), "a spec change");
    let status = json!({"status": {"message": "x"}});
    let patched = api
        .patch_status("g", &pp, &Patch::Merge(status))
        .await
        .unwrap();
    assert_eq!(generation(patched), Some(2), "a status change");
    let label = json!({"metadata": {"labels": {"a": "b"}}});
    let patched = api.patch("g", &pp, &Patch::Merge(label)).await.unwrap();
    assert_eq!(generation(patched), Some(2), "a metadata change");
    let deleting = api
        .delete("g", &Default::default())
        .await
        .unwrap()
        .left()
        .expect("held by its finalizer");
    assert_eq!(generation(deleting), Some(3), "the start of its deletion");
    let again = api.delete("g", &Default::default()).await.unwrap();
    assert_eq!(again.left().and_then(generation), Some(3), "once");
}

#[tokio::test]
async fn the_fields_admission_sets_on_a_new_pod_belong_to_no_manager() {
    let c = start().await;
    let api: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams {
        field_manager: Some("maker".into()),
        ..PostParams::default()
    };
    let created = api.create(&pp, &pod("a", json!({}))).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    assert_eq!(spec.priority, Some(0));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    assert_eq!(spec.tolerations.map(|t| t.len()), Some(2));
    let fields = created.metadata.managed_fields.unwrap();
    let [entry] = fields.as_slice() else {
        panic!("one manager: {fields:?}")
    };
    assert_eq!(entry.manager.as_deref(), Some("maker"));
    let owned = &entry.fields_v1.as_ref().unwrap().0["f:spec"];
    assert!(owned.get("f:restartPolicy").is_some(), "defaults are owned");
    let admitted = [
        "f:serviceAccountName",
        "f:priority",
        "f:preemptionPolicy",
        "f:tolerations",
    ];
    for admitted in admitted {
        assert!(owned.get(admitted).is_none(), "{admitted} in {owned}");
    }
}
