//! The two children it returns name one object.

use duplicate_children::DuplicateChildren;
use policyhost_sdk::testing::{Call, JobFixture};

#[test]
fn both_children_name_the_same_configmap() {
    let json = Call::new(JobFixture::new("demo"))
        .reconcile::<DuplicateChildren>()
        .to_json()
        .expect("valid JSON");
    let children = json["children"].as_array().expect("children");
    assert_eq!(children.len(), 2);
    for child in children {
        assert_eq!(child["kind"], "ConfigMap");
        assert_eq!(child["name"], "demo-twin");
    }
    assert_ne!(children[0]["manifest"], children[1]["manifest"]);
}
