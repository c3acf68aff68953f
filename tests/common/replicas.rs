//! Replicas of `policyhost run` side by side, each with an identity of its
//! own that the request log records with every request: on devcluster a
//! bearer token, on a real cluster a ServiceAccount the audit log names.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use serde_json::json;

use std::time::Duration;

use crate::common::cluster::{Env, create_namespace};
use crate::common::deployment::issued_token_kubeconfig;
use crate::common::process::{kubeconfig_with_token, policy_dir};

/// Lease timing of the test replicas: short, so a takeover takes seconds.
pub const LEASE: Duration = Duration::from_secs(4);
pub const RENEW: Duration = Duration::from_secs(3);
pub const RETRY: Duration = Duration::from_millis(500);

/// The flags of a replica alone in `env`: its namespace's DataJobs, the
/// test's instance, the policies of its policy namespace, no election;
/// then `more`.
pub fn alone_args(env: &Env, more: &[&str]) -> Vec<String> {
    let own = [
        "--namespace",
        env.namespace.as_str(),
        "--instance",
        &env.instance(),
        "--policy-namespace",
        env.policy_namespace.as_str(),
        "--leader-elect=false",
    ]
    .map(str::to_owned);
    own.into_iter()
        .chain(more.iter().map(|arg| (*arg).to_owned()))
        .collect()
}

/// The flags of a replica serving `fanout` in `env`'s namespace, its
/// Lease in `ops`, with the short timing.
pub fn replica_args(env: &Env, ops: &str) -> Vec<String> {
    let policies = policy_dir(&["fanout"], &env.namespace);
    [
        "--namespace",
        env.namespace.as_str(),
        "--policy-dir",
        &policies.to_string_lossy(),
        "--lease-namespace",
        ops,
        "--lease-duration",
        &format!("{}s", LEASE.as_secs()),
        "--renew-deadline",
        &format!("{}ms", RENEW.as_millis()),
        "--retry-period",
        &format!("{}ms", RETRY.as_millis()),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A namespace for the replicas' Lease, like `policyhost-system`.
pub async fn ops_namespace(env: &Env) -> String {
    let name = format!("{}-ops", env.namespace);
    create_namespace(&env.client, &name).await;
    name
}

/// Writes `kubeconfig` for replica `name` and returns the user it
/// authenticates as: on devcluster a bearer token naming it; on a real
/// cluster a ServiceAccount `name` of namespace `ops`, bound to
/// `cluster-admin` (the replicas' permissions are not the subject here).
pub async fn replica_identity(
    env: &Env,
    admin: &std::path::Path,
    ops: &str,
    name: &str,
    kubeconfig: &std::path::Path,
) -> String {
    if env.cluster.is_some() {
        kubeconfig_with_token(admin, name, kubeconfig);
        return name.to_owned();
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client.clone(), ops);
    let account = serde_json::from_value(json!({"metadata": {"name": name}})).expect("an account");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create the replica's ServiceAccount");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{ops}-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ops}],
    }))
    .expect("a binding");
    Api::<ClusterRoleBinding>::all(env.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the replica's ServiceAccount");
    issued_token_kubeconfig(admin, ops, name, kubeconfig);
    format!("system:serviceaccount:{ops}:{name}")
}
