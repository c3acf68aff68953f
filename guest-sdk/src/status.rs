//! Counting children, and helpers for conditions and phases.
//!
//! ```
//! use policyhost_sdk::status::ChildCounts;
//! use policyhost_sdk::{Child, ChildPhase};
//!
//! # let children: Vec<Child> = Vec::new();
//! let counts = ChildCounts::of(children.iter().filter(|c| c.is_pod()));
//! assert_eq!(counts.total(), 0);
//! assert!(counts.all_succeeded(0));
//! ```

use serde::Serialize;

use crate::{Child, ChildPhase};

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
    fn progress_reads_as_a_fraction() {
        assert_eq!(progress(3, 10, "running"), "3/10 running");
    }
}
