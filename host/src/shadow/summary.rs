//! What a candidate's shadow calls came to, bounded: counts by result, and
//! the DataJobs whose latest call differed, each with its first
//! differences. The host writes it on the candidate's ConfigMap
//! ([`SHADOW_ANNOTATION`]); `policy diff` and `policy promote` read it there.
//!
//! Where a candidate's children differ from the serving version's, the API
//! server's dry run of them says whether the cluster would take them: each
//! refusal is kept beside the DataJob's differences and counted
//! (`refused`), and `policy promote` asks that `policy diff` showed them.
//!
//! A summary is the evidence of one pair: the candidate's digest and the
//! serving version's it was compared with. A new candidate starts a new
//! summary, and so does the first call of a new serving version
//! ([`Summary::against`]): what one pair showed says nothing of another.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use serde::{Deserialize, Serialize};

use super::diff::Verdict;
use crate::apply::dry_run::DryRun;
use crate::vocabulary::{EXAMINED_ANNOTATION, SHADOW_ANNOTATION};

/// Bytes kept of one line (a difference, a fault): a candidate chooses
/// the keys of its manifests, so a pointer may be as long as its output.
pub const MAX_LINE_BYTES: usize = 400;

/// `line`, cut at [`MAX_LINE_BYTES`] on a character boundary.
fn cut(mut line: String) -> String {
    if line.len() > MAX_LINE_BYTES {
        line.truncate(line.floor_char_boundary(MAX_LINE_BYTES));
        line.push('…');
    }
    line
}

/// DataJobs kept per candidate.
pub const MAX_JOBS: usize = 20;
/// DataJobs left out that are told apart; past it, each new call left out
/// counts as one more (an upper bound).
const MAX_LEFT_OUT_TOLD_APART: usize = 10_000;
/// Differences kept per DataJob.
pub const MAX_DIFFERENCES: usize = 10;

/// The result of one shadow call, as the metric labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The candidate answered as the serving version did.
    Same,
    /// It answered otherwise.
    Differs,
    /// It faulted.
    Fault,
    /// It was not called: no call thread was spare.
    Skipped,
}

impl Outcome {
    /// The `result` label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Differs => "differs",
            Self::Fault => "fault",
            Self::Skipped => "skipped",
        }
    }
}

/// The latest difference of one DataJob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDifference {
    /// `namespace/name`.
    pub job: String,
    /// `reconcile` or `cleanup`.
    pub call: String,
    /// The candidate's fault (`REASON: message`), if it faulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// The first differences, as `policy test` prints them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
    /// Differences left out past [`MAX_DIFFERENCES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: usize,
    /// The children of the latest call the API server refused in a dry
    /// run, as `Kind:name: why` (at most [`MAX_DIFFERENCES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// Its differing children the dry-run budget left unchecked.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unchecked: u32,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What one candidate version's shadow calls came to, compared with one
/// serving version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The candidate's digest.
    pub digest: String,
    /// The digest of the serving version the calls were compared with;
    /// empty before the first call.
    #[serde(default)]
    pub serving: String,
    /// Calls that answered as the serving version did.
    pub same: u64,
    /// Calls that answered otherwise.
    pub differs: u64,
    /// Calls that faulted.
    pub faults: u64,
    /// Calls skipped for want of a spare call thread.
    pub skipped: u64,
    /// Outbound requests the candidate made and the host refused: a shadow
    /// call has no side effect.
    #[serde(default)]
    pub outbound_refused: u64,
    /// Differing children the API server refused in a dry run.
    #[serde(default)]
    pub refused: u64,
    /// Differing children the dry-run budget left unchecked.
    #[serde(default)]
    pub unchecked: u64,
    /// The DataJobs whose latest call differed or faulted, first come
    /// first (at most [`MAX_JOBS`]).
    #[serde(default)]
    pub jobs: Vec<JobDifference>,
    /// DataJobs that differed but were left out past [`MAX_JOBS`].
    #[serde(default)]
    pub jobs_left_out: u64,
    /// The DataJobs left out, to count each once; the host's alone, never
    /// written.
    #[serde(skip)]
    pub left_out: LeftOut,
}

/// The DataJobs a summary left out, told apart by a hash of
/// `namespace/name` (at most [`MAX_LEFT_OUT_TOLD_APART`] of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut(HashSet<u64>);

impl Summary {
    /// An empty summary of the candidate `digest`.
    #[must_use]
    pub fn new(digest: String) -> Self {
        Self {
            digest,
            ..Self::default()
        }
    }

    /// Makes this the summary of calls compared with the serving version
    /// `serving`: a summary of another serving version starts again from
    /// nothing. Returns whether it did.
    pub fn against(&mut self, serving: &str) -> bool {
        if self.serving == serving {
            return false;
        }
        *self = Self {
            serving: serving.to_owned(),
            ..Self::new(std::mem::take(&mut self.digest))
        };
        true
    }

    /// Counts a skipped call.
    pub fn skipped(&mut self) {
        self.skipped += 1;
    }

    /// Counts one compared call of `job` and keeps its differences; a
    /// DataJob that now answers the same is no longer listed. Returns the
    /// call's outcome.
    pub fn record(&mut self, job: &str, call: &str, verdict: &Verdict) -> Outcome {
        let entry = |fault: Option<String>, differences: Vec<String>, more: usize| JobDifference {
            job: job.to_owned(),
            call: call.to_owned(),
            fault,
            differences,
            more,
            refused: Vec::new(),
            unchecked: 0,
        };
        let (outcome, entry) = match verdict {
            Verdict::Same => {
                self.same += 1;
                (Outcome::Same, None)
            }
            Verdict::Differs(found) => {
                self.differs += 1;
                let lines = found
                    .iter()
                    .take(MAX_DIFFERENCES)
                    .map(|difference| cut(difference.to_string()))
                    .collect();
                let more = found.len().saturating_sub(MAX_DIFFERENCES);
                (Outcome::Differs, Some(entry(None, lines, more)))
            }
            Verdict::Fault { reason, message } => {
                self.faults += 1;
                let fault = cut(format!("{reason}: {message}"));
                (Outcome::Fault, Some(entry(Some(fault), Vec::new(), 0)))
            }
        };
        let at = self
            .jobs
            .iter()
            .position(|kept| kept.job == job && kept.call == call);
        match (at, entry) {
            (Some(at), Some(entry)) => self.jobs[at] = entry,
            (Some(at), None) => {
                self.jobs.remove(at);
            }
            (None, Some(entry)) if self.jobs.len() < MAX_JOBS => self.jobs.push(entry),
            (None, Some(_)) => self.leave_out(job),
            (None, None) => {}
        }
        outcome
    }

    /// Keeps what the API server said of the differing children of `job`'s
    /// latest `call` (recorded just before): its refusals, counted.
    pub fn server_said(&mut self, job: &str, call: &str, dry_run: &DryRun) {
        let refused = dry_run.refused.len() as u64;
        self.refused += refused;
        self.unchecked += u64::from(dry_run.unchecked);
        if let Some(kept) = self
            .jobs
            .iter_mut()
            .find(|kept| kept.job == job && kept.call == call)
        {
            kept.refused = dry_run
                .refused
                .iter()
                .take(MAX_DIFFERENCES)
                .map(|refusal| cut(refusal.to_string()))
                .collect();
            kept.unchecked = dry_run.unchecked;
        }
    }

    /// Counts `job` among the DataJobs left out, once.
    fn leave_out(&mut self, job: &str) {
        let mut hasher = DefaultHasher::new();
        job.hash(&mut hasher);
        let key = hasher.finish();
        if self.left_out.0.contains(&key) {
            return;
        }
        if self.left_out.0.len() < MAX_LEFT_OUT_TOLD_APART {
            self.left_out.0.insert(key);
        }
        self.jobs_left_out += 1;
    }

    /// Whether any call differed or faulted.
    #[must_use]
    pub fn differed(&self) -> bool {
        self.differs + self.faults > 0
    }

    /// Reads the summary from a ConfigMap's annotations, if it has one.
    #[must_use]
    pub fn read(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<Self> {
        serde_json::from_str(annotations?.get(SHADOW_ANNOTATION)?).ok()
    }

    /// What `policy diff` marks examined once it showed this summary.
    #[must_use]
    pub fn examined(&self) -> Examined {
        Examined {
            candidate: self.digest.clone(),
            serving: self.serving.clone(),
            faults: self.faults,
            refused: self.refused,
        }
    }
}

/// The faults and refusals `policy diff` showed, of one (candidate,
/// serving) pair: the value of [`EXAMINED_ANNOTATION`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Examined {
    /// The candidate's digest.
    pub candidate: String,
    /// The serving version's digest.
    pub serving: String,
    /// Faults shown.
    pub faults: u64,
    /// Refused children shown.
    #[serde(default)]
    pub refused: u64,
}

impl Examined {
    /// Reads it from a ConfigMap's annotations; anything else (absent,
    /// malformed, a bare count of an older host) counts as none examined.
    #[must_use]
    pub fn read(annotations: &std::collections::BTreeMap<String, String>) -> Self {
        annotations
            .get(EXAMINED_ANNOTATION)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }

    /// The faults of `summary` shown, if it is of the same pair; else none.
    #[must_use]
    pub fn of(&self, summary: &Summary) -> u64 {
        self.mine(summary).map_or(0, |examined| examined.faults)
    }

    /// The refusals of `summary` shown, if it is of the same pair; else none.
    #[must_use]
    pub fn refused_of(&self, summary: &Summary) -> u64 {
        self.mine(summary).map_or(0, |examined| examined.refused)
    }

    fn mine(&self, summary: &Summary) -> Option<&Self> {
        (self.candidate == summary.digest && self.serving == summary.serving).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::diff::Difference;
    use super::*;

    fn differs(n: usize) -> Verdict {
        Verdict::Differs(
            (0..n)
                .map(|i| Difference {
                    pointer: format!("/children/Pod:w-{i}"),
                    expected: None,
                    actual: Some(serde_json::json!({})),
                })
                .collect(),
        )
    }

    #[test]
    fn counts_every_call_and_lists_each_differing_job_once_with_its_latest_differences() {
        let mut summary = Summary::new("abc".into());
        assert_eq!(
            summary.record("a/j1", "reconcile", &Verdict::Same),
            Outcome::Same
        );
        assert_eq!(
            summary.record("a/j2", "reconcile", &differs(1)),
            Outcome::Differs
        );
        assert_eq!(
            summary.record("a/j2", "reconcile", &differs(2)),
            Outcome::Differs
        );
        let fault = Verdict::Fault {
            reason: "Trap",
            message: "unreachable".into(),
        };
        assert_eq!(summary.record("a/j3", "cleanup", &fault), Outcome::Fault);
        summary.skipped();
        assert_eq!(
            (
                summary.same,
                summary.differs,
                summary.faults,
                summary.skipped
            ),
            (1, 2, 1, 1)
        );
        assert_eq!(summary.jobs.len(), 2);
        assert_eq!(summary.jobs[0].differences.len(), 2, "the latest call's");
        assert_eq!(summary.jobs[1].fault.as_deref(), Some("Trap: unreachable"));
        summary.record("a/j2", "reconcile", &Verdict::Same);
        assert_eq!(
            summary.jobs.len(),
            1,
            "a job that agrees again is not listed"
        );
        assert!(summary.differed());
    }

    #[test]
    fn a_new_serving_version_starts_the_summary_again() {
        let mut summary = Summary::new("cand".into());
        assert!(summary.against("serving-1"));
        summary.record("a/j1", "reconcile", &differs(1));
        assert!(!summary.against("serving-1"), "the same pair goes on");
        assert_eq!(summary.differs, 1);
        assert!(summary.against("serving-2"));
        assert_eq!(
            summary,
            Summary {
                serving: "serving-2".into(),
                ..Summary::new("cand".into())
            }
        );
    }

    #[test]
    fn examined_faults_count_only_for_their_own_pair() {
        let mut summary = Summary::new("cand".into());
        summary.against("serving-1");
        summary.faults = 3;
        let examined = summary.examined();
        assert_eq!(examined.of(&summary), 3);
        let text = serde_json::to_string(&examined).unwrap();
        let annotations = [(EXAMINED_ANNOTATION.to_owned(), text)].into();
        assert_eq!(Examined::read(&annotations), examined);
        let mut next_candidate = Summary::new("cand-2".into());
        next_candidate.against("serving-1");
        next_candidate.faults = 3;
        assert_eq!(examined.of(&next_candidate), 0);
        summary.against("serving-2");
        summary.faults = 3;
        assert_eq!(examined.of(&summary), 0);
        let bare = [(EXAMINED_ANNOTATION.to_owned(), "7".to_owned())].into();
        assert_eq!(Examined::read(&bare).of(&summary), 0, "a bare count");
    }

    #[test]
    fn the_servers_refusals_stand_beside_the_differences_and_count_as_examined_once_shown() {
        use crate::apply::dry_run::Refused;
        let mut summary = Summary::new("cand".into());
        summary.against("serving-1");
        summary.record("a/j1", "reconcile", &differs(1));
        let refusal = Refused {
            kind: "Pod".into(),
            name: "hello-1-main".into(),
            why: "422 Invalid: spec.containers[0].name: field is immutable".into(),
        };
        summary.server_said(
            "a/j1",
            "reconcile",
            &DryRun {
                sent: 2,
                refused: vec![refusal],
                unchecked: 1,
            },
        );
        assert_eq!((summary.refused, summary.unchecked), (1, 1));
        assert_eq!(
            summary.jobs[0].refused,
            ["Pod:hello-1-main: 422 Invalid: spec.containers[0].name: field is immutable"]
        );
        assert_eq!(summary.jobs[0].unchecked, 1);
        let examined = summary.examined();
        assert_eq!(examined.refused_of(&summary), 1);
        summary.server_said("a/j2", "reconcile", &DryRun::default());
        assert_eq!(summary.refused, 1, "nothing refused, nothing counted");
        let mut other = Summary::new("cand-2".into());
        other.against("serving-1");
        other.refused = 1;
        assert_eq!(examined.refused_of(&other), 0, "another pair's");
        let old = r#"{"candidate":"cand","serving":"serving-1","faults":0}"#;
        let annotations = [(EXAMINED_ANNOTATION.to_owned(), old.to_owned())].into();
        assert_eq!(Examined::read(&annotations).refused_of(&summary), 0);
    }

    #[test]
    fn a_datajob_left_out_is_counted_once_however_often_it_is_called() {
        let mut summary = Summary::new("abc".into());
        for round in 0..3 {
            for i in 0..MAX_JOBS + 5 {
                summary.record(&format!("a/j{i}"), "reconcile", &differs(round + 1));
            }
        }
        assert_eq!(summary.jobs.len(), MAX_JOBS);
        assert_eq!(summary.jobs_left_out, 5);
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut summary = Summary::new("abc".into());
        for i in 0..MAX_JOBS + 5 {
            summary.record(
                &format!("a/j{i}"),
                "reconcile",
                &differs(MAX_DIFFERENCES + 3),
            );
        }
        assert_eq!(summary.jobs.len(), MAX_JOBS);
        assert_eq!(summary.jobs_left_out, 5);
        let long = Verdict::Differs(vec![Difference {
            pointer: format!("/children/ConfigMap:x/data/{}", "k".repeat(1 << 20)),
            expected: None,
            actual: Some(serde_json::json!("v")),
        }]);
        let mut one = Summary::new("abc".into());
        one.record("a/j", "reconcile", &long);
        let fault = Verdict::Fault {
            reason: "Trap",
            message: "m".repeat(1 << 20),
        };
        one.record("a/j", "cleanup", &fault);
        let kept: Vec<&String> = one
            .jobs
            .iter()
            .flat_map(|j| j.differences.iter().chain(&j.fault))
            .collect();
        assert_eq!(kept.len(), 2);
        assert!(
            kept.iter()
                .all(|line| line.len() <= MAX_LINE_BYTES + '…'.len_utf8()),
            "a line is cut"
        );
        assert!(
            summary
                .jobs
                .iter()
                .all(|j| j.differences.len() == MAX_DIFFERENCES && j.more == 3)
        );
        let text = serde_json::to_string(&summary).unwrap();
        let annotations = [(SHADOW_ANNOTATION.to_owned(), text.clone())].into();
        let read = Summary::read(Some(&annotations)).expect("a summary");
        assert_eq!(serde_json::to_string(&read).unwrap(), text);
    }
}
