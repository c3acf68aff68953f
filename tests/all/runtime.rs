//! Guest faults through the real runtime: each adversarial policy is
//! contained with the right typed error, within its caps, and the runtime
//! keeps serving `fanout` afterwards.

use std::time::{Duration, Instant};

use policyhost::Runtime;
use policyhost::runtime::Policy;
use policyhost::runtime::{CallReport, Error, Input, LogRate, PolicyLimits, RuntimeConfig};
use serde_json::json;

use crate::common::{self, input, job, load};
use policyhost::runtime::reference;

/// The next `fanout` call in the same runtime still succeeds.
fn assert_fanout_still_works(runtime: &Runtime) {
    let fanout = load(runtime, "fanout", PolicyLimits::default());
    let outcome = runtime.reconcile_blocking(&fanout, &reference::fanout(10));
    let reconciled = outcome.result.expect("fanout after a fault");
    assert_eq!(reconciled.children.len(), 10);
}

fn no_params() -> Input {
    input(job("adversary", "team-a", json!({})))
}

#[test]
fn an_infinite_loop_stops_at_its_deadline_within_a_small_margin() {
    let runtime = common::runtime();
    let timeout = Duration::from_millis(200);
    let limits = PolicyLimits {
        timeout_ms: Some(200),
        fuel: Some(u64::MAX),
        ..PolicyLimits::default()
    };
    let policy = load(&runtime, "infinite-loop", limits);
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    match outcome.result {
        Err(Error::DeadlineExceeded { timeout: t }) => assert_eq!(t, timeout),
        other => panic!("expected DeadlineExceeded, got {other:?}"),
    }
    let took = outcome.report.duration;
    let margin = took.saturating_sub(timeout);
    eprintln!("infinite loop stopped after {took:?} (deadline {timeout:?}, margin {margin:?})");
    assert!(took >= timeout, "stopped before its deadline: {took:?}");
    assert!(
        margin < Duration::from_millis(50),
        "stopped {margin:?} after its deadline"
    );
    assert_fanout_still_works(&runtime);
}

#[test]
fn an_infinite_loop_runs_out_of_fuel_when_fuel_is_the_tighter_cap() {
    let runtime = common::runtime();
    let limits = PolicyLimits {
        fuel: Some(5_000_000),
        timeout_ms: Some(10_000),
        ..PolicyLimits::default()
    };
    let policy = load(&runtime, "infinite-loop", limits);
    let outcome = runtime.cleanup_blocking(&policy, &no_params());
    assert!(
        matches!(outcome.result, Err(Error::OutOfFuel { fuel: 5_000_000 })),
        "{:?}",
        outcome.result
    );
    assert_eq!(outcome.report.fuel_consumed, 5_000_000);
    assert_fanout_still_works(&runtime);
}

#[test]
fn a_memory_hog_is_stopped_at_its_cap_and_never_exceeds_it() {
    let runtime = common::runtime();
    let cap = 16 << 20;
    let limits = PolicyLimits {
        memory_bytes: Some(cap),
        ..PolicyLimits::default()
    };
    let policy = load(&runtime, "memory-hog", limits);
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    match outcome.result {
        Err(Error::MemoryLimitExceeded { limit, requested }) => {
            assert_eq!(limit, cap);
            assert!(requested > cap);
        }
        other => panic!("expected MemoryLimitExceeded, got {other:?}"),
    }
    let memory = outcome.report.memory;
    assert!(memory.peak <= cap, "peak {} over cap {cap}", memory.peak);
    assert!(
        memory.peak > cap / 2,
        "the hog grew to {} only",
        memory.peak
    );
    assert!(memory.denied.is_some_and(|d| d > cap));
    assert_fanout_still_works(&runtime);
}

#[test]
fn deep_recursion_traps_on_either_stack_and_the_host_survives() {
    let runtime = common::runtime();
    let policy = load(&runtime, "deep-recursion", PolicyLimits::default());
    for mode in ["wasm", "shadow"] {
        let outcome =
            runtime.reconcile_blocking(&policy, &input(job("deep", "ns", json!({"mode": mode}))));
        match &outcome.result {
            Err(Error::Trap { message, .. }) => eprintln!("{mode}: {message}"),
            other => panic!("{mode}: expected Trap, got {other:?}"),
        }
    }
    assert_fanout_still_works(&runtime);
}

#[test]
fn a_panic_is_a_trap_carrying_the_guest_message_and_backtrace() {
    let runtime = common::runtime();
    let policy = load(&runtime, "panics", PolicyLimits::default());
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    match outcome.result {
        Err(Error::Trap {
            message, backtrace, ..
        }) => {
            assert!(message.contains("panicked at"), "{message}");
            assert!(message.contains("policyhost-test-panic"), "{message}");
            let backtrace = backtrace.expect("a wasm backtrace");
            assert!(backtrace.contains("panics"), "{backtrace}");
        }
        other => panic!("expected Trap, got {other:?}"),
    }
    assert_fanout_still_works(&runtime);
}

#[test]
fn huge_output_is_refused_by_bytes_by_count_or_by_memory() {
    let runtime = common::runtime();
    let policy = load(&runtime, "huge-output", PolicyLimits::default());
    let call = |params| {
        runtime
            .reconcile_blocking(&policy, &input(job("huge", "ns", params)))
            .result
    };
    let limits = policy.limits();
    match call(json!({"children": 10, "bytesPerChild": 1_000_000})) {
        Err(Error::OutputTooLarge {
            what: "bytes",
            actual,
            limit,
        }) => {
            assert!(actual > limit);
            assert_eq!(limit, limits.output_bytes);
        }
        other => panic!("expected OutputTooLarge bytes, got {other:?}"),
    }
    match call(json!({"children": limits.children + 1, "bytesPerChild": 1})) {
        Err(Error::OutputTooLarge {
            what: "children",
            actual,
            ..
        }) => {
            assert_eq!(actual, u64::from(limits.children) + 1);
        }
        other => panic!("expected OutputTooLarge children, got {other:?}"),
    }
    match call(json!({})) {
        Err(Error::MemoryLimitExceeded { limit, .. }) => assert_eq!(limit, limits.memory_bytes),
        other => panic!("expected MemoryLimitExceeded for 100 MB, got {other:?}"),
    }
    assert_fanout_still_works(&runtime);
}

#[test]
fn a_child_in_another_namespace_is_invalid_output_naming_it() {
    let runtime = common::runtime();
    let policy = load(&runtime, "foreign-namespace", PolicyLimits::default());
    let outcome = runtime.reconcile_blocking(&policy, &input(job("spy", "team-a", json!({}))));
    match outcome.result {
        Err(Error::InvalidOutput { location, rule }) => {
            assert!(location.contains("spy-intruder"), "{location}");
            assert!(rule.contains("namespace"), "{rule}");
            assert!(rule.contains("kube-system"), "{rule}");
        }
        other => panic!("expected InvalidOutput, got {other:?}"),
    }
    assert_fanout_still_works(&runtime);
}

#[test]
fn a_forbidden_kind_is_invalid_output_naming_the_kind() {
    let runtime = common::runtime();
    let policy = load(&runtime, "forbidden-kind", PolicyLimits::default());
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    match outcome.result {
        Err(Error::InvalidOutput { location, rule }) => {
            assert!(location.contains("ClusterRoleBinding"), "{location}");
            assert!(rule.contains("allowed kinds"), "{rule}");
        }
        other => panic!("expected InvalidOutput, got {other:?}"),
    }
    assert_fanout_still_works(&runtime);
}

#[test]
fn a_malformed_manifest_is_invalid_output() {
    let runtime = common::runtime();
    let policy = load(&runtime, "malformed-manifest", PolicyLimits::default());
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    match outcome.result {
        Err(Error::InvalidOutput { location, rule }) => {
            assert!(location.starts_with("children[0] (ConfigMap"), "{location}");
            assert!(rule.contains("not valid JSON"), "{rule}");
        }
        other => panic!("expected InvalidOutput, got {other:?}"),
    }
    assert_fanout_still_works(&runtime);
}

#[test]
fn every_call_gets_a_fresh_instance() {
    let runtime = common::runtime();
    let policy = load(&runtime, "static-counter", PolicyLimits::default());
    for _ in 0..5 {
        let outcome = runtime.reconcile_blocking(&policy, &no_params());
        let reconciled = outcome.result.expect("static-counter reconcile");
        assert_eq!(reconciled.status.outputs, json!({"calls": 1}));
        let cleanup = runtime.cleanup_blocking(&policy, &no_params());
        cleanup.result.expect("cleanup sees calls=1 too");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_api_runs_calls_on_the_pool_and_reports_every_call() {
    let runtime = common::runtime();
    let bytes = common::guest_bytes("fanout");
    let fanout = runtime
        .load_async(policyhost::runtime::PolicySpec::new("fanout"), bytes)
        .await
        .expect("load fanout");
    let panics = load(&runtime, "panics", PolicyLimits::default());
    let calls = (0..8).map(|i| {
        let (runtime, policy) = if i % 2 == 0 {
            (runtime.clone(), fanout.clone())
        } else {
            (runtime.clone(), panics.clone())
        };
        tokio::spawn(async move { runtime.reconcile(policy, reference::fanout(10)).await })
    });
    for (i, call) in calls.enumerate() {
        let outcome = call.await.expect("task");
        assert!(outcome.report.fuel_consumed > 0);
        assert!(outcome.report.duration > Duration::ZERO);
        assert_eq!(outcome.result.is_ok(), i % 2 == 0, "{:?}", outcome.result);
    }
}

#[test]
fn the_allowed_kinds_are_configurable_per_policy() {
    use policyhost::runtime::{AllowedKind, PolicySpec};
    let runtime = common::runtime();
    let mut kinds = AllowedKind::defaults();
    kinds.push(AllowedKind::new(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
    ));
    let policy = runtime
        .load(
            PolicySpec::new("forbidden-kind").allowed_kinds(kinds),
            &common::guest_bytes("forbidden-kind"),
        )
        .expect("load");
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    let reconciled = outcome.result.expect("allowed for this policy");
    assert_eq!(reconciled.children[0].kind, "ClusterRoleBinding");
}

/// A deadline of `ms` with fuel that never runs out first.
fn deadline(ms: u64) -> PolicyLimits {
    PolicyLimits {
        timeout_ms: Some(ms),
        fuel: Some(u64::MAX),
        ..PolicyLimits::default()
    }
}

/// The call ended no later than 50 ms after its deadline.
fn assert_ended_by_the_deadline(report: &CallReport, timeout: Duration) {
    assert!(
        report.duration < timeout + Duration::from_millis(50),
        "the call took {:?} under a deadline of {timeout:?}",
        report.duration
    );
}

fn assert_deadline_exceeded<T: std::fmt::Debug>(result: &Result<T, Error>, timeout: Duration) {
    match result {
        Err(Error::DeadlineExceeded { timeout: t }) => assert_eq!(*t, timeout),
        other => panic!("expected DeadlineExceeded, got {other:?}"),
    }
}

/// Both entry points of `policy` end with `DeadlineExceeded` by the deadline.
fn assert_both_calls_end_by_the_deadline(runtime: &Runtime, policy: &Policy, timeout: Duration) {
    let reconcile = runtime.reconcile_blocking(policy, &no_params());
    assert_deadline_exceeded(&reconcile.result, timeout);
    assert_ended_by_the_deadline(&reconcile.report, timeout);
    let cleanup = runtime.cleanup_blocking(policy, &no_params());
    assert_deadline_exceeded(&cleanup.result, timeout);
    assert_ended_by_the_deadline(&cleanup.report, timeout);
    eprintln!(
        "{}: ended after {:?} and {:?} (deadline {timeout:?})",
        policy.name(),
        reconcile.report.duration,
        cleanup.report.duration
    );
}

#[test]
fn a_sleep_past_the_deadline_ends_at_once_with_deadline_exceeded() {
    let runtime = common::runtime();
    let timeout = Duration::from_secs(1);
    let policy = load(&runtime, "sleeper", deadline(1000));
    for guest in [&policy, &load(&runtime, "endless-wait", deadline(1000))] {
        eprintln!("{} imports {:?}", guest.name(), guest.imports());
        assert!(
            guest
                .imports()
                .iter()
                .any(|i| i.starts_with("wasi:clocks/monotonic-clock@")),
            "{} waits through the monotonic clock",
            guest.name()
        );
    }
    assert_both_calls_end_by_the_deadline(&runtime, &policy, timeout);
    assert_fanout_still_works(&runtime);
}

#[test]
fn a_sleep_within_the_deadline_returns_at_once_and_the_clocks_moved_by_it() {
    let runtime = common::runtime();
    let policy = load(&runtime, "sleeper", deadline(1000));
    let input = input(job("sleepy", "team-a", json!({"ms": 400})));
    let outcome = runtime.reconcile_blocking(&policy, &input);
    let reconciled = outcome.result.expect("a sleep within the deadline");
    let now = input.ctx.now_unix_ms;
    assert_eq!(
        reconciled.status.outputs,
        json!({"sleptMs": 400, "nowMs": now + 400}),
        "virtual time: the clocks move by exactly what was waited"
    );
    assert!(
        outcome.report.duration < Duration::from_millis(400),
        "the sleep was slept through: {:?}",
        outcome.report.duration
    );
}

#[test]
fn an_endless_wait_ends_at_once_with_deadline_exceeded() {
    let runtime = common::runtime();
    let timeout = Duration::from_secs(1);
    let policy = load(&runtime, "endless-wait", deadline(1000));
    assert_both_calls_end_by_the_deadline(&runtime, &policy, timeout);
    assert_fanout_still_works(&runtime);
}

#[test]
fn polling_thousands_of_pollables_is_answered_without_sleeping() {
    let runtime = common::runtime();
    let timeout = Duration::from_secs(1);
    let policy = load(&runtime, "poll-many", deadline(1000));
    // 5,000 pollables due in 1 to 10 hours: the first poll is refused.
    let outcome = runtime.reconcile_blocking(&policy, &no_params());
    assert_deadline_exceeded(&outcome.result, timeout);
    assert_ended_by_the_deadline(&outcome.report, timeout);
    // Due in 10 to 100 ms: ten polls, each answered at once.
    let spans = input(job(
        "poller",
        "team-a",
        json!({"count": 5000, "stepMs": 10}),
    ));
    let outcome = runtime.reconcile_blocking(&policy, &spans);
    assert_ended_by_the_deadline(&outcome.report, timeout);
    let reconciled = outcome.result.expect("polls within the deadline");
    assert_eq!(
        reconciled.status.outputs,
        json!({"polls": 10, "waitedMs": 100})
    );
    assert_fanout_still_works(&runtime);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_policies_on_every_pool_thread_hold_none_past_the_deadline() {
    let runtime = common::runtime();
    let timeout = Duration::from_millis(500);
    let waiters =
        ["sleeper", "endless-wait", "poll-many"].map(|name| load(&runtime, name, deadline(500)));
    // Twice as many waiting calls as the pool has threads, all at once.
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let (runtime, policy) = (runtime.clone(), waiters[i % 3].clone());
            tokio::spawn(async move { runtime.reconcile(policy, no_params()).await })
        })
        .collect();
    for call in calls {
        let outcome = call.await.expect("task");
        assert_deadline_exceeded(&outcome.result, timeout);
        assert_ended_by_the_deadline(&outcome.report, timeout);
        assert!(!outcome.report.thread_replaced);
    }
    assert_eq!(runtime.threads_replaced(), 0);
    let fanout = load(&runtime, "fanout", PolicyLimits::default());
    let outcome = runtime.reconcile(fanout, reference::fanout(10)).await;
    assert_eq!(
        outcome
            .result
            .expect("fanout after the waiters")
            .children
            .len(),
        10
    );
}

#[test]
fn a_log_flood_leaves_a_bounded_number_of_host_log_records_and_counts_the_rest() {
    let rate = LogRate {
        burst: 50,
        per_second: 10,
    };
    let runtime = Runtime::new(RuntimeConfig {
        threads: 1,
        guest_logs: rate,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    // The operator's maximum deadline: a debug build on a busy machine
    // writes the flood slowly, and the test is about the logs.
    let policy = load(&runtime, "log-flood", deadline(10_000));
    let flood = input(job("adversary", "team-a", json!({"lines": 1000})));
    let started = Instant::now();
    let (reports, text): (Vec<CallReport>, String) = common::logs::recorded(|| {
        (0..5)
            .map(|_| {
                let outcome = runtime.reconcile_blocking(&policy, &flood);
                outcome.result.expect("the flood still returns its result");
                outcome.report
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON record per line"))
        .filter(|r: &serde_json::Value| {
            r["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("policyhost::guest"))
        })
        .collect();
    // 5 calls × 3,000 lines written; the host logs the policy's burst plus
    // its rate over the test's time, not thousands.
    let bound = f64::from(rate.burst) + f64::from(rate.per_second) * elapsed.as_secs_f64() + 1.0;
    eprintln!(
        "{} guest records in {elapsed:?} (bound {bound:.0})",
        records.len()
    );
    assert!(
        records.len() as f64 <= bound,
        "{} records over {bound}",
        records.len()
    );
    assert!(
        records.len() >= 20,
        "the flood was silenced entirely: {}",
        records.len()
    );
    for record in &records {
        assert_eq!(record["fields"]["policy"], "log-flood", "{record}");
        assert_eq!(record["fields"]["job"], "team-a/adversary", "{record}");
    }
    for report in &reports {
        assert_eq!(report.log_lines, 1000);
        assert!(report.log_dropped >= 1000 - 100, "{report:?}");
        assert!(report.output_dropped > 0, "{report:?}");
    }
    assert!(
        reports[4].log_throttled > 0,
        "the policy's rate never applied: {:?}",
        reports[4]
    );
}

/// `host/benches/fanout-10.yaml`, which `policy bench` reads, is the DataJob of the
/// reference workload the benchmarks and tests call with.
#[test]
fn the_reference_workload_file_holds_the_reference_datajob() {
    let path = common::workspace().join("host/benches/fanout-10.yaml");
    let text = std::fs::read_to_string(&path).expect("the reference workload file");
    let file = policyhost::projection::data_job(
        &policyhost::projection::data_job_from_yaml(&text).expect("a DataJob"),
    );
    let want = reference::fanout(10).job;
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("JSON");
    assert_eq!(
        (&file.name, &file.namespace, &file.uid, file.generation),
        (&want.name, &want.namespace, &want.uid, want.generation)
    );
    assert_eq!(json(&file.params), json(&want.params));
    assert_eq!(
        file.status.as_deref().map(json),
        want.status.as_deref().map(json)
    );
    assert!(file.labels.is_empty() && file.annotations.is_empty());
}
