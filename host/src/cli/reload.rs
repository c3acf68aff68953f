//! `policyhost dev`'s edit–build–see loop: the policy directory is polled,
//! and a `.wasm` that changed (and then stayed the same for one poll, so a
//! half-written file is never read) is republished as its policy ConfigMap.
//! The operator hot-swaps it like any other push.
//!
//! Each is published as `policy-<name>` for every namespace
//! (`allowedNamespaces: "*"`): the developer's own policies, on the
//! developer's cluster, which a strict host (the default) then serves.
//!
//! With `dev --registry`, each is pushed to the local registry first and
//! its ConfigMap names the artifact by digest, with the grant and pull
//! secret that let the operator pull it.
//!
//! Polling rather than file notifications: it works the same on every file
//! system (bind mounts, network file systems, editors that replace files),
//! and a quarter of a second is nothing next to a policy build.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use policyhost::policies::access::Access;
use policyhost::policies::configmap::{self, Compression, Settings};
use policyhost::policies::dir::policy_name;
use policyhost::publisher::publish;
use policyhost::runtime::Digest;

use policyhost::publisher::dev_registry::LocalRegistry;

use super::terminal::{eprintln, println};
use policyhost::vocabulary::POLICY_LABEL;

/// How often the directory is read.
const POLL: Duration = Duration::from_millis(250);

/// What identifies a version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

/// Publishes the policies of a directory and republishes the ones rebuilt.
pub(crate) struct DirWatcher {
    dir: PathBuf,
    client: Client,
    namespace: String,
    /// Where to push the policies as OCI artifacts (`dev --registry`).
    registry: Option<Arc<LocalRegistry>>,
    /// What was last published from each file.
    published: HashMap<PathBuf, (Stamp, Digest)>,
    /// Files seen changed once, with the stamp they had then.
    settling: HashMap<PathBuf, Stamp>,
}

impl DirWatcher {
    pub(crate) fn new(
        dir: PathBuf,
        client: Client,
        namespace: String,
        registry: Option<Arc<LocalRegistry>>,
    ) -> Self {
        Self {
            dir,
            client,
            namespace,
            registry,
            published: HashMap::new(),
            settling: HashMap::new(),
        }
    }

    /// Publishes every policy of the directory; returns their ConfigMaps.
    pub(crate) async fn publish_all(&mut self) -> anyhow::Result<Vec<ConfigMap>> {
        let mut maps = Vec::new();
        for (path, stamp) in self.scan()? {
            if let Some(map) = self.publish(path, stamp).await? {
                maps.push(map);
            }
        }
        Ok(maps)
    }

    /// Polls until the task is aborted.
    pub(crate) async fn run(mut self) {
        loop {
            tokio::time::sleep(POLL).await;
            if let Err(error) = self.poll().await {
                eprintln!("policy directory: {error:#}");
            }
        }
    }

    async fn poll(&mut self) -> anyhow::Result<()> {
        for (path, stamp) in self.scan()? {
            if self.published.get(&path).is_some_and(|(s, _)| *s == stamp) {
                self.settling.remove(&path);
                continue;
            }
            if self.settling.get(&path) != Some(&stamp) {
                // Changed: publish once it stops changing.
                self.settling.insert(path, stamp);
                continue;
            }
            self.settling.remove(&path);
            if let Some(map) = self.publish(path, stamp).await? {
                print_verdict(&self.client, &map).await;
            }
        }
        Ok(())
    }

    /// The `.wasm` files of the directory with their stamps, sorted.
    fn scan(&self) -> anyhow::Result<Vec<(PathBuf, Stamp)>> {
        let entries = std::fs::read_dir(&self.dir)
            .with_context(|| format!("cannot read {}", self.dir.display()))?;
        let mut files: Vec<(PathBuf, Stamp)> = entries
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                policy_name(&path)?;
                let meta = std::fs::metadata(&path).ok()?;
                meta.is_file().then(|| {
                    (
                        path,
                        Stamp {
                            modified: meta.modified().ok(),
                            len: meta.len(),
                        },
                    )
                })
            })
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(files)
    }

    /// Publishes one file unless its content is what was published last.
    async fn publish(&mut self, path: PathBuf, stamp: Stamp) -> anyhow::Result<Option<ConfigMap>> {
        let Some(name) = policy_name(&path) else {
            return Ok(None);
        };
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let digest = Digest::of(&bytes);
        if self.published.get(&path).is_some_and(|(_, d)| *d == digest) {
            self.published.insert(path, (stamp, digest));
            return Ok(None);
        }
        let settings = Settings {
            namespaces: Some(Access::Everyone),
            ..Settings::default()
        };
        let built = match &self.registry {
            Some(registry) => {
                registry.grant(&self.client, &self.namespace, &name).await?;
                let artifact = registry.push(&name, &bytes).await?;
                println!("policy {name}: pushed {artifact}");
                configmap::build_artifact(&name, &self.namespace, artifact, &bytes, &settings)
            }
            None => configmap::build(&name, &self.namespace, &bytes, &settings, Compression::Auto),
        };
        let map = match built {
            Ok(map) => map,
            Err(error) => {
                println!("policy {name}: not published: {error}");
                self.published.insert(path, (stamp, digest));
                return Ok(None);
            }
        };
        publish::apply(&self.client, &map).await?;
        println!(
            "policy {name}: published sha256:{} from {}",
            short(&digest.to_hex()),
            path.display()
        );
        self.published.insert(path, (stamp, digest));
        Ok(Some(map))
    }
}

/// Waits for the operator's verdict on a published ConfigMap and prints it.
pub(crate) async fn print_verdict(client: &Client, map: &ConfigMap) {
    let name = map
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(POLICY_LABEL))
        .cloned()
        .unwrap_or_default();
    match publish::wait_observed(client, map, Duration::from_secs(60)).await {
        Ok(verdict) => match (verdict.error, verdict.loaded_digest) {
            (Some(error), Some(serving)) => {
                println!(
                    "policy {name}: rejected: {error}; still serving sha256:{}",
                    short(&serving)
                );
            }
            (Some(error), None) => println!("policy {name}: rejected: {error}"),
            (None, serving) => println!(
                "policy {name}: serving sha256:{}",
                short(&serving.unwrap_or_default())
            ),
        },
        Err(error) => println!("policy {name}: {error}"),
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}
