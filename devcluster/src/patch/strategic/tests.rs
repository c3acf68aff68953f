//! Strategic merge patch cases, from the documented behaviour of
//! kube-apiserver (merge keys, directives, list order, errors).

use serde_json::{Value, json};

use super::*;
use crate::kinds;
use crate::schema::Schema;

fn kind(group: &str, kind: &str) -> &'static Schema {
    kinds::schema(group, "v1", kind).expect("built in")
}

fn pod() -> &'static Schema {
    kind("", "Pod")
}

fn patched(schema: &Schema, original: Value, patch: Value) -> Value {
    strategic_merge(&original, &patch, schema).expect("a valid patch")
}

fn failed(schema: &Schema, original: Value, patch: Value) -> Error {
    strategic_merge(&original, &patch, schema).expect_err("an invalid patch")
}

fn containers(names: &[&str]) -> Value {
    let items: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    json!({"spec": {"containers": items}})
}

fn names(value: &Value) -> Vec<&str> {
    value["spec"]["containers"]
        .as_array()
        .map(|items| items.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

// New items come first, as in the Kubernetes documentation's
// "Update API Objects in Place Using kubectl patch" (the patch adding
// `patch-demo-ctr-2` lists it before `patch-demo-ctr`).
#[test]
fn containers_merge_by_name_and_keep_the_others() {
    let live = json!({"spec": {"containers": [
        {"name": "app", "image": "app:v1", "env": [{"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "proxy:v1"}
    ]}});
    let patch = json!({"spec": {"containers": [
        {"name": "app", "image": "app:v2", "env": [{"name": "B", "value": "2"}]}
    ]}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"spec": {"containers": [
            {"name": "app", "image": "app:v2",
             "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "proxy:v1"}
        ]}})
    );
}

#[test]
fn a_new_container_comes_before_the_server_items() {
    let live = json!({"spec": {"containers": [{"name": "patch-demo-ctr", "image": "nginx"}]}});
    let patch = json!({"spec": {"containers": [{"name": "patch-demo-ctr-2", "image": "redis"}]}});
    let out = patched(pod(), live, patch);
    assert_eq!(names(&out), vec!["patch-demo-ctr-2", "patch-demo-ctr"]);
    let out = patched(pod(), containers(&["a", "b"]), containers(&["b", "c"]));
    assert_eq!(names(&out), vec!["a", "b", "c"]);
}

#[test]
fn deployment_and_job_templates_merge_containers_too() {
    for (group, kind_name) in [("apps", "Deployment"), ("batch", "Job")] {
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "b", "image": "2"}]}}}});
        let out = patched(kind(group, kind_name), live, patch);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]),
            "{kind_name}"
        );
    }
}

#[test]
fn patch_delete_in_a_list_item_removes_the_items_with_that_key() {
    let patch = json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}});
    let out = patched(pod(), containers(&["a", "b", "a"]), patch);
    assert_eq!(names(&out), vec!["b"]);
}

#[test]
fn patch_replace_in_a_list_replaces_the_list() {
    let patch = json!({"spec": {"containers": [{"name": "x"}, {"$patch": "replace"}]}});
    let out = patched(pod(), containers(&["a", "b"]), patch);
    assert_eq!(out, containers(&["x"]));
    let emptied = json!({"spec": {"containers": [{"$patch": "replace"}]}});
    assert_eq!(
        patched(pod(), containers(&["a"]), emptied),
        json!({"spec": {"containers": []}})
    );
}

#[test]
fn patch_replace_in_a_map_replaces_the_map_and_delete_empties_it() {
    let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
                      "spec": {"securityContext": {"runAsUser": 1}}});
    let patch = json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}},
                       "spec": {"securityContext": {"$patch": "delete"}}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"metadata": {"labels": {"c": "3"}}, "spec": {"securityContext": {}}})
    );
}

#[test]
fn null_deletes_a_field() {
    let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
    let patch = json!({"metadata": {"labels": {"a": null, "missing": null}}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"metadata": {"labels": {"b": "2"}}})
    );
}

#[test]
fn finalizers_merge_as_a_set() {
    let live = json!({"metadata": {"finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"finalizers": ["b", "policyhost.dev/cleanup"]}});
    assert_eq!(
        patched(kind("", "ConfigMap"), live, patch),
        json!({"metadata": {"finalizers": ["a", "b", "policyhost.dev/cleanup"]}})
    );
}

#[test]
fn delete_from_primitive_list_removes_values() {
    let live = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "c", "zz"]}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"metadata": {"finalizers": ["b"]}})
    );
    let nothing = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
    assert_eq!(
        patched(pod(), json!({"metadata": {}}), nothing),
        json!({"metadata": {}})
    );
}

#[test]
fn retain_keys_drops_unlisted_keys() {
    let live = json!({"spec": {"strategy": {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxSurge": 1}}}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    assert_eq!(
        patched(kind("apps", "Deployment"), live, patch),
        json!({"spec": {"strategy": {"type": "Recreate"}}})
    );
}

#[test]
fn retain_keys_must_list_every_key_the_patch_sets() {
    let live = json!({"spec": {"strategy": {"type": "Recreate"}}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"],
                                             "rollingUpdate": {"maxSurge": 1}}}});
    let err = failed(kind("apps", "Deployment"), live, patch);
    assert!(matches!(err, Error::BadRetainKeys));
    assert_eq!(
        (err.code(), err.reason(), err.to_string().as_str()),
        (400, "BadRequest", "invalid patch format of retainKeys")
    );
}

#[test]
fn set_element_order_orders_the_merged_list() {
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
        "containers": [{"name": "a", "image": "new"}]
    }});
    let out = patched(pod(), containers(&["a", "b", "c"]), patch);
    assert_eq!(names(&out), vec!["c", "a", "b"]);
    assert_eq!(out["spec"]["containers"][1]["image"], "new");
}

#[test]
fn set_element_order_must_agree_with_the_patch_list() {
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b"}, {"name": "a"}]
    }});
    let err = failed(pod(), containers(&["a", "b"]), patch);
    assert!(matches!(err, Error::OrderMismatch { .. }));
    assert_eq!(err.code(), 422);
    assert!(
        err.to_string()
            .contains("doesn't match $setElementOrder list")
    );
}

#[test]
fn set_element_order_for_finalizers_orders_scalars() {
    let live = json!({"metadata": {"finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"$setElementOrder/finalizers": ["b", "c", "a"],
                                    "finalizers": ["c"]}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"metadata": {"finalizers": ["b", "c", "a"]}})
    );
}

#[test]
fn merged_lists_put_patch_items_in_patch_order_around_server_items() {
    let live = json!({"spec": {"containers": [
        {"name": "1"}, {"name": "2", "image": "b"}, {"name": "3"}]}});
    let patch = json!({"spec": {"containers": [
        {"name": "3", "image": "c"}, {"name": "1", "image": "a"}]}});
    let out = patched(pod(), live, patch);
    assert_eq!(names(&out), vec!["2", "3", "1"]);
}

#[test]
fn lists_without_a_patch_strategy_are_replaced() {
    let live = json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}],
                               "containers": [{"name": "c", "args": ["x", "y"]}]}});
    let patch = json!({"spec": {"tolerations": [{"key": "c"}],
                                "containers": [{"name": "c", "args": ["z"]}]}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"spec": {"tolerations": [{"key": "c"}],
                        "containers": [{"name": "c", "args": ["z"]}]}})
    );
}

#[test]
fn owner_references_merge_by_uid_and_ports_by_container_port() {
    let live = json!({
        "metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]},
        "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http"}]}]}
    });
    let patch = json!({
        "metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]},
        "spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80, "name": "web"}, {"containerPort": 443}]}]}
    });
    assert_eq!(
        patched(pod(), live, patch),
        json!({
            "metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, {"uid": "1", "name": "a"}]},
            "spec": {"containers": [{"name": "c", "ports": [
                {"containerPort": 80, "name": "web"}, {"containerPort": 443}]}]}
        })
    );
}

#[test]
fn status_conditions_merge_by_type() {
    let live = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}});
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    assert_eq!(
        patched(pod(), live, patch),
        json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}})
    );
}

#[test]
fn directives_in_new_fields_are_applied_and_never_stored() {
    let patch = json!({"spec": {
        "initContainers": [{"name": "x", "env": [{"name": "A", "$patch": "delete"}]},
                           {"name": "y", "$patch": "delete"}],
        "securityContext": {"$patch": "replace", "runAsUser": 1},
        "$unknownDirective": true
    }});
    assert_eq!(
        patched(pod(), json!({"spec": {}}), patch),
        json!({"spec": {"initContainers": [{"name": "x", "env": []}],
                        "securityContext": {"runAsUser": 1}}})
    );
}

#[test]
fn a_merge_directive_is_rejected_as_kube_apiserver_rejects_it() {
    let err = failed(
        pod(),
        json!({}),
        json!({"metadata": {"labels": {"$patch": "merge"}}}),
    );
    assert_eq!(
        err.to_string(),
        "unknown patch type: merge in map: {\"$patch\":\"merge\"}"
    );
    assert_eq!((err.code(), err.reason()), (422, "Invalid"));
    let err = failed(
        pod(),
        containers(&["a"]),
        json!({"spec": {"containers": [{"$patch": "merge"}]}}),
    );
    assert_eq!(
        err.to_string(),
        "merging lists cannot yet be specified in the patch"
    );
}

#[test]
fn malformed_patches_are_errors_with_their_status() {
    let cases: Vec<(Value, Value, u16, &str)> = vec![
        (json!({}), json!([1]), 400, "invalid JSON document"),
        (
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            400,
            "invalid patch format of primitive list",
        ),
        (
            json!({}),
            json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
            400,
            "invalid patch format of setElementOrder list",
        ),
        (
            json!({}),
            json!({"spec": {"$retainKeys": "x"}}),
            400,
            "invalid patch format of retainKeys",
        ),
        (
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [["b"]]}}),
            422,
            "lists of lists are not supported",
        ),
        (
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [1]}}),
            422,
            "list element types are not identical: [\"a\",1]",
        ),
        (
            containers(&["a"]),
            json!({"spec": {"containers": [{"image": "x"}]}}),
            422,
            "map: {\"image\":\"x\"} does not contain declared merge key: name",
        ),
    ];
    for (original, patch, code, message) in cases {
        let err = failed(pod(), original, patch);
        assert_eq!((err.code(), err.to_string().as_str()), (code, message));
    }
}

#[test]
fn custom_resources_do_not_support_strategic_merge_patch() {
    let schema = Schema::from_openapi_v3(&json!({"type": "object"})).expect("valid");
    let err = failed(&schema, json!({}), json!({}));
    assert!(matches!(err, Error::Unsupported));
    assert_eq!((err.code(), err.reason()), (415, "UnsupportedMediaType"));
    assert!(err.to_string().starts_with(
        "the body of the request was in an unknown format - accepted media types include:"
    ));
}
