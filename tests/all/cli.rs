//! The `policyhost policy` commands, run as the built binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::variants::built_for;
use crate::common::{self, guest, guest_bytes};

fn policyhost(args: &[&str]) -> Output {
    Command::new(common::policyhost_bin())
        .args(args)
        .env("POLICYHOST_LOG", "error")
        .output()
        .expect("run policyhost")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A scratch file unique to this test process.
fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = crate::common::scratch().join(format!("policyhost-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let file = dir.join(name);
    std::fs::write(&file, bytes).expect("write scratch file");
    file
}

fn example(name: &str) -> PathBuf {
    common::workspace().join("docs/examples").join(name)
}

#[test]
fn check_accepts_fanout_and_prints_digest_size_and_imports() {
    let out = policyhost(&["policy", "check", path(&guest("fanout"))]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("digest:   sha256:"), "{stdout}");
    assert!(stdout.contains("size:"), "{stdout}");
    assert!(stdout.contains("compile:"), "{stdout}");
    assert!(stdout.contains("wasi:cli/"), "{stdout}");
    assert!(stdout.contains("ok: loadable"), "{stdout}");
}

#[test]
fn check_accepts_a_component_importing_wasi_http_and_says_it_needs_a_grant() {
    let out = policyhost(&["policy", "check", path(&guest("bucket"))]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("wasi:http/outgoing-handler@"), "{stdout}");
    assert!(
        stdout.contains("ok: loadable; needs a grant: it imports `wasi:http/")
            && stdout.contains("(the ConfigMap `grant-bucket`)"),
        "{stdout}"
    );
}

#[test]
fn check_rejects_each_kind_of_bad_component_with_a_message() {
    let garbage = scratch("garbage.wasm", b"garbage");
    let core = scratch(
        "core.wasm",
        &wat::parse_str("(module)").expect("core module"),
    );
    let other_world = scratch(
        "world.wasm",
        &wat::parse_str("(component)").expect("component"),
    );
    let cases = [
        (
            garbage,
            "error[Corrupt]: policy is not a valid WebAssembly component",
        ),
        (core, "error[CoreModule]"),
        (
            other_world,
            "error[IncompatibleWorld]: policy does not implement world",
        ),
        (
            guest("keyvalue-import"),
            "error[UnsupportedImport]: policy imports `wasi:keyvalue/store@0.2.0-draft`",
        ),
        (
            scratch(
                "next-world.wasm",
                &built_for(&guest_bytes("fanout"), "policyhost:reconcile@0.2.0"),
            ),
            "error[UnservedWorld]: policy is refused: it was built with the python SDK 9.9.9 for world `policyhost:reconcile@0.2.0`; this host serves `policyhost:reconcile@0.1.0`",
        ),
    ];
    for (file, expected) in cases {
        let out = policyhost(&["policy", "check", path(&file)]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{} accepted", file.display());
        assert!(stderr.contains(expected), "{}: {stderr}", file.display());
    }
}

#[test]
fn run_prints_the_fanout_result_json_and_the_cost_on_stderr() {
    let out = policyhost(&[
        "policy",
        "run",
        path(&guest("fanout")),
        "--job",
        path(&example("datajob.yaml")),
        "--children",
        path(&example("children.yaml")),
        "--now",
        "1700000000000",
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let children = result["children"].as_array().expect("children");
    assert_eq!(
        children.len(),
        10 + 1,
        "10 workers plus the failed worker's record: {result}"
    );
    assert_eq!(result["status"]["outputs"]["desired"], 10);
    assert!(result["children"][0]["manifest"]["spec"].is_object());
    assert!(stderr.contains("reconcile: fuel "), "{stderr}");
    assert!(stderr.contains(" µs"), "{stderr}");
}

#[test]
fn run_cleanup_prints_the_cleanup_result() {
    let out = policyhost(&[
        "policy",
        "run",
        path(&guest("fanout")),
        "--job",
        path(&example("datajob.yaml")),
        "--children",
        path(&example("children.yaml")),
        "--cleanup",
        "--output",
        "yaml",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_saphyr::from_slice(&out.stdout).expect("stdout is YAML");
    assert_eq!(result["result"], "retryAfter");
}

#[test]
fn run_on_a_faulting_guest_exits_non_zero_with_the_typed_error() {
    let out = policyhost(&[
        "policy",
        "run",
        path(&guest("panics")),
        "--job",
        path(&example("datajob.yaml")),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error[Trap]: policy trapped: panicked at"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = policyhost(&[
        "policy",
        "run",
        path(&guest("infinite-loop")),
        "--job",
        path(&example("datajob.yaml")),
        "--timeout",
        "100ms",
        "--fuel",
        "100000000000",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("warning: fuel 100000000000 clamped"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error[OutOfFuel]") || stderr.contains("error[DeadlineExceeded]"),
        "{stderr}"
    );
}

#[test]
fn a_time_flag_reads_the_one_grammar_and_its_former_spelling_with_a_warning() {
    let run = |timeout: &str| {
        policyhost(&[
            "policy",
            "run",
            path(&guest("fanout")),
            "--job",
            path(&example("datajob.yaml")),
            "--timeout",
            timeout,
        ])
    };
    let out = run("2s");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );

    // The former spelling of this flag: a bare number of milliseconds.
    let out = run("2000");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: the duration `2000` is spelled the old way")
            && stderr.contains("write 2s"),
        "{stderr}"
    );

    let out = run("2 days");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`2 days` is not a duration") && stderr.contains("500ms, 2s, 1m or 1h"),
        "{stderr}"
    );
}

fn golden_dir() -> PathBuf {
    common::workspace().join("policies/fanout/tests/golden")
}

#[test]
fn test_passes_every_fanout_golden_case_through_the_component() {
    let cases = std::fs::read_dir(golden_dir())
        .expect("golden dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
        })
        .count();
    let out = policyhost(&[
        "policy",
        "test",
        path(&guest("fanout")),
        path(&golden_dir()),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        cases,
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{cases} passed, 0 failed")),
        "{stdout}"
    );
    assert!(stdout.contains("sha256:"), "{stdout}");
}

#[test]
fn test_fails_a_mismatching_case_and_lists_its_differences() {
    let original = golden_dir().join("reconcile-03-running.json");
    let mut case: Value =
        serde_json::from_slice(&std::fs::read(&original).expect("read case")).expect("JSON");
    case["expected"]["status"]["phase"] = "Succeeded".into();
    case["expected"]["requeueAfterMs"] = 1000.into();
    let wrong = scratch(
        "wrong-phase.json",
        serde_json::to_string_pretty(&case)
            .expect("JSON")
            .as_bytes(),
    );
    let out = policyhost(&[
        "policy",
        "test",
        path(&guest("fanout")),
        path(&original),
        path(&wrong),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("ok     {}", original.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("FAIL   {}", wrong.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("/status/phase: expected \"Succeeded\", got \"Running\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("/requeueAfterMs: expected 1000, missing"),
        "{stdout}"
    );
    assert!(stdout.contains("1 passed, 1 failed"), "{stdout}");
}

#[test]
fn test_names_a_missing_case_file_and_an_invalid_case() {
    let missing = crate::common::scratch().join("policyhost-no-such-case.json");
    let out = policyhost(&["policy", "test", path(&guest("fanout")), path(&missing)]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot read golden cases {}", missing.display()))
            && stderr.contains("No such file"),
        "{stderr}"
    );

    let typo = scratch(
        "typo.json",
        br#"{"call": "reconcile", "job": {"name": "demo", "nmespace": "x"}, "expected": {}}"#,
    );
    let out = policyhost(&["policy", "test", path(&guest("fanout")), path(&typo)]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("is not a valid case: unknown field `nmespace`"),
        "{stdout}"
    );

    let out = policyhost(&[
        "policy",
        "test",
        path(&guest("panics")),
        path(&golden_dir().join("reconcile-01-first-call.json")),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("error[Trap]: policy trapped"), "{stdout}");
}

#[test]
fn test_bless_writes_the_case_exactly_as_the_native_harness_does() {
    let original = golden_dir().join("reconcile-05-replace-failed.json");
    let text_of = |p: &Path| std::fs::read_to_string(p).expect("read case");
    let mut case: Value = serde_json::from_str(&text_of(&original)).expect("JSON");
    case["expected"] = Value::Null;
    let stale = scratch(
        "stale.json",
        serde_json::to_string(&case).expect("JSON").as_bytes(),
    );
    let out = policyhost(&[
        "policy",
        "test",
        path(&guest("fanout")),
        path(&stale),
        "--bless",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("0 failed, 1 blessed"), "{stdout}");
    assert_eq!(text_of(&stale), text_of(&original));
}

/// `policy bench` measures real calls: every call succeeded, the figures are
/// consistent, and its JSON says what it ran.
#[test]
fn bench_reports_calls_latency_and_fuel_of_fanout() {
    let job = common::workspace().join("host/benches/fanout-10.yaml");
    let out = policyhost(&[
        "policy",
        "bench",
        path(&guest("fanout")),
        "--job",
        path(&job),
        "--children",
        "3",
        "--duration",
        "500ms",
        "--concurrency",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let figures: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let number = |key: &str| {
        figures[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {figures}"))
    };
    assert!(number("calls") > 0.0, "{figures}");
    assert_eq!(figures["errors"], 0, "{figures}");
    assert_eq!(
        (figures["children"].clone(), figures["concurrency"].clone()),
        (3.into(), 2.into())
    );
    assert!(
        number("p50Us") > 0.0 && number("p50Us") <= number("p99Us"),
        "{figures}"
    );
    assert!(number("fuelPerCall") > 0.0, "{figures}");
    // Instantiating is part of every call, never all of it.
    assert!(
        number("instantiateP50Us") > 0.0 && number("instantiateP50Us") < number("p50Us"),
        "{figures}"
    );
    assert!(
        number("instantiateUs") > 0.0 && number("instantiateUs") < number("p99Us"),
        "{figures}"
    );
    let rate = number("calls") / number("seconds");
    assert!((rate - number("callsPerSecond")).abs() < 1.0, "{figures}");
}

/// A policy that fails on the bench's input is refused with its typed
/// error, not timed.
#[test]
fn bench_refuses_a_policy_that_fails_on_the_input() {
    let job = common::workspace().join("host/benches/fanout-10.yaml");
    let out = policyhost(&[
        "policy",
        "bench",
        path(&guest("panics")),
        "--job",
        path(&job),
        "--duration",
        "500ms",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the policy fails on this input"),
        "{stderr}"
    );
    assert!(stderr.contains("policyhost-test-panic"), "{stderr}");
}

#[test]
fn test_replays_the_bucket_cases_http_exchanges_through_the_component() {
    let dir = common::workspace().join("policies/bucket/tests/golden");
    let cases = std::fs::read_dir(&dir).expect("golden dir").count();
    let out = policyhost(&["policy", "test", path(&guest("bucket")), path(&dir)]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("{cases} passed, 0 failed")),
        "{stdout}"
    );

    // A case whose exchanges miss the confirming GET fails, naming the request.
    let mut case: Value = serde_json::from_slice(
        &std::fs::read(dir.join("cleanup-02-deleted-and-confirmed.json")).expect("read case"),
    )
    .expect("JSON");
    case["http"].as_array_mut().expect("exchanges").pop();
    let short = scratch("short-http.json", case.to_string().as_bytes());
    let out = policyhost(&["policy", "test", path(&guest("bucket")), path(&short)]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("the requests differ from the case's `http` exchanges"),
        "{stdout}"
    );
    assert!(
        stdout.contains("unexpected request GET https://storage.example.com/buckets/team-a-etl"),
        "{stdout}"
    );
}

#[test]
fn run_answers_a_components_requests_from_http_fixtures_and_needs_them() {
    let job = scratch(
        "bucket-job.yaml",
        b"apiVersion: policyhost.dev/v1alpha1\nkind: DataJob\nmetadata:\n  name: etl\n  namespace: team-a\n  uid: u-1\nspec:\n  policy: bucket\n  params:\n    service: https://storage.example.com\n",
    );
    let out = policyhost(&["policy", "run", path(&guest("bucket")), "--job", path(&job)]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "ran without a grant: {stderr}");
    assert!(stderr.contains("error[OutboundNotGranted]"), "{stderr}");
    assert!(stderr.contains("--http-fixtures"), "{stderr}");

    let fixtures = scratch(
        "bucket-fixtures.json",
        br#"[{"request":{"method":"PUT","url":"https://storage.example.com/buckets/team-a-etl"},"response":{"status":201}}]"#,
    );
    let run = |fixtures: &Path| {
        policyhost(&[
            "policy",
            "run",
            path(&guest("bucket")),
            "--job",
            path(&job),
            "--http-fixtures",
            path(fixtures),
        ])
    };
    let out = run(&fixtures);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(
        result["status"]["conditions"][0]["type"], "BucketReady",
        "{result}"
    );

    let none = scratch("no-fixtures.json", b"[]");
    let out = run(&none);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("HttpRequestDenied"),
        "the request outside the fixtures is refused: {stderr}"
    );
}

/// Text a terminal would obey: a title change, a screen clear, a C1 CSI, a
/// right-to-left override.
const HOSTILE: &str = "x\x1b]0;owned\x07\x1b[2J\u{9b}31m\u{202e}gpj";

/// [`HOSTILE`] as the CLI shows it.
const HOSTILE_SHOWN: &str = r"x\x1b]0;owned\x07\x1b[2J\u{9b}31m\u{202e}gpj";

/// Asserts `shown` holds none of [`HOSTILE`]'s raw controls, and each of its
/// lines at most the CLI's cap of 1,000 characters.
fn assert_shown_as_text(shown: &str) {
    assert!(
        !shown.contains(['\x1b', '\x07', '\u{9b}', '\u{202e}']),
        "a raw control reached the terminal: {shown:?}"
    );
    for line in shown.lines() {
        assert!(line.chars().count() <= 1_000, "a line of {}", line.len());
    }
}

#[test]
fn a_refused_policy_name_is_shown_escaped_not_obeyed() {
    let dir = common::scratch().join("never-created");
    let out = policyhost(&["policy", "new", HOSTILE, "--dir", path(&dir)]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: `{HOSTILE_SHOWN}` is not a valid policy name"
        )),
        "{stderr}"
    );
    assert_shown_as_text(&stderr);
    assert!(!dir.exists());
}

#[test]
fn the_replay_report_shows_a_recorded_datajobs_text_escaped_and_cut() {
    let mut case: Value = serde_json::from_slice(
        &std::fs::read(golden_dir().join("reconcile-01-first-call.json")).expect("read case"),
    )
    .expect("JSON");
    let long = "y".repeat(3_000);
    case["job"]["namespace"] = Value::from(HOSTILE);
    case["job"]["name"] = Value::from(format!("{HOSTILE}\n{long}"));
    let recorded = common::scratch().join("hostile-recorded");
    std::fs::create_dir_all(&recorded).expect("create the directory");
    std::fs::write(recorded.join("case.json"), case.to_string()).expect("write the case");
    let out = policyhost(&[
        "policy",
        "test",
        "--replay",
        path(&recorded),
        path(&guest("fanout")),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!(" reconcile {HOSTILE_SHOWN}/{HOSTILE_SHOWN}\\nyyy")),
        "{stdout}"
    );
    assert!(stdout.contains("y… ("), "the long line is cut: {stdout}");
    assert_shown_as_text(&stdout);
    assert_shown_as_text(&text(&out.stderr));
}
