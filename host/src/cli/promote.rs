//! `policyhost policy promote`: the candidate becomes the serving version
//! (the usual hot swap), unless it faulted where `policy diff` has not
//! shown it.

use std::process::ExitCode;

use clap::Args;
use policyhost::publisher::candidate::Policy;

use super::cluster::{ClusterArgs, block_on};
use super::push::WaitArgs;
use super::terminal::println;

/// Arguments of `policy promote`.
#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    /// The policy whose candidate to promote.
    name: String,
    /// Promote even though the candidate faulted where `policy diff` has
    /// not shown it.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

pub(crate) fn run(args: &PromoteArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let policy = Policy::new(client.clone(), &namespace, &args.name);
        let serving = policy.promote(&client, args.force).await?;
        println!(
            "configmap/{} applied in namespace {namespace}: the candidate of policy {} is its serving version; the candidate's ConfigMap is retired",
            kube::ResourceExt::name_any(&serving),
            args.name
        );
        args.wait.verdict(&client, &serving, "serving").await
    })
}
