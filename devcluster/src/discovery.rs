//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, the
//! aggregated (`apidiscovery.k8s.io/v2`) forms, and the OpenAPI v3 index kubectl uses to
//! learn that the server validates fields itself.

use serde_json::{Value, json};

use crate::resource::{Registry, ResourceType};

/// `/version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-devcluster",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_entries(rt: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": rt.gr.resource,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": VERBS,
    });
    if !rt.short_names.is_empty() {
        main["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        main["categories"] = json!(rt.categories);
    }
    let mut out = vec![main];
    if rt.has_status() {
        out.push(json!({
            "name": format!("{}/status", rt.gr.resource),
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

/// `/api`.
pub(crate) fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub(crate) fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub(crate) fn group(reg: &Registry, name: &str) -> Option<Value> {
    let (g, vs) = reg.groups().into_iter().find(|(g, _)| g == name)?;
    let mut e = group_entry(&g, &vs);
    e["kind"] = json!("APIGroup");
    e["apiVersion"] = json!("v1");
    Some(e)
}

/// `/api/v1` or `/apis/<group>/<version>`; `None` when nothing is served there.
pub(crate) fn resources(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = reg.in_group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = types.iter().flat_map(|t| resource_entries(t)).collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn aggregated_group(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = reg
                .in_group_version(group, v)
                .iter()
                .map(|rt| {
                    let mut r = json!({
                        "resource": rt.gr.resource,
                        "responseKind": {"group": group, "version": v, "kind": rt.kind},
                        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": rt.singular,
                        "verbs": VERBS,
                    });
                    if !rt.short_names.is_empty() {
                        r["shortNames"] = json!(rt.short_names);
                    }
                    if !rt.categories.is_empty() {
                        r["categories"] = json!(rt.categories);
                    }
                    if rt.has_status() {
                        r["subresources"] = json!([{
                            "subresource": "status",
                            "responseKind": {"group": group, "version": v, "kind": rt.kind},
                            "verbs": ["get", "patch", "update"],
                        }]);
                    }
                    r
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": vs})
}

/// The aggregated discovery document for `/api` (`core = true`) or `/apis`, with the
/// `apidiscovery.k8s.io` version the client asked for.
pub(crate) fn aggregated(reg: &Registry, core: bool, api_version: &str) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(reg, "", &["v1".to_owned()])]
    } else {
        reg.groups()
            .iter()
            .map(|(g, vs)| aggregated_group(reg, g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": api_version,
        "metadata": {},
        "items": items,
    })
}

/// Whether `Accept` asks for aggregated discovery first; returns the version asked for.
pub(crate) fn wants_aggregated(accept: Option<&str>) -> Option<&'static str> {
    let accept = accept?;
    for range in accept.split(',') {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("g=apidiscovery.k8s.io") && has("as=APIGroupDiscoveryList") {
            if has("v=v2") {
                return Some("apidiscovery.k8s.io/v2");
            }
            if has("v=v2beta1") {
                return Some("apidiscovery.k8s.io/v2beta1");
            }
        }
        if params.first().is_some_and(|m| *m == "application/json") && params.len() == 1 {
            return None;
        }
    }
    None
}

/// `/openapi/v3`: one entry per group version.
pub(crate) fn openapi_index(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": "/openapi/v3/api/v1?hash=devcluster"}),
    );
    for (g, vs) in reg.groups() {
        for v in vs {
            paths.insert(
                format!("apis/{g}/{v}"),
                json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}?hash=devcluster")}),
            );
        }
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<gv path>`: PATCH operations that declare `fieldValidation`, which is what
/// kubectl checks before leaving validation to the server.
pub(crate) fn openapi_group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = reg.in_group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let prefix = if group.is_empty() {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for rt in types {
        let path = if rt.namespaced {
            format!(
                "{prefix}/namespaces/{{namespace}}/{}/{{name}}",
                rt.gr.resource
            )
        } else {
            format!("{prefix}/{}/{{name}}", rt.gr.resource)
        };
        let op = json!({
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": rt.kind},
            "x-kubernetes-action": "patch",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(path, json!({"patch": op}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0-devcluster"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_v1_lists_pods_and_their_status() {
        let reg = crate::kinds::registry();
        let doc = resources(&reg, "", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"pods"));
        assert!(names.contains(&"pods/status"));
        assert!(resources(&reg, "nope", "v1").is_none());
    }

    #[test]
    fn aggregated_discovery_is_chosen_only_when_asked_first() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            wants_aggregated(Some(kubectl)),
            Some("apidiscovery.k8s.io/v2")
        );
        assert_eq!(wants_aggregated(Some("application/json")), None);
    }
}
