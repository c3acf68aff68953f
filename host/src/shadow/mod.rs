//! Candidate versions: a policy's next version, called beside the serving
//! one on exactly the same inputs, its answers compared and never applied.
//!
//! # Expected flow
//!
//! 1. A ConfigMap labelled `policyhost.dev/role: candidate`
//!    (`candidate-<policy>` on a strict host) is loaded like any version,
//!    with the policy's own grant, and put in the [`Registry`] in the
//!    [`Role::Candidate`].
//! 2. Each reconcile and cleanup of a DataJob of the policy clones its
//!    inputs before the serving call ([`Shadow::beside`]). Once the
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
//! 4. Where a candidate's `reconcile` answer differs, the children it would
//!    create or change are sent to the API server as dry runs
//!    ([`crate::apply::dry_run`]): the operator's identity, field manager
//!    and ownership rules, in the policy's share of the write budget, and
//!    at most [`DRY_RUNS_PER_MINUTE`] per candidate (a burst of
//!    [`DRY_RUN_BURST`]). What the server refuses is kept in the summary
//!    (`refused`), beside the differences.
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
//!   off the reconcile's path; its only API requests are the dry runs,
//!   which write nothing.
//! - A shadow call has no side effect: no outbound request leaves the
//!   host. One the serving call made the same way is answered from the
//!   serving call's record ([`crate::outbound::record`]); any other is
//!   refused ([`crate::outbound::Refusal::Shadow`]), and the summary says
//!   how many were. Both calls' requests are compared with the answers.
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
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use kube::Client;
use tokio::sync::Notify;
use tracing::{Instrument as _, debug, debug_span, field};

use self::diff::{Answer, Verdict, compare};
use self::record::Recorder;
pub use self::summary::{Outcome, Summary};
use crate::apply::dry_run::{DryRun, dry_run};
use crate::cache::{ChildRecord, Children};
use crate::crd::DataJob;
use crate::fair::{self, Share, Tenant};
use crate::metrics::Metrics;
use crate::outbound::Recorded;
use crate::policies::{Registry, Role, Version};
use crate::runtime::{self, Digest, Input, Policy, Runtime, ValidChild};
use crate::traces;

/// Dry runs one candidate may send a minute, on average: a candidate that
/// differs everywhere costs the API server at most this, whatever the
/// number of DataJobs.
pub const DRY_RUNS_PER_MINUTE: u32 = 120;
/// Dry runs one candidate may send at once above the average.
pub const DRY_RUN_BURST: u32 = 20;

/// How the shadow reaches the API server for its dry runs.
#[derive(Clone)]
pub struct Server {
    /// The operator's client (throttled, fenced).
    pub client: Client,
    /// The children caches the operator plans its writes with.
    pub children: Arc<dyn Children>,
    /// The operator instance (the `managed-by` label of children).
    pub instance: String,
}

/// The version a call is made with: its digest, and whether a pin chose it
/// (a pinned call is no serving call, whatever digest the pin holds).
#[derive(Debug, Clone, Copy)]
pub struct Acting {
    /// The version's digest.
    pub digest: Digest,
    /// Whether the DataJob is pinned.
    pub pinned: bool,
}

/// What a serving reconcile worked on: the DataJob and its children, for
/// the dry run of its candidate's children.
pub struct Applying {
    /// The DataJob.
    pub job: Arc<DataJob>,
    /// Its children, as the serving call saw them.
    pub children: Vec<Arc<ChildRecord>>,
    /// The policy's tenant, whose share of the write budget the dry runs take.
    pub tenant: Tenant,
}

/// The shadow caller: calls each policy's candidate (from the
/// [`Registry`]) beside its serving version, keeps what the calls came to,
/// and records serving calls (`--record-calls`).
pub struct Shadow {
    registry: Arc<Registry>,
    runtime: Runtime,
    metrics: Arc<Metrics>,
    recorder: Option<Recorder>,
    /// The API server, for dry runs; none, none are sent.
    server: Option<Server>,
    /// What each policy's candidate's shadow calls came to, by policy name.
    tracks: Mutex<HashMap<String, Arc<Track>>>,
    /// Woken when a summary changed.
    changed: Notify,
}

/// What one candidate version's shadow calls came to.
pub struct Track {
    /// The candidate's digest.
    digest: Digest,
    /// Its shadow calls' tenant in the call scheduler, apart from the
    /// serving version's so that they never count against it.
    tenant: Tenant,
    /// Its dry runs' budget.
    dry_runs: DefaultDirectRateLimiter,
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

impl Track {
    fn new(policy: &str, digest: Digest) -> Self {
        Self {
            tenant: Tenant::new(format!("{policy} (candidate)"), Share::DEFAULT),
            dry_runs: RateLimiter::direct(
                Quota::per_minute(NonZeroU32::new(DRY_RUNS_PER_MINUTE).unwrap_or(NonZeroU32::MIN))
                    .allow_burst(NonZeroU32::new(DRY_RUN_BURST).unwrap_or(NonZeroU32::MIN)),
            ),
            state: Mutex::new(Tracked {
                summary: Summary::new(digest.to_hex()),
                dirty: true,
                announced: false,
            }),
            digest,
        }
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

impl Shadow {
    /// Calls the candidates `registry` holds, and sends the children of
    /// those that differ to `server` as dry runs; serving calls are
    /// recorded when `record` says where.
    #[must_use]
    pub fn new(
        registry: Arc<Registry>,
        runtime: Runtime,
        metrics: Arc<Metrics>,
        server: Option<Server>,
        record: Option<record::Config>,
    ) -> Arc<Self> {
        Arc::new(Self {
            registry,
            runtime,
            metrics,
            server,
            recorder: record.map(Recorder::new),
            tracks: Mutex::default(),
            changed: Notify::new(),
        })
    }

    /// What the shadow calls of `policy`'s candidate came to, if it has one.
    #[must_use]
    pub fn summary(&self, policy: &str) -> Option<Summary> {
        let candidate = self.registry.version(policy, Role::Candidate)?;
        Some(self.track(policy, &candidate).summary())
    }

    /// The track of `candidate`, the candidate of `policy`: a new version
    /// starts one afresh; the same version loaded again (its grant
    /// changed) keeps its summary.
    fn track(&self, policy: &str, candidate: &Version) -> Arc<Track> {
        // Compared as bytes: this runs beside every serving call.
        let digest = candidate.policy.digest();
        let mut tracks = self.tracks();
        match tracks.get(policy) {
            Some(track) if track.digest == digest => Arc::clone(track),
            _ => {
                let track = Arc::new(Track::new(policy, digest));
                tracks.insert(policy.to_owned(), Arc::clone(&track));
                drop(tracks);
                self.changed.notify_one();
                track
            }
        }
    }

    /// Every candidate in the registry with its track; the tracks of
    /// candidates no longer there are dropped.
    fn candidates(&self) -> Vec<(String, Arc<Version>, Arc<Track>)> {
        let candidates = self.registry.versions(Role::Candidate);
        self.tracks()
            .retain(|policy, _| candidates.iter().any(|(name, _)| name == policy));
        candidates
            .into_iter()
            .map(|(policy, version)| {
                let track = self.track(&policy, &version);
                (policy, version, track)
            })
            .collect()
    }

    /// Keeps the inputs of one call of `policy`'s version `acting` when
    /// calls are recorded (whichever version acts: serving, pinned, or the
    /// candidate where a rollout reaches), or when it is the serving
    /// version and has a candidate to call on them (the candidate is
    /// compared with the serving version only, never with a pinned
    /// DataJob's call, even to the serving digest): the candidate is called
    /// once the serving call has answered ([`Beside::reconcile`],
    /// [`Beside::cleanup`]).
    #[must_use]
    pub fn beside(self: &Arc<Self>, policy: &str, acting: Acting, input: &Input) -> Option<Beside> {
        let serving = self.registry.version(policy, Role::Serving);
        let candidate = self
            .registry
            .version(policy, Role::Candidate)
            .filter(|candidate| candidate.policy.digest() != acting.digest)
            .filter(|_| !acting.pinned)
            .filter(|_| serving.is_some_and(|serving| serving.policy.digest() == acting.digest));
        if candidate.is_none() && self.recorder.is_none() {
            return None;
        }
        let candidate = candidate.map(|version| {
            let track = self.track(policy, &version);
            (Arc::clone(&version.policy), track)
        });
        Some(Beside {
            shadow: Arc::clone(self),
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
        track: &Track,
        serving: &str,
        recorded: impl FnOnce(&mut Summary) -> Outcome,
    ) {
        let outcome = {
            let mut state = track.state();
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

    fn tracks(&self) -> MutexGuard<'_, HashMap<String, Arc<Track>>> {
        self.tracks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The API server's dry run of the children `desired` of the candidate
    /// of `policy`, for the DataJob the serving call worked on, within the
    /// track's budget and the policy's share of the write budget.
    async fn dry_run(
        &self,
        policy: &str,
        track: &Track,
        applying: &Applying,
        desired: &[ValidChild],
    ) -> Option<DryRun> {
        let server = self.server.as_ref()?;
        let checked = fair::writing_for(
            applying.tenant.clone(),
            dry_run(
                &server.client,
                &*server.children,
                &server.instance,
                &applying.job,
                desired,
                &applying.children,
                || track.dry_runs.check().is_ok(),
            ),
        )
        .await;
        let refused = checked.refused.len() as u64;
        let accepted = u64::from(checked.sent).saturating_sub(refused);
        self.metrics.shadow_dry_runs(policy, "accepted", accepted);
        self.metrics.shadow_dry_runs(policy, "refused", refused);
        self.metrics
            .shadow_dry_runs(policy, "unchecked", u64::from(checked.unchecked));
        Some(checked)
    }
}

/// A serving answer the shadow compares, and the children it would write.
pub trait Shadowed: serde::Serialize + Clone + Send + 'static {
    /// The children the answer desires (none for a cleanup).
    fn desired(&self) -> &[ValidChild];
}

impl Shadowed for runtime::Reconciled {
    fn desired(&self) -> &[ValidChild] {
        &self.children
    }
}

impl Shadowed for runtime::Cleaned {
    fn desired(&self) -> &[ValidChild] {
        &[]
    }
}

/// The two answers, each with the outbound requests its call made (as
/// `outbound`, a list of request lines), when either made any: a cleanup
/// that would reach something else outside differs there.
fn with_requests(
    serving: Answer,
    candidate: Answer,
    served: Vec<String>,
    asked: Vec<String>,
) -> (Answer, Answer) {
    if served.is_empty() && asked.is_empty() {
        return (serving, candidate);
    }
    (
        serving.with_outbound(served),
        candidate.with_outbound(asked),
    )
}

/// What happens beside one serving call: its record, and the candidate's
/// shadow call.
pub struct Beside {
    shadow: Arc<Shadow>,
    policy: String,
    /// The candidate version and its track.
    candidate: Option<(Arc<Policy>, Arc<Track>)>,
    input: Input,
}

impl Beside {
    /// Calls the candidate's `reconcile` beside the serving version's
    /// answer `serving`, in the background; skipped when no call thread is
    /// spare. Where the answers differ, the candidate's children go to the
    /// API server as dry runs, for what `applying` holds.
    pub fn reconcile(
        self,
        serving: &runtime::Outcome<runtime::Reconciled>,
        applying: impl FnOnce() -> Applying,
    ) {
        self.call(
            "reconcile",
            serving,
            Runtime::reconcile_offline,
            Some(applying),
        );
    }

    /// Calls the candidate's `cleanup` beside the serving version's answer.
    pub fn cleanup(self, serving: &runtime::Outcome<runtime::Cleaned>) {
        self.call(
            "cleanup",
            serving,
            Runtime::cleanup_offline,
            None::<fn() -> Applying>,
        );
    }

    /// Takes a spare call thread for the candidate, or counts the shadow
    /// call skipped; then, in the background, turns the serving answer
    /// into JSON (off the serving path), records it, and calls and
    /// compares the candidate.
    fn call<T: Shadowed>(
        self,
        entry: &'static str,
        serving: &runtime::Outcome<T>,
        offline: fn(&Runtime, &Policy, &Input, &[Recorded]) -> runtime::Outcome<T>,
        applying: Option<impl FnOnce() -> Applying>,
    ) {
        let Self {
            shadow,
            policy,
            candidate,
            input,
        } = self;
        let call = candidate.and_then(|(candidate, track)| {
            let spare = shadow.runtime.spare(&track.tenant);
            if spare.is_none() {
                debug!(%policy, entry, "shadow call skipped: no call thread to spare");
                shadow.tally(&policy, &track, &input.ctx.policy_digest, |summary| {
                    summary.skipped();
                    Outcome::Skipped
                });
            }
            Some((candidate, track, spare?))
        });
        if call.is_none() && shadow.recorder.is_none() {
            return;
        }
        let served = serving.requests.clone();
        let serving: Result<T, Answer> = match &serving.result {
            Ok(value) => Ok(value.clone()),
            Err(error) => Err(Answer::of_error(error)),
        };
        let applying = call.as_ref().and(applying).map(|applying| applying());
        let traced = traces::context::is_traced(&tracing::Span::current());
        let span = match &call {
            Some((candidate, _, _)) if traced => debug_span!(
                target: traces::TARGET,
                "shadow call",
                "otel.name" = format_args!("shadow {entry}"),
                policy = %policy,
                candidate = %candidate.digest(),
                entry,
                verdict = field::Empty,
            ),
            _ => tracing::Span::none(),
        };
        let shadowed = async move {
            let serving = serving.map_or_else(|answer| answer, |value| Answer::of_value(&value));
            if let (Some(recorder), Answer::Result(expected)) = (&shadow.recorder, &serving) {
                recorder.record(&policy, entry, &input, expected.clone());
            }
            let Some((candidate, track, spare)) = call else {
                return;
            };
            let job = format!("{}/{}", input.job.namespace, input.job.name);
            let serving_digest = input.ctx.policy_digest.clone();
            let redactor = candidate.redactor().clone();
            let lines = |requests: &[Recorded]| -> Vec<String> {
                requests
                    .iter()
                    .map(|r| redactor.redact(&r.line()).into_owned())
                    .collect()
            };
            let served_lines = lines(&served);
            let outcome = shadow
                .runtime
                .shadow(spare, candidate, input, served, offline)
                .await;
            let refused = u64::from(
                outcome
                    .report
                    .outbound
                    .refused(crate::outbound::Refusal::Shadow),
            );
            let (serving, candidate) = with_requests(
                serving,
                Answer::of(&outcome.result),
                served_lines,
                lines(&outcome.requests),
            );
            let verdict = compare(&serving, &candidate);
            tracing::Span::current().record("verdict", verdict.name());
            let checked = match (&verdict, &outcome.result, &applying) {
                (Verdict::Differs(_), Ok(answer), Some(applying)) => {
                    shadow
                        .dry_run(&policy, &track, applying, answer.desired())
                        .await
                }
                _ => None,
            };
            shadow.tally(&policy, &track, &serving_digest, |summary| {
                summary.outbound_refused += refused;
                let outcome = summary.record(&job, entry, &verdict);
                if let Some(checked) = &checked {
                    summary.server_said(&job, entry, checked);
                }
                outcome
            });
        };
        tokio::spawn(shadowed.instrument(span));
    }
}
