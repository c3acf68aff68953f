//! Pod simulation.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

use devcluster::{Config, PodSimulation};

use crate::common::{eventually, start_with};

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
