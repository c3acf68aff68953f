//! Server-side apply and update ownership, from the behaviour the
//! Kubernetes documentation describes
//! (<https://kubernetes.io/docs/reference/using-api/server-side-apply/>).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::kinds;
use crate::schema::Schema;

const T0: &str = "2024-05-01T10:00:00Z";
const T1: &str = "2024-05-01T11:00:00Z";
const T2: &str = "2024-05-01T12:00:00Z";

fn kind(group: &str, kind: &str) -> &'static Schema {
    kinds::schema(group, "v1", kind).expect("built in")
}

fn configmaps() -> &'static Schema {
    kind("", "ConfigMap")
}

fn deployments() -> &'static Schema {
    kind("apps", "Deployment")
}

fn request<'a>(manager: &'a str, api_version: &'a str, time: &'a str) -> Request<'a> {
    Request {
        manager,
        api_version,
        subresource: None,
        time,
    }
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "test-cm", "namespace": "default"}, "data": data})
}

fn deploy(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn applied(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    time: &str,
    schema: &Schema,
) -> Value {
    let api_version = config["apiVersion"].as_str().unwrap_or_default();
    apply(
        live,
        config,
        &request(manager, api_version, time),
        false,
        schema,
    )
    .expect("applies")
}

fn entries(object: &Value) -> Vec<Value> {
    object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn fields_of(object: &Value, manager: &str) -> Value {
    entries(object)
        .into_iter()
        .find(|e| e["manager"] == manager)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

fn without_managed(object: &Value) -> Value {
    let mut object = object.clone();
    set_managed_fields(&mut object, None);
    object
}

#[test]
fn apply_creates_the_object_with_one_apply_entry() {
    let config = cm(json!({"key": "some value"}));
    let mut config = config;
    config["metadata"]["labels"] = json!({"test-label": "test"});
    let created = applied(None, &config, "kubectl", T0, configmaps());
    assert_eq!(without_managed(&created), config);
    assert_eq!(
        entries(&created),
        vec![json!({
            "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:key": {}}, "f:metadata": {"f:labels": {"f:test-label": {}}}}
        })]
    );
}

#[test]
fn reapplying_the_same_config_changes_nothing_not_even_the_time() {
    let config = cm(json!({"a": "1"}));
    let first = applied(None, &config, "kubectl", T0, configmaps());
    let second = applied(Some(&first), &config, "kubectl", T1, configmaps());
    assert_eq!(second, first);
}

#[test]
fn reapplying_a_changed_config_updates_values_and_the_time() {
    let first = applied(None, &cm(json!({"a": "1"})), "kubectl", T0, configmaps());
    let second = applied(
        Some(&first),
        &cm(json!({"a": "2", "b": "3"})),
        "kubectl",
        T1,
        configmaps(),
    );
    assert_eq!(second["data"], json!({"a": "2", "b": "3"}));
    assert_eq!(entries(&second)[0]["time"], T1);
}

#[test]
fn fields_the_manager_stops_applying_are_removed() {
    let first = applied(
        None,
        &cm(json!({"a": "1", "b": "2"})),
        "kubectl",
        T0,
        configmaps(),
    );
    let second = applied(
        Some(&first),
        &cm(json!({"a": "1"})),
        "kubectl",
        T1,
        configmaps(),
    );
    assert_eq!(second["data"], json!({"a": "1"}));
    assert_eq!(
        fields_of(&second, "kubectl"),
        json!({"f:data": {"f:a": {}}})
    );
}

#[test]
fn other_managers_fields_are_kept() {
    let first = applied(None, &cm(json!({"a": "1"})), "alice", T0, configmaps());
    let second = applied(
        Some(&first),
        &cm(json!({"b": "2"})),
        "bob",
        T1,
        configmaps(),
    );
    assert_eq!(second["data"], json!({"a": "1", "b": "2"}));
    let third = applied(Some(&second), &cm(json!({})), "alice", T2, configmaps());
    assert_eq!(third["data"], json!({"b": "2"}));
    assert_eq!(fields_of(&third, "bob"), json!({"f:data": {"f:b": {}}}));
}

#[test]
fn a_shared_field_survives_one_owner_dropping_it() {
    let first = applied(None, &cm(json!({"a": "1"})), "alice", T0, configmaps());
    let shared = applied(
        Some(&first),
        &cm(json!({"a": "1"})),
        "bob",
        T1,
        configmaps(),
    );
    assert_eq!(shared, {
        let mut expected = first.clone();
        let mut bob = entries(&first)[0].clone();
        bob["manager"] = json!("bob");
        // Sharing a value changes nothing in the object: bob's entry has no time.
        bob.as_object_mut().map(|e| e.remove("time"));
        expected["metadata"]["managedFields"] = json!([bob, entries(&first)[0]]);
        expected
    });
    let mut nothing = cm(json!({}));
    nothing.as_object_mut().map(|o| o.remove("data"));
    let dropped = applied(Some(&shared), &nothing, "alice", T2, configmaps());
    assert_eq!(dropped["data"], json!({"a": "1"}));
    assert_eq!(fields_of(&dropped, "alice"), Value::Null);
    assert_eq!(fields_of(&dropped, "bob"), json!({"f:data": {"f:a": {}}}));
}

#[test]
fn a_conflicting_value_is_a_409_listing_the_fields_and_their_manager() {
    let first = applied(
        None,
        &deploy(json!({"replicas": 2})),
        "alice",
        T0,
        deployments(),
    );
    let config = deploy(json!({"replicas": 3, "paused": true}));
    let req = request("bob", "apps/v1", T1);
    let err = apply(Some(&first), &config, &req, false, deployments()).expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    assert_eq!((err.code(), err.reason()), (409, "Conflict"));
    assert_eq!(
        err.causes(),
        vec![Cause {
            reason: "FieldManagerConflict",
            message: "conflict with \"alice\"".into(),
            field: ".spec.replicas".into(),
        }]
    );
}

#[test]
fn force_moves_the_conflicting_fields_to_the_applier() {
    let first = applied(
        None,
        &deploy(json!({"replicas": 2, "paused": false})),
        "alice",
        T0,
        deployments(),
    );
    let config = deploy(json!({"replicas": 3}));
    let req = request("bob", "apps/v1", T1);
    let forced = apply(Some(&first), &config, &req, true, deployments()).expect("forced");
    assert_eq!(forced["spec"], json!({"replicas": 3, "paused": false}));
    assert_eq!(
        fields_of(&forced, "alice"),
        json!({"f:spec": {"f:paused": {}}})
    );
    assert_eq!(
        fields_of(&forced, "bob"),
        json!({"f:spec": {"f:replicas": {}}})
    );
}

#[test]
fn an_update_takes_the_fields_it_changes_and_a_later_apply_conflicts_with_it() {
    let first = applied(
        None,
        &deploy(json!({"replicas": 2})),
        "kubectl",
        T0,
        deployments(),
    );
    let mut scaled = first.clone();
    scaled["spec"]["replicas"] = json!(5);
    record_update(
        Some(&first),
        &mut scaled,
        &request("kubectl-scale", "apps/v1", T1),
        deployments(),
    );
    assert_eq!(fields_of(&scaled, "kubectl"), Value::Null);
    let scale_entry = entries(&scaled)
        .into_iter()
        .find(|e| e["manager"] == "kubectl-scale")
        .expect("an Update entry");
    assert_eq!(
        scale_entry,
        json!({"manager": "kubectl-scale", "operation": "Update", "apiVersion": "apps/v1",
               "time": T1, "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}})
    );
    let req = request("kubectl", "apps/v1", T2);
    let err = apply(
        Some(&scaled),
        &deploy(json!({"replicas": 2})),
        &req,
        false,
        deployments(),
    )
    .expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
    );
}

// The documentation's "transferring ownership" flow: a HorizontalPodAutoscaler
// scales a Deployment, and the user then drops `replicas` from the manifest:
// the field stays, owned by the autoscaler alone.
#[test]
fn dropping_a_field_another_manager_changed_leaves_it_to_that_manager() {
    let manifest = deploy(json!({"replicas": 3, "template": {"spec": {"containers": [
        {"name": "nginx", "image": "nginx:1.14.2"}]}}}));
    let first = applied(None, &manifest, "kubectl", T0, deployments());
    let mut scaled = first.clone();
    scaled["spec"]["replicas"] = json!(5);
    let hpa = request("horizontal-pod-autoscaler", "apps/v1", T1);
    record_update(Some(&first), &mut scaled, &hpa, deployments());
    let mut without_replicas = manifest.clone();
    without_replicas["spec"]
        .as_object_mut()
        .map(|spec| spec.remove("replicas"));
    let after = applied(
        Some(&scaled),
        &without_replicas,
        "kubectl",
        T2,
        deployments(),
    );
    assert_eq!(after["spec"]["replicas"], 5);
    assert_eq!(
        fields_of(&after, "horizontal-pod-autoscaler"),
        json!({"f:spec": {"f:replicas": {}}})
    );
}

#[test]
fn containers_merge_by_name_and_a_dropped_container_is_removed() {
    let both = deploy(json!({"template": {"spec": {"containers": [
        {"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "proxy:1"}]}}}));
    let first = applied(None, &both, "kubectl", T0, deployments());
    assert_eq!(
        fields_of(&first, "kubectl"),
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}},
            "k:{\"name\":\"sidecar\"}": {".": {}, "f:image": {}, "f:name": {}}
        }}}}})
    );
    let mut patched = first.clone();
    patched["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "X"}]);
    let other = request("kubectl-edit", "apps/v1", T1);
    record_update(Some(&first), &mut patched, &other, deployments());
    let app_only = deploy(json!({"template": {"spec": {"containers": [
        {"name": "app", "image": "app:2"}]}}}));
    let second = applied(Some(&patched), &app_only, "kubectl", T2, deployments());
    assert_eq!(
        second["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "app:2", "env": [{"name": "X"}]}])
    );
}

#[test]
fn status_is_ignored_on_the_main_resource_and_alone_on_the_status_subresource() {
    let mut config = deploy(json!({"replicas": 1}));
    config["status"] = json!({"replicas": 7});
    let created = applied(None, &config, "kubectl", T0, deployments());
    assert_eq!(created.get("status"), None);
    assert_eq!(
        fields_of(&created, "kubectl"),
        json!({"f:spec": {"f:replicas": {}}})
    );

    let mut status_config = deploy(json!({"replicas": 9}));
    status_config["status"] = json!({"replicas": 1, "conditions": [
        {"type": "Available", "status": "True"}]});
    let on_status = Request {
        subresource: Some("status"),
        ..request("controller", "apps/v1", T1)
    };
    let updated = apply(
        Some(&created),
        &status_config,
        &on_status,
        false,
        deployments(),
    )
    .expect("applies");
    assert_eq!(updated["spec"], json!({"replicas": 1}));
    assert_eq!(updated["status"]["replicas"], 1);
    let entry = entries(&updated)
        .into_iter()
        .find(|e| e["manager"] == "controller")
        .expect("entry");
    assert_eq!(entry["subresource"], "status");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Available\"}": {
            ".": {}, "f:status": {}, "f:type": {}}}, "f:replicas": {}}})
    );
}

#[test]
fn an_object_without_managed_fields_belongs_to_before_first_apply() {
    let live = deploy(json!({"replicas": 1}));
    let req = request("kubectl", "apps/v1", T0);
    let err = apply(
        Some(&live),
        &deploy(json!({"replicas": 2})),
        &req,
        false,
        deployments(),
    )
    .expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: \
         .spec.replicas"
    );
    let same = apply(
        Some(&live),
        &deploy(json!({"replicas": 1})),
        &req,
        false,
        deployments(),
    )
    .expect("no change, no conflict");
    assert_eq!(without_managed(&same), live);
    assert_eq!(
        fields_of(&same, "kubectl"),
        json!({"f:spec": {"f:replicas": {}}})
    );
}

#[test]
fn create_records_an_update_entry_and_crd_specs_are_members() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    record_update(
        None,
        &mut pod,
        &request("kubectl-create", "v1", T0),
        kind("", "Pod"),
    );
    assert_eq!(
        entries(&pod),
        vec![
            json!({"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
            "time": T0, "fieldsType": "FieldsV1", "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                    ".": {}, "f:image": {}, "f:name": {}}}}}})
        ]
    );

    let crd = Schema::from_openapi_v3(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"policy": {"type": "string"}}}}}))
    .expect("valid");
    let mut job = json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
        "metadata": {"name": "j"}, "spec": {"policy": "p"}});
    let req = request("policyhost", "policyhost.dev/v1alpha1", T0);
    record_update(None, &mut job, &req, &crd);
    assert_eq!(
        fields_of(&job, "policyhost"),
        json!({"f:spec": {".": {}, "f:policy": {}}})
    );
}

#[test]
fn an_update_changing_nothing_records_nothing_and_reset_clears_managed_fields() {
    let first = applied(None, &cm(json!({"a": "1"})), "kubectl", T0, configmaps());
    let mut same = first.clone();
    record_update(
        Some(&first),
        &mut same,
        &request("other", "v1", T1),
        configmaps(),
    );
    assert_eq!(same, first);

    let mut reset = first.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    reset["data"]["a"] = json!("2");
    record_update(
        Some(&first),
        &mut reset,
        &request("other", "v1", T1),
        configmaps(),
    );
    assert_eq!(reset["metadata"].get("managedFields"), None);
}

#[test]
fn an_apply_entry_moved_over_from_an_update_keeps_the_maps_still_applied() {
    // `kubectl apply --server-side` after client-side applies: kubectl moves
    // the client-side Update entry (maps owned as `.`) to its Apply manager,
    // then applies the same config, which owns only the leaves.
    let config = deploy(json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}}}));
    let mut live = config.clone();
    live["metadata"]["labels"] = json!({"tier": "web"});
    live["metadata"]["managedFields"] = json!([{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:tier": {}}},
            "f:spec": {".": {}, "f:replicas": {},
                       "f:selector": {".": {}, "f:matchLabels": {".": {}, "f:app": {}}}}}}]);
    let reapplied = applied(Some(&live), &config, "kubectl", T1, deployments());
    assert_eq!(reapplied["spec"], config["spec"], "still applied, so kept");
    assert_eq!(
        reapplied["metadata"].get("labels"),
        None,
        "no longer applied and owned by nobody else, so removed"
    );
    assert_eq!(
        fields_of(&reapplied, "kubectl"),
        json!({"f:spec": {"f:replicas": {}, "f:selector": {}}}),
        "a Deployment's selector is atomic"
    );
}

#[test]
fn removed_fields_leave_every_manager() {
    let first = applied(
        None,
        &cm(json!({"a": "1", "b": "2"})),
        "kubectl",
        T0,
        configmaps(),
    );
    let mut edited = first.clone();
    edited["data"].as_object_mut().map(|d| d.remove("b"));
    record_update(
        Some(&first),
        &mut edited,
        &request("kubectl-edit", "v1", T1),
        configmaps(),
    );
    assert_eq!(
        fields_of(&edited, "kubectl"),
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(fields_of(&edited, "kubectl-edit"), Value::Null);
}

#[test]
fn custom_resources_merge_by_their_schema() {
    let crd = Schema::from_openapi_v3(&json!({"type": "object", "properties": {
    "spec": {"type": "object", "properties": {
        "params": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["port"],
                  "items": {"type": "object", "properties": {
                      "port": {"type": "integer"}, "name": {"type": "string"}}}},
        "args": {"type": "array", "items": {"type": "string"}}
    }}}}))
    .expect("valid");
    let job = |spec: Value| {
        json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
               "metadata": {"name": "j"}, "spec": spec})
    };
    let first = applied(
        None,
        &job(json!({"params": {"a": {"x": 1}}, "ports": [{"port": 80}], "args": ["1"]})),
        "alice",
        T0,
        &crd,
    );
    assert_eq!(
        fields_of(&first, "alice"),
        json!({"f:spec": {"f:args": {}, "f:params": {"f:a": {".": {}, "f:x": {}}},
                          "f:ports": {"k:{\"port\":80}": {".": {}, "f:port": {}}}}})
    );
    let replaced = applied(
        Some(&first),
        &job(json!({"params": {"a": {"x": 1}}, "ports": [{"port": 80}], "args": ["2", "3"]})),
        "alice",
        T1,
        &crd,
    );
    assert_eq!(replaced["spec"]["args"], json!(["2", "3"]));
    let second = applied(
        Some(&first),
        &job(json!({"params": {"a": {"y": 2}}, "ports": [{"port": 81}]})),
        "bob",
        T1,
        &crd,
    );
    assert_eq!(
        second["spec"],
        json!({"params": {"a": {"x": 1, "y": 2}}, "ports": [{"port": 80}, {"port": 81}],
               "args": ["1"]})
    );
    let third = applied(Some(&second), &job(json!({})), "alice", T2, &crd);
    assert_eq!(
        third["spec"],
        json!({"params": {"a": {"y": 2}}, "ports": [{"port": 81}]})
    );
}

#[test]
fn bodies_kube_apiserver_rejects_are_errors_with_their_status() {
    let req = request("m", "v1", T0);
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!([1]), 400, "the apply body must be an object"),
        (
            json!({"apiVersion": "v2", "kind": "ConfigMap"}),
            400,
            "Incorrect version specified in apply patch. Specified patch version: v2, \
             expected: v1",
        ),
        (
            json!({"apiVersion": "v1"}),
            400,
            "Object 'Kind' is missing in the apply body",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"managedFields": [{"manager": "x"}]}}),
            400,
            "metadata.managedFields must be nil",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "d", "finalizers": ["a", "a"]}}),
            500,
            "failed to create typed patch object (d/c; /v1, Kind=ConfigMap): \
             .metadata.finalizers: duplicate entries for key [=\"a\"]",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c"}, "data": {"a": true}}),
            500,
            "failed to create typed patch object (/c; /v1, Kind=ConfigMap): \
             .data.a: expected string, got &value.valueUnstructured{Value:true}",
        ),
    ];
    for (body, code, message) in cases {
        let err = apply(None, &body, &req, false, configmaps()).expect_err("rejected");
        assert_eq!((err.code(), err.to_string().as_str()), (code, message));
        let reason = if code == 500 { "" } else { "BadRequest" };
        assert_eq!(err.reason(), reason);
    }
    let nobody = request("", "v1", T0);
    let err = apply(None, &cm(json!({})), &nobody, false, configmaps()).expect_err("no manager");
    assert_eq!(
        (err.code(), err.reason(), err.to_string().as_str()),
        (
            422,
            "Invalid",
            "fieldManager: Required value: is required for apply patch"
        )
    );
}

#[test]
fn apply_bodies_may_be_yaml_or_json() {
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"1\"\n";
    assert_eq!(
        parse_body(yaml).expect("yaml"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
               "data": {"a": "1"}})
    );
    assert_eq!(
        parse_body(br#"{"kind": "ConfigMap"}"#).expect("json"),
        json!({"kind": "ConfigMap"})
    );
    let err = parse_body(b"a: [1, 2").expect_err("broken");
    assert_eq!(err.code(), 400);
    assert_eq!(
        err.status_message(),
        "the apply body is not valid JSON or YAML: unclosed bracket '[' at line 1, column 4"
    );
}

#[test]
fn a_body_nested_too_deep_is_refused_without_exhausting_the_stack() {
    // Deeper than JSON's 128 levels, so it is tried as YAML too: the YAML
    // parser's depth cap must end it before the test thread's 2 MiB stack.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let err = parse_body(deep.as_bytes()).expect_err("too deep");
    assert_eq!(err.code(), 400);
    assert!(
        err.status_message().contains("Depth"),
        "{}",
        err.status_message()
    );
    let fine = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
    assert!(
        parse_body(fine.as_bytes()).is_ok(),
        "JSON keeps its 128 levels"
    );
}

#[test]
fn yaml_apply_bodies_read_scalars_as_yaml_1_2_does() {
    let yaml = b"kind: ConfigMap\ndata: {a: yes, b: on, c: 017, d: 1_000, e: 0o17}\nx: 1\nx: 2\nm: {<<: {y: 1}}\n";
    assert_eq!(
        parse_body(yaml).expect("yaml"),
        json!({"kind": "ConfigMap", "data": {"a": "yes", "b": "on", "c": "017", "d": "1_000", "e": 15},
               "x": 2, "m": {"<<": {"y": 1}}})
    );
}

/// A ConfigMap body with some data keys and labels.
fn configmap_config() -> impl Strategy<Value = Value> {
    let data = prop::collection::btree_map("[a-d]{1,2}", "[a-z0-9]{0,3}", 0..6);
    let labels = prop::collection::btree_map("[k-n]", "[a-z]{1,3}", 0..3);
    (data, labels).prop_map(|(data, labels)| {
        let mut config = cm(json!(data));
        if !labels.is_empty() {
            config["metadata"]["labels"] = json!(labels);
        }
        config
    })
}

/// A Deployment body with containers, each with some env vars.
fn deployment_config() -> impl Strategy<Value = Value> {
    let env = prop::collection::btree_map("[A-C]", "[a-z]{1,2}", 0..3);
    let container = ("[a-z]{1,2}", env);
    prop::collection::btree_map("[p-s]", container, 1..4).prop_map(|containers| {
        let containers: Vec<Value> = containers
            .into_iter()
            .map(|(name, (image, env))| {
                let env: Vec<Value> = env
                    .into_iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect();
                json!({"name": name, "image": image, "env": env})
            })
            .collect();
        deploy(json!({"template": {"spec": {"containers": containers}}}))
    })
}

/// Drops the `data` keys and labels not chosen by `keep`.
fn subset(config: &Value, keep: &[bool]) -> Value {
    let mut out = config.clone();
    let mut flags = keep.iter().cycle();
    if let Some(map) = out.get_mut("data").and_then(Value::as_object_mut) {
        map.retain(|_, _| *flags.next().unwrap_or(&true));
    }
    if let Some(metadata) = out.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut)
    {
        labels.retain(|_, _| *flags.next().unwrap_or(&true));
        if labels.is_empty() {
            metadata.remove("labels");
        }
    }
    out
}

proptest! {
    #[test]
    fn applying_the_same_configmap_twice_is_a_no_op(config in configmap_config()) {
        let first = applied(None, &config, "m", T0, configmaps());
        let second = applied(Some(&first), &config, "m", T1, configmaps());
        prop_assert_eq!(second, first);
    }

    #[test]
    fn applying_the_same_deployment_twice_is_a_no_op(config in deployment_config()) {
        let first = applied(None, &config, "m", T0, deployments());
        let second = applied(Some(&first), &config, "m", T1, deployments());
        prop_assert_eq!(second, first);
    }

    #[test]
    fn applying_a_subset_removes_exactly_the_dropped_fields(
        config in configmap_config(),
        keep in prop::collection::vec(any::<bool>(), 1..12),
    ) {
        let smaller = subset(&config, &keep);
        let first = applied(None, &config, "m", T0, configmaps());
        let second = applied(Some(&first), &smaller, "m", T1, configmaps());
        let mut expected = smaller.clone();
        if expected["data"].as_object().is_some_and(|d| d.is_empty()) {
            // An emptied map goes, as a typed object omits it.
            if !config["data"].as_object().is_some_and(|d| d.is_empty()) {
                expected.as_object_mut().map(|o| o.remove("data"));
            }
        }
        prop_assert_eq!(without_managed(&second), expected);
    }

    #[test]
    fn dropped_fields_another_manager_owns_stay(
        mine in configmap_config(),
        theirs in prop::collection::btree_map("[w-z]{1,2}", "[a-z]{1,3}", 1..4),
    ) {
        let first = applied(None, &mine, "me", T0, configmaps());
        let second = applied(Some(&first), &cm(json!(theirs)), "them", T1, configmaps());
        let third = applied(Some(&second), &cm(json!({})), "me", T2, configmaps());
        prop_assert_eq!(&third["data"], &json!(theirs));
        prop_assert_eq!(third["metadata"].get("labels"), None);
    }

    #[test]
    fn dropping_containers_and_env_vars_removes_just_those(
        config in deployment_config(),
        keep in prop::collection::vec(any::<bool>(), 1..8),
    ) {
        let mut smaller = config.clone();
        let mut flags = keep.iter().cycle();
        let containers = smaller["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .expect("containers");
        containers.retain(|_| *flags.next().unwrap_or(&true));
        for container in containers.iter_mut() {
            if let Some(env) = container["env"].as_array_mut() {
                env.retain(|_| *flags.next().unwrap_or(&true));
            }
        }
        let first = applied(None, &config, "m", T0, deployments());
        let second = applied(Some(&first), &smaller, "m", T1, deployments());
        let mut expected = smaller.clone();
        let before: Vec<Value> = config["spec"]["template"]["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let containers = expected["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .expect("containers");
        for container in containers.iter_mut() {
            // An env list emptied by the apply goes, as a typed object omits it.
            let had_env = before
                .iter()
                .find(|c| c["name"] == container["name"])
                .is_some_and(|c| c["env"].as_array().is_some_and(|e| !e.is_empty()));
            if had_env && container["env"].as_array().is_some_and(Vec::is_empty) {
                container.as_object_mut().map(|c| c.remove("env"));
            }
        }
        if containers.is_empty() {
            expected.as_object_mut().map(|o| o.remove("spec"));
        }
        prop_assert_eq!(without_managed(&second), expected);
    }
}

#[test]
fn managed_fields_a_client_sends_are_kept_when_valid_and_ignored_when_not() {
    let first = applied(None, &cm(json!({"a": "1"})), "kubectl", T0, configmaps());
    let handed_over = json!([{"manager": "new-owner", "operation": "Apply", "apiVersion": "v1",
        "time": T0, "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}]);
    let mut edited = first.clone();
    edited["metadata"]["managedFields"] = handed_over.clone();
    record_update(
        Some(&first),
        &mut edited,
        &request("kubectl-edit", "v1", T1),
        configmaps(),
    );
    assert_eq!(edited["metadata"]["managedFields"], handed_over);

    let mut garbage = first.clone();
    garbage["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Sideways"}]);
    record_update(
        Some(&first),
        &mut garbage,
        &request("kubectl-edit", "v1", T1),
        configmaps(),
    );
    assert_eq!(garbage, first);
}

#[test]
fn an_update_leaves_the_entries_it_does_not_touch_as_they_were() {
    let first = applied(None, &cm(json!({"a": "1"})), "alice", T0, configmaps());
    let mut second = first.clone();
    second["data"]["b"] = json!("2");
    record_update(
        Some(&first),
        &mut second,
        &request("bob", "v1", T1),
        configmaps(),
    );
    assert_eq!(
        entries(&second),
        vec![
            entries(&first)[0].clone(),
            json!({"manager": "bob", "operation": "Update", "apiVersion": "v1", "time": T1,
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}})
        ]
    );
    let mut third = second.clone();
    third["data"]["a"] = json!("9");
    third["data"].as_object_mut().map(|d| d.remove("b"));
    record_update(
        Some(&second),
        &mut third,
        &request("carol", "v1", T2),
        configmaps(),
    );
    assert_eq!(
        entries(&third),
        vec![
            json!({"manager": "carol", "operation": "Update", "apiVersion": "v1", "time": T2,
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}})
        ]
    );
}

#[test]
fn field_managers_default_to_the_user_agent_and_are_validated() {
    assert_eq!(
        manager_from_user_agent("kubectl/v1.33.0 (linux/amd64) kubernetes/abc"),
        "kubectl"
    );
    assert_eq!(manager_from_user_agent("kube-rs"), "kube-rs");
    assert_eq!(manager_from_user_agent(""), "unknown");
    assert_eq!(manager_from_user_agent("/v1"), "unknown");
    assert_eq!(manager_from_user_agent(&"x".repeat(300)).len(), 128);
    assert!(validate_manager("policyhost").is_ok());
    let err = validate_manager(&"x".repeat(129)).expect_err("too long");
    assert_eq!((err.code(), err.reason()), (422, "Invalid"));
    assert!(
        err.to_string()
            .ends_with(": may not be more than 128 bytes")
    );
    let err = validate_manager("a\u{7}b").expect_err("unprintable");
    assert_eq!(
        err.to_string(),
        "fieldManager: Invalid value: \"a\\u{7}b\": must only contain printable characters"
    );
    let req = request("bad\nname", "v1", T0);
    let err = apply(None, &cm(json!({})), &req, false, configmaps()).expect_err("invalid");
    assert_eq!(err.code(), 422);
}

#[test]
fn an_object_without_managed_fields_stays_untracked_until_applied() {
    let old = cm(json!({"a": "1"}));
    let mut new = cm(json!({"a": "2"}));
    record_update(
        Some(&old),
        &mut new,
        &request("editor", "v1", T0),
        configmaps(),
    );
    assert_eq!(new, cm(json!({"a": "2"})));
}
