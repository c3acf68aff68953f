//! The fuzz targets' corpus (`fuzz/corpus/<target>/`), replayed: every input the fuzzer
//! kept, and every seed, still passes its target's checks.

use std::path::PathBuf;

/// Runs `target` on every input of its corpus, naming the input that fails.
fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} holds no input", dir.display());
    for input in &inputs {
        let data = std::fs::read(input).expect("a corpus file");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target} fails on {}", input.display());
    }
}

#[test]
fn policy_configmaps() {
    replay("policy_configmap", policyhost::fuzzing::policy_configmap);
}

#[test]
fn guest_outputs() {
    replay("guest_output", policyhost::fuzzing::guest_output);
}

#[test]
fn outbound_origins() {
    replay("outbound_origin", policyhost::fuzzing::outbound_origin);
}

#[test]
fn allocation_scripts() {
    replay("allocator", policyhost_sdk::fuzzing::allocator);
}

#[test]
fn patches_and_applies() {
    replay("patch", devcluster::fuzzing::patch);
}
