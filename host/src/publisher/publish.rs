//! Publishing a policy version as a ConfigMap (`policy push`, `dev`) and
//! waiting for the host's verdict on it.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::policies::configmap;
use crate::policies::report::Annotations;
use crate::vocabulary::PUBLISH_FIELD_MANAGER;

/// Why publishing or waiting failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ConfigMap has no name or namespace.
    #[error("the ConfigMap has no name or namespace")]
    Unnamed,
    /// The API server refused the apply.
    #[error("cannot apply ConfigMap {namespace}/{name}")]
    Apply {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading the ConfigMap back failed.
    #[error("cannot read ConfigMap {namespace}/{name}")]
    Read {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The ConfigMap was deleted while waiting.
    #[error("ConfigMap {namespace}/{name} was deleted")]
    Deleted {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// No host reported on the version in time.
    #[error(
        "no policyhost reported on ConfigMap {namespace}/{name} within {timeout:?}: is one watching namespace {namespace}?"
    )]
    Timeout {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// How long it waited.
        timeout: Duration,
    },
}

/// Creates or updates `map` by server-side apply, forcing ownership of its
/// fields: the pusher is the authority on a policy's content.
pub async fn apply(client: &Client, map: &ConfigMap) -> Result<ConfigMap, Error> {
    let (Some(name), Some(namespace)) = (map.metadata.name.clone(), map.namespace()) else {
        return Err(Error::Unnamed);
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let mut body = map.clone();
    body.metadata.managed_fields = None;
    body.metadata.resource_version = None;
    api.patch(
        &name,
        &PatchParams::apply(PUBLISH_FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|source| Error::Apply {
        namespace,
        name,
        source,
    })
}

/// Waits until the host has processed the content of `map` (its
/// fingerprint is in the `policyhost.dev/observed` annotation) and returns
/// what the host wrote: a loaded digest, or an error.
pub async fn wait_observed(
    client: &Client,
    map: &ConfigMap,
    timeout: Duration,
) -> Result<Annotations, Error> {
    let (Some(name), Some(namespace)) = (map.metadata.name.clone(), map.namespace()) else {
        return Err(Error::Unnamed);
    };
    let fingerprint = configmap::fingerprint(
        &map.data.clone().unwrap_or_default(),
        &map.binary_data.clone().unwrap_or_default(),
    );
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let deadline = Instant::now() + timeout;
    loop {
        let meta = match api.get_metadata_opt(&name).await {
            Ok(Some(meta)) => meta,
            Ok(None) => return Err(Error::Deleted { namespace, name }),
            Err(source) => {
                return Err(Error::Read {
                    namespace,
                    name,
                    source,
                });
            }
        };
        let annotations = Annotations::read(meta.annotations());
        if annotations.observed == fingerprint {
            return Ok(annotations);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                namespace,
                name,
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
