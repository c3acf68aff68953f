//! `policyhost policy history` and `policy rollback`: the versions a policy
//! served, and one of them served again (`policyhost::policies::revisions`).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use policyhost::policies::configmap;
use policyhost::policies::report::Annotations;
use policyhost::policies::revisions::History;
use policyhost::publisher::candidate::Policy;
use policyhost::publisher::publish;
use policyhost::runtime::Digest;

use super::cluster::{ClusterArgs, block_on};
use super::push::WaitArgs;
use super::terminal::println;

/// Arguments of `policy history`.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// The policy.
    name: String,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Arguments of `policy rollback`.
#[derive(Debug, Args)]
pub(crate) struct RollbackArgs {
    /// The policy to roll back.
    name: String,
    /// The version to serve: its digest as `policy history` lists it, or
    /// enough of its first digits to name one (default: the version served
    /// before the current one).
    #[arg(long, value_name = "DIGEST")]
    to: Option<String>,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// What the serving ConfigMap of a policy says of its versions.
struct Served {
    history: History,
    current: Option<String>,
}

async fn served(policy: &Policy, name: &str, namespace: &str) -> anyhow::Result<Served> {
    let map = policy.serving().await?.with_context(|| {
        format!("policy {name} has no serving ConfigMap (policy-{name}) in namespace {namespace}")
    })?;
    let annotations = map.metadata.annotations.as_ref();
    Ok(Served {
        history: History::read(annotations),
        current: annotations.and_then(|a| Annotations::read(a).loaded_digest),
    })
}

pub(crate) fn history(args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let policy = Policy::new(client.clone(), &namespace, &args.name);
        let Served { history, current } = served(&policy, &args.name, &namespace).await?;
        // The targets pinned to each digest, if the pins can be read.
        let pins: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let pins = pins
            .get_opt(&configmap::pins_name(&args.name))
            .await
            .ok()
            .flatten()
            .and_then(|map| map.data)
            .unwrap_or_default();
        let pinned_to = |digest: &str| {
            let targets: Vec<&str> = pins
                .iter()
                .filter(|(_, value)| value.strip_prefix("sha256:") == Some(digest))
                .map(|(target, _)| target.as_str())
                .collect();
            targets.join(",")
        };
        if history.0.is_empty() {
            println!(
                "policy {} has no history yet: the host keeps a version once it serves (`--policy-history`)",
                args.name
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "   DIGEST                                                                   SERVED                    BY                PINNED"
        );
        for served in &history.0 {
            let mark = if Some(&served.digest) == current.as_ref() {
                "*"
            } else {
                " "
            };
            println!(
                "{mark}  sha256:{}  {:<24}  {:<16}  {}",
                served.digest,
                served.at,
                served.by,
                pinned_to(&served.digest)
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub(crate) fn rollback(args: &RollbackArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let policy = Policy::new(client.clone(), &namespace, &args.name);
        let Served { history, current } = served(&policy, &args.name, &namespace).await?;
        let target = match &args.to {
            Some(asked) => history.find(&args.name, asked)?,
            None => history.previous(&args.name, current.as_deref())?,
        };
        let digest = hex::decode(&target.digest)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .map(Digest)
            .with_context(|| format!("the history names `{}`, not a digest", target.digest))?;
        let map = configmap::rollback(&args.name, &namespace, digest);
        let applied = publish::apply(&client, &map).await?;
        println!(
            "configmap/{} applied in namespace {namespace}: policy {} asks for sha256:{} again (served {} by {})",
            configmap::configmap_name(&args.name),
            args.name,
            target.digest,
            target.at,
            target.by
        );
        args.wait.verdict(&client, &applied, "serving").await
    })
}
