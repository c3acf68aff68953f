//! `devcluster --port P --kubeconfig FILE`: a Kubernetes-compatible API server to use with
//! kubectl or an operator, in the foreground until interrupted.

use anyhow::Context as _;
use clap::Parser;

/// mimalloc returns freed memory to the system, which keeps RSS close to what is stored.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Kubernetes-compatible API server for development and tests.
#[derive(Debug, Parser)]
#[command(name = "devcluster", version)]
struct Cli {
    #[command(flatten)]
    args: devcluster::cli::Args,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    devcluster::cli::serve(&cli.args)
        .await
        .context("running devcluster")
}
