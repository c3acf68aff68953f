//! Its params size the output exactly.

use huge_output::HugeOutput;
use policyhost_sdk::testing::{Call, JobFixture};
use serde_json::json;

#[test]
fn params_choose_the_number_and_size_of_children() {
    let job = JobFixture::new("demo").params(json!({ "children": 3, "bytesPerChild": 1000 }));
    let json = Call::new(job)
        .reconcile::<HugeOutput>()
        .to_json()
        .expect("valid JSON");
    let children = json["children"].as_array().expect("children");
    assert_eq!(children.len(), 3);
    assert_eq!(children[2]["name"], "demo-blob-2");
    assert_eq!(
        children[0]["manifest"]["data"]["blob"]
            .as_str()
            .map(str::len),
        Some(1000)
    );
}

#[test]
fn unknown_params_are_refused() {
    let job = JobFixture::new("demo").params(json!({ "bytes": 1 }));
    let outcome = Call::new(job).reconcile::<HugeOutput>();
    assert!(matches!(
        outcome.result,
        Err(policyhost_sdk::PolicyError::InvalidParams(_))
    ));
}
