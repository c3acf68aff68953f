//! The bucket golden cases through the native harness: each case lists the
//! HTTP exchanges the call must make and the storage service's answers.
//! `POLICYHOST_BLESS=1 cargo test -p bucket --test golden` rewrites the
//! expectations after an intended change (review the diff).

#[test]
fn every_golden_case_gives_its_expected_result() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    policyhost_sdk::testing::assert_golden_dir::<bucket::Bucket>(dir);
}
