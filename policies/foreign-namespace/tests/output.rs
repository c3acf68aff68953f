//! The child it returns really names another namespace.

use foreign_namespace::ForeignNamespace;
use policyhost_sdk::testing::{Call, JobFixture};

fn namespace_of_child(job_namespace: &str) -> String {
    let outcome =
        Call::new(JobFixture::new("demo").namespace(job_namespace)).reconcile::<ForeignNamespace>();
    let json = outcome.to_json().expect("valid JSON");
    json["children"][0]["manifest"]["metadata"]["namespace"]
        .as_str()
        .expect("a namespace")
        .to_owned()
}

#[test]
fn the_child_aims_at_a_namespace_other_than_the_jobs() {
    assert_eq!(namespace_of_child("team-a"), "kube-system");
    assert_eq!(namespace_of_child("kube-system"), "default");
}
