//! `naive-operator`: `policyhost run` on the baseline's caches, for the
//! scale benchmark. It takes only the flags the benchmark passes; every
//! other setting is `policyhost run`'s default, leader election included,
//! and the allocator, so that the two processes differ in their children
//! caches alone.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use policyhost::leader;
use policyhost::operator::{Operator, Options};
use policyhost::runtime::{AllowedKind, compile};
use tracing::{info, warn};

/// The operator's allocator, as `policyhost` declares it.
#[global_allocator]
static ALLOCATOR: policyhost::allocator::MiMalloc = policyhost::allocator::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "policyhost run on the naive cache (a benchmark's baseline)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// The compile process, as `policyhost`'s hidden subcommand.
    #[command(name = compile::SUBCOMMAND, hide = true)]
    CompileComponent {
        #[arg(long)]
        memory_bytes: u64,
        #[arg(long)]
        cpu_seconds: u64,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The kubeconfig file.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Load `<name>.wasm` policies from this directory.
    #[arg(long, value_name = "DIR")]
    policy_dir: Option<PathBuf>,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A child kind, `APIVERSION/KIND` (repeatable); default: the operator's.
    #[arg(long = "child-kind", value_name = "APIVERSION/KIND")]
    child_kinds: Vec<AllowedKind>,
    /// Concurrent reconciles.
    #[arg(long)]
    workers: Option<usize>,
    /// API writes per second.
    #[arg(long)]
    api_qps: Option<NonZeroU32>,
    /// API writes allowed at once above the average.
    #[arg(long)]
    api_burst: Option<NonZeroU32>,
}

fn main() -> anyhow::Result<ExitCode> {
    policyhost::allocator::purge_freed_memory_at_once();
    let cli = Cli::parse();
    if let Some(Command::CompileComponent {
        memory_bytes,
        cpu_seconds,
    }) = cli.command
    {
        return Ok(compile::serve(memory_bytes, cpu_seconds));
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("POLICYHOST_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(run(cli.run))
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = policyhost::operator::client_config(args.kubeconfig.as_deref()).await?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| config.default_namespace.clone());
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| "naive-operator".to_owned());
    let defaults = Options::default();
    let mut runtime = defaults.runtime.clone();
    runtime.compile.process = Some(compile::CompileProcess::policyhost(
        compile::DEFAULT_MEMORY_BYTES,
        compile::DEFAULT_TIMEOUT,
    ));
    runtime.compile.budget = Some(compile::CompileBudget::DEFAULT);
    let options = Options {
        workers: args.workers.unwrap_or(defaults.workers),
        policy_dir: args.policy_dir,
        child_kinds: if args.child_kinds.is_empty() {
            defaults.child_kinds.clone()
        } else {
            args.child_kinds
        },
        api_qps: args.api_qps.unwrap_or(defaults.api_qps),
        api_burst: args.api_burst.unwrap_or(defaults.api_burst),
        listen: Some(args.listen),
        leader: Some(leader::Config::new(
            format!("{}-leader", defaults.instance),
            namespace.clone(),
            identity,
        )),
        policy_namespace: Some(namespace),
        children: policyhost_naive_cache::watch::CACHING,
        runtime,
        ..defaults
    };
    warn!(
        "the naive cache: every object of each child kind is watched, cached whole and \
         scanned; a baseline for measurements, not for production"
    );
    let operator = Operator::new(config, options).await?;
    info!(addr = ?operator.listen_addr(), "serving /metrics, /healthz and /readyz");
    operator.run(shutdown()).await?;
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM or Ctrl-C.
async fn shutdown() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = async {
            match terminate.as_mut() {
                Some(signal) => { signal.recv().await; }
                None => std::future::pending().await,
            }
        } => {}
    }
}
