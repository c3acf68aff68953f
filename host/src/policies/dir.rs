//! Policies from a local directory: `<name>.wasm` is the policy `<name>`.
//!
//! This is the development path (`--policy-dir`); in a cluster, policies
//! arrive as ConfigMaps.

use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::registry::{Registry, Role, Version};
use crate::chain::display_chain;
use crate::runtime::{PolicySpec, Runtime};

/// Why a policy directory could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the policy directory {}", dir.display())]
pub struct Error {
    dir: PathBuf,
    #[source]
    source: std::io::Error,
}

/// What loading a directory did.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Names put in service.
    pub installed: Vec<String>,
    /// Names whose component was rejected, with the reason.
    pub rejected: Vec<(String, &'static str)>,
}

/// The policy name a file stands for: its stem, with `_` read as `-`
/// (cargo names `my-policy`'s component `my_policy.wasm`).
#[must_use]
pub fn policy_name(path: &Path) -> Option<String> {
    if path.extension()? != "wasm" {
        return None;
    }
    Some(path.file_stem()?.to_str()?.replace('_', "-"))
}

/// Loads every `*.wasm` file of `dir` into `registry`, compiling off the
/// async runtime. A rejected file is recorded in the registry (the version in
/// service, if any, stays) and does not stop the others.
pub async fn load(runtime: &Runtime, registry: &Registry, dir: &Path) -> Result<Loaded, Error> {
    let read_error = |source| Error {
        dir: dir.to_owned(),
        source,
    };
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .map_err(read_error)?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            Some((policy_name(&path)?, path))
        })
        .collect();
    files.sort();
    let mut loaded = Loaded::default();
    for (name, path) in files {
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) => {
                warn!(policy = %name, path = %path.display(), %error, "cannot read policy file");
                registry.reject(Role::Serving, &name, "Unreadable", error.to_string());
                loaded.rejected.push((name, "Unreadable"));
                continue;
            }
        };
        match runtime.load_async(PolicySpec::new(&name), bytes).await {
            Ok(policy) => {
                info!(policy = %name, digest = %policy.digest(), path = %path.display(), "policy loaded");
                registry.install(Role::Serving, Version::of(policy));
                loaded.installed.push(name);
            }
            Err(error) => {
                warn!(policy = %name, reason = error.reason(), error = %display_chain(&error), "policy rejected");
                registry.reject(Role::Serving, &name, error.reason(), display_chain(&error));
                loaded.rejected.push((name, error.reason()));
            }
        }
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_named_after_its_file() {
        assert_eq!(
            policy_name(Path::new("/x/memory_hog.wasm")).as_deref(),
            Some("memory-hog")
        );
        assert_eq!(
            policy_name(Path::new("fanout.wasm")).as_deref(),
            Some("fanout")
        );
        assert_eq!(policy_name(Path::new("fanout.d")), None);
        assert_eq!(policy_name(Path::new("README")), None);
    }
}
