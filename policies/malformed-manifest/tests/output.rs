//! The harness rejects its output, as the host must.

use malformed_manifest::MalformedManifest;
use policyhost_sdk::testing::{Call, Error, JobFixture};

#[test]
fn the_harness_reports_the_manifest_as_invalid_output() {
    let outcome = Call::new(JobFixture::new("demo")).reconcile::<MalformedManifest>();
    let result = outcome.result.as_ref().expect("the policy itself succeeds");
    assert_eq!(result.children[0].name, "demo-broken");
    let error = outcome.to_json().unwrap_err();
    let Error::InvalidOutput(source) = &error else {
        panic!("expected invalid output, got {error}")
    };
    assert!(
        source
            .to_string()
            .contains("the manifest of child `demo-broken` is not JSON"),
        "{source}"
    );
}
