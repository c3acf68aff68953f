//! `policyhost status`: where a DataJob stands, its finalizer first — the
//! command a person reaches for when a DataJob is stuck `Terminating`.
//!
//! It reads the cluster with the kubeconfig, as kubectl does, and prints a
//! block for one DataJob or a table for every Terminating one.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use policyhost::crd::DataJob;
use policyhost::finalizer::{Pending, TERMINATING};
use policyhost::shard::{BUCKETS, Bucket, MEMBER_LABEL, claimant};

use super::cluster::{block_on, connect};
use super::terminal::{eprintln, print};
use policyhost::vocabulary::{FINALIZER, FORCE_RELEASE_ANNOTATION};

/// Arguments of `status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The DataJob, as `NAME` (in `--namespace`, or the kubeconfig's
    /// namespace) or `NAMESPACE/NAME`.
    #[arg(
        required_unless_present = "all_terminating",
        conflicts_with = "all_terminating"
    )]
    target: Option<String>,
    /// Every DataJob whose deletion was requested, oldest deletion first.
    #[arg(long)]
    all_terminating: bool,
    /// The namespace; with `--all-terminating`, default all namespaces.
    #[arg(long, short = 'n', value_name = "NS")]
    namespace: Option<String>,
    /// Kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, or the in-cluster config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

pub(crate) fn run(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, default_namespace) = connect(args.kubeconfig.as_deref()).await?;
        let now = Timestamp::now();
        if args.all_terminating {
            let api: Api<DataJob> = match &args.namespace {
                Some(namespace) => Api::namespaced(client, namespace),
                None => Api::all(client),
            };
            let list = api
                .list(&ListParams::default())
                .await
                .context("cannot list DataJobs")?;
            let mut jobs: Vec<DataJob> = list
                .items
                .into_iter()
                .filter(|job| job.metadata.deletion_timestamp.is_some())
                .collect();
            jobs.sort_by_key(|job| job.metadata.deletion_timestamp.as_ref().map(|t| t.0));
            print!("{}", table(&jobs, now));
            return Ok(ExitCode::SUCCESS);
        }
        let target = args.target.as_deref().unwrap_or_default();
        let namespace = args.namespace.clone().unwrap_or(default_namespace);
        Ok(match one(client.clone(), &namespace, target).await? {
            Some(job) => {
                let shard = shard(&client, &job, now).await;
                print!("{}", block(&job, shard.as_deref(), now));
                ExitCode::SUCCESS
            }
            None => ExitCode::FAILURE,
        })
    })
}

/// The DataJob `target` (`NAME` in `namespace`, or `NAMESPACE/NAME`); none,
/// said on stderr, when it does not exist.
pub(crate) async fn one(
    client: Client,
    namespace: &str,
    target: &str,
) -> anyhow::Result<Option<DataJob>> {
    let (namespace, name) = target.split_once('/').unwrap_or((namespace, target));
    let api: Api<DataJob> = Api::namespaced(client, namespace);
    let job = api
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read DataJob {namespace}/{name}"))?;
    if job.is_none() {
        eprintln!(
            "DataJob {namespace}/{name} does not exist (deleted and released, or never created)"
        );
    }
    Ok(job)
}

/// Where a DataJob's finalizer stands, in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Not deleted, finalizer present.
    Held,
    /// Not deleted, no finalizer yet.
    NotYetHeld,
    /// Deleted and holding the finalizer.
    Pending(Pending),
    /// Deleted, the finalizer is gone: other finalizers keep it.
    Released,
}

impl Standing {
    fn of(job: &DataJob) -> Self {
        let held = job.finalizers().iter().any(|f| f == FINALIZER);
        match (job.metadata.deletion_timestamp.is_some(), Pending::of(job)) {
            (true, Some(pending)) => Self::Pending(pending),
            (true, None) => Self::Released,
            (false, _) if held => Self::Held,
            (false, _) => Self::NotYetHeld,
        }
    }

    /// The short word of the table.
    fn word(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::NotYetHeld => "not-yet-held",
            Self::Pending(pending) => pending.label(),
            Self::Released => "released",
        }
    }

    /// The sentence of the block.
    fn sentence(self) -> String {
        match self {
            Self::Held => format!("{FINALIZER} held (cleanup runs when the DataJob is deleted)"),
            Self::NotYetHeld => format!(
                "{FINALIZER} not added yet (the operator adds it before anything else; is it running?)"
            ),
            Self::Pending(Pending::Cleaning) => format!("{FINALIZER} held: cleanup in progress"),
            Self::Pending(Pending::Failing) => {
                format!("{FINALIZER} held: cleanup failing, retried with backoff")
            }
            Self::Pending(Pending::Blocked) => {
                format!("{FINALIZER} held: BLOCKED, the cleanup budget is exhausted")
            }
            Self::Pending(Pending::PolicyUnavailable) => {
                format!("{FINALIZER} held: the policy is not in service")
            }
            Self::Released => format!("{FINALIZER} released; other finalizers remain"),
        }
    }
}

/// What a person can do next.
fn next_step(job: &DataJob, standing: Standing) -> String {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_default();
    match standing {
        Standing::Held => "nothing: the DataJob is active".to_owned(),
        Standing::NotYetHeld => {
            "check that the operator runs and watches this namespace".to_owned()
        }
        Standing::Pending(Pending::Cleaning) => {
            "wait: the policy's cleanup decides when it is done".to_owned()
        }
        Standing::Pending(Pending::Failing) => {
            "see the last error; the operator retries with growing delays".to_owned()
        }
        Standing::Pending(Pending::Blocked) => format!(
            "fix the cause of the last error (cleanup keeps being retried), or release without cleanup:\n\
             kubectl annotate datajob -n {namespace} {name} {FORCE_RELEASE_ANNOTATION}=true"
        ),
        Standing::Pending(Pending::PolicyUnavailable) => format!(
            "put policy {} back in service: cleanup resumes by itself",
            job.spec.policy
        ),
        Standing::Released => "wait for the other finalizers' controllers".to_owned(),
    }
}

/// The block printed for one DataJob.
/// Which shard serves the DataJob, when the operator runs sharded and the
/// member Leases can be read (`None` otherwise: one replica serves all).
async fn shard(client: &Client, job: &DataJob, now: Timestamp) -> Option<String> {
    let leases: Api<Lease> = Api::all(client.clone());
    let leases = leases
        .list(&ListParams::default().labels(MEMBER_LABEL))
        .await
        .ok()?
        .items;
    if leases.is_empty() {
        return None;
    }
    let bucket = Bucket::of_uid(&job.uid().unwrap_or_default());
    let of = format!("bucket {} of {BUCKETS}", bucket.index());
    Some(match claimant(&leases, bucket, now) {
        Some(member) => format!("{of}, served by {member}"),
        None => format!("{of}, served by no live shard now (moving, or none is up)"),
    })
}

fn block(job: &DataJob, shard: Option<&str>, now: Timestamp) -> String {
    let status = job.status.clone().unwrap_or_default();
    let standing = Standing::of(job);
    let mut out = String::new();
    // Labels in a column of 18; continuation lines start under the values.
    let mut line = |label: &str, value: &str| {
        let label = if label.is_empty() {
            String::new()
        } else {
            format!("{label}:")
        };
        let value = value.replace('\n', &format!("\n{:18}", ""));
        let _ = writeln!(out, "{label:<17} {value}");
    };
    line(
        "DataJob",
        &format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any()),
    );
    line("UID", &job.uid().unwrap_or_default());
    let phase = match (&status.phase, job.metadata.deletion_timestamp.is_some()) {
        (Some(phase), _) => phase.clone(),
        (None, true) => TERMINATING.to_owned(),
        (None, false) => "(none yet)".to_owned(),
    };
    line("Phase", &phase);
    match &job.metadata.deletion_timestamp {
        Some(at) => line(
            "Deletion",
            &format!("requested {} ago ({})", age(at.0, now), at.0),
        ),
        None => line("Deletion", "not requested"),
    }
    line("Finalizer", &standing.sentence());
    if let Some(shard) = shard {
        line("Shard", shard);
    }
    let others: Vec<&str> = job
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| *f != FINALIZER)
        .collect();
    if !others.is_empty() {
        line("Other finalizers", &others.join(", "));
    }
    let policy = match &status.policy {
        Some(acting) if acting.name == job.spec.policy => {
            format!("{} (digest {})", acting.name, acting.digest)
        }
        Some(acting) => format!(
            "{} (last acted: {} digest {})",
            job.spec.policy, acting.name, acting.digest
        ),
        None => format!("{} (has not acted yet)", job.spec.policy),
    };
    line("Policy", &policy);
    match &status.cleanup {
        Some(cleanup) => {
            let last = cleanup
                .last_attempt_time
                .as_ref()
                .map_or_else(String::new, |t| format!("; last {} ago", age(t.0, now)));
            line(
                "Cleanup",
                &format!(
                    "{} attempts, {} failed{last}",
                    cleanup.attempts, cleanup.failures
                ),
            );
            line(
                "Last error",
                cleanup
                    .last_error
                    .as_deref()
                    .unwrap_or("none (the last attempt did not fail)"),
            );
        }
        None if job.metadata.deletion_timestamp.is_some() => {
            line("Cleanup", "no attempt recorded yet")
        }
        None => {}
    }
    if let Some(message) = &status.message {
        line("Message", message);
    }
    let mut first = true;
    for condition in &status.conditions {
        let text = format!(
            "{}={} ({}) for {}{}",
            condition.type_,
            condition.status,
            condition.reason,
            age(condition.last_transition_time.0, now),
            if condition.message.is_empty() {
                String::new()
            } else {
                format!(": {}", condition.message)
            }
        );
        line(if first { "Conditions" } else { "" }, &text);
        first = false;
    }
    line("Next step", &next_step(job, standing));
    out
}

/// The table printed for many DataJobs.
fn table(jobs: &[DataJob], now: Timestamp) -> String {
    if jobs.is_empty() {
        return "No DataJob is being deleted.\n".to_owned();
    }
    let header = [
        "NAMESPACE",
        "NAME",
        "POLICY",
        "FINALIZER",
        "ATTEMPTS",
        "FAILED",
        "DELETED",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 8]> = jobs
        .iter()
        .map(|job| {
            let cleanup = job.status.as_ref().and_then(|s| s.cleanup.clone());
            [
                job.namespace().unwrap_or_default(),
                job.name_any(),
                job.spec.policy.clone(),
                Standing::of(job).word().to_owned(),
                cleanup.as_ref().map_or(0, |c| c.attempts).to_string(),
                cleanup.as_ref().map_or(0, |c| c.failures).to_string(),
                job.metadata
                    .deletion_timestamp
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |t| format!("{} ago", age(t.0, now))),
                cleanup
                    .and_then(|c| c.last_error)
                    .map_or_else(|| "-".to_owned(), |e| shorten(&e, 80)),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut print_row = |cells: &[&str]| {
        let last = cells.len() - 1;
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                let _ = writeln!(out, "{cell}");
            } else {
                let _ = write!(out, "{cell:<width$}  ", width = widths[i]);
            }
        }
    };
    print_row(&header);
    for row in &rows {
        print_row(&row.each_ref().map(String::as_str));
    }
    out
}

/// `42s`, `5m12s`, `3h4m`, `2d5h`.
fn age(since: Timestamp, now: Timestamp) -> String {
    let ms = now
        .as_millisecond()
        .saturating_sub(since.as_millisecond())
        .max(0);
    let secs = Duration::from_millis(u64::try_from(ms).unwrap_or(0)).as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// At most `max` characters of one line of `text`.
fn shorten(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max && line.len() == text.len() {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use policyhost::crd::{CleanupStatus, DataJobStatus, PolicyRef};

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn blocked_job() -> DataJob {
        let mut job = DataJob::of_policy("team", "etl", "flaky");
        job.metadata.uid = Some("u-1".into());
        job.metadata.finalizers = Some(vec!["example.com/keep".into(), FINALIZER.into()]);
        job.metadata.deletion_timestamp = Some(Time(at(1_000)));
        job.status = Some(DataJobStatus {
            phase: Some(TERMINATING.into()),
            policy: Some(PolicyRef {
                name: "flaky".into(),
                digest: "ab12".into(),
            }),
            cleanup: Some(CleanupStatus {
                attempts: 5,
                failures: 5,
                last_error: Some("PolicyFailed: bucket busy".into()),
                last_attempt_time: Some(Time(at(1_300))),
            }),
            conditions: vec![Condition {
                type_: "CleanupBlocked".into(),
                status: "True".into(),
                reason: "MaxAttemptsExceeded".into(),
                message: "cleanup failed 5 times".into(),
                last_transition_time: Time(at(1_200)),
                observed_generation: None,
            }],
            ..DataJobStatus::default()
        });
        job
    }

    #[test]
    fn the_block_of_a_blocked_datajob_says_what_is_wrong_and_what_to_do() {
        let text = block(&blocked_job(), None, at(1_312));
        for expected in [
            "DataJob:          team/etl\n",
            "Phase:            Terminating\n",
            "Deletion:         requested 5m12s ago (1970-01-01T00:16:40Z)\n",
            "Finalizer:        policyhost.dev/cleanup held: BLOCKED, the cleanup budget is exhausted\n",
            "Other finalizers: example.com/keep\n",
            "Policy:           flaky (digest ab12)\n",
            "Cleanup:          5 attempts, 5 failed; last 12s ago\n",
            "Last error:       PolicyFailed: bucket busy\n",
            "Conditions:       CleanupBlocked=True (MaxAttemptsExceeded) for 1m52s: cleanup failed 5 times\n",
            "kubectl annotate datajob -n team etl policyhost.dev/force-release=true",
        ] {
            assert!(text.contains(expected), "{expected:?} missing from\n{text}");
        }
    }

    #[test]
    fn the_table_has_one_aligned_row_per_datajob() {
        let mut other = blocked_job();
        other.metadata.name = Some("a-much-longer-name".into());
        other.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        let text = table(&[blocked_job(), other], at(1_060));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("NAMESPACE  NAME                POLICY  FINALIZER"),
            "{text}"
        );
        assert!(lines[1].contains(" blocked "), "{text}");
        assert!(
            lines[1].ends_with("1m0s ago  PolicyFailed: bucket busy"),
            "{text}"
        );
        assert!(lines[2].contains(" released "), "{text}");
        assert_eq!(lines[1].find("POLICY"), None);
        assert_eq!(
            lines[0].find("FINALIZER"),
            lines[1].find("blocked"),
            "columns align:\n{text}"
        );
    }

    #[test]
    fn an_empty_table_says_so() {
        assert_eq!(table(&[], at(0)), "No DataJob is being deleted.\n");
    }

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(at(0), at(42)), "42s");
        assert_eq!(age(at(0), at(312)), "5m12s");
        assert_eq!(age(at(0), at(3 * 3600 + 240)), "3h4m");
        assert_eq!(age(at(0), at(2 * 86_400 + 5 * 3600)), "2d5h");
        assert_eq!(age(at(10), at(0)), "0s", "a clock behind the server's");
    }

    #[test]
    fn long_errors_are_cut_to_one_line_in_the_table() {
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("first line\nsecond", 80), "first line…");
        assert_eq!(shorten("abcdefghij", 5), "abcd…");
    }
}
