//! Create, get, update, delete, conflicts and object metadata.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{api_error, datajob, start};

#[tokio::test]
async fn create_sets_uid_resource_version_and_creation_timestamp() {
    let c = start().await;
    let cm = c.cm("default", "a", json!({})).await;
    let m = &cm.metadata;
    assert_eq!(m.uid.as_ref().map(String::len), Some(36));
    assert!(
        m.resource_version
            .as_deref()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert!(m.creation_timestamp.is_some());
    assert_eq!(m.namespace.as_deref(), Some("default"));
    let got = c.cms("default").get("a").await.unwrap();
    assert_eq!(got.metadata.uid, m.uid);
    assert_eq!(got.data, cm.data);
}

#[tokio::test]
async fn resource_versions_increase_across_resources() {
    let c = start().await;
    let a = c.cm("default", "a", json!({})).await;
    c.namespace("other").await;
    let b = c.cm("other", "b", json!({})).await;
    let rv = |cm: &ConfigMap| {
        cm.metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&b) > rv(&a));
}

#[tokio::test]
async fn creating_an_existing_name_is_409_already_exists() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let e = api_error(
        c.cms("default")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert_eq!(e.reason, "AlreadyExists");
    assert_eq!(e.message, "configmaps \"a\" already exists");
}

#[tokio::test]
async fn updating_with_a_stale_resource_version_is_409_conflict() {
    let c = start().await;
    let mut cm = c.cm("default", "a", json!({})).await;
    let api = c.cms("default");
    let mut fresh = cm.clone();
    fresh.data = Some([("k".to_owned(), "new".to_owned())].into());
    api.replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    cm.data = Some([("k".to_owned(), "stale".to_owned())].into());
    let e = api_error(
        api.replace("a", &PostParams::default(), &cm)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    assert_eq!(e.reason, "Conflict");
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["k"], "new");
}

#[tokio::test]
async fn objects_in_a_missing_namespace_are_404() {
    let c = start().await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let e = api_error(
        c.cms("nowhere")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);
    assert_eq!(e.message, "namespaces \"nowhere\" not found");
}

#[tokio::test]
async fn an_invalid_name_is_422_invalid() {
    let c = start().await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "Bad_Name"}})).unwrap();
    let e = api_error(
        c.cms("default")
            .create(&PostParams::default(), &cm)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(e.reason, "Invalid");
    assert!(
        e.message
            .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn generate_name_makes_a_unique_name() {
    let c = start().await;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let a = c
        .cms("default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let b = c
        .cms("default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let (a, b) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    assert!(a.starts_with("gen-") && a.len() == 9);
    assert_ne!(a, b);
}

#[tokio::test]
async fn generation_changes_with_spec_only() {
    let c = start().await;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    }))
    .unwrap();
    let d = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let d = api
        .patch(
            "d",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = api
        .patch("d", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
}

#[tokio::test]
async fn a_no_op_update_keeps_the_resource_version() {
    let c = start().await;
    let cm = c.cm("default", "a", json!({"x": "1"})).await;
    let again = c
        .cms("default")
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        cm.metadata.resource_version
    );
}

// Editing managedFields directly is a documented use: a write that changes nothing
// else keeps the managed fields it sends. (A create owns every field it sets, so
// managed fields sent with a create end up with the creator, as on kube-apiserver.)
#[tokio::test]
async fn managed_fields_sent_by_the_client_are_kept() {
    let c = start().await;
    c.cm("default", "m", json!({"team": "a"})).await;
    let tester = json!([{"manager": "tester", "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}]);
    let patched = c
        .cms("default")
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"managedFields": tester}})),
        )
        .await
        .unwrap();
    let mf = patched.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("tester"));
}

#[tokio::test]
async fn delete_preconditions_are_checked() {
    let c = start().await;
    let cm = c.cm("default", "a", json!({})).await;
    let api = c.cms("default");
    let mut dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let e = api_error(api.delete("a", &dp).await.unwrap_err());
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on ConfigMap \"a\": the UID in the precondition (wrong) does not match the UID in record ({}). The object might have been deleted and then recreated",
            cm.metadata.uid.as_deref().unwrap()
        )
    );
    let details = e.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("a", "ConfigMap")
    );
    dp.preconditions = Some(kube::api::Preconditions {
        uid: cm.metadata.uid.clone(),
        resource_version: cm.metadata.resource_version.clone(),
    });
    api.delete("a", &dp).await.unwrap();
    assert_eq!(api_error(api.get("a").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn delete_collection_removes_only_selected_objects() {
    let c = start().await;
    c.cm("default", "a", json!({"tier": "x"})).await;
    c.cm("default", "b", json!({"tier": "x"})).await;
    c.cm("default", "keep", json!({"tier": "y"})).await;
    let api = c.cms("default");
    api.delete_collection(
        &DeleteParams::default(),
        &kube::api::ListParams::default().labels("tier=x"),
    )
    .await
    .unwrap();
    let names: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, vec!["keep".to_owned()]);
}

#[tokio::test]
async fn json_patch_with_a_failed_test_is_422_and_changes_nothing() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "other"},
        {"op": "replace", "path": "/data/k", "value": "changed"}
    ]))
    .unwrap();
    let e = api_error(
        c.cms("default")
            .patch("a", &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(e.reason, "Invalid");
    assert_eq!(
        e.message,
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(
        c.cms("default").get("a").await.unwrap().data.unwrap()["k"],
        "v"
    );
}

#[tokio::test]
async fn strategic_merge_patch_is_415_for_custom_resources() {
    let c = start().await;
    let ar = c.datajob_crd().await;
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    api.create(&PostParams::default(), &datajob("a", "p"))
        .await
        .unwrap();
    let e = api_error(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"policy": "q"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 415);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_are_all_applied() {
    let c = start().await;
    c.cm("default", "shared", json!({})).await;
    let api = c.cms("default");
    let patches = (0..40).map(|i| {
        let api = api.clone();
        async move {
            api.patch(
                "shared",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {format!("l{i}"): "x"}}})),
            )
            .await
        }
    });
    for r in futures::future::join_all(patches).await {
        r.unwrap();
    }
    let labels = api.get("shared").await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels.len(), 40, "no patch was lost: {labels:?}");
}

#[tokio::test]
async fn empty_maps_of_built_in_kinds_are_left_out_and_owned_by_no_one() {
    let c = start().await;
    let (code, cm) = c
        .raw_json(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            json!({"metadata": {"name": "e", "labels": {}, "annotations": {}}, "data": {}, "binaryData": {}}),
        )
        .await;
    assert_eq!(code, 201);
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&cm), ["apiVersion", "kind", "metadata"]);
    assert_eq!(
        keys(&cm["metadata"]),
        [
            "creationTimestamp",
            "name",
            "namespace",
            "resourceVersion",
            "uid"
        ],
        "no labels, annotations or managedFields"
    );
    // A field set that is still empty after an update records no manager either.
    let mut update = cm.clone();
    update["data"] = json!({});
    let (code, cm) = c
        .raw_json(
            "PUT",
            "/api/v1/namespaces/default/configmaps/e",
            "application/json",
            update,
        )
        .await;
    assert_eq!(code, 200);
    assert!(cm.get("data").is_none() && cm["metadata"].get("managedFields").is_none());
    // Custom resources keep their empty maps.
    let ar = c.datajob_crd().await;
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let dj = api
        .create(&PostParams::default(), &datajob("j", "fanout"))
        .await
        .unwrap();
    assert_eq!(dj.data["spec"]["params"], json!({}));
}

#[tokio::test]
async fn a_patch_that_renames_the_object_is_400_as_a_put_is() {
    let c = start().await;
    c.cm("default", "b", json!({})).await;
    let e = api_error(
        c.cms("default")
            .patch(
                "b",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"name": "other"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        e.message,
        "the name of the object (other) does not match the name on the URL (b)"
    );
}

#[tokio::test]
async fn an_unknown_group_is_the_plain_404_of_the_mux_but_an_unknown_resource_a_status() {
    let c = start().await;
    for path in [
        "/apis/nothing.example.com/v1/namespaces/default/things",
        "/apis/nothing.example.com/v1",
        "/apis/nothing.example.com",
    ] {
        let (code, body) = c.raw("GET", path, "", json!(null)).await;
        assert_eq!(
            (code, body.as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
    }
    let (code, status) = c
        .raw_json(
            "GET",
            "/apis/apps/v1/namespaces/default/things",
            "",
            json!(null),
        )
        .await;
    assert_eq!((code, &status["reason"]), (404, &json!("NotFound")));
}

#[tokio::test]
async fn a_delete_answers_with_the_object_for_pods_services_and_service_accounts_only() {
    let c = start().await;
    c.datajob_crd().await;
    let json = "application/json";
    let cases = [
        (
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "a"}]}}),
            Some("Pod"),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
            Some("Service"),
        ),
        (
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "sa"}}),
            Some("ServiceAccount"),
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "cm"}}),
            None,
        ),
        (
            "/apis/policyhost.dev/v1alpha1/namespaces/default/datajobs",
            serde_json::to_value(datajob("dj", "p")).unwrap(),
            None,
        ),
    ];
    for (collection, body, kind) in cases {
        let name = body["metadata"]["name"].as_str().unwrap().to_owned();
        let (code, created) = c.raw_json("POST", collection, json, body).await;
        assert_eq!(code, 201, "{created}");
        let at = format!("{collection}/{name}");
        let (code, deleted) = c.raw_json("DELETE", &at, json, json!(null)).await;
        assert_eq!(code, 200, "{at}: {deleted}");
        match kind {
            Some(kind) => {
                assert_eq!(deleted["kind"], kind, "{at}: {deleted}");
                assert_eq!(deleted["metadata"]["uid"], created["metadata"]["uid"]);
                // Only Pods are deleted gracefully, which marks them first.
                let graceful = kind == "Pod";
                let m = &deleted["metadata"];
                assert_eq!(m["deletionTimestamp"].is_string(), graceful, "{deleted}");
                assert_eq!(m["deletionGracePeriodSeconds"].is_i64(), graceful);
                if graceful {
                    assert_eq!(m["generation"], 2, "{deleted}");
                }
            }
            None => {
                assert_eq!(deleted["kind"], "Status", "{at}: {deleted}");
                assert_eq!(deleted["status"], "Success", "{at}: {deleted}");
            }
        }
        let (code, _) = c.raw_json("GET", &at, json, json!(null)).await;
        assert_eq!(code, 404, "{at} is gone");
    }
}
