//! Defaults kube-apiserver fills into built-in kinds on create, so objects read back the
//! way they would from a real cluster (controllers comparing desired and actual state see
//! the same fields).

use serde_json::{Map, Value, json};

use crate::rand::Rng;

fn set_default(obj: &mut Map<String, Value>, key: &str, value: Value) {
    obj.entry(key).or_insert(value);
}

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
pub(crate) fn pod(body: &mut Value) {
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
pub(crate) fn pod_admission(body: &mut Value) {
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

/// A Service's defaults, with a cluster IP allocated from 10.96.0.0/16.
pub(crate) fn service(body: &mut Value, rng: &Rng) {
    let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        let n = rng.next_u64();
        let ip = format!("10.96.{}.{}", (n >> 8) % 256, (n % 253) + 1);
        if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
            set_default(spec, "clusterIP", json!(ip));
        }
        let cluster_ip = spec.get("clusterIP").cloned().unwrap_or(Value::Null);
        set_default(spec, "clusterIPs", json!([cluster_ip]));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
    body["status"] = json!({"loadBalancer": {}});
}

/// A PersistentVolumeClaim's defaults: a file system unless it asks for a
/// block device.
pub(crate) fn persistent_volume_claim(body: &mut Value) {
    if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
        set_default(spec, "volumeMode", json!("Filesystem"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_scheduler_and_container_defaults() {
        let mut p = json!({"spec": {"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "x/y:1.2"}]}});
        pod(&mut p);
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
        pod_admission(&mut p);
        assert_eq!(p["spec"]["priority"], 5);
        assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(p["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut p = json!({"spec": {"restartPolicy": "Never", "containers": []}});
        pod(&mut p);
        assert_eq!(p["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn services_get_a_cluster_ip_and_target_ports() {
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        service(&mut s, &Rng::new(1));
        assert!(
            s["spec"]["clusterIP"]
                .as_str()
                .unwrap()
                .starts_with("10.96.")
        );
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    }
}
