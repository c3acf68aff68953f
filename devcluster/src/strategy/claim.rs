//! PersistentVolumeClaims: a file system by default, `Pending` until a
//! volume binds them (devcluster binds none, as a cluster without a
//! provisioner), a spec an update may not change, and the protection
//! finalizer admission adds, which the garbage collector releases once no
//! Pod of the namespace uses the claim (`crate::gc`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::Strategy;
use crate::object::{GroupResource, ObjectKey, Stored, md};
use crate::rand::Rng;
use crate::resource::ResourceType;
use crate::status::Result;
use crate::store::{GcWork, Txn};

/// The finalizer of the `StorageObjectInUseProtection` admission plugin.
pub(crate) const CLAIM_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// The claims a Pod's volumes name.
fn claims_of(pod: &Value) -> impl Iterator<Item = &str> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|volume| volume["persistentVolumeClaim"]["claimName"].as_str())
}

/// Whether a Pod of `namespace` that is not finished names claim `name`.
pub(crate) fn in_use(txn: &Txn<'_>, namespace: &str, name: &str) -> bool {
    let pods = GroupResource::new("", "pods");
    txn.in_namespace(namespace)
        .into_iter()
        .filter(|(gr, _)| *gr == pods)
        .filter_map(|(gr, key)| txn.get(&gr, &key)?.value().ok())
        .any(|pod| {
            let finished = matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            !finished && claims_of(&pod).any(|claim| claim == name)
        })
}

/// A Pod is gone: the claims it named, if deleting, may be released now.
pub(crate) fn recheck_claims_of(txn: &mut Txn<'_>, pod: &Arc<Stored>) {
    let Ok(value) = pod.value() else {
        return;
    };
    let claims = GroupResource::new("", "persistentvolumeclaims");
    for claim in claims_of(&value) {
        let key = ObjectKey::new(&pod.meta.namespace, claim);
        txn.queue_gc(GcWork::Object(claims.clone(), key));
    }
}

/// The message kube-apiserver gives (before its diff of the two specs).
const FORBIDDEN: &str = "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// The PersistentVolumeClaim strategy.
#[derive(Debug)]
pub(crate) struct PersistentVolumeClaims;

impl Strategy for PersistentVolumeClaims {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        crate::defaults::persistent_volume_claim(body);
        body["status"] = json!({"phase": "Pending"});
        Ok(())
    }

    fn admit_create(&self, body: &mut Value) {
        let finalizers = md(body).entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == CLAIM_PROTECTION)
        {
            list.push(json!(CLAIM_PROTECTION));
        }
    }

    /// kube-apiserver defaults every object it decodes or applies.
    fn prepare_for_update(&self, _old: &Value, new: &mut Value) {
        crate::defaults::persistent_volume_claim(new);
    }

    fn validate_update(&self, rt: &ResourceType, old: &Value, new: &Value) -> Result<()> {
        let bound = old["status"]["phase"] == "Bound";
        if comparable(&old["spec"], bound) != comparable(&new["spec"], bound) {
            let name = old["metadata"]["name"].as_str().unwrap_or_default();
            return Err(rt.field_invalid(
                name,
                "spec",
                "FieldValueForbidden",
                FORBIDDEN.to_owned(),
            ));
        }
        Ok(())
    }
}

/// `spec` without what an update of a claim may change: a bound claim's
/// storage request (an expansion) and volume attributes class.
fn comparable(spec: &Value, bound: bool) -> Value {
    let mut spec = spec.clone();
    if bound && let Some(fields) = spec.as_object_mut() {
        fields.remove("volumeAttributesClassName");
        if let Some(requests) = fields
            .get_mut("resources")
            .and_then(|r| r.get_mut("requests"))
            .and_then(Value::as_object_mut)
        {
            requests.remove("storage");
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bound_claim_may_grow() {
        let claim = |storage: &str| json!({"resources": {"requests": {"storage": storage}}, "accessModes": ["ReadWriteOnce"]});
        assert_ne!(
            comparable(&claim("1Gi"), false),
            comparable(&claim("2Gi"), false)
        );
        assert_eq!(
            comparable(&claim("1Gi"), true),
            comparable(&claim("2Gi"), true)
        );
        let mut other_mode = claim("1Gi");
        other_mode["accessModes"] = json!(["ReadWriteMany"]);
        assert_ne!(
            comparable(&claim("1Gi"), true),
            comparable(&other_mode, true)
        );
    }
}
