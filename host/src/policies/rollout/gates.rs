//! The health gates of a rollout step: what the candidate's calls came to
//! beside the serving version's over the same period, and whether the
//! candidate fell behind.
//!
//! Each reconcile pass of a policy in rollout counts one [`Signal`] for the
//! version that answered. A gate compares a rate (per call) of the
//! candidate with the serving version's: the candidate fails it when its
//! rate is above the serving version's by more than the plan's tolerance.
//! Gates are judged once the candidate made `minCalls` calls in the step,
//! and at the step's end whatever it made; a step in which the candidate
//! made no call passes (it reached no DataJob that changed).

use std::sync::atomic::{AtomicU64, Ordering};

use super::plan::{BUCKETS, Points};

/// What one reconcile pass came to, for the gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// The answer was applied.
    Answered,
    /// The guest faulted or reported an error.
    Fault,
    /// The API server refused what the answer asked (`ApplyFailed`,
    /// `ImmutableChange`).
    Refused,
    /// The answer turned the DataJob `Failed`.
    Failed,
}

/// A gate: one rate the candidate may not be worse on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Guest faults.
    Faults,
    /// Writes the API server refused.
    Refusals,
    /// DataJobs turned `Failed`.
    Failed,
}

impl Gate {
    /// Every gate, in the order they are judged.
    pub const ALL: [Self; 3] = [Self::Faults, Self::Refusals, Self::Failed];

    /// Its name in Events, the status and metrics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Faults => "faults",
            Self::Refusals => "refusals",
            Self::Failed => "failed",
        }
    }

    fn of(self, counts: &Counts) -> u64 {
        match self {
            Self::Faults => counts.faults,
            Self::Refusals => counts.refused,
            Self::Failed => counts.failed,
        }
    }
}

/// One version's passes in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Passes that called it.
    pub calls: u64,
    /// Of which faulted.
    pub faults: u64,
    /// Of which the API server refused.
    pub refused: u64,
    /// Of which turned their DataJob `Failed`.
    pub failed: u64,
}

impl Counts {
    /// `n` of these calls, in points (hundredths of a percent).
    fn rate(&self, n: u64) -> u64 {
        (n * u64::from(BUCKETS))
            .checked_div(self.calls)
            .unwrap_or(0)
    }
}

/// Both versions' passes in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    /// The candidate's.
    pub candidate: Counts,
    /// The serving version's.
    pub serving: Counts,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (c, s) = (&self.candidate, &self.serving);
        write!(
            f,
            "candidate {} calls ({} faults, {} refused, {} failed), serving version {} calls ({} faults, {} refused, {} failed)",
            c.calls, c.faults, c.refused, c.failed, s.calls, s.faults, s.refused, s.failed
        )
    }
}

/// A gate the candidate failed, with the figures that failed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    /// The gate.
    pub gate: Gate,
    /// The step's figures.
    pub figures: Figures,
    /// The plan's tolerance.
    pub tolerance: Points,
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (c, s) = (&self.figures.candidate, &self.figures.serving);
        let (cn, sn) = (self.gate.of(c), self.gate.of(s));
        let points = |rate: u64| Points(u32::try_from(rate).unwrap_or(u32::MAX));
        write!(
            f,
            "gate {}: the candidate {cn} of {} calls ({}), the serving version {sn} of {} ({}); tolerance {}",
            self.gate.as_str(),
            c.calls,
            points(c.rate(cn)),
            s.calls,
            points(s.rate(sn)),
            self.tolerance
        )
    }
}

/// Judges the gates on `figures`: the first the candidate failed, if any.
/// Before the step's end (`over`), only once the candidate made
/// `min_calls` calls.
#[must_use]
pub fn judge(figures: Figures, tolerance: Points, min_calls: u32, over: bool) -> Option<Breach> {
    let (candidate, serving) = (&figures.candidate, &figures.serving);
    if candidate.calls == 0 || (!over && candidate.calls < u64::from(min_calls)) {
        return None;
    }
    Gate::ALL
        .into_iter()
        .find(|gate| {
            candidate.rate(gate.of(candidate))
                > serving.rate(gate.of(serving)) + u64::from(tolerance.0)
        })
        .map(|gate| Breach {
            gate,
            figures,
            tolerance,
        })
}

/// One version's passes in a step, counted as they end.
#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    faults: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

impl Counters {
    fn count(&self, signal: Signal) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let of = match signal {
            Signal::Answered => return,
            Signal::Fault => &self.faults,
            Signal::Refused => &self.refused,
            Signal::Failed => &self.failed,
        };
        of.fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> Counts {
        Counts {
            calls: self.calls.load(Ordering::Relaxed),
            faults: self.faults.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// The passes of a step of a rollout, both versions, counted lock-free on
/// the serving path.
#[derive(Debug, Default)]
pub struct Tally {
    candidate: Counters,
    serving: Counters,
}

impl Tally {
    /// Counts one pass of the candidate (`true`) or the serving version.
    pub fn count(&self, candidate: bool, signal: Signal) {
        if candidate {
            self.candidate.count(signal);
        } else {
            self.serving.count(signal);
        }
    }

    /// What both versions' passes came to so far.
    #[must_use]
    pub fn figures(&self) -> Figures {
        Figures {
            candidate: self.candidate.read(),
            serving: self.serving.read(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(calls: u64, faults: u64) -> Counts {
        Counts {
            calls,
            faults,
            ..Counts::default()
        }
    }

    #[test]
    fn a_candidate_worse_than_the_serving_version_by_more_than_the_tolerance_fails() {
        let tolerance = Points(500);
        let figures = |candidate, serving| Figures { candidate, serving };
        // 3 of 20 (15 %) against 2 of 20 (10 %): within 5 points.
        assert_eq!(
            judge(figures(counts(20, 3), counts(20, 2)), tolerance, 10, false),
            None
        );
        // 4 of 20 (20 %) against 10 %: over.
        let breach =
            judge(figures(counts(20, 4), counts(20, 2)), tolerance, 10, false).expect("a breach");
        assert_eq!(breach.gate, Gate::Faults);
        assert_eq!(
            breach.to_string(),
            "gate faults: the candidate 4 of 20 calls (20%), the serving version 2 of 20 (10%); tolerance 5%"
        );
        // Too few calls to judge early; judged at the step's end.
        let few = figures(counts(3, 3), counts(50, 0));
        assert_eq!(judge(few, tolerance, 10, false), None);
        assert!(judge(few, tolerance, 10, true).is_some());
        // No call of the candidate: nothing to judge.
        assert_eq!(
            judge(figures(counts(0, 0), counts(9, 9)), Points(0), 1, true),
            None
        );
        // Refusals and failures are gates too.
        let refused = Figures {
            candidate: Counts {
                calls: 10,
                refused: 10,
                ..Counts::default()
            },
            serving: Counts::default(),
        };
        assert_eq!(
            judge(refused, tolerance, 10, false).map(|b| b.gate),
            Some(Gate::Refusals)
        );
    }

    #[test]
    fn a_tally_counts_each_version_apart() {
        let tally = Tally::default();
        tally.count(true, Signal::Fault);
        tally.count(true, Signal::Answered);
        tally.count(false, Signal::Failed);
        tally.count(false, Signal::Refused);
        let figures = tally.figures();
        assert_eq!(
            figures.candidate,
            Counts {
                calls: 2,
                faults: 1,
                ..Counts::default()
            }
        );
        assert_eq!(
            figures.serving,
            Counts {
                calls: 2,
                refused: 1,
                failed: 1,
                ..Counts::default()
            }
        );
    }
}
