//! Each expected message is what kube-apiserver v1.37 answered for the same
//! body.

use std::sync::LazyLock;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::schemars::SchemaGenerator;
use serde_json::{Value, json};

use super::*;

/// The kinds these tests decode, in the order of [`KINDS`].
static TYPES: LazyLock<Registry> = LazyLock::new(|| {
    Registry::new([
        SchemaGenerator::subschema_for::<ConfigMap> as Mirror,
        SchemaGenerator::subschema_for::<Pod>,
        SchemaGenerator::subschema_for::<Secret>,
        SchemaGenerator::subschema_for::<Deployment>,
        SchemaGenerator::subschema_for::<Service>,
        SchemaGenerator::subschema_for::<CustomResourceDefinition>,
    ])
});

const KINDS: [(&str, &str); 6] = [
    ("", "ConfigMap"),
    ("", "Pod"),
    ("", "Secret"),
    ("apps", "Deployment"),
    ("", "Service"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
];

fn go_type(group: &str, kind: &str) -> GoType {
    let index = KINDS
        .iter()
        .position(|k| *k == (group, kind))
        .unwrap_or_else(|| panic!("{group}/{kind} is not in these tests' registry"));
    TYPES.kind(index)
}

fn decoded(group: &str, kind: &str, body: Value) -> Option<String> {
    go_type(group, kind)
        .decode_json(&body)
        .err()
        .map(|e| e.to_string())
}

fn converted(group: &str, kind: &str, object: Value) -> Option<String> {
    go_type(group, kind)
        .convert_unstructured(&object, Numbers::PreserveInts)
        .err()
        .map(|e| e.to_string())
}

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": spec})
}

fn pod_container(container: Value) -> Value {
    json!({"metadata": {"name": "p"}, "spec": {"containers": [container]}})
}

#[test]
fn a_wrongly_typed_value_is_named_by_its_struct_path_and_go_type() {
    let cases = [
        (
            "",
            "ConfigMap",
            json!({"metadata": {"name": "a"}, "data": {"a": true}}),
            "json: cannot unmarshal bool into Go struct field ConfigMap.data of type string",
        ),
        (
            "",
            "Pod",
            pod_container(json!({"name": "a", "image": 1})),
            "json: cannot unmarshal number into Go struct field Container.spec.containers.image \
             of type string",
        ),
        (
            "",
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": "x"}),
            "json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec",
        ),
        (
            "",
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": {}}}),
            "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type \
             []v1.Container",
        ),
        (
            "",
            "Pod",
            json!({"metadata": {"name": "p", "labels": {"a": 1}}}),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of \
             type string",
        ),
        (
            "",
            "ConfigMap",
            json!({"data": []}),
            "json: cannot unmarshal array into Go struct field ConfigMap.data of type \
             map[string]string",
        ),
        (
            "",
            "ConfigMap",
            json!({"immutable": "yes"}),
            "json: cannot unmarshal string into Go struct field ConfigMap.immutable of type bool",
        ),
        (
            "",
            "ConfigMap",
            json!({"metadata": {"ownerReferences": [{"name": "n", "controller": "yes"}]}}),
            "json: cannot unmarshal string into Go struct field \
             OwnerReference.metadata.ownerReferences.controller of type bool",
        ),
        (
            "",
            "Secret",
            json!({"data": {"a": 5}}),
            "json: cannot unmarshal number into Go struct field Secret.data of type []uint8",
        ),
        (
            "",
            "Service",
            json!({"spec": {"ports": [{"port": 80, "targetPort": true}]}}),
            "json: cannot unmarshal bool into Go struct field ServicePort.spec.ports.targetPort \
             of type int32",
        ),
        (
            "apps",
            "Deployment",
            deployment(json!({"replicas": "3"})),
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of \
             type int32",
        ),
        (
            "apps",
            "Deployment",
            deployment(json!({"template": {"spec": {"containers": [
                {"name": "a", "ports": [{"containerPort": "80"}]}]}}})),
            "json: cannot unmarshal string into Go struct field \
             ContainerPort.spec.template.spec.containers.ports.containerPort of type int32",
        ),
    ];
    for (group, kind, body, message) in cases {
        assert_eq!(
            decoded(group, kind, body.clone()).as_deref(),
            Some(message),
            "{body}"
        );
    }
}

#[test]
fn numbers_keep_their_text_when_they_do_not_fit() {
    for (replicas, text) in [
        (json!(1.5), "number 1.5"),
        // Go echoes the literal as written; this is serde_json's spelling
        // of it (as Go's and JavaScript's encoders write it too).
        (json!(1e20), "number 1e+20"),
        (json!(3_000_000_000_u64), "number 3000000000"),
    ] {
        assert_eq!(
            decoded(
                "apps",
                "Deployment",
                deployment(json!({"replicas": replicas}))
            ),
            Some(format!(
                "json: cannot unmarshal {text} into Go struct field DeploymentSpec.spec.replicas \
                 of type int32"
            ))
        );
    }
    assert_eq!(
        decoded("apps", "Deployment", deployment(json!({"replicas": -3}))),
        None
    );
}

#[test]
fn types_with_their_own_decoders_answer_in_their_words() {
    let regex = "quantities must match the regular expression \
                 '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
    for cpu in [json!(true), json!("abc")] {
        let limits = json!({"name": "a", "resources": {"limits": {"cpu": cpu}}});
        assert_eq!(
            decoded("", "Pod", pod_container(limits)).as_deref(),
            Some(regex)
        );
    }
    let ok = json!({"name": "a", "resources": {"limits": {"cpu": 1.5, "memory": "1Gi"}}});
    assert_eq!(decoded("", "Pod", pod_container(ok)), None);
    assert_eq!(
        decoded("", "Secret", json!({"data": {"a": "not base64!"}})).as_deref(),
        Some("illegal base64 data at input byte 3")
    );
    assert_eq!(
        decoded("", "ConfigMap", json!({"binaryData": {"a": "!!"}})).as_deref(),
        Some("illegal base64 data at input byte 0")
    );
    assert_eq!(
        decoded(
            "",
            "ConfigMap",
            json!({"metadata": {"creationTimestamp": 5}})
        )
        .as_deref(),
        Some(
            "json: cannot unmarshal number into Go struct field \
             ObjectMeta.metadata.creationTimestamp of type string"
        )
    );
    assert_eq!(
        decoded(
            "",
            "ConfigMap",
            json!({"metadata": {"creationTimestamp": "garbage"}})
        )
        .as_deref(),
        Some(
            "parsing time \"garbage\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \
             \"garbage\" as \"2006\""
        )
    );
}

#[test]
fn nulls_and_unknown_fields_are_no_errors() {
    assert_eq!(
        decoded(
            "",
            "ConfigMap",
            json!({"metadata": {"labels": {"a": null}}, "data": {"a": null}, "unknown": [1]})
        ),
        None
    );
    assert_eq!(
        decoded("", "Pod", json!({"spec": null, "status": null})),
        None
    );
}

#[test]
fn a_decoder_of_its_own_stops_the_walk_before_an_earlier_type_error() {
    // Go remembers the boolean and goes on; the quantity's decoder stops it.
    let body = json!({"metadata": {"labels": {"a": true}}, "spec": {"containers": [
        {"name": "a", "resources": {"limits": {"cpu": "abc"}}}]}});
    assert!(decoded("", "Pod", body).is_some_and(|e| e.starts_with("quantities must match")),);
    let two = json!({"spec": {"containers": [{"image": 1}, {"image": true}]}});
    assert_eq!(
        decoded("", "Pod", two).as_deref(),
        Some(
            "json: cannot unmarshal number into Go struct field Container.spec.containers.image \
             of type string"
        ),
        "the first of two type errors"
    );
}

#[test]
fn a_crd_schema_is_decoded_afresh_inside_its_schema_or_bool() {
    let crd = |schema: Value| json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}});
    let path = "spec.versions.schema.openAPIV3Schema";
    assert_eq!(
        decoded(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            crd(json!({"type": 5}))
        )
        .as_deref(),
        Some(
            format!(
                "json: cannot unmarshal number into Go struct field JSONSchemaProps.{path}.type \
                 of type string"
            )
            .as_str()
        )
    );
    assert_eq!(
        decoded(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            crd(json!({"additionalProperties": {"type": 5}}))
        )
        .as_deref(),
        Some(
            format!(
                "json: cannot unmarshal number into Go struct field \
                 JSONSchemaProps.{path}.additionalProperties.type of type string"
            )
            .as_str()
        )
    );
    assert_eq!(
        decoded(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            crd(json!({"additionalProperties": "yes"}))
        )
        .as_deref(),
        Some("boolean or JSON schema expected")
    );
    let fine = crd(json!({"type": "object", "additionalProperties": true,
        "properties": {"a": {"type": "string", "default": {"any": ["json"]}}}}));
    assert_eq!(
        decoded("apiextensions.k8s.io", "CustomResourceDefinition", fine),
        None
    );
}

#[test]
fn the_converter_speaks_of_go_kinds() {
    let cases = [
        (
            deployment(json!({"replicas": "3"})),
            "unrecognized type: int32",
        ),
        (
            deployment(json!({"replicas": 1.5})),
            "cannot convert float64 to int32",
        ),
        (
            deployment(json!({"paused": "yes"})),
            "unrecognized type: bool",
        ),
        (
            deployment(json!({"template": {"spec": {"containers": [{"name": "a", "image": 5}]}}})),
            "cannot convert int64 to string",
        ),
        (deployment(json!("x")), "cannot restore struct from: string"),
        (
            deployment(json!({"selector": []})),
            "cannot restore struct from: slice",
        ),
        (
            deployment(json!({"template": {"spec": {"containers": {"x": 1}}}})),
            "cannot restore slice from map",
        ),
        (
            deployment(json!({"strategy": {"rollingUpdate": {"maxSurge": true}}})),
            "json: cannot unmarshal bool into Go value of type int32",
        ),
        (
            deployment(json!({"template": {"spec": {"containers": [
                {"name": "a", "resources": {"limits": {"cpu": "abc"}}}]}}})),
            "quantities must match the regular expression \
             '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
    ];
    for (object, message) in cases {
        assert_eq!(
            converted("apps", "Deployment", object.clone()).as_deref(),
            Some(message),
            "{object}"
        );
    }
    assert_eq!(
        converted("", "ConfigMap", json!({"data": {"x": null, "y": 1.5}})).as_deref(),
        Some("unrecognized type: string")
    );
    assert_eq!(
        converted(
            "",
            "ConfigMap",
            json!({"metadata": {"creationTimestamp": 5}})
        )
        .as_deref(),
        Some("json: cannot unmarshal number into Go value of type string")
    );
    assert_eq!(
        converted("", "ConfigMap", json!({"binaryData": {"x": "!!"}})).as_deref(),
        Some("error decoding from json: illegal base64 data at input byte 0")
    );
    assert_eq!(
        converted("apps", "Deployment", deployment(json!({"replicas": 3.0}))),
        None,
        "a whole float converts"
    );
}

#[test]
fn apply_bodies_hold_floats_which_the_converter_takes_where_whole() {
    let apply = |replicas: Value| {
        go_type("apps", "Deployment")
            .convert_unstructured(&deployment(json!({"replicas": replicas})), Numbers::Floats)
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(apply(json!(3)), None);
    assert_eq!(
        apply(json!(1.5)).as_deref(),
        Some("cannot convert float64 to int32")
    );
}

#[test]
fn structured_merge_diff_sees_atoms() {
    let pod = go_type("", "Pod");
    let container = pod
        .child("spec")
        .and_then(|s| s.child("containers"))
        .and_then(GoType::item)
        .expect("containers");
    assert_eq!(container.atom(), Atom::Map);
    let atom = |name: &str| container.child(name).map(GoType::atom);
    assert_eq!(atom("image"), Some(Atom::String));
    assert_eq!(atom("args"), Some(Atom::List));
    assert_eq!(atom("tty"), Some(Atom::Boolean));
    assert_eq!(atom("unknown"), None);
    let limits = container
        .child("resources")
        .and_then(|r| r.child("limits"))
        .and_then(|l| l.child("cpu"))
        .map(GoType::atom);
    assert_eq!(limits, Some(Atom::Scalar));
}
