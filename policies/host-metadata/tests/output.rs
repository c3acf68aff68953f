//! Each mode sets the field it names, and nothing else of the host's.

use host_metadata::HostMetadata;
use policyhost_sdk::testing::{Call, JobFixture};
use serde_json::{Value, json};

fn metadata(mode: &str) -> Value {
    let json = Call::new(JobFixture::new("demo").params(json!({ "mode": mode })))
        .reconcile::<HostMetadata>()
        .to_json()
        .expect("valid JSON");
    json["children"][0]["manifest"]["metadata"].clone()
}

#[test]
fn each_mode_sets_its_field() {
    assert_eq!(
        metadata("finalizers")["finalizers"][0],
        "example.com/never-done"
    );
    assert_eq!(
        metadata("ownerReferences")["ownerReferences"][0]["controller"],
        true
    );
    assert_eq!(
        metadata("policyLabel")["labels"]["policyhost.dev/policy"],
        "fanout"
    );
    assert_eq!(
        metadata("reservedLabel")["labels"]["policyhost.dev/managed-by"],
        "elsewhere"
    );
    assert_eq!(
        metadata("reservedAnnotation")["annotations"]["policyhost.dev/force-release"],
        "true"
    );
    assert_eq!(metadata("generateName")["generateName"], "demo-");
    assert!(metadata("uid")["uid"].is_string());
    assert_eq!(metadata("resourceVersion")["resourceVersion"], "1");
    assert_eq!(
        metadata("managedFields")["managedFields"][0]["manager"],
        "policyhost"
    );
    for mode in ["finalizers", "uid"] {
        assert_eq!(metadata(mode)["name"], "demo-meta");
    }
}
