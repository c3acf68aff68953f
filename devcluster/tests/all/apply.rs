//! Server-side apply, strategic merge patch and field ownership, driven by kube-rs and
//! by the real `kubectl`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::{Cluster, Kubectl, api_error, start};

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": data})
}

async fn apply_cm(c: &Cluster, manager: &str, data: Value) -> kube::Result<ConfigMap> {
    c.cms("default")
        .patch(
            "settings",
            &PatchParams::apply(manager),
            &Patch::Apply(cm(data)),
        )
        .await
}

/// The managers of an object with what they own.
fn owners(meta: &kube::api::ObjectMeta) -> Vec<(String, String, Value)> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
                e.fields_v1
                    .as_ref()
                    .map(|f| f.0.clone())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_creates_re_apply_updates_and_dropped_fields_go() {
    let c = start().await;
    let created = apply_cm(&c, "policyhost", json!({"a": "1", "b": "2"}))
        .await
        .unwrap();
    assert_eq!(
        owners(&created.metadata),
        vec![(
            "policyhost".into(),
            "Apply".into(),
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        )]
    );

    let same = apply_cm(&c, "policyhost", json!({"a": "1", "b": "2"}))
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version, created.metadata.resource_version,
        "re-applying the same configuration writes nothing"
    );

    let updated = apply_cm(&c, "policyhost", json!({"a": "3"})).await.unwrap();
    assert_eq!(
        updated.data.unwrap(),
        [("a".to_owned(), "3".to_owned())].into()
    );
    assert_eq!(
        owners(&updated.metadata)[0].2,
        json!({"f:data": {"f:a": {}}})
    );
}

#[tokio::test]
async fn other_managers_fields_stay_and_conflicts_are_409_until_forced() {
    let c = start().await;
    apply_cm(&c, "alice", json!({"a": "1"})).await.unwrap();
    let both = apply_cm(&c, "bob", json!({"b": "2"})).await.unwrap();
    assert_eq!(both.data.unwrap().len(), 2);

    let e = api_error(
        apply_cm(&c, "bob", json!({"a": "9", "b": "2"}))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        "Apply failed with 1 conflict: conflict with \"alice\": .data.a"
    );
    let causes = e.details.unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, ".data.a");
    assert_eq!(causes[0].reason, "FieldManagerConflict");

    let forced = c
        .cms("default")
        .patch(
            "settings",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(cm(json!({"a": "9", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "9");
    assert!(
        !owners(&forced.metadata)
            .iter()
            .any(|(m, _, _)| m == "alice"),
        "alice owned only .data.a, which moved to bob"
    );

    // Bob drops b: nobody else owns it, so it goes; alice's entry is gone, a stays bob's.
    let dropped = apply_cm(&c, "bob", json!({"a": "9"})).await.unwrap();
    assert_eq!(dropped.data.unwrap().len(), 1);
}

#[tokio::test]
async fn an_update_takes_the_fields_it_changes_and_a_later_apply_conflicts_with_it() {
    let c = start().await;
    apply_cm(&c, "policyhost", json!({"a": "1"})).await.unwrap();
    let edited = c
        .cms("default")
        .patch(
            "settings",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap();
    assert!(owners(&edited.metadata).contains(&(
        "editor".into(),
        "Update".into(),
        json!({"f:data": {"f:a": {}}})
    )));
    let e = api_error(
        apply_cm(&c, "policyhost", json!({"a": "1"}))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.a"
    );
}

#[tokio::test]
async fn apply_to_the_status_subresource_touches_only_status() {
    let c = start().await;
    let ar = c.datajob_crd().await;
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let job = |extra: Value| {
        let mut v = json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                           "metadata": {"name": "j"}, "spec": {"policy": "p"}});
        if let (Some(o), Value::Object(x)) = (v.as_object_mut(), extra) {
            o.extend(x);
        }
        v
    };
    let created = api
        .patch(
            "j",
            &PatchParams::apply("policyhost"),
            &Patch::Apply(job(json!({"status": {"phase": "Ignored"}}))),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data.get("status"),
        None,
        "status is not applied on the main resource"
    );

    let status = api
        .patch_status(
            "j",
            &PatchParams::apply("policyhost"),
            &Patch::Apply(job(
                json!({"spec": {"policy": "ignored"}, "status": {"phase": "Running"}}),
            )),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Running");
    assert_eq!(status.data["spec"]["policy"], "p");
    let entry = status
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|e| e.subresource.as_deref() == Some("status"))
        .expect("a status entry");
    assert_eq!(entry.operation.as_deref(), Some("Apply"));
    assert_eq!(
        entry.fields_v1.as_ref().map(|f| f.0.clone()),
        // The CRD preserves unknown fields at its root: `status` is a map entry.
        Some(json!({"f:status": {".": {}, "f:phase": {}}}))
    );
}

#[tokio::test]
async fn an_apply_to_the_status_of_a_missing_object_is_404_and_creates_nothing() {
    let c = start().await;
    let ar = c.datajob_crd().await;
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), "default", &ar);
    let job = json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
                     "metadata": {"name": "absent"}, "status": {"phase": "Running"}});
    let e = api_error(
        api.patch_status(
            "absent",
            &PatchParams::apply("policyhost"),
            &Patch::Apply(job),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert!(api.get_opt("absent").await.unwrap().is_none());
}

#[tokio::test]
async fn an_apply_naming_a_uid_updates_that_object_or_nothing() {
    let c = start().await;
    let cms = c.cms("default");
    let with_uid = |uid: &str| {
        let mut body = cm(json!({"k": "v"}));
        body["metadata"]["uid"] = json!(uid);
        body
    };
    let apply = |body: Value| {
        let cms = cms.clone();
        async move {
            cms.patch(
                "settings",
                &PatchParams::apply("alpha"),
                &Patch::Apply(body),
            )
            .await
        }
    };
    let e = api_error(apply(with_uid("ghost")).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains(
            "uid mismatch: the provided object specified uid ghost, and no existing object was found"
        ),
        "{}",
        e.message
    );
    assert!(
        cms.get_opt("settings").await.unwrap().is_none(),
        "nothing created"
    );

    let created = apply_cm(&c, "alpha", json!({"k": "1"})).await.unwrap();
    let e = api_error(apply(with_uid("another")).await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str()),
        (422, "Invalid"),
        "{}",
        e.message
    );
    assert!(e.message.contains("metadata.uid"), "{}", e.message);
    let uid = created.metadata.uid.clone().unwrap();
    let updated = apply(with_uid(&uid)).await.unwrap();
    assert_eq!(updated.metadata.uid, Some(uid));
    assert_eq!(updated.data.unwrap()["k"], "v");
}

fn deployment(containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}
        }
    })
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let c = start().await;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(deployment(json!([
            {"name": "app", "image": "app:1"}, {"name": "proxy", "image": "proxy:1"}
        ])))
        .unwrap(),
    )
    .await
    .unwrap();
    let patched = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "proxy", "image": "proxy:2"}
            ]}}}})),
        )
        .await
        .unwrap();
    let images: Vec<(String, Option<String>)> = patched
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| (c.name, c.image))
        .collect();
    assert_eq!(
        images,
        vec![
            ("app".to_owned(), Some("app:1".to_owned())),
            ("proxy".to_owned(), Some("proxy:2".to_owned()))
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_server_side_creates_updates_and_stops_at_conflicts() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let first = k.file("cm.yaml", &cm(json!({"a": "1", "b": "2"})));
    assert!(
        k.ok(&["apply", "--server-side", "-f", &first])
            .await
            .contains("configmap/settings serverside-applied")
    );
    let second = k.file("cm2.yaml", &cm(json!({"a": "3"})));
    k.ok(&["apply", "--server-side", "-f", &second]).await;
    let live = k
        .json(&["get", "configmap", "settings", "--show-managed-fields"])
        .await;
    assert_eq!(live["data"], json!({"a": "3"}));
    assert_eq!(live["metadata"]["managedFields"][0]["manager"], "kubectl");
    assert_eq!(live["metadata"]["managedFields"][0]["operation"], "Apply");

    let other = k.file("cm3.yaml", &cm(json!({"a": "4"})));
    let (ok, text) = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            &other,
        ])
        .await;
    assert!(!ok, "a conflicting apply fails");
    assert!(
        text.contains("conflict with \"kubectl\": .data.a"),
        "kubectl shows the conflict:\n{text}"
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "--force-conflicts",
        "-f",
        &other,
    ])
    .await;
    let live = k.json(&["get", "configmap", "settings"]).await;
    assert_eq!(live["data"]["a"], "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patch_type_strategic_merges_by_key_and_deletes_with_directives() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let manifest = k.file(
        "deploy.yaml",
        &deployment(json!([{"name": "app", "image": "app:1"}])),
    );
    k.ok(&["create", "-f", &manifest]).await;
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"proxy:1"}]}}}}"#,
    ])
    .await;
    let live = k.json(&["get", "deployment", "web"]).await;
    let names: Vec<&str> = live["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["sidecar", "app"]);

    k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","$patch":"delete"}]}}}}"#,
    ])
    .await;
    let live = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"],
        json!([{"name": "sidecar", "image": "proxy:1"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_a_built_in_kind_twice_patches_the_change() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let v1 = deployment(json!([
        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
        {"name": "proxy", "image": "proxy:1"}
    ]));
    let first = k.file("v1.yaml", &v1);
    assert!(
        k.ok(&["apply", "-f", &first])
            .await
            .contains("deployment.apps/web created")
    );
    // The second manifest changes an image, drops an env var and a container.
    let v2 = deployment(json!([
        {"name": "app", "image": "app:2", "env": [{"name": "A", "value": "1"}]}
    ]));
    let second = k.file("v2.yaml", &v2);
    assert!(
        k.ok(&["apply", "-f", &second])
            .await
            .contains("deployment.apps/web configured")
    );
    let live = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "app:2", "env": [{"name": "A", "value": "1"}]}])
    );
    assert_eq!(live["metadata"]["generation"], 2);
    assert!(
        k.ok(&["apply", "-f", &second])
            .await
            .contains("deployment.apps/web unchanged")
    );
}

#[tokio::test]
async fn apply_without_a_field_manager_is_422_whose_details_have_no_empty_name() {
    let c = start().await;
    let (code, status) = c
        .raw_json(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/settings",
            "application/apply-patch+yaml",
            cm(json!({"a": "1"})),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["details"],
        json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}]})
    );
}

#[tokio::test]
async fn a_write_without_field_manager_or_user_agent_is_recorded_as_unknown() {
    let c = start().await;
    // kube-rs sends no User-Agent unless configured to.
    let cm = c.cm("default", "a", json!({})).await;
    let managers: Vec<_> = owners(&cm.metadata)
        .into_iter()
        .map(|(m, op, _)| (m, op))
        .collect();
    assert_eq!(managers, [("unknown".to_owned(), "Update".to_owned())]);
}

#[tokio::test]
async fn an_apply_that_creates_under_another_name_than_the_urls_is_400() {
    let c = start().await;
    let mut body = cm(json!({"a": "1"}));
    body["metadata"]["name"] = json!("elsewhere");
    let e = api_error(
        c.cms("default")
            .patch("settings", &PatchParams::apply("t"), &Patch::Apply(body))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        e.message,
        "the name of the object (elsewhere) does not match the name on the URL (settings)"
    );
    for name in ["settings", "elsewhere"] {
        let missing = c.cms("default").get_opt(name).await.unwrap();
        assert!(missing.is_none(), "{name} was created");
    }
}

#[tokio::test]
async fn applying_another_kind_than_the_endpoints_is_400_invalid_object_type() {
    let c = start().await;
    let e = api_error(
        c.cms("default")
            .patch(
                "settings",
                &PatchParams::apply("alpha"),
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "settings"}}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(e.message, "invalid object type: /v1, Kind=Secret");
}

#[tokio::test]
async fn an_owner_reference_is_owned_whole() {
    let c = start().await;
    let owner = c.cm("default", "owner", json!({})).await;
    let uid = owner.metadata.uid.unwrap();
    let dep: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "dep", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid,
        }]},
    }))
    .unwrap();
    let dep = c
        .cms("default")
        .create(&PostParams::default(), &dep)
        .await
        .unwrap();
    let (_, _, fields) = owners(&dep.metadata).remove(0);
    assert_eq!(
        fields["f:metadata"]["f:ownerReferences"],
        json!({".": {}, format!("k:{{\"uid\":\"{uid}\"}}"): {}})
    );
}
