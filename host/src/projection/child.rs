//! A child object as the operator reads it: identity, owners and the few
//! status fields its lifecycle depends on.
//!
//! Watch streams decode children straight into [`ChildObject`]: `spec` and
//! the rest of `status` are skipped by the decoder instead of being built into
//! a JSON tree and thrown away (lesson three of the design: per-event garbage
//! is latency).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::{Deserialize, Serialize};

use crate::runtime::kinds::{ChildKind, Lifecycle};
use crate::runtime::{Child, ChildPhase};

/// A child object, decoded slim. Any kind; its type is carried at runtime
/// (`DynamicType = ApiResource`) as `kube::api::DynamicObject` does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildObject {
    /// `apiVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `metadata`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The status fields the lifecycle reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ChildStatus>,
}

/// The status fields of Pods, Jobs and PersistentVolumeClaims that make a
/// child's phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildStatus {
    /// Pod and PersistentVolumeClaim `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Pod and Job `status.conditions` (type and status only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<StatusCondition>,
    /// Job `status.active`: running Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i64>,
}

/// One status condition, reduced to what a lifecycle needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusCondition {
    /// The condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
}

impl ChildObject {
    /// The `child` record a policy sees.
    ///
    /// As its kind's [`Lifecycle`] says: Pods map `status.phase` and the
    /// `Ready` condition; batch Jobs map their `Complete` / `Failed`
    /// conditions and active Pods; PersistentVolumeClaims are done and ready
    /// once `Bound`, failed once `Lost`; kinds without a lifecycle are
    /// `succeeded` and ready once they exist.
    #[must_use]
    pub fn project(&self) -> Child {
        let api_version = self.api_version.clone().unwrap_or_default();
        let kind = self.kind.clone().unwrap_or_default();
        let (phase, ready) = self.lifecycle(&api_version, &kind);
        Child {
            api_version,
            kind,
            name: self.metadata.name.clone().unwrap_or_default(),
            phase,
            ready,
            deleting: self.metadata.deletion_timestamp.is_some(),
            labels: super::sorted(self.metadata.labels.as_ref()),
        }
    }

    fn lifecycle(&self, api_version: &str, kind: &str) -> (ChildPhase, bool) {
        let status = self.status.as_ref();
        let condition = |kind: &str| status.is_some_and(|s| s.condition_true(kind));
        match ChildKind::lifecycle_of(api_version, kind) {
            Lifecycle::Pod => {
                let phase = match status.and_then(|s| s.phase.as_deref()) {
                    Some("Running") => ChildPhase::Running,
                    Some("Succeeded") => ChildPhase::Succeeded,
                    Some("Failed") => ChildPhase::Failed,
                    Some("Unknown") => ChildPhase::Unknown,
                    _ => ChildPhase::Pending,
                };
                (phase, condition("Ready"))
            }
            Lifecycle::Job => {
                let phase = if condition("Complete") {
                    ChildPhase::Succeeded
                } else if condition("Failed") {
                    ChildPhase::Failed
                } else if status.and_then(|s| s.active).is_some_and(|n| n > 0) {
                    ChildPhase::Running
                } else {
                    ChildPhase::Pending
                };
                let ready = matches!(phase, ChildPhase::Succeeded | ChildPhase::Running);
                (phase, ready)
            }
            Lifecycle::Claim => match status.and_then(|s| s.phase.as_deref()) {
                Some("Bound") => (ChildPhase::Succeeded, true),
                Some("Lost") => (ChildPhase::Failed, false),
                _ => (ChildPhase::Pending, false),
            },
            Lifecycle::Exists => (ChildPhase::Succeeded, true),
        }
    }
}

impl ChildStatus {
    /// True when the condition `kind` has status `"True"`.
    #[must_use]
    pub fn condition_true(&self, kind: &str) -> bool {
        self.conditions
            .iter()
            .any(|c| c.kind == kind && c.status == "True")
    }
}

impl Resource for ChildObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn decoding_skips_spec_and_keeps_the_lifecycle_fields() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w", "ownerReferences": [{"apiVersion": "policyhost.dev/v1alpha1",
                "kind": "DataJob", "name": "j", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}]}});
        let object = ChildObject::deserialize(&pod).unwrap();
        assert_eq!(
            object.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert_eq!(
            object.metadata.owner_references.as_ref().unwrap()[0].uid,
            "u"
        );
        let child = object.project();
        assert_eq!((child.phase, child.ready), (ChildPhase::Running, true));
    }

    #[test]
    fn a_claim_is_pending_until_bound_and_failed_once_lost() {
        let claim = |phase: Option<&str>| {
            let object = ChildObject::deserialize(&json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "scratch"},
                "spec": {"accessModes": ["ReadWriteMany"]},
                "status": phase.map(|phase| json!({"phase": phase})),
            }))
            .unwrap();
            let child = object.project();
            (child.phase, child.ready)
        };
        assert_eq!(claim(None), (ChildPhase::Pending, false));
        assert_eq!(claim(Some("Pending")), (ChildPhase::Pending, false));
        assert_eq!(claim(Some("Bound")), (ChildPhase::Succeeded, true));
        assert_eq!(claim(Some("Lost")), (ChildPhase::Failed, false));
    }
}
