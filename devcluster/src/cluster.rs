//! The library face: start a cluster, get its URL, kubeconfig and client, read counters,
//! steer faults, shut it down.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::counters::Counters;
use crate::faults::{FaultControls, Faults};
use crate::http::{self, App};
use crate::object::GroupResource;
use crate::object::ObjectKey;
use crate::ops::{Target, Writer};
use crate::pods::{self, PodSimulation};
use crate::rand::Rng;
use crate::store::Store;
use crate::{gc, kubeconfig};

/// Errors starting or using a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig could not be written.
    #[error("cannot write kubeconfig {path}")]
    WriteKubeconfig {
        /// Where.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The built-in namespaces could not be created.
    #[error("cannot create the built-in namespaces: {0}")]
    Bootstrap(String),
    /// The kubeconfig did not make a client.
    #[cfg(feature = "client")]
    #[error("cannot build a kube client")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Results of cluster operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to run a cluster.
#[derive(Debug, Clone)]
pub struct Config {
    /// Loopback port; 0 picks a free one.
    pub port: u16,
    /// Pod simulation, `None` to leave Pods `Pending` forever.
    pub pods: Option<PodSimulation>,
    /// Events kept per resource for watches resuming from a resourceVersion; older
    /// resourceVersions get 410 Gone.
    pub watch_history: usize,
    /// Seed for uids, generated names and fault decisions.
    pub seed: u64,
    /// Faults active from the start.
    pub faults: Faults,
    /// The feature gates that change what the API serves.
    pub features: Features,
}

/// kube-apiserver's feature gates that devcluster follows: with a gate
/// off, the requests it governs are answered as a server without it
/// answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `ShardedListAndWatch`: lists and watches honour `shardSelector` and
    /// lists echo it in `metadata.shardInfo`; off, the parameter is
    /// ignored. On by default, as on the test control plane.
    pub sharded_list_and_watch: bool,
}

impl Default for Features {
    fn default() -> Self {
        Self {
            sharded_list_and_watch: true,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            port: 0,
            pods: Some(PodSimulation::default()),
            watch_history: 10_000,
            seed: 0x5eed,
            faults: Faults::default(),
            features: Features::default(),
        }
    }
}

/// A running cluster. Dropping it stops the server too; [`DevCluster::shutdown`] also
/// waits for it to finish.
#[derive(Debug)]
pub struct DevCluster {
    addr: SocketAddr,
    app: Arc<App>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
}

impl DevCluster {
    /// Binds the port, creates the built-in namespaces and starts serving.
    pub async fn start(config: Config) -> Result<Self> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, config.port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        let store = Arc::new(Store::new(config.watch_history));
        let registry = Arc::new(crate::kinds::registry());
        let rng = Arc::new(Rng::new(config.seed));
        let app = Arc::new(App {
            store: store.clone(),
            registry: registry.clone(),
            rng: rng.clone(),
            counters: Arc::new(Counters::default()),
            faults: Arc::new(FaultControls::new(
                config.faults.clone(),
                config.seed,
                store.clone(),
            )),
            server_addr: addr.to_string(),
            features: config.features,
        });
        bootstrap(&app, config.pods.is_some())?;
        let mut background = vec![tokio::spawn(gc::run(
            store.clone(),
            registry.clone(),
            rng.clone(),
        ))];
        if let Some(sim) = config.pods.clone() {
            background.push(tokio::spawn(pods::run(store, registry, rng, sim)));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let router = http::router(app.clone());
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(error) = serve.await {
                tracing::error!(%error, "devcluster server stopped");
            }
        });
        tracing::info!(%addr, "devcluster serving");
        Ok(Self {
            addr,
            app,
            stop: Some(stop),
            server: Some(server),
            background,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig (YAML) for this cluster, context `devcluster`, namespace `default`.
    pub fn kubeconfig(&self) -> String {
        kubeconfig::render(&self.url())
    }

    /// Writes [`kubeconfig`](Self::kubeconfig) to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig()).map_err(|source| Error::WriteKubeconfig {
            path: path.display().to_string(),
            source,
        })
    }

    /// The `kube::Config` [`client`](Self::client) uses, to adjust (e.g. `default_retry`).
    #[cfg(feature = "client")]
    pub fn client_config(&self) -> Result<kube::Config> {
        let url = self
            .url()
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| Error::Client(Box::new(e)))?;
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.auth_info.token = Some(kubeconfig::TOKEN.to_owned().into());
        Ok(config)
    }

    /// A `kube::Client` for this cluster (namespace `default`).
    #[cfg(feature = "client")]
    pub fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.client_config()?).map_err(|e| Error::Client(Box::new(e)))
    }

    /// Request counters.
    pub fn counters(&self) -> &Counters {
        &self.app.counters
    }

    /// Fault controls.
    pub fn faults(&self) -> &FaultControls {
        &self.app.faults
    }

    /// Stops serving (ending open watches) and waits for the server to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.app.faults.end_watches();
        if let Some(server) = self.server.take() {
            // Open watches end when their tasks see the closed connections.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
        }
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = &self.server {
            server.abort();
        }
        for t in &self.background {
            t.abort();
        }
    }
}

/// The objects every cluster starts with.
fn bootstrap(app: &App, node: bool) -> Result<()> {
    let w = Writer {
        registry: &app.registry,
        rng: &app.rng,
        strict: false,
        manager: Some("kube-apiserver"),
    };
    let mut txn = app.store.lock();
    let ns_rt = app
        .registry
        .get(&GroupResource::new("", "namespaces"))
        .ok_or_else(|| Error::Bootstrap("namespaces are not registered".into()))?;
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        if txn.get(&ns_rt.gr, &ObjectKey::new("", name)).is_none() {
            let body = json!({"metadata": {"name": name}});
            w.create(&mut txn, &Target::of(&ns_rt, "", ""), body)
                .map_err(|e| Error::Bootstrap(e.to_string()))?;
        }
    }
    if node && let Some(node_rt) = app.registry.get(&GroupResource::new("", "nodes")) {
        let body = json!({
            "metadata": {"name": pods::NODE_NAME, "labels": {"kubernetes.io/hostname": pods::NODE_NAME}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
        });
        w.create(&mut txn, &Target::of(&node_rt, "", ""), body)
            .map_err(|e| Error::Bootstrap(e.to_string()))?;
    }
    Ok(())
}
