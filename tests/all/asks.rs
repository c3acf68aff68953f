//! Bounded asks end to end, with the `greedy` policy asking for more than
//! any result may: a zero requeue beside fanout (the flood scenario), a zero
//! cleanup retry, thousands of Events in one result, status that breaks the
//! output rules, a status the API server refuses, and one nested too deep
//! for the operator to read back, across a restart.

use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use policyhost::crd::{CleanupSpec, DataJob, DataJobSpec};
use serde_json::{Value, json};

use crate::common::cluster::{Env, OperatorSetup, condition, phase};
use crate::common::requests::Request;

const GREEDY: &str = "greedy";
const FANOUT: &str = "fanout";

fn fanout(replicas: u32) -> Value {
    json!({"replicas": replicas, "image": "busybox:1.36", "command": ["true"], "backoffLimit": 1})
}

/// The `Ready` condition's (status, reason, message).
fn ready(job: &DataJob) -> Option<(String, String, String)> {
    condition(job, "Ready").map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn outputs(job: &DataJob) -> Option<&serde_json::Map<String, Value>> {
    job.status.as_ref().and_then(|s| s.outputs.as_ref())
}

/// The value of one series of the in-process operator's metrics.
fn metric(env: &Env, series: &str) -> f64 {
    let text = env.operator().metrics.render();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Status writes on DataJob `name` among `requests`.
fn status_writes(requests: &[Request], name: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.verb == "patch" && r.subresource == "status" && r.name == name)
        .count()
}

/// The Events on DataJob `name`, and the writes they cost (a series is one
/// create and a patch per further occurrence).
async fn events_on(env: &Env, name: &str) -> (Vec<Event>, u64) {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let list: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    let writes = list
        .iter()
        .map(|e| {
            e.series
                .as_ref()
                .map_or(1, |s| u64::try_from(s.count).unwrap_or(1))
        })
        .sum();
    (list, writes)
}

/// Creates `n` fanout DataJobs named `<prefix>-<i>` and waits until all
/// have succeeded; returns how long that took.
async fn fanout_convergence(env: &Env, prefix: &str, n: usize) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        env.create_job(&format!("{prefix}-{i}"), FANOUT, fanout(2))
            .await;
    }
    for i in 0..n {
        env.wait_job(&format!("{prefix}-{i}"), "Succeeded", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_requeue_beside_fanout_neither_slows_fanout_nor_writes_faster_than_its_floor() {
    let env = Env::start(&[FANOUT, GREEDY]).await;
    // A warm-up, so both measurements find the policy compiled and the
    // caches primed.
    fanout_convergence(&env, "warm", 2).await;
    let alone = fanout_convergence(&env, "alone", 10).await;

    let log = env
        .requests()
        .expect("a request log: devcluster or an audit log");
    let since = log.mark();
    let flood_started = Instant::now();
    env.create_job("flood", GREEDY, json!({"requeueMs": 0, "events": 1000}))
        .await;
    env.wait_job("flood", "its first status", |j| outputs(j).is_some())
        .await;
    let beside = fanout_convergence(&env, "beside", 10).await;
    // Measure the abusive DataJob over at least five seconds.
    let window = Duration::from_secs(5);
    if let Some(rest) = window.checked_sub(flood_started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let elapsed = flood_started.elapsed().as_secs_f64();
    let requests = log.operator_since(since, &env.namespace);
    let (events, event_writes) = events_on(&env, "flood").await;
    let reconciles = metric(
        &env,
        r#"policyhost_reconcile_total{policy="greedy",result="success"}"#,
    );

    println!(
        "fanout alone {alone:?}, beside the flood {beside:?}; flood over {elapsed:.1}s: \
         {reconciles} reconciles, {} status writes, {event_writes} Event writes",
        status_writes(&requests, "flood")
    );
    assert!(
        beside.as_secs_f64() <= alone.as_secs_f64() * 1.5,
        "fanout took {beside:?} beside the flood, {alone:?} alone"
    );
    // The floor is 1 s: one reconcile (and one status write) a second, plus
    // the first one.
    let floor_bound = elapsed + 2.0;
    assert!(
        (3.0..=floor_bound).contains(&reconciles),
        "{reconciles} reconciles in {elapsed:.1}s"
    );
    assert!(
        status_writes(&requests, "flood") as f64 <= floor_bound,
        "{} status writes in {elapsed:.1}s",
        status_writes(&requests, "flood")
    );
    // Events: 30 at once, then half a token a second (reports included).
    assert!(
        event_writes as f64 <= 30.0 + elapsed / 2.0 + 1.0,
        "{event_writes} Event writes in {elapsed:.1}s"
    );
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("EventsDropped")),
        "the drops are reported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_events_in_one_result_record_ten_and_one_report_of_the_rest() {
    let env = Env::start(&[GREEDY]).await;
    env.create_job("chatty", GREEDY, json!({"events": 5000}))
        .await;
    env.wait_job("chatty", "reconciled", |j| {
        ready(j).is_some_and(|r| r.0 == "True")
    })
    .await;
    let (events, writes) = crate::common::cluster::eventually("the drop report", || async {
        let (events, writes) = events_on(&env, "chatty").await;
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("EventsDropped"))
            .then_some((events, writes))
    })
    .await;
    let floods = events
        .iter()
        .filter(|e| e.reason.as_deref().is_some_and(|r| r.starts_with("Flood")))
        .count();
    assert_eq!(floods, 10, "the per-result cap");
    let report = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("EventsDropped"))
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    assert!(
        report.starts_with("4990 Events on this DataJob were dropped"),
        "{report}"
    );
    assert_eq!(writes, 11, "ten Events and one report");
    assert_eq!(
        metric(&env, r#"policyhost_events_dropped_total{policy="greedy"}"#),
        4990.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_cleanup_retry_waits_the_floor_and_spends_the_time_budget() {
    let env = Env::start(&[GREEDY]).await;
    let Value::Object(params) = json!({"retryAfterMs": 0}) else {
        unreachable!()
    };
    let job = DataJob::new(
        "lingering",
        DataJobSpec {
            policy: GREEDY.into(),
            params,
            cleanup: Some(CleanupSpec {
                max_attempts: None,
                timeout_seconds: Some(3),
            }),
            ..DataJobSpec::default()
        },
    );
    env.jobs()
        .create(&PostParams::default(), &job)
        .await
        .expect("create");
    env.wait_job("lingering", "reconciled", |j| outputs(j).is_some())
        .await;
    let deleted = Instant::now();
    env.jobs()
        .delete("lingering", &DeleteParams::default())
        .await
        .expect("delete");
    let blocked = env
        .wait_job("lingering", "CleanupBlocked", |j| {
            condition(j, "CleanupBlocked").is_some_and(|c| c.status == "True")
        })
        .await;
    let elapsed = deleted.elapsed().as_secs_f64();
    let reason = condition(&blocked, "CleanupBlocked").map(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("TimeoutExceeded"));
    let attempts = blocked
        .status
        .as_ref()
        .and_then(|s| s.cleanup.as_ref())
        .map_or(0, |c| c.attempts);
    // One call a second at most: a zero retry-after no longer loops.
    assert!(
        (2..=5).contains(&attempts) && f64::from(attempts) <= elapsed + 1.0,
        "{attempts} cleanup calls in {elapsed:.1}s"
    );
    // Blocked, it retries at the longest backoff (5 s in the test setup).
    let calls = metric(
        &env,
        r#"policyhost_cleanup_total{policy="greedy",result="retry"}"#,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = metric(
        &env,
        r#"policyhost_cleanup_total{policy="greedy",result="retry"}"#,
    );
    assert!(
        later - calls <= 1.0,
        "{calls} then {later} calls once blocked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_outside_the_output_rules_is_invalid_output_naming_the_rule() {
    let env = Env::start(&[GREEDY]).await;
    let cases = [
        (
            "bad-reason",
            json!({"conditions": 1, "reason": "not ok"}),
            "reason \"not ok\" is not one word",
        ),
        (
            "many-conditions",
            json!({"conditions": 40}),
            "40 conditions, at most 16 are allowed",
        ),
        (
            "bad-phase",
            json!({"phase": "Running\nForged"}),
            "status.phase",
        ),
        (
            "deep-outputs",
            json!({"outputsDepth": 100}),
            "nested 33 levels deep or more",
        ),
    ];
    for (name, params, _) in &cases {
        env.create_job(name, GREEDY, params.clone()).await;
    }
    for (name, _, rule) in &cases {
        let job = env
            .wait_job(name, "Ready=False", |j| {
                ready(j).is_some_and(|r| r.0 == "False")
            })
            .await;
        let (_, reason, message) = ready(&job).expect("Ready");
        assert_eq!(reason, "InvalidOutput", "{name}: {message}");
        assert!(message.contains(rule), "{name}: {message}");
        assert_eq!(
            outputs(&job),
            None,
            "{name}: nothing of the result is written"
        );
    }
    // A long message is cut, not refused.
    env.create_job("long-message", GREEDY, json!({"messageBytes": 100_000}))
        .await;
    let job = env
        .wait_job("long-message", "Ready=True", |j| {
            ready(j).is_some_and(|r| r.0 == "True")
        })
        .await;
    let message = job
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert!(
        message.len() <= 1024 && message.ends_with('…'),
        "{} bytes",
        message.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_api_server_refuses_becomes_a_small_failure_condition_retried_with_backoff() {
    let env = Env::start(&[GREEDY]).await;
    // Under the 4 MiB output cap, over the API server's 3 MiB request limit.
    env.create_job("bloated", GREEDY, json!({"outputsBytes": 3_500_000}))
        .await;
    let job = env
        .wait_job("bloated", "Ready=False", |j| {
            ready(j).is_some_and(|r| r.0 == "False")
        })
        .await;
    let (_, reason, message) = ready(&job).expect("Ready");
    assert_eq!(reason, "StatusRejected", "{message}");
    assert!(
        message.contains("the API server refused the status"),
        "{message}"
    );
    assert_eq!(outputs(&job), None);
    // Retried with backoff (50 ms doubling to 5 s here), not in a loop: in
    // 3 s that backoff allows at most 7 attempts, each sending the refused
    // status once and its small fallback at most once.
    let log = env
        .requests()
        .expect("a request log: devcluster or an audit log");
    let since = log.mark();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let requests = log.operator_since(since, &env.namespace);
    let refused = requests
        .iter()
        .filter(|r| r.verb == "patch" && r.subresource == "status" && r.name == "bloated")
        .filter(|r| r.code >= 400)
        .count();
    let writes = status_writes(&requests, "bloated");
    assert!(refused <= 7, "{refused} refused status writes in 3 s");
    assert!(
        writes <= 2 * refused + 1,
        "{writes} status writes for {refused} refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_nested_too_deep_to_read_back_never_stops_reconciling_after_a_restart() {
    let mut env = Env::start(&[GREEDY, FANOUT]).await;
    // 125 levels: serde_json parses it alone, but not inside a list of DataJobs.
    env.create_job("abyss", GREEDY, json!({"outputsDepth": 125}))
        .await;
    env.wait_job("abyss", "InvalidOutput", |j| {
        ready(j).is_some_and(|r| r.1 == "InvalidOutput")
    })
    .await;
    env.stop_operator().await;
    env.start_operator(OperatorSetup::with(&[GREEDY, FANOUT]))
        .await;
    // The restarted operator lists every DataJob and reconciles them.
    env.create_job("after", FANOUT, fanout(1)).await;
    env.wait_job("after", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    env.patch_spec("abyss", json!({"params": {"outputsDepth": 3}}))
        .await;
    let job = env
        .wait_job("abyss", "reconciled at generation 2", |j| {
            condition(j, "Ready")
                .is_some_and(|c| c.status == "True" && c.observed_generation == Some(2))
        })
        .await;
    assert!(outputs(&job).is_some());
}
