//! Candidate versions: a policy's next version, called beside the serving
//! one on exactly the same inputs, its answers compared and never applied.
//!
//! # Expected flow
//!
//! 1. A ConfigMap labelled `policyhost.dev/role: candidate`
//!    (`candidate-<policy>` on a strict host) is loaded like any version,
//!    with the policy's own grant, and put in [`Candidates`].
//! 2. Each reconcile and cleanup of a DataJob of the policy clones its
//!    inputs before the serving call ([`Candidates::beside`]). Once the
//!    serving call has answered, the candidate is called on a spare call
//!    thread ([`crate::runtime::Runtime::spare`]): in its own fresh
//!    instance, under its own limits, no request leaving the host. Its
//!    answer is compared with the serving one ([`diff`]).
//! 3. The result is counted (`policyhost_shadow_calls_total{policy,result}`)
//!    and kept, bounded, in the candidate's [`Summary`] of this pair
//!    (candidate digest, serving digest: a new serving version starts it
//!    again), which the leader
//!    writes on the candidate's ConfigMap ([`report`]) with one Event when
//!    it first differs.
//!
//! # Guarantees
//! - Only the serving version's answer is applied: a candidate's answer,
//!   fault or not, touches no DataJob.
//! - A shadow call runs below every serving call: it never waits for a
//!   call thread, and takes one only when no serving call waits, another
//!   stays free, and shadow calls hold fewer than a quarter of the threads
//!   (at least one); otherwise it is skipped and counted `skipped`. A
//!   serving call that arrives later may wait behind it, at most its
//!   deadline, which the host's maxima cap. It runs after the serving call,
//!   off the reconcile's path, and costs no API request of its own.
//! - A shadow call has no side effect: outbound HTTP is refused
//!   ([`crate::outbound::Refusal::Shadow`]), and the summary says how many
//!   requests were.
//!
//! # Caveats
//! - The context is the serving call's except `policyDigest`, which is
//!   each version's own.
//! - The summary is readable by whoever may read the candidate's
//!   ConfigMap: the policy's publishers. It quotes what both versions
//!   answered for DataJobs of every namespace the policy serves.

pub mod diff;
pub mod record;
pub mod report;
pub mod summary;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::Notify;
use tracing::debug;

use self::diff::{Answer, compare};
use self::record::Recorder;
pub use self::summary::{Outcome, Summary};
use crate::fair::{Share, Tenant};
use crate::metrics::Metrics;
use crate::runtime::{self, Input, Policy, Runtime};

/// The candidate versions in service, by policy name, and the recorder of
/// serving calls (`--record-calls`): what happens beside a serving call.
pub struct Candidates {
    entries: RwLock<HashMap<String, Arc<Candidate>>>,
    runtime: Runtime,
    metrics: Arc<Metrics>,
    recorder: Option<Recorder>,
    /// Woken when a summary changed.
    changed: Notify,
}

/// One candidate version and what its shadow calls came to.
pub struct Candidate {
    policy: Arc<Policy>,
    /// Its shadow calls' tenant in the call scheduler, apart from the
    /// serving version's so that they never count against it.
    tenant: Tenant,
    /// Its ConfigMap.
    configmap: ObjectReference,
    state: Mutex<Tracked>,
}

/// A summary and what of it was reported.
struct Tracked {
    summary: Summary,
    /// Changed since the last write.
    dirty: bool,
    /// Its first difference was announced with an Event.
    announced: bool,
}

impl Candidate {
    /// The candidate version.
    #[must_use]
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy)
    }

    /// What its shadow calls came to so far.
    #[must_use]
    pub fn summary(&self) -> Summary {
        self.state().summary.clone()
    }

    fn state(&self) -> MutexGuard<'_, Tracked> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Candidates {
    /// No candidate yet; serving calls are recorded when `record` says where.
    #[must_use]
    pub fn new(
        runtime: Runtime,
        metrics: Arc<Metrics>,
        record: Option<record::Config>,
    ) -> Arc<Self> {
        Arc::new(Self {
            entries: RwLock::default(),
            runtime,
            metrics,
            recorder: record.map(Recorder::new),
            changed: Notify::new(),
        })
    }

    /// Puts `policy` in service as the candidate of its policy, offered by
    /// `configmap`; returns the candidate it replaced. The same version
    /// loaded again (its grant changed) keeps its summary.
    pub fn install(
        &self,
        name: &str,
        policy: Arc<Policy>,
        configmap: ObjectReference,
    ) -> Option<Arc<Policy>> {
        let digest = policy.digest().to_hex();
        let mut entries = self.write();
        let previous = entries.get(name).cloned();
        let tracked = match &previous {
            Some(old) if old.policy.digest() == policy.digest() => {
                let old = old.state();
                Tracked {
                    summary: old.summary.clone(),
                    dirty: true,
                    announced: old.announced,
                }
            }
            _ => Tracked {
                summary: Summary::new(digest),
                dirty: true,
                announced: false,
            },
        };
        let tenant = Tenant::new(format!("{name} (candidate)"), Share::DEFAULT);
        let candidate = Candidate {
            policy,
            tenant,
            configmap,
            state: Mutex::new(tracked),
        };
        entries.insert(name.to_owned(), Arc::new(candidate));
        drop(entries);
        self.changed.notify_one();
        previous.map(|old| old.policy())
    }

    /// Takes the candidate of `name` out of service.
    pub fn remove(&self, name: &str) -> Option<Arc<Policy>> {
        self.write().remove(name).map(|old| old.policy())
    }

    /// The candidate of `name`, if one is in service.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<Candidate>> {
        self.read().get(name).cloned()
    }

    /// Every candidate in service, by policy name.
    #[must_use]
    pub fn all(&self) -> Vec<(String, Arc<Candidate>)> {
        self.read()
            .iter()
            .map(|(name, candidate)| (name.clone(), Arc::clone(candidate)))
            .collect()
    }

    /// Keeps the inputs of one serving call of `policy`, if it has a
    /// candidate to call on them or calls are recorded: the candidate is
    /// called once the serving call has answered ([`Beside::reconcile`],
    /// [`Beside::cleanup`]).
    #[must_use]
    pub fn beside(self: &Arc<Self>, policy: &str, input: &Input) -> Option<Beside> {
        let candidate = self.get(policy);
        if candidate.is_none() && self.recorder.is_none() {
            return None;
        }
        Some(Beside {
            candidates: Arc::clone(self),
            policy: policy.to_owned(),
            candidate,
            input: input.clone(),
        })
    }

    /// Counts one shadow call of `policy`'s candidate beside a call of the
    /// serving version `serving` (its digest) and keeps it in the summary
    /// of that pair.
    fn tally(
        &self,
        policy: &str,
        candidate: &Candidate,
        serving: &str,
        recorded: impl FnOnce(&mut Summary) -> Outcome,
    ) {
        let outcome = {
            let mut state = candidate.state();
            if state.summary.against(serving) {
                state.announced = false;
            }
            let outcome = recorded(&mut state.summary);
            state.dirty = true;
            outcome
        };
        self.metrics.shadow_call(policy, outcome.as_str());
        self.changed.notify_one();
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Candidate>>> {
        self.entries.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Candidate>>> {
        self.entries.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What happens beside one serving call: its record, and the candidate's
/// shadow call.
pub struct Beside {
    candidates: Arc<Candidates>,
    policy: String,
    candidate: Option<Arc<Candidate>>,
    input: Input,
}

impl Beside {
    /// Calls the candidate's `reconcile` beside the serving version's
    /// answer `serving`, in the background; skipped when no call thread is
    /// spare.
    pub fn reconcile(self, serving: &runtime::Result<runtime::Reconciled>) {
        self.call("reconcile", serving, Runtime::reconcile_offline);
    }

    /// Calls the candidate's `cleanup` beside the serving version's answer.
    pub fn cleanup(self, serving: &runtime::Result<runtime::Cleaned>) {
        self.call("cleanup", serving, Runtime::cleanup_offline);
    }

    /// Takes a spare call thread for the candidate, or counts the shadow
    /// call skipped; then, in the background, turns the serving answer
    /// into JSON (off the serving path), records it, and calls and
    /// compares the candidate.
    fn call<T: serde::Serialize + Clone + Send + 'static>(
        self,
        entry: &'static str,
        serving: &runtime::Result<T>,
        offline: fn(&Runtime, &Policy, &Input) -> runtime::Outcome<T>,
    ) {
        let Self {
            candidates,
            policy,
            candidate,
            input,
        } = self;
        let shadow = candidate.and_then(|candidate| {
            let spare = candidates.runtime.spare(&candidate.tenant);
            if spare.is_none() {
                debug!(%policy, entry, "shadow call skipped: no call thread to spare");
                candidates.tally(&policy, &candidate, &input.ctx.policy_digest, |summary| {
                    summary.skipped();
                    Outcome::Skipped
                });
            }
            Some((candidate, spare?))
        });
        if shadow.is_none() && candidates.recorder.is_none() {
            return;
        }
        let serving: Result<T, Answer> = match serving {
            Ok(value) => Ok(value.clone()),
            Err(error) => Err(Answer::of_error(error)),
        };
        tokio::spawn(async move {
            let serving = serving.map_or_else(|answer| answer, |value| Answer::of_value(&value));
            if let (Some(recorder), Answer::Result(expected)) = (&candidates.recorder, &serving) {
                recorder.record(&policy, entry, &input, expected.clone());
            }
            let Some((candidate, spare)) = shadow else {
                return;
            };
            let job = format!("{}/{}", input.job.namespace, input.job.name);
            let serving_digest = input.ctx.policy_digest.clone();
            let outcome = candidates
                .runtime
                .shadow(spare, candidate.policy(), input, offline)
                .await;
            let refused = u64::from(
                outcome
                    .report
                    .outbound
                    .refused(crate::outbound::Refusal::Shadow),
            );
            let verdict = compare(&serving, &Answer::of(&outcome.result));
            candidates.tally(&policy, &candidate, &serving_digest, |summary| {
                summary.outbound_refused += refused;
                summary.record(&job, entry, &verdict)
            });
        });
    }
}
