//! The command line of the `devcluster` binary.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Config, DevCluster, PodSimulation, Result};

/// Serve a Kubernetes-compatible API server for development and tests, in
/// the foreground until interrupted.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Loopback port to listen on; 0 picks a free port and prints it.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Where to write a kubeconfig for this cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Leave Pods Pending instead of simulating their phases.
    #[arg(long)]
    pub no_pod_simulation: bool,
    /// Milliseconds from Running to Succeeded for simulated Pods (negative: run forever).
    #[arg(long, default_value_t = 2000, allow_negative_numbers = true)]
    pub pod_run_ms: i64,
    /// Events kept per resource for resuming watches.
    #[arg(long, default_value_t = 10_000)]
    pub watch_history: usize,
    /// Seed for uids, generated names and faults.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
}

impl Args {
    /// The cluster configuration these arguments describe.
    #[must_use]
    pub fn config(&self) -> Config {
        let pods = (!self.no_pod_simulation).then(|| PodSimulation {
            run_time: u64::try_from(self.pod_run_ms)
                .ok()
                .map(Duration::from_millis),
            ..PodSimulation::default()
        });
        Config {
            port: self.port,
            pods,
            watch_history: self.watch_history,
            seed: self.seed,
            ..Config::default()
        }
    }
}

/// Starts the cluster, writes the kubeconfig, prints where it listens, and
/// serves until Ctrl-C.
pub async fn serve(args: &Args) -> Result<()> {
    let cluster = DevCluster::start(args.config()).await?;
    if let Some(path) = &args.kubeconfig {
        cluster.write_kubeconfig(path)?;
    }
    println!(
        "devcluster listening on {} (port {})",
        cluster.url(),
        cluster.addr().port()
    );
    if let Some(path) = &args.kubeconfig {
        println!("kubeconfig written to {}", path.display());
    }
    // An error waiting for Ctrl-C means no signal handler could be set up:
    // stop rather than serve forever unstoppably.
    let _ = tokio::signal::ctrl_c().await;
    cluster.shutdown().await;
    Ok(())
}
