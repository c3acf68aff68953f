//! `devcluster --port P --kubeconfig FILE`: a Kubernetes-compatible API server to use with
//! kubectl or an operator, in the foreground until interrupted.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use devcluster::{Config, DevCluster, PodSimulation};

/// mimalloc returns freed memory to the system, which keeps RSS close to what is stored.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Kubernetes-compatible API server for development and tests.
#[derive(Debug, Parser)]
#[command(name = "devcluster", version)]
struct Args {
    /// Loopback port to listen on; 0 picks a free port and prints it.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write a kubeconfig for this cluster.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Leave Pods Pending instead of simulating their phases.
    #[arg(long)]
    no_pod_simulation: bool,
    /// Milliseconds from Running to Succeeded for simulated Pods (negative: run forever).
    #[arg(long, default_value_t = 2000, allow_negative_numbers = true)]
    pod_run_ms: i64,
    /// Events kept per resource for resuming watches.
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
    /// Seed for uids, generated names and faults.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let pods = (!args.no_pod_simulation).then(|| PodSimulation {
        run_time: u64::try_from(args.pod_run_ms)
            .ok()
            .map(Duration::from_millis),
        ..PodSimulation::default()
    });
    let cluster = DevCluster::start(Config {
        port: args.port,
        pods,
        watch_history: args.watch_history,
        seed: args.seed,
        ..Config::default()
    })
    .await
    .context("starting devcluster")?;
    if let Some(path) = &args.kubeconfig {
        cluster
            .write_kubeconfig(path)
            .context("writing the kubeconfig")?;
    }
    println!(
        "devcluster listening on {} (port {})",
        cluster.url(),
        cluster.addr().port()
    );
    if let Some(path) = &args.kubeconfig {
        println!("kubeconfig written to {}", path.display());
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    cluster.shutdown().await;
    Ok(())
}
