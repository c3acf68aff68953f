//! Command-line interface: argument parsing and dispatch to one module per command.
//!
//! Everything it prints goes through [`terminal`], which shows the text of
//! policies, DataJobs, registries and clusters as text: std's print macros
//! are denied here.

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod check;
mod cluster;
#[cfg(feature = "dev")]
mod dev;
#[cfg(feature = "dev")]
mod dev_rollout;
mod diff;
mod duration;
mod explain;
mod fixtures;
mod golden;
mod input;
mod leader;
mod list;
mod logging;
mod new;
mod operate;
mod pin;
mod promote;
mod push;
mod registry;
#[cfg(feature = "dev")]
mod reload;
mod replay;
mod rollback;
mod rollout;
mod run;
mod status;
mod terminal;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use policyhost::runtime::{self, Runtime, RuntimeConfig};
use terminal::eprint;

/// Kubernetes operator running DataJob policies as sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "policyhost", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator against a cluster.
    Run(Box<operate::RunArgs>),
    /// Run the whole system on an embedded devcluster: no cluster needed.
    /// A developer's command, left out of the production image (feature
    /// `dev`).
    #[cfg(feature = "dev")]
    Dev(Box<dev::DevArgs>),
    /// Print the DataJob CustomResourceDefinition (YAML).
    Crd,
    /// Show where a DataJob stands: phase, finalizer, cleanup attempts, last
    /// error, policy and digest, age of the deletion (`--all-terminating`:
    /// every DataJob being deleted, as a table).
    Status(status::StatusArgs),
    /// Show a DataJob's last decisions, oldest first: the version that
    /// answered, the digests of its input and answer, what the host wrote,
    /// the Events and outbound requests, fuel and time, and what changed
    /// from one decision to the next.
    Explain(explain::ExplainArgs),
    /// Work with policy components: check, run and measure them locally,
    /// publish them to a cluster and list what it serves.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Compile a component read from stdin under the given caps, writing the
    /// compiled code to stdout: the operator's own compile process.
    #[command(name = runtime::compile::SUBCOMMAND, hide = true)]
    CompileComponent(CompileArgs),
}

/// The caps the operator hands its compile process.
#[derive(Debug, Args)]
struct CompileArgs {
    /// Address space the process may map.
    #[arg(long)]
    memory_bytes: u64,
    /// CPU seconds the process may use.
    #[arg(long)]
    cpu_seconds: u64,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Validate a policy: world, imports, size, digest, compile time.
    Check(Box<check::CheckArgs>),
    /// Call a policy once on a DataJob (and children) read from files.
    ///
    /// The result JSON (or YAML) goes to stdout; fuel, duration and memory to
    /// stderr. Exit status: 0 on success; 2 on a guest fault (the typed error
    /// on stderr, and for a `policy-error` its JSON on stdout); 1 when the
    /// policy cannot be loaded or the inputs cannot be read.
    Run(Box<run::RunArgs>),
    /// Measure calls per second and latency of a policy.
    Bench(Box<bench::BenchArgs>),
    /// Run golden cases (the SDK's files) through the compiled component.
    ///
    /// Prints `ok` or `FAIL` per case, and for a failure every difference
    /// from `expected` by JSON pointer. Exit status: 0 when every case passes;
    /// 1 when one fails (a mismatch, a guest fault, a case that cannot be
    /// read), when the policy cannot be loaded or a path does not exist.
    Test(Box<golden::TestArgs>),
    /// Check a policy, then create or update its ConfigMap (server-side
    /// apply); the host hot-swaps it in.
    Push(Box<push::PushArgs>),
    /// List the policies: the serving version and the candidate of each,
    /// side by side, and what the host reports on them.
    List(list::ListArgs),
    /// Show what a policy's candidate answered otherwise than the serving
    /// version, per DataJob, with JSON pointers (as `policy test` shows a
    /// failing case), and mark its faults as examined.
    ///
    /// Exit status: 0 when every shadow call answered the same; 1 when one
    /// differed or faulted, or the candidate cannot be read.
    Diff(diff::DiffArgs),
    /// Make a policy's candidate its serving version (the usual hot swap)
    /// and retire the candidate. Refused while the candidate is not in
    /// service, or faulted where `policy diff` has not shown it (unless
    /// `--force`).
    Promote(promote::PromoteArgs),
    /// List the versions a policy served, the last served first (`*`: in
    /// service), as the host keeps them for `policy rollback`.
    History(rollback::HistoryArgs),
    /// Serve again a version the policy served before (default: the one
    /// before the current), from the host's revision of it: no push of
    /// its bytes, no registry reached, no compile when still cached.
    ///
    /// Exit status: 0 when applied (with `--wait`: when served); 1 when the
    /// policy never served the digest asked for, or nothing earlier is
    /// kept; 3 when the host refused it (with `--wait`).
    Rollback(rollback::RollbackArgs),
    /// Keep a namespace's DataJobs (`NAMESPACE`), or one DataJob
    /// (`NAMESPACE/NAME`), on a version the policy served, whatever serves
    /// the others: a pin in the policy's `pins-NAME` ConfigMap.
    ///
    /// Exit status: 0 when written (with `--wait`: in force); 1 when the
    /// policy never served the digest; 3 when the host refused the pins.
    Pin(pin::PinArgs),
    /// Let a pinned namespace or DataJob follow the serving version again.
    Unpin(pin::UnpinArgs),
    /// Roll a policy's candidate out to its DataJobs step by step (a
    /// share, or namespaces, at a time), judged against the serving
    /// version at each step and rolled back by the host when it falls
    /// behind; or show, pause, resume or abort the rollout.
    Rollout(rollout::RolloutArgs),
    /// Create a policy crate that builds and passes its tests as generated.
    ///
    /// A small policy (one Pod per DataJob), a unit test, a golden case and
    /// a README with the commands to test, build and publish it.
    New(new::NewArgs),
}

/// Limits given on the command line (clamped to the host maxima).
#[derive(Debug, Clone, Args)]
struct LimitArgs {
    /// Fuel per call.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Linear memory cap, in bytes.
    #[arg(long, value_name = "BYTES")]
    memory: Option<u64>,
    /// Wall-clock deadline per call, such as `500ms` or `2s`.
    #[arg(long, value_name = "DURATION", value_parser = duration::millis_before)]
    timeout: Option<duration::DurationArg>,
}

impl LimitArgs {
    fn policy_limits(&self) -> runtime::PolicyLimits {
        runtime::PolicyLimits {
            memory_bytes: self.memory,
            fuel: self.fuel,
            timeout_ms: self
                .timeout
                .map(|t| u64::try_from(t.0.as_millis()).unwrap_or(u64::MAX)),
            ..runtime::PolicyLimits::default()
        }
    }
}

/// How to print results.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
enum Format {
    /// Pretty-printed JSON.
    #[default]
    Json,
    /// YAML.
    Yaml,
}

/// How long the spans still queued at exit may take to reach the collector.
const TRACES_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// Exit code of a guest fault (the policy failed; the input was fine).
const GUEST_FAULT: u8 = 2;

pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Run(_) => "info",
        #[cfg(feature = "dev")]
        Command::Dev(_) => "info",
        _ => "warn",
    };
    #[cfg(feature = "dev")]
    let jaeger = match &cli.command {
        Command::Dev(args) => match args.start_jaeger() {
            Ok(jaeger) => jaeger,
            Err(error) => {
                eprint!("error: {}\n", policyhost::chain::display_chain(&*error));
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let traces = match &cli.command {
        Command::Run(args) => Some(args.operator.traces.config()),
        #[cfg(feature = "dev")]
        Command::Dev(args) => Some(args.traces(jaeger.as_ref())),
        _ => None,
    };
    let traces = match logging::init(default_level, traces.as_ref()) {
        Ok(guard) => guard,
        Err(error) => {
            eprint!("error: {error}\n");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match cli.command {
        Command::Run(args) => operate::run(&args),
        #[cfg(feature = "dev")]
        Command::Dev(args) => dev::run(&args),
        Command::Crd => print_crd(),
        Command::Status(args) => status::run(&args),
        Command::Explain(args) => explain::run(&args),
        Command::Policy(PolicyCommand::Check(args)) => check::run(&args),
        Command::Policy(PolicyCommand::Run(args)) => run::run(&args),
        Command::Policy(PolicyCommand::Bench(args)) => bench::run(&args),
        Command::Policy(PolicyCommand::Test(args)) => golden::run(&args),
        Command::Policy(PolicyCommand::Push(args)) => push::run(&args),
        Command::Policy(PolicyCommand::List(args)) => list::run(&args),
        Command::Policy(PolicyCommand::Diff(args)) => diff::run(&args),
        Command::Policy(PolicyCommand::Promote(args)) => promote::run(&args),
        Command::Policy(PolicyCommand::History(args)) => rollback::history(&args),
        Command::Policy(PolicyCommand::Rollback(args)) => rollback::rollback(&args),
        Command::Policy(PolicyCommand::Pin(args)) => pin::pin(&args),
        Command::Policy(PolicyCommand::Rollout(args)) => rollout::run(&args),
        Command::Policy(PolicyCommand::Unpin(args)) => pin::unpin(&args),
        Command::Policy(PolicyCommand::New(args)) => new::run(&args),
        Command::CompileComponent(args) => {
            Ok(runtime::compile::serve(args.memory_bytes, args.cpu_seconds))
        }
    };
    if let Some(traces) = traces {
        traces.shutdown(TRACES_FLUSH);
    }
    match outcome {
        Ok(code) => code,
        Err(error) => {
            // An error keeps its line breaks (a guest's stderr, a backtrace);
            // an API server's answer is one line.
            eprint!("error: {}\n", policyhost::chain::display_chain(&*error));
            ExitCode::FAILURE
        }
    }
}

/// Completes on Ctrl-C or SIGTERM (what Kubernetes sends a Pod to stop it).
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutdown requested");
}

fn print_crd() -> anyhow::Result<ExitCode> {
    terminal::print_document(&yaml(&policyhost::crd::definition())?);
    Ok(ExitCode::SUCCESS)
}

/// YAML as the CLI prints it (`crd`, `policy run --output yaml`).
///
/// serde-saphyr's defaults, except that a single-line string stays on one
/// line: by default, one longer than 80 characters becomes a folded `>-`
/// block, which would rewrite every long description of `deploy/crd.yaml`.
fn yaml(value: &impl serde::Serialize) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string_with_options(
        value,
        serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX },
    )
}

/// A runtime for one command-line invocation.
fn runtime(threads: usize) -> anyhow::Result<Runtime> {
    let config = RuntimeConfig {
        threads,
        ..RuntimeConfig::default()
    };
    Ok(Runtime::new(config)?)
}

fn read(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
}

/// Prints a load-time or guest error with its reason and causes.
fn report_error(error: &runtime::Error) {
    let hint = matches!(error, runtime::Error::OutboundNotGranted { .. })
        .then_some("`--http-fixtures FILE` answers its requests from canned exchanges");
    print_error(error.reason(), error, hint);
}

/// Prints `error` with its reason, an optional hint and its causes, each
/// keeping its line breaks (a guest's stderr, a backtrace).
fn print_error(reason: &str, error: &dyn std::error::Error, hint: Option<&str>) {
    eprint!("error[{reason}]: {error}\n");
    if let Some(hint) = hint {
        eprint!("  hint: {hint}\n");
    }
    let mut source = error.source();
    while let Some(cause) = source {
        eprint!("  caused by: {cause}\n");
        source = cause.source();
    }
}

#[cfg(test)]
mod tests {
    use policyhost::runtime::output::{ReportedCondition, ReportedEvent, ReportedStatus};
    use policyhost::runtime::{Cleaned, Reconciled, UpdateStrategy, ValidChild};
    use serde_json::json;

    use super::yaml;

    #[test]
    fn the_crd_prints_as_deploy_crd_yaml() {
        assert_eq!(
            yaml(&policyhost::crd::definition()).unwrap(),
            include_str!("../../../deploy/crd.yaml")
        );
    }

    #[test]
    fn a_result_prints_as_block_yaml_quoting_what_would_read_as_another_type() {
        let result = Reconciled {
            children: vec![ValidChild {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: "etl-0".into(),
                manifest: json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "etl-0", "labels": {"shard": "0", "tier": "on"}},
                    "spec": {"containers": [{"name": "w", "args": ["--rate", "1.5", ""]}]}})
                .to_string(),
                update: UpdateStrategy::InPlace,
            }],
            status: ReportedStatus {
                phase: "Running".into(),
                message: "1 of 2 Pods running, the other waits for its volume to attach to the node it is on"
                    .into(),
                conditions: vec![ReportedCondition {
                    kind: "Ready".into(),
                    status: "False",
                    reason: "Scaling".into(),
                    message: "first line\nsecond line".into(),
                }],
                outputs: json!({"ratio": 0.5, "total": 2, "done": false, "note": null, "since": "2024-01-01", "empty": {}}),
            },
            requeue_after_ms: Some(5000),
            events: vec![ReportedEvent {
                kind: "Normal",
                reason: "Created".into(),
                message: "'etl-0' created".into(),
            }],
        };
        assert_eq!(
            yaml(&result).unwrap(),
            r#"children:
- apiVersion: v1
  kind: Pod
  name: etl-0
  manifest:
    apiVersion: v1
    kind: Pod
    metadata:
      labels:
        shard: "0"
        tier: "on"
      name: etl-0
    spec:
      containers:
      - args:
        - --rate
        - "1.5"
        - ""
        name: w
status:
  phase: Running
  message: 1 of 2 Pods running, the other waits for its volume to attach to the node it is on
  conditions:
  - type: Ready
    status: "False"
    reason: Scaling
    message: |-
      first line
      second line
  outputs:
    done: false
    empty: {}
    note: null
    ratio: 0.5
    since: "2024-01-01"
    total: 2
requeueAfterMs: 5000
events:
- type: Normal
  reason: Created
  message: "'etl-0' created"
"#
        );
        assert_eq!(
            yaml(&Cleaned::RetryAfter {
                retry_after_ms: 1000
            })
            .unwrap(),
            "result: retryAfter\nretryAfterMs: 1000\n"
        );
    }
}
