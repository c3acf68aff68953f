//! `policyhost policy pin` and `policy unpin`: DataJobs that keep a version
//! their policy served (`policyhost::policies::pins`), written into the
//! policy's `pins-<name>` ConfigMap.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use kube::api::{Api, Patch, PatchParams};
use policyhost::policies::configmap;
use policyhost::policies::revisions::History;
use policyhost::publisher::candidate::Policy;
use policyhost::vocabulary::{PINS_ROLE, POLICY_LABEL, ROLE_LABEL};
use serde_json::{Value, json};

use super::cluster::{ClusterArgs, block_on};
use super::push::WaitArgs;
use super::terminal::println;

/// Arguments of `policy pin`.
#[derive(Debug, Args)]
pub(crate) struct PinArgs {
    /// The policy.
    name: String,
    /// Whose DataJobs keep the version: `NAMESPACE`, or one DataJob
    /// `NAMESPACE/NAME`.
    target: String,
    /// The version to keep: its digest as `policy history` lists it, or
    /// enough of its first digits to name one.
    digest: String,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Arguments of `policy unpin`.
#[derive(Debug, Args)]
pub(crate) struct UnpinArgs {
    /// The policy.
    name: String,
    /// `NAMESPACE`, or `NAMESPACE/NAME`, as pinned.
    target: String,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// The `data` key of `target` (`NAMESPACE` or `NAMESPACE/NAME`).
fn key(target: &str) -> anyhow::Result<String> {
    match target.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            Ok(format!("{namespace}.{name}"))
        }
        None if !target.is_empty() => Ok(target.to_owned()),
        _ => anyhow::bail!("`{target}` is neither NAMESPACE nor NAMESPACE/NAME"),
    }
}

/// Sets (`Some`) or removes the pin `key` of policy `name`, and waits.
async fn write(
    cluster: &ClusterArgs,
    wait: &WaitArgs,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let (client, namespace) = cluster.connect().await?;
    let pins = configmap::pins_name(name);
    let patch = json!({
        "metadata": { "labels": { POLICY_LABEL: name, ROLE_LABEL: PINS_ROLE } },
        "data": { key: value.map_or(Value::Null, Value::from) },
    });
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), &namespace);
    let patched = api
        .patch(&pins, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| {
            format!("cannot patch ConfigMap {namespace}/{pins} (the platform team creates it beside policy-{name})")
        })?;
    println!(
        "configmap/{pins} patched in namespace {namespace}: {}",
        value.map_or_else(
            || format!("`{key}` unpinned"),
            |value| format!("`{key}` pinned to {value}")
        )
    );
    wait.verdict(&client, &patched, "pins in force").await
}

pub(crate) fn pin(args: &PinArgs) -> anyhow::Result<ExitCode> {
    let key = key(&args.target)?;
    block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let serving = Policy::new(client, &namespace, &args.name)
            .serving()
            .await?
            .with_context(|| format!("policy {} has no serving ConfigMap", args.name))?;
        let history = History::read(serving.metadata.annotations.as_ref());
        let served = history.find(&args.name, &args.digest)?;
        let value = format!("sha256:{}", served.digest);
        write(&args.cluster, &args.wait, &args.name, &key, Some(&value)).await
    })
}

pub(crate) fn unpin(args: &UnpinArgs) -> anyhow::Result<ExitCode> {
    let key = key(&args.target)?;
    block_on(write(&args.cluster, &args.wait, &args.name, &key, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_a_namespace_or_one_datajob() {
        assert_eq!(key("team-b").ok().as_deref(), Some("team-b"));
        assert_eq!(
            key("team-b/nightly").ok().as_deref(),
            Some("team-b.nightly")
        );
        for bad in ["", "/x", "team-b/"] {
            assert!(key(bad).is_err(), "{bad:?}");
        }
    }
}
