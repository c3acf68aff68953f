//! Counting children, and helpers for conditions and phases.
//!
//! ```
//! use policyhost_sdk::status::{ChildCounts, phase_change};
//! use policyhost_sdk::testing::ChildFixture;
//! use policyhost_sdk::{ChildPhase, Phase};
//!
//! let children = [
//!     ChildFixture::pod("a").phase(ChildPhase::Running).to_child(),
//!     ChildFixture::pod("b").phase(ChildPhase::Succeeded).to_child(),
//! ];
//! let counts = ChildCounts::of(children.iter().filter(|c| c.is_pod()));
//! assert_eq!(counts.phase(2, 0), Phase::Running);
//! let event = phase_change(Some(Phase::Pending), Phase::Running).unwrap();
//! assert_eq!(event.reason, "Running");
//! assert!(phase_change(Some(Phase::Running), Phase::Running).is_none());
//! ```

use serde::Serialize;

use crate::{Child, ChildPhase, Event, Phase};

/// How many children are in each phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildCounts {
    /// Children in [`ChildPhase::Pending`].
    pub pending: u32,
    /// Children in [`ChildPhase::Running`].
    pub running: u32,
    /// Children in [`ChildPhase::Succeeded`].
    pub succeeded: u32,
    /// Children in [`ChildPhase::Failed`].
    pub failed: u32,
    /// Children in [`ChildPhase::Unknown`].
    pub unknown: u32,
    /// Children whose `ready` flag is set.
    pub ready: u32,
}

impl ChildCounts {
    /// Counts the given children.
    #[must_use]
    pub fn of<'a>(children: impl IntoIterator<Item = &'a Child>) -> Self {
        let mut counts = Self::default();
        for child in children {
            counts.add(child.phase, child.ready);
        }
        counts
    }

    /// Counts one more child.
    pub fn add(&mut self, phase: ChildPhase, ready: bool) {
        let slot = match phase {
            ChildPhase::Pending => &mut self.pending,
            ChildPhase::Running => &mut self.running,
            ChildPhase::Succeeded => &mut self.succeeded,
            ChildPhase::Failed => &mut self.failed,
            ChildPhase::Unknown => &mut self.unknown,
        };
        *slot += 1;
        self.ready += u32::from(ready);
    }

    /// All children counted.
    #[must_use]
    pub fn total(&self) -> u32 {
        self.pending + self.running + self.succeeded + self.failed + self.unknown
    }

    /// Children that have not finished (pending or running).
    #[must_use]
    pub fn active(&self) -> u32 {
        self.pending + self.running
    }

    /// True when `desired` children succeeded (and at least that many exist).
    #[must_use]
    pub fn all_succeeded(&self, desired: u32) -> bool {
        self.succeeded >= desired
    }

    /// The usual phase of a DataJob that wants `desired` children to run to
    /// completion, tolerating `allowed_failures` failed ones: `Failed` past
    /// that, `Succeeded` once `desired` succeeded, `Running` once every
    /// unfinished one runs, else `Pending`.
    #[must_use]
    pub fn phase(&self, desired: u32, allowed_failures: u32) -> Phase {
        if self.failed > allowed_failures {
            Phase::Failed
        } else if self.all_succeeded(desired) {
            Phase::Succeeded
        } else if self.running + self.succeeded >= desired {
            Phase::Running
        } else {
            Phase::Pending
        }
    }
}

/// A `Normal` event (a `Warning` one for [`Phase::Failed`]) if the phase
/// changed; `previous` is the phase an earlier call reported (e.g. kept in
/// `status.outputs`), `None` on the first call.
#[must_use]
pub fn phase_change(previous: Option<Phase>, now: Phase) -> Option<Event> {
    if previous == Some(now) {
        return None;
    }
    let message = match previous {
        Some(previous) => format!("phase changed from {previous} to {now}"),
        None => format!("phase is {now}"),
    };
    Some(if now == Phase::Failed {
        Event::warning(now.as_str(), message)
    } else {
        Event::normal(now.as_str(), message)
    })
}

/// `n/m` progress text, e.g. `3/10 running`.
#[must_use]
pub fn progress(done: u32, of: u32, what: &str) -> String {
    format!("{done}/{of} {what}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyValue;

    fn child(phase: ChildPhase, ready: bool) -> Child {
        Child {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into(),
            phase,
            ready,
            deleting: false,
            labels: Vec::<KeyValue>::new(),
        }
    }

    #[test]
    fn counts_add_up_per_phase() {
        let children = [
            child(ChildPhase::Pending, false),
            child(ChildPhase::Running, true),
            child(ChildPhase::Running, false),
            child(ChildPhase::Succeeded, false),
            child(ChildPhase::Failed, false),
            child(ChildPhase::Unknown, false),
        ];
        let counts = ChildCounts::of(&children);
        assert_eq!(
            counts,
            ChildCounts {
                pending: 1,
                running: 2,
                succeeded: 1,
                failed: 1,
                unknown: 1,
                ready: 1
            }
        );
        assert_eq!((counts.total(), counts.active()), (6, 3));
        assert!(counts.all_succeeded(1));
        assert!(!counts.all_succeeded(2));
    }

    #[test]
    fn the_phase_follows_the_counts() {
        let counts = |running, succeeded, failed| ChildCounts {
            running,
            succeeded,
            failed,
            ..ChildCounts::default()
        };
        assert_eq!(counts(0, 0, 0).phase(2, 0), Phase::Pending);
        assert_eq!(counts(1, 0, 0).phase(2, 0), Phase::Pending);
        assert_eq!(counts(1, 1, 0).phase(2, 0), Phase::Running);
        assert_eq!(counts(0, 2, 0).phase(2, 0), Phase::Succeeded);
        assert_eq!(counts(1, 1, 1).phase(2, 1), Phase::Running);
        assert_eq!(counts(1, 1, 2).phase(2, 1), Phase::Failed);
    }

    #[test]
    fn phase_changes_make_events_and_failures_warn() {
        assert_eq!(
            phase_change(None, Phase::Pending),
            Some(Event::normal("Pending", "phase is Pending"))
        );
        assert_eq!(
            phase_change(Some(Phase::Running), Phase::Failed),
            Some(Event::warning(
                "Failed",
                "phase changed from Running to Failed"
            ))
        );
        assert_eq!(phase_change(Some(Phase::Succeeded), Phase::Succeeded), None);
    }

    #[test]
    fn progress_reads_as_a_fraction() {
        assert_eq!(progress(3, 10, "running"), "3/10 running");
    }
}
