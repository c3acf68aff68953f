//! Rollouts: a policy's candidate serving a growing part of its DataJobs,
//! step by step, judged against the serving version as it goes and rolled
//! back by itself when it falls behind.
//!
//! - [`plan`]: what the publisher asks (`rollout-<name>`'s `data`): the
//!   candidate, the steps, the wait, the tolerance, pause or abort.
//! - [`status`]: where the rollout is (the leader's annotation), and the one
//!   function that moves it.
//! - [`gates`]: what each version's passes came to in a step, and the
//!   judgement.
//!
//! The registry routes each DataJob by the [`Canary`] in force
//! ([`crate::policies::Registry::get_for`]); the ConfigMap source reads the
//! plans and drives them on the leader.

pub mod gates;
pub mod plan;
pub mod status;

use crate::runtime::Digest;

pub use self::gates::{Signal, Tally};
pub use self::plan::{Plan, Reach};
pub use self::status::{Phase, Status};

/// A candidate serving part of its policy's DataJobs, in one step.
#[derive(Debug)]
pub struct Canary {
    /// The candidate it routes to: while another is the candidate, none.
    pub digest: Digest,
    /// Which DataJobs it serves.
    pub reach: Reach,
    /// The step, as (index, start in Unix ms): a new step counts anew.
    pub step: (usize, u64),
    /// What both versions' passes came to in the step.
    pub tally: Tally,
}
