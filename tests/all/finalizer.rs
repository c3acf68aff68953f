//! The finalizer end to end: a deleted DataJob is released once its policy's
//! cleanup is done and its children are garbage-collected; a failing cleanup
//! keeps the finalizer until it is blocked and only a force release lets it
//! go; a missing policy holds it until the policy returns; conflicts on the
//! removal are retried without touching other controllers' finalizers; and
//! the real `policyhost` process killed by SIGKILL at any point converges.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use policyhost::crd::{CleanupSpec, CleanupStatus, DataJob, DataJobSpec};
use policyhost::policies::{Role, Version};
use serde_json::{Value, json};

use crate::common;
use crate::common::cluster::{Env, OperatorSetup, condition, eventually, phase, policy_dir};
use crate::common::faults::{FaultProxy, Refuse};
use crate::common::history::History;
use policyhost::vocabulary::{FINALIZER, FORCE_RELEASE_ANNOTATION};

const FLAKY: &str = "flaky-cleanup";

fn holds(job: &DataJob) -> bool {
    job.finalizers().iter().any(|f| f == FINALIZER)
}

fn cleanup(job: &DataJob) -> CleanupStatus {
    job.status
        .as_ref()
        .and_then(|s| s.cleanup.clone())
        .unwrap_or_default()
}

fn is_true(job: &DataJob, kind: &str) -> bool {
    condition(job, kind).is_some_and(|c| c.status == "True")
}

/// Creates a DataJob with a cleanup budget and finalizers of its own.
async fn create(
    env: &Env,
    name: &str,
    policy: &str,
    params: Value,
    budget: Option<CleanupSpec>,
    finalizers: &[&str],
) -> DataJob {
    let Value::Object(params) = params else {
        panic!("params must be an object")
    };
    let mut job = DataJob::new(
        name,
        DataJobSpec {
            policy: policy.to_owned(),
            params,
            cleanup: budget,
            ..DataJobSpec::default()
        },
    );
    if !finalizers.is_empty() {
        job.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
    }
    env.jobs()
        .create(&PostParams::default(), &job)
        .await
        .expect("create the DataJob")
}

async fn delete(env: &Env, name: &str) {
    env.jobs()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the DataJob");
}

async fn wait_gone(env: &Env, name: &str) {
    let jobs = env.jobs();
    eventually(&format!("DataJob {name} to be gone"), || {
        let jobs = jobs.clone();
        async move { matches!(jobs.get_opt(name).await, Ok(None)).then_some(()) }
    })
    .await;
}

/// Edits a DataJob's finalizers with a plain update (PUT), as another
/// controller would, retrying on conflicts.
async fn edit_finalizers(env: &Env, name: &str, edit: impl Fn(&mut Vec<String>)) {
    let jobs = env.jobs();
    eventually(&format!("an update of {name}'s finalizers"), || {
        let jobs = jobs.clone();
        let edit = &edit;
        async move {
            let mut job = jobs.get(name).await.ok()?;
            edit(job.finalizers_mut());
            jobs.replace(name, &PostParams::default(), &job).await.ok()
        }
    })
    .await;
}

/// The value of one series of the in-process operator's metrics.
fn metric(env: &Env, series: &str) -> Option<f64> {
    let text = env.operator().metrics.render();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn wait_metric(env: &Env, series: &str, expected: f64) {
    eventually(&format!("{series} = {expected}"), || async move {
        (metric(env, series) == Some(expected)).then_some(())
    })
    .await;
}

/// Warning Events on DataJob `name`: reason -> notes.
async fn warnings(env: &Env, name: &str) -> BTreeMap<String, Vec<String>> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if event.type_.as_deref() == Some("Warning")
            && event.involved_object.name.as_deref() == Some(name)
        {
            by_reason
                .entry(event.reason.unwrap_or_default())
                .or_default()
                .push(event.message.unwrap_or_default());
        }
    }
    by_reason
}

async fn wait_warning(env: &Env, name: &str, reason: &str) -> Vec<String> {
    eventually(
        &format!("a {reason} warning Event on {name}"),
        || async move { warnings(env, name).await.remove(reason) },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_datajob_is_released_once_its_cleanup_is_done_and_its_children_are_collected() {
    let env = Env::start(&["fanout"]).await;
    let history = History::start(&env).await;
    // fanout's cleanup waits for its workers to stop; these run 3 s.
    let params = json!({"replicas": 2, "image": "busybox:1.36", "command": ["true"],
        "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "3"}});
    env.create_job("waits", "fanout", params).await;
    env.wait_job("waits", "the finalizer", holds).await;
    env.wait_pods("waits", "two running workers", |pods| {
        pods.len() == 2
            && pods
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;

    delete(&env, "waits").await;
    let held = env
        .wait_job("waits", "Terminating while the workers run", |j| {
            phase(j) == Some("Terminating") && cleanup(j).attempts >= 1
        })
        .await;
    assert!(
        holds(&held),
        "the finalizer holds while cleanup asks to wait"
    );
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(cleanup(&held).failures, 0);
    assert_eq!(cleanup(&held).last_error, None);
    let pods = env.pods().list(&ListParams::default()).await.expect("pods");
    assert_eq!(
        pods.items.len(),
        2,
        "no child is created or deleted while Terminating"
    );

    wait_gone(&env, "waits").await;
    env.wait_pods("waits", "garbage-collected", <[_]>::is_empty)
        .await;
    history.assert_held_while_terminating("waits");
    assert!(history.released("waits").is_some());
    assert!(
        metric(
            &env,
            r#"policyhost_cleanup_total{policy="fanout",result="retry"}"#
        ) >= Some(1.0)
    );
    assert_eq!(
        metric(
            &env,
            r#"policyhost_cleanup_total{policy="fanout",result="done"}"#
        ),
        Some(1.0)
    );
    wait_metric(
        &env,
        r#"policyhost_pending_finalizers{policy="fanout",state="cleaning"}"#,
        0.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_keeps_failing_holds_the_finalizer_until_blocked_and_only_a_force_release_lets_it_go()
 {
    let env = Env::start(&[FLAKY]).await;
    let history = History::start(&env).await;
    let budget = CleanupSpec {
        max_attempts: Some(3),
        timeout_seconds: None,
    };
    create(
        &env,
        "stuck",
        FLAKY,
        json!({"failures": 1000}),
        Some(budget),
        &[],
    )
    .await;
    env.wait_job("stuck", "reconciled", |j| phase(j) == Some("Running"))
        .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    config_maps.get("stuck-state-0").await.expect("its child");

    delete(&env, "stuck").await;
    let blocked = env
        .wait_job("stuck", "CleanupBlocked", |j| is_true(j, "CleanupBlocked"))
        .await;
    assert!(holds(&blocked));
    assert_eq!(phase(&blocked), Some("Terminating"));
    let reason = |kind| condition(&blocked, kind).map(|c| c.reason.clone());
    assert_eq!(
        reason("CleanupBlocked").as_deref(),
        Some("MaxAttemptsExceeded")
    );
    assert_eq!(reason("CleanupFailed").as_deref(), Some("PolicyFailed"));
    let record = cleanup(&blocked);
    assert_eq!((record.attempts, record.failures), (3, 3));
    let last_error = record.last_error.expect("the last error");
    assert!(
        last_error.contains("planned cleanup failure 3 of 1000 for stuck"),
        "{last_error}"
    );
    wait_metric(
        &env,
        r#"policyhost_pending_finalizers{policy="flaky-cleanup",state="blocked"}"#,
        1.0,
    )
    .await;
    let failed = wait_warning(&env, "stuck", "CleanupFailed").await;
    assert!(
        failed
            .iter()
            .any(|n| n.contains("cleanup attempt 1 failed (PolicyFailed)")),
        "{failed:?}"
    );
    let blocked_notes = wait_warning(&env, "stuck", "CleanupBlocked").await;
    assert!(
        blocked_notes[0].contains("cleanup failed 3 times"),
        "{blocked_notes:?}"
    );

    // Retries go on (at the longest backoff, 5 s here), the finalizer stays.
    let retried = env
        .wait_job("stuck", "a fourth attempt", |j| cleanup(j).failures >= 4)
        .await;
    assert!(holds(&retried));
    assert!(is_true(&retried, "CleanupBlocked"));

    // What a person sees.
    let digest = retried
        .status
        .as_ref()
        .and_then(|s| s.policy.clone())
        .expect("the acting policy")
        .digest;
    let kubeconfig = env.kubeconfig_file();
    let one = status_command(&kubeconfig, &[&format!("{}/stuck", env.namespace)]);
    for expected in [
        "Phase:            Terminating",
        "BLOCKED",
        &format!("flaky-cleanup (digest {digest})"),
        "Last error:       PolicyFailed: ",
        "planned cleanup failure",
        "policyhost.dev/force-release=true",
    ] {
        assert!(one.contains(expected), "{expected:?} missing from\n{one}");
    }
    let all = status_command(
        &kubeconfig,
        &["--all-terminating", "--namespace", &env.namespace],
    );
    let row = all
        .lines()
        .find(|l| l.contains("stuck"))
        .unwrap_or_else(|| panic!("no row in\n{all}"));
    assert!(row.contains(" blocked "), "{all}");

    // Only a person's annotation releases it.
    env.jobs()
        .patch(
            "stuck",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {FORCE_RELEASE_ANNOTATION: "true"}}})),
        )
        .await
        .expect("annotate");
    wait_gone(&env, "stuck").await;
    let forced = wait_warning(&env, "stuck", "ForceReleased").await;
    assert!(forced[0].contains(&digest), "names the digest: {forced:?}");
    assert!(
        forced[0].contains("planned cleanup failure"),
        "names the last error: {forced:?}"
    );
    history.assert_held_while_terminating("stuck");
    assert_eq!(
        metric(
            &env,
            r#"policyhost_force_releases_total{policy="flaky-cleanup"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &env,
            r#"policyhost_cleanup_total{policy="flaky-cleanup",result="done"}"#
        ),
        None,
        "cleanup never succeeded"
    );
    wait_metric(
        &env,
        r#"policyhost_pending_finalizers{policy="flaky-cleanup",state="blocked"}"#,
        0.0,
    )
    .await;
    eventually("its ConfigMap garbage-collected", || {
        let config_maps = config_maps.clone();
        async move { matches!(config_maps.get_opt("stuck-state-0").await, Ok(None)).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_traps_or_runs_out_of_fuel_keeps_the_finalizer_and_is_retried() {
    let env = Env::start(&[FLAKY]).await;
    let history = History::start(&env).await;
    let cases = [
        ("traps", "panic", &["Trap"][..]),
        ("spins", "spin", &["OutOfFuel", "DeadlineExceeded"][..]),
    ];
    for (name, fault, _) in cases {
        let params = json!({"failures": 1, "fault": fault});
        create(&env, name, FLAKY, params, None, &[]).await;
        env.wait_job(name, "reconciled", |j| phase(j) == Some("Running"))
            .await;
    }
    for (name, _, _) in cases {
        delete(&env, name).await;
    }
    for (name, _, reasons) in cases {
        wait_gone(&env, name).await;
        eventually(&format!("the deletion of {name} in the watch"), || async {
            history.released(name)
        })
        .await;
        // The last status written before the release records the fault.
        let last = history.released(name).expect("released");
        let record = cleanup(&last);
        assert_eq!((record.attempts, record.failures), (1, 1), "{name}");
        let failed = condition(&last, "CleanupFailed").expect("CleanupFailed");
        assert!(
            failed.status == "True" && reasons.contains(&failed.reason.as_str()),
            "{name}: {failed:?}"
        );
        history.assert_held_while_terminating(name);
    }
    assert!(
        metric(
            &env,
            r#"policyhost_guest_faults_total{policy="flaky-cleanup",kind="Trap"}"#
        ) >= Some(1.0)
    );
}

/// Deleting a namespace deletes its DataJobs, and the namespace goes only
/// once each of their cleanups succeeded: its finalizers hold each DataJob,
/// and the namespace waits for them (kube-controller-manager's namespace
/// controller on a real cluster, devcluster's own on devcluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_goes_only_after_each_datajobs_cleanup_succeeded() {
    let env = Env::start(&[FLAKY]).await;
    let history = History::start(&env).await;
    let plans = [("once", 1_u32), ("twice", 2), ("thrice", 3)];
    for (name, failures) in plans {
        create(&env, name, FLAKY, json!({"failures": failures}), None, &[]).await;
        env.wait_job(name, "reconciled", |j| phase(j) == Some("Running"))
            .await;
    }
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces
        .delete(&env.namespace, &DeleteParams::default())
        .await
        .expect("delete the namespace");
    eventually("the namespace to go", || async {
        namespaces
            .get_opt(&env.namespace)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    for (name, failures) in plans {
        let last = eventually(&format!("the deletion of {name} in the watch"), || async {
            history.released(name)
        })
        .await;
        // The last status before the release recorded every planned
        // failure: cleanup had failed that often, then succeeded.
        let record = cleanup(&last);
        assert_eq!(record.failures, failures, "{name}: {record:?}");
        history.assert_held_while_terminating(name);
    }
}

/// Runs `policyhost status ARGS --kubeconfig FILE` and returns its stdout.
fn status_command(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new(common::policyhost_bin())
        .arg("status")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("run policyhost status");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "policyhost status {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_policy_holds_the_finalizer_and_cleanup_resumes_when_it_returns() {
    let env = Env::start(&[FLAKY]).await;
    let history = History::start(&env).await;
    create(&env, "orphan", FLAKY, json!({}), None, &[]).await;
    env.wait_job("orphan", "reconciled", |j| phase(j) == Some("Running"))
        .await;
    let registry = &env.operator().shared.registry;
    let version = registry
        .remove(Role::Serving, FLAKY)
        .expect("the policy was in service");

    delete(&env, "orphan").await;
    let waiting = env
        .wait_job("orphan", "PolicyUnavailable", |j| {
            is_true(j, "PolicyUnavailable")
        })
        .await;
    assert!(holds(&waiting));
    assert_eq!(phase(&waiting), Some("Terminating"));
    wait_metric(
        &env,
        r#"policyhost_pending_finalizers{policy="flaky-cleanup",state="policy-unavailable"}"#,
        1.0,
    )
    .await;
    wait_warning(&env, "orphan", "PolicyUnavailable").await;
    assert!(
        env.jobs()
            .get_opt("orphan")
            .await
            .expect("get")
            .is_some_and(|j| holds(&j))
    );

    registry.install(Role::Serving, Version::clone(&version));
    wait_gone(&env, "orphan").await;
    history.assert_held_while_terminating("orphan");
    assert_eq!(
        metric(
            &env,
            r#"policyhost_cleanup_total{policy="flaky-cleanup",result="done"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_on_the_finalizer_removal_are_retried_and_never_remove_another_controllers_finalizer()
 {
    let mut env = Env::cluster_only().await;
    let proxy = FaultProxy::start(env.client_config()).await;
    env.start_operator(OperatorSetup {
        api: Some(proxy.config()),
        ..OperatorSetup::with(&[FLAKY])
    })
    .await;
    create(
        &env,
        "shared",
        FLAKY,
        json!({}),
        None,
        &["example.com/first"],
    )
    .await;
    env.wait_job("shared", "the finalizer after the first", |j| {
        j.finalizers() == ["example.com/first", FINALIZER]
    })
    .await;
    edit_finalizers(&env, "shared", |f| f.push("example.com/last".into())).await;

    // Every PATCH of a DataJob by the operator answers 409 Conflict.
    proxy.refuse(Refuse {
        verb: "patch",
        resource: "datajobs",
        code: 409,
    });
    delete(&env, "shared").await;
    let removals = || {
        proxy
            .refused()
            .iter()
            .filter(|r| r.subresource.is_empty() && r.name == "shared")
            .count()
    };
    eventually("three refused removals", || async {
        (removals() >= 3).then_some(())
    })
    .await;
    // Meanwhile the first controller finishes (with an update: not a PATCH),
    // which moves ours to index 0 under the host's cached view.
    edit_finalizers(&env, "shared", |f| f.retain(|x| x != "example.com/first")).await;
    let still = env.jobs().get("shared").await.expect("get");
    assert_eq!(
        still.finalizers(),
        [FINALIZER, "example.com/last"],
        "nothing lost yet"
    );

    proxy.clear();
    let released = env
        .wait_job("shared", "our finalizer removed", |j| !holds(j))
        .await;
    assert_eq!(
        released.finalizers(),
        ["example.com/last"],
        "exactly our entry was removed"
    );
    assert!(released.meta().deletion_timestamp.is_some());
    assert!(metric(&env, "policyhost_finalizer_conflicts_total") >= Some(3.0));
    assert_eq!(
        metric(
            &env,
            r#"policyhost_cleanup_total{policy="flaky-cleanup",result="done"}"#
        ),
        Some(1.0),
        "the removal is retried; cleanup is not called again"
    );

    edit_finalizers(&env, "shared", Vec::clear).await;
    wait_gone(&env, "shared").await;
}

/// The `policyhost` binary as a child process, killed with SIGKILL on drop.
struct OperatorProcess {
    child: Child,
    log: PathBuf,
}

impl OperatorProcess {
    fn start(env: &Env, kubeconfig: &Path, policies: &Path, run: u32) -> Self {
        Self::start_with(env, kubeconfig, policies, run, &[])
    }

    /// Like [`start`](Self::start), with more flags.
    fn start_with(env: &Env, kubeconfig: &Path, policies: &Path, run: u32, flags: &[&str]) -> Self {
        let log =
            crate::common::scratch().join(format!("policyhost-{}-run{run}.log", env.namespace));
        let child = Command::new(common::policyhost_bin())
            .args(["run", "--listen", "127.0.0.1:0", "--workers", "4"])
            .args(flags)
            // One replica, restarted: no Lease to wait for.
            .arg("--leader-elect=false")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", &env.namespace, "--instance", &env.instance()])
            .arg("--policy-dir")
            .arg(policies)
            .env("POLICYHOST_LOG", "info,policyhost=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("create the operator log"))
            .spawn()
            .expect("start policyhost run");
        Self { child, log }
    }

    /// What it logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL (what `Child::kill` sends on Unix): no shutdown, no cleanup.
    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_operator_at_any_point_converges_and_releases_each_datajob_only_after_its_cleanup_succeeded()
 {
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let policies = policy_dir(&[FLAKY.to_owned()]);
    let history = History::start(&env).await;
    // Cleanup plans: fail 0..3 times, then maybe ask to wait once, then done.
    let plans: Vec<(String, u32, u32)> = (0..8)
        .map(|i| (format!("crash-{i}"), i % 4, i / 4))
        .collect();
    let mut run = 0;
    let mut next_run = || {
        run += 1;
        run
    };

    let operator = OperatorProcess::start(&env, &kubeconfig, &policies, next_run());
    for (name, failures, retries) in &plans {
        let params = json!({"failures": failures, "retries": retries, "retryAfterMs": 150});
        create(&env, name, FLAKY, params, None, &[]).await;
    }
    create(&env, "crash-between", FLAKY, json!({}), None, &[]).await;
    for name in plans.iter().map(|p| p.0.as_str()).chain(["crash-between"]) {
        env.wait_job(name, "the finalizer and its child", |j| {
            holds(j) && phase(j) == Some("Running")
        })
        .await;
    }
    operator.kill();
    for (name, _, _) in &plans {
        delete(&env, name).await;
    }

    // Kills at arbitrary points of the cleanups: each run makes some
    // progress (an attempt recorded or a DataJob released), then dies.
    let progress = |env: &Env| {
        let jobs = env.jobs();
        async move {
            let list = jobs.list(&ListParams::default()).await.expect("list");
            let attempts: u32 = list.items.iter().map(|j| cleanup(j).attempts).sum();
            (list.items.len(), attempts)
        }
    };
    for pause_ms in [0, 150, 400] {
        let before = progress(&env).await;
        let operator = OperatorProcess::start(&env, &kubeconfig, &policies, next_run());
        eventually("progress in this run", || async {
            (before.0 == 0 || progress(&env).await != before).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(pause_ms)).await; // an arbitrary point
        operator.kill();
    }

    // A kill between `cleanup` returning done and the finalizer's removal:
    // while every DataJob PATCH conflicts, the removal cannot go through.
    {
        let proxy = FaultProxy::start(env.client_config()).await;
        let through_proxy =
            crate::common::scratch().join(format!("{}-proxy.kubeconfig", env.namespace));
        proxy.write_kubeconfig(&through_proxy);
        proxy.refuse(Refuse {
            verb: "patch",
            resource: "datajobs",
            code: 409,
        });
        delete(&env, "crash-between").await;
        let operator = OperatorProcess::start(&env, &through_proxy, &policies, next_run());
        eventually("a removal attempted after cleanup was done", || async {
            proxy
                .refused()
                .iter()
                .any(|r| r.subresource.is_empty() && r.name == "crash-between")
                .then_some(())
        })
        .await;
        let log = operator.kill();
        assert!(
            log.lines()
                .any(|l| l.contains("cleanup done") && l.contains("crash-between")),
            "the killed run had cleanup done:\n{log}"
        );
        let still = env.jobs().get("crash-between").await.expect("still there");
        assert!(
            holds(&still),
            "the removal did not go through before the kill"
        );
    }

    // The last run converges.
    let operator = OperatorProcess::start(&env, &kubeconfig, &policies, next_run());
    for name in plans.iter().map(|p| p.0.as_str()).chain(["crash-between"]) {
        wait_gone(&env, name).await;
    }
    let log = operator.kill();
    assert!(
        log.lines()
            .any(|l| l.contains("cleanup done") && l.contains("crash-between")),
        "cleanup ran again after the restart:\n{log}"
    );
    // Each DataJob was released exactly when its cleanup succeeded: the
    // policy answers done only to attempt failures + retries + 1, so the last
    // state recorded every planned answer, and no version lost the finalizer
    // before.
    for (name, failures, retries) in &plans {
        eventually(&format!("the deletion of {name} in the watch"), || async {
            history.released(name)
        })
        .await;
        let last = history.released(name).expect("released");
        let record = cleanup(&last);
        assert_eq!(
            (record.failures, record.attempts),
            (*failures, failures + retries),
            "{name}: released after exactly its planned failures and retries"
        );
        history.assert_held_while_terminating(name);
    }
    history.assert_held_while_terminating("crash-between");
}

/// The (attempts, lastAttemptTime) of `name`'s cleanup record, in the order
/// the watch showed them, each once.
fn recorded_attempts(history: &History, name: &str) -> Vec<(u32, k8s_openapi::jiff::Timestamp)> {
    let mut attempts: Vec<(u32, k8s_openapi::jiff::Timestamp)> = Vec::new();
    for seen in history.of(name) {
        let record = cleanup(seen.job());
        if let Some(at) = record.last_attempt_time
            && attempts.last().is_none_or(|(n, _)| *n != record.attempts)
        {
            attempts.push((record.attempts, at.0));
        }
    }
    attempts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_operator_keeps_a_failing_cleanups_backoff_instead_of_calling_it_at_every_start()
 {
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let policies = policy_dir(&[FLAKY.to_owned()]);
    let history = History::start(&env).await;
    // Every failure waits at least 10 s: long enough for restarts to fall
    // inside the wait.
    let floor = ["--min-cleanup-retry", "10s"];
    let operator = OperatorProcess::start_with(&env, &kubeconfig, &policies, 1, &floor);
    create(&env, "looping", FLAKY, json!({"failures": 1000}), None, &[]).await;
    env.wait_job("looping", "the finalizer and its child", |j| {
        holds(j) && phase(j) == Some("Running")
    })
    .await;
    delete(&env, "looping").await;
    env.wait_job("looping", "a first failed attempt", |j| {
        cleanup(j).failures >= 1
    })
    .await;
    operator.kill();

    // The crash loop: each run starts, finds the failed attempt in status,
    // defers the next one, and dies.
    let mut deferred = 0;
    for run in 2..=3 {
        let operator = OperatorProcess::start_with(&env, &kubeconfig, &policies, run, &floor);
        eventually("the restarted run to reach the DataJob", || async {
            let log = operator.log();
            (defers(&log) || cleanup_calls(&log) > 0).then_some(())
        })
        .await;
        let log = operator.kill();
        deferred += usize::from(cleanup_calls(&log) == 0);
    }
    assert!(
        deferred >= 1,
        "no restarted run found the wait still running"
    );

    // A run that stays calls cleanup again once the wait is over.
    let operator = OperatorProcess::start_with(&env, &kubeconfig, &policies, 4, &floor);
    env.wait_job("looping", "a second failed attempt", |j| {
        cleanup(j).failures >= 2
    })
    .await;
    operator.kill();
    let attempts = recorded_attempts(&history, "looping");
    assert!(attempts.len() >= 2, "{attempts:?}");
    for pair in attempts.windows(2) {
        let gap = pair[1].1.duration_since(pair[0].1);
        // lastAttemptTime has whole seconds: 10 s apart can read as 9.
        assert!(
            gap >= k8s_openapi::jiff::SignedDuration::from_secs(9),
            "attempts {} and {} only {gap:?} apart: {attempts:?}",
            pair[0].0,
            pair[1].0
        );
    }
}

/// Whether a run's log shows it deferring the cleanup of `looping`.
fn defers(log: &str) -> bool {
    log.lines().any(|l| {
        l.contains("cleanup waits out the last attempt's backoff") && l.contains("looping")
    })
}

/// How many `cleanup` calls a run's log shows failing.
fn cleanup_calls(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("cleanup failed; the finalizer is kept"))
        .count()
}
