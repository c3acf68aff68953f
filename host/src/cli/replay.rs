//! `policyhost policy test --replay DIR CANDIDATE.wasm`: a candidate over
//! the calls an operator recorded (`--record-calls`), each compared with
//! the answer the serving version gave, reported as `policy diff` reports
//! shadow calls. No request leaves the machine.

use std::path::Path;
use std::process::ExitCode;

use policyhost::runtime::{PolicySpec, Runtime};
use policyhost::shadow::Summary;
use policyhost::shadow::diff::{Answer, compare};
use policyhost::shadow::record::input_digest;
use policyhost_sdk::testing::{Golden, Kind};

use super::LimitArgs;
use super::golden::{case_files, input_of};
use super::registry::ComponentSource;
use super::terminal::println;

pub(crate) fn run(
    bytes: &[u8],
    component: &ComponentSource,
    recorded: &Path,
    input: Option<&str>,
    limits: &LimitArgs,
) -> anyhow::Result<ExitCode> {
    let mut files = case_files(&[recorded.to_path_buf()])?;
    if let Some(digest) = input {
        let digest = digest.strip_prefix("sha256:").unwrap_or(digest);
        let wanted = format!("sha256:{digest}");
        files.retain(|file| {
            Golden::load(file).is_ok_and(|case| input_digest(&input_of(&case)).starts_with(&wanted))
        });
        anyhow::ensure!(
            !files.is_empty(),
            "no call recorded in {} has the input {wanted}: the recorder keeps the last --record-calls-max per policy",
            recorded.display()
        );
    }
    let runtime = super::runtime(1)?;
    let spec = PolicySpec::new(component.name()).limits(limits.policy_limits());
    let Some(checked) = super::check::checked_for_grant(&runtime, spec, bytes) else {
        return Ok(ExitCode::FAILURE);
    };
    let policy = checked.policy;
    let mut summary = Summary::new(policy.digest().to_hex());
    for file in &files {
        let case = Golden::load(file)?;
        let label = format!(
            "{} ({})",
            job_of(&case),
            file.file_name().unwrap_or_default().to_string_lossy()
        );
        let (entry, answer) = call(&runtime, &policy, &case);
        let verdict = compare(&Answer::Result(case.expected.clone()), &answer);
        summary.record(&label, entry, &verdict);
    }
    println!(
        "candidate sha256:{} ({}) over {} recorded calls in {}",
        summary.digest,
        component,
        files.len(),
        recorded.display()
    );
    let differs = super::diff::print_summary(&summary);
    Ok(if differs {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn job_of(case: &Golden) -> String {
    let (job, _, _) = case.inputs();
    format!("{}/{}", job.namespace, job.name)
}

/// Calls the candidate on a recorded case, offline.
fn call(runtime: &Runtime, policy: &policyhost::Policy, case: &Golden) -> (&'static str, Answer) {
    let input = input_of(case);
    match case.call {
        Kind::Reconcile => (
            "reconcile",
            Answer::of(&runtime.reconcile_offline(policy, &input, &[]).result),
        ),
        Kind::Cleanup => (
            "cleanup",
            Answer::of(&runtime.cleanup_offline(policy, &input, &[]).result),
        ),
    }
}
