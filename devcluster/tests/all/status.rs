//! CRDs and the status subresource.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{crd_resource, datajob, start};

#[tokio::test]
async fn a_created_crd_is_established_and_served() {
    let c = start().await;
    let ar = c.datajob_crd().await;
    let crds: Api<DynamicObject> = Api::all_with(c.client.clone(), &crd_resource());
    let crd = crds.get("datajobs.policyhost.dev").await.unwrap();
    let conds = crd.data["status"]["conditions"].as_array().unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let dj = api
        .create(&PostParams::default(), &datajob("j", "fanout"))
        .await
        .unwrap();
    assert_eq!(dj.metadata.generation, Some(1));
    // Deleting the CRD stops serving it.
    crds.delete("datajobs.policyhost.dev", &Default::default())
        .await
        .unwrap();
    crate::common::eventually("the CRD is no longer served", || async {
        api.list(&Default::default()).await.is_err()
    })
    .await;
}

#[tokio::test]
async fn status_and_main_resource_writes_touch_only_their_part() {
    let c = start().await;
    let ar = c.datajob_crd().await;
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let mut dj = datajob("j", "fanout");
    dj.data["status"] = json!({"phase": "Ignored"});
    let created = api.create(&PostParams::default(), &dj).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    let pp = PatchParams::default();
    let after_status = api
        .patch_status(
            "j",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"policy": "other"}})),
        )
        .await
        .unwrap();
    assert_eq!(after_status.data["status"]["phase"], "Running");
    assert_eq!(after_status.data["spec"]["policy"], "fanout");
    assert_eq!(after_status.metadata.generation, Some(1));
    let after_main = api
        .patch(
            "j",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Hacked"}, "spec": {"policy": "next"}})),
        )
        .await
        .unwrap();
    assert_eq!(after_main.data["status"]["phase"], "Running");
    assert_eq!(after_main.data["spec"]["policy"], "next");
    assert_eq!(after_main.metadata.generation, Some(2));
}

#[tokio::test]
async fn custom_resources_are_pruned_and_defaulted_by_their_schema() {
    let c = start().await;
    let crds: Api<DynamicObject> = Api::all_with(c.client.clone(), &crd_resource());
    let crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "integer", "default": 3},
                    "color": {"type": "string"}
                }}}
            }}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::all_with(c.client.clone(), &ar);
    crate::common::eventually("widgets are served", || async {
        api.list(&Default::default()).await.is_ok()
    })
    .await;
    let w = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"color": "red", "unknown": true}, "extra": 1
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"], json!({"color": "red", "size": 3}));
    assert!(created.data.get("extra").is_none());
    let patched = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"bogus": 1, "size": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"], json!({"color": "red", "size": 5}));
    // kubectl asks for strict field validation: then unknown fields are an error.
    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let e = crate::common::api_error(
        api.patch(
            "w",
            &strict,
            &Patch::Merge(json!({"spec": {"bogus": 1}, "extra": 2})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"extra\", unknown field \"spec.bogus\""
    );
}
