//! The registry of served resource types (the built-in kinds, which
//! [`crate::kinds`] lists, and every established CRD) and the [`Strategy`]
//! each type plays in writes.

mod crd;
mod strategy;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::gotypes::GoType;
use crate::object::GroupResource;
use crate::schema::Schema as MergeSchema;
use crate::status::{ApiError, Cause};
use crate::table::PrinterColumn;

pub(crate) use crd::from_crd;
pub(crate) use strategy::{Generic, Strategy};

/// One served version of a resource.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    /// `v1`, `v1alpha1`, ...
    pub(crate) name: String,
    /// The table columns after Name: a built-in kind's, or a CRD version's
    /// printer columns.
    pub(crate) columns: Vec<PrinterColumn>,
    /// Whether the `status` subresource is served.
    pub(crate) status: bool,
    /// The structural schema (`openAPIV3Schema`) of a CRD version.
    pub(crate) schema: Option<Value>,
    /// How strategic merge patch and server-side apply merge objects of this
    /// version, with the Go type of a built-in kind.
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

    /// How patches merge objects of version `v`: the built-in kind's or the
    /// CRD's schema or, for a CRD without one, objects merged key by key and
    /// lists replaced.
    pub(crate) fn merge_schema(&self, v: &str) -> Arc<MergeSchema> {
        if let Some(schema) = self.version(v).and_then(|x| x.merge.as_ref()) {
            return Arc::clone(schema);
        }
        Arc::new(MergeSchema::untyped().with_status_subresource(self.has_status()))
    }

    /// The Go type bodies of version `v` are decoded into: the built-in
    /// kinds', `None` for custom resources (their schema prunes them).
    pub(crate) fn go_type(&self, v: &str) -> Option<GoType> {
        self.version(v)?.merge.as_ref()?.types()
    }

    /// The table columns of version `v`, Name first.
    pub(crate) fn columns(&self, v: &str) -> Vec<PrinterColumn> {
        let own = self.version(v).map(|x| x.columns.as_slice());
        [PrinterColumn::NAME]
            .into_iter()
            .chain(own.into_iter().flatten().cloned())
            .collect()
    }
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
    /// A registry serving `types` (see `crate::kinds::registry`).
    pub(crate) fn new(types: impl IntoIterator<Item = ResourceType>) -> Self {
        let types = types
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
