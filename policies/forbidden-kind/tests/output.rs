//! The child it returns is a ClusterRoleBinding to cluster-admin.

use forbidden_kind::ForbiddenKind;
use policyhost_sdk::testing::{Call, JobFixture};

#[test]
fn the_child_is_a_cluster_admin_binding() {
    let json = Call::new(JobFixture::new("demo"))
        .reconcile::<ForbiddenKind>()
        .to_json()
        .expect("valid JSON");
    let child = &json["children"][0];
    assert_eq!(child["apiVersion"], "rbac.authorization.k8s.io/v1");
    assert_eq!(child["kind"], "ClusterRoleBinding");
    assert_eq!(child["manifest"]["kind"], "ClusterRoleBinding");
    assert_eq!(child["manifest"]["roleRef"]["name"], "cluster-admin");
}
