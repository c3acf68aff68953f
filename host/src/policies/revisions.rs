//! The versions a policy served, kept in the cluster beside it, so that
//! `policy rollback` serves one again (after a restart or a change of
//! leader too) without its publisher finding and pushing the old bytes.
//!
//! Each version put in service from `policy-<name>` is kept as the
//! ConfigMap `revision-<name>-<first 16 hex digits of its digest>` in the
//! policy namespace: labelled [`REVISION_OF_LABEL`], owned by
//! `policy-<name>` (deleting the policy deletes its history), holding the
//! settings and component that served, pinned to the digest (an artifact
//! by its manifest digest, so a rollback pulls from the artifact cache, not
//! the registry). Only the host writes them: a team has no `create` in the
//! policy namespace, so no team can forge another's, or its own, history.
//! The newest [`Revisions::keep`] by when they last served are kept.
//!
//! `policy-<name>`'s [`HISTORY_ANNOTATION`] lists them (digest, when, by
//! whom) for `policy history` and `policy rollback`, which apply
//! `data.revision: sha256:<digest>` alone to `policy-<name>`
//! ([`configmap::rollback`]): the ConfigMap stays the one source of what
//! serves. The host reads the revision of that digest, and of that policy
//! only, and loads it as any version (the compile cache answers for a
//! version it compiled before); a digest it holds no revision of is
//! refused (`NeverServed`) and the version in service keeps serving.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt as _};
use serde::{Deserialize, Serialize};

use super::configmap::{self, Settings};
use crate::oci::Reference;
use crate::runtime::Digest;
use crate::vocabulary::{
    FIELD_MANAGER, HISTORY_ANNOTATION, PUBLISHED_BY_ANNOTATION, REVISION_DIGEST_ANNOTATION,
    REVISION_OF_LABEL, SERVED_AT_ANNOTATION,
};

/// Revisions kept per policy unless `--policy-history` says otherwise.
pub const DEFAULT_KEEP: usize = 5;

/// The name of the revision of `policy` whose component has `digest`.
#[must_use]
pub fn name(policy: &str, digest: &Digest) -> String {
    format!("revision-{policy}-{}", &digest.to_hex()[..16])
}

/// One version a policy served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// Its component's digest, 64 hex digits.
    pub digest: String,
    /// When it last went into service (RFC 3339).
    pub at: String,
    /// The field manager that wrote the content it served from.
    pub by: String,
}

/// The versions a policy served, the last served first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History(pub Vec<Served>);

/// Why `policy rollback` has no version to serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lookup {
    /// No earlier version is kept.
    #[error(
        "policy {policy} has served no other version this host keeps (its history holds {kept})"
    )]
    NoEarlier {
        /// The policy.
        policy: String,
        /// The digests it holds, or `nothing`.
        kept: String,
    },
    /// The digest asked for is not in the history.
    #[error(
        "policy {policy} never served a version sha256:{asked}… that this host keeps (its history holds {kept}): a rollback serves only a version the policy served"
    )]
    NeverServed {
        /// The policy.
        policy: String,
        /// What was asked for.
        asked: String,
        /// The digests it holds.
        kept: String,
    },
    /// More than one kept digest starts with what was asked for.
    #[error("sha256:{asked}… names more than one version of policy {policy}: give more digits")]
    Ambiguous {
        /// The policy.
        policy: String,
        /// What was asked for.
        asked: String,
    },
}

impl History {
    /// The history an annotation of the serving ConfigMap holds (none when
    /// absent or unreadable: it is the host's, rewritten at each swap).
    #[must_use]
    pub fn read(annotations: Option<&BTreeMap<String, String>>) -> Self {
        Self(
            annotations
                .and_then(|annotations| annotations.get(HISTORY_ANNOTATION))
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default(),
        )
    }

    /// The annotation's value.
    #[must_use]
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_default()
    }

    /// The version served last before `current`.
    ///
    /// # Errors
    ///
    /// [`Lookup::NoEarlier`] when every kept version is `current`.
    pub fn previous(&self, policy: &str, current: Option<&str>) -> Result<&Served, Lookup> {
        self.0
            .iter()
            .find(|served| Some(served.digest.as_str()) != current)
            .ok_or_else(|| Lookup::NoEarlier {
                policy: policy.to_owned(),
                kept: self.kept(),
            })
    }

    /// The kept version whose digest starts with `asked` (hex, optionally
    /// prefixed `sha256:`, at least one digit).
    ///
    /// # Errors
    ///
    /// [`Lookup::NeverServed`] or [`Lookup::Ambiguous`].
    pub fn find(&self, policy: &str, asked: &str) -> Result<&Served, Lookup> {
        let asked = asked
            .strip_prefix("sha256:")
            .unwrap_or(asked)
            .to_ascii_lowercase();
        let mut matching = self
            .0
            .iter()
            .filter(|served| !asked.is_empty() && served.digest.starts_with(&asked));
        match (matching.next(), matching.next()) {
            (Some(served), None) => Ok(served),
            (Some(_), Some(_)) => Err(Lookup::Ambiguous {
                policy: policy.to_owned(),
                asked,
            }),
            (None, _) => Err(Lookup::NeverServed {
                policy: policy.to_owned(),
                asked,
                kept: self.kept(),
            }),
        }
    }

    fn kept(&self) -> String {
        if self.0.is_empty() {
            return "nothing".to_owned();
        }
        self.0
            .iter()
            .map(|served| format!("sha256:{}", &served.digest[..served.digest.len().min(12)]))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The content a version served from: its settings and its component.
#[derive(Debug, Clone)]
pub struct Kept {
    /// `data`.
    pub data: BTreeMap<String, String>,
    /// `binaryData`.
    pub binary_data: BTreeMap<String, ByteString>,
}

impl Kept {
    /// What to keep of a version that served `digest` with `settings` and
    /// `binary_data`: pinned to its digest, its artifact (if pulled) by the
    /// digest it was pulled by.
    #[must_use]
    pub fn of(
        mut settings: Settings,
        binary_data: BTreeMap<String, ByteString>,
        digest: Digest,
        pulled: Option<&Reference>,
    ) -> Self {
        settings.sha256 = Some(digest);
        settings.revision = None;
        if let Some(reference) = pulled {
            settings.artifact = Some(reference.clone());
        }
        Self {
            data: settings.to_data(),
            binary_data,
        }
    }
}

impl Kept {
    /// The settings it keeps, pinned to `digest` whatever its `data`
    /// says: a revision read back serves the component asked for, or none.
    ///
    /// # Errors
    ///
    /// The first key of its `data` that does not read.
    pub fn settings(&self, digest: Digest) -> Result<Settings, crate::data_keys::KeyError> {
        Settings::parse(&self.data).map(|settings| Settings {
            sha256: Some(digest),
            ..settings
        })
    }
}

/// What went wrong with a revision.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `data.revision` came with other keys or a component.
    #[error(
        "`data.{}` asks for a version served before and must be the ConfigMap's only content (its settings are the revision's): remove the other keys",
        configmap::keys::REVISION
    )]
    NotAlone,
    /// No revision of this policy with this digest is kept.
    #[error(
        "policy {policy} never served sha256:{digest}, or it left the history this host keeps (`policyhost policy history {policy}` lists it)"
    )]
    NeverServed {
        /// The policy.
        policy: String,
        /// The digest asked for.
        digest: String,
    },
    /// The API server did not answer as expected.
    #[error("cannot {action} revision ConfigMap {name}")]
    Api {
        /// What was tried.
        action: &'static str,
        /// The revision's name.
        name: String,
        /// The server's answer.
        #[source]
        source: Box<kube::Error>,
    },
}

impl Error {
    /// A short UpperCamelCase name for Events, annotations and metrics.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotAlone => "RevisionNotAlone",
            Self::NeverServed { .. } => "NeverServed",
            Self::Api { .. } => "RevisionUnreadable",
        }
    }

    /// Whether reading again may succeed without a change (the API server
    /// failed, not the ask).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Api { .. })
    }
}

/// Checks that a ConfigMap asking for the version `digest` again
/// (`data.revision`) asks for nothing else.
///
/// # Errors
///
/// [`Error::NotAlone`] when it holds more than the ask.
pub fn check_alone(
    digest: Digest,
    settings: &Settings,
    binary_data: &BTreeMap<String, ByteString>,
) -> Result<(), Error> {
    let alone = Settings {
        revision: Some(digest),
        ..Settings::default()
    };
    if *settings == alone && binary_data.is_empty() {
        Ok(())
    } else {
        Err(Error::NotAlone)
    }
}

/// The revisions of the policies in one namespace.
#[derive(Clone)]
pub struct Revisions {
    api: Api<ConfigMap>,
    /// How many revisions each policy keeps; 0 keeps none (no rollback).
    pub keep: usize,
}

impl Revisions {
    /// The revisions in the policy namespace `namespace`, `keep` per policy.
    #[must_use]
    pub fn new(client: Client, namespace: &str, keep: usize) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            keep,
        }
    }

    /// The content of the revision of `policy` with `digest`.
    ///
    /// # Errors
    ///
    /// [`Error::NeverServed`] when no such revision of this policy is kept,
    /// [`Error::Api`] when it cannot be read.
    pub async fn read(&self, policy: &str, digest: Digest) -> Result<Kept, Error> {
        let name = name(policy, &digest);
        let never = || Error::NeverServed {
            policy: policy.to_owned(),
            digest: digest.to_hex(),
        };
        let map = self
            .api
            .get_opt(&name)
            .await
            .map_err(|source| Error::Api {
                action: "read",
                name: name.clone(),
                source: Box::new(source),
            })?
            .ok_or_else(never)?;
        let of_this = map.labels().get(REVISION_OF_LABEL).map(String::as_str) == Some(policy)
            && map.annotations().get(REVISION_DIGEST_ANNOTATION) == Some(&digest.to_hex());
        if !of_this {
            return Err(never());
        }
        Ok(Kept {
            data: map.data.unwrap_or_default(),
            binary_data: map.binary_data.unwrap_or_default(),
        })
    }

    /// Keeps `kept`, the version of `policy` that went into service from
    /// `serving` with `digest`, written by `by`; forgets the revisions
    /// past [`keep`](Self::keep), the oldest served first, but never one
    /// of `pinned`. Returns the history as it now stands.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when a write or the list is refused.
    pub async fn record(
        &self,
        policy: &str,
        serving: OwnerReference,
        digest: Digest,
        kept: Kept,
        by: &str,
        pinned: &BTreeSet<Digest>,
    ) -> Result<History, Error> {
        let name = name(policy, &digest);
        let revision = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    REVISION_OF_LABEL.to_owned(),
                    policy.to_owned(),
                )])),
                annotations: Some(BTreeMap::from([
                    (REVISION_DIGEST_ANNOTATION.to_owned(), digest.to_hex()),
                    (
                        SERVED_AT_ANNOTATION.to_owned(),
                        format!("{:.3}", Timestamp::now()),
                    ),
                    (PUBLISHED_BY_ANNOTATION.to_owned(), by.to_owned()),
                ])),
                owner_references: Some(vec![serving]),
                ..ObjectMeta::default()
            },
            data: Some(kept.data),
            binary_data: Some(kept.binary_data),
            ..ConfigMap::default()
        };
        let api_error = |action, name: &str| {
            let name = name.to_owned();
            move |source| Error::Api {
                action,
                name,
                source: Box::new(source),
            }
        };
        self.api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&revision),
            )
            .await
            .map_err(api_error("write", &name))?;
        let listed = self
            .api
            .list_metadata(&ListParams::default().labels(&format!("{REVISION_OF_LABEL}={policy}")))
            .await
            .map_err(api_error("list", &name))?;
        let mut revisions: Vec<_> = listed
            .items
            .into_iter()
            .filter_map(|meta| {
                let annotations = meta.metadata.annotations.as_ref()?;
                let served = Served {
                    digest: annotations.get(REVISION_DIGEST_ANNOTATION)?.clone(),
                    at: annotations.get(SERVED_AT_ANNOTATION)?.clone(),
                    by: annotations
                        .get(PUBLISHED_BY_ANNOTATION)
                        .cloned()
                        .unwrap_or_default(),
                };
                Some((served, meta.metadata))
            })
            .collect();
        revisions.sort_by(|(a, _), (b, _)| b.at.cmp(&a.at));
        let past = revisions.split_off(self.keep.max(1).min(revisions.len()));
        let (still_pinned, forgotten): (Vec<_>, Vec<_>) = past
            .into_iter()
            .partition(|(served, _)| pinned.iter().any(|digest| digest.to_hex() == served.digest));
        revisions.extend(still_pinned);
        for (_, meta) in forgotten {
            let name = meta.name.unwrap_or_default();
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: meta.uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            if let Err(source) = self.api.delete(&name, &params).await
                && !is_gone(&source)
            {
                return Err(api_error("delete", &name)(source));
            }
        }
        Ok(History(
            revisions.into_iter().map(|(served, _)| served).collect(),
        ))
    }
}

fn is_gone(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404 || status.code == 409)
}

/// Who last wrote a ConfigMap's content: the field manager of the newest
/// managed-fields entry that holds its `data` or `binaryData`.
#[must_use]
pub fn published_by(entries: &[ManagedFieldsEntry]) -> Option<String> {
    entries
        .iter()
        .filter(|entry| {
            entry.fields_v1.as_ref().is_some_and(|fields| {
                fields.0.get("f:data").is_some() || fields.0.get("f:binaryData").is_some()
            })
        })
        .max_by_key(|entry| entry.time.as_ref().map(|time| time.0))
        .and_then(|entry| entry.manager.clone())
}

/// The owner reference a revision carries: the serving ConfigMap.
#[must_use]
pub fn owned_by(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        ..OwnerReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(digest: &str, at: &str) -> Served {
        Served {
            digest: digest.repeat(64 / digest.len()),
            at: at.to_owned(),
            by: "policyhost-push".to_owned(),
        }
    }

    #[test]
    fn the_previous_version_is_the_last_served_other_than_the_current() {
        let history = History(vec![
            served("b", "2026-12-06T10:02:00.000Z"),
            served("a", "2026-12-06T10:01:00.000Z"),
        ]);
        let current = "b".repeat(64);
        assert_eq!(
            history
                .previous("etl", Some(&current))
                .map(|s| &s.digest[..1]),
            Ok("a")
        );
        // After a rollback the current is the older one: the previous is the newer.
        assert_eq!(
            history
                .previous("etl", Some(&"a".repeat(64)))
                .map(|s| &s.digest[..1]),
            Ok("b")
        );
        let alone = History(vec![served("b", "2026-12-06T10:02:00.000Z")]);
        assert_eq!(
            alone
                .previous("etl", Some(&current))
                .unwrap_err()
                .to_string(),
            "policy etl has served no other version this host keeps (its history holds sha256:bbbbbbbbbbbb)"
        );
    }

    #[test]
    fn a_digest_is_found_by_a_unique_prefix_and_one_never_served_is_named() {
        let history = History(vec![served("ab", "2"), served("ac", "1")]);
        assert_eq!(
            history.find("etl", "sha256:AC").map(|s| &s.digest[..2]),
            Ok("ac")
        );
        assert!(matches!(
            history.find("etl", "a"),
            Err(Lookup::Ambiguous { .. })
        ));
        assert!(matches!(
            history.find("etl", ""),
            Err(Lookup::NeverServed { .. })
        ));
        assert_eq!(
            history.find("etl", "ff").unwrap_err().to_string(),
            "policy etl never served a version sha256:ff… that this host keeps (its history holds sha256:abababababab, sha256:acacacacacac): a rollback serves only a version the policy served"
        );
    }

    #[test]
    fn the_history_reads_back_what_was_written_and_nothing_from_garbage() {
        let history = History(vec![served("a", "1")]);
        let annotations =
            BTreeMap::from([(HISTORY_ANNOTATION.to_owned(), history.to_annotation())]);
        assert_eq!(History::read(Some(&annotations)), history);
        let garbage = BTreeMap::from([(HISTORY_ANNOTATION.to_owned(), "{".to_owned())]);
        assert_eq!(History::read(Some(&garbage)), History::default());
        assert_eq!(History::read(None), History::default());
    }

    #[test]
    fn a_kept_version_is_pinned_to_its_digest_and_its_pulled_artifact() {
        let digest = Digest::of(b"component");
        let settings = Settings {
            artifact: Some("r.example.com/a/b:v1".parse().expect("a tag")),
            ..Settings::default()
        };
        let pulled: Reference = format!("r.example.com/a/b@sha256:{}", "0".repeat(64))
            .parse()
            .expect("a digest");
        let kept = Kept::of(settings, BTreeMap::new(), digest, Some(&pulled));
        let read = Settings::parse(&kept.data).expect("kept settings read back");
        assert_eq!(read.sha256, Some(digest));
        assert_eq!(read.artifact, Some(pulled));
        assert_eq!(read.revision, None);
    }

    #[test]
    fn the_content_manager_is_the_newest_writer_of_data_or_binary_data() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
        let entry = |manager: &str, field: &str, second: i64| ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            fields_v1: Some(FieldsV1(serde_json::json!({ field: {} }))),
            time: Some(Time(Timestamp::from_second(second).expect("a time"))),
            ..ManagedFieldsEntry::default()
        };
        let entries = [
            entry("kubectl", "f:data", 1),
            entry("policyhost", "f:metadata", 3),
            entry("policyhost-push", "f:binaryData", 2),
        ];
        assert_eq!(published_by(&entries).as_deref(), Some("policyhost-push"));
        assert_eq!(published_by(&entries[1..2]), None);
    }
}
