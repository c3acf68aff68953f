//! `policyhost policy check`: is this component a loadable policy? The
//! checks a host runs before putting a version in service: compile,
//! world and imports, a trial instantiation.
//!
//! A component that imports `wasi:http` is a valid policy that serves only
//! with its grant, which is the platform team's (the ConfigMap
//! `grant-<name>`): it is checked as the host checks it once granted, and
//! the command says that it needs the grant.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;

use super::registry::{ComponentSource, RegistryArgs};
use super::terminal::println;
use policyhost::Policy;
use policyhost::grants::grant_name;
use policyhost::outbound::{Grant, Outbound};
use policyhost::policies::load;
use policyhost::runtime::made_with::{SECTION, SERVED_WORLD};
use policyhost::runtime::{self, PolicySpec, Runtime};

/// Arguments of `policy check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The policy component: a `.wasm` file, or an OCI reference
    /// (`REGISTRY/REPOSITORY@sha256:…`) to pull it from.
    component: ComponentSource,
    #[command(flatten)]
    registry: RegistryArgs,
}

pub(crate) fn run(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let bytes = args.component.read(&args.registry)?;
    let runtime = super::runtime(1)?;
    let started = Instant::now();
    let name = args.component.name();
    let Some(checked) = checked_for_grant(&runtime, PolicySpec::new(&name), &bytes) else {
        return Ok(ExitCode::FAILURE);
    };
    let policy = &checked.policy;
    let elapsed = started.elapsed();
    println!("policy:   {}", args.component);
    println!("world:    datajob-policy of {SERVED_WORLD} (exports reconcile, cleanup)");
    match policy.made_with() {
        Some(made_with) => println!("sdk:      {made_with}"),
        None => println!("sdk:      none named (no `{SECTION}` section)"),
    }
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
    match &checked.needs_grant {
        None => println!("ok: loadable"),
        Some(import) => println!(
            "ok: loadable; needs a grant: it imports `{import}`, and a host serves it only once the platform team grants it origins (the ConfigMap `{}`)",
            grant_name(&name)
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// A component that passed every check a host runs.
pub(crate) struct Checked {
    /// The loaded policy.
    pub(crate) policy: Arc<Policy>,
    /// Its outbound import, if it has one: a host serves it only with a
    /// grant.
    pub(crate) needs_grant: Option<String>,
}

/// Loads a component with the host's checks, or prints why it cannot serve
/// (the commands that go on with a policy then exit with failure).
pub(crate) fn checked(runtime: &Runtime, spec: PolicySpec, bytes: &[u8]) -> Option<Arc<Policy>> {
    load::check(runtime, spec, bytes)
        .map_err(|error| report(&error))
        .ok()
}

/// [`checked`] for a component a host will load with whatever grant the
/// platform team gives it: one that imports `wasi:http` without a grant in
/// `spec` is checked again under a grant of no origin, as a host checks it
/// once granted.
pub(crate) fn checked_for_grant(
    runtime: &Runtime,
    spec: PolicySpec,
    bytes: &[u8],
) -> Option<Checked> {
    let result = match load::check(runtime, spec.clone(), bytes) {
        Err(load::Error::Component(runtime::Error::OutboundNotGranted { import }))
            if spec.outbound.is_none() =>
        {
            let spec = spec.outbound(Some(Arc::new(no_origin())));
            load::check(runtime, spec, bytes).map(|policy| Checked {
                policy,
                needs_grant: Some(import),
            })
        }
        result => result.map(|policy| Checked {
            policy,
            needs_grant: None,
        }),
    };
    result.map_err(|error| report(&error)).ok()
}

/// A grant of no origin, answered by no fixture: every request refused.
/// What a check links an outbound component with; a check makes no
/// request.
fn no_origin() -> Outbound {
    Outbound::replaying(Grant::to(Vec::new())).0
}

/// Prints why a component cannot serve, with its reason and causes.
pub(crate) fn report(error: &load::Error) {
    super::print_error(error.reason(), error, None);
}
