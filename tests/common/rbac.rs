//! Kubernetes RBAC, evaluated as kube-apiserver's RBAC authorizer does, over
//! the Roles, ClusterRoles and bindings of rendered manifests: which rules let
//! a user make a request.
//!
//! The matching follows `k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`:
//! a ClusterRoleBinding grants its role's rules everywhere; a RoleBinding
//! grants them (from a Role in its namespace or a ClusterRole) only for
//! requests in its own namespace; a rule matches when its verbs, API groups,
//! resources (`*`, `resource`, `resource/subresource`, `*/subresource`) and
//! resource names (when it lists any) all match.

use serde_json::Value;

/// What the authorizer sees of a resource request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Attributes {
    /// `system:serviceaccount:<ns>:<name>` for a ServiceAccount.
    pub user: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// API group, "" for core.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource or "".
    pub subresource: String,
    /// Namespace or "" (cluster-scoped, or across all namespaces).
    pub namespace: String,
    /// Object name or "" (collections, and creates that name none).
    pub name: String,
}

/// One rule of a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Verbs.
    pub verbs: Vec<String>,
    /// API groups.
    pub api_groups: Vec<String>,
    /// Resources, maybe with `/subresource`.
    pub resources: Vec<String>,
    /// Resource names; empty: any.
    pub resource_names: Vec<String>,
}

/// A rule as granted by one binding, and where it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// `ClusterRole/name` or `Role/ns/name`, and the index of the rule in it.
    pub source: String,
    /// The rule.
    pub rule: Rule,
    /// `None`: everywhere (ClusterRoleBinding); `Some(ns)`: only in `ns`.
    pub namespace: Option<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn rules_of(role: &Value) -> Vec<Rule> {
    role["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| Rule {
                    verbs: strings(&r["verbs"]),
                    api_groups: strings(&r["apiGroups"]),
                    resources: strings(&r["resources"]),
                    resource_names: strings(&r["resourceNames"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a binding's subject is `user` (or one of the groups a
/// ServiceAccount's user belongs to).
fn subject_matches(subject: &Value, binding_namespace: &str, user: &str) -> bool {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    let sa = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match kind {
        "ServiceAccount" => {
            // A ServiceAccount subject without a namespace means the binding's.
            let namespace = subject["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            sa == Some((namespace, name))
        }
        "User" => name == user,
        "Group" => {
            name == "system:authenticated"
                || sa.is_some_and(|(ns, _)| {
                    name == "system:serviceaccounts"
                        || name == format!("system:serviceaccounts:{ns}")
                })
        }
        _ => false,
    }
}

/// The rules `user` is granted by the bindings among `objects`.
pub fn grants(objects: &[Value], user: &str) -> Vec<Grant> {
    let find = |kind: &str, namespace: Option<&str>, name: &str| {
        objects.iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns)
        })
    };
    let mut out = Vec::new();
    for binding in objects {
        let kind = binding["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRoleBinding" && kind != "RoleBinding" {
            continue;
        }
        let binding_namespace = binding["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
        if !subjects
            .iter()
            .any(|s| subject_matches(s, binding_namespace, user))
        {
            continue;
        }
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let (role, source) = match (kind, role_kind) {
            (_, "ClusterRole") => (
                find("ClusterRole", None, role_name),
                format!("ClusterRole/{role_name}"),
            ),
            // A RoleBinding may only refer to a Role in its own namespace.
            ("RoleBinding", "Role") => (
                find("Role", Some(binding_namespace), role_name),
                format!("Role/{binding_namespace}/{role_name}"),
            ),
            _ => (None, String::new()),
        };
        let Some(role) = role else { continue };
        let namespace = (kind == "RoleBinding").then(|| binding_namespace.to_owned());
        for (i, rule) in rules_of(role).into_iter().enumerate() {
            out.push(Grant {
                source: format!("{source}#{i}"),
                rule,
                namespace: namespace.clone(),
            });
        }
    }
    out
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// kube-apiserver's `ResourceMatches`.
fn resource_matches(rule: &Rule, resource: &str, subresource: &str) -> bool {
    let combined = if subresource.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}/{subresource}")
    };
    rule.resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

/// Whether `rule` allows `request` (ignoring where the grant applies).
pub fn rule_allows(rule: &Rule, request: &Attributes) -> bool {
    has(&rule.verbs, &request.verb)
        && has(&rule.api_groups, &request.group)
        && resource_matches(rule, &request.resource, &request.subresource)
        && (rule.resource_names.is_empty()
            || (!request.name.is_empty() && rule.resource_names.contains(&request.name)))
}

/// Whether `grant` allows `request`: its rule matches and the request is in
/// the grant's namespace (a RoleBinding's).
pub fn grant_allows(grant: &Grant, request: &Attributes) -> bool {
    grant
        .namespace
        .as_ref()
        .is_none_or(|ns| *ns == request.namespace)
        && rule_allows(&grant.rule, request)
}

/// The grants that allow `request`; empty: forbidden.
pub fn allowing<'a>(grants: &'a [Grant], request: &Attributes) -> Vec<&'a Grant> {
    grants.iter().filter(|g| grant_allows(g, request)).collect()
}
