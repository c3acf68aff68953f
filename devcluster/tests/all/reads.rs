//! Lists: selectors, pagination, resourceVersion semantics, metadata-only and Table output.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams, VersionMatch};
use serde_json::json;

use crate::common::{api_error, start};

fn names(list: &[ConfigMap]) -> Vec<String> {
    let mut v: Vec<String> = list
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn label_selectors_support_every_operator() {
    let c = start().await;
    c.cm("default", "a", json!({"env": "prod", "tier": "web"}))
        .await;
    c.cm("default", "b", json!({"env": "dev", "tier": "web"}))
        .await;
    c.cm("default", "c", json!({"env": "staging"})).await;
    let api = c.cms("default");
    let sel = |s: &str| {
        let api = api.clone();
        let s = s.to_owned();
        async move {
            names(
                &api.list(&ListParams::default().labels(&s))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(sel("env=prod").await, ["a"]);
    assert_eq!(sel("env==prod").await, ["a"]);
    assert_eq!(sel("env!=prod").await, ["b", "c"]);
    assert_eq!(sel("env in (dev,staging)").await, ["b", "c"]);
    assert_eq!(sel("env notin (dev)").await, ["a", "c"]);
    assert_eq!(sel("tier").await, ["a", "b"]);
    assert_eq!(sel("!tier").await, ["c"]);
    assert_eq!(sel("tier=web,env=dev").await, ["b"]);
}

#[tokio::test]
async fn field_selectors_select_by_name_namespace_and_pod_phase() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    c.cm("default", "b", json!({})).await;
    let api = c.cms("default");
    let l = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(names(&l.items), ["b"]);
    let all: Api<ConfigMap> = Api::all(c.client.clone());
    let l = all
        .list(&ListParams::default().fields("metadata.namespace=default,metadata.name!=a"))
        .await
        .unwrap();
    assert_eq!(names(&l.items), ["b"]);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(
        pods.list(&ListParams::default().fields("status.phase=Pending"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        pods.list(&ListParams::default().fields("status.phase=Running"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );
    let e = api_error(
        api.list(&ListParams::default().fields("status.phase=Running"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "\"status.phase\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    let e = api_error(
        pods.list(&ListParams::default().fields("data.k=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.message, "field label not supported: data.k");
}

#[tokio::test]
async fn pagination_returns_a_consistent_snapshot() {
    let c = start().await;
    for i in 0..25 {
        c.cm("default", &format!("cm-{i:02}"), json!({})).await;
    }
    let api = c.cms("default");
    let first = api.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(first.metadata.remaining_item_count, Some(15));
    let rv = first.metadata.resource_version.clone();
    // Changes after the first page do not show up in the later pages.
    c.cm("default", "cm-99", json!({})).await;
    api.delete("cm-15", &Default::default()).await.unwrap();
    let mut seen = names(&first.items);
    let mut token = first.metadata.continue_;
    while let Some(t) = token {
        let page = api
            .list(&ListParams::default().limit(10).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(page.metadata.resource_version, rv);
        seen.extend(names(&page.items));
        token = page.metadata.continue_;
    }
    let want: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(seen, want);
    let fresh = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(fresh.items.len(), 25);
    assert!(names(&fresh.items).contains(&"cm-99".to_owned()));
}

#[tokio::test]
async fn exact_resource_version_reads_the_past() {
    let c = start().await;
    let a = c.cm("default", "a", json!({})).await;
    c.cm("default", "b", json!({})).await;
    let api = c.cms("default");
    let rv = a.metadata.resource_version.unwrap();
    let old = api
        .list(&ListParams::default().at(&rv).matching(VersionMatch::Exact))
        .await
        .unwrap();
    assert_eq!(names(&old.items), ["a"]);
    let mut config = c.dc.client_config().unwrap();
    config.default_retry = false;
    let once: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let e = api_error(
        once.list(
            &ListParams::default()
                .at("999999")
                .matching(VersionMatch::Exact),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 504);
}

#[tokio::test]
async fn metadata_only_lists_return_partial_object_metadata() {
    let c = start().await;
    c.cm("default", "a", json!({"x": "y"})).await;
    let list = c
        .cms("default")
        .list_metadata(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.labels.as_ref().unwrap()["x"], "y");
    let one = c.cms("default").get_metadata("a").await.unwrap();
    assert_eq!(one.metadata.name.as_deref(), Some("a"));
}

#[tokio::test]
async fn table_output_has_printer_columns_for_custom_resources() {
    let c = start().await;
    c.datajob_created("j1").await;
    let req = axum::http::Request::get("/apis/policyhost.dev/v1alpha1/namespaces/default/datajobs")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = c.client.request(req).await.unwrap();
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Policy", "Phase", "Age"]);
    let age = &table["columnDefinitions"][3];
    assert_eq!(
        age["type"], "date",
        "a custom resource's column keeps its type"
    );
    assert_eq!(
        age["description"],
        "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp"
    );
    assert!(
        table["columnDefinitions"][0]["description"]
            .as_str()
            .unwrap()
            .ends_with("More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
    );
    assert_eq!(table["rows"][0]["cells"][0], "j1");
    assert_eq!(table["rows"][0]["cells"][1], "fanout");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

#[tokio::test]
async fn events_are_selected_by_their_involved_object_as_kubectl_describe_does() {
    let c = start().await;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(c.client.clone(), "default");
    for (name, target) in [("e1", "web"), ("e2", "db")] {
        let ev = serde_json::from_value(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": target, "namespace": "default"},
            "reason": "Started", "message": "started", "type": "Normal",
        }))
        .unwrap();
        events.create(&PostParams::default(), &ev).await.unwrap();
    }
    let l = events
        .list(
            &ListParams::default()
                .fields("involvedObject.name=web,involvedObject.namespace=default,type=Normal"),
        )
        .await
        .unwrap();
    let got: Vec<String> = l
        .items
        .into_iter()
        .filter_map(|e| e.metadata.name)
        .collect();
    assert_eq!(got, ["e1"]);
}

#[tokio::test]
async fn events_recorded_through_events_k8s_io_show_up_as_core_events() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let c = start().await;
    let cm = c.cm("default", "subject", json!({})).await;
    let recorder = Recorder::new(
        c.client.clone(),
        Reporter {
            controller: "policyhost".into(),
            instance: None,
        },
    );
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: cm.metadata.name.clone(),
        namespace: Some("default".into()),
        uid: cm.metadata.uid.clone(),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "PolicyRejected".into(),
        note: Some("bad digest".into()),
        action: "Load".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    // The same event again becomes a series (a merge patch through events.k8s.io/v1).
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(c.client.clone(), "default");
    let l = core
        .list(
            &ListParams::default()
                .fields("involvedObject.name=subject,involvedObject.kind=ConfigMap"),
        )
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    let e = &l.items[0];
    assert_eq!(e.message.as_deref(), Some("bad digest"));
    assert_eq!(e.reason.as_deref(), Some("PolicyRejected"));
    assert_eq!(e.reporting_component.as_deref(), Some("policyhost"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    let new: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(c.client.clone(), "default");
    let l = new
        .list(&ListParams::default().fields("regarding.name=subject"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].note.as_deref(), Some("bad digest"));
    assert_eq!(
        l.items[0]
            .regarding
            .as_ref()
            .and_then(|r| r.name.as_deref()),
        Some("subject")
    );
}

#[tokio::test]
async fn list_items_of_built_in_kinds_have_no_type_but_custom_resources_keep_theirs() {
    let c = start().await;
    c.cm("default", "a", json!({"x": "1"})).await;
    let (code, list) = c
        .raw_json(
            "GET",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            serde_json::Value::Null,
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (&json!("ConfigMapList"), &json!("v1"))
    );
    let item = list["items"][0].as_object().unwrap();
    assert!(!item.contains_key("apiVersion") && !item.contains_key("kind"));
    assert_eq!(item["metadata"]["name"], "a");
    assert_eq!(item["data"], json!({"k": "v"}));
    assert!(item["metadata"]["managedFields"].is_array());

    c.datajob_created("j1").await;
    let (_, list) = c
        .raw_json(
            "GET",
            "/apis/policyhost.dev/v1alpha1/namespaces/default/datajobs",
            "application/json",
            serde_json::Value::Null,
        )
        .await;
    assert_eq!(list["items"][0]["kind"], "DataJob");
    assert_eq!(list["items"][0]["apiVersion"], "policyhost.dev/v1alpha1");
}
