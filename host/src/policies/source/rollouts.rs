//! Rollouts driven ([`crate::policies::rollout`]): every replica reads each
//! rollout ConfigMap (its plan, and the status the leader annotated) and
//! routes DataJobs by it; the leader, once a second, moves each rollout
//! whose candidate is loaded through [`status::advance`], writes the new
//! status first (with the ConfigMap's resourceVersion, so two leaders never
//! both move it), then puts it in force and says so with an Event.
//!
//! A plan that does not read is refused (the rollout in force stays, as a
//! refused version leaves the serving one). The step's figures live on the
//! leader only: a new leader judges the step it takes over from its own
//! counts, its wait from the annotated start.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};

use super::Inner;
use super::record::{Content, Record};
use super::verdict::Refused;
use crate::apply::events;
use crate::chain::Chain;
use crate::policies::configmap;
use crate::policies::registry::Role;
use crate::policies::report::Annotations;
use crate::policies::rollout::status::{self, Status};
use crate::policies::rollout::{Canary, Plan, Tally};
use crate::vocabulary::{FIELD_MANAGER, ROLLOUT_STATUS_ANNOTATION};

/// How often the leader looks at each rollout.
pub(super) const TICK: Duration = Duration::from_secs(1);

/// A rollout in force on this replica.
#[derive(Debug, Clone)]
pub(super) struct Rollout {
    /// Its ConfigMap, as last seen or written.
    pub record: Arc<Record>,
    /// What it asks.
    pub plan: Plan,
    /// Where it is.
    pub status: Option<Status>,
}

impl Inner {
    /// Puts the rollout `content` plans in force for `record`'s policy, at
    /// the status its annotation holds; reports the plan when it changed.
    pub(super) async fn roll_out(&self, record: &Arc<Record>, content: &Content) {
        let plan = match Plan::parse(&content.data) {
            Ok(plan) => plan,
            Err(error) => {
                let refused = Refused::Load(configmap::Error::from(error).into());
                return self.rejected(record, refused).await;
            }
        };
        let status = Status::read(record.rollout.as_deref());
        self.route(&record.policy, &plan, status.as_ref());
        let reported = self
            .state()
            .reported
            .get(&record.key)
            .is_some_and(|reported| reported.annotations.observed == record.fingerprint);
        let note = format!(
            "rolls out sha256:{} in {} steps of {}: {}",
            plan.digest,
            plan.steps.len(),
            crate::quantity::format_duration(plan.step_wait),
            plan.steps
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.state().rollouts.insert(
            record.policy.clone(),
            Rollout {
                record: Arc::clone(record),
                plan,
                status,
            },
        );
        if !reported {
            let annotations = Annotations {
                observed: record.fingerprint.clone(),
                loaded_at: Some(format!("{:.0}", Timestamp::now())),
                provides: Some(record.policy.clone()),
                ..Annotations::default()
            };
            self.report(record, annotations, false, "RolloutAccepted", &note)
                .await;
        }
    }

    /// The rollout of `policy` is gone: its candidate serves no DataJob.
    pub(super) fn stop_rollout(&self, policy: &str) {
        self.state().rollouts.remove(policy);
        self.registry.roll_out(policy, None);
    }

    /// Routes `policy`'s DataJobs by `plan` at `status`. A plan of the
    /// candidate in rollout with no status yet (started again) keeps the
    /// DataJobs where they are until the leader writes its first step.
    fn route(&self, policy: &str, plan: &Plan, status: Option<&Status>) {
        if status.is_none()
            && self
                .registry
                .canary(policy)
                .is_some_and(|canary| canary.digest == plan.digest)
        {
            return;
        }
        let canary = status.map(|status| Canary {
            digest: plan.digest,
            reach: status.reach(plan),
            step: (status.step, status.step_started_ms),
            tally: Tally::default(),
        });
        self.registry
            .roll_out(policy, canary.filter(|canary| !canary.reach.is_empty()));
    }

    /// Moves each rollout one tick on, while this replica leads.
    pub(super) async fn drive_rollouts(&self) {
        if !self.config.leadership.permits_writes() {
            return;
        }
        let rollouts: Vec<Rollout> = self.state().rollouts.values().cloned().collect();
        for rollout in rollouts {
            self.advance(rollout).await;
        }
    }

    async fn advance(&self, rollout: Rollout) {
        let policy = rollout.record.policy.as_str();
        let loaded = self
            .registry
            .version(policy, Role::Candidate)
            .is_some_and(|candidate| candidate.policy.digest() == rollout.plan.digest);
        if !loaded {
            // Its candidate is not (yet) the one planned: nothing moves.
            return;
        }
        let figures = self
            .registry
            .canary(policy)
            .filter(|canary| {
                rollout.status.as_ref().map(|s| (s.step, s.step_started_ms)) == Some(canary.step)
            })
            .map(|canary| canary.tally.figures())
            .unwrap_or_default();
        let now_ms = u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0);
        let Some(next) = status::advance(&rollout.plan, rollout.status.as_ref(), figures, now_ms)
        else {
            return;
        };
        // The ConfigMap as the cache has it now (the host's own report may
        // have changed it since): a status there this replica has not
        // taken in yet is taken in first.
        let Some(record) = self
            .store
            .get(&rollout.record.key)
            .filter(|now| now.rollout == rollout.record.rollout && now.uid == rollout.record.uid)
        else {
            return;
        };
        let record = &record;
        let patch = json!({"metadata": {
            "resourceVersion": record.resource_version,
            "annotations": {ROLLOUT_STATUS_ANNOTATION: next.to_annotation()},
        }});
        let written = self
            .api(&record.key)
            .patch(
                record.key.name(),
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await;
        let map: ConfigMap = match written {
            Ok(map) => map,
            Err(error) => {
                // A newer ConfigMap (a new plan, another leader's step):
                // the watch brings it, and the next tick goes from there.
                warn!(%policy, error = %Chain(&error), "cannot write the rollout's status");
                return;
            }
        };
        self.route(policy, &rollout.plan, Some(&next));
        let reason = format!("Rollout{}", next.reason);
        info!(%policy, reason, note = %next.message, "rollout moved");
        self.metrics.rollout_moved(policy, &next.reason);
        let mut seen = Record::clone(record);
        seen.resource_version = map.metadata.resource_version.unwrap_or_default();
        seen.rollout = Some(next.to_annotation());
        let (warning, message) = (next.is_warning(), next.message.clone());
        if let Some(held) = self.state().rollouts.get_mut(policy)
            && held.record.key == record.key
        {
            held.record = Arc::new(seen);
            held.status = Some(next);
        }
        events::record_on_policy(
            &self.client,
            &self.config.instance,
            record.reference(),
            warning,
            &reason,
            &message,
        )
        .await;
    }
}
