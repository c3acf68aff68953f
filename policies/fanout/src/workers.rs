//! Worker naming and the per-index state read back from the children.
//!
//! A worker's name encodes its index and retry: `<job>-worker-<i>` for the
//! first Pod of index `i`, `<job>-worker-<i>-r<k>` for its `k`-th replacement.
//! Failed Pods stay in the desired set as the record of the failures, so the
//! retry count is always derived from the children the host hands over: the
//! policy stays a pure function and a replayed call makes the same decision.

use policyhost_sdk::build::push_decimal;
use policyhost_sdk::status::ChildCounts;
use policyhost_sdk::{Child, ChildPhase};

/// The name of worker `index`, replacement `retry` (0 for the first Pod).
pub(crate) fn name(job: &str, index: u32, retry: u32) -> String {
    // Written piece by piece: `format!` costs more than the name itself.
    let mut name = String::with_capacity(job.len() + 30);
    name.push_str(job);
    name.push_str("-worker-");
    push_decimal(&mut name, u64::from(index));
    if retry != 0 {
        name.push_str("-r");
        push_decimal(&mut name, u64::from(retry));
    }
    name
}

/// Reads `(index, retry)` back from a name made by [`name`]; `None` for any
/// other name (non-canonical numbers such as `01` included).
pub(crate) fn parse(job: &str, name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix(job)?.strip_prefix("-worker-")?;
    // Digits never contain '-', so the first one starts the retry suffix.
    let (index, retry) = match rest.bytes().position(|b| b == b'-') {
        Some(dash) => (&rest[..dash], Some(rest[dash + 1..].strip_prefix('r')?)),
        None => (rest, None),
    };
    let index = canonical(index)?;
    match retry {
        None => Some((index, 0)),
        Some(retry) => canonical(retry).filter(|&r| r > 0).map(|r| (index, r)),
    }
}

/// A number written the way [`name`] writes it: digits only, no leading zero.
fn canonical(digits: &str) -> Option<u32> {
    let plain = digits.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = digits.len() > 1 && digits.starts_with('0');
    if plain && !leading_zero {
        digits.parse().ok()
    } else {
        None
    }
}

/// What the children say about one worker index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Retry numbers of its failed Pods, ascending.
    pub(crate) failed: Vec<u32>,
    /// Retry numbers of its succeeded Pods, ascending.
    pub(crate) succeeded: Vec<u32>,
    /// The phase and readiness of its current Pod (see [`Slot::current_retry`]),
    /// if that Pod exists and has not finished.
    pub(crate) current: Option<(ChildPhase, bool)>,
}

impl Slot {
    /// The retry number the index's current Pod has: one past its last failure.
    pub(crate) fn current_retry(&self) -> u32 {
        self.failed.last().map_or(0, |last| last + 1)
    }

    pub(crate) fn is_done(&self) -> bool {
        !self.succeeded.is_empty()
    }
}

/// Groups the job's worker Pods by index; other children and indexes at or
/// beyond `replicas` are left out (and so pruned). Two passes: finished Pods
/// first (they decide each index's current retry), then the current Pods.
/// Unfinished Pods of an older retry are left out too. Also counts the
/// worker Pods (indexes in range) by phase.
pub(crate) fn slots(job: &str, replicas: u32, children: &[Child]) -> (Vec<Slot>, ChildCounts) {
    let mut slots = vec![Slot::default(); replicas as usize];
    let mut counts = ChildCounts::default();
    let workers = || {
        children.iter().filter(|c| c.is_pod()).filter_map(|child| {
            let (index, retry) = parse(job, &child.name)?;
            (index < replicas).then_some((index as usize, retry, child))
        })
    };
    for (index, retry, child) in workers() {
        counts.add(child.phase, child.ready);
        match child.phase {
            ChildPhase::Failed => slots[index].failed.push(retry),
            ChildPhase::Succeeded => slots[index].succeeded.push(retry),
            ChildPhase::Pending | ChildPhase::Running | ChildPhase::Unknown => {}
        }
    }
    for slot in &mut slots {
        slot.failed.sort_unstable();
        slot.succeeded.sort_unstable();
    }
    for (index, retry, child) in workers() {
        let slot = &mut slots[index];
        if !child.phase.is_finished() && retry == slot.current_retry() {
            slot.current = Some((child.phase, child.ready));
        }
    }
    (slots, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (index, retry) in [(0, 0), (7, 0), (3, 1), (999, 12)] {
            assert_eq!(
                parse("job", &name("job", index, retry)),
                Some((index, retry))
            );
        }
    }

    #[test]
    fn foreign_and_non_canonical_names_do_not_parse() {
        for other in [
            "job",
            "job-worker-",
            "job-worker-x",
            "job-worker-01",
            "job-worker-1-r0",
            "job-worker-1-r",
            "other-worker-1",
            "job-worker-1-r02",
            "job-worker--1",
        ] {
            assert_eq!(parse("job", other), None, "{other}");
        }
    }

    #[test]
    fn the_current_retry_follows_the_last_failure() {
        let slot = Slot {
            failed: vec![0, 1],
            ..Slot::default()
        };
        assert_eq!(slot.current_retry(), 2);
        assert_eq!(Slot::default().current_retry(), 0);
    }
}
