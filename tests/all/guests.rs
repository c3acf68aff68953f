//! Every policy crate under `policies/` is exercised by some test here, as
//! wasmtime's `assert_test_exists` does for its test programs.

use crate::common;

#[test]
fn every_policy_crate_has_a_test_that_uses_it() {
    let dir = common::workspace().join("tests/all");
    let sources: String = std::fs::read_dir(&dir)
        .expect("tests/all")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| std::fs::read_to_string(e.path()).expect("read test source"))
        .collect();
    let untested: Vec<String> = common::policy_crates()
        .into_iter()
        .filter(|name| !sources.contains(&format!("\"{name}\"")))
        .collect();
    assert!(
        untested.is_empty(),
        "policies without a test in tests/all: {untested:?}"
    );
}

#[test]
fn every_policy_crate_is_built() {
    for name in common::policy_crates() {
        assert!(common::guest(&name).is_file());
    }
}
