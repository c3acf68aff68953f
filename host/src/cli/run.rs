//! `policyhost policy run`: one call, the result on stdout, its cost on stderr.
//!
//! stdout carries only the result JSON (or YAML) in the shape of
//! `docs/result-json.md`, so it can be piped and compared; the fuel used,
//! the duration and the memory peak go to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use policyhost::runtime::{CallReport, Error, PolicySpec};
use serde::Serialize;

use super::registry::{ComponentSource, RegistryArgs};
use super::terminal::{self, eprintln};
use super::{Format, GUEST_FAULT, LimitArgs};

/// Arguments of `policy run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The policy component: a `.wasm` file, or an OCI reference
    /// (`REGISTRY/REPOSITORY@sha256:…`) to pull it from.
    component: ComponentSource,
    #[command(flatten)]
    registry: RegistryArgs,
    /// The DataJob (YAML or JSON).
    #[arg(long, value_name = "JOB.yaml")]
    job: PathBuf,
    /// Its children: multi-document YAML or a `kind: List`.
    #[arg(long, value_name = "CHILDREN.yaml")]
    children: Option<PathBuf>,
    /// Call `cleanup` instead of `reconcile`.
    #[arg(long)]
    cleanup: bool,
    #[command(flatten)]
    limits: LimitArgs,
    /// The context time, in Unix milliseconds (default: now).
    #[arg(long, value_name = "MS")]
    now: Option<u64>,
    /// The context attempt number.
    #[arg(long, default_value_t = 1)]
    attempt: u32,
    /// Output format of the result.
    #[arg(long, value_enum, default_value_t)]
    output: Format,
    /// Answer the component's HTTP requests from these exchanges (a JSON
    /// list, the format of golden cases' `http`), in order, under a grant
    /// of exactly their origins; any other request is refused and fails
    /// the run.
    #[arg(long, value_name = "EXCHANGES.json")]
    http_fixtures: Option<PathBuf>,
}

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let bytes = args.component.read(&args.registry)?;
    let input = super::input::load(&args.job, args.children.as_deref(), args.now, args.attempt)?;
    let runtime = super::runtime(1)?;
    let mut spec = PolicySpec::new(input_name(args)).limits(args.limits.policy_limits());
    let fixtures = match &args.http_fixtures {
        None => None,
        Some(path) => {
            let exchanges = super::fixtures::read(path)?;
            let (outbound, fixtures) = super::fixtures::replaying(&exchanges)?;
            fixtures.install(exchanges);
            spec = spec.outbound(Some(outbound));
            Some(fixtures)
        }
    };
    let policy = match runtime.load(spec, &bytes) {
        Ok(policy) => policy,
        Err(error) => {
            super::report_error(&error);
            return Ok(ExitCode::FAILURE);
        }
    };
    for clamped in policy.clamped() {
        eprintln!("warning: {clamped}");
    }
    let (printed, report) = if args.cleanup {
        let outcome = runtime.cleanup_blocking(&policy, &input);
        (
            outcome.result.map(|r| print(&r, args.output)),
            outcome.report,
        )
    } else {
        let outcome = runtime.reconcile_blocking(&policy, &input);
        (
            outcome.result.map(|r| print(&r, args.output)),
            outcome.report,
        )
    };
    summary(if args.cleanup { "cleanup" } else { "reconcile" }, &report);
    if let Some(Err(problems)) = fixtures.map(|fixtures| fixtures.finish()) {
        eprintln!("error[HttpFixtures]: the requests differ from the fixtures: {problems}");
        return Ok(ExitCode::FAILURE);
    }
    match printed {
        Ok(printed) => {
            printed?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            if let Error::PolicyError(policy_error) = &error {
                print(policy_error, args.output)?;
            }
            super::report_error(&error);
            Ok(ExitCode::from(GUEST_FAULT))
        }
    }
}

fn input_name(args: &RunArgs) -> String {
    args.component.name()
}

fn print(value: &impl Serialize, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Json => terminal::print_json(value)?,
        Format::Yaml => terminal::print_document(&super::yaml(value)?),
    }
    Ok(())
}

fn summary(entry: &str, report: &CallReport) {
    eprintln!(
        "{entry}: fuel {} | {} µs | memory peak {} KiB of {} KiB",
        report.fuel_consumed,
        report.duration.as_micros(),
        report.memory.peak / 1024,
        report.memory.limit / 1024,
    );
}
