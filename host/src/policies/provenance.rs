//! ConfigMaps the loader never takes as policies, whatever their label says:
//! anything that looks like a child of a DataJob.
//!
//! A policy ConfigMap is published by a person or a pipeline (`policy push`,
//! `kubectl apply`), never made by a controller. A ConfigMap with an
//! ownerReference, or with the labels the host puts on every child
//! (`policyhost.dev/managed-by`, `policyhost.dev/datajob`, of any instance),
//! was made for some owner: were it loaded, a DataJob's policy (or whoever
//! controls the owner) would publish code that other teams' DataJobs then
//! run, and deleting the owner would take the policy away from everyone.
//! The other defences (DataJobs in the policy namespace are refused, children
//! cannot carry `policyhost.dev/*` labels) keep such a ConfigMap from being
//! made; this one keeps it from ever serving if it is.

use crate::vocabulary::{DATAJOB_LABEL, MANAGED_BY_LABEL};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Why a ConfigMap is not a policy source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Foreign {
    /// It has an owner: it is some controller's object.
    #[error(
        "the ConfigMap has an ownerReference ({kind} {name}): a policy ConfigMap has no owner, so no DataJob or controller can publish or delete a policy"
    )]
    Owned {
        /// The owner's kind.
        kind: String,
        /// The owner's name.
        name: String,
    },
    /// It carries a label the host sets on the children it applies.
    #[error("the ConfigMap has the child label `{label}`: it is a DataJob's child, never a policy")]
    ChildLabel {
        /// The label.
        label: &'static str,
    },
}

impl Foreign {
    /// A short UpperCamelCase name for Events and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Owned { .. } => "OwnedConfigMap",
            Self::ChildLabel { .. } => "ChildConfigMap",
        }
    }

    /// Why the ConfigMap with `meta` may not be a policy; `None` when it may.
    #[must_use]
    pub fn of(meta: &ObjectMeta) -> Option<Self> {
        if let Some(owner) = meta.owner_references.as_ref().and_then(|o| o.first()) {
            return Some(Self::Owned {
                kind: owner.kind.clone(),
                name: owner.name.clone(),
            });
        }
        let labels = meta.labels.as_ref()?;
        [MANAGED_BY_LABEL, DATAJOB_LABEL]
            .into_iter()
            .find(|label| labels.contains_key(*label))
            .map(|label| Self::ChildLabel { label })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn labelled(pairs: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_published_policy_configmap_is_not_foreign() {
        assert_eq!(
            Foreign::of(&labelled(&[("policyhost.dev/policy", "fanout")])),
            None
        );
        assert_eq!(Foreign::of(&ObjectMeta::default()), None);
    }

    #[test]
    fn a_configmap_with_an_owner_reference_is_never_a_policy() {
        let meta = ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: "policyhost.dev/v1alpha1".into(),
                kind: "DataJob".into(),
                name: "hijack".into(),
                uid: "u".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..labelled(&[("policyhost.dev/policy", "fanout")])
        };
        let foreign = Foreign::of(&meta).expect("foreign");
        assert_eq!(foreign.reason(), "OwnedConfigMap");
        assert_eq!(
            foreign.to_string(),
            "the ConfigMap has an ownerReference (DataJob hijack): a policy ConfigMap has no owner, so no DataJob or controller can publish or delete a policy"
        );
    }

    #[test]
    fn a_configmap_with_either_child_label_of_any_instance_is_never_a_policy() {
        for label in ["policyhost.dev/managed-by", "policyhost.dev/datajob"] {
            let meta = labelled(&[
                ("policyhost.dev/policy", "fanout"),
                (label, "other-instance"),
            ]);
            let foreign = Foreign::of(&meta).expect("foreign");
            assert_eq!(foreign.reason(), "ChildConfigMap");
            assert_eq!(
                foreign.to_string(),
                format!(
                    "the ConfigMap has the child label `{label}`: it is a DataJob's child, never a policy"
                )
            );
        }
    }
}
