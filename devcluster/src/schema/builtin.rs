//! The merge table of the built-in kinds devcluster serves.
//!
//! Read from the Go types of `k8s.io/api` (struct tags `patchStrategy` and
//! `patchMergeKey` for strategic merge patch, markers `+listType`,
//! `+listMapKey`, `+mapType` and `+structType` for server-side apply). Only the
//! positions where a kind departs from the defaults are listed: an undescribed
//! object merges field by field, an undescribed list is replaced whole
//! (`tolerations`, `command`, `containerStatuses`, ...).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

use super::{Field, ListKind, ListNode, MapKey, Node, ObjectNode, Rest, Schema, Strategy};

/// The schema of a built-in kind, by API group (`""` for the core group),
/// version and kind; `None` for anything else, custom resources included.
#[must_use]
pub fn builtin(group: &str, version: &str, kind: &str) -> Option<&'static Schema> {
    shared(group, version, kind).map(|schema| &**schema)
}

/// The schema of a built-in kind, shareable.
pub(crate) fn shared(group: &str, version: &str, kind: &str) -> Option<&'static Arc<Schema>> {
    BUILTINS
        .iter()
        .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
        .map(|(_, _, _, schema)| schema)
}

/// Whether the kind accepts `application/strategic-merge-patch+json`; a real
/// API server answers 415 Unsupported Media Type for the others (custom
/// resources).
#[must_use]
pub fn supports_strategic_merge(group: &str, version: &str, kind: &str) -> bool {
    builtin(group, version, kind).is_some_and(Schema::supports_strategic_merge)
}

type Entry = (&'static str, &'static str, &'static str, Arc<Schema>);

static BUILTINS: LazyLock<Vec<Entry>> = LazyLock::new(|| {
    let kind = |group, version, kind, root: Obj, status| {
        let schema = Schema::new(root.build(), status, true)
            .with_types(crate::gotypes::of(group, version, kind));
        (group, version, kind, Arc::new(schema))
    };
    vec![
        kind("", "v1", "Pod", pod(), true),
        kind("", "v1", "ConfigMap", config_map(), false),
        kind("", "v1", "Secret", secret(), false),
        kind("", "v1", "Service", service(), true),
        kind(
            "",
            "v1",
            "PersistentVolumeClaim",
            persistent_volume_claim(),
            true,
        ),
        kind("", "v1", "Namespace", namespace(), true),
        kind("", "v1", "Event", root(), false),
        kind("apps", "v1", "Deployment", deployment(), true),
        kind("batch", "v1", "Job", job(), true),
        kind("coordination.k8s.io", "v1", "Lease", root(), false),
        kind("events.k8s.io", "v1", "Event", root(), false),
        kind(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            root(),
            true,
        ),
    ]
});

/// Builds an [`ObjectNode`] whose undescribed keys are struct fields.
pub(super) struct Obj(ObjectNode);

fn obj() -> Obj {
    Obj(ObjectNode {
        fields: BTreeMap::new(),
        rest: Rest::Fields(Node::Untyped),
    })
}

impl Obj {
    /// Describes a pointer field (or a map or list).
    fn field(mut self, name: &str, node: Node) -> Self {
        let field = Field {
            node,
            embedded: false,
        };
        self.0.fields.insert(name.to_owned(), field);
        self
    }

    /// Describes a non-pointer struct field, present in every typed object.
    fn embedded(self, name: &str, node: Obj) -> Self {
        self.always(name, node.build())
    }

    /// Describes a field the typed object always serializes (no
    /// `omitempty`), even as `null`.
    fn always(mut self, name: &str, node: Node) -> Self {
        let field = Field {
            node,
            embedded: true,
        };
        self.0.fields.insert(name.to_owned(), field);
        self
    }

    pub(super) fn build(self) -> Node {
        Node::Object(Box::new(self.0))
    }
}

fn list(kind: ListKind, strategy: Strategy, item: Node) -> Node {
    Node::List(Box::new(ListNode {
        kind,
        strategy,
        item,
    }))
}

/// `+listType=map` keyed by `keys` (with optional defaults), merged by
/// strategic merge patch on `keys[0]`, the `patchMergeKey`.
fn keyed(keys: &[(&str, Option<&str>)], item: Node) -> Node {
    let merge_key = keys.first().map(|(name, _)| (*name).to_owned());
    keyed_with(keys, Strategy::Merge { key: merge_key }, item)
}

fn keyed_with(keys: &[(&str, Option<&str>)], strategy: Strategy, item: Node) -> Node {
    let keys = keys
        .iter()
        .map(|(name, default)| MapKey {
            name: (*name).to_owned(),
            default: default.map(|d| Value::String(d.to_owned())),
        })
        .collect();
    list(ListKind::Map(keys), strategy, item)
}

/// `+listType=map` on `name`, `patchMergeKey:"name"`.
fn by_name(item: Node) -> Node {
    keyed(&[("name", None)], item)
}

/// `+listType=set`, merged as a set of scalars by strategic merge patch too
/// when `strategic` (`patchStrategy:"merge"` without a key).
fn set(strategic: bool) -> Node {
    let strategy = if strategic {
        Strategy::Merge { key: None }
    } else {
        Strategy::Replace
    };
    list(ListKind::Set, strategy, Node::Atomic)
}

/// A Go map (`map[string]string`, `map[string][]byte`): merged key by key,
/// and, being `omitempty`, left out of the typed object when empty.
fn map() -> Node {
    Node::Object(Box::new(ObjectNode {
        fields: BTreeMap::new(),
        rest: Rest::Entries(Node::Atomic),
    }))
}

/// `+listType=atomic` but `patchStrategy:"merge"` on `key`.
fn atomic_merged_by(key: &str) -> Node {
    let strategy = Strategy::Merge {
        key: Some(key.to_owned()),
    };
    list(ListKind::Atomic, strategy, Node::Untyped)
}

/// `metav1.ObjectMeta`.
pub(super) fn metadata() -> Obj {
    obj()
        .field("labels", map())
        .field("annotations", map())
        .field("finalizers", set(true))
        // `OwnerReference` is `+structType=atomic`: each is owned whole.
        .field("ownerReferences", keyed(&[("uid", None)], Node::Atomic))
        .field("managedFields", Node::Atomic)
}

/// Every kind: `metadata` and nothing else described.
pub(super) fn root() -> Obj {
    obj().embedded("metadata", metadata())
}

fn config_map() -> Obj {
    root().field("data", map()).field("binaryData", map())
}

fn secret() -> Obj {
    root().field("data", map()).field("stringData", map())
}

fn resource_requirements() -> Obj {
    let claims = keyed_with(&[("name", None)], Strategy::Replace, Node::Untyped);
    obj().field("claims", claims)
}

fn container() -> Node {
    let ports = keyed(
        &[("containerPort", None), ("protocol", Some("TCP"))],
        Node::Untyped,
    );
    obj()
        .field("ports", ports)
        .field("env", by_name(Node::Untyped))
        .field("volumeMounts", keyed(&[("mountPath", None)], Node::Untyped))
        .field(
            "volumeDevices",
            keyed(&[("devicePath", None)], Node::Untyped),
        )
        .embedded("resources", resource_requirements())
        .build()
}

fn pod_spec() -> Obj {
    let spread = obj().field("labelSelector", Node::Atomic).build();
    obj()
        .always("containers", by_name(container()))
        .field("initContainers", by_name(container()))
        .field("ephemeralContainers", by_name(container()))
        .field("volumes", by_name(Node::Untyped))
        .field("imagePullSecrets", by_name(Node::Untyped))
        .field("hostAliases", keyed(&[("ip", None)], Node::Untyped))
        .field(
            "topologySpreadConstraints",
            keyed(
                &[("topologyKey", None), ("whenUnsatisfiable", None)],
                spread,
            ),
        )
        .field("schedulingGates", by_name(Node::Untyped))
        .field("resourceClaims", by_name(Node::Untyped))
        .field("nodeSelector", Node::Atomic)
        .field("resources", resource_requirements().build())
}

fn pod_status() -> Obj {
    obj()
        .field("conditions", keyed(&[("type", None)], Node::Untyped))
        .field("hostIPs", atomic_merged_by("ip"))
        .field("podIPs", keyed(&[("ip", None)], Node::Untyped))
        .field("resourceClaimStatuses", by_name(Node::Untyped))
}

fn pod_template() -> Obj {
    obj()
        .embedded("metadata", metadata())
        .embedded("spec", pod_spec())
}

fn conditions() -> Obj {
    obj().field("conditions", keyed(&[("type", None)], Node::Untyped))
}

fn pod() -> Obj {
    root()
        .embedded("spec", pod_spec())
        .embedded("status", pod_status())
}

fn service() -> Obj {
    let ports = keyed(&[("port", None), ("protocol", Some("TCP"))], Node::Untyped);
    let spec = obj().field("ports", ports).field("selector", Node::Atomic);
    root()
        .embedded("spec", spec)
        .embedded("status", conditions())
}

fn persistent_volume_claim() -> Obj {
    // `LabelSelector` is `+structType=atomic`; `accessModes` are atomic lists.
    let spec = obj()
        .field("selector", Node::Atomic)
        .embedded("resources", obj());
    root()
        .embedded("spec", spec)
        .embedded("status", conditions())
}

fn namespace() -> Obj {
    root()
        .embedded("spec", obj())
        .embedded("status", conditions())
}

fn deployment() -> Obj {
    let spec = obj()
        .field("selector", Node::Atomic)
        .embedded("template", pod_template())
        .embedded("strategy", obj());
    root()
        .embedded("spec", spec)
        .embedded("status", conditions())
}

fn job() -> Obj {
    let spec = obj()
        .field("selector", Node::Atomic)
        .embedded("template", pod_template());
    let uncounted = obj()
        .field("succeeded", set(false))
        .field("failed", set(false))
        .build();
    let status = obj()
        .field("conditions", atomic_merged_by("type"))
        .field("uncountedTerminatedPods", uncounted);
    root().embedded("spec", spec).embedded("status", status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_at<'a>(schema: &'a Schema, path: &[&str]) -> &'a ListNode {
        let mut node = &schema.root;
        for key in path {
            node = node.child(key).node;
        }
        node.list().expect("a described list")
    }

    #[test]
    fn every_served_kind_is_found_by_group_version_and_kind() {
        for (group, version, kind) in [
            ("", "v1", "Pod"),
            ("", "v1", "ConfigMap"),
            ("", "v1", "Secret"),
            ("", "v1", "Service"),
            ("", "v1", "PersistentVolumeClaim"),
            ("", "v1", "Namespace"),
            ("", "v1", "Event"),
            ("apps", "v1", "Deployment"),
            ("batch", "v1", "Job"),
            ("coordination.k8s.io", "v1", "Lease"),
            ("events.k8s.io", "v1", "Event"),
        ] {
            assert!(supports_strategic_merge(group, version, kind), "{kind}");
        }
        assert!(builtin("apps", "v1", "Pod").is_none());
        assert!(!supports_strategic_merge(
            "policyhost.dev",
            "v1alpha1",
            "DataJob"
        ));
    }

    #[test]
    fn pod_template_containers_merge_by_name_in_deployments_and_jobs() {
        for (group, kind) in [("apps", "Deployment"), ("batch", "Job")] {
            let schema = builtin(group, "v1", kind).expect("built in");
            let containers = list_at(schema, &["spec", "template", "spec", "containers"]);
            assert!(matches!(
                &containers.strategy,
                Strategy::Merge { key: Some(k) } if k == "name"
            ));
            let env = containers.item.child("env").node.list().expect("env");
            assert!(matches!(&env.kind, ListKind::Map(keys) if keys[0].name == "name"));
        }
    }

    #[test]
    fn container_ports_are_keyed_by_port_and_defaulted_protocol() {
        let pod = builtin("", "v1", "Pod").expect("built in");
        let containers = list_at(pod, &["spec", "containers"]);
        let ports = containers.item.child("ports").node.list().expect("ports");
        let ListKind::Map(keys) = &ports.kind else {
            panic!("ports are a map list")
        };
        assert_eq!(keys[0].name, "containerPort");
        assert_eq!(keys[1].default, Some(Value::String("TCP".into())));
        assert!(matches!(
            &ports.strategy,
            Strategy::Merge { key: Some(k) } if k == "containerPort"
        ));
    }

    #[test]
    fn finalizers_are_a_set_and_tolerations_are_replaced() {
        let pod = builtin("", "v1", "Pod").expect("built in");
        let finalizers = list_at(pod, &["metadata", "finalizers"]);
        assert!(matches!(finalizers.kind, ListKind::Set));
        assert!(matches!(finalizers.strategy, Strategy::Merge { key: None }));
        let spec = pod.root.child("spec").node;
        assert!(spec.child("tolerations").node.list().is_none());
    }

    #[test]
    fn status_subresources_match_the_real_resources() {
        let status = |g, k| builtin(g, "v1", k).expect(k).has_status_subresource();
        assert!(status("", "Pod"));
        assert!(status("", "PersistentVolumeClaim"));
        assert!(status("apps", "Deployment"));
        assert!(!status("", "ConfigMap"));
        assert!(!status("coordination.k8s.io", "Lease"));
    }
}
