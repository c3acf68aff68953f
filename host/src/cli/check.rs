//! `policyhost policy check`: is this component a loadable policy? The
//! checks a host runs before putting a version in service: compile,
//! world and imports, a trial instantiation.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use policyhost::Policy;
use policyhost::policies::load;
use policyhost::runtime::{PolicySpec, Runtime};

/// Arguments of `policy check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The policy component (`.wasm`).
    file: PathBuf,
}

pub(crate) fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let bytes = super::read(&args.file)?;
    let runtime = super::runtime(1)?;
    let started = Instant::now();
    let name = args
        .file
        .file_stem()
        .map_or_else(|| "policy".into(), |s| s.to_string_lossy().into_owned());
    match load::check(&runtime, PolicySpec::new(name), &bytes) {
        Ok(policy) => {
            let elapsed = started.elapsed();
            println!("policy:   {}", args.file.display());
            println!(
                "world:    policyhost:reconcile/datajob-policy@0.1.0 (exports reconcile, cleanup)"
            );
            println!("size:     {} bytes", policy.size());
            println!("digest:   sha256:{}", policy.digest());
            println!(
                "compile:  {:.1} ms (load and validate {:.1} ms)",
                policy.load_time().as_secs_f64() * 1e3,
                elapsed.as_secs_f64() * 1e3
            );
            println!("imports:");
            for import in policy.imports() {
                println!("  {import}");
            }
            println!("ok: loadable");
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            report(&error);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Loads a component with the host's checks, or prints why it cannot serve
/// (the commands that go on with a policy then exit with failure).
pub(crate) fn checked(runtime: &Runtime, spec: PolicySpec, bytes: &[u8]) -> Option<Arc<Policy>> {
    load::check(runtime, spec, bytes)
        .map_err(|error| report(&error))
        .ok()
}

/// Prints why a component cannot serve, with its reason and causes.
pub(crate) fn report(error: &load::Error) {
    eprintln!("error[{}]: {error}", error.reason());
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        eprintln!("  caused by: {cause}");
        source = cause.source();
    }
}
