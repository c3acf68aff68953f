//! Candidate versions end to end: a candidate published beside the serving
//! version answers the same inputs, only the serving version's answers are
//! applied, and what differs is counted, kept on the candidate's ConfigMap,
//! shown by `policy diff` and gates `policy promote`; recorded calls replay
//! through a candidate offline.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::metrics::PolicyResult;
use policyhost::policies::Role;
use policyhost::policies::configmap::{self, Settings};
use policyhost::policies::report::Annotations;
use policyhost::shadow::record;
use policyhost::shadow::summary::Examined;
use policyhost::shadow::{DRY_RUN_BURST, DRY_RUNS_PER_MINUTE, Summary};
use serde_json::{Value, json};

use crate::common::cluster::{Env, OperatorSetup, condition, eventually, phase};
use crate::common::process::{policyhost, text};
use crate::common::publishing::{dry_runs, policy_map, push, push_candidate, push_map, wait_event};
use crate::common::variants::version;
use crate::common::{for_every_namespace, guest, guest_bytes};
use policyhost::vocabulary::POLICY_LABEL;

/// The label `fanout-next` adds a child for.
const EXTRA_LABEL: &str = "policyhost.dev/test-extra";
/// The label `fanout-next` renames the workers' container for.
const RENAME_LABEL: &str = "policyhost.dev/test-rename";

fn fanout(replicas: u32) -> Value {
    json!({"replicas": replicas, "image": "busybox:1.36", "command": ["true"]})
}

/// Publishes `fanout-next` as the candidate of `fanout`, for every namespace.
async fn push_next_candidate(env: &Env) -> Annotations {
    push_candidate(
        env,
        "fanout",
        &guest_bytes("fanout-next"),
        &for_every_namespace(),
    )
    .await
}

/// The candidate summary the host wrote on `candidate-<policy>`, once
/// `done` holds for it.
async fn summary_when(
    env: &Env,
    policy: &str,
    what: &str,
    done: impl Fn(&Summary) -> bool,
) -> Summary {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let name = configmap::candidate_name(policy);
    eventually(&format!("the summary on {name}: {what}"), || {
        let (api, name, done) = (api.clone(), name.clone(), &done);
        async move {
            let map = api.get_opt(&name).await.ok()??;
            Summary::read(Some(map.annotations())).filter(|s| done(s))
        }
    })
    .await
}

/// Shadow calls of `policy` by result, from the operator's metrics.
fn shadow_calls(env: &Env, policy: &str) -> BTreeMap<&'static str, u64> {
    let family = &env.operator().metrics.shadow_calls_total;
    ["same", "differs", "fault", "skipped"]
        .into_iter()
        .map(|result| {
            let labels = PolicyResult {
                policy: policy.to_owned(),
                result: result.to_owned(),
            };
            (result, family.get_or_create(&labels).get())
        })
        .collect()
}

/// The counts of a summary, labelled as the metric labels them.
fn counts(summary: &Summary) -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("same", summary.same),
        ("differs", summary.differs),
        ("fault", summary.faults),
        ("skipped", summary.skipped),
    ])
}

/// Shadow calls that were made (not skipped).
fn compared(env: &Env, policy: &str) -> u64 {
    let calls = shadow_calls(env, policy);
    calls["same"] + calls["differs"] + calls["fault"]
}

/// Creates a fanout DataJob of one worker, labelled `labels`.
async fn create_labelled(env: &Env, name: &str, labels: &[(&str, &str)]) {
    create_workers(env, name, 1, labels).await;
}

/// Creates a fanout DataJob of `replicas` workers, labelled `labels`.
async fn create_workers(env: &Env, name: &str, replicas: u32, labels: &[(&str, &str)]) {
    let Value::Object(params) = fanout(replicas) else {
        unreachable!("fanout params are an object");
    };
    let mut job = DataJob::new(
        name,
        DataJobSpec {
            policy: "fanout".into(),
            params,
            ..DataJobSpec::default()
        },
    );
    job.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    env.jobs()
        .create(&PostParams::default(), &job)
        .await
        .expect("create the DataJob");
}

async fn wait_succeeded(env: &Env, name: &str) -> DataJob {
    env.wait_job(name, "Succeeded", |job| phase(job) == Some("Succeeded"))
        .await
}

/// Reconciles `name` once more (a new annotation) and waits until a
/// shadow call of `policy` was made for it: with the operator idle, the
/// call threads are free and the call is not skipped.
async fn shadow_once_more(env: &Env, policy: &str, name: &str) {
    let before = compared(env, policy);
    let patch = json!({"metadata": {"annotations": {"test.policyhost.dev/poke": name}}});
    env.jobs()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("annotate the DataJob");
    eventually(&format!("a shadow call for {name}"), || async {
        (compared(env, policy) > before).then_some(())
    })
    .await;
}

/// Settings of a candidate whose every call ends at a 200 ms deadline, for
/// DataJobs of every namespace.
fn short_timeout() -> Settings {
    Settings::parse(&BTreeMap::from([
        ("timeout".to_owned(), "200ms".to_owned()),
        ("allowedNamespaces".to_owned(), "*".to_owned()),
    ]))
    .expect("settings")
}

/// The digest of the version of `policy` the operator serves.
fn serving_digest_of(env: &Env, policy: &str) -> Option<String> {
    env.operator()
        .shared
        .registry
        .get(policy)
        .map(|p| p.digest().to_hex())
        .ok()
}

/// `policyhost policy COMMAND fanout`, in this test's cluster.
fn fanout_command(env: &Env, kubeconfig: &Path, command: &str) -> std::process::Output {
    policyhost(&in_cluster(env, kubeconfig, &["policy", command, "fanout"]))
}

/// Asserts that `output` is a refusal that says `says`.
fn assert_refused(output: &std::process::Output, says: &str) {
    assert!(!output.status.success(), "{}", text(output));
    assert!(text(output).contains(says), "{}", text(output));
}

/// `args` for the built binary, in this test's policy namespace and cluster.
fn in_cluster<'a>(env: &'a Env, kubeconfig: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend([
        "--namespace",
        env.policy_namespace.as_str(),
        "--kubeconfig",
        kubeconfig.to_str().expect("a UTF-8 path"),
    ]);
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_candidate_answers_the_same_on_every_call_and_promote_swaps_it_in() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let serving = guest_bytes("fanout");
    push(&env, "fanout", &serving).await;
    let candidate = version(&serving, "next");
    let verdict = push_candidate(&env, "fanout", &candidate, &for_every_namespace()).await;
    assert_eq!(verdict.error, None, "the candidate loads");
    let candidate_digest = verdict.loaded_digest.expect("the candidate loads");
    wait_event(
        &env,
        "candidate-fanout",
        "CandidateLoaded",
        "candidate of policy `fanout`",
    )
    .await;

    for name in ["a", "b", "c"] {
        env.create_job(name, "fanout", fanout(2)).await;
    }
    for name in ["a", "b", "c"] {
        wait_succeeded(&env, name).await;
    }
    for name in ["a", "b", "c"] {
        shadow_once_more(&env, "fanout", name).await;
    }
    let summary = summary_when(&env, "fanout", "3 same calls or more", |s| s.same >= 3).await;
    assert_eq!((summary.differs, summary.faults), (0, 0), "{summary:?}");
    assert!(summary.jobs.is_empty(), "{summary:?}");
    assert_eq!(summary.digest, candidate_digest);
    let calls = shadow_calls(&env, "fanout");
    assert_eq!((calls["differs"], calls["fault"]), (0, 0), "{calls:?}");

    let kubeconfig = env.kubeconfig_file();
    let listed = policyhost(&in_cluster(
        &env,
        &kubeconfig,
        &["policy", "list", "-o", "json"],
    ));
    assert!(listed.status.success(), "{}", text(&listed));
    let rows: Vec<Value> = serde_json::from_slice(&listed.stdout).expect("JSON rows");
    assert_eq!(rows.len(), 1, "serving and candidate on one row: {rows:?}");
    assert_eq!(rows[0]["configmap"], "policy-fanout");
    assert_eq!(rows[0]["candidate"]["configmap"], "candidate-fanout");
    assert_eq!(
        rows[0]["candidate"]["servingDigest"],
        candidate_digest.as_str()
    );
    let rust_sdk = format!("rust {}", env!("CARGO_PKG_VERSION"));
    assert_eq!(rows[0]["sdk"], rust_sdk.as_str(), "{rows:?}");
    assert_eq!(rows[0]["candidate"]["sdk"], rust_sdk.as_str(), "{rows:?}");

    let diff = fanout_command(&env, &kubeconfig, "diff");
    assert!(
        diff.status.success(),
        "no difference, exit 0: {}",
        text(&diff)
    );

    let promoted = policyhost(&in_cluster(
        &env,
        &kubeconfig,
        &["policy", "promote", "fanout", "--wait"],
    ));
    assert!(promoted.status.success(), "{}", text(&promoted));
    assert!(text(&promoted).contains(&format!("serving sha256:{candidate_digest}")));
    let shared = Arc::clone(&env.operator().shared);
    eventually("the candidate to be retired", || {
        let shared = Arc::clone(&shared);
        async move {
            let candidate = shared.registry.version("fanout", Role::Candidate);
            candidate.is_none().then_some(())
        }
    })
    .await;
    let registry = &env.operator().shared.registry;
    assert_eq!(
        registry.get("fanout").map(|p| p.digest().to_hex()).ok(),
        Some(candidate_digest),
        "the candidate serves"
    );
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let retired = maps
        .get("candidate-fanout")
        .await
        .expect("the ConfigMap stays");
    assert!(!retired.labels().contains_key(POLICY_LABEL), "{retired:?}");
    assert!(retired.binary_data.is_none(), "its content goes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_adding_a_child_to_one_datajob_in_ten_differs_for_exactly_that_one() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    push(&env, "fanout", &guest_bytes("fanout")).await;
    push_next_candidate(&env).await;
    let names: Vec<String> = (0..10).map(|i| format!("job-{i}")).collect();
    for name in &names {
        let labels: &[(&str, &str)] = if name == "job-3" {
            &[(EXTRA_LABEL, "yes")]
        } else {
            &[]
        };
        create_labelled(&env, name, labels).await;
    }
    for name in &names {
        wait_succeeded(&env, name).await;
    }
    // Every DataJob gets a shadow call of its own, whatever was skipped
    // while they all started at once.
    for name in &names {
        shadow_once_more(&env, "fanout", name).await;
    }
    env.wait_idle().await;
    let calls = shadow_calls(&env, "fanout");
    let summary = summary_when(&env, "fanout", "the metrics' counts", |s| {
        counts(s) == calls
    })
    .await;
    let job3 = format!("{}/job-3", env.namespace);
    let listed: Vec<&str> = summary.jobs.iter().map(|j| j.job.as_str()).collect();
    assert_eq!(listed, [job3.as_str()], "{summary:?}");
    let pointer = "/children/ConfigMap:job-3-extra: not expected, got";
    assert!(
        summary.jobs[0]
            .differences
            .iter()
            .any(|d| d.starts_with(pointer)),
        "{summary:?}"
    );
    assert_eq!(summary.faults, 0);
    assert!(summary.same >= 9, "{summary:?}");

    // Only the serving version's answer was applied.
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    assert!(maps.get_opt("job-3-extra").await.expect("get").is_none());

    let event = wait_event(&env, "candidate-fanout", "CandidateDiffers", "job-3").await;
    assert!(
        event
            .message
            .unwrap_or_default()
            .contains("policy diff fanout")
    );

    let kubeconfig = env.kubeconfig_file();
    let diff = fanout_command(&env, &kubeconfig, "diff");
    let shown = text(&diff);
    assert_eq!(diff.status.code(), Some(1), "a difference, exit 1: {shown}");
    assert!(
        shown.contains(&format!("DIFF   reconcile {job3}")),
        "{shown}"
    );
    assert!(shown.contains(pointer), "{shown}");
    let line = format!(
        "{} same, {} differ, {} faults, {} skipped",
        calls["same"], calls["differs"], calls["fault"], calls["skipped"]
    );
    assert!(
        shown.contains(&line),
        "policy diff and the metrics agree: {line}\n{shown}"
    );
}

/// A candidate renaming a Pod's container: the API server refuses it for
/// every Pod that exists (a Pod's containers are immutable), which a
/// comparison of answers cannot tell. The dry runs say so, change nothing,
/// and `promote` waits until `policy diff` has shown the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_the_api_server_would_refuse_shows_each_refusal_and_promote_waits_until_they_are_examined()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let serving_digest = push(&env, "fanout", &guest_bytes("fanout"))
        .await
        .loaded_digest
        .expect("loads");
    push_next_candidate(&env).await;
    create_labelled(&env, "renamed", &[(RENAME_LABEL, "yes")]).await;
    wait_succeeded(&env, "renamed").await;
    let before = env
        .pods()
        .get("renamed-worker-0")
        .await
        .expect("the worker Pod")
        .resource_version();
    // Its Pod exists now: the next shadow call's dry run is an update.
    let log = env.requests();
    let mark = log.as_ref().map(|log| log.mark());
    shadow_once_more(&env, "fanout", "renamed").await;
    let summary = summary_when(&env, "fanout", "a refusal", |s| s.refused >= 1).await;
    // What the operator sent for the worker since: dry runs only (the
    // request log, or the real API server's audit log).
    if let (Some(log), Some(mark)) = (&log, mark) {
        let writes: Vec<_> = eventually("the dry run in the request log", || async {
            let writes: Vec<_> = log
                .operator_since(mark, &env.namespace)
                .into_iter()
                .filter(|r| r.resource == "pods" && r.name == "renamed-worker-0")
                .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
                .collect();
            (!writes.is_empty()).then_some(writes)
        })
        .await;
        assert!(
            writes.iter().all(|r| r.dry_run),
            "only dry runs for the worker: {writes:?}"
        );
    }
    let job = format!("{}/renamed", env.namespace);
    let listed = summary
        .jobs
        .iter()
        .find(|j| j.job == job)
        .expect("the DataJob is listed");
    let refusal = listed
        .refused
        .first()
        .expect("the refusal is kept beside the differences");
    // Two containers: the create's fields are not handed to the apply in a
    // dry run (it cannot write), so the old container stays beside the new.
    assert_eq!(
        refusal,
        "Pod:renamed-worker-0: 422 Invalid: spec.containers: Forbidden: pod updates may not add or remove containers"
    );
    assert!(
        !refusal.contains("Status {"),
        "one line, no debug dump: {refusal}"
    );
    let refused = dry_runs(&env, "fanout", "refused");
    assert!(refused >= 1, "the metric counts it");

    // The dry runs wrote nothing: the Pod is the same object, with the
    // serving version's container.
    let pod = env
        .pods()
        .get("renamed-worker-0")
        .await
        .expect("the worker Pod");
    assert_eq!(pod.resource_version(), before, "not written");
    let names: Vec<String> = pod
        .spec
        .map(|spec| spec.containers.into_iter().map(|c| c.name).collect())
        .unwrap_or_default();
    assert_eq!(names, ["worker"]);

    let kubeconfig = env.kubeconfig_file();
    assert_refused(
        &fanout_command(&env, &kubeconfig, "promote"),
        "in dry runs, 0 of them shown by `policy diff`",
    );
    assert_eq!(serving_digest_of(&env, "fanout"), Some(serving_digest));
    let diff = fanout_command(&env, &kubeconfig, "diff");
    let shown = text(&diff);
    assert!(
        shown.contains("REFUSED Pod:renamed-worker-0: 422 Invalid: "),
        "{shown}"
    );
    assert!(
        shown.contains("children refused by the API server's dry run"),
        "{shown}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let marked = maps.get("candidate-fanout").await.expect("the candidate");
    assert!(
        Examined::read(marked.annotations()).refused >= summary.refused,
        "marked examined"
    );

    // Promoted all the same, the version's apply is refused as the dry
    // run said: one clear condition naming the child and the field.
    let promoted = fanout_command(&env, &kubeconfig, "promote");
    assert!(promoted.status.success(), "{}", text(&promoted));
    let job = env
        .wait_job("renamed", "Ready=False ImmutableChange", |job| {
            condition(job, "Ready").is_some_and(|c| c.reason == "ImmutableChange")
        })
        .await;
    let message = condition(&job, "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.starts_with("Pod renamed-worker-0: server-side apply failed: 422 Invalid: ")
            && message.contains("pod updates may not"),
        "{message}"
    );
    assert!(
        !message.contains("ApiError") && !message.contains('\n') && message.len() <= 600,
        "one line, the server's words once: {message}"
    );
    // The pass's decision names the write the server refused, and its code.
    let record = job.status.as_ref().map(|s| s.decisions.clone());
    let record = record.unwrap_or_default();
    let newest = record.last().expect("a decision");
    assert_eq!(newest.outcome, "ImmutableChange", "{record:?}");
    assert!(
        newest.writes.iter().any(|w| w
            .starts_with("refused: Pod renamed-worker-0: server-side apply failed: 422 Invalid: ")),
        "{record:?}"
    );
    // Not retried until something changes: a retry with this setup's
    // backoff (50 ms doubling) would apply the Pod again several times
    // within the window.
    if let Some(log) = env.requests() {
        let since = log.mark();
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let applies = log
            .since(since)
            .into_iter()
            .filter(|r| r.verb == "patch" && r.name == "renamed-worker-0")
            .count();
        assert_eq!(applies, 0, "the refused apply is not retried");
    }
    let events = crate::common::publishing::events_about(
        &env,
        &env.namespace,
        ("DataJob", "renamed"),
        "ImmutableChange",
    )
    .await;
    assert_eq!(events.len(), 1, "one Event: {events:?}");
    assert!(
        events[0].count.unwrap_or(1) == 1 && events[0].series.is_none(),
        "recorded once: {events:?}"
    );
}

/// A candidate asking for a name another DataJob's child holds is refused
/// as the serving apply would refuse it, before any request reaches the
/// API server, and `policy diff` names the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_asking_for_a_name_another_datajob_holds_is_refused_without_a_request() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    push(&env, "fanout", &guest_bytes("fanout")).await;
    push(&env, "claims-name", &guest_bytes("claims-name")).await;
    env.create_job("holder", "claims-name", json!({"name": "taker-extra"}))
        .await;
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    eventually("the holder's ConfigMap", || async {
        maps.get_opt("taker-extra").await.ok()?.map(drop)
    })
    .await;
    push_next_candidate(&env).await;
    let since = env.requests().map(|log| log.mark());
    create_labelled(&env, "taker", &[(EXTRA_LABEL, "1")]).await;
    wait_succeeded(&env, "taker").await;
    let summary = summary_when(&env, "fanout", "a refusal", |s| s.refused >= 1).await;
    let refused = &summary.jobs[0].refused;
    assert!(
        refused.iter().any(|line| line
            .starts_with("ConfigMap:taker-extra: already exists and is ")
            && line.contains("holder")),
        "{summary:?}"
    );
    let kubeconfig = env.kubeconfig_file();
    let shown = text(&fanout_command(&env, &kubeconfig, "diff"));
    assert!(
        shown.contains("REFUSED ConfigMap:taker-extra: already exists and is "),
        "{shown}"
    );
    if let (Some(log), Some(since)) = (env.requests(), since) {
        let sent = log
            .since(since)
            .into_iter()
            .filter(|r| r.name == "taker-extra" && r.verb != "get" && r.verb != "list")
            .count();
        assert_eq!(sent, 0, "no request for the held name");
    }
}

/// A candidate that differs in every child of a wide DataJob cannot make
/// the operator flood the API server with dry runs: past the candidate's
/// budget, children are counted unchecked, not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidates_dry_runs_stay_within_its_budget() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    push(&env, "fanout", &guest_bytes("fanout")).await;
    let started = std::time::Instant::now();
    push_next_candidate(&env).await;
    let wide = DRY_RUN_BURST + 10;
    create_workers(&env, "wide", wide, &[(RENAME_LABEL, "yes")]).await;
    let summary = summary_when(&env, "fanout", "children left unchecked", |s| {
        s.unchecked >= 1
    })
    .await;
    let sent = |result: &str| {
        env.operator()
            .metrics
            .shadow_dry_runs_total
            .get_or_create(&PolicyResult {
                policy: "fanout".into(),
                result: result.into(),
            })
            .get()
    };
    let minutes = started.elapsed().as_secs().div_ceil(60);
    let allowed = u64::from(DRY_RUN_BURST) + u64::from(DRY_RUNS_PER_MINUTE) * minutes;
    let (accepted, refused) = (sent("accepted"), sent("refused"));
    assert!(
        accepted + refused <= allowed,
        "{accepted} + {refused} dry runs in {minutes} minutes, at most {allowed}"
    );
    assert!(sent("unchecked") >= 1 && summary.unchecked >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_loops_in_reconcile_and_cleanup_is_counted_as_faults_and_promote_waits_until_they_are_examined()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let serving = guest_bytes("fanout");
    let serving_digest = push(&env, "fanout", &serving)
        .await
        .loaded_digest
        .expect("loads");
    let settings = short_timeout();
    push_candidate(&env, "fanout", &guest_bytes("infinite-loop"), &settings).await;
    for name in ["a", "b"] {
        env.create_job(name, "fanout", fanout(1)).await;
    }
    for name in ["a", "b"] {
        let job = wait_succeeded(&env, name).await;
        let acting = job
            .status
            .and_then(|s| s.policy)
            .expect("a policy in the status");
        assert_eq!(acting.digest, serving_digest, "the serving version acted");
    }
    let summary = summary_when(&env, "fanout", "a fault", |s| s.faults >= 1).await;
    let fault = summary.jobs[0].fault.clone().unwrap_or_default();
    assert!(
        fault.starts_with("DeadlineExceeded") || fault.starts_with("OutOfFuel"),
        "{fault}"
    );
    assert!(shadow_calls(&env, "fanout")["fault"] >= 1);

    // Cleanup too: the candidate's cleanup loops, the serving version's
    // answers done, and the DataJob goes.
    env.delete_job_and_wait("a").await;
    let cleaned = format!("{}/a", env.namespace);
    let summary = summary_when(&env, "fanout", "a cleanup fault", |s| {
        s.jobs
            .iter()
            .any(|j| j.call == "cleanup" && j.job == cleaned && j.fault.is_some())
    })
    .await;

    let kubeconfig = env.kubeconfig_file();
    assert_refused(
        &fanout_command(&env, &kubeconfig, "promote"),
        "or promote with --force",
    );
    assert_eq!(
        serving_digest_of(&env, "fanout"),
        Some(serving_digest),
        "nothing was promoted"
    );

    let diff = fanout_command(&env, &kubeconfig, "diff");
    assert!(text(&diff).contains("FAULT  "), "{}", text(&diff));
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let marked = maps.get("candidate-fanout").await.expect("the candidate");
    let examined = Examined::read(marked.annotations());
    assert_eq!(
        (examined.candidate.as_str(), examined.serving.as_str()),
        (summary.digest.as_str(), summary.serving.as_str()),
        "marked for the pair shown"
    );
    assert!(
        examined.faults >= summary.faults,
        "{} of {}",
        examined.faults,
        summary.faults
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_call_thread_to_spare_every_shadow_call_is_skipped() {
    let env = Env::start_with(OperatorSetup {
        call_threads: 1,
        ..OperatorSetup::configmaps()
    })
    .await;
    let serving = guest_bytes("fanout");
    push(&env, "fanout", &serving).await;
    push_candidate(
        &env,
        "fanout",
        &version(&serving, "next"),
        &for_every_namespace(),
    )
    .await;
    env.create_job("a", "fanout", fanout(1)).await;
    wait_succeeded(&env, "a").await;
    let summary = summary_when(&env, "fanout", "a skipped call", |s| s.skipped >= 1).await;
    assert_eq!(
        summary.same + summary.differs + summary.faults,
        0,
        "{summary:?}"
    );
    let calls = shadow_calls(&env, "fanout");
    assert!(calls["skipped"] >= 1, "{calls:?}");
    assert_eq!(calls["same"], 0, "one thread is never spare");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_calls_replay_through_a_candidate_as_policy_diff_shows_them() {
    let dir = crate::common::scratch().join(format!("recorded-{}", std::process::id()));
    let mut env = Env::cluster_only().await;
    env.start_operator(OperatorSetup {
        record_calls: Some(record::Config {
            dir: dir.clone(),
            per_policy: 50,
        }),
        ..OperatorSetup::configmaps()
    })
    .await;
    push(&env, "fanout", &guest_bytes("fanout")).await;
    create_labelled(&env, "plain", &[]).await;
    create_labelled(&env, "extra", &[(EXTRA_LABEL, "yes")]).await;
    for name in ["plain", "extra"] {
        wait_succeeded(&env, name).await;
    }
    let recorded = dir.join("fanout");
    let files = eventually("recorded calls of both DataJobs", || async {
        let files: Vec<_> = std::fs::read_dir(&recorded).ok()?.flatten().collect();
        let texts: Vec<String> = files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f.path()).ok())
            .collect();
        let both = ["plain", "extra"].iter().all(|name| {
            texts
                .iter()
                .any(|t| t.contains(&format!("\"name\": \"{name}\"")))
        });
        both.then_some(files)
    })
    .await;
    use std::os::unix::fs::PermissionsExt as _;
    let dir_mode = std::fs::metadata(&recorded)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700, "{}", recorded.display());
    for file in &files {
        let mode = file.metadata().expect("metadata").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", file.path().display());
    }

    let replay = |component: &Path| {
        policyhost(&[
            "policy",
            "test",
            "--replay",
            recorded.to_str().expect("a UTF-8 path"),
            component.to_str().expect("a UTF-8 path"),
        ])
    };
    let same = replay(&guest("fanout"));
    assert!(same.status.success(), "{}", text(&same));
    assert!(
        text(&same).contains(" 0 differ, 0 faults"),
        "{}",
        text(&same)
    );

    let next = replay(&guest("fanout-next"));
    let shown = text(&next);
    assert_eq!(next.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains(&format!("DIFF   reconcile {}/extra (", env.namespace)),
        "{shown}"
    );
    assert!(
        shown.contains("/children/ConfigMap:extra-extra: not expected, got"),
        "{shown}"
    );
    assert!(
        !shown.contains("/plain ("),
        "only the labelled DataJob differs: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_or_misnamed_candidate_changes_nothing() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let serving = push(&env, "fanout", &guest_bytes("fanout"))
        .await
        .loaded_digest
        .expect("loads");
    let refused = push_candidate(
        &env,
        "fanout",
        &guest_bytes("keyvalue-import"),
        &for_every_namespace(),
    )
    .await;
    assert!(
        refused
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("UnsupportedImport")),
        "{refused:?}"
    );
    // On a strict host only `candidate-fanout` may be fanout's candidate.
    let mut misnamed = configmap::into_candidate(
        policy_map(
            &env,
            "fanout",
            &guest_bytes("fanout-next"),
            &for_every_namespace(),
        ),
        "fanout",
    );
    misnamed.metadata.name = Some("fanout-next".into());
    let verdict = push_map(&env, &misnamed).await;
    assert!(
        verdict
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("NameMismatch")),
        "{verdict:?}"
    );

    let registry = &env.operator().shared.registry;
    assert!(registry.version("fanout", Role::Candidate).is_none());
    create_labelled(&env, "a", &[(EXTRA_LABEL, "yes")]).await;
    let job = wait_succeeded(&env, "a").await;
    let acting = job.status.and_then(|s| s.policy).expect("a policy");
    assert_eq!(acting.digest, serving);
    assert_eq!(
        compared(&env, "fanout") + shadow_calls(&env, "fanout")["skipped"],
        0
    );
}

/// Reconciles `name` once more with a fresh annotation.
async fn poke(env: &Env, name: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {"test.policyhost.dev/poke": value}}});
    env.jobs()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("annotate the DataJob");
}

/// What `policy promote` and `policy diff` rely on belongs to the pair
/// they compare: faults shown for one candidate do not count for the
/// next, and a candidate compared only with a serving version that was
/// replaced since is not promoted over the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_relies_only_on_the_evidence_of_the_pair_it_compares() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let kubeconfig = env.kubeconfig_file();
    let fanout_bytes = guest_bytes("fanout");
    let first = push(&env, "fanout", &fanout_bytes)
        .await
        .loaded_digest
        .expect("loads");
    let settings = short_timeout();
    let looping = guest_bytes("infinite-loop");
    push_candidate(&env, "fanout", &looping, &settings).await;
    env.create_job("a", "fanout", fanout(1)).await;
    wait_succeeded(&env, "a").await;
    // Many faults of the first candidate, every one shown.
    for round in 0..3 {
        poke(&env, "a", &format!("first-{round}")).await;
        summary_when(&env, "fanout", "faults", |s| s.faults > round).await;
    }
    let diff = fanout_command(&env, &kubeconfig, "diff");
    assert!(text(&diff).contains("FAULT  "), "{}", text(&diff));

    // A new candidate that faults once: its fault was never shown.
    let next = push_candidate(&env, "fanout", &version(&looping, "next"), &settings)
        .await
        .loaded_digest
        .expect("the next candidate loads");
    poke(&env, "a", "next").await;
    summary_when(&env, "fanout", "the next candidate's fault", |s| {
        s.digest == next && s.faults >= 1
    })
    .await;
    assert_refused(
        &fanout_command(&env, &kubeconfig, "promote"),
        "0 of them shown by `policy diff`",
    );

    // A candidate that answers as the serving version does, compared...
    let same = push_candidate(&env, "fanout", &version(&fanout_bytes, "same"), &settings)
        .await
        .loaded_digest
        .expect("the same candidate loads");
    poke(&env, "a", "same").await;
    summary_when(&env, "fanout", "the same candidate compared", |s| {
        s.digest == same && s.serving == first && s.same >= 1
    })
    .await;
    // ...then the DataJob goes, and a newer serving version is pushed:
    // nothing compares the candidate with it.
    env.delete_job_and_wait("a").await;
    let newer = push(&env, "fanout", &version(&fanout_bytes, "newer"))
        .await
        .loaded_digest
        .expect("the newer version loads");
    assert_refused(
        &fanout_command(&env, &kubeconfig, "promote"),
        &format!("was compared with sha256:{first}, which no longer serves (sha256:{newer} does)"),
    );
    assert_eq!(
        serving_digest_of(&env, "fanout"),
        Some(newer),
        "the newer version still serves"
    );
    let diff = fanout_command(&env, &kubeconfig, "diff");
    assert!(
        text(&diff).contains("which no longer serves"),
        "{}",
        text(&diff)
    );
}

/// A Secret child's values never leave through the shadow (its summary,
/// the Event, `policy diff`), and a change in them still shows as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secrets_values_are_masked_in_the_shadow_and_a_change_still_shows() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let next = guest_bytes("fanout-next");
    let serving = push(&env, "fanout", &next)
        .await
        .loaded_digest
        .expect("loads");
    let candidate = push_candidate(
        &env,
        "fanout",
        &version(&next, "token"),
        &for_every_namespace(),
    )
    .await
    .loaded_digest
    .expect("the candidate loads");
    // Each version writes its digest, reversed, as the Secret's token.
    let tokens: Vec<String> = [&serving, &candidate]
        .iter()
        .map(|digest| digest.chars().rev().collect())
        .collect();
    create_labelled(&env, "etl", &[("policyhost.dev/test-secret", "yes")]).await;
    let summary = summary_when(&env, "fanout", "the Secret's difference", |s| {
        s.differs >= 1
    })
    .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let applied = eventually("the serving version's Secret", || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("etl-token").await.ok().flatten() }
    })
    .await;
    assert!(
        applied.data.is_some_and(|data| data.contains_key("token")),
        "the serving version's Secret is applied"
    );
    let lines: Vec<&String> = summary
        .jobs
        .iter()
        .flat_map(|job| &job.differences)
        .collect();
    assert_eq!(
        lines,
        [r#"/children/Secret:etl-token/data/token: expected "*** (before)", got "*** (after)""#],
        "{summary:?}"
    );
    let kubeconfig = env.kubeconfig_file();
    let diff = text(&fanout_command(&env, &kubeconfig, "diff"));
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let annotated = maps
        .get(&configmap::candidate_name("fanout"))
        .await
        .expect("the candidate's ConfigMap");
    let event = wait_event(
        &env,
        &configmap::candidate_name("fanout"),
        "CandidateDiffers",
        "Secret:etl-token",
    )
    .await;
    let events = event.message.unwrap_or_default();
    let published = [
        ("policy diff", diff.clone()),
        ("summary", format!("{:?}", annotated.annotations())),
        ("event", events),
    ];
    for (what, published) in &published {
        for token in &tokens {
            assert!(!published.contains(token.as_str()), "{what}: {published}");
        }
    }
    assert!(diff.contains("*** (after)"), "{diff}");
}
