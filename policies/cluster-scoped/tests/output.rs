//! The child it returns is a Namespace.

use cluster_scoped::ClusterScoped;
use policyhost_sdk::testing::{Call, JobFixture};

#[test]
fn the_child_is_a_namespace() {
    let json = Call::new(JobFixture::new("demo"))
        .reconcile::<ClusterScoped>()
        .to_json()
        .expect("valid JSON");
    let child = &json["children"][0];
    assert_eq!(child["apiVersion"], "v1");
    assert_eq!(child["kind"], "Namespace");
    assert_eq!(child["manifest"]["metadata"]["name"], "demo-ns");
}
