//! Foreign Pods for the scale benchmarks: the other tenants' workloads a
//! cluster holds, which the operator does not own and must not pay for.
//!
//! Each is a realistic workload Pod (≈ 4 KB of JSON as sent): two
//! containers with env, probes, resources and mounts, its application's
//! Deployment as controller (fifty Pods per application), and none of the
//! operator's labels.

#![allow(dead_code)]

use serde_json::{Value, json};

/// The namespaces foreign Pods are spread over.
pub const NAMESPACES: [&str; 5] = ["tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-e"];

/// Foreign Pods per application (one owning Deployment each).
pub const PODS_PER_APP: usize = 50;

/// The application foreign Pod `i` belongs to.
pub fn app(i: usize) -> usize {
    i / PODS_PER_APP
}

/// The namespace of application `app`'s Deployment and Pods.
pub fn app_namespace(app: usize) -> &'static str {
    NAMESPACES[app % NAMESPACES.len()]
}

/// The namespace of foreign Pod `i`.
pub fn namespace(i: usize) -> &'static str {
    app_namespace(app(i))
}

/// The name of foreign Pod `i`.
pub fn name(i: usize) -> String {
    format!("app-{:04}-5d8f7c9b4-{i:06}", app(i))
}

/// The Deployment that controls application `app`'s Pods. It must exist:
/// a garbage collector deletes Pods whose owners are gone.
pub fn deployment(app: usize) -> Value {
    let labels = json!({"app.kubernetes.io/name": format!("app-{app:04}")});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": format!("app-{app:04}"), "namespace": app_namespace(app), "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.example.com/tenant/app:2.0.0"}]}},
        },
    })
}

/// The manifest of foreign Pod `i`, as a client sends it; `owner_uid` is
/// the UID of its application's [`deployment`].
pub fn pod(i: usize, owner_uid: &str) -> Value {
    let app = app(i);
    let env: Vec<Value> = (0..12)
        .map(|e| json!({"name": format!("APP_SETTING_{e}"), "value": format!("value-{app}-{e}-0123456789abcdef")}))
        .collect();
    let container = |name: &str, port: u16| {
        json!({
            "name": name,
            "image": format!("registry.example.com/tenant/{name}:2.{}.{}", app % 13, i % 7),
            "imagePullPolicy": "IfNotPresent",
            "args": ["--listen=:8080", "--log-format=json", "--metrics=:9090"],
            "ports": [
                {"containerPort": port, "name": "http", "protocol": "TCP"},
                {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}
            ],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/app"},
                {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
            ],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": port}, "periodSeconds": 10},
            "livenessProbe": {"httpGet": {"path": "/live", "port": port}, "periodSeconds": 20},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name(i),
            "namespace": namespace(i),
            "labels": {
                "app.kubernetes.io/name": format!("app-{app:04}"),
                "app.kubernetes.io/part-of": "storefront",
                "pod-template-hash": "5d8f7c9b4",
            },
            "annotations": {
                "example.com/owner": "team-storefront",
                "example.com/change-cause": format!("rollout {} of app-{app:04}: {}", i % 9, "x".repeat(160)),
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment",
                "name": format!("app-{app:04}"),
                "uid": owner_uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "containers": [container("app", 8080), container("proxy", 8081)],
            "volumes": [
                {"name": "config", "configMap": {"name": format!("app-{app:04}-config")}},
                {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}
            ],
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    })
}

/// Foreign Pod `i` as an API server stores and sends it: with identity,
/// timestamps, `managedFields` and a Pending status.
pub fn stored(i: usize) -> Value {
    let mut pod = pod(i, &format!("00000000-0000-4000-8000-{:012}", app(i)));
    let meta = &mut pod["metadata"];
    meta["uid"] = json!(format!("10000000-0000-4000-8000-{i:012}"));
    meta["resourceVersion"] = json!(format!("{}", 1000 + i));
    meta["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
    meta["managedFields"] = json!([{
        "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
        "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/name": {},
            "f:app.kubernetes.io/part-of": {}, "f:pod-template-hash": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:env": {}, "f:image": {},
                "f:ports": {}, "f:resources": {}}, "k:{\"name\":\"proxy\"}": {".": {}, "f:env": {},
                "f:image": {}, "f:ports": {}, "f:resources": {}}},
                "f:volumes": {}, "f:tolerations": {}}},
    }]);
    pod["status"] = json!({"phase": "Pending", "qosClass": "Burstable"});
    pod
}
