//! The fanout golden cases through the native harness.
//!
//! Each `tests/golden/*.json` holds one call's inputs and the result JSON the
//! policy must produce; the host runs the same files through the compiled
//! component. `POLICYHOST_BLESS=1 cargo test -p fanout --test golden`
//! rewrites the expectations after an intended change (review the diff).

#[test]
fn every_golden_case_gives_its_expected_result() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    policyhost_sdk::testing::assert_golden_dir::<fanout::Fanout>(dir);
}
