//! The `policyhost policy` commands, run as the built binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{self, guest};

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
    let dir = std::env::temp_dir().join(format!("policyhost-cli-{}", std::process::id()));
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
        (guest("socket-import"), "`wasi:sockets/tcp@0.2."),
        (
            guest("fs-read"),
            "error[UnsupportedImport]: policy imports `wasi:filesystem/",
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
    let result: Value = serde_yaml::from_slice(&out.stdout).expect("stdout is YAML");
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
        "100",
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
