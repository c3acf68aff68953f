//! The machine against a model of the API server, property-tested.
//!
//! The model server holds one DataJob as JSON and applies the host's real
//! JSON patches with real RFC 6902 semantics (a failed `test` is a 422); it
//! refuses new finalizers once deletion started and removes the object when
//! its last finalizer goes, as Kubernetes does. The model host keeps a cache
//! that lags the server until a watch event (`Sync`) arrives, and the memory a
//! restart loses. Random sequences interleave reconciles (with any cleanup
//! outcome, and conflicts or errors injected on any write), restarts, watch
//! deliveries, deletion, re-creation under the same name, other controllers
//! adding and removing their finalizers, force-release annotations, the
//! policy leaving and returning, and time passing.
//!
//! Checked on every write the server accepts:
//! - the finalizer leaves a DataJob only if `cleanup` returned `done` for its
//!   uid, or the DataJob carried the force-release annotation;
//! - no other controller's finalizer is ever removed by the host, and the
//!   host's finalizer is never there twice.
//!
//! And on every `cleanup` call made from a cache that shows the server's
//! state (as after a restart, which lists afresh): the call comes no sooner
//! than the wait the last *recorded* call earned (its failures' backoff,
//! the longest once blocked, or the `retry-after` floor), however often the
//! host restarted or reconciled in between.
//!
//! And at the end, once the faults stop and cleanup succeeds: a deleted
//! DataJob has been released, a live one holds the finalizer.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::machine::{
    self, Action, After, Availability, Budget, Observed, Outcome, Pacing, Recall,
};
use super::patch;
use super::status::{self, Record};
use crate::crd::DataJob;
use crate::queue::Backoff;
use crate::vocabulary::{FINALIZER, FORCE_RELEASE_ANNOTATION};

/// What the server does with one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Conflict,
    ServerError,
}

/// What `cleanup` returns when it is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Done,
    RetryAfter,
    Fail,
}

#[derive(Debug, Clone)]
enum Op {
    /// The watch delivers the server's current state to the cache.
    Sync,
    /// One reconcile; its writes meet `faults` in order (then none).
    Reconcile {
        answer: Answer,
        faults: Vec<Fault>,
        /// Whether the cache catches up before a conflict is retried.
        fresh_on_conflict: bool,
    },
    /// The host process dies and starts again: memory lost, cache re-listed.
    Restart,
    /// A person deletes the DataJob.
    Delete,
    /// A DataJob of the same name is created again (if the old one is gone).
    Recreate,
    /// Another controller adds its finalizer (at the front or the back).
    OtherAdds { front: bool },
    /// Another controller removes its finalizer.
    OtherRemoves,
    /// A person annotates the DataJob for force release.
    ForceRelease,
    /// The policy leaves or returns.
    TogglePolicy,
    /// Time passes.
    Advance { seconds: u32 },
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        6 => Just(Fault::None),
        3 => Just(Fault::Conflict),
        1 => Just(Fault::ServerError),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let answer = prop_oneof![
        Just(Answer::Done),
        Just(Answer::RetryAfter),
        Just(Answer::Fail)
    ];
    prop_oneof![
        5 => Just(Op::Sync),
        8 => (answer, prop::collection::vec(fault(), 0..4), any::<bool>()).prop_map(
            |(answer, faults, fresh_on_conflict)| Op::Reconcile { answer, faults, fresh_on_conflict }
        ),
        1 => Just(Op::Restart),
        1 => Just(Op::Delete),
        1 => Just(Op::Recreate),
        1 => any::<bool>().prop_map(|front| Op::OtherAdds { front }),
        1 => Just(Op::OtherRemoves),
        1 => prop::bool::weighted(0.3).prop_map(|yes| if yes { Op::ForceRelease } else { Op::Sync }),
        1 => Just(Op::TogglePolicy),
        1 => (1u32..120).prop_map(|seconds| Op::Advance { seconds }),
    ]
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// The API server, holding at most one DataJob (name `j`).
struct Server {
    object: Option<Value>,
    resource_version: u64,
    uids: u32,
    now: Timestamp,
    /// Ground truth: the uids whose `cleanup` returned `done`.
    done: HashSet<String>,
    /// Ground truth: the earliest next `cleanup` call the last recorded call
    /// allows, by uid and recorded attempt count (a later write of a stale
    /// status may replace that record; then it no longer binds).
    not_before: Option<(String, u32, Timestamp)>,
    others: u32,
}

/// Why the server refused a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    NotFound,
    Conflict,
    Invalid,
    ServerError,
}

impl Server {
    fn new() -> Self {
        let mut server = Self {
            object: None,
            resource_version: 0,
            uids: 0,
            now: Timestamp::from_second(1_700_000_000).unwrap(),
            done: HashSet::new(),
            not_before: None,
            others: 0,
        };
        server.create();
        server
    }

    fn create(&mut self) {
        self.uids += 1;
        let mut job = DataJob::of_policy("ns", "j", "p");
        job.metadata.uid = Some(format!("uid-{}", self.uids));
        job.metadata.generation = Some(1);
        self.commit(serde_json::to_value(&job).unwrap());
    }

    /// Stores `object`, or removes it if it is deleting with no finalizer left.
    fn commit(&mut self, mut object: Value) {
        self.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        // Stored objects omit empty lists, as Go's `omitempty` does.
        if let Some(metadata) = object["metadata"].as_object_mut()
            && metadata
                .get("finalizers")
                .is_some_and(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty))
        {
            metadata.remove("finalizers");
        }
        if deleting(&object) && finalizers(&object).is_empty() {
            self.object = None;
        } else {
            self.object = Some(object);
        }
    }

    fn inject(fault: Fault) -> Result<(), Refused> {
        match fault {
            Fault::None => Ok(()),
            Fault::Conflict => Err(Refused::Conflict),
            Fault::ServerError => Err(Refused::ServerError),
        }
    }

    /// A JSON patch from the host.
    fn patch(&mut self, fault: Fault, patch: &json_patch::Patch) -> Result<(), Refused> {
        Self::inject(fault)?;
        let old = self.object.clone().ok_or(Refused::NotFound)?;
        let mut new = old.clone();
        // kube-apiserver's JSON patch reads a missing member as `null` in a `test`.
        if new["metadata"].get("finalizers").is_none() {
            new["metadata"]["finalizers"] = Value::Null;
        }
        json_patch::patch(&mut new, patch).map_err(|_| Refused::Invalid)?;
        let (before, after) = (finalizers(&old), finalizers(&new));
        if deleting(&old) && after.iter().any(|f| !before.contains(f)) {
            return Err(Refused::Invalid); // no new finalizers once deleting
        }
        // The invariant.
        if before.iter().any(|f| f == FINALIZER) && !after.iter().any(|f| f == FINALIZER) {
            let uid = old["metadata"]["uid"].as_str().unwrap_or_default();
            let forced = old["metadata"]["annotations"][FORCE_RELEASE_ANNOTATION] == "true";
            assert!(
                self.done.contains(uid) || forced,
                "the finalizer left {uid} without a successful cleanup or a force release"
            );
        }
        for other in before.iter().filter(|f| *f != FINALIZER) {
            assert!(
                after.contains(other),
                "the host removed {other}: {before:?} -> {after:?}"
            );
        }
        assert!(
            after.iter().filter(|f| *f == FINALIZER).count() <= 1,
            "the finalizer is there twice: {after:?}"
        );
        self.commit(new);
        Ok(())
    }

    /// A status write from the host (server-side apply on the status subresource).
    fn write_status(
        &mut self,
        fault: Fault,
        status: &crate::crd::DataJobStatus,
    ) -> Result<(), Refused> {
        Self::inject(fault)?;
        let mut object = self.object.clone().ok_or(Refused::NotFound)?;
        object["status"] = serde_json::to_value(status).unwrap();
        self.commit(object);
        Ok(())
    }

    fn edit(&mut self, f: impl FnOnce(&mut Value, &mut u32)) {
        if let Some(mut object) = self.object.clone() {
            f(&mut object, &mut self.others);
            self.commit(object);
        }
    }
}

/// The host: a lagging cache and its memory (of `done` answers and of
/// removals that went through), for one uid.
struct Host {
    cache: Option<Value>,
    recall: Option<(String, Recall)>,
    policy_available: bool,
    budget: Budget,
    pacing: Pacing,
}

impl Host {
    fn reconcile(
        &mut self,
        server: &mut Server,
        answer: Answer,
        faults: &[Fault],
        fresh_on_conflict: bool,
    ) {
        let mut faults = faults.iter().copied();
        let mut next_fault = move || faults.next().unwrap_or(Fault::None);
        let Some(job) = self.cached() else {
            self.recall = None;
            return;
        };
        let observed = Observed::of(&job, self.budget);
        let recall = match &self.recall {
            Some((uid, recall)) if *uid == observed.uid => *recall,
            _ => Recall::Nothing,
        };
        let policy = if self.policy_available {
            Availability::Available
        } else {
            Availability::Unavailable("no policy of this name is loaded".into())
        };
        match machine::decide(&observed, recall, &policy, server.now, &self.pacing) {
            Action::AddFinalizer => {
                let _ = server.patch(next_fault(), &patch::add(&job));
            }
            Action::Reconcile | Action::AwaitRelease | Action::AwaitBackoff { .. } => {}
            Action::Nothing => self.recall = None,
            Action::ForceRelease | Action::RemoveFinalizer => {
                self.release(server, &observed.uid, &mut next_fault, fresh_on_conflict);
            }
            Action::ReportPolicyUnavailable { message, .. } => {
                let status =
                    status::terminating(&job, Record::PolicyUnavailable(&message), server.now);
                let _ = server.write_status(next_fault(), &status);
            }
            Action::CallCleanup { attempt } => {
                if self.cache == server.object
                    && let Some((uid, attempts, not_before)) = &server.not_before
                    && *uid == observed.uid
                    && *attempts == observed.attempts
                {
                    assert!(
                        server.now >= *not_before,
                        "cleanup called at {} before {not_before}, the wait the last recorded call earned",
                        server.now
                    );
                }
                let outcome = match answer {
                    Answer::Done => {
                        server.done.insert(observed.uid.clone());
                        Outcome::Done
                    }
                    Answer::RetryAfter => Outcome::RetryAfter(Duration::from_secs(2)),
                    Answer::Fail => Outcome::Failed {
                        reason: "PolicyFailed".into(),
                        message: "planned".into(),
                    },
                };
                match machine::after_cleanup(&observed, attempt, &outcome, server.now, &self.pacing)
                {
                    After::Release => {
                        self.recall = Some((observed.uid.clone(), Recall::Cleaned));
                        self.release(server, &observed.uid, &mut next_fault, fresh_on_conflict);
                    }
                    After::Keep(keep) => {
                        let status = status::terminating(&job, Record::Kept(&keep), server.now);
                        if server.write_status(next_fault(), &status).is_ok() {
                            // What a restart can read back: a retry-after's
                            // own delay is not recorded, its floor is.
                            let wait = if keep.failure.is_none() && keep.exhausted.is_none() {
                                self.pacing.min_retry
                            } else {
                                keep.requeue_after
                            };
                            server.not_before =
                                Some((observed.uid.clone(), keep.attempts, server.now + wait));
                        }
                    }
                }
            }
        }
    }

    /// The removal with its conflict retries, as the controller does it.
    fn release(
        &mut self,
        server: &mut Server,
        uid: &str,
        next_fault: &mut impl FnMut() -> Fault,
        fresh_on_conflict: bool,
    ) {
        for _ in 0..3 {
            let Some(job) = self.cached() else { return };
            let Some(patch) = patch::remove(&job, uid) else {
                return;
            };
            match server.patch(next_fault(), &patch) {
                // Remembered until the cache shows the release.
                Ok(()) | Err(Refused::NotFound) => {
                    self.recall = Some((uid.to_owned(), Recall::Released));
                    return;
                }
                Err(Refused::Conflict | Refused::Invalid) => {
                    if fresh_on_conflict {
                        self.cache.clone_from(&server.object);
                    }
                }
                Err(Refused::ServerError) => return,
            }
        }
    }

    fn cached(&self) -> Option<DataJob> {
        self.cache
            .as_ref()
            .map(|object| serde_json::from_value(object.clone()).expect("a DataJob"))
    }
}

fn run(ops: &[Op]) {
    let mut server = Server::new();
    let mut host = Host {
        cache: server.object.clone(),
        recall: None,
        policy_available: true,
        budget: Budget {
            max_attempts: 3,
            timeout: Duration::from_secs(300),
        },
        pacing: Pacing {
            backoff: Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            min_retry: Duration::from_secs(1),
        },
    };
    for op in ops {
        match op {
            Op::Sync => host.cache.clone_from(&server.object),
            Op::Reconcile {
                answer,
                faults,
                fresh_on_conflict,
            } => host.reconcile(&mut server, *answer, faults, *fresh_on_conflict),
            Op::Restart => {
                host.recall = None;
                host.cache.clone_from(&server.object);
            }
            Op::Delete => {
                let now = server.now;
                server.edit(|object, _| {
                    if !deleting(object) {
                        object["metadata"]["deletionTimestamp"] = json!(now.to_string());
                    }
                });
            }
            Op::Recreate => {
                if server.object.is_none() {
                    server.create();
                }
            }
            Op::OtherAdds { front } => server.edit(|object, others| {
                if deleting(object) {
                    return;
                }
                *others += 1;
                let mut list = finalizers(object);
                let name = format!("example.com/other-{others}");
                if *front {
                    list.insert(0, name);
                } else {
                    list.push(name);
                }
                object["metadata"]["finalizers"] = json!(list);
            }),
            Op::OtherRemoves => server.edit(|object, _| {
                let mut list = finalizers(object);
                if let Some(i) = list.iter().position(|f| f != FINALIZER) {
                    list.remove(i);
                }
                object["metadata"]["finalizers"] = json!(list);
            }),
            Op::ForceRelease => server.edit(|object, _| {
                object["metadata"]["annotations"] = json!({ FORCE_RELEASE_ANNOTATION: "true" });
            }),
            Op::TogglePolicy => host.policy_available = !host.policy_available,
            Op::Advance { seconds } => {
                server.now += Duration::from_secs(u64::from(*seconds));
            }
        }
    }

    // Convergence: the faults stop, the policy is back and its cleanup succeeds.
    host.policy_available = true;
    for _ in 0..10 {
        // Each time past the longest wait a recorded call can earn.
        server.now += host.pacing.backoff.max + host.pacing.min_retry;
        host.cache.clone_from(&server.object);
        host.reconcile(&mut server, Answer::Done, &[], true);
    }
    if let Some(object) = &server.object {
        let job: DataJob = serde_json::from_value(object.clone()).unwrap();
        if deleting(object) {
            assert!(
                !job.finalizers().iter().any(|f| f == FINALIZER),
                "a deleted DataJob was never released: {:?}",
                job.finalizers()
            );
        } else {
            assert_eq!(
                job.finalizers().iter().filter(|f| *f == FINALIZER).count(),
                1,
                "a live DataJob holds the finalizer once"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_finalizer_is_removed_only_after_done_or_force_release_and_deletion_converges(
        ops in prop::collection::vec(op(), 1..80)
    ) {
        run(&ops);
    }
}

#[test]
fn a_stale_cache_after_another_controller_released_does_not_remove_the_wrong_entry() {
    // Another controller's finalizer sits before ours; it releases while our
    // cache still shows it, so our removal's index is off by one.
    run(&[
        Op::OtherAdds { front: false },
        Op::Sync,
        Op::Reconcile {
            answer: Answer::Done,
            faults: vec![],
            fresh_on_conflict: false,
        },
        Op::Sync,
        Op::Delete,
        Op::Sync,
        Op::OtherRemoves,
        Op::Reconcile {
            answer: Answer::Done,
            faults: vec![],
            fresh_on_conflict: false,
        },
    ]);
}

#[test]
fn a_restart_between_done_and_the_removal_calls_cleanup_again() {
    let mut server = Server::new();
    let mut host = Host {
        cache: server.object.clone(),
        recall: None,
        policy_available: true,
        budget: Budget::default(),
        pacing: Pacing::default(),
    };
    host.reconcile(&mut server, Answer::Done, &[], true);
    host.cache.clone_from(&server.object);
    server
        .edit(|object, _| object["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z"));
    host.cache.clone_from(&server.object);
    // Done, then every removal attempt conflicts.
    host.reconcile(&mut server, Answer::Done, &[Fault::Conflict; 3], true);
    assert!(server.object.is_some(), "still held");
    assert!(
        matches!(host.recall, Some((_, Recall::Cleaned))),
        "the host remembers the done answer"
    );
    // A restart forgets it: the next step calls cleanup again, not the removal.
    host.recall = None;
    server.done.clear();
    host.reconcile(&mut server, Answer::Fail, &[], true);
    assert!(
        server.object.is_some(),
        "a failing second cleanup keeps the finalizer"
    );
    host.cache.clone_from(&server.object);
    host.reconcile(&mut server, Answer::Done, &[], true);
    assert!(
        server.object.is_some(),
        "the failure's backoff is not over yet"
    );
    server.now += Duration::from_secs(1);
    host.reconcile(&mut server, Answer::Done, &[], true);
    assert!(server.object.is_none(), "released after the second done");
}
