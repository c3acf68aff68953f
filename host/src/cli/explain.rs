//! `policyhost explain NS/NAME`: a DataJob's last decisions, oldest first,
//! and what changed from one to the next.
//!
//! The decisions are the DataJob's own `status.decisions`, read with the
//! kubeconfig: whoever may read the DataJob reads them, nobody else.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kube::ResourceExt as _;
use policyhost::crd::{DataJob, Decision};

use super::cluster::{block_on, connect};
use super::status::one;
use super::terminal::print;

/// Hex digits of a digest shown: enough to tell versions apart, and what
/// `policy test --replay --input` takes.
const SHOWN_DIGITS: usize = 12;

/// Arguments of `explain`.
#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// The DataJob, as `NAME` (in `--namespace`, or the kubeconfig's
    /// namespace) or `NAMESPACE/NAME`.
    target: String,
    /// The namespace.
    #[arg(long, short = 'n', value_name = "NS")]
    namespace: Option<String>,
    /// Show only the last N decisions.
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, or the in-cluster config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

pub(crate) fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, default_namespace) = connect(args.kubeconfig.as_deref()).await?;
        let namespace = args.namespace.clone().unwrap_or(default_namespace);
        Ok(match one(client, &namespace, &args.target).await? {
            Some(job) => {
                print!("{}", explain(&job, args.last));
                ExitCode::SUCCESS
            }
            None => ExitCode::FAILURE,
        })
    })
}

/// The text for `job`'s last `last` decisions (all it has by default).
fn explain(job: &DataJob, last: Option<usize>) -> String {
    let decisions = job.status.as_ref().map_or(&[][..], |s| &s.decisions[..]);
    let from = last.map_or(0, |n| decisions.len().saturating_sub(n));
    let shown = &decisions[from..];
    let mut out = format!(
        "DataJob {}/{}, policy {}: ",
        job.namespace().unwrap_or_default(),
        job.name_any(),
        job.spec.policy
    );
    if shown.is_empty() {
        out.push_str(
            "no decision recorded (no serving call has answered yet, or the operator keeps none: --decision-history 0)\n",
        );
        return out;
    }
    let _ = writeln!(
        out,
        "{} of {} decisions recorded, oldest first",
        shown.len(),
        decisions.len()
    );
    let mut previous = from.checked_sub(1).map(|i| &decisions[i]);
    for (i, decision) in shown.iter().enumerate() {
        out.push('\n');
        describe(&mut out, from + i + 1, decision, previous);
        previous = Some(decision);
    }
    let _ = writeln!(
        out,
        "\nto replay a decision's input on a version (with the operator's --record-calls DIR):\n  policyhost policy test --replay DIR/{} --input sha256:<input> COMPONENT.wasm",
        job.spec.policy
    );
    out
}

/// One decision, numbered `n`, after `previous`.
fn describe(out: &mut String, n: usize, decision: &Decision, previous: Option<&Decision>) {
    let _ = writeln!(
        out,
        "#{n} {}  {}  {}",
        decision.at.0, decision.call, decision.outcome
    );
    let answer = decision
        .answer
        .as_deref()
        .map_or_else(|| "none (a fault)".to_owned(), short);
    let _ = writeln!(
        out,
        "   version {}  input {}  answer {answer}",
        short(&decision.version),
        short(&decision.input)
    );
    let _ = writeln!(
        out,
        "   fuel {}  time {:.2} ms",
        decision.fuel,
        decision.micros as f64 / 1000.0
    );
    if let Some(previous) = previous {
        let _ = writeln!(out, "   since #{}: {}", n - 1, changes(previous, decision));
    }
    let lists = [
        ("", &decision.writes),
        ("event ", &decision.events),
        ("outbound ", &decision.outbound),
    ];
    for (prefix, lines) in lists {
        for line in lines {
            let _ = writeln!(out, "   {prefix}{line}");
        }
    }
    if decision.writes.is_empty() {
        out.push_str("   no child written\n");
    }
}

/// What differs from `before` to `after`, in words.
fn changes(before: &Decision, after: &Decision) -> String {
    let mut said = Vec::new();
    if before.version != after.version {
        said.push(format!(
            "version {} → {}",
            short(&before.version),
            short(&after.version)
        ));
    }
    if before.call != after.call {
        said.push(format!("{} → {}", before.call, after.call));
    }
    if before.input != after.input {
        said.push("input changed (the DataJob or its children)".to_owned());
    }
    if before.answer != after.answer {
        said.push("answer changed".to_owned());
    }
    if before.outcome != after.outcome {
        said.push(format!("{} → {}", before.outcome, after.outcome));
    }
    if said.is_empty() {
        "the same version, input and answer".to_owned()
    } else {
        said.join("; ")
    }
}

/// `sha256:` and the first [`SHOWN_DIGITS`] hex digits.
fn short(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("sha256:{}", &hex[..hex.len().min(SHOWN_DIGITS)])
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use policyhost::crd::DataJobStatus;

    use super::*;

    fn decision(version: &str, input: &str, outcome: &str, writes: &[&str]) -> Decision {
        Decision {
            at: Time("2026-12-07T08:00:00Z".parse().unwrap()),
            call: "reconcile".into(),
            version: format!("sha256:{version}"),
            input: format!("sha256:{input}"),
            answer: Some("sha256:aaaaaaaaaaaaaaaa".into()),
            outcome: outcome.into(),
            writes: writes.iter().map(|w| (*w).to_owned()).collect(),
            events: vec!["Started".into()],
            outbound: Vec::new(),
            fuel: 1234,
            micros: 850,
        }
    }

    fn job(decisions: Vec<Decision>) -> DataJob {
        let mut job = DataJob::of_policy("team-a", "hello-1", "fanout");
        job.status = Some(DataJobStatus {
            decisions,
            ..DataJobStatus::default()
        });
        job
    }

    #[test]
    fn each_decision_says_what_changed_since_the_one_before() {
        let job = job(vec![
            decision(
                "1111111111111111",
                "0000000000000000",
                "Reconciled",
                &["created Pod hello-1-main"],
            ),
            decision("1111111111111111", "2222222222222222", "Reconciled", &[]),
            decision(
                "3333333333333333",
                "2222222222222222",
                "ImmutableChange",
                &["refused: Pod hello-1-main: server-side apply failed: 422 Invalid"],
            ),
        ]);
        let text = explain(&job, None);
        assert!(
            text.starts_with(
                "DataJob team-a/hello-1, policy fanout: 3 of 3 decisions recorded, oldest first\n"
            ),
            "{text}"
        );
        assert!(text.contains("#1 2026-12-07T08:00:00Z  reconcile  Reconciled\n   version sha256:111111111111  input sha256:000000000000  answer sha256:aaaaaaaaaaaa\n   fuel 1234  time 0.85 ms\n   created Pod hello-1-main\n   event Started\n"), "{text}");
        assert!(
            text.contains("   since #1: input changed (the DataJob or its children)\n"),
            "{text}"
        );
        assert!(text.contains("   no child written\n"), "{text}");
        assert!(text.contains("   since #2: version sha256:111111111111 → sha256:333333333333; Reconciled → ImmutableChange\n"), "{text}");
        assert!(
            text.contains("policy test --replay DIR/fanout --input sha256:<input>"),
            "{text}"
        );

        let last = explain(&job, Some(1));
        assert!(last.contains("1 of 3 decisions"), "{last}");
        assert!(last.contains("#3 "), "{last}");
        assert!(
            last.contains("since #2: version"),
            "the one before still explains the change: {last}"
        );
        assert!(!last.contains("#1 "), "{last}");
    }

    #[test]
    fn a_datajob_without_decisions_says_why_there_may_be_none() {
        let text = explain(&job(Vec::new()), None);
        assert_eq!(
            text,
            "DataJob team-a/hello-1, policy fanout: no decision recorded (no serving call has answered yet, or the operator keeps none: --decision-history 0)\n"
        );
        let same = changes(
            &decision("1", "2", "Reconciled", &[]),
            &decision("1", "2", "Reconciled", &["created Pod x"]),
        );
        assert_eq!(same, "the same version, input and answer");
    }
}
