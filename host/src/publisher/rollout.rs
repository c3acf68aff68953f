//! The publisher's side of a rollout (`policy rollout NAME start|status|
//! pause|resume|abort`): the plan written into the policy's `rollout-<name>`
//! ConfigMap, which the platform team creates beside its others, and the
//! status the host annotates on it read back.
//!
//! Every write is a merge patch of that one ConfigMap: who may publish the
//! policy's candidate and patch its rollout may roll it out, and no one else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::candidate::{Error, Policy};
use crate::policies::configmap;
use crate::policies::report::Annotations;
use crate::policies::rollout::plan::keys;
use crate::policies::rollout::{Phase, Plan, Status};
use crate::vocabulary::{POLICY_LABEL, ROLE_LABEL, ROLLOUT_ROLE, ROLLOUT_STATUS_ANNOTATION};

/// A rollout as its ConfigMap shows it.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// The plan, or why its `data` does not read.
    pub plan: Result<Plan, String>,
    /// Where the host says it is.
    pub status: Option<Status>,
    /// What the host reported on reading the plan.
    pub annotations: Annotations,
}

/// What `policy rollout NAME pause|resume|abort` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Stay at the current step.
    Pause,
    /// Go on; after a rollback or an abort, from the first step again.
    Resume,
    /// Every DataJob back on the serving version.
    Abort,
}

impl Policy {
    /// Starts rolling out the candidate in service by `plan` (its digest is
    /// set to the candidate's), from its first step whatever ran before.
    ///
    /// # Errors
    ///
    /// What [`Policy::ready`] refuses (`force` skips the examination), or
    /// the API's refusal (no `rollout-<name>` ConfigMap: the platform team
    /// creates it).
    pub async fn start_rollout(
        &self,
        mut plan: Plan,
        force: bool,
    ) -> Result<(Plan, ConfigMap), Error> {
        let candidate = self.ready(force, "roll it out").await?;
        let loaded = candidate.annotations.loaded_digest.unwrap_or_default();
        plan.digest =
            crate::runtime::Digest::parse(&format!("sha256:{loaded}")).ok_or_else(|| {
                Error::NotLoaded {
                    policy: self.name().to_owned(),
                    why: "the host reports no digest for it".to_owned(),
                }
            })?;
        let mut data: Map<String, Value> = plan
            .to_data()
            .into_iter()
            .map(|(key, value)| (key, Value::String(value)))
            .collect();
        data.entry(keys::CONTROL).or_insert(Value::Null);
        let patch = json!({
            "metadata": {
                "labels": { POLICY_LABEL: self.name(), ROLE_LABEL: ROLLOUT_ROLE },
                "annotations": { ROLLOUT_STATUS_ANNOTATION: null },
            },
            "data": data,
        });
        let map = self.patch_rollout(&patch).await?;
        Ok((plan, map))
    }

    /// Pauses, resumes or aborts the rollout; a resume after a rollback or
    /// an abort starts it again from its first step.
    ///
    /// # Errors
    ///
    /// The API's refusal.
    pub async fn ask_rollout(&self, ask: Ask) -> Result<ConfigMap, Error> {
        let restart = ask == Ask::Resume
            && self
                .rollout()
                .await?
                .and_then(|rollout| rollout.status)
                .is_some_and(|status| matches!(status.phase, Phase::RolledBack | Phase::Aborted));
        let control = match ask {
            Ask::Pause => Value::from("pause"),
            Ask::Abort => Value::from("abort"),
            Ask::Resume => Value::Null,
        };
        let mut patch = json!({ "data": { keys::CONTROL: control } });
        if restart {
            patch["metadata"] = json!({ "annotations": { ROLLOUT_STATUS_ANNOTATION: null } });
        }
        self.patch_rollout(&patch).await
    }

    /// The policy's rollout, if its ConfigMap holds one.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] when it cannot be read.
    pub async fn rollout(&self) -> Result<Option<Rollout>, Error> {
        let name = configmap::rollout_name(self.name());
        let map = self
            .api()
            .get_opt(&name)
            .await
            .map_err(|source| self.api_error("read", &name, source))?;
        let Some(map) = map.filter(|map| {
            map.labels().get(POLICY_LABEL).map(String::as_str) == Some(self.name())
                && map.labels().get(ROLE_LABEL).map(String::as_str) == Some(ROLLOUT_ROLE)
        }) else {
            return Ok(None);
        };
        let data: BTreeMap<String, String> = map.data.clone().unwrap_or_default();
        Ok(Some(Rollout {
            plan: Plan::parse(&data).map_err(|error| error.to_string()),
            status: Status::read(
                map.annotations()
                    .get(ROLLOUT_STATUS_ANNOTATION)
                    .map(String::as_str),
            ),
            annotations: Annotations::read(map.annotations()),
        }))
    }

    async fn patch_rollout(&self, patch: &Value) -> Result<ConfigMap, Error> {
        let name = configmap::rollout_name(self.name());
        self.api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|source| self.api_error("patch", &name, source))
    }
}
