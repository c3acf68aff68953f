//! Writes each candidate's [`Summary`] on its ConfigMap, at most once per
//! [`EVERY`] while it changes, and records one Event on the ConfigMap when
//! the candidate first differs. Only the leader writes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::broadcast::error::RecvError;
use tracing::warn;

use super::summary::Summary;
use super::{Shadow, Track};
use crate::apply::events;
use crate::chain::Chain;
use crate::leader::Leadership;
use crate::policies::Role;
use crate::vocabulary::SHADOW_ANNOTATION;

/// The shortest time between two writes of one candidate's summary: the
/// summary costs the API server at most one write per candidate per this
/// long, whatever the number of calls.
pub const EVERY: Duration = Duration::from_secs(5);

/// Where and as whom the summaries are written.
pub struct Reporter {
    /// The API client.
    pub client: Client,
    /// The operator instance, reported in the Events it records.
    pub instance: String,
    /// Only the leader writes.
    pub leadership: Leadership,
}

impl Reporter {
    /// Writes the summaries that changed, each time a summary or a
    /// candidate changed or this replica became leader, at most once per
    /// [`EVERY`] (a follower keeps its summaries for when it leads); never
    /// returns.
    pub async fn run(self, shadow: Arc<Shadow>) {
        let mut leading = self.leadership.subscribe();
        let mut versions = shadow.registry.subscribe();
        loop {
            tokio::select! {
                () = shadow.changed.notified() => {}
                change = versions.recv() => match change {
                    Ok(change) if change.role != Role::Candidate => continue,
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
                changed = leading.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            tokio::time::sleep(EVERY).await;
            if !self.leadership.permits_writes() {
                continue;
            }
            for (policy, candidate, track) in shadow.candidates() {
                if let Some(source) = &candidate.source {
                    self.write(&policy, source, &track).await;
                }
            }
        }
    }

    /// Writes one candidate's summary if it changed, and announces its
    /// first difference.
    async fn write(&self, policy: &str, configmap: &ObjectReference, track: &Track) {
        let (summary, announce) = {
            let mut state = track.state();
            if !state.dirty {
                return;
            }
            state.dirty = false;
            let announce = state.summary.differed() && !state.announced;
            state.announced |= announce;
            (state.summary.clone(), announce)
        };
        let reference = configmap.clone();
        let namespace = reference.namespace.clone().unwrap_or_default();
        let name = reference.name.clone().unwrap_or_default();
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let patch = serde_json::json!({
            "metadata": { "annotations": { SHADOW_ANNOTATION: text(&summary) } }
        });
        if let Err(error) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            warn!(%policy, configmap = %name, error = %Chain(&error), "cannot write the candidate's summary");
            track.state().dirty = true;
            return;
        }
        if announce {
            let note = first_difference(policy, &summary);
            events::record_on_policy(
                &self.client,
                &self.instance,
                reference,
                true,
                "CandidateDiffers",
                &note,
            )
            .await;
        }
    }
}

fn text(summary: &Summary) -> String {
    serde_json::to_string(summary).unwrap_or_default()
}

/// The Event's note: the first DataJob that differs, and how.
fn first_difference(policy: &str, summary: &Summary) -> String {
    let first = summary.jobs.first().map_or_else(String::new, |job| {
        let how = job
            .fault
            .clone()
            .or_else(|| job.differences.first().cloned())
            .unwrap_or_default();
        format!(": {} {} {how}", job.call, job.job)
    });
    format!(
        "the candidate of policy `{policy}` answers otherwise than the serving version{first}; `policyhost policy diff {policy}` shows every difference"
    )
}

#[cfg(test)]
mod tests {
    use super::super::diff::{Difference, Verdict};
    use super::*;

    #[test]
    fn the_event_names_the_first_differing_job_and_the_command_to_see_the_rest() {
        let mut summary = Summary::new("abc".into());
        let verdict = Verdict::Differs(vec![Difference {
            pointer: "/children/Pod:w-9".into(),
            expected: None,
            actual: Some(serde_json::json!({})),
        }]);
        summary.record("team-a/j1", "reconcile", &verdict);
        assert_eq!(
            first_difference("etl", &summary),
            "the candidate of policy `etl` answers otherwise than the serving version: reconcile team-a/j1 /children/Pod:w-9: not expected, got {}; `policyhost policy diff etl` shows every difference"
        );
    }
}
