//! What an update may change in a Pod's spec: kube-apiserver refuses every
//! change but a few (`ValidatePodUpdate`), so a controller that re-applies a
//! running Pod with another spec learns it here as it would on a cluster.

use serde_json::Value;

/// The message kube-apiserver gives (before its diff of the two specs).
pub(crate) const FORBIDDEN: &str = "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// What kube-apiserver says, first of all, of an update that changes the
/// number of containers (a server-side apply renaming one keeps the old
/// beside the new while the old one's fields have another owner).
pub(crate) const CONTAINERS_ADDED_OR_REMOVED: &str =
    "Forbidden: pod updates may not add or remove containers";

/// The field and the refusal of an update of a Pod from `old` to `new` that
/// changes its spec beyond the fields an update may change, in
/// kube-apiserver's order: the containers' number first, then the rest.
/// Binding (setting `nodeName` on an unbound Pod) is allowed: the simulated
/// scheduler binds that way.
pub(crate) fn forbidden_change(old: &Value, new: &Value) -> Option<(&'static str, &'static str)> {
    let containers = |pod: &Value| pod["spec"]["containers"].as_array().map(Vec::len);
    if containers(old) != containers(new) {
        return Some(("spec.containers", CONTAINERS_ADDED_OR_REMOVED));
    }
    let bound_now = old["spec"].get("nodeName").is_none();
    (comparable(&old["spec"], bound_now) != comparable(&new["spec"], bound_now))
        .then_some(("spec", FORBIDDEN))
}

/// `spec` without the fields an update may change.
fn comparable(spec: &Value, without_node: bool) -> Value {
    let mut spec = spec.clone();
    let Some(fields) = spec.as_object_mut() else {
        return spec;
    };
    for mutable in [
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
        "schedulingGates",
    ] {
        fields.remove(mutable);
    }
    if without_node {
        fields.remove("nodeName");
    }
    for list in ["containers", "initContainers"] {
        if let Some(containers) = fields.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers.iter_mut().filter_map(Value::as_object_mut) {
                container.remove("image");
            }
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(env: &str, image: &str) -> Value {
        json!({"spec": {"containers": [{"name": "c", "image": image,
            "env": [{"name": "E", "value": env}]}]}})
    }

    fn changes_immutable_spec(old: &Value, new: &Value) -> bool {
        forbidden_change(old, new).is_some()
    }

    #[test]
    fn a_container_added_or_removed_is_told_first() {
        let old = pod("1", "busybox:1");
        let mut two = old.clone();
        two["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "d", "image": "busybox:1"}));
        two["spec"]["containers"][0]["env"] = json!([]);
        assert_eq!(
            forbidden_change(&old, &two),
            Some(("spec.containers", CONTAINERS_ADDED_OR_REMOVED))
        );
        assert_eq!(
            forbidden_change(&two, &old),
            Some(("spec.containers", CONTAINERS_ADDED_OR_REMOVED))
        );
        assert_eq!(
            forbidden_change(&old, &pod("2", "busybox:1")),
            Some(("spec", FORBIDDEN))
        );
    }

    #[test]
    fn only_images_tolerations_deadlines_and_binding_may_change() {
        let old = pod("1", "busybox:1");
        assert!(!changes_immutable_spec(&old, &old));
        assert!(!changes_immutable_spec(&old, &pod("1", "busybox:2")));
        assert!(changes_immutable_spec(&old, &pod("2", "busybox:1")));
        let mut bound = old.clone();
        bound["spec"]["nodeName"] = json!("node");
        assert!(!changes_immutable_spec(&old, &bound), "binding");
        let mut moved = bound.clone();
        moved["spec"]["nodeName"] = json!("other");
        assert!(changes_immutable_spec(&bound, &moved), "rebinding");
        let mut tolerant = bound.clone();
        tolerant["spec"]["tolerations"] = json!([{"key": "k", "operator": "Exists"}]);
        tolerant["spec"]["activeDeadlineSeconds"] = json!(5);
        assert!(!changes_immutable_spec(&bound, &tolerant));
    }
}
