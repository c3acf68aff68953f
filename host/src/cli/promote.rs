//! `policyhost policy promote`: the candidate becomes the serving version
//! (the usual hot swap), unless it faulted where `policy diff` has not
//! shown it.

use std::process::ExitCode;

use clap::Args;
use policyhost::publisher::candidate::Policy;
use policyhost::publisher::publish;

use super::cluster::{ClusterArgs, block_on};
use super::duration::{self, DurationArg};
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
    /// Wait for the host to serve the promoted version.
    #[arg(long)]
    wait: bool,
    /// How long `--wait` waits.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = duration::seconds_before)]
    wait_timeout: DurationArg,
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
        if !args.wait {
            return Ok(ExitCode::SUCCESS);
        }
        let verdict = publish::wait_observed(&client, &serving, args.wait_timeout.0).await?;
        if let Some(error) = verdict.error {
            println!("rejected: {error}");
            return Ok(ExitCode::from(super::push::REJECTED));
        }
        println!(
            "serving sha256:{} since {}",
            verdict.loaded_digest.unwrap_or_default(),
            verdict.loaded_at.unwrap_or_default()
        );
        Ok(ExitCode::SUCCESS)
    })
}
