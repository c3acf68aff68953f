//! `policyhost policy diff`: what a policy's candidate answered otherwise
//! than the serving version, per DataJob, as `policy test` prints a failing
//! case, with each child the API server refused in a dry run (`REFUSED`).
//! Showing the faults and refusals marks them examined, which `policy
//! promote` asks for.

use std::process::ExitCode;

use clap::Args;
use policyhost::publisher::candidate::{Candidate, Policy};
use policyhost::shadow::Summary;
use policyhost::shadow::summary::JobDifference;

use super::cluster::{ClusterArgs, block_on};
use super::terminal::println;

/// Arguments of `policy diff`.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The policy whose candidate to show.
    name: String,
    #[command(flatten)]
    cluster: ClusterArgs,
}

pub(crate) fn run(args: &DiffArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let policy = Policy::new(client, &namespace, &args.name);
        let candidate = policy.candidate().await?;
        let serving = policy
            .serving()
            .await?
            .and_then(|map| {
                policyhost::policies::report::Annotations::read(kube::ResourceExt::annotations(
                    &map,
                ))
                .loaded_digest
            })
            .unwrap_or_else(|| "-".into());
        let differs = print(&args.name, &candidate, &serving);
        if let Some(summary) = candidate.current_summary()
            && (summary.faults > candidate.examined.of(summary)
                || summary.refused > candidate.examined.refused_of(summary))
        {
            policy.mark_examined(summary).await?;
        }
        Ok(if differs {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    })
}

/// Prints the candidate's summary; returns whether any call differed or
/// faulted.
fn print(policy: &str, candidate: &Candidate, serving: &str) -> bool {
    let name = kube::ResourceExt::name_any(&candidate.map);
    let Some(summary) = candidate.current_summary() else {
        println!(
            "candidate of policy {policy} (ConfigMap {name}): no shadow call reported yet; serving sha256:{serving}"
        );
        return false;
    };
    println!(
        "candidate sha256:{} of policy {policy} (ConfigMap {name}); serving sha256:{serving}",
        summary.digest
    );
    if !summary.serving.is_empty() && summary.serving != serving {
        println!(
            "compared with sha256:{}, which no longer serves: these calls say nothing of the serving version",
            summary.serving
        );
    }
    print_summary(summary)
}

/// Prints the counts and every kept difference; returns whether any call
/// differed or faulted.
pub(crate) fn print_summary(summary: &Summary) -> bool {
    println!("{}", counts(summary));
    for job in &summary.jobs {
        print_job(job);
    }
    if summary.jobs_left_out > 0 {
        println!("... and {} more DataJobs not kept", summary.jobs_left_out);
    }
    summary.differed()
}

/// The counts line.
fn counts(summary: &Summary) -> String {
    let mut line = format!(
        "{} same, {} differ, {} faults, {} skipped",
        summary.same, summary.differs, summary.faults, summary.skipped
    );
    if summary.refused + summary.unchecked > 0 {
        line.push_str(&format!(
            "; {} children refused by the API server's dry run",
            summary.refused
        ));
        if summary.unchecked > 0 {
            line.push_str(&format!(
                ", {} left unchecked by the dry-run budget",
                summary.unchecked
            ));
        }
    }
    if summary.outbound_refused > 0 {
        line.push_str(&format!(
            "; {} outbound requests refused (a shadow call has no side effect)",
            summary.outbound_refused
        ));
    }
    line
}

fn print_job(job: &JobDifference) {
    match &job.fault {
        Some(fault) => println!("FAULT  {} {} — {fault}", job.call, job.job),
        None => {
            println!("DIFF   {} {}", job.call, job.job);
            for difference in &job.differences {
                println!("         {difference}");
            }
            if job.more > 0 {
                println!("         ... and {} more differences", job.more);
            }
            for refused in &job.refused {
                println!("REFUSED {refused}");
            }
            if job.unchecked > 0 {
                println!(
                    "         ... {} children not checked: the dry-run budget was spent",
                    job.unchecked
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_say_when_requests_were_refused() {
        let mut summary = Summary::new("d".into());
        summary.same = 9;
        summary.differs = 1;
        assert_eq!(counts(&summary), "9 same, 1 differ, 0 faults, 0 skipped");
        summary.outbound_refused = 2;
        assert!(
            counts(&summary)
                .ends_with("; 2 outbound requests refused (a shadow call has no side effect)")
        );
        summary.refused = 3;
        summary.unchecked = 1;
        assert!(
            counts(&summary).contains(
                "; 3 children refused by the API server's dry run, 1 left unchecked by the dry-run budget;"
            ),
            "{}",
            counts(&summary)
        );
    }
}
