//! The built-in kinds devcluster serves, one row each, as kube-apiserver's
//! registry keeps a package per resource.
//!
//! A row ([`Kind`]) names the k8s-openapi type that mirrors the kind's Go
//! type (its group, version, kind and plural come from it), its short names
//! and traits, and, where the kind departs from the generic behaviour, its
//! merge schema, its [`Strategy`] (defaults included) and its table columns.
//! What a kind does of its own lives in its file here.
//!
//! ```
//! let pods = devcluster::kinds::schema("", "v1", "Pod").expect("pods are built in");
//! assert!(pods.has_status_subresource());
//! assert!(devcluster::kinds::schema("policyhost.dev", "v1alpha1", "DataJob").is_none());
//! ```

mod claim;
mod crd;
mod data;
mod namespace;
mod pod;
mod service;
mod workloads;

use std::sync::LazyLock;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value};

use crate::gotypes::{self, GoType, Mirror};
use crate::object::GroupResource;
use crate::resource::{Generic, Registry, ResourceType, Strategy, Version};
use crate::schema::Schema;
use crate::schema::build::{self, Obj};
use crate::status::ApiError;
use crate::table::PrinterColumn;

pub(crate) use claim::{CLAIM_PROTECTION, in_use};
pub(crate) use namespace::NAMESPACE_FINALIZER;

/// A built-in kind's traits, or-ed together in its row.
type Traits = u8;
/// Namespaced (otherwise cluster-scoped).
const NAMESPACED: Traits = 1;
/// Serves the `status` subresource.
const STATUS: Traits = 1 << 1;
/// Keeps `metadata.generation`.
const GENERATION: Traits = 1 << 2;
/// A delete answers with the object's last state rather than a Success
/// Status (kube-apiserver's `ReturnDeletedObject`).
const RETURN_DELETED: Traits = 1 << 3;
/// In the `all` category.
const ALL: Traits = 1 << 4;

/// One built-in kind: how it is served and what it is.
pub(crate) struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    traits: Traits,
    /// The k8s-openapi struct that mirrors the Go type bodies are decoded into.
    go_type: Mirror,
    /// Where its lists and maps merge by key or atomically.
    merge: fn() -> Obj,
    strategy: &'static dyn Strategy,
    /// The table columns after Name.
    columns: &'static [PrinterColumn],
}

/// The columns of a kind that prints only its name and age.
const AGE: &[PrinterColumn] = &[PrinterColumn::AGE];

impl Kind {
    /// The kind `T` mirrors, with the generic behaviour: only `metadata`
    /// described for merging, the generic strategy, Name and Age columns.
    const fn of<T: k8s_openapi::Resource + JsonSchema>(
        short_names: &'static [&'static str],
        traits: Traits,
    ) -> Self {
        Self {
            group: T::GROUP,
            version: T::VERSION,
            kind: T::KIND,
            plural: T::URL_PATH_SEGMENT,
            short_names,
            traits,
            go_type: SchemaGenerator::subschema_for::<T>,
            merge: build::root,
            strategy: &Generic,
            columns: AGE,
        }
    }

    const fn merge(self, merge: fn() -> Obj) -> Self {
        Self { merge, ..self }
    }

    const fn strategy(self, strategy: &'static dyn Strategy) -> Self {
        Self { strategy, ..self }
    }

    const fn columns(self, columns: &'static [PrinterColumn]) -> Self {
        Self { columns, ..self }
    }

    /// The resource type the row serves, its bodies of Go type `go_type`.
    fn resource_type(&self, go_type: GoType) -> ResourceType {
        let has = |t: Traits| self.traits & t != 0;
        let merge =
            Schema::new((self.merge)().build(), has(STATUS), true).with_types(Some(go_type));
        ResourceType {
            gr: GroupResource::new(self.group, self.plural),
            versions: vec![Version {
                name: self.version.to_owned(),
                columns: self.columns.to_vec(),
                status: has(STATUS),
                schema: None,
                merge: Some(merge.into()),
            }],
            singular: self.kind.to_lowercase(),
            kind: self.kind.to_owned(),
            namespaced: has(NAMESPACED),
            short_names: self.short_names.iter().map(|s| (*s).to_owned()).collect(),
            categories: if has(ALL) {
                vec!["all".to_owned()]
            } else {
                Vec::new()
            },
            generation: has(GENERATION),
            return_deleted: has(RETURN_DELETED),
            custom: false,
            stored_as: (self.group == "events.k8s.io").then(|| GroupResource::new("", "events")),
            strategy: self.strategy,
        }
    }
}

/// The built-in kinds, as `kubectl api-resources` lists them.
#[rustfmt::skip]
const KINDS: &[Kind] = &[
    Kind::of::<Namespace>(&["ns"], STATUS).merge(namespace::merge).strategy(&namespace::Namespaces).columns(namespace::COLUMNS),
    Kind::of::<Pod>(&["po"], NAMESPACED | STATUS | GENERATION | RETURN_DELETED | ALL).merge(pod::merge).strategy(&pod::Pods).columns(pod::COLUMNS),
    Kind::of::<ConfigMap>(&["cm"], NAMESPACED).merge(data::config_map).strategy(&data::CONFIG_MAPS).columns(data::CONFIG_MAP_COLUMNS),
    Kind::of::<Secret>(&[], NAMESPACED).merge(data::secret).strategy(&data::Secrets).columns(data::SECRET_COLUMNS),
    Kind::of::<Service>(&["svc"], NAMESPACED | STATUS | RETURN_DELETED | ALL).merge(service::merge).strategy(&service::Services),
    Kind::of::<PersistentVolumeClaim>(&["pvc"], NAMESPACED | STATUS).merge(claim::merge).strategy(&claim::PersistentVolumeClaims).columns(claim::COLUMNS),
    Kind::of::<Event>(&["ev"], NAMESPACED),
    Kind::of::<ServiceAccount>(&["sa"], NAMESPACED | RETURN_DELETED),
    Kind::of::<Node>(&["no"], STATUS),
    Kind::of::<Deployment>(&["deploy"], NAMESPACED | STATUS | GENERATION | ALL).merge(workloads::deployment).columns(workloads::DEPLOYMENT_COLUMNS),
    Kind::of::<Job>(&[], NAMESPACED | STATUS | GENERATION | ALL).merge(workloads::job),
    Kind::of::<Lease>(&[], NAMESPACED).columns(LEASE_COLUMNS),
    Kind::of::<EventsEvent>(&["ev"], NAMESPACED),
    Kind::of::<Role>(&[], NAMESPACED),
    Kind::of::<RoleBinding>(&[], NAMESPACED),
    Kind::of::<ClusterRole>(&[], 0),
    Kind::of::<ClusterRoleBinding>(&[], 0),
    Kind::of::<PodDisruptionBudget>(&["pdb"], NAMESPACED | STATUS | GENERATION),
    Kind::of::<CustomResourceDefinition>(&["crd", "crds"], STATUS | GENERATION).strategy(&crd::CustomResourceDefinitions).columns(crd::COLUMNS),
];

/// What `kubectl get leases` prints after the name.
const LEASE_COLUMNS: &[PrinterColumn] = &[
    PrinterColumn::path("Holder", "The holder of the lease", ".spec.holderIdentity"),
    PrinterColumn::AGE,
];

/// The Go types of every row, read once: the k8s-openapi schemas take a
/// while to walk.
static GO_TYPES: LazyLock<gotypes::Registry> =
    LazyLock::new(|| gotypes::Registry::new(KINDS.iter().map(|k| k.go_type)));

/// Every row as the resource type it serves, built once.
static TYPES: LazyLock<Vec<ResourceType>> = LazyLock::new(|| {
    let go_types = LazyLock::force(&GO_TYPES);
    KINDS
        .iter()
        .enumerate()
        .map(|(index, kind)| kind.resource_type(go_types.kind(index)))
        .collect()
});

/// A registry serving every built-in kind (and, once defined, CRDs).
pub(crate) fn registry() -> Registry {
    Registry::new(TYPES.iter().cloned())
}

/// How patches and applies merge a built-in kind, by API group (`""` for
/// the core group), version and kind; `None` for anything else, custom
/// resources included.
#[must_use]
pub fn schema(group: &str, version: &str, kind: &str) -> Option<&'static Schema> {
    TYPES
        .iter()
        .filter(|t| t.gr.group == group && t.kind == kind)
        .find_map(|t| t.version(version)?.merge.as_deref())
}

/// Sets `key` unless the object has it.
fn set_default(obj: &mut Map<String, Value>, key: &str, value: Value) {
    obj.entry(key).or_insert(value);
}

/// The 422 of an update that changes what the kind's spec keeps, with
/// kube-apiserver's message (before its diff of the two specs).
fn immutable_spec(rt: &ResourceType, old: &Value, field: &str, message: &str) -> ApiError {
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    rt.field_invalid(name, field, "FieldValueForbidden", message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_serves_builtins_by_group_version() {
        let r = registry();
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
    fn every_built_in_kind_merges_and_decodes_by_its_go_type() {
        for t in registry().all() {
            let version = &t.versions[0].name;
            let go_type = t.go_type(version).expect("a Go type");
            let schema = schema(&t.gr.group, version, &t.kind).expect("a merge schema");
            assert!(schema.supports_strategic_merge(), "{}", t.kind);
            assert_eq!(schema.types(), Some(go_type));
            assert_eq!(schema.has_status_subresource(), t.has_status());
        }
        assert!(schema("apps", "v1", "Pod").is_none());
        assert!(schema("policyhost.dev", "v1alpha1", "DataJob").is_none());
    }

    #[test]
    fn kinds_without_columns_of_their_own_print_name_and_age() {
        let r = registry();
        let names = |resource: &str| {
            let (group, plural) = resource.rsplit_once('/').unwrap_or(("", resource));
            let t = r.lookup(group, "v1", plural).expect(resource);
            t.columns("v1")
                .into_iter()
                .map(|c| c.name.into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("serviceaccounts"), ["Name", "Age"]);
        assert_eq!(
            names("coordination.k8s.io/leases"),
            ["Name", "Holder", "Age"]
        );
        assert_eq!(names("namespaces"), ["Name", "Status", "Age"]);
    }
}
