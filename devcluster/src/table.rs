//! Server-side printing: `meta.k8s.io/v1` `Table` columns and rows, as `kubectl get` asks for.

use serde_json::{Value, json};

use crate::clock;
use crate::resource::{PrinterColumn, ResourceType};

fn col(
    name: &str,
    kind: &str,
    format: &str,
    description: &str,
    priority: i64,
    path: &str,
) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        kind: kind.into(),
        declared: if kind == "date" { "string" } else { kind }.into(),
        format: format.into(),
        description: description.into(),
        priority,
        json_path: path.into(),
    }
}

/// The columns for a resource in a version, Name first.
pub(crate) fn columns(rt: &ResourceType, version: &str) -> Vec<PrinterColumn> {
    let name = col(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        0,
        ".metadata.name",
    );
    let age = col(
        "Age",
        "date",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
        ".metadata.creationTimestamp",
    );
    let mut cols = vec![name];
    if rt.custom {
        let extra = rt
            .version(version)
            .map(|v| v.columns.clone())
            .unwrap_or_default();
        if extra.is_empty() {
            // The column kube-apiserver gives a CRD without printer columns.
            cols.push(PrinterColumn {
                declared: "date".into(),
                description: "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp".into(),
                ..age
            });
        } else {
            cols.extend(extra);
        }
        return cols;
    }
    match (rt.gr.group.as_str(), rt.gr.resource.as_str()) {
        ("", "pods") => {
            cols.push(col(
                "Ready",
                "string",
                "",
                "The aggregate readiness state of this pod for accepting traffic.",
                0,
                "@ready",
            ));
            cols.push(col(
                "Status",
                "string",
                "",
                "The aggregate status of the containers in this pod.",
                0,
                "@podstatus",
            ));
            cols.push(col(
                "Restarts",
                "string",
                "",
                "The number of times the containers in this pod have been restarted.",
                0,
                "@restarts",
            ));
            cols.push(age);
            cols.push(col(
                "IP",
                "string",
                "",
                "IP address allocated to the pod.",
                1,
                ".status.podIP",
            ));
            cols.push(col(
                "Node",
                "string",
                "",
                "Name of the Node this pod is assigned to.",
                1,
                ".spec.nodeName",
            ));
        }
        ("", "persistentvolumeclaims") => {
            cols.push(col(
                "Status",
                "string",
                "",
                "phase represents the current phase of PersistentVolumeClaim.",
                0,
                "@claimstatus",
            ));
            cols.push(col(
                "Volume",
                "string",
                "",
                "volumeName is the binding reference to the PersistentVolume backing this claim.",
                0,
                ".spec.volumeName",
            ));
            cols.push(col(
                "Capacity",
                "string",
                "",
                "capacity represents the actual resources of the underlying volume.",
                0,
                "@claimcapacity",
            ));
            cols.push(col("Access Modes", "string", "", "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1", 0, "@claimaccess"));
            cols.push(col(
                "StorageClass",
                "string",
                "",
                "StorageClass of the pvc",
                0,
                "@claimclass",
            ));
            cols.push(col(
                "VolumeAttributesClass",
                "string",
                "",
                "VolumeAttributesClass of the pvc",
                0,
                "@claimattributes",
            ));
            cols.push(age);
            cols.push(col("VolumeMode", "string", "", "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.", 1, "@claimmode"));
        }
        ("", "namespaces") => {
            cols.push(col(
                "Status",
                "string",
                "",
                "The status of the namespace",
                0,
                ".status.phase",
            ));
            cols.push(age);
        }
        ("", "configmaps") | ("", "secrets") => {
            if rt.gr.resource == "secrets" {
                cols.push(col(
                    "Type",
                    "string",
                    "",
                    "The type of the secret",
                    0,
                    ".type",
                ));
            }
            cols.push(col(
                "Data",
                "string",
                "",
                "Number of data items.",
                0,
                "@datacount",
            ));
            cols.push(age);
        }
        ("apps", "deployments") => {
            cols.push(col(
                "Ready",
                "string",
                "",
                "Number of the pod with ready state",
                0,
                "@deployready",
            ));
            cols.push(col("Up-to-date", "string", "", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0, ".status.updatedReplicas"));
            cols.push(col("Available", "string", "", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0, ".status.availableReplicas"));
            cols.push(age);
        }
        ("coordination.k8s.io", "leases") => {
            cols.push(col(
                "Holder",
                "string",
                "",
                "The holder of the lease",
                0,
                ".spec.holderIdentity",
            ));
            cols.push(age);
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            cols.push(col(
                "Created At",
                "date",
                "",
                "The time the CRD was created.",
                0,
                "@createdat",
            ));
        }
        _ => cols.push(age),
    }
    cols
}

/// Evaluates the simple JSONPath forms printer columns use: `.a.b`, `.a[0].b`,
/// `.a[?(@.type=="Ready")].status`.
pub(crate) fn json_path<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    let mut cur = v;
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|e| e.get(field.trim()).and_then(Value::as_str) == Some(want))?;
            } else {
                cur = cur.get(inner.trim().parse::<usize>().ok()?)?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

fn pod_status(v: &Value) -> String {
    if !v["metadata"]["deletionTimestamp"].is_null() {
        return "Terminating".into();
    }
    let statuses = v["status"]["containerStatuses"].as_array();
    if let Some(cs) = statuses {
        for c in cs {
            if let Some(r) = c["state"]["waiting"]["reason"].as_str() {
                return r.into();
            }
            if let Some(r) = c["state"]["terminated"]["reason"].as_str()
                && v["status"]["phase"] != "Succeeded"
                && v["status"]["phase"] != "Failed"
            {
                return r.into();
            }
        }
    }
    match v["status"]["phase"].as_str() {
        Some("Succeeded") => "Completed".into(),
        Some("Failed") => "Error".into(),
        Some(p) => p.into(),
        None => "Unknown".into(),
    }
}

/// A claim's cells as kubectl prints them: capacity and access modes only
/// once a volume is bound, `<unset>` for what the claim does not say.
fn claim_cell(v: &Value, path: &str) -> Option<String> {
    let spec = &v["spec"];
    let bound = spec["volumeName"].as_str().is_some_and(|n| !n.is_empty());
    let text = |value: &Value, unset: &str| value.as_str().unwrap_or(unset).to_owned();
    Some(match path {
        "@claimstatus" if !v["metadata"]["deletionTimestamp"].is_null() => "Terminating".into(),
        "@claimstatus" => text(&v["status"]["phase"], ""),
        "@claimcapacity" if bound => text(&v["status"]["capacity"]["storage"], ""),
        // In this order whatever the claim's, as `GetAccessModesAsString`.
        "@claimaccess" if bound => [
            ("ReadWriteOnce", "RWO"),
            ("ReadOnlyMany", "ROX"),
            ("ReadWriteMany", "RWX"),
            ("ReadWriteOncePod", "RWOP"),
        ]
        .iter()
        .filter(|(mode, _)| {
            v["status"]["accessModes"]
                .as_array()
                .is_some_and(|modes| modes.iter().any(|m| m == mode))
        })
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(","),
        "@claimcapacity" | "@claimaccess" => String::new(),
        "@claimclass" => text(&spec["storageClassName"], ""),
        "@claimattributes" => match spec["volumeAttributesClassName"].as_str() {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => "<unset>".into(),
        },
        "@claimmode" => text(&spec["volumeMode"], "<unset>"),
        _ => return None,
    })
}

fn cell(v: &Value, c: &PrinterColumn) -> Value {
    if let Some(text) = claim_cell(v, &c.json_path) {
        return json!(text);
    }
    let computed = match c.json_path.as_str() {
        "@ready" => {
            let total = v["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = v["status"]["containerStatuses"]
                .as_array()
                .map_or(0, |a| a.iter().filter(|s| s["ready"] == true).count());
            Some(json!(format!("{ready}/{total}")))
        }
        "@podstatus" => Some(json!(pod_status(v))),
        "@restarts" => Some(json!(
            v["status"]["containerStatuses"]
                .as_array()
                .map_or(0, |a| a
                    .iter()
                    .filter_map(|s| s["restartCount"].as_i64())
                    .sum::<i64>())
                .to_string()
        )),
        "@datacount" => Some(json!(
            v["data"].as_object().map_or(0, serde_json::Map::len)
                + v["binaryData"].as_object().map_or(0, serde_json::Map::len)
        )),
        "@deployready" => Some(json!(format!(
            "{}/{}",
            v["status"]["readyReplicas"].as_i64().unwrap_or(0),
            v["spec"]["replicas"].as_i64().unwrap_or(1)
        ))),
        "@createdat" => Some(json!(
            v["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
        )),
        _ => None,
    };
    if let Some(c) = computed {
        return c;
    }
    let found = json_path(v, &c.json_path);
    match (c.kind.as_str(), found) {
        (_, None) | (_, Some(Value::Null)) => Value::Null,
        ("date", Some(Value::String(s))) => json!(clock::age(Some(s))),
        (_, Some(x @ (Value::String(_) | Value::Number(_) | Value::Bool(_)))) => x.clone(),
        (_, Some(other)) => json!(other.to_string()),
    }
}

/// The `columnDefinitions` array.
pub(crate) fn definitions(cols: &[PrinterColumn]) -> Value {
    Value::Array(
        cols.iter()
            .map(|c| {
                json!({
                    "name": c.name, "type": c.declared,
                    "format": c.format, "description": c.description, "priority": c.priority,
                })
            })
            .collect(),
    )
}

/// One row; `object` is what `includeObject` asked for (or null for `None`).
pub(crate) fn row(cols: &[PrinterColumn], v: &Value, object: Value) -> Value {
    let cells: Vec<Value> = cols.iter().map(|c| cell(v, c)).collect();
    let mut r = json!({"cells": cells});
    if !object.is_null() {
        r["object"] = object;
    }
    r
}

/// A whole `Table`.
pub(crate) fn table(
    cols: &[PrinterColumn],
    rows: Vec<Value>,
    rv: u64,
    cont: Option<String>,
    remaining: Option<u64>,
) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(n) = remaining {
        meta["remainingItemCount"] = json!(n);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": definitions(cols),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_follows_fields_indexes_and_filters() {
        let v = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}, "a": [1, 2]});
        assert_eq!(
            json_path(&v, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(json_path(&v, ".a[1]"), Some(&json!(2)));
        assert_eq!(json_path(&v, ".missing.x"), None);
    }

    #[test]
    fn pod_rows_show_ready_and_status() {
        let rt = crate::resource::Registry::new()
            .lookup("", "v1", "pods")
            .unwrap();
        let cols = columns(&rt, "v1");
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 0, "state": {"running": {}}}]}
        });
        let r = row(&cols, &pod, Value::Null);
        assert_eq!(r["cells"][0], "p");
        assert_eq!(r["cells"][1], "1/1");
        assert_eq!(r["cells"][2], "Running");
    }

    #[test]
    fn claim_rows_show_capacity_and_access_only_once_bound() {
        let rt = crate::resource::Registry::new()
            .lookup("", "v1", "persistentvolumeclaims")
            .unwrap();
        let cols = columns(&rt, "v1");
        let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Status",
                "Volume",
                "Capacity",
                "Access Modes",
                "StorageClass",
                "VolumeAttributesClass",
                "Age",
                "VolumeMode"
            ]
        );
        let mut claim = json!({
            "metadata": {"name": "scratch", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}
        });
        let cells = |claim: &Value| row(&cols, claim, Value::Null)["cells"].clone();
        let pending = cells(&claim);
        assert_eq!(pending[1], "Pending");
        assert_eq!((&pending[3], &pending[4]), (&json!(""), &json!("")));
        assert_eq!((&pending[5], &pending[6]), (&json!(""), &json!("<unset>")));
        assert_eq!(pending[8], "Filesystem");
        claim["spec"]["volumeName"] = json!("pv-1");
        claim["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                                 "capacity": {"storage": "2Gi"}});
        let bound = cells(&claim);
        assert_eq!((&bound[1], &bound[2]), (&json!("Bound"), &json!("pv-1")));
        assert_eq!((&bound[3], &bound[4]), (&json!("2Gi"), &json!("RWO,RWX")));
    }
}
