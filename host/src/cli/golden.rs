//! `policyhost policy test`: the compiled component against golden cases.
//!
//! A golden case is one call's inputs and the result JSON it must give. The
//! files are the SDK's (`policyhost_sdk::testing::Golden`, format in
//! `policies/fanout/tests/golden/README.md`) and are read by the SDK's own
//! parser, so a case means the same thing here and under `cargo test`: the
//! same defaults, the same refusal of unknown fields. Here it runs through the
//! real runtime (the checks of `policy check`, the limits, the output checks),
//! which is what the operator will run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use policyhost::outbound::Fixtures;
use policyhost::runtime::{
    Child, ChildPhase, Context, DataJob, Error, Input, KeyValue, Policy, PolicySpec, Runtime,
};
use policyhost::shadow::diff;
use policyhost_sdk::testing::{Golden, Kind};
use serde_json::Value;

use super::LimitArgs;
use super::registry::{ComponentSource, RegistryArgs};
use super::terminal::{eprintln, println};

/// At most this many differences are listed per failing case.
const MAX_DIFFERENCES: usize = 20;

/// Arguments of `policy test`.
#[derive(Debug, Args)]
pub(crate) struct TestArgs {
    /// The policy component: a `.wasm` file, or an OCI reference
    /// (`REGISTRY/REPOSITORY@sha256:…`) to pull it from.
    component: ComponentSource,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Golden case files, or directories of them (every `*.json` in it).
    #[arg(required_unless_present = "replay", value_name = "CASES")]
    cases: Vec<PathBuf>,
    /// Instead of golden cases, replay the calls an operator recorded for
    /// one policy (`run --record-calls DIR`: give `DIR/<policy>`) and
    /// compare each answer with the one the serving version gave, as
    /// `policy diff` shows a candidate's. No request leaves the machine.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["cases", "bless"])]
    replay: Option<PathBuf>,
    /// With `--replay`, only the recorded calls whose input has this digest
    /// (`sha256:…`, or its first digits, as `policyhost explain` shows a
    /// decision's input).
    #[arg(long, value_name = "DIGEST", requires = "replay")]
    input: Option<String>,
    /// Rewrite the `expected` of every case whose result differs with the
    /// component's result, instead of failing (as `POLICYHOST_BLESS=1 cargo
    /// test` does natively); review the diff before committing it.
    #[arg(long)]
    bless: bool,
    #[command(flatten)]
    limits: LimitArgs,
}

pub(crate) fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let bytes = args.component.read(&args.registry)?;
    let name = args.component.name();
    if let Some(recorded) = &args.replay {
        let input = args.input.as_deref();
        return super::replay::run(&bytes, &args.component, recorded, input, &args.limits);
    }
    let files = case_files(&args.cases)?;
    let runtime = super::runtime(1)?;
    let mut spec = PolicySpec::new(name).limits(args.limits.policy_limits());
    // One grant for every case: the origins of all their exchanges.
    let exchanges: Vec<_> = files
        .iter()
        .filter_map(|file| Golden::load(file).ok())
        .flat_map(|case| case.http)
        .collect();
    let fixtures = if exchanges.is_empty() {
        None
    } else {
        let (outbound, fixtures) = super::fixtures::replaying(&exchanges)?;
        spec = spec.outbound(Some(outbound));
        Some(fixtures)
    };
    let Some(policy) = super::check::checked(&runtime, spec, &bytes) else {
        return Ok(ExitCode::FAILURE);
    };
    for clamped in policy.clamped() {
        eprintln!("warning: {clamped}");
    }
    let mut failed = 0;
    let mut blessed = 0;
    for file in &files {
        match run_case(&runtime, &policy, fixtures.as_ref(), file) {
            Ok(Verdict {
                description,
                differences,
                ..
            }) if differences.is_empty() => {
                println!("ok     {}{}", file.display(), dash(&description));
            }
            Ok(Verdict {
                description,
                mut case,
                actual,
                ..
            }) if args.bless => {
                case.expected = actual;
                bless(file, &case)?;
                blessed += 1;
                println!("bless  {}{}", file.display(), dash(&description));
            }
            Ok(Verdict {
                description,
                differences,
                ..
            }) => {
                failed += 1;
                println!("FAIL   {}{}", file.display(), dash(&description));
                for difference in differences.iter().take(MAX_DIFFERENCES) {
                    println!("         {difference}");
                }
                if differences.len() > MAX_DIFFERENCES {
                    println!(
                        "         ... and {} more differences",
                        differences.len() - MAX_DIFFERENCES
                    );
                }
            }
            Err(error) => {
                failed += 1;
                println!("FAIL   {}: {error:#}", file.display());
            }
        }
    }
    let passed = files.len() - failed - blessed;
    let mut summary = format!("{passed} passed, {failed} failed");
    if args.bless {
        summary.push_str(&format!(", {blessed} blessed"));
    }
    println!("{summary} ({} sha256:{})", args.component, policy.digest());
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn dash(description: &str) -> String {
    if description.is_empty() {
        String::new()
    } else {
        format!(" — {description}")
    }
}

/// The case files named on the command line, directories expanded to their
/// `*.json` files sorted by name. A path that does not exist, or a directory
/// without cases, is an error: a test run that finds nothing must not pass.
pub(crate) fn case_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        let metadata = std::fs::metadata(path)
            .with_context(|| format!("cannot read golden cases {}", path.display()))?;
        if metadata.is_dir() {
            let mut found = Vec::new();
            for entry in std::fs::read_dir(path)
                .with_context(|| format!("cannot read golden cases {}", path.display()))?
            {
                let entry = entry
                    .with_context(|| format!("cannot read golden cases {}", path.display()))?;
                let file = entry.path();
                if file.extension().is_some_and(|ext| ext == "json") {
                    found.push(file);
                }
            }
            if found.is_empty() {
                anyhow::bail!("no golden case (*.json) in {}", path.display());
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// One case's outcome: its differences from `expected` (none when it passes).
struct Verdict {
    description: String,
    case: Golden,
    actual: Value,
    differences: Vec<String>,
}

fn run_case(
    runtime: &Runtime,
    policy: &Policy,
    fixtures: Option<&Fixtures>,
    file: &Path,
) -> anyhow::Result<Verdict> {
    let case = Golden::load(file)?;
    let input = input_of(&case);
    if let Some(fixtures) = fixtures {
        fixtures.install(case.http.clone());
    }
    let actual = match case.call {
        Kind::Reconcile => result_json(runtime.reconcile_blocking(policy, &input).result)?,
        Kind::Cleanup => result_json(runtime.cleanup_blocking(policy, &input).result)?,
    };
    if let Some(Err(problems)) = fixtures.map(Fixtures::finish) {
        anyhow::bail!("the requests differ from the case's `http` exchanges: {problems}");
    }
    let differences = diff::differences(&case.expected, &actual)
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(Verdict {
        description: case.description.clone(),
        case,
        actual,
        differences,
    })
}

/// Writes a case back as the SDK's harness does (pretty JSON, newline).
fn bless(file: &Path, case: &Golden) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(case)? + "\n";
    std::fs::write(file, text).with_context(|| format!("cannot write {}", file.display()))
}

/// The result JSON of a call, in the shape `policy run` prints; a guest
/// fault is an error (golden cases describe answers, not faults).
fn result_json<T: serde::Serialize>(result: Result<T, Error>) -> anyhow::Result<Value> {
    match result {
        Ok(value) => Ok(serde_json::to_value(value)?),
        Err(Error::PolicyError(error)) => Ok(serde_json::to_value(error)?),
        Err(fault) => Err(anyhow::anyhow!("error[{}]: {fault}", fault.reason())),
    }
}

/// The case's inputs as the runtime's records: the SDK fills in the
/// defaults, exactly as for a native call. The runtime replaces the
/// context's `policyDigest` with the component's own digest, as the operator
/// does.
pub(crate) fn input_of(case: &Golden) -> Input {
    let (job, children, ctx) = case.inputs();
    Input {
        job: DataJob {
            name: job.name,
            namespace: job.namespace,
            uid: job.uid,
            generation: job.generation,
            labels: pairs(job.labels),
            annotations: pairs(job.annotations),
            params: job.params_json,
            status: job.status_json,
            deletion_unix_ms: job.deletion_unix_ms,
        },
        children: children
            .into_iter()
            .map(|child| Child {
                api_version: child.api_version,
                kind: child.kind,
                name: child.name,
                phase: match child.phase {
                    policyhost_sdk::ChildPhase::Pending => ChildPhase::Pending,
                    policyhost_sdk::ChildPhase::Running => ChildPhase::Running,
                    policyhost_sdk::ChildPhase::Succeeded => ChildPhase::Succeeded,
                    policyhost_sdk::ChildPhase::Failed => ChildPhase::Failed,
                    policyhost_sdk::ChildPhase::Unknown => ChildPhase::Unknown,
                },
                ready: child.ready,
                deleting: child.deleting,
                labels: pairs(child.labels),
            })
            .collect(),
        ctx: Context {
            now_unix_ms: ctx.now_unix_ms,
            attempt: ctx.attempt,
            policy_digest: ctx.policy_digest,
        },
    }
}

fn pairs(pairs: Vec<policyhost_sdk::KeyValue>) -> Vec<KeyValue> {
    pairs
        .into_iter()
        .map(|pair| KeyValue {
            key: pair.key,
            value: pair.value,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_recorded_call_reads_back_as_the_same_inputs() {
        let input = Input {
            job: DataJob {
                name: "j".into(),
                namespace: "team-a".into(),
                uid: "u-1".into(),
                generation: 3,
                labels: vec![KeyValue {
                    key: "app".into(),
                    value: "etl".into(),
                }],
                annotations: Vec::new(),
                params: r#"{"replicas":2,"shards":[1,2]}"#.into(),
                status: Some(r#"{"done":1}"#.into()),
                deletion_unix_ms: Some(5),
            },
            children: vec![Child {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: "j-0".into(),
                phase: ChildPhase::Succeeded,
                ready: true,
                deleting: true,
                labels: Vec::new(),
            }],
            ctx: Context {
                now_unix_ms: 1_700_000_000_123,
                attempt: 4,
                policy_digest: "abc".into(),
            },
        };
        let recorded =
            policyhost::shadow::record::case("cleanup", &input, json!({"result": "done"}));
        let case: Golden = serde_json::from_value(recorded).unwrap();
        assert!(matches!(case.call, Kind::Cleanup));
        assert_eq!(case.expected, json!({"result": "done"}));
        let back = input_of(&case);
        assert_eq!(back.job, input.job);
        assert_eq!(back.children, input.children);
        assert_eq!(back.ctx, input.ctx);
    }

    #[test]
    fn a_case_reaches_the_runtime_with_the_sdk_defaults() {
        let case: Golden = serde_json::from_value(json!({
            "call": "reconcile",
            "job": {"name": "j", "labels": {"b": "2", "a": "1"}, "params": {"replicas": 2}},
            "children": [{"name": "c", "phase": "running"}],
            "expected": {}
        }))
        .unwrap();
        let input = input_of(&case);
        assert_eq!(input.job.uid, "uid-j");
        assert_eq!(input.job.namespace, "default");
        assert_eq!(input.job.params, r#"{"replicas":2}"#);
        let keys: Vec<&str> = input.job.labels.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(input.children[0].kind, "Pod");
        assert!(matches!(input.children[0].phase, ChildPhase::Running));
        assert_eq!(
            input.ctx.now_unix_ms,
            policyhost_sdk::testing::DEFAULT_NOW_UNIX_MS
        );
        assert_eq!(input.ctx.attempt, 1);
    }
}
