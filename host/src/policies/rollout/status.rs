//! Where a rollout is: written by the leader as the annotation
//! [`ROLLOUT_STATUS_ANNOTATION`](crate::vocabulary::ROLLOUT_STATUS_ANNOTATION)
//! on the rollout ConfigMap, read back by every replica, so that a new
//! leader carries the rollout on from its step and every replica routes
//! DataJobs alike.
//!
//! ```text
//!             pause             resume
//! Progressing ─────▶ Paused ────────────▶ Progressing
//!   │ │  step's end, gates held: next step, or Complete after the last
//!   │ └─ a gate failed ─▶ RolledBack   (every DataJob back on the serving version)
//!   └─── abort ─────────▶ Aborted      (likewise; also from Paused and Complete)
//! ```
//!
//! RolledBack and Aborted are final for the candidate: `policy rollout
//! NAME resume` starts it again from its first step (it removes the status).

use serde::{Deserialize, Serialize};

use super::gates::{Figures, judge};
use super::plan::{Control, Plan, Reach};

/// Where a rollout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// At a step, its wait running.
    Progressing,
    /// At a step, its wait stopped by the publisher.
    Paused,
    /// Past its last step: the candidate serves every DataJob the plan
    /// reaches until it is promoted.
    Complete,
    /// A gate failed: no DataJob is served by the candidate.
    RolledBack,
    /// The publisher stopped it: no DataJob is served by the candidate.
    Aborted,
}

impl Phase {
    /// Whether the candidate serves the DataJobs its step reaches.
    #[must_use]
    pub fn serves(self) -> bool {
        matches!(self, Self::Progressing | Self::Paused | Self::Complete)
    }
}

/// A rollout's status, as the annotation holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The candidate's digest (hex): a status of another one is stale.
    pub digest: String,
    /// Where it is.
    pub phase: Phase,
    /// The step (0-based).
    pub step: usize,
    /// When the step started, in Unix ms (its wait's origin).
    pub step_started_ms: u64,
    /// While paused, how far into its wait the step was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_after_ms: Option<u64>,
    /// The last transition, one word (`StepStarted`, `RolledBack`, …): the
    /// Event's reason is `Rollout` and this.
    pub reason: String,
    /// The last transition, for people.
    pub message: String,
    /// When it happened, in Unix ms.
    pub at_ms: u64,
}

impl Status {
    /// Reads the annotation; anything else than a status is no status (the
    /// rollout starts over: the safe side).
    #[must_use]
    pub fn read(text: Option<&str>) -> Option<Self> {
        serde_json::from_str(text?).ok()
    }

    /// The annotation's value.
    #[must_use]
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The DataJobs the candidate serves under `plan` in this status: none
    /// unless it is the plan's candidate's and it serves.
    #[must_use]
    pub fn reach(&self, plan: &Plan) -> Reach {
        if self.digest == plan.digest.to_hex() && self.phase.serves() {
            plan.reach(self.step)
        } else {
            Reach::default()
        }
    }

    /// Whether it says the rollout went wrong (a warning Event).
    #[must_use]
    pub fn is_warning(&self) -> bool {
        self.phase == Phase::RolledBack
    }

    fn moved(&self, phase: Phase, reason: &str, message: String, now_ms: u64) -> Self {
        Self {
            phase,
            reason: reason.to_owned(),
            message,
            at_ms: now_ms,
            ..self.clone()
        }
    }
}

/// The status `plan`'s rollout moves to from `status` at `now_ms`, given
/// the step's `figures`; `None` when it stays.
#[must_use]
pub fn advance(
    plan: &Plan,
    status: Option<&Status>,
    figures: Figures,
    now_ms: u64,
) -> Option<Status> {
    let steps = plan.steps.len();
    let describe = |step: usize| {
        format!(
            "step {} of {steps}: the candidate serves {}",
            step + 1,
            plan.reach(step)
        )
    };
    let Some(status) = status.filter(|status| status.digest == plan.digest.to_hex()) else {
        return Some(Status {
            digest: plan.digest.to_hex(),
            phase: Phase::Progressing,
            step: 0,
            step_started_ms: now_ms,
            paused_after_ms: None,
            reason: "StepStarted".into(),
            message: describe(0),
            at_ms: now_ms,
        });
    };
    match (status.phase, plan.control) {
        (Phase::RolledBack | Phase::Aborted, _) | (Phase::Paused, Control::Pause) => None,
        (_, Control::Abort) => Some(status.moved(
            Phase::Aborted,
            "Aborted",
            format!(
                "aborted at step {} of {steps}: every DataJob is back on the serving version",
                status.step + 1
            ),
            now_ms,
        )),
        (Phase::Complete, _) => None,
        (Phase::Progressing, Control::Pause) => Some(Status {
            paused_after_ms: Some(now_ms.saturating_sub(status.step_started_ms)),
            ..status.moved(
                Phase::Paused,
                "Paused",
                format!("paused at {}", describe(status.step)),
                now_ms,
            )
        }),
        (Phase::Paused, Control::Run) => Some(Status {
            step_started_ms: now_ms.saturating_sub(status.paused_after_ms.unwrap_or(0)),
            paused_after_ms: None,
            ..status.moved(
                Phase::Progressing,
                "Resumed",
                format!("resumed at {}", describe(status.step)),
                now_ms,
            )
        }),
        (Phase::Progressing, Control::Run) => {
            let wait = u64::try_from(plan.step_wait.as_millis()).unwrap_or(u64::MAX);
            let over = now_ms >= status.step_started_ms.saturating_add(wait);
            if let Some(breach) = judge(figures, plan.tolerance, plan.min_calls, over) {
                return Some(status.moved(
                    Phase::RolledBack,
                    "RolledBack",
                    format!(
                        "rolled back at step {} of {steps}: {breach}; every DataJob is back on the serving version",
                        status.step + 1
                    ),
                    now_ms,
                ));
            }
            if !over {
                return None;
            }
            let next = status.step + 1;
            if next >= steps {
                return Some(status.moved(
                    Phase::Complete,
                    "Complete",
                    format!(
                        "complete: the candidate serves {} and held every gate ({figures}); `policyhost policy promote` makes it the serving version",
                        plan.reach(status.step)
                    ),
                    now_ms,
                ));
            }
            Some(Status {
                step: next,
                step_started_ms: now_ms,
                ..status.moved(
                    Phase::Progressing,
                    "StepStarted",
                    format!(
                        "{} (step {} held every gate: {figures})",
                        describe(next),
                        status.step + 1
                    ),
                    now_ms,
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policies::rollout::gates::Counts;

    fn plan(control: Option<&str>) -> Plan {
        let mut data = BTreeMap::from([
            ("digest".to_owned(), format!("sha256:{}", "ab".repeat(32))),
            ("steps".to_owned(), "team-a; 20%; 100%".to_owned()),
            ("stepWait".to_owned(), "10s".to_owned()),
        ]);
        if let Some(control) = control {
            data.insert("control".to_owned(), control.to_owned());
        }
        Plan::parse(&data).expect("a plan")
    }

    fn healthy() -> Figures {
        Figures {
            candidate: Counts {
                calls: 20,
                ..Counts::default()
            },
            serving: Counts {
                calls: 80,
                ..Counts::default()
            },
        }
    }

    #[test]
    fn a_rollout_steps_through_its_plan_and_completes_when_every_gate_holds() {
        let plan = plan(None);
        let started = advance(&plan, None, Figures::default(), 1_000).expect("started");
        assert_eq!((started.phase, started.step), (Phase::Progressing, 0));
        assert_eq!(
            started.message,
            "step 1 of 3: the candidate serves namespaces team-a"
        );
        assert_eq!(started.reach(&plan).namespaces.len(), 1);
        assert_eq!(
            advance(&plan, Some(&started), healthy(), 10_999),
            None,
            "the wait runs"
        );
        let second = advance(&plan, Some(&started), healthy(), 11_000).expect("next step");
        assert_eq!((second.step, second.step_started_ms), (1, 11_000));
        assert!(second.message.starts_with("step 2 of 3: the candidate serves namespaces team-a and 20% of DataJobs (step 1 held every gate"), "{}", second.message);
        let third = advance(&plan, Some(&second), healthy(), 21_000).expect("last step");
        let done = advance(&plan, Some(&third), healthy(), 31_000).expect("complete");
        assert_eq!(done.phase, Phase::Complete);
        assert_eq!(done.reach(&plan).share.0, 10_000);
        assert_eq!(advance(&plan, Some(&done), healthy(), 99_000), None);
        // A status of another candidate is stale: the rollout starts over.
        let stale = Status {
            digest: "cd".repeat(32),
            ..done
        };
        assert_eq!(
            advance(&plan, Some(&stale), healthy(), 5).map(|s| s.step),
            Some(0)
        );
        assert!(stale.reach(&plan).is_empty());
        assert_eq!(Status::read(Some(&stale.to_annotation())), Some(stale));
        assert_eq!(Status::read(Some("{not json")), None);
    }

    #[test]
    fn a_failed_gate_rolls_back_within_the_step_and_stays_rolled_back() {
        let plan = plan(None);
        let started = advance(&plan, None, Figures::default(), 0).expect("started");
        let faulty = Figures {
            candidate: Counts {
                calls: 10,
                faults: 10,
                ..Counts::default()
            },
            ..healthy()
        };
        let back = advance(&plan, Some(&started), faulty, 2_000).expect("rolled back early");
        assert_eq!(back.phase, Phase::RolledBack);
        assert!(back.is_warning());
        assert!(
            back.message.contains(
                "gate faults: the candidate 10 of 10 calls (100%), the serving version 0 of 80 (0%)"
            ),
            "{}",
            back.message
        );
        assert!(
            back.reach(&plan).is_empty(),
            "no DataJob keeps the candidate"
        );
        assert_eq!(
            advance(&plan, Some(&back), healthy(), 60_000),
            None,
            "final"
        );
    }

    #[test]
    fn pause_keeps_the_reach_and_the_wait_and_abort_ends_it() {
        let running = advance(&plan(None), None, Figures::default(), 0).expect("started");
        let paused =
            advance(&plan(Some("pause")), Some(&running), healthy(), 4_000).expect("paused");
        assert_eq!(
            (paused.phase, paused.paused_after_ms),
            (Phase::Paused, Some(4_000))
        );
        assert!(!paused.reach(&plan(None)).is_empty());
        assert_eq!(
            advance(&plan(Some("pause")), Some(&paused), healthy(), 90_000),
            None
        );
        let resumed = advance(&plan(None), Some(&paused), healthy(), 100_000).expect("resumed");
        assert_eq!(resumed.step_started_ms, 96_000, "6 s of the wait left");
        let aborted =
            advance(&plan(Some("abort")), Some(&resumed), healthy(), 100_001).expect("aborted");
        assert_eq!(aborted.phase, Phase::Aborted);
        assert!(aborted.reach(&plan(None)).is_empty());
        assert_eq!(
            advance(&plan(None), Some(&aborted), healthy(), 200_000),
            None,
            "final"
        );
    }
}
