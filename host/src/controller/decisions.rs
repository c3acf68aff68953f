//! The record of each DataJob's last decisions: for every serving call,
//! the digests of what it was given and what it answered, the version, what
//! the host did with the answer, and what the call cost.
//!
//! The leader keeps the last `--decision-history` of each DataJob here and
//! writes them with the DataJob's status (`status.decisions`): whoever may
//! read the DataJob reads them (`policyhost explain`), nobody else, and a
//! new leader carries on from them. A pass that changes children leaves the
//! status to the next pass (`settle`); its decision waits here until then.
//!
//! A call that decides what the newest decision says again (the same
//! version and answer, and nothing written) is not added, even when its
//! input differs (an annotation the policy ignores): a DataJob polled every
//! minute or annotated by a tool keeps its earlier decisions, and its
//! status is not written for a decision that changed nothing. Each decision is bounded: [`MAX_LINES`] lines of
//! [`MAX_LINE`] bytes per list, so at most
//! [`MAX_HISTORY`] × about 6 KiB per DataJob, about 450 bytes of JSON typically.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::cache::{Cached as _, ObjectKey};
use crate::crd::{DataJob, DataJobStatus, Decision};
use crate::outbound::Recorded;
use crate::runtime::output::status::truncate;
use crate::runtime::{CallReport, Digest, Input, Outcome};
use crate::shadow::diff::answer_digest;
use crate::shadow::record::input_digest;

/// The decisions kept per DataJob unless `--decision-history` says otherwise.
pub const DEFAULT_DECISIONS: usize = 5;
/// The most decisions kept per DataJob, whatever `--decision-history` says.
pub const MAX_HISTORY: usize = 20;
/// The most lines of each list of a decision (writes, Events, requests).
pub const MAX_LINES: usize = 8;
/// The longest line kept, in bytes.
pub const MAX_LINE: usize = 240;

/// The last decisions of each DataJob this replica acted on.
#[derive(Debug)]
pub struct Decisions {
    keep: usize,
    rings: Mutex<HashMap<ObjectKey, VecDeque<Decision>>>,
}

impl Decisions {
    /// Keeps the last `keep` decisions per DataJob (at most
    /// [`MAX_HISTORY`]); 0 keeps none and writes none.
    #[must_use]
    pub fn new(keep: usize) -> Self {
        Self {
            keep: keep.min(MAX_HISTORY),
            rings: Mutex::default(),
        }
    }

    /// The start of a decision about a call of `version` on `input`; none
    /// when no decision is kept.
    #[must_use]
    pub fn start(&self, call: &'static str, version: Digest, input: &Input) -> Option<Called> {
        (self.keep > 0).then(|| Called {
            at: whole_second(Timestamp::now()),
            call,
            version: format!("sha256:{version}"),
            input: input_digest(input),
            answer: None,
            outbound: Vec::new(),
            report: CallReport::default(),
        })
    }

    /// Adds `decision` to `job`'s record, unless it repeats the newest one.
    pub fn record(&self, job: &DataJob, decision: Decision) {
        let mut rings = self.lock();
        let ring = rings.entry(job.key()).or_insert_with(|| {
            let earlier = job.status.as_ref().map(|s| s.decisions.as_slice());
            earlier.unwrap_or_default().iter().cloned().collect()
        });
        if ring.back().is_some_and(|newest| repeats(newest, &decision)) {
            return;
        }
        ring.push_back(decision);
        while ring.len() > self.keep {
            ring.pop_front();
        }
    }

    /// Puts `job`'s record into the status about to be written: the one
    /// kept here, else the one it has (cut to the bound).
    pub fn stamp(&self, job: &DataJob, status: &mut DataJobStatus) {
        match self.lock().get(&job.key()) {
            Some(ring) => status.decisions = ring.iter().cloned().collect(),
            None => {
                let over = status.decisions.len().saturating_sub(self.keep);
                status.decisions.drain(..over);
            }
        }
    }

    /// Drops the record of a DataJob that is gone.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// Plain map operations cannot leave it torn.
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, VecDeque<Decision>>> {
        self.rings.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// True when `decision` wrote nothing and says what `newest` says, but for
/// the input that led to it, the time and the cost.
fn repeats(newest: &Decision, decision: &Decision) -> bool {
    decision.writes.is_empty()
        && decision.outbound.is_empty()
        && Decision {
            at: newest.at.clone(),
            input: newest.input.clone(),
            fuel: newest.fuel,
            micros: newest.micros,
            ..decision.clone()
        } == *newest
}

/// A call on its way to a decision: what it was given and answered.
#[derive(Debug)]
pub struct Called {
    at: Timestamp,
    call: &'static str,
    version: String,
    input: String,
    answer: Option<String>,
    outbound: Vec<String>,
    report: CallReport,
}

impl Called {
    /// Takes in what the call answered and asked of the network.
    pub fn answered<T: serde::Serialize>(&mut self, outcome: &Outcome<T>) {
        self.answer = answer_digest(&outcome.result);
        self.outbound = outcome.requests.iter().map(Recorded::outline).collect();
        self.report = outcome.report;
    }

    /// The decision: the call, what it came to (`outcome`), the writes to
    /// children and the Events' reasons.
    #[must_use]
    pub fn decided(self, outcome: &str, writes: Vec<String>, events: Vec<String>) -> Decision {
        Decision {
            at: Time(self.at),
            call: self.call.to_owned(),
            version: self.version,
            input: self.input,
            answer: self.answer,
            outcome: outcome.to_owned(),
            writes: bounded(writes),
            events: bounded(events),
            outbound: bounded(self.outbound),
            fuel: self.report.fuel_consumed,
            micros: micros(self.report.duration),
        }
    }
}

/// `now` as the API server keeps a time (whole seconds), so that the
/// record kept here equals the one the cache reads back.
fn whole_second(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// At most [`MAX_LINES`] lines of at most [`MAX_LINE`] bytes; the last
/// says how many more there were.
fn bounded(mut lines: Vec<String>) -> Vec<String> {
    if lines.len() > MAX_LINES {
        let more = lines.len() - (MAX_LINES - 1);
        lines.truncate(MAX_LINES - 1);
        lines.push(format!("… and {more} more"));
    }
    for line in &mut lines {
        truncate(line, MAX_LINE);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(decisions: Vec<Decision>) -> DataJob {
        let mut job = DataJob::of_policy("team", "a", "p");
        job.status = Some(DataJobStatus {
            decisions,
            ..DataJobStatus::default()
        });
        job
    }

    fn decision(input: &str, writes: &[&str]) -> Decision {
        Decision {
            at: Time(Timestamp::now()),
            call: "reconcile".into(),
            version: "sha256:v".into(),
            input: input.into(),
            answer: Some("sha256:a".into()),
            outcome: "Reconciled".into(),
            writes: writes.iter().map(|w| (*w).to_owned()).collect(),
            events: Vec::new(),
            outbound: Vec::new(),
            fuel: 10,
            micros: 5,
        }
    }

    #[test]
    fn the_record_keeps_the_last_n_carries_on_from_the_status_and_folds_repeats() {
        let decisions = Decisions::new(3);
        let earlier = job(vec![decision("sha256:0", &["created Pod a"])]);
        decisions.record(&earlier, decision("sha256:1", &[]));
        let mut status = DataJobStatus::default();
        decisions.stamp(&earlier, &mut status);
        let inputs = |status: &DataJobStatus| -> Vec<String> {
            status.decisions.iter().map(|d| d.input.clone()).collect()
        };
        assert_eq!(
            inputs(&status),
            ["sha256:0", "sha256:1"],
            "a new leader carries on"
        );

        let mut again = decision("sha256:annotated", &[]);
        again.fuel = 99;
        decisions.record(&earlier, again);
        decisions.stamp(&earlier, &mut status);
        assert_eq!(
            status.decisions.len(),
            2,
            "the same decision again is not added"
        );
        assert_eq!(
            status.decisions[1].fuel, 10,
            "the first of the repeats stays"
        );
        assert_eq!(status.decisions[1].input, "sha256:1");

        decisions.record(&earlier, decision("sha256:1", &["applied Pod a"]));
        let mut answered = decision("sha256:2", &[]);
        answered.answer = Some("sha256:b".into());
        decisions.record(&earlier, answered);
        decisions.stamp(&earlier, &mut status);
        assert_eq!(
            inputs(&status),
            ["sha256:1", "sha256:1", "sha256:2"],
            "the oldest goes"
        );

        decisions.forget(&earlier.key());
        let mut status = earlier.status.clone().unwrap();
        decisions.stamp(&earlier, &mut status);
        assert_eq!(
            inputs(&status),
            ["sha256:0"],
            "without a record, the status keeps its own"
        );
    }

    fn input(job: &DataJob) -> Input {
        Input {
            job: crate::projection::data_job(job),
            children: Vec::new(),
            ctx: crate::runtime::Context {
                now_unix_ms: 0,
                attempt: 1,
                policy_digest: String::new(),
            },
        }
    }

    #[test]
    fn a_decision_keeps_its_time_as_the_api_server_does_so_the_cache_reads_back_the_same() {
        let earlier = job(Vec::new());
        let called = Decisions::new(1).start("reconcile", Digest::of(b"v"), &input(&earlier));
        let decision = called
            .expect("kept")
            .decided("Reconciled", Vec::new(), Vec::new());
        let round_trip: Decision =
            serde_json::from_value(serde_json::to_value(&decision).unwrap()).unwrap();
        assert_eq!(round_trip, decision);
        assert!(decision.input.starts_with("sha256:") && decision.input.len() == 71);
    }

    #[test]
    fn none_is_kept_or_written_when_the_history_is_zero() {
        let decisions = Decisions::new(0);
        let earlier = job(vec![decision("sha256:0", &[])]);
        assert!(
            decisions
                .start("reconcile", Digest::of(b"v"), &input(&earlier))
                .is_none()
        );
        let mut status = earlier.status.clone().unwrap();
        decisions.stamp(&earlier, &mut status);
        assert!(
            status.decisions.is_empty(),
            "turned off, the record is dropped"
        );
    }

    #[test]
    fn each_list_is_bounded_and_says_how_much_it_left_out() {
        let called = Called {
            at: whole_second(Timestamp::now()),
            call: "reconcile",
            version: "sha256:v".into(),
            input: "sha256:i".into(),
            answer: None,
            outbound: Vec::new(),
            report: CallReport::default(),
        };
        let writes = (0..20).map(|i| format!("created Pod p-{i}")).collect();
        let events = vec!["x".repeat(1_000)];
        let decision = called.decided("Reconciled", writes, events);
        assert_eq!(decision.writes.len(), MAX_LINES);
        assert_eq!(decision.writes[MAX_LINES - 1], "… and 13 more");
        assert_eq!(decision.writes[0], "created Pod p-0");
        assert!(decision.events[0].len() <= MAX_LINE);
    }
}
