//! Services: what they are made of, spec defaults and an allocated cluster IP.

use serde_json::{Value, json};

use super::set_default;
use crate::rand::Rng;
use crate::resource::{ResourceType, Strategy};
use crate::schema::Node;
use crate::schema::build::{Obj, keyed, obj, spec_and_conditions};
use crate::status::Result;

/// The Service strategy.
#[derive(Debug)]
pub(super) struct Services;

impl Strategy for Services {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, rng: &Rng) -> Result<()> {
        defaults(body, rng);
        Ok(())
    }
}

/// A Service's defaults, with a cluster IP allocated from 10.96.0.0/16.
fn defaults(body: &mut Value, rng: &Rng) {
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

/// A Service's merge schema.
pub(super) fn merge() -> Obj {
    let ports = keyed(&[("port", None), ("protocol", Some("TCP"))], Node::Untyped);
    let spec = obj().field("ports", ports).field("selector", Node::Atomic);
    spec_and_conditions(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_get_a_cluster_ip_and_target_ports() {
        let mut s = json!({"spec": {"ports": [{"port": 80}]}});
        defaults(&mut s, &Rng::new(1));
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
