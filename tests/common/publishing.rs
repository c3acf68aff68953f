//! Publishing policy versions as the tests do: a ConfigMap built and
//! applied as `policy push` applies it, the host's verdict awaited, and the
//! Events it records on policy ConfigMaps.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use policyhost::policies::configmap::{self, Compression, Settings};
use policyhost::policies::report::Annotations;
use policyhost::publisher::publish;

use super::cluster::{Env, eventually};
use super::for_every_namespace;
use policyhost::vocabulary::GRANT_LABEL;

/// The ConfigMap that ships `component` as policy `name` in the test's policy namespace.
pub fn policy_map(env: &Env, name: &str, component: &[u8], settings: &Settings) -> ConfigMap {
    configmap::build(
        name,
        &env.policy_namespace,
        component,
        settings,
        Compression::Auto,
    )
    .expect("a policy ConfigMap")
}

/// Applies `map` and waits for the host's verdict on it.
pub async fn push_map(env: &Env, map: &ConfigMap) -> Annotations {
    publish::apply(&env.client, map)
        .await
        .expect("apply the policy ConfigMap");
    publish::wait_observed(&env.client, map, Duration::from_secs(60))
        .await
        .expect("the host reports on the ConfigMap")
}

/// Pushes `component` as policy `name` with default settings; returns the verdict.
pub async fn push(env: &Env, name: &str, component: &[u8]) -> Annotations {
    push_map(
        env,
        &policy_map(env, name, component, &for_every_namespace()),
    )
    .await
}

/// Publishes `component` as the candidate of `policy` and waits for the
/// host's verdict.
pub async fn push_candidate(
    env: &Env,
    policy: &str,
    component: &[u8],
    settings: &Settings,
) -> Annotations {
    let map = configmap::into_candidate(policy_map(env, policy, component, settings), policy);
    push_map(env, &map).await
}

/// `policyhost policy ARGS…` in this test's policy namespace and cluster.
pub fn policy_command(env: &Env, args: &[&str]) -> std::process::Output {
    let kubeconfig = env.kubeconfig_file();
    let mut all = vec!["policy"];
    all.extend_from_slice(args);
    all.extend([
        "--namespace",
        env.policy_namespace.as_str(),
        "--kubeconfig",
        kubeconfig.to_str().expect("a UTF-8 path"),
    ]);
    super::process::policyhost(&all)
}

/// Applies the platform team's grant of `policy` (`grant-<policy>`) with
/// `data`.
pub async fn apply_grant(env: &Env, policy: &str, data: BTreeMap<String, String>) {
    let name = format!("grant-{policy}");
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(env.policy_namespace.clone()),
            labels: Some(BTreeMap::from([(
                GRANT_LABEL.to_owned(),
                policy.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    api.patch(
        &name,
        &PatchParams::apply("platform-team").force(),
        &Patch::Apply(&map),
    )
    .await
    .expect("apply the grant ConfigMap");
}

/// Events on the ConfigMap `name` of the policy namespace with reason `reason`.
pub async fn events_on(env: &Env, name: &str, reason: &str) -> Vec<Event> {
    events_about(env, &env.policy_namespace, ("ConfigMap", name), reason).await
}

/// Events in `namespace` on the object `(kind, name)` with reason `reason`.
pub async fn events_about(
    env: &Env,
    namespace: &str,
    (kind, name): (&str, &str),
    reason: &str,
) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), namespace);
    events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

/// Waits for an Event on ConfigMap `name` with `reason` whose note contains `text`.
pub async fn wait_event(env: &Env, name: &str, reason: &str, text: &str) -> Event {
    eventually(
        &format!("a {reason} Event on {name} saying `{text}`"),
        || async {
            events_on(env, name, reason)
                .await
                .into_iter()
                .find(|e| e.message.as_deref().is_some_and(|m| m.contains(text)))
        },
    )
    .await
}

/// The operator's count of `policy`'s shadow dry runs that came to `result`
/// (`accepted`, `refused`, `unchecked`).
pub fn dry_runs(env: &Env, policy: &str, result: &str) -> u64 {
    env.operator()
        .metrics
        .shadow_dry_runs_total
        .get_or_create(&policyhost::metrics::PolicyResult {
            policy: policy.to_owned(),
            result: result.to_owned(),
        })
        .get()
}
