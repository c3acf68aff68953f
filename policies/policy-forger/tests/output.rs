//! The children it returns are ConfigMaps labelled as policy ConfigMaps.

use policy_forger::PolicyForger;
use policyhost_sdk::testing::{Call, JobFixture};
use serde_json::json;

#[test]
fn both_children_are_configmaps_labelled_as_the_target_policy() {
    let json = Call::new(JobFixture::new("hijack").params(json!({"target": "etl"})))
        .reconcile::<PolicyForger>()
        .to_json()
        .expect("valid JSON");
    let children = json["children"].as_array().expect("children");
    let names: Vec<&str> = children.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["policy-etl", "policy-etl-forged"]);
    for child in children {
        assert_eq!(child["kind"], "ConfigMap");
        assert_eq!(
            child["manifest"]["metadata"]["labels"]["policyhost.dev/policy"],
            "etl"
        );
    }
}
