//! Policies written in Python and TypeScript run as Rust ones do: the
//! `fanout` of each language passes the Rust `fanout`'s golden cases through
//! the compiled component, and each adversarial guest (a loop, a memory
//! hog, endless recursion, a sleep, a log flood) ends within the caps of
//! the same sandbox, the runtime serving the language's `fanout` after it.
//! The components are built by `cargo xtask polyglot` (`xtask/src/polyglot.rs`).

use std::sync::Arc;
use std::time::Duration;

use policyhost::Runtime;
use policyhost::runtime::{
    Error, Input, Policy, PolicyLimits, PolicySpec, RuntimeConfig, reference,
};
use serde_json::json;

use crate::common::process::{policyhost, text};
use crate::common::{self, input, job};

const LANGUAGES: [&str; 2] = ["python", "typescript"];

/// Loads the `language` version of policy `name` with `limits`.
fn load(runtime: &Runtime, language: &str, name: &str, limits: PolicyLimits) -> Arc<Policy> {
    let bytes = std::fs::read(common::polyglot(language, name)).expect("read the component");
    runtime
        .load(PolicySpec::new(name).limits(limits), &bytes)
        .unwrap_or_else(|e| panic!("load the {language} {name}: {e}"))
}

/// A runtime whose compiled components are kept on disk: each component of
/// 12 to 19 MB is compiled once for all these tests, not once per test.
fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        threads: 2,
        cache_dir: Some(common::compile_cache()),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn no_params() -> Input {
    input(job("adversary", "team-a", json!({})))
}

/// The language's `fanout` still answers the reference workload.
fn assert_fanout_still_works(runtime: &Runtime, language: &str) {
    let fanout = load(runtime, language, "fanout", PolicyLimits::default());
    let outcome = runtime.reconcile_blocking(&fanout, &reference::fanout(10));
    let reconciled = outcome
        .result
        .unwrap_or_else(|e| panic!("the {language} fanout after a fault: {e}"));
    assert_eq!(reconciled.children.len(), 10);
}

#[test]
fn the_fanout_of_every_language_passes_the_rust_fanouts_golden_cases() {
    let cases = common::workspace().join("policies/fanout/tests/golden");
    for language in LANGUAGES {
        let component = common::polyglot(language, "fanout");
        let args = [component.as_os_str(), cases.as_os_str()].map(|p| p.to_str().expect("UTF-8"));
        let out = policyhost(&["policy", "test", args[0], args[1]]);
        let stdout = text(&out);
        assert!(out.status.success(), "{language}: {stdout}");
        assert!(stdout.contains(" passed, 0 failed"), "{language}: {stdout}");
        assert!(!stdout.contains("FAIL"), "{language}: {stdout}");
    }
}

#[test]
fn a_loop_ends_at_its_deadline_or_when_its_fuel_runs_out() {
    let runtime = runtime();
    for language in LANGUAGES {
        let to_the_deadline = PolicyLimits {
            timeout_ms: Some(300),
            fuel: Some(u64::MAX),
            ..PolicyLimits::default()
        };
        let policy = load(&runtime, language, "infinite-loop", to_the_deadline);
        let outcome = runtime.reconcile_blocking(&policy, &no_params());
        assert!(
            matches!(outcome.result, Err(Error::DeadlineExceeded { timeout }) if timeout == Duration::from_millis(300)),
            "{language}: {:?}",
            outcome.result
        );
        assert!(
            outcome.report.duration < Duration::from_millis(300 + 50),
            "{language}: stopped after {:?}",
            outcome.report.duration
        );
        let out_of_fuel = PolicyLimits {
            fuel: Some(50_000_000),
            timeout_ms: Some(10_000),
            ..PolicyLimits::default()
        };
        let policy = load(&runtime, language, "infinite-loop", out_of_fuel);
        let outcome = runtime.cleanup_blocking(&policy, &no_params());
        assert!(
            matches!(outcome.result, Err(Error::OutOfFuel { fuel: 50_000_000 })),
            "{language}: {:?}",
            outcome.result
        );
        assert_fanout_still_works(&runtime, language);
    }
}

#[test]
fn a_memory_hog_is_stopped_at_its_cap_and_never_exceeds_it() {
    let runtime = runtime();
    let cap = 64 << 20;
    for language in LANGUAGES {
        let limits = PolicyLimits {
            memory_bytes: Some(cap),
            fuel: Some(u64::MAX),
            timeout_ms: Some(10_000),
            ..PolicyLimits::default()
        };
        let policy = load(&runtime, language, "memory-hog", limits);
        let outcome = runtime.reconcile_blocking(&policy, &no_params());
        match outcome.result {
            Err(Error::MemoryLimitExceeded { limit, requested }) => {
                assert_eq!(limit, cap, "{language}");
                assert!(requested > cap, "{language}: asked for {requested}");
            }
            other => panic!("{language}: expected MemoryLimitExceeded, got {other:?}"),
        }
        let memory = outcome.report.memory;
        assert!(
            memory.peak <= cap,
            "{language}: peak {} over {cap}",
            memory.peak
        );
        assert!(
            memory.peak > cap / 2,
            "{language}: grew to {} only",
            memory.peak
        );
        assert_fanout_still_works(&runtime, language);
    }
}

/// Python's recursion limit lifted, CPython recurses until its fuel runs
/// out (its frames live in linear memory); QuickJS recurses on the
/// WebAssembly stack until it is exhausted, a trap. Either way the call ends
/// with an error and the host serves on.
#[test]
fn endless_recursion_ends_the_call_and_the_host_survives() {
    let runtime = runtime();
    for language in LANGUAGES {
        let policy = load(
            &runtime,
            language,
            "deep-recursion",
            PolicyLimits::default(),
        );
        let outcome = runtime.reconcile_blocking(&policy, &no_params());
        match &outcome.result {
            Err(
                error @ (Error::Trap { .. }
                | Error::OutOfFuel { .. }
                | Error::MemoryLimitExceeded { .. }),
            ) => eprintln!("{language}: {error}"),
            other => panic!("{language}: expected a trap or a cap, got {other:?}"),
        }
        assert_fanout_still_works(&runtime, language);
    }
}

#[test]
fn a_python_sleep_is_virtual_within_the_deadline_and_ends_the_call_past_it() {
    let runtime = runtime();
    let limits = PolicyLimits {
        timeout_ms: Some(1000),
        ..PolicyLimits::default()
    };
    let policy = load(&runtime, "python", "sleeper", limits);
    let within = input(job("sleepy", "team-a", json!({"ms": 400})));
    let outcome = runtime.reconcile_blocking(&policy, &within);
    let reconciled = outcome.result.expect("a sleep within the deadline");
    assert_eq!(
        reconciled.status.outputs,
        json!({"sleptMs": 400, "nowMs": within.ctx.now_unix_ms + 400}),
        "the clocks move by exactly what was waited"
    );
    assert!(outcome.report.duration < Duration::from_millis(400));
    let past = runtime.reconcile_blocking(&policy, &no_params());
    assert!(
        matches!(past.result, Err(Error::DeadlineExceeded { .. })),
        "{:?}",
        past.result
    );
    assert!(past.report.duration < Duration::from_millis(1000));
    assert_fanout_still_works(&runtime, "python");
}

/// A synchronous JavaScript wait can only spin on `Date.now()`, which the
/// virtual clock never moves: the call ends at its deadline.
#[test]
fn a_typescript_wait_spins_until_its_deadline() {
    let runtime = runtime();
    let limits = PolicyLimits {
        timeout_ms: Some(500),
        fuel: Some(u64::MAX),
        ..PolicyLimits::default()
    };
    let policy = load(&runtime, "typescript", "sleeper", limits);
    let outcome = runtime.reconcile_blocking(&policy, &input(job("w", "ns", json!({"ms": 10}))));
    assert!(
        matches!(outcome.result, Err(Error::DeadlineExceeded { .. })),
        "{:?}",
        outcome.result
    );
    assert!(outcome.report.duration < Duration::from_millis(500 + 50));
    assert_fanout_still_works(&runtime, "typescript");
}

#[test]
fn a_log_flood_is_cut_and_counted_and_the_result_returned() {
    let runtime = runtime();
    for language in LANGUAGES {
        let limits = PolicyLimits {
            timeout_ms: Some(10_000),
            fuel: Some(u64::MAX),
            ..PolicyLimits::default()
        };
        let policy = load(&runtime, language, "log-flood", limits);
        let flood = input(job("flood", "team-a", json!({"lines": 1000})));
        let outcome = runtime.reconcile_blocking(&policy, &flood);
        let reconciled = outcome
            .result
            .unwrap_or_else(|e| panic!("{language}: the flood's result: {e}"));
        assert_eq!(
            reconciled.status.message, "flooded 1000 lines",
            "{language}"
        );
        // Python's `print` writes to stdout and stderr, which the host caps
        // as output; TypeScript's `console` writes to the log.
        let (log_lines, writes_output) = match language {
            "python" => (1000, true),
            _ => (3000, false),
        };
        let report = &outcome.report;
        assert_eq!(report.log_lines, log_lines, "{language}: {report:?}");
        assert!(
            report.log_dropped >= log_lines - 100,
            "{language}: {report:?}"
        );
        assert_eq!(
            report.output_dropped > 0,
            writes_output,
            "{language}: {report:?}"
        );
        assert_fanout_still_works(&runtime, language);
    }
}
