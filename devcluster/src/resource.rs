//! The registry of served resource types: the built-in kinds and every established CRD.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::gotypes::GoType;
use crate::object::GroupResource;
use crate::schema::Schema as MergeSchema;
use crate::status::{ApiError, Cause};
use crate::strategy::{
    BinaryData, CustomResourceDefinitions, Generic, Namespaces, PersistentVolumeClaims, Pods,
    Secrets, Services, Strategy,
};

/// A CRD `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrinterColumn {
    /// Column header.
    pub(crate) name: String,
    /// OpenAPI type (`string`, `integer`, `date`, ...); cells of `date` show an age.
    pub(crate) kind: String,
    /// The type the Table declares: a custom resource's own, while built-in tables
    /// declare their ages `string`.
    pub(crate) declared: String,
    /// OpenAPI format.
    pub(crate) format: String,
    /// Description.
    pub(crate) description: String,
    /// 0 shows by default, higher only with `-o wide`.
    pub(crate) priority: i64,
    /// A simple JSONPath into the object.
    pub(crate) json_path: String,
}

/// One served version of a resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Version {
    /// `v1`, `v1alpha1`, ...
    pub(crate) name: String,
    /// Printer columns for this version (CRDs only).
    pub(crate) columns: Vec<PrinterColumn>,
    /// Whether the `status` subresource is served.
    pub(crate) status: bool,
    /// The structural schema (`openAPIV3Schema`) of a CRD version.
    pub(crate) schema: Option<Value>,
    /// How strategic merge patch and server-side apply merge objects of a CRD
    /// version (built-in kinds use [`crate::schema::builtin`]).
    pub(crate) merge: Option<Arc<MergeSchema>>,
}

/// A served resource type.
#[derive(Debug, Clone)]
pub(crate) struct ResourceType {
    /// Group and plural.
    pub(crate) gr: GroupResource,
    /// Served versions, preferred first.
    pub(crate) versions: Vec<Version>,
    /// Singular name.
    pub(crate) singular: String,
    /// Kind.
    pub(crate) kind: String,
    /// Namespaced or cluster-scoped.
    pub(crate) namespaced: bool,
    /// Short names for kubectl.
    pub(crate) short_names: Vec<String>,
    /// Categories (`all`).
    pub(crate) categories: Vec<String>,
    /// Whether `metadata.generation` is kept (and bumped on spec changes).
    pub(crate) generation: bool,
    /// Whether a delete that removes the object answers with its last state rather
    /// than a Success Status (kube-apiserver's `ReturnDeletedObject`: Pods, Services
    /// and ServiceAccounts).
    pub(crate) return_deleted: bool,
    /// Whether this comes from a CRD.
    pub(crate) custom: bool,
    /// Another resource whose storage this one shares, converting on the way
    /// (`events.k8s.io/v1` Events are stored as core/v1 Events).
    pub(crate) stored_as: Option<GroupResource>,
    /// What the kind adds to the generic write path.
    pub(crate) strategy: &'static dyn Strategy,
}

impl ResourceType {
    /// A 422 naming one field of an object of this type.
    pub(crate) fn field_invalid(
        &self,
        name: &str,
        field: &str,
        reason: &'static str,
        message: String,
    ) -> ApiError {
        ApiError::invalid(
            &self.kind,
            &self.gr.group,
            name,
            vec![Cause {
                reason,
                message,
                field: field.to_owned(),
            }],
        )
    }

    /// The served version named `v`.
    pub(crate) fn version(&self, v: &str) -> Option<&Version> {
        self.versions.iter().find(|x| x.name == v)
    }

    /// `v1` or `apps/v1` for version `v`.
    pub(crate) fn api_version(&self, v: &str) -> String {
        if self.gr.group.is_empty() {
            v.to_owned()
        } else {
            format!("{}/{v}", self.gr.group)
        }
    }

    /// Whether the status subresource is served (in any version: it is the same storage).
    pub(crate) fn has_status(&self) -> bool {
        self.versions.iter().any(|v| v.status)
    }

    /// How patches merge objects of version `v`: the built-in table, the CRD's
    /// schema, or (built-in kinds outside the table, CRDs without a schema)
    /// objects merged key by key and lists replaced.
    pub(crate) fn merge_schema(&self, v: &str) -> Arc<MergeSchema> {
        if let Some(schema) = crate::schema::builtin_shared(&self.gr.group, v, &self.kind) {
            return Arc::clone(schema);
        }
        if let Some(schema) = self.version(v).and_then(|x| x.merge.as_ref()) {
            return Arc::clone(schema);
        }
        let schema = MergeSchema::untyped()
            .with_status_subresource(self.has_status())
            .with_strategic_merge(!self.custom)
            .with_types(self.go_type(v));
        Arc::new(schema)
    }

    /// The Go type bodies of version `v` are decoded into: the built-in
    /// kinds', `None` for custom resources (their schema prunes them).
    pub(crate) fn go_type(&self, v: &str) -> Option<GoType> {
        if self.custom {
            return None;
        }
        crate::gotypes::of(&self.gr.group, v, &self.kind)
    }
}

/// A built-in resource's traits, or-ed together in its [`BUILTINS`] row.
type Traits = u8;
/// Namespaced (otherwise cluster-scoped).
const NAMESPACED: Traits = 1;
/// Serves the `status` subresource.
const STATUS: Traits = 1 << 1;
/// Keeps `metadata.generation`.
const GENERATION: Traits = 1 << 2;
/// A delete answers with the object's last state.
const RETURN_DELETED: Traits = 1 << 3;
/// In the `all` category.
const ALL: Traits = 1 << 4;

/// One built-in resource: group/version, plural, kind, short names, traits, strategy.
struct Builtin(
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    Traits,
    &'static dyn Strategy,
);

const CONFIGMAP_BYTES: BinaryData = BinaryData("binaryData");

/// The built-in resources, as `kubectl api-resources` lists them.
#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    Builtin("v1", "namespaces", "Namespace", &["ns"], STATUS, &Namespaces),
    Builtin("v1", "pods", "Pod", &["po"], NAMESPACED | STATUS | GENERATION | RETURN_DELETED | ALL, &Pods),
    Builtin("v1", "configmaps", "ConfigMap", &["cm"], NAMESPACED, &CONFIGMAP_BYTES),
    Builtin("v1", "secrets", "Secret", &[], NAMESPACED, &Secrets),
    Builtin("v1", "services", "Service", &["svc"], NAMESPACED | STATUS | RETURN_DELETED | ALL, &Services),
    Builtin("v1", "persistentvolumeclaims", "PersistentVolumeClaim", &["pvc"], NAMESPACED | STATUS, &PersistentVolumeClaims),
    Builtin("v1", "events", "Event", &["ev"], NAMESPACED, &Generic),
    Builtin("v1", "serviceaccounts", "ServiceAccount", &["sa"], NAMESPACED | RETURN_DELETED, &Generic),
    Builtin("v1", "nodes", "Node", &["no"], STATUS, &Generic),
    Builtin("apps/v1", "deployments", "Deployment", &["deploy"], NAMESPACED | STATUS | GENERATION | ALL, &Generic),
    Builtin("batch/v1", "jobs", "Job", &[], NAMESPACED | STATUS | GENERATION | ALL, &Generic),
    Builtin("coordination.k8s.io/v1", "leases", "Lease", &[], NAMESPACED, &Generic),
    Builtin("events.k8s.io/v1", "events", "Event", &["ev"], NAMESPACED, &Generic),
    Builtin("rbac.authorization.k8s.io/v1", "roles", "Role", &[], NAMESPACED, &Generic),
    Builtin("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", &[], NAMESPACED, &Generic),
    Builtin("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", &[], 0, &Generic),
    Builtin("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", &[], 0, &Generic),
    Builtin("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", &["pdb"], NAMESPACED | STATUS | GENERATION, &Generic),
    Builtin("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", &["crd", "crds"], STATUS | GENERATION, &CustomResourceDefinitions),
];

fn builtin_types() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(
            |&Builtin(group_version, plural, kind, short, traits, strategy)| {
                let (group, version) = group_version
                    .rsplit_once('/')
                    .unwrap_or(("", group_version));
                let has = |t: Traits| traits & t != 0;
                ResourceType {
                    gr: GroupResource::new(group, plural),
                    versions: vec![Version {
                        name: version.to_owned(),
                        columns: Vec::new(),
                        status: has(STATUS),
                        schema: None,
                        merge: None,
                    }],
                    singular: kind.to_lowercase(),
                    kind: kind.to_owned(),
                    namespaced: has(NAMESPACED),
                    short_names: short.iter().map(|s| (*s).to_owned()).collect(),
                    categories: if has(ALL) {
                        vec!["all".to_owned()]
                    } else {
                        Vec::new()
                    },
                    generation: has(GENERATION),
                    return_deleted: has(RETURN_DELETED),
                    custom: false,
                    stored_as: (group == "events.k8s.io").then(|| GroupResource::new("", "events")),
                    strategy,
                }
            },
        )
        .collect()
}

/// Why a CRD cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A required field is missing or has the wrong type.
    #[error("{field}: Required value")]
    Required {
        /// The JSON path of the field.
        field: &'static str,
    },
    /// The CRD name is not `<plural>.<group>`.
    #[error("metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group")]
    Name {
        /// The given name.
        name: String,
    },
    /// Not exactly one version is marked for storage.
    #[error(
        "spec.versions: Invalid value: must have exactly one version marked as storage version"
    )]
    StorageVersion,
    /// `spec.scope` is neither Namespaced nor Cluster.
    #[error("spec.scope: Unsupported value: {0:?}: supported values: \"Cluster\", \"Namespaced\"")]
    Scope(String),
}

/// Results of CRD interpretation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a CustomResourceDefinition into the resource type it defines.
pub(crate) fn from_crd(crd: &Value) -> Result<ResourceType> {
    let spec = &crd["spec"];
    let req = |v: &Value, field: &'static str| -> Result<String> {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(Error::Required { field })
    };
    let group = req(&spec["group"], "spec.group")?;
    let plural = req(&spec["names"]["plural"], "spec.names.plural")?;
    let kind = req(&spec["names"]["kind"], "spec.names.kind")?;
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(Error::Name {
            name: name.to_owned(),
        });
    }
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        Some(other) => return Err(Error::Scope(other.to_owned())),
        None => {
            return Err(Error::Required {
                field: "spec.scope",
            });
        }
    };
    let versions_v = spec["versions"]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or(Error::Required {
            field: "spec.versions",
        })?;
    if versions_v
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        return Err(Error::StorageVersion);
    }
    let mut versions: Vec<Version> = Vec::new();
    for v in versions_v {
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .filter_map(|c| {
                        let kind = c["type"].as_str().unwrap_or("string").to_owned();
                        let json_path = c["jsonPath"].as_str()?.to_owned();
                        // kube-apiserver's description when the CRD gives none.
                        let description = match c["description"].as_str() {
                            Some(d) if !d.is_empty() => d.to_owned(),
                            _ => format!(
                                "Custom resource definition column (in JSONPath format): {json_path}"
                            ),
                        };
                        Some(PrinterColumn {
                            name: c["name"].as_str()?.to_owned(),
                            declared: kind.clone(),
                            kind,
                            format: c["format"].as_str().unwrap_or_default().to_owned(),
                            description,
                            priority: c["priority"].as_i64().unwrap_or(0),
                            json_path,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let status = v["subresources"]["status"].is_object();
        let schema = v["schema"]["openAPIV3Schema"]
            .as_object()
            .map(|_| v["schema"]["openAPIV3Schema"].clone());
        let merge = schema
            .as_ref()
            .and_then(|s| MergeSchema::from_openapi_v3(s).ok())
            .map(|m| Arc::new(m.with_status_subresource(status)));
        versions.push(Version {
            name: req(&v["name"], "spec.versions[].name")?,
            columns,
            status,
            schema,
            merge,
        });
    }
    // Preferred version first: Kubernetes sorts by version priority (GA > beta > alpha).
    versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
    Ok(ResourceType {
        gr: GroupResource::new(&group, &plural),
        versions,
        singular: spec["names"]["singular"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| kind.to_lowercase()),
        kind,
        namespaced,
        short_names: strings(&spec["names"]["shortNames"]),
        categories: strings(&spec["names"]["categories"]),
        generation: true,
        // Custom resources are answered with a Success Status, as kube-apiserver's
        // custom resource registry does.
        return_deleted: false,
        custom: true,
        stored_as: None,
        strategy: &Generic,
    })
}

/// Kubernetes version ordering: v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > anything else.
fn version_priority(v: &str) -> (u8, u32, u8, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    let (level, minor_s) = if tail.is_empty() {
        (3, "")
    } else if let Some(m) = tail.strip_prefix("beta") {
        (2, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (1, m)
    } else {
        return (0, 0, 0, 0);
    };
    let minor = if minor_s.is_empty() {
        0
    } else {
        minor_s.parse().unwrap_or(0)
    };
    (1, major, level, minor)
}

/// All served resource types, shared between the HTTP layer and the store.
#[derive(Debug)]
pub(crate) struct Registry {
    types: RwLock<BTreeMap<GroupResource, Arc<ResourceType>>>,
}

impl Registry {
    /// A registry with the built-in kinds.
    pub(crate) fn new() -> Self {
        let types = builtin_types()
            .into_iter()
            .map(|t| (t.gr.clone(), Arc::new(t)))
            .collect();
        Self {
            types: RwLock::new(types),
        }
    }

    /// The type for a group, version and plural (or, as kubectl allows, kind-less singular).
    pub(crate) fn lookup(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|e| e.into_inner());
        types
            .get(&GroupResource::new(group, resource))
            .filter(|t| t.version(version).is_some())
            .cloned()
    }

    /// The type for a group-resource, whatever the version.
    pub(crate) fn get(&self, gr: &GroupResource) -> Option<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|e| e.into_inner());
        types.get(gr).cloned()
    }

    /// Every type.
    pub(crate) fn all(&self) -> Vec<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|e| e.into_inner());
        types.values().cloned().collect()
    }

    /// Whether any type of API group `group` is served.
    pub(crate) fn serves_group(&self, group: &str) -> bool {
        let types = self.types.read().unwrap_or_else(|e| e.into_inner());
        types.keys().any(|gr| gr.group == group)
    }

    /// Adds or replaces a custom type.
    pub(crate) fn register(&self, t: ResourceType) {
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        types.insert(t.gr.clone(), Arc::new(t));
    }

    /// Removes a custom type.
    pub(crate) fn unregister(&self, gr: &GroupResource) {
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        if types.get(gr).is_some_and(|t| t.custom) {
            types.remove(gr);
        }
    }

    /// Served group names with their versions, preferred first, core excluded.
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.all() {
            if t.gr.group.is_empty() {
                continue;
            }
            let vs = out.entry(t.gr.group.clone()).or_default();
            for v in &t.versions {
                if !vs.contains(&v.name) {
                    vs.push(v.name.clone());
                }
            }
        }
        out.into_iter()
            .map(|(g, mut vs)| {
                vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
                (g, vs)
            })
            .collect()
    }

    /// The types served in one group version.
    pub(crate) fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.all()
            .into_iter()
            .filter(|t| t.gr.group == group && t.version(version).is_some())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "metadata": {"name": "datajobs.policyhost.dev"},
            "spec": {
                "group": "policyhost.dev",
                "scope": "Namespaced",
                "names": {"plural": "datajobs", "kind": "DataJob", "shortNames": ["dj"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]},
                    {"name": "v1", "served": true, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn crd_defines_a_namespaced_type_with_preferred_version_first() {
        let t = from_crd(&crd()).unwrap();
        assert_eq!(t.gr, GroupResource::new("policyhost.dev", "datajobs"));
        assert_eq!(t.versions[0].name, "v1");
        assert_eq!(t.singular, "datajob");
        assert!(t.has_status());
        assert_eq!(
            t.version("v1alpha1").unwrap().columns[0].json_path,
            ".status.phase"
        );
    }

    #[test]
    fn crd_name_must_be_plural_dot_group() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        assert_eq!(
            from_crd(&c).unwrap_err(),
            Error::Name {
                name: "wrong".into()
            }
        );
    }

    #[test]
    fn registry_serves_builtins_by_group_version() {
        let r = Registry::new();
        assert!(r.lookup("apps", "v1", "deployments").is_some());
        assert!(r.lookup("apps", "v2", "deployments").is_none());
        assert!(r.groups().iter().any(|(g, _)| g == "batch"));
        let role = r
            .lookup("rbac.authorization.k8s.io", "v1", "clusterroles")
            .unwrap();
        assert!(!role.namespaced && !role.has_status());
        let pdb = r.lookup("policy", "v1", "poddisruptionbudgets").unwrap();
        assert!(pdb.namespaced && pdb.has_status() && pdb.generation);
        let pods = r.lookup("", "v1", "pods").unwrap();
        assert!(pods.return_deleted && pods.categories == ["all"] && pods.short_names == ["po"]);
        let ns = r.lookup("", "v1", "namespaces").unwrap();
        assert!(!ns.namespaced && ns.has_status() && !ns.generation && !ns.return_deleted);
        let events = r.lookup("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(events.stored_as, Some(GroupResource::new("", "events")));
    }

    #[test]
    fn every_built_in_kind_has_its_go_type() {
        for t in Registry::new().all() {
            let version = &t.versions[0].name;
            assert!(
                t.go_type(version).is_some(),
                "{} has no Go type in gotypes' table",
                t.gr.qualified()
            );
            assert_eq!(t.merge_schema(version).types(), t.go_type(version));
        }
    }
}
