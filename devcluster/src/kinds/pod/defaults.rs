//! The defaults kube-apiserver fills into a Pod, so it reads back the way it
//! would from a real cluster (controllers comparing desired and actual state
//! see the same fields): its spec's on every write, admission's on create.

use serde_json::{Value, json};

use crate::kinds::set_default;

fn container_defaults(c: &mut Value) {
    let Some(c) = c.as_object_mut() else { return };
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    let tag = image.rsplit('/').next().unwrap_or_default();
    let pull = if image.contains('@') || (tag.contains(':') && !tag.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
    };
    set_default(c, "imagePullPolicy", json!(pull));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// A Pod's spec defaults.
pub(super) fn spec(body: &mut Value) {
    let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(container_defaults);
        }
    }
}

/// What kube-apiserver's admission plugins set on a new Pod (ServiceAccount,
/// Priority and DefaultTolerationSeconds). Admission runs after the writer's managed fields
/// are recorded, so these fields belong to no manager.
pub(super) fn admission(body: &mut Value) {
    let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "serviceAccountName", json!("default"));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    set_default(spec, "priority", json!(0));
    set_default(
        spec,
        "tolerations",
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_scheduler_and_container_defaults() {
        let mut p = json!({"spec": {"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "x/y:1.2"}]}});
        spec(&mut p);
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert!(p["spec"].get("priority").is_none(), "set by admission");
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            p["spec"]["containers"][1]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(
            p["spec"]["containers"][1]["terminationMessagePolicy"],
            "File"
        );
    }

    #[test]
    fn admission_sets_priority_and_tolerations_it_was_not_given() {
        let mut p = json!({"spec": {"priority": 5, "containers": []}});
        admission(&mut p);
        assert_eq!(p["spec"]["priority"], 5);
        assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(p["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut p = json!({"spec": {"restartPolicy": "Never", "containers": []}});
        spec(&mut p);
        assert_eq!(p["spec"]["restartPolicy"], "Never");
    }
}
