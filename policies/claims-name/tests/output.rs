//! The child it returns is the ConfigMap its params name, overwriting data.

use claims_name::ClaimsName;
use policyhost_sdk::testing::{Call, JobFixture};
use serde_json::json;

#[test]
fn the_child_is_the_configmap_the_params_name() {
    let json = Call::new(JobFixture::new("thief").params(json!({"name": "settings"})))
        .reconcile::<ClaimsName>()
        .to_json()
        .expect("valid JSON");
    let child = &json["children"][0];
    assert_eq!(child["kind"], "ConfigMap");
    assert_eq!(child["name"], "settings");
    assert_eq!(child["manifest"]["metadata"]["name"], "settings");
    assert_eq!(child["manifest"]["data"]["claimedBy"], "thief");
}

#[test]
fn data_from_the_params_joins_the_claim() {
    let json =
        Call::new(JobFixture::new("etl").params(json!({"name": "settings", "data": {"a": "1"}})))
            .reconcile::<ClaimsName>()
            .to_json()
            .expect("valid JSON");
    let data = &json["children"][0]["manifest"]["data"];
    assert_eq!(data, &json!({"a": "1", "claimedBy": "etl"}));
}
