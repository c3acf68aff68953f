//! Parsing a Kubernetes API request: the path into a typed target, the query into options,
//! and the `Accept` header into an output form.

use std::time::Duration;

use crate::status::{ApiError, Result};

/// The resource a path addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Target {
    /// API group, "" for core.
    pub(crate) group: String,
    /// Version.
    pub(crate) version: String,
    /// Plural resource; empty for the group-version discovery document.
    pub(crate) resource: String,
    /// Namespace from the path.
    pub(crate) namespace: Option<String>,
    /// Object name.
    pub(crate) name: Option<String>,
    /// Subresource (`status`).
    pub(crate) sub: Option<String>,
    /// The legacy `/watch/` path prefix was used.
    pub(crate) legacy_watch: bool,
}

/// Parses `/api/v1/...` and `/apis/<group>/<version>/...`; `None` for other paths.
/// `is_namespaced_resource` tells `namespaces/<ns>/<resource>` apart from a namespace's
/// own subresources.
pub(crate) fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let mut t = Target {
        group: group.to_owned(),
        version: version.to_owned(),
        ..Target::default()
    };
    let mut rest = rest;
    if let ["watch", r @ ..] = rest {
        t.legacy_watch = true;
        rest = r;
    }
    match rest {
        [] => {}
        ["namespaces", ns, res, more @ ..] if !matches!(*res, "status" | "finalize") => {
            t.namespace = Some((*ns).to_owned());
            t.resource = (*res).to_owned();
            match more {
                [] => {}
                [name] => t.name = Some((*name).to_owned()),
                [name, sub] => {
                    t.name = Some((*name).to_owned());
                    t.sub = Some((*sub).to_owned());
                }
                _ => return None,
            }
        }
        [res] => t.resource = (*res).to_owned(),
        [res, name] => {
            t.resource = (*res).to_owned();
            t.name = Some((*name).to_owned());
        }
        [res, name, sub] => {
            t.resource = (*res).to_owned();
            t.name = Some((*name).to_owned());
            t.sub = Some((*sub).to_owned());
        }
        _ => return None,
    }
    Some(t)
}

/// What a `resourceVersionMatch` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RvMatch {
    /// Unset.
    Unset,
    /// `NotOlderThan`.
    NotOlderThan,
    /// `Exact`.
    Exact,
}

/// The query parameters the server understands.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pub(crate) label_selector: String,
    pub(crate) field_selector: String,
    /// `shardSelector`, as sent (`None` when absent or empty: kube-apiserver
    /// treats an empty one as absent).
    pub(crate) shard_selector: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) rv_match: Option<RvMatch>,
    pub(crate) limit: usize,
    pub(crate) continue_token: Option<String>,
    pub(crate) watch: bool,
    pub(crate) allow_bookmarks: bool,
    pub(crate) send_initial_events: Option<bool>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) dry_run: bool,
    pub(crate) propagation_policy: Option<String>,
    pub(crate) orphan_dependents: Option<bool>,
    pub(crate) include_object: Option<String>,
    pub(crate) field_manager: Option<String>,
    pub(crate) force: bool,
    pub(crate) field_validation: Option<String>,
    pub(crate) grace_period: Option<i64>,
}

fn truthy(v: &str) -> bool {
    matches!(v, "true" | "1" | "True")
}

/// Parses a query string.
pub(crate) fn parse_query(q: Option<&str>) -> Result<Query> {
    let mut out = Query::default();
    let Some(q) = q else { return Ok(out) };
    for (k, v) in form_urlencoded::parse(q.as_bytes()) {
        match k.as_ref() {
            "labelSelector" => out.label_selector = v.into_owned(),
            "fieldSelector" => out.field_selector = v.into_owned(),
            "shardSelector" => out.shard_selector = Some(v.into_owned()).filter(|s| !s.is_empty()),
            "resourceVersion" => out.resource_version = Some(v.into_owned()),
            "resourceVersionMatch" => {
                out.rv_match = Some(match v.as_ref() {
                    "" => RvMatch::Unset,
                    "NotOlderThan" => RvMatch::NotOlderThan,
                    "Exact" => RvMatch::Exact,
                    other => {
                        return Err(ApiError::invalid(
                            "ListOptions",
                            "meta.k8s.io",
                            "",
                            vec![crate::status::Cause {
                                reason: "FieldValueNotSupported",
                                message: format!(
                                    "Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
                                ),
                                field: "resourceVersionMatch".into(),
                            }],
                        ));
                    }
                })
            }
            "limit" => {
                out.limit = v
                    .parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit {v:?}")))?
                    .max(0) as usize
            }
            "continue" => out.continue_token = Some(v.into_owned()).filter(|s| !s.is_empty()),
            "watch" => out.watch = truthy(&v),
            "allowWatchBookmarks" => out.allow_bookmarks = truthy(&v),
            "sendInitialEvents" => out.send_initial_events = Some(truthy(&v)),
            "timeoutSeconds" => {
                let secs = v
                    .parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {v:?}")))?;
                out.timeout = Some(Duration::from_secs(secs));
            }
            "timeout" => {}
            "dryRun" => out.dry_run = v == "All",
            "propagationPolicy" => out.propagation_policy = Some(v.into_owned()),
            "orphanDependents" => out.orphan_dependents = Some(truthy(&v)),
            "includeObject" => out.include_object = Some(v.into_owned()),
            "fieldManager" => out.field_manager = Some(v.into_owned()),
            "force" => out.force = truthy(&v),
            "fieldValidation" => out.field_validation = Some(v.into_owned()),
            "gracePeriodSeconds" => {
                out.grace_period = Some(v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds {v:?}"))
                })?)
            }
            _ => {}
        }
    }
    Ok(out)
}

/// How a response object is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// The object itself.
    Object,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Partial,
    /// A `meta.k8s.io/v1` `Table`.
    Table,
}

/// Picks the first acceptable form in `Accept`, in the order the client listed them.
pub(crate) fn negotiate(accept: Option<&str>) -> Result<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::Object);
    };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or_default().to_ascii_lowercase();
        if !matches!(
            mime.as_str(),
            "application/json" | "*/*" | "application/*" | "application/yaml"
        ) {
            continue;
        }
        let (mut r#as, mut g, mut v) = (None, None, None);
        for p in parts {
            if let Some((k, val)) = p.split_once('=') {
                match k.trim() {
                    "as" => r#as = Some(val.trim()),
                    "g" => g = Some(val.trim()),
                    "v" => v = Some(val.trim()),
                    _ => {}
                }
            }
        }
        let meta_v = g == Some("meta.k8s.io") && matches!(v, Some("v1" | "v1beta1"));
        match r#as {
            None => return Ok(Output::Object),
            Some("Table") if meta_v => return Ok(Output::Table),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if meta_v => {
                return Ok(Output::Partial);
            }
            _ => {}
        }
    }
    Err(ApiError::not_acceptable(accept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_object_paths_parse() {
        let t = parse_path("/apis/apps/v1/namespaces/ns/deployments/d/status").unwrap();
        assert_eq!(
            (t.group.as_str(), t.version.as_str(), t.resource.as_str()),
            ("apps", "v1", "deployments")
        );
        assert_eq!(t.namespace.as_deref(), Some("ns"));
        assert_eq!(t.name.as_deref(), Some("d"));
        assert_eq!(t.sub.as_deref(), Some("status"));
    }

    #[test]
    fn namespaces_themselves_and_their_subresources_parse() {
        let t = parse_path("/api/v1/namespaces/ns").unwrap();
        assert_eq!(
            (t.resource.as_str(), t.name.as_deref(), t.namespace),
            ("namespaces", Some("ns"), None)
        );
        let t = parse_path("/api/v1/namespaces/ns/finalize").unwrap();
        assert_eq!(t.sub.as_deref(), Some("finalize"));
        let t = parse_path("/api/v1/watch/namespaces/ns/pods").unwrap();
        assert!(t.legacy_watch);
        assert_eq!(t.resource, "pods");
    }

    #[test]
    fn other_paths_are_not_resources() {
        assert!(parse_path("/version").is_none());
        assert_eq!(parse_path("/apis/batch/v1").unwrap().resource, "");
    }

    #[test]
    fn accept_picks_the_first_form_we_serve() {
        assert_eq!(
            negotiate(Some(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
            ))
            .unwrap(),
            Output::Table
        );
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf, application/json"
            ))
            .unwrap(),
            Output::Object
        );
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            ))
            .unwrap(),
            Output::Partial
        );
        assert!(negotiate(Some("application/vnd.kubernetes.protobuf")).is_err());
    }

    #[test]
    fn query_options_parse() {
        let q = parse_query(Some(
            "labelSelector=a%3Db&limit=5&watch=1&timeoutSeconds=30&resourceVersionMatch=Exact",
        ))
        .unwrap();
        assert_eq!(q.label_selector, "a=b");
        assert_eq!(q.limit, 5);
        assert!(q.watch);
        assert_eq!(q.rv_match, Some(RvMatch::Exact));
        assert!(parse_query(Some("resourceVersionMatch=Bogus")).is_err());
    }
}
