//! What the CLI needs to reach a registry: a client trusting the web's
//! roots (and a CA file), and credentials from a Docker `config.json`, as
//! `docker login` and `cosign login` write it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use policyhost::oci::{Client, ClientConfig, Credentials};

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
