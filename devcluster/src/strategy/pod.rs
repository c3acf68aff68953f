//! Pods: scheduler and container defaults (on every write), admission, a
//! spec that updates may barely change, and graceful deletion by the kubelet.

use serde_json::{Value, json};

use std::sync::Arc;

use super::{Strategy, recheck_claims_of};
use crate::object::Stored;
use crate::rand::Rng;
use crate::resource::{Registry, ResourceType};
use crate::status::Result;
use crate::store::Txn;

/// The Pod strategy.
#[derive(Debug)]
pub(crate) struct Pods;

/// kube-apiserver's default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE: i64 = 30;

impl Strategy for Pods {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        crate::defaults::pod(body);
        body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        Ok(())
    }

    fn admit_create(&self, body: &mut Value) {
        crate::defaults::pod_admission(body);
    }

    /// kube-apiserver defaults every object it decodes or applies, so a field
    /// an update or an apply leaves out takes its default again.
    fn prepare_for_update(&self, _old: &Value, new: &mut Value) {
        crate::defaults::pod(new);
    }

    fn validate_update(&self, rt: &ResourceType, old: &Value, new: &Value) -> Result<()> {
        if crate::pod_update::changes_immutable_spec(old, new) {
            let name = old["metadata"]["name"].as_str().unwrap_or_default();
            return Err(rt.field_invalid(
                name,
                "spec",
                "FieldValueForbidden",
                crate::pod_update::FORBIDDEN.to_owned(),
            ));
        }
        Ok(())
    }

    /// Pods on a node terminate gracefully: the kubelet stops them, then deletes them with
    /// a zero grace period.
    fn deletion_grace(&self, pod: &Value, requested: Option<i64>) -> Option<i64> {
        if !pod["spec"]["nodeName"].is_string() {
            return None;
        }
        let grace = requested
            .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(DEFAULT_GRACE);
        Some(grace.max(0))
    }

    /// kube-apiserver stores a Pod as deleting (a MODIFIED event) before it removes it,
    /// even with no grace left.
    fn marks_before_removal(&self) -> bool {
        true
    }

    /// A finished Pod no longer holds the claims it mounts.
    fn after_write(
        &self,
        txn: &mut Txn<'_>,
        _registry: &Registry,
        _rt: &ResourceType,
        stored: &Arc<Stored>,
    ) -> Result<()> {
        if stored.value().is_ok_and(|pod| {
            matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        }) {
            recheck_claims_of(txn, stored);
        }
        Ok(())
    }

    /// A Pod gone no longer holds the claims it mounted.
    fn after_remove(&self, txn: &mut Txn<'_>, _registry: &Registry, gone: &Arc<Stored>) {
        recheck_claims_of(txn, gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pods_on_a_node_have_a_grace_period() {
        let unbound = json!({"spec": {}});
        assert_eq!(Pods.deletion_grace(&unbound, Some(5)), None);
        let bound = json!({"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 7}});
        assert_eq!(Pods.deletion_grace(&bound, None), Some(7));
        assert_eq!(Pods.deletion_grace(&bound, Some(2)), Some(2));
        assert_eq!(Pods.deletion_grace(&bound, Some(-3)), Some(0));
        let defaulted = json!({"spec": {"nodeName": "n"}});
        assert_eq!(Pods.deletion_grace(&defaulted, None), Some(DEFAULT_GRACE));
    }
}
