//! Where a command that talks to the cluster finds it: the kubeconfig and
//! the host's policy namespace.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use kube::Client;

/// The cluster and the policy namespace a command works in.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClusterArgs {
    /// The host's policy namespace; default: the kubeconfig context's namespace.
    #[arg(long, value_name = "NS")]
    pub(crate) namespace: Option<String>,
    /// Kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, or in-cluster.
    #[arg(long, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
}

impl ClusterArgs {
    /// A client of the cluster and the policy namespace.
    pub(crate) async fn connect(&self) -> anyhow::Result<(Client, String)> {
        let (client, namespace) = connect(self.kubeconfig.as_deref()).await?;
        Ok((client, self.namespace.clone().unwrap_or(namespace)))
    }
}

/// A client from `kubeconfig` (found as kubectl finds one without it), and
/// the namespace its context names.
pub(crate) async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<(Client, String)> {
    let config = policyhost::operator::client_config(kubeconfig).await?;
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).context("cannot build the Kubernetes client")?;
    Ok((client, namespace))
}

/// Runs one command's async body on a runtime of its own.
pub(crate) fn block_on<T>(body: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(body)
}
