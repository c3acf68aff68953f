//! A policy's rollout plan: which DataJobs its candidate serves at each
//! step, how long each step lasts, and how far it may fall behind the
//! serving version before it is rolled back.
//!
//! The plan is the `data` of the ConfigMap `rollout-<name>` (labelled
//! `policyhost.dev/policy: <name>` and `policyhost.dev/role: rollout`),
//! which `policyhost policy rollout NAME start` writes:
//!
//! ```yaml
//! data:
//!   digest: sha256:9c41…          # the candidate it rolls out (required)
//!   steps: team-a-ci; 5%; 25%; 100%  # namespaces, or a share of DataJobs
//!   stepWait: 5m                  # how long each step lasts (default 5m)
//!   tolerance: 5%                 # how far a gate may fall behind (default 5%)
//!   minCalls: "10"                # calls before a gate is judged early (default 10)
//!   # control: pause              # or abort: set by `policy rollout NAME pause|abort`
//! ```
//!
//! Steps are cumulative: a DataJob a step reaches stays reached by every
//! later step, so none goes back and forth between versions. A share takes
//! the DataJobs whose uid hashes (FNV-1a, 64 bits) into the first
//! `share × 10,000` of 10,000 buckets: stable across restarts and replicas,
//! and a larger share reaches a superset.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::data_keys::{self, KeyError};
use crate::quantity::{format_duration, parse_duration};
use crate::runtime::Digest;

/// The `data` keys of a rollout ConfigMap.
pub mod keys {
    /// The candidate's digest, `sha256:…`.
    pub const DIGEST: &str = "digest";
    /// The steps, separated by `;`.
    pub const STEPS: &str = "steps";
    /// How long each step lasts.
    pub const STEP_WAIT: &str = "stepWait";
    /// Percentage points a gate may fall behind the serving version.
    pub const TOLERANCE: &str = "tolerance";
    /// Calls of the candidate in a step before a gate is judged early.
    pub const MIN_CALLS: &str = "minCalls";
    /// `pause` or `abort`; absent: the rollout runs.
    pub const CONTROL: &str = "control";
    /// Every key, in the order the errors list them.
    pub const ALL: &[&str] = &[DIGEST, STEPS, STEP_WAIT, TOLERANCE, MIN_CALLS, CONTROL];
}

/// The buckets a share is counted in: a share of 5 % is 500 of them.
pub const BUCKETS: u32 = 10_000;
/// How long a step lasts when the plan does not say.
pub const DEFAULT_STEP_WAIT: Duration = Duration::from_secs(300);
/// The percentage points a gate may fall behind when the plan does not say.
pub const DEFAULT_TOLERANCE: Points = Points(500);
/// The calls a gate waits for before it is judged early.
pub const DEFAULT_MIN_CALLS: u32 = 10;

const DIGEST_EXPECTED: &str = "sha256: and the 64 hexadecimal digits of the candidate";
const STEPS_EXPECTED: &str = "steps separated by `;`, each a share such as 5% or a list of namespaces such as team-a,team-b; shares never decreasing";
const WAIT_EXPECTED: &str = "a duration such as 30s or 5m";
const TOLERANCE_EXPECTED: &str = "percentage points from 0% to 100%, such as 5%";
const MIN_CALLS_EXPECTED: &str = "a positive integer, such as 10";
const CONTROL_EXPECTED: &str = "`pause` or `abort`";

/// Hundredths of a percentage point: 5 % is `Points(500)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Points(pub u32);

impl Points {
    /// `5%`, `2.5%` or `0.25%`: at most two decimals, at most 100 %.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let number = text.trim().strip_suffix('%')?.trim();
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty()
            || fraction.len() > 2
            || !(whole.bytes().chain(fraction.bytes())).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let whole: u32 = whole.parse().ok()?;
        let fraction: u32 = format!("{fraction:0<2}").parse().ok()?;
        let points = whole.checked_mul(100)?.checked_add(fraction)?;
        (points <= BUCKETS).then_some(Self(points))
    }
}

impl std::fmt::Display for Points {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, fraction) = (self.0 / 100, self.0 % 100);
        if fraction == 0 {
            write!(f, "{whole}%")
        } else {
            write!(f, "{whole}.{fraction:02}%")
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Every DataJob of these namespaces.
    Namespaces(BTreeSet<String>),
    /// This share of the policy's DataJobs, by the hash of their uid.
    Share(Points),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Namespaces(namespaces) => {
                let names: Vec<&str> = namespaces.iter().map(String::as_str).collect();
                write!(f, "namespaces {}", names.join(","))
            }
            Self::Share(share) => write!(f, "{share} of DataJobs"),
        }
    }
}

/// What the publisher asks of a running rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Control {
    /// Go on.
    #[default]
    Run,
    /// Stay at the current step; the DataJobs it reached keep the candidate.
    Pause,
    /// Stop: every DataJob goes back to the serving version.
    Abort,
}

/// Which DataJobs the candidate serves: the union of the steps so far.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reach {
    /// Every DataJob of these namespaces.
    pub namespaces: BTreeSet<String>,
    /// And those whose uid's bucket is below this.
    pub share: Points,
}

impl Reach {
    /// Whether the DataJob of `namespace` with `uid` is reached.
    #[must_use]
    pub fn includes(&self, namespace: &str, uid: &str) -> bool {
        self.namespaces.contains(namespace) || bucket(uid) < self.share.0
    }

    /// Whether it reaches no DataJob at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.share.0 == 0
    }
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        match (names.is_empty(), self.share.0) {
            (true, _) => write!(f, "{} of DataJobs", self.share),
            (false, 0) => write!(f, "namespaces {}", names.join(",")),
            (false, _) => write!(
                f,
                "namespaces {} and {} of DataJobs",
                names.join(","),
                self.share
            ),
        }
    }
}

/// The bucket of a DataJob's uid, in `0..BUCKETS`: FNV-1a (64 bits) of the
/// uid's bytes, the hash the API server's shard selectors use.
#[must_use]
pub fn bucket(uid: &str) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = uid.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    u32::try_from(hash % u64::from(BUCKETS)).unwrap_or(0)
}

/// A policy's rollout plan, as its ConfigMap states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The candidate it rolls out.
    pub digest: Digest,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// How long each step lasts.
    pub step_wait: Duration,
    /// How far the candidate may fall behind the serving version on a gate.
    pub tolerance: Points,
    /// Calls of the candidate in a step before a gate is judged early.
    pub min_calls: u32,
    /// What the publisher asks.
    pub control: Control,
}

impl Plan {
    /// Reads a rollout ConfigMap's `data`.
    ///
    /// # Errors
    ///
    /// The first key that does not read, an unknown key, or no digest or
    /// steps.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Self, KeyError> {
        let (mut digest, mut steps) = (None, None);
        let mut plan = Self {
            digest: Digest([0; 32]),
            steps: Vec::new(),
            step_wait: DEFAULT_STEP_WAIT,
            tolerance: DEFAULT_TOLERANCE,
            min_calls: DEFAULT_MIN_CALLS,
            control: Control::Run,
        };
        for entry in data_keys::entries(data) {
            match entry.key {
                keys::DIGEST => digest = Some(entry.parse(DIGEST_EXPECTED, Digest::parse)?),
                keys::STEPS => steps = Some(entry.parse(STEPS_EXPECTED, parse_steps)?),
                keys::STEP_WAIT => {
                    plan.step_wait = entry.parse(WAIT_EXPECTED, |text| {
                        parse_duration(text).filter(|wait| !wait.is_zero())
                    })?;
                }
                keys::TOLERANCE => {
                    plan.tolerance = entry.parse(TOLERANCE_EXPECTED, Points::parse)?
                }
                keys::MIN_CALLS => {
                    plan.min_calls = entry.parse(MIN_CALLS_EXPECTED, |text| {
                        text.parse().ok().filter(|calls| *calls > 0)
                    })?;
                }
                keys::CONTROL => {
                    plan.control = entry.parse(CONTROL_EXPECTED, |text| match text {
                        "pause" => Some(Control::Pause),
                        "abort" => Some(Control::Abort),
                        _ => None,
                    })?;
                }
                _ => return Err(entry.unknown(" in a rollout", keys::ALL)),
            }
        }
        let missing = |key: &str, expected| KeyError::Invalid {
            key: key.to_owned(),
            value: String::new(),
            expected,
        };
        plan.digest = digest.ok_or_else(|| missing(keys::DIGEST, DIGEST_EXPECTED))?;
        plan.steps = steps.ok_or_else(|| missing(keys::STEPS, STEPS_EXPECTED))?;
        Ok(plan)
    }

    /// The DataJobs the candidate serves at step `step` (0-based): every
    /// step up to it, together.
    #[must_use]
    pub fn reach(&self, step: usize) -> Reach {
        let mut reach = Reach::default();
        for taken in self.steps.iter().take(step.saturating_add(1)) {
            match taken {
                Step::Namespaces(namespaces) => reach.namespaces.extend(namespaces.iter().cloned()),
                Step::Share(share) => reach.share = reach.share.max(*share),
            }
        }
        reach
    }

    /// The `data` that states this plan.
    #[must_use]
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|step| match step {
                Step::Namespaces(namespaces) => {
                    namespaces.iter().cloned().collect::<Vec<_>>().join(",")
                }
                Step::Share(share) => share.to_string(),
            })
            .collect();
        let mut data = BTreeMap::from([
            (keys::DIGEST.to_owned(), format!("sha256:{}", self.digest)),
            (keys::STEPS.to_owned(), steps.join("; ")),
            (keys::STEP_WAIT.to_owned(), format_duration(self.step_wait)),
            (keys::TOLERANCE.to_owned(), self.tolerance.to_string()),
            (keys::MIN_CALLS.to_owned(), self.min_calls.to_string()),
        ]);
        match self.control {
            Control::Run => {}
            Control::Pause => _ = data.insert(keys::CONTROL.to_owned(), "pause".to_owned()),
            Control::Abort => _ = data.insert(keys::CONTROL.to_owned(), "abort".to_owned()),
        }
        data
    }
}

/// `team-a,team-b; 5%; 25%; 100%`: at least one step, shares never
/// decreasing (a larger share reaches a superset of a smaller one).
fn parse_steps(text: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut share = Points(0);
    for step in text.split(';').map(str::trim) {
        if step.ends_with('%') {
            let next = Points::parse(step).filter(|next| *next >= share && next.0 > 0)?;
            share = next;
            steps.push(Step::Share(next));
        } else {
            let namespaces: BTreeSet<String> =
                step.split(',').map(str::trim).map(str::to_owned).collect();
            if namespaces.iter().any(|name| !is_namespace(name)) {
                return None;
            }
            steps.push(Step::Namespaces(namespaces));
        }
    }
    (!steps.is_empty()).then_some(steps)
}

/// A DNS label, as namespaces are named.
fn is_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    const DIGEST: &str = "sha256:9c41000000000000000000000000000000000000000000000000000000000001";

    #[test]
    fn a_plan_reads_its_steps_and_defaults_and_writes_them_back() {
        let plan = Plan::parse(&data(&[
            ("digest", DIGEST),
            ("steps", " team-a-ci ; 5%;25%; 100% "),
        ]))
        .expect("a plan");
        assert_eq!(plan.steps.len(), 4);
        assert_eq!(plan.step_wait, DEFAULT_STEP_WAIT);
        assert_eq!(plan.tolerance, Points(500));
        assert_eq!(plan.control, Control::Run);
        assert_eq!(Plan::parse(&plan.to_data()).expect("again"), plan);
        // Cumulative: the namespace stays reached after it.
        let reach = plan.reach(2);
        assert!(reach.namespaces.contains("team-a-ci"));
        assert_eq!(reach.share, Points(2500));
        assert_eq!(
            reach.to_string(),
            "namespaces team-a-ci and 25% of DataJobs"
        );
        assert!(plan.reach(0).includes("team-a-ci", "any"));
        assert!(Reach::default().is_empty());
    }

    #[test]
    fn every_bad_key_is_named() {
        for (pairs, key) in [
            (&[("steps", "5%")][..], "digest"),
            (&[("digest", DIGEST)][..], "steps"),
            (&[("digest", "sha256:12"), ("steps", "5%")][..], "digest"),
            (&[("digest", DIGEST), ("steps", "25%; 5%")][..], "steps"),
            (&[("digest", DIGEST), ("steps", "5%; 120%")][..], "steps"),
            (&[("digest", DIGEST), ("steps", "0%")][..], "steps"),
            (&[("digest", DIGEST), ("steps", "Team_A; 5%")][..], "steps"),
            (&[("digest", DIGEST), ("steps", "")][..], "steps"),
            (
                &[("digest", DIGEST), ("steps", "5%"), ("stepWait", "0s")][..],
                "stepWait",
            ),
            (
                &[("digest", DIGEST), ("steps", "5%"), ("tolerance", "5")][..],
                "tolerance",
            ),
            (
                &[("digest", DIGEST), ("steps", "5%"), ("minCalls", "0")][..],
                "minCalls",
            ),
            (
                &[("digest", DIGEST), ("steps", "5%"), ("control", "stop")][..],
                "control",
            ),
        ] {
            let error = Plan::parse(&data(pairs)).expect_err("refused");
            assert!(
                error.to_string().contains(&format!("`data.{key}`")),
                "{pairs:?}: {error}"
            );
        }
        let unknown = Plan::parse(&data(&[
            ("digest", DIGEST),
            ("steps", "5%"),
            ("step", "1m"),
        ]))
        .expect_err("a typo");
        assert!(
            unknown
                .to_string()
                .starts_with("unknown key `data.step` in a rollout"),
            "{unknown}"
        );
    }

    #[test]
    fn a_share_takes_the_same_datajobs_everywhere_and_a_larger_one_a_superset() {
        let uids: Vec<String> = (0..2_000)
            .map(|i| format!("0a1b2c3d-{i:04}-4e5f-8a9b-00000000{i:04}"))
            .collect();
        let within = |share: u32| -> BTreeSet<&String> {
            let reach = Reach {
                share: Points(share),
                ..Reach::default()
            };
            uids.iter()
                .filter(|uid| reach.includes("ns", uid))
                .collect()
        };
        let (five, twenty_five, all) = (within(500), within(2_500), within(10_000));
        assert!(five.is_subset(&twenty_five));
        assert_eq!(all.len(), uids.len());
        // About the share asked (2,000 uids: 100 and 500 expected).
        assert!((60..=140).contains(&five.len()), "{}", five.len());
        assert!(
            (420..=580).contains(&twenty_five.len()),
            "{}",
            twenty_five.len()
        );
        // FNV-1a 64 of the bytes: the published test vector of "a".
        assert_eq!(
            bucket("a"),
            u32::try_from(0xaf63_dc4c_8601_ec8c_u64 % 10_000).expect("small")
        );
    }

    #[test]
    fn points_read_and_print_with_two_decimals() {
        assert_eq!(Points::parse("5%"), Some(Points(500)));
        assert_eq!(Points::parse("2.5%"), Some(Points(250)));
        assert_eq!(Points::parse("0.25%"), Some(Points(25)));
        assert_eq!(Points::parse("100%"), Some(Points(10_000)));
        for bad in ["5", "100.01%", "1.234%", "-1%", "%", "a%"] {
            assert_eq!(Points::parse(bad), None, "{bad}");
        }
        assert_eq!(Points(250).to_string(), "2.50%");
        assert_eq!(Points(500).to_string(), "5%");
    }
}
