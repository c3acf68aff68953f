//! What the CLI needs to reach a registry: a client trusting the web's
//! roots (and a CA file), credentials from a Docker `config.json`, as
//! `docker login` writes it, and a component named by a file or an OCI
//! reference.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use policyhost::oci::{BlobCache, Client, ClientConfig, Credentials, PullGrant, Puller, Reference};

use super::terminal::eprintln;

/// How the CLI reaches a registry.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct RegistryArgs {
    /// The registry credentials: a Docker `config.json` (`auths`), by
    /// default `$DOCKER_CONFIG/config.json` or `~/.docker/config.json` if
    /// there is one.
    #[arg(long, value_name = "FILE")]
    pub(crate) registry_auth: Option<PathBuf>,
    /// Certificate authorities (PEM) trusted besides the web's roots, for
    /// the registry.
    #[arg(long, value_name = "CA.pem")]
    pub(crate) registry_ca: Option<PathBuf>,
}

/// A component as a command names it: a `.wasm` file, or an artifact in a
/// registry (`REGISTRY/REPOSITORY@sha256:…` or `:TAG`) when no such file
/// exists.
#[derive(Debug, Clone)]
pub(crate) enum ComponentSource {
    /// A file.
    File(PathBuf),
    /// An artifact.
    Artifact(Reference),
}

impl FromStr for ComponentSource {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let path = PathBuf::from(text);
        if path.exists() || !text.contains('/') {
            return Ok(Self::File(path));
        }
        Ok(text.parse().map_or(Self::File(path), Self::Artifact))
    }
}

impl std::fmt::Display for ComponentSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Artifact(reference) => write!(f, "{reference}"),
        }
    }
}

impl ComponentSource {
    /// The policy name it suggests: the file's stem, the repository's last
    /// component.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::File(path) => path
                .file_stem()
                .map_or_else(|| "policy".into(), |s| s.to_string_lossy().into_owned()),
            Self::Artifact(reference) => reference
                .repository()
                .rsplit('/')
                .next()
                .unwrap_or("policy")
                .to_owned(),
        }
    }

    /// The component's bytes: read, or pulled (its layout and digests
    /// checked as the operator checks them).
    pub(crate) fn read(&self, registry: &RegistryArgs) -> anyhow::Result<Vec<u8>> {
        let reference = match self {
            Self::File(path) => return super::read(path),
            Self::Artifact(reference) => reference,
        };
        let client = client(registry.registry_ca.as_deref())?;
        let grant = PullGrant {
            prefixes: vec![format!("{}/{}", reference.registry(), reference.repository()).parse()?],
            credentials: credentials(registry.registry_auth.as_deref())?,
        };
        let puller = Puller::new(client, BlobCache::default(), Duration::from_secs(120));
        let pulled = super::cluster::block_on(async {
            puller
                .pull(reference, &grant, MAX_COMPONENT_BYTES)
                .await
                .map_err(anyhow::Error::from)
        })?;
        eprintln!("pulled {}", reference.with_digest(pulled.manifest));
        Ok(pulled.component)
    }
}

/// The largest component the CLI pulls: the operator's default cap.
const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// A registry client trusting `ca` besides the web's roots.
pub(crate) fn client(ca: Option<&Path>) -> anyhow::Result<Client> {
    let extra_roots = match ca {
        Some(path) => super::operate::read_roots(&path.to_string_lossy())
            .map_err(anyhow::Error::msg)?
            .into_inner(),
        None => Vec::new(),
    };
    Client::new(&ClientConfig {
        extra_roots,
        ..ClientConfig::default()
    })
    .context("cannot trust the registry's certificate authority")
}

/// The credentials of `file`, or of the default Docker `config.json` if
/// there is one; anonymous otherwise.
pub(crate) fn credentials(file: Option<&Path>) -> anyhow::Result<Credentials> {
    let Some(path) = file.map(Path::to_path_buf).or_else(default_config) else {
        return Ok(Credentials::anonymous());
    };
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Credentials::parse(&bytes).with_context(|| format!("{}", path.display()))
}

/// `$DOCKER_CONFIG/config.json`, or `~/.docker/config.json`, if it exists.
fn default_config() -> Option<PathBuf> {
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker")))?;
    Some(dir.join("config.json")).filter(|path| path.is_file())
}
