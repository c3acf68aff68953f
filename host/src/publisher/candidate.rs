//! The publisher's side of a candidate version: read what the host found
//! (`policy diff`), mark its faults and dry-run refusals as examined, and promote it to the
//! serving version (`policy promote`).
//!
//! What promote relies on belongs to the pair it compares: the summary
//! counts only when it is of the candidate the ConfigMap now holds, the
//! faults and refusals marked examined only for the same (candidate, serving) pair, and
//! a candidate compared with a serving version no longer in service is
//! refused.
//!
//! Everything here is a `get` or a `patch` of the policy's own two
//! ConfigMaps, `policy-<name>` and `candidate-<name>`: the Role that lets a
//! team publish a policy and shadow it lets it promote it, and no more.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::publish;
use crate::policies::configmap;
use crate::policies::report::Annotations;
use crate::shadow::summary::{Examined, Summary};
use crate::vocabulary::{
    CANDIDATE_ROLE, EXAMINED_ANNOTATION, POLICY_LABEL, ROLE_LABEL, ROLLOUT_STATUS_ANNOTATION,
};

/// Why a candidate cannot be read, marked or promoted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused a read or a patch.
    #[error("cannot {action} ConfigMap {namespace}/{name}")]
    Api {
        /// `read` or `patch`.
        action: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// There is no candidate ConfigMap.
    #[error(
        "policy `{policy}` has no candidate: ConfigMap {namespace}/{name} does not exist or is not labelled as a candidate (`policy push --shadow` publishes one)"
    )]
    Missing {
        /// The policy.
        policy: String,
        /// The namespace.
        namespace: String,
        /// The candidate's ConfigMap name.
        name: String,
    },
    /// The host has not loaded the candidate's current content.
    #[error("the candidate of policy `{policy}` is not in service: {why}")]
    NotLoaded {
        /// The policy.
        policy: String,
        /// Rejected (and why), or not processed yet.
        why: String,
    },
    /// The candidate faulted since its faults were last shown.
    #[error(
        "the candidate of policy `{policy}` faulted {faults} times, {examined} of them shown by `policy diff`: examine the others (`policyhost policy diff {policy}`) or {to} with --force"
    )]
    UnexaminedFaults {
        /// The policy.
        policy: String,
        /// What it was refused for: `promote`, `roll it out`.
        to: &'static str,
        /// Faults so far.
        faults: u64,
        /// Faults `policy diff` has shown.
        examined: u64,
    },
    /// The API server refused children of the candidate in dry runs since
    /// its refusals were last shown.
    #[error(
        "the API server refused {refused} children of the candidate of policy `{policy}` in dry runs, {examined} of them shown by `policy diff`: examine the others (`policyhost policy diff {policy}`) or {to} with --force"
    )]
    UnexaminedRefusals {
        /// The policy.
        policy: String,
        /// What it was refused for: `promote`, `roll it out`.
        to: &'static str,
        /// Refusals so far.
        refused: u64,
        /// Refusals `policy diff` has shown.
        examined: u64,
    },
    /// The candidate's calls were compared with a serving version that no
    /// longer serves: they say nothing of the one that does.
    #[error(
        "the candidate of policy `{policy}` was compared with sha256:{compared}, which no longer serves (sha256:{serving} does): wait for its calls beside the serving version (`policyhost policy diff {policy}`) or {to} with --force"
    )]
    ComparedWithReplaced {
        /// The policy.
        policy: String,
        /// What it was refused for: `promote`, `roll it out`.
        to: &'static str,
        /// The serving digest its calls were compared with.
        compared: String,
        /// The serving digest now.
        serving: String,
    },
    /// Applying the serving version failed.
    #[error(transparent)]
    Publish(#[from] publish::Error),
}

/// A candidate as its ConfigMap shows it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The candidate's ConfigMap.
    pub map: ConfigMap,
    /// What the host reported on loading it.
    pub annotations: Annotations,
    /// What its shadow calls came to, once the host has written it (of
    /// this version or an earlier one: see [`Candidate::current_summary`]).
    pub summary: Option<Summary>,
    /// Faults and refusals `policy diff` has shown, and of which pair.
    pub examined: Examined,
}

impl Candidate {
    /// Whether the host serves the ConfigMap's current content as the
    /// candidate; otherwise why not.
    ///
    /// # Errors
    ///
    /// [`Error::NotLoaded`] when it was rejected or not processed yet.
    pub fn check_loaded(&self, policy: &str) -> Result<(), Error> {
        let current = configmap::fingerprint(
            &self.map.data.clone().unwrap_or_default(),
            &self.map.binary_data.clone().unwrap_or_default(),
        );
        let why = if self.annotations.observed != current {
            "the host has not processed its current content yet".to_owned()
        } else if let Some(error) = &self.annotations.error {
            format!("rejected: {error}")
        } else {
            return Ok(());
        };
        Err(Error::NotLoaded {
            policy: policy.to_owned(),
            why,
        })
    }

    /// The summary, if it is of the version the host serves from the
    /// ConfigMap: one written for an earlier candidate says nothing of it.
    #[must_use]
    pub fn current_summary(&self) -> Option<&Summary> {
        let loaded = self.annotations.loaded_digest.as_deref()?;
        self.summary
            .as_ref()
            .filter(|summary| summary.digest == loaded)
    }

    /// Faults of the current summary not yet shown by `policy diff` for
    /// the same pair.
    #[must_use]
    pub fn unexamined_faults(&self) -> u64 {
        self.current_summary().map_or(0, |summary| {
            summary.faults.saturating_sub(self.examined.of(summary))
        })
    }

    /// Children of the current summary the API server refused in dry runs,
    /// not yet shown by `policy diff` for the same pair.
    #[must_use]
    pub fn unexamined_refusals(&self) -> u64 {
        self.current_summary().map_or(0, |summary| {
            summary
                .refused
                .saturating_sub(self.examined.refused_of(summary))
        })
    }

    /// Whether the candidate's calls, if any, were compared with the
    /// serving version `serving` (its digest, `None` when there is none).
    ///
    /// # Errors
    ///
    /// [`Error::ComparedWithReplaced`] when they were compared with another.
    pub fn check_compared_with(
        &self,
        policy: &str,
        serving: Option<&str>,
        to: &'static str,
    ) -> Result<(), Error> {
        let Some(summary) = self.current_summary() else {
            return Ok(());
        };
        match serving {
            Some(serving) if !summary.serving.is_empty() && summary.serving != serving => {
                Err(Error::ComparedWithReplaced {
                    policy: policy.to_owned(),
                    to,
                    compared: summary.serving.clone(),
                    serving: serving.to_owned(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// The two ConfigMaps of one policy in one namespace.
pub struct Policy {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
}

impl Policy {
    /// Policy `name` in the policy namespace `namespace`.
    #[must_use]
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// Reads the candidate.
    ///
    /// # Errors
    ///
    /// [`Error::Missing`] when there is none, [`Error::Api`] when it cannot
    /// be read.
    pub async fn candidate(&self) -> Result<Candidate, Error> {
        let name = configmap::candidate_name(&self.name);
        let map = self
            .api
            .get_opt(&name)
            .await
            .map_err(|source| self.api_error("read", &name, source))?
            .filter(|map| {
                map.labels().get(POLICY_LABEL) == Some(&self.name)
                    && map.labels().get(ROLE_LABEL).map(String::as_str) == Some(CANDIDATE_ROLE)
            })
            .ok_or_else(|| Error::Missing {
                policy: self.name.clone(),
                namespace: self.namespace.clone(),
                name,
            })?;
        let annotations = Annotations::read(map.annotations());
        let summary = Summary::read(Some(map.annotations()));
        let examined = Examined::read(map.annotations());
        Ok(Candidate {
            map,
            annotations,
            summary,
            examined,
        })
    }

    /// The serving version's ConfigMap, if it exists.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when it cannot be read.
    pub async fn serving(&self) -> Result<Option<ConfigMap>, Error> {
        let name = configmap::configmap_name(&self.name);
        self.api
            .get_opt(&name)
            .await
            .map_err(|source| self.api_error("read", &name, source))
    }

    /// Records that the faults of `summary` have been shown, for its pair.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when the patch is refused.
    pub async fn mark_examined(&self, summary: &Summary) -> Result<(), Error> {
        let name = configmap::candidate_name(&self.name);
        let examined = serde_json::to_string(&summary.examined()).unwrap_or_default();
        let patch = json!({ "metadata": { "annotations": { EXAMINED_ANNOTATION: examined } } });
        self.api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|source| self.api_error("patch", &name, source))
    }

    /// Makes the candidate the serving version: its content is applied to
    /// `policy-<name>` (the host hot-swaps it in as any push), then the
    /// candidate's ConfigMap loses its labels and content, so the host
    /// stops calling it. Refused while the candidate is not in service, has
    /// faults or dry-run refusals `policy diff` has not shown, or was compared with a serving
    /// version that no longer serves, unless `force`.
    /// Returns the serving ConfigMap as applied.
    ///
    /// # Errors
    ///
    /// [`Error::Missing`], [`Error::NotLoaded`], [`Error::UnexaminedFaults`],
    /// [`Error::UnexaminedRefusals`], [`Error::ComparedWithReplaced`], or
    /// the API's refusal.
    pub async fn promote(&self, client: &Client, force: bool) -> Result<ConfigMap, Error> {
        let candidate = self.ready(force, "promote").await?;
        let serving = configmap::promoted(&candidate.map, &self.name);
        let applied = publish::apply(client, &serving).await?;
        self.retire(&configmap::candidate_name(&self.name)).await?;
        // A rollout of it is over: it serves every DataJob now.
        match self.retire(&configmap::rollout_name(&self.name)).await {
            Err(Error::Api { source, .. }) if matches!(*source, kube::Error::Api(ref status) if status.code == 404) =>
                {}
            other => other?,
        }
        Ok(applied)
    }

    /// The candidate, if it may act on DataJobs (be promoted, `to`, or
    /// rolled out): in service and, unless `force`, with no fault or
    /// dry-run refusal `policy diff` has not shown, compared with the
    /// serving version in service.
    ///
    /// # Errors
    ///
    /// [`Error::Missing`], [`Error::NotLoaded`], [`Error::UnexaminedFaults`],
    /// [`Error::UnexaminedRefusals`], [`Error::ComparedWithReplaced`].
    pub async fn ready(&self, force: bool, to: &'static str) -> Result<Candidate, Error> {
        let candidate = self.candidate().await?;
        candidate.check_loaded(&self.name)?;
        if force {
            return Ok(candidate);
        }
        let serving = self
            .serving()
            .await?
            .and_then(|map| Annotations::read(map.annotations()).loaded_digest);
        candidate.check_compared_with(&self.name, serving.as_deref(), to)?;
        if let Some(summary) = candidate.current_summary() {
            if candidate.unexamined_faults() > 0 {
                return Err(Error::UnexaminedFaults {
                    policy: self.name.clone(),
                    to,
                    faults: summary.faults,
                    examined: candidate.examined.of(summary),
                });
            }
            if candidate.unexamined_refusals() > 0 {
                return Err(Error::UnexaminedRefusals {
                    policy: self.name.clone(),
                    to,
                    refused: summary.refused,
                    examined: candidate.examined.refused_of(summary),
                });
            }
        }
        Ok(candidate)
    }

    /// Takes the labels and content off the ConfigMap `name`: the host no
    /// longer reads it, and its name stays the team's.
    async fn retire(&self, name: &str) -> Result<(), Error> {
        let retire = json!({
            "metadata": {
                "labels": { POLICY_LABEL: null, ROLE_LABEL: null },
                "annotations": { ROLLOUT_STATUS_ANNOTATION: null },
            },
            "data": null,
            "binaryData": null,
        });
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(retire))
            .await
            .map(|_| ())
            .map_err(|source| self.api_error("patch", name, source))
    }

    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn api(&self) -> &Api<ConfigMap> {
        &self.api
    }

    pub(super) fn api_error(&self, action: &'static str, name: &str, source: kube::Error) -> Error {
        Error::Api {
            action,
            namespace: self.namespace.clone(),
            name: name.to_owned(),
            source: Box::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::api::ObjectMeta;

    use super::*;

    fn candidate(
        observed_matches: bool,
        error: Option<&str>,
        faults: u64,
        examined: u64,
    ) -> Candidate {
        let data = BTreeMap::from([("fuel".to_owned(), "1".to_owned())]);
        let fingerprint = configmap::fingerprint(&data, &BTreeMap::new());
        Candidate {
            map: ConfigMap {
                metadata: ObjectMeta::default(),
                data: Some(data),
                ..ConfigMap::default()
            },
            annotations: Annotations {
                observed: if observed_matches {
                    fingerprint
                } else {
                    "old".into()
                },
                loaded_digest: Some("d".into()),
                error: error.map(str::to_owned),
                ..Annotations::default()
            },
            summary: Some(Summary {
                faults,
                serving: "s".into(),
                ..Summary::new("d".into())
            }),
            examined: Examined {
                candidate: "d".into(),
                serving: "s".into(),
                faults: examined,
                refused: 0,
            },
        }
    }

    #[test]
    fn refusals_count_as_examined_once_shown() {
        let mut refused = candidate(true, None, 0, 0);
        if let Some(summary) = refused.summary.as_mut() {
            summary.refused = 2;
        }
        assert_eq!(refused.unexamined_refusals(), 2);
        refused.examined.refused = 2;
        assert_eq!(refused.unexamined_refusals(), 0);
        refused.examined.serving = "another".into();
        assert_eq!(refused.unexamined_refusals(), 2, "another pair's");
    }

    #[test]
    fn only_a_candidate_in_service_can_be_promoted() {
        assert!(candidate(true, None, 0, 0).check_loaded("etl").is_ok());
        let pending = candidate(false, None, 0, 0)
            .check_loaded("etl")
            .unwrap_err();
        assert_eq!(
            pending.to_string(),
            "the candidate of policy `etl` is not in service: the host has not processed its current content yet"
        );
        let rejected = candidate(true, Some("Trap: boom"), 0, 0)
            .check_loaded("etl")
            .unwrap_err();
        assert!(
            rejected.to_string().ends_with("rejected: Trap: boom"),
            "{rejected}"
        );
    }

    #[test]
    fn faults_count_as_examined_once_shown() {
        assert_eq!(candidate(true, None, 3, 0).unexamined_faults(), 3);
        assert_eq!(candidate(true, None, 3, 3).unexamined_faults(), 0);
        assert_eq!(candidate(true, None, 5, 3).unexamined_faults(), 2);
        // Examined for another pair: none of these.
        let mut other = candidate(true, None, 3, 3);
        other.examined.serving = "s-before".into();
        assert_eq!(other.unexamined_faults(), 3);
        let error = Error::UnexaminedFaults {
            to: "promote",
            policy: "etl".into(),
            faults: 5,
            examined: 3,
        };
        assert_eq!(
            error.to_string(),
            "the candidate of policy `etl` faulted 5 times, 3 of them shown by `policy diff`: examine the others (`policyhost policy diff etl`) or promote with --force"
        );
    }

    #[test]
    fn a_summary_of_an_earlier_candidate_says_nothing_of_this_one() {
        let mut newer = candidate(true, None, 0, 0);
        newer.annotations.loaded_digest = Some("d-2".into());
        assert!(newer.current_summary().is_none());
        newer.summary = Some(Summary {
            faults: 4,
            ..Summary::new("d".into())
        });
        assert_eq!(newer.unexamined_faults(), 0, "not this version's faults");
        assert!(
            newer
                .check_compared_with("etl", Some("s-2"), "promote")
                .is_ok(),
            "nor its comparison"
        );
    }

    #[test]
    fn a_candidate_compared_with_a_replaced_version_is_refused() {
        let compared = candidate(true, None, 0, 0);
        assert!(
            compared
                .check_compared_with("etl", Some("s"), "promote")
                .is_ok()
        );
        assert!(compared.check_compared_with("etl", None, "promote").is_ok());
        let error = compared
            .check_compared_with("etl", Some("s-2"), "promote")
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "the candidate of policy `etl` was compared with sha256:s, which no longer serves (sha256:s-2 does): wait for its calls beside the serving version (`policyhost policy diff etl`) or promote with --force"
        );
        let mut uncompared = candidate(true, None, 0, 0);
        uncompared.summary = Some(Summary::new("d".into()));
        assert!(
            uncompared
                .check_compared_with("etl", Some("s-2"), "promote")
                .is_ok()
        );
    }
}
