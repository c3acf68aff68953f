//! `policyhost policy rollout NAME start|status|pause|resume|abort`: the
//! policy's candidate reaching its DataJobs step by step
//! (`policyhost::policies::rollout`), through its `rollout-<name>`
//! ConfigMap.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use k8s_openapi::jiff::Timestamp;
use policyhost::policies::rollout::plan::keys;
use policyhost::policies::rollout::{Phase, Plan};
use policyhost::publisher::candidate::Policy;
use policyhost::publisher::rollout::{Ask, Rollout};
use policyhost::quantity::format_duration;

use super::cluster::{ClusterArgs, block_on};
use super::push::WaitArgs;
use super::terminal::println;

/// Arguments of `policy rollout`.
#[derive(Debug, Args)]
pub(crate) struct RolloutArgs {
    /// The policy whose candidate to roll out.
    name: String,
    #[command(subcommand)]
    action: Action,
}

/// What to do with the rollout.
#[derive(Debug, Subcommand)]
enum Action {
    /// Roll the candidate in service out by these steps, from the first,
    /// whatever ran before. Refused while it faulted or the API server
    /// refused its children where `policy diff` has not shown it (unless
    /// `--force`).
    Start(StartArgs),
    /// Where the rollout is: its plan, its step, the last transition.
    Status(ClusterArgs),
    /// Stay at the current step; the DataJobs it reached keep the candidate.
    Pause(ClusterArgs),
    /// Go on; after a rollback or an abort, from the first step again.
    Resume(ClusterArgs),
    /// Stop: every DataJob goes back to the serving version.
    Abort(ClusterArgs),
}

impl Action {
    fn cluster(&self) -> &ClusterArgs {
        match self {
            Self::Start(start) => &start.cluster,
            Self::Status(cluster)
            | Self::Pause(cluster)
            | Self::Resume(cluster)
            | Self::Abort(cluster) => cluster,
        }
    }
}

/// Arguments of `policy rollout NAME start`.
#[derive(Debug, Args)]
struct StartArgs {
    /// One step: a share of the DataJobs by the hash of their uid (`5%`),
    /// or a comma-separated list of namespaces (`team-a-ci`); steps add up.
    #[arg(long = "step", value_name = "SHARE|NAMESPACES", default_values = ["5%", "25%", "100%"])]
    steps: Vec<String>,
    /// How long each step lasts before the next, if every gate holds.
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    step_wait: String,
    /// The percentage points by which the candidate's rate of faults,
    /// refusals or failed DataJobs may exceed the serving version's.
    #[arg(long, default_value = "5%", value_name = "POINTS")]
    tolerance: String,
    /// Calls of the candidate in a step before a gate is judged early.
    #[arg(long, default_value = "10", value_name = "N")]
    min_calls: String,
    /// Start even though the candidate faulted, or the API server refused
    /// its children, where `policy diff` has not shown it.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

impl StartArgs {
    /// The plan the flags state (its digest set when written).
    fn plan(&self) -> anyhow::Result<Plan> {
        let data = BTreeMap::from([
            (
                keys::DIGEST.to_owned(),
                format!("sha256:{}", "0".repeat(64)),
            ),
            (keys::STEPS.to_owned(), self.steps.join("; ")),
            (keys::STEP_WAIT.to_owned(), self.step_wait.clone()),
            (keys::TOLERANCE.to_owned(), self.tolerance.clone()),
            (keys::MIN_CALLS.to_owned(), self.min_calls.clone()),
        ]);
        Plan::parse(&data).context("the rollout's flags")
    }
}

pub(crate) fn run(args: &RolloutArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, namespace) = args.action.cluster().connect().await?;
        let policy = Policy::new(client.clone(), &namespace, &args.name);
        let rollout = policyhost::policies::configmap::rollout_name(&args.name);
        let ask = match &args.action {
            Action::Start(start) => {
                let (plan, map) = policy
                    .start_rollout(start.plan()?, start.force)
                    .await
                    .with_context(|| {
                        format!("cannot start the rollout (the platform team creates ConfigMap {rollout} beside policy-{})", args.name)
                    })?;
                println!(
                    "configmap/{rollout} patched in namespace {namespace}: rolling out sha256:{} in {} steps of {}",
                    plan.digest,
                    plan.steps.len(),
                    format_duration(plan.step_wait)
                );
                return start.wait.verdict(&client, &map, "rollout accepted").await;
            }
            Action::Status(_) => {
                let shown = policy.rollout().await?;
                print_status(&args.name, shown.as_ref());
                return Ok(ExitCode::SUCCESS);
            }
            Action::Pause(_) => Ask::Pause,
            Action::Resume(_) => Ask::Resume,
            Action::Abort(_) => Ask::Abort,
        };
        policy.ask_rollout(ask).await?;
        println!(
            "configmap/{rollout} patched in namespace {namespace}: {ask:?} asked; `policyhost policy rollout {} status` shows when the host acted",
            args.name
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn print_status(name: &str, rollout: Option<&Rollout>) {
    let Some(rollout) = rollout else {
        println!("policy {name} has no rollout (`policyhost policy rollout {name} start`)");
        return;
    };
    if let Some(error) = &rollout.annotations.error {
        println!("refused by the host: {error}");
    }
    match &rollout.plan {
        Ok(plan) => {
            let steps: Vec<String> = plan.steps.iter().map(ToString::to_string).collect();
            println!("rollout of policy {name}: sha256:{}", plan.digest);
            println!(
                "steps:  {} ({} each; tolerance {}, gates judged after {} calls)",
                steps.join(" → "),
                format_duration(plan.step_wait),
                plan.tolerance,
                plan.min_calls
            );
        }
        Err(error) => println!("plan: {error}"),
    }
    let Some(status) = &rollout.status else {
        println!(
            "phase:  not started by the host yet (it waits for the planned candidate to be loaded)"
        );
        return;
    };
    let step = match (&rollout.plan, status.phase) {
        (Ok(plan), Phase::Progressing) => {
            let ends = status
                .step_started_ms
                .saturating_add(u64::try_from(plan.step_wait.as_millis()).unwrap_or(u64::MAX));
            let now = u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0);
            format!(
                ", step {} of {} ({} left)",
                status.step + 1,
                plan.steps.len(),
                format_duration(std::time::Duration::from_millis(ends.saturating_sub(now)))
            )
        }
        (Ok(plan), Phase::Paused) => format!(", step {} of {}", status.step + 1, plan.steps.len()),
        _ => String::new(),
    };
    println!("phase:  {:?}{step}", status.phase);
    let at = i64::try_from(status.at_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(String::new, |at| format!("{at:.0}"));
    println!("last:   {} at {at}: {}", status.reason, status.message);
}
