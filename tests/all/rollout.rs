//! A candidate reaching DataJobs step by step, end to end on both servers:
//! a rollout's share is the DataJobs whose uid hashes into it and no
//! other; a candidate that faults is rolled back by the host within its
//! step, the DataJobs it did not reach never noticing; a healthy one steps
//! on to every DataJob, none going back and forth, and is promoted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::policies::configmap::{self, Settings};
use policyhost::policies::rollout::{Phase, Status};
use policyhost::shadow::record;
use policyhost::vocabulary::{POLICY_LABEL, ROLLOUT_STATUS_ANNOTATION};
use serde_json::{Value, json};

use crate::common::cluster::{Env, OperatorSetup, condition, create_namespace, eventually};
use crate::common::process::text;
use crate::common::publishing::{policy_command, push, push_candidate, wait_event};
use crate::common::variants::version;
use crate::common::{for_every_namespace, guest_bytes, scratch};

/// DataJobs of the policy.
const JOBS: usize = 100;
/// The first step's share, in hundredths of a percent.
const SHARE: u64 = 2_000;

/// Whether a DataJob's uid falls in the first `points` of 10,000 buckets:
/// FNV-1a (64 bits) of its bytes, written out here apart from the host's.
fn in_share(uid: &str, points: u64) -> bool {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash % 10_000 < points
}

/// What the DataJob watch saw of each DataJob: the digest and readiness of
/// every status it went through.
type Seen = Arc<Mutex<BTreeMap<String, Vec<(String, bool)>>>>;

fn watch_statuses(env: &Env) -> Seen {
    let seen: Seen = Arc::default();
    let (into, jobs) = (Arc::clone(&seen), env.jobs());
    tokio::spawn(async move {
        let events = watcher(jobs, watcher::Config::default()).applied_objects();
        futures::pin_mut!(events);
        while let Some(Ok(job)) = events.next().await {
            let Some(digest) = job
                .status
                .as_ref()
                .and_then(|s| s.policy.as_ref())
                .map(|p| p.digest.clone())
            else {
                continue;
            };
            let ready = condition(&job, "Ready").is_some_and(|c| c.status == "True");
            let mut seen = into.lock().expect("the watch's record");
            let states = seen.entry(job.name_any()).or_default();
            if states.last() != Some(&(digest.clone(), ready)) {
                states.push((digest, ready));
            }
        }
    });
    seen
}

/// Waits until every DataJob says `digest_of(name)` reconciled it last.
async fn reconciled_by(env: &Env, what: &str, digest_of: impl Fn(&str) -> String) {
    eventually(what, || async {
        let jobs = env.jobs().list(&ListParams::default()).await.ok()?;
        let done = jobs.items.iter().filter(|job| {
            let by = job
                .status
                .as_ref()
                .and_then(|s| s.policy.as_ref())
                .map(|p| p.digest.as_str());
            by == Some(digest_of(&job.name_any()).as_str())
                && condition(job, "Ready").is_some_and(|c| c.status == "True")
        });
        (done.count() == JOBS).then_some(())
    })
    .await;
}

/// The rollout's status as the host annotated it.
async fn rollout_status(env: &Env) -> Option<Status> {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let map = api.get(&configmap::rollout_name("fanout")).await.ok()?;
    Status::read(
        map.annotations()
            .get(ROLLOUT_STATUS_ANNOTATION)
            .map(String::as_str),
    )
}

async fn wait_phase(env: &Env, phase: Phase) -> Status {
    eventually(&format!("the rollout {phase:?}"), || async {
        rollout_status(env)
            .await
            .filter(|status| status.phase == phase)
    })
    .await
}

/// The recorded calls of `fanout`, per DataJob, in the order they ended:
/// the time of each (its context's clock) and the digest that answered.
fn recorded_calls(dir: &Path) -> BTreeMap<String, Vec<(u64, String)>> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("fanout"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut calls: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for file in files {
        let Ok(case) = std::fs::read_to_string(&file)
            .map_err(|_| ())
            .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|_| ()))
        else {
            continue;
        };
        let name = case["job"]["name"].as_str().unwrap_or_default().to_owned();
        let at = case["context"]["nowUnixMs"].as_u64().unwrap_or_default();
        let digest = case["context"]["policyDigest"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        calls.entry(name).or_default().push((at, digest));
    }
    calls
}

/// The platform team's part: `rollout-fanout`, empty, beside the policy's
/// other ConfigMaps. Returns the policy namespace's ConfigMaps.
async fn create_rollout_map(env: &Env) -> Api<ConfigMap> {
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let empty: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": configmap::rollout_name("fanout")}
    }))
    .expect("a ConfigMap");
    maps.create(&PostParams::default(), &empty)
        .await
        .expect("create rollout-fanout");
    maps
}

fn rollout(env: &Env, args: &[&str]) {
    let mut all = vec!["rollout", "fanout"];
    all.extend_from_slice(args);
    let out = policy_command(env, &all);
    assert!(
        out.status.success(),
        "policy rollout {args:?}: {}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_serves_its_hashed_share_rolls_back_when_it_faults_and_steps_on_when_it_holds() {
    let mut env = Env::cluster_only().await;
    let calls = scratch().join(format!("{}-calls", env.namespace));
    env.start_operator(OperatorSetup {
        record_calls: Some(record::Config {
            dir: calls.clone(),
            per_policy: 100_000,
        }),
        ..OperatorSetup::configmaps()
    })
    .await;
    let first = guest_bytes("fanout");
    let second = version(&first, "second");
    let h1 = push(&env, "fanout", &first)
        .await
        .loaded_digest
        .expect("v1 serves");
    for i in 0..JOBS {
        env.create_job(
            &format!("job-{i:03}"),
            "fanout",
            json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]}),
        )
        .await;
    }
    reconciled_by(&env, "every DataJob by v1", |_| h1.clone()).await;
    let uids: BTreeMap<String, String> = env
        .jobs()
        .list(&ListParams::default())
        .await
        .expect("list the DataJobs")
        .items
        .iter()
        .map(|job| (job.name_any(), job.uid().unwrap_or_default()))
        .collect();
    let share: BTreeSet<String> = uids
        .iter()
        .filter(|(_, uid)| in_share(uid, SHARE))
        .map(|(name, _)| name.clone())
        .collect();
    assert!(
        (8..=35).contains(&share.len()),
        "about a fifth: {}",
        share.len()
    );
    let seen = watch_statuses(&env);
    let maps = create_rollout_map(&env).await;

    // A candidate that faults on every call: rolled back within its first
    // step, once it made 5 calls, by the faults gate.
    let faulty = push_candidate(
        &env,
        "fanout",
        &guest_bytes("panics"),
        &for_every_namespace(),
    )
    .await
    .loaded_digest
    .expect("the faulty candidate loads");
    rollout(
        &env,
        &[
            "start",
            "--step",
            "20%",
            "--step",
            "100%",
            "--step-wait",
            "1h",
            "--min-calls",
            "5",
            "--force",
        ],
    );
    let back = wait_phase(&env, Phase::RolledBack).await;
    assert!(
        back.message.contains("gate faults: the candidate"),
        "{}",
        back.message
    );
    assert_eq!(back.step, 0, "within its first step");
    wait_event(
        &env,
        &configmap::rollout_name("fanout"),
        "RolloutRolledBack",
        "gate faults",
    )
    .await;
    reconciled_by(&env, "every DataJob back on v1", |_| h1.clone()).await;
    {
        let seen = seen.lock().expect("the watch's record");
        let reached: BTreeSet<&String> = seen
            .iter()
            .filter(|(_, states)| states.iter().any(|(digest, _)| *digest == faulty))
            .map(|(name, _)| name)
            .collect();
        assert!(
            reached.len() >= 5,
            "the faulty step reached its share: {reached:?}"
        );
        for name in &reached {
            assert!(
                share.contains(*name),
                "{name} is outside the share and was reached"
            );
        }
        for (name, states) in seen.iter().filter(|(name, _)| !share.contains(*name)) {
            assert!(
                states.iter().all(|(digest, ready)| *digest == h1 && *ready),
                "{name} noticed: {states:?}"
            );
        }
    }
    let metrics = env.operator().metrics.render();
    assert!(
        metrics.contains(
            r#"policyhost_rollout_transitions_total{policy="fanout",reason="RolledBack"} 1"#
        ),
        "{metrics}"
    );

    // A healthy candidate: its first step serves the share and no other.
    let h2 = push_candidate(&env, "fanout", &second, &for_every_namespace())
        .await
        .loaded_digest
        .expect("the candidate loads");
    rollout(
        &env,
        &[
            "start",
            "--step",
            "20%",
            "--step",
            "100%",
            "--step-wait",
            "1h",
        ],
    );
    let stepped = wait_phase(&env, Phase::Progressing).await;
    assert_eq!(stepped.digest, h2);
    let by = |name: &str| {
        if share.contains(name) {
            h2.clone()
        } else {
            h1.clone()
        }
    };
    reconciled_by(&env, "the share by v2, the others by v1", by).await;
    let status = policy_command(&env, &["rollout", "fanout", "status"]);
    assert!(
        text(&status).contains("phase:  Progressing, step 1 of 2"),
        "{}",
        text(&status)
    );
    // Started again with a short wait: the same share first, then everyone.
    rollout(
        &env,
        &[
            "start",
            "--step",
            "20%",
            "--step",
            "100%",
            "--step-wait",
            "3s",
        ],
    );
    let complete = wait_phase(&env, Phase::Complete).await;
    assert_eq!(complete.step, 1);
    reconciled_by(&env, "every DataJob by v2", |_| h2.clone()).await;
    wait_event(
        &env,
        &configmap::rollout_name("fanout"),
        "RolloutComplete",
        "held every gate",
    )
    .await;

    // Each DataJob's calls, in order: none by v1 after one by v2, and none
    // outside the share by v2 before the 100 % step began.
    let everyone_at = complete.step_started_ms;
    let per_job = eventually("every DataJob's v2 calls recorded", || async {
        let calls = recorded_calls(&calls);
        let all = uids.keys().all(|name| {
            calls
                .get(name)
                .is_some_and(|calls| calls.iter().any(|(_, digest)| *digest == h2))
        });
        all.then_some(calls)
    })
    .await;
    for (name, calls) in &per_job {
        let first_v2 = calls
            .iter()
            .position(|(_, digest)| *digest == h2)
            .expect("a v2 call");
        assert!(
            calls[first_v2..].iter().all(|(_, digest)| *digest == h2),
            "{name} went back to another version: {calls:?}"
        );
        if !share.contains(name) {
            assert!(
                calls[first_v2].0 >= everyone_at,
                "{name} got v2 before its step: {calls:?}"
            );
        }
    }
    {
        let seen = seen.lock().expect("the watch's record");
        for (name, states) in seen.iter() {
            let digests: Vec<&String> = states.iter().map(|(digest, _)| digest).collect();
            let from_v2 = digests.iter().position(|digest| **digest == h2);
            assert!(
                from_v2.is_none_or(|at| digests[at..].iter().all(|digest| **digest == h2)),
                "{name} flapped: {digests:?}"
            );
        }
    }

    // Promoted: v2 serves, the rollout ConfigMap is retired.
    let promoted = policy_command(&env, &["promote", "fanout", "--wait"]);
    assert!(promoted.status.success(), "{}", text(&promoted));
    let map = maps
        .get(&configmap::rollout_name("fanout"))
        .await
        .expect("still there");
    assert!(map.labels().get(POLICY_LABEL).is_none(), "retired: {map:?}");
    assert!(map.data.unwrap_or_default().is_empty(), "retired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_step_reaches_that_namespace_only_and_pause_abort_and_resume_do_what_they_say()
{
    let mut env = Env::cluster_only().await;
    let ci = format!("{}-ci", env.namespace);
    create_namespace(&env.client, &ci).await;
    let setup = || OperatorSetup {
        extra_namespaces: vec![ci.clone()],
        ..OperatorSetup::configmaps()
    };
    env.start_operator(setup()).await;
    let first = guest_bytes("fanout");
    let h1 = push(&env, "fanout", &first)
        .await
        .loaded_digest
        .expect("v1 serves");
    let params = json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]});
    let ci_jobs: Api<DataJob> = Api::namespaced(env.client.clone(), &ci);
    for i in 0..3 {
        env.create_job(&format!("main-{i}"), "fanout", params.clone())
            .await;
        let job = DataJob::new(
            &format!("ci-{i}"),
            DataJobSpec {
                policy: "fanout".into(),
                params: params.as_object().cloned().unwrap_or_default(),
                ..DataJobSpec::default()
            },
        );
        ci_jobs
            .create(&PostParams::default(), &job)
            .await
            .expect("create a CI DataJob");
    }
    // Which version answered each DataJob last, by namespace.
    let main_jobs = env.jobs();
    let main_namespace = env.namespace.clone();
    let versions = || async {
        let mut by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for api in [main_jobs.clone(), ci_jobs.clone()] {
            for job in api.list(&ListParams::default()).await.ok()?.items {
                let digest = job
                    .status
                    .as_ref()
                    .and_then(|s| s.policy.as_ref())?
                    .digest
                    .clone();
                by.entry(job.namespace().unwrap_or_default())
                    .or_default()
                    .insert(digest);
            }
        }
        Some(by)
    };
    let expect = |main: &str, in_ci: &str| {
        BTreeMap::from([
            (main_namespace.clone(), BTreeSet::from([main.to_owned()])),
            (ci.clone(), BTreeSet::from([in_ci.to_owned()])),
        ])
    };
    let wait_versions = |what: &'static str, want: BTreeMap<String, BTreeSet<String>>| {
        let versions = &versions;
        async move {
            eventually(what, || async { versions().await.filter(|by| *by == want) }).await;
        }
    };
    wait_versions("every DataJob on v1", expect(&h1, &h1)).await;
    let maps = create_rollout_map(&env).await;
    let h2 = push_candidate(
        &env,
        "fanout",
        &version(&first, "second"),
        &for_every_namespace(),
    )
    .await
    .loaded_digest
    .expect("the candidate loads");

    rollout(
        &env,
        &[
            "start",
            "--step",
            &ci,
            "--step",
            "100%",
            "--step-wait",
            "1h",
        ],
    );
    wait_versions("the CI namespace on v2, the other on v1", expect(&h1, &h2)).await;

    // A pin comes before the rollout: one CI DataJob pinned to v1 goes back
    // to it inside the step, its neighbours stay on v2; unpinned, it
    // follows the step again.
    let pins = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(configmap::pins_name("fanout")),
            ..kube::api::ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    maps.create(&PostParams::default(), &pins)
        .await
        .expect("create pins-fanout");
    let one = format!("{ci}/ci-0");
    let pinned = policy_command(&env, &["pin", "fanout", &one, &h1, "--wait"]);
    assert!(pinned.status.success(), "{}", text(&pinned));
    let both = BTreeMap::from([
        (main_namespace.clone(), BTreeSet::from([h1.clone()])),
        (ci.clone(), BTreeSet::from([h1.clone(), h2.clone()])),
    ]);
    wait_versions("the pinned CI DataJob on v1 inside the step", both).await;
    let on_v1 = ci_jobs.get("ci-0").await.expect("ci-0");
    assert_eq!(
        on_v1.status.and_then(|s| s.policy).map(|p| p.digest),
        Some(h1.clone()),
        "the pinned DataJob is the one on v1"
    );
    let unpinned = policy_command(&env, &["unpin", "fanout", &one, "--wait"]);
    assert!(unpinned.status.success(), "{}", text(&unpinned));
    wait_versions("unpinned, back in the step", expect(&h1, &h2)).await;

    // Another leader (here: the operator started again) carries the
    // rollout on from the step the annotation says, the same wait.
    let before = wait_phase(&env, Phase::Progressing).await;
    env.stop_operator().await;
    env.start_operator(setup()).await;
    wait_versions("after a new leader, still the step", expect(&h1, &h2)).await;

    rollout(&env, &["pause"]);
    let paused = wait_phase(&env, Phase::Paused).await;
    // Written by the new leader's driver: the step it found, not restarted.
    assert_eq!(
        (paused.step, paused.step_started_ms),
        (before.step, before.step_started_ms),
        "the same step, its wait not started again"
    );
    let status = policy_command(&env, &["rollout", "fanout", "status"]);
    assert!(
        text(&status).contains("phase:  Paused, step 1 of 2"),
        "{}",
        text(&status)
    );
    let listed = policy_command(&env, &["list"]);
    let row = text(&listed)
        .lines()
        .find(|line| line.starts_with("fanout "))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("fanout's row: {}", text(&listed)));
    assert!(row.contains(" Paused 1 "), "{row}");

    // A plan that does not read is refused, and the rollout in force stays.
    let patch = |data: Value| {
        let maps = maps.clone();
        async move {
            maps.patch(
                &configmap::rollout_name("fanout"),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "data": data })),
            )
            .await
            .expect("patch the plan");
        }
    };
    patch(json!({"stepWait": "soon"})).await;
    let refused = wait_event(
        &env,
        &configmap::rollout_name("fanout"),
        "PolicyRejected",
        "data.stepWait",
    )
    .await;
    assert!(
        refused
            .message
            .unwrap_or_default()
            .contains("InvalidConfig")
    );
    assert!(
        env.operator().shared.registry.canary("fanout").is_some(),
        "still in force"
    );
    patch(json!({"stepWait": "1h"})).await;

    rollout(&env, &["abort"]);
    let aborted = wait_phase(&env, Phase::Aborted).await;
    assert!(
        aborted.message.contains("back on the serving version"),
        "{}",
        aborted.message
    );
    wait_versions("every DataJob back on v1", expect(&h1, &h1)).await;

    // After an abort, resume starts again from the first step.
    rollout(&env, &["resume"]);
    eventually("the rollout started again", || async {
        rollout_status(&env)
            .await
            .filter(|s| s.phase == Phase::Progressing && s.reason == "StepStarted")
    })
    .await;
    wait_versions("the CI namespace on v2 again", expect(&h1, &h2)).await;

    // Another candidate is not the one planned: the DataJobs it reached go
    // back to the serving version at once, and nothing moves on.
    push_candidate(
        &env,
        "fanout",
        &version(&first, "third"),
        &for_every_namespace(),
    )
    .await;
    wait_versions(
        "every DataJob back on v1 for another candidate",
        expect(&h1, &h1),
    )
    .await;

    // A step reaches only the namespaces the candidate allows: the others
    // stay on the serving version.
    let only_main = Settings::parse(&BTreeMap::from([(
        "allowedNamespaces".to_owned(),
        env.namespace.clone(),
    )]))
    .expect("settings");
    let h4 = push_candidate(&env, "fanout", &version(&first, "fourth"), &only_main)
        .await
        .loaded_digest
        .expect("the candidate loads");
    rollout(&env, &["start", "--step", "100%", "--step-wait", "1h"]);
    wait_versions(
        "the candidate where it is allowed, v1 elsewhere",
        expect(&h4, &h1),
    )
    .await;
}
