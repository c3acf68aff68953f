//! Fault injection and request counters.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use devcluster::{ErrorRule, Faults};

use crate::common::{eventually_within, start};

#[tokio::test]
async fn a_watcher_converges_with_twenty_percent_server_errors() {
    let c = start().await;
    for i in 0..20 {
        c.cm("default", &format!("cm-{i}"), json!({})).await;
    }
    let rule = |verb: &str| ErrorRule {
        verb: Some(verb.into()),
        resource: Some("configmaps".into()),
        rate: 0.2,
        code: 500,
        retry_after_seconds: None,
    };
    c.dc.faults().set(Faults {
        errors: vec![rule("list"), rule("watch")],
        watch_cut_seconds: Some(1),
        ..Faults::default()
    });
    c.dc.counters().reset();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let task = tokio::spawn(
        reflector(
            writer,
            watcher(c.cms("default"), watcher::Config::default()),
        )
        .default_backoff()
        .for_each(|_| async {}),
    );
    // Changes keep coming while lists and watches fail and watches are cut.
    for i in 20..40 {
        c.cm("default", &format!("cm-{i}"), json!({})).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually_within(
        "the watcher sees all 40 objects",
        Duration::from_secs(30),
        || async { reader.state().len() == 40 },
    )
    .await;
    task.abort();
    let attempts =
        c.dc.counters().count("list", "configmaps") + c.dc.counters().count("watch", "configmaps");
    assert!(
        attempts >= 3,
        "watches were cut and retried ({attempts} list/watch requests)"
    );
    c.dc.faults().clear();
}

#[tokio::test]
async fn injected_errors_have_kubernetes_shapes() {
    let c = start().await;
    c.dc.faults().set(Faults {
        errors: vec![ErrorRule {
            verb: Some("get".into()),
            resource: Some("configmaps".into()),
            rate: 1.0,
            code: 429,
            retry_after_seconds: Some(3),
        }],
        ..Faults::default()
    });
    // Without kube's own retries, to see the first answer.
    let mut config = c.dc.client_config().unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let req = axum::http::Request::get("/api/v1/namespaces/default/configmaps/x")
        .body(Vec::new())
        .unwrap();
    let resp = client.send(req.map(Into::into)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    c.dc.faults().set(Faults {
        errors: vec![ErrorRule {
            verb: Some("list".into()),
            resource: None,
            rate: 1.0,
            code: 500,
            retry_after_seconds: None,
        }],
        ..Faults::default()
    });
    let e = crate::common::api_error(
        c.cms("default")
            .list(&Default::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    assert_eq!(e.reason, "InternalError");
    c.dc.faults().clear();
    assert!(c.cms("default").list(&Default::default()).await.is_ok());
}

#[tokio::test]
async fn counters_record_verb_resource_and_client() {
    let c = start().await;
    c.dc.counters().reset();
    c.cm("default", "a", json!({})).await;
    c.cms("default").get("a").await.unwrap();
    c.cms("default").get("a").await.unwrap();
    assert_eq!(c.dc.counters().count("create", "configmaps"), 1);
    assert_eq!(c.dc.counters().count("get", "configmaps"), 2);
    assert_eq!(c.dc.counters().count("list", "configmaps"), 0);
    let reqs = c.dc.counters().requests();
    assert!(
        reqs.iter()
            .all(|r| r.identity == devcluster::kubeconfig::TOKEN)
    );
    assert_eq!(reqs[1].name, "a");
    assert_eq!(reqs[1].namespace, "default");
    let req = axum::http::Request::get("/api/v1/namespaces/default/configmaps")
        .header("user-agent", "policyhost/0.1 (reconciler)")
        .body(Vec::new())
        .unwrap();
    c.client.send(req.map(Into::into)).await.unwrap();
    let last = c.dc.counters().requests().pop().unwrap();
    assert_eq!(
        (last.verb.as_str(), last.user_agent.as_str()),
        ("list", "policyhost/0.1 (reconciler)")
    );
    let by_agent = c.dc.counters().snapshot();
    assert!(
        by_agent
            .iter()
            .any(|(k, n)| k.verb == "list" && k.user_agent.starts_with("policyhost/") && *n == 1)
    );
}

#[tokio::test]
async fn faults_are_switchable_through_the_admin_endpoint() {
    let c = start().await;
    let body =
        json!({"errors": [{"verb": "list", "resource": "configmaps", "rate": 1.0, "code": 500}]});
    let req = axum::http::Request::put("/devcluster/v1/faults")
        .header("content-type", "application/json")
        .body(body.to_string().into_bytes())
        .unwrap();
    let resp = c.client.send(req.map(Into::into)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(c.dc.faults().get().errors.len(), 1);
    assert!(c.cms("default").list(&Default::default()).await.is_err());
    let req = axum::http::Request::delete("/devcluster/v1/faults")
        .body(Vec::new())
        .unwrap();
    c.client.send(req.map(Into::into)).await.unwrap();
    assert!(c.cms("default").list(&Default::default()).await.is_ok());
}

#[tokio::test]
async fn added_latency_delays_api_requests() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    c.dc.faults().set(Faults {
        latency_ms: 1000,
        ..Faults::default()
    });
    let started = std::time::Instant::now();
    c.cms("default").get("a").await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
    c.dc.faults().clear();
    let started = std::time::Instant::now();
    c.cms("default").get("a").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_partitioned_client_is_neither_served_nor_recorded_while_others_are() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    // A second client presenting its own identity.
    let mut config = c.dc.client_config().unwrap();
    config.auth_info.token = Some("system:serviceaccount:ops:cut-off".to_owned().into());
    config.default_retry = false;
    let cut_off = kube::Client::try_from(config).unwrap();
    let cut_off_cms: kube::Api<ConfigMap> = kube::Api::namespaced(cut_off, "default");
    assert!(cut_off_cms.get("a").await.is_ok());
    c.dc.faults().set(Faults {
        partitioned: vec!["system:serviceaccount:ops:cut-off".into()],
        ..Faults::default()
    });
    c.dc.counters().reset();
    let e = crate::common::api_error(cut_off_cms.get("a").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
    assert!(c.cms("default").get("a").await.is_ok(), "others are served");
    let seen: Vec<String> =
        c.dc.counters()
            .requests()
            .into_iter()
            .map(|r| r.identity)
            .collect();
    assert_eq!(seen, [devcluster::kubeconfig::TOKEN.to_owned()]);
    c.dc.faults().clear();
    assert!(cut_off_cms.get("a").await.is_ok(), "healed");
    let last = c.dc.counters().requests().pop().unwrap();
    assert_eq!(last.identity, "system:serviceaccount:ops:cut-off");
    assert!(last.seq > 1 && last.unix_micros > 0);
}
