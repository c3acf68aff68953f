//! What the source keeps of a policy ConfigMap ([`Record`]: never its
//! bytes), and what it holds only from the watch event to the load
//! ([`Content`]).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};

use super::super::configmap::{self, Settings};
use super::super::load;
use super::super::provenance::Foreign;
use super::super::refusal;
use super::super::registry::Role;
use super::super::revisions;
use crate::cache::{Cached, ObjectKey};
use crate::data_keys::KeyError;
use crate::vocabulary::{
    CANDIDATE_ROLE, PINNED_ANNOTATION, PINS_ROLE, POLICY_LABEL, PROVIDES_ANNOTATION, ROLE_LABEL,
    ROLLOUT_ROLE, ROLLOUT_STATUS_ANNOTATION,
};

/// The role a ConfigMap's `policyhost.dev/role` label asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Asked {
    /// A role the host knows: no label asks for [`Role::Serving`],
    /// `candidate` for [`Role::Candidate`].
    Role(Role),
    /// `pins`: not a version, the policy's pins ([`crate::policies::pins`]).
    Pins,
    /// `rollout`: not a version, the plan by which its candidate reaches
    /// its DataJobs ([`crate::policies::rollout`]).
    Rollout,
    /// A role the host does not know: the ConfigMap is refused.
    Unknown(String),
}

impl Asked {
    /// The role a ConfigMap's labels ask for.
    #[must_use]
    pub fn of(labels: Option<&BTreeMap<String, String>>) -> Self {
        match labels
            .and_then(|labels| labels.get(ROLE_LABEL))
            .map(String::as_str)
        {
            None => Self::Role(Role::Serving),
            Some(CANDIDATE_ROLE) => Self::Role(Role::Candidate),
            Some(PINS_ROLE) => Self::Pins,
            Some(ROLLOUT_ROLE) => Self::Rollout,
            Some(other) => Self::Unknown(other.to_owned()),
        }
    }

    /// The role, if the host knows it.
    #[must_use]
    pub fn known(&self) -> Option<Role> {
        match self {
            Self::Role(role) => Some(*role),
            Self::Pins | Self::Rollout | Self::Unknown(_) => None,
        }
    }
}

impl From<Role> for Asked {
    fn from(role: Role) -> Self {
        Self::Role(role)
    }
}

impl std::fmt::Display for Asked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Role(role) => role.fmt(f),
            Self::Pins => f.write_str("pins"),
            Self::Rollout => f.write_str("rollout"),
            Self::Unknown(role) => write!(f, "role `{role}`"),
        }
    }
}

/// What one ConfigMap may hold: a policy's serving version, or its candidate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    /// The policy's name.
    pub policy: String,
    /// Which of its versions.
    pub role: Asked,
}

/// A policy ConfigMap as the cache keeps it: identity, policy name and a
/// fingerprint of its content, never its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// The policy's name: the value of the `policyhost.dev/policy` label.
    pub policy: String,
    /// Which of the policy's versions it offers.
    pub role: Asked,
    /// [`configmap::fingerprint`] of its `data` and `binaryData`.
    pub fingerprint: String,
    /// Why it may not be a policy at all (a DataJob's child), if so.
    pub foreign: Option<Foreign>,
    /// The policy the host last recorded it as providing
    /// ([`PROVIDES_ANNOTATION`]).
    pub provides: Option<String>,
    /// The digest its history ([`revisions::History`]) names last served:
    /// the version a leader last kept a revision of.
    pub recorded: Option<String>,
    /// Where its rollout is, as the leader wrote it
    /// ([`ROLLOUT_STATUS_ANNOTATION`]): every replica routes by it.
    pub rollout: Option<String>,
}

impl Record {
    /// Reads a ConfigMap's identity and labels; `fingerprint` is that of
    /// its content (empty for a deleted one).
    #[must_use]
    pub fn of(map: &ConfigMap, fingerprint: String) -> Self {
        let meta = &map.metadata;
        Self {
            key: ObjectKey::of(meta),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            policy: meta
                .labels
                .as_ref()
                .and_then(|labels| labels.get(POLICY_LABEL))
                .cloned()
                .unwrap_or_default(),
            role: Asked::of(meta.labels.as_ref()),
            fingerprint,
            foreign: Foreign::of(meta),
            provides: meta
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(PROVIDES_ANNOTATION))
                .cloned(),
            recorded: revisions::History::read(meta.annotations.as_ref())
                .0
                .into_iter()
                .next()
                .map(|served| served.digest),
            rollout: meta
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(ROLLOUT_STATUS_ANNOTATION))
                .cloned(),
        }
    }

    /// What it claims.
    #[must_use]
    pub fn claim(&self) -> Claim {
        Claim {
            policy: self.policy.clone(),
            role: self.role.clone(),
        }
    }

    /// Whether the host recorded it as the provider of the policy it names:
    /// on a start, it keeps the name against any other ConfigMap naming it.
    /// A ConfigMap that may not be a policy at all keeps nothing.
    #[must_use]
    pub fn is_recorded_provider(&self) -> bool {
        self.foreign.is_none() && self.provides.as_deref() == Some(self.policy.as_str())
    }

    /// Whether an update from `old` to `self` leaves nothing to load again
    /// (the host's own annotations changed, say).
    #[must_use]
    pub fn same_content(&self, old: &Self) -> bool {
        old.fingerprint == self.fingerprint
            && old.policy == self.policy
            && old.role == self.role
            && old.uid == self.uid
            && old.foreign == self.foreign
            && old.rollout == self.rollout
    }

    /// The Event reference to the ConfigMap.
    #[must_use]
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            name: Some(self.key.name().to_owned()),
            namespace: self.key.namespace().map(str::to_owned),
            uid: Some(self.uid.clone()),
            ..ObjectReference::default()
        }
    }
}

impl Cached for Record {
    fn key(&self) -> ObjectKey {
        self.key.clone()
    }

    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

/// A ConfigMap's content, from its watch event until its load.
pub struct Content {
    /// Its `data` read once, or why it does not read: every step of the
    /// load (whether to pull, the pull, the load) takes this.
    pub settings: Result<Settings, KeyError>,
    /// `binaryData`.
    pub binary_data: BTreeMap<String, ByteString>,
    /// The compile refusal the host recorded on it.
    pub refused: Option<crate::runtime::Refusal>,
    /// The tag of its artifact as the host resolved it first.
    pub pinned: Option<crate::oci::Reference>,
    /// The artifact it names, once pulled (or why not): set by the pull,
    /// apart from the load ([`super::pulls`]).
    pub fetched: Option<load::Result<load::Fetched>>,
    /// The field manager that wrote its content, for its revision.
    pub published_by: Option<String>,
    /// Its `data` as it is (a pins ConfigMap's pins).
    pub data: BTreeMap<String, String>,
    /// Whether it asked for a version served before (`data.revision`): its
    /// settings and component are then that version's.
    pub again: bool,
}

/// Splits a ConfigMap into its record and its content (kept in `contents`
/// under its key).
pub fn split(map: ConfigMap, contents: &mut HashMap<ObjectKey, Content>) -> Record {
    let data = map.data.clone().unwrap_or_default();
    let binary_data = map.binary_data.clone().unwrap_or_default();
    let record = Record::of(&map, configmap::fingerprint(&data, &binary_data));
    let settings = Settings::parse(&data);
    let refused = refusal::read(map.metadata.annotations.as_ref());
    let pinned = map
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(PINNED_ANNOTATION))
        .and_then(|text| text.parse().ok());
    let published_by = map
        .metadata
        .managed_fields
        .as_deref()
        .and_then(revisions::published_by);
    contents.insert(
        record.key.clone(),
        Content {
            settings,
            binary_data,
            refused,
            pinned,
            fetched: None,
            published_by,
            data,
            again: false,
        },
    );
    record
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    use super::*;

    fn map(policy: &str, provides: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("policy-aaa".into()),
                namespace: Some("policyhost-system".into()),
                labels: Some([(POLICY_LABEL.to_owned(), policy.to_owned())].into()),
                annotations: provides
                    .map(|p| [(PROVIDES_ANNOTATION.to_owned(), p.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn only_a_configmap_recorded_as_providing_the_policy_it_names_keeps_it_on_a_start() {
        let recorded = |map: &ConfigMap| Record::of(map, String::new()).is_recorded_provider();
        assert!(recorded(&map("etl", Some("etl"))));
        assert!(!recorded(&map("etl", None)), "never recorded");
        assert!(
            !recorded(&map("etl", Some("reports"))),
            "recorded for the policy it named before a relabel"
        );
        let mut owned = map("etl", Some("etl"));
        owned.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        }]);
        assert!(!recorded(&owned), "a DataJob's child keeps nothing");
    }

    #[test]
    fn the_role_label_makes_a_candidate_and_an_unknown_role_is_kept_to_be_refused() {
        let role = |value: Option<&str>| {
            let mut map = map("etl", None);
            if let Some(value) = value {
                map.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(ROLE_LABEL.into(), value.into());
            }
            Record::of(&map, String::new()).role
        };
        assert_eq!(role(None), Asked::Role(Role::Serving));
        assert_eq!(role(Some("candidate")), Asked::Role(Role::Candidate));
        assert_eq!(role(Some("Candidate")), Asked::Unknown("Candidate".into()));
        assert_eq!(role(Some("Candidate")).known(), None);
    }

    #[test]
    fn a_new_role_is_new_content() {
        let serving = Record::of(&map("etl", None), "f".into());
        let mut candidate = serving.clone();
        candidate.role = Role::Candidate.into();
        assert!(serving.same_content(&serving.clone()));
        assert!(!candidate.same_content(&serving));
    }
}
