//! Builders for the common children, producing valid manifests.
//!
//! Each builder checks names (DNS-1123), label keys and values, container
//! names, environment variable names and resource quantities, then serializes
//! the object with serde into a [`DesiredChild`](crate::DesiredChild). The
//! host sets the namespace, owner reference and `policyhost.dev/*` labels, so
//! builders leave them out.
//!
//! ```
//! use policyhost_sdk::build::{BatchJob, ConfigMap, Container, Pod, RestartPolicy, Service};
//!
//! let worker = Container::new("worker", "busybox:1.36")
//!     .command(["sh", "-c"])
//!     .args(["echo hello"])
//!     .env("MODE", "fast")
//!     .request("cpu", "100m")
//!     .limit("memory", "128Mi");
//! let pod = Pod::new("demo-worker-0")
//!     .label("app.kubernetes.io/name", "demo")
//!     .restart_policy(RestartPolicy::Never)
//!     .container(worker.clone())
//!     .build()?;
//! assert_eq!(pod.kind, "Pod");
//!
//! let config = ConfigMap::new("demo-config").data("mode", "fast").build()?;
//! let service = Service::new("demo").selector("app", "demo").port("http", 80, 8080).build()?;
//! let job = BatchJob::new("demo-once").backoff_limit(2).container(worker).build()?;
//! assert_eq!(job.api_version, "batch/v1");
//! # Ok::<(), policyhost_sdk::build::Error>(())
//! ```

mod batch_job;
mod config_map;
mod container;
mod meta;
mod names;
mod pod;
mod service;

pub use batch_job::BatchJob;
pub use config_map::ConfigMap;
pub use container::Container;
pub use names::{is_dns1035_label, is_dns1123_label, is_dns1123_subdomain};
pub use pod::{Pod, RestartPolicy};
pub use service::Service;

/// Why a builder refused to build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, key or value breaks Kubernetes' validation rules.
    #[error("{what} {value:?} is invalid: {reason}")]
    Invalid {
        /// What it is, e.g. `Pod name`, `label key`.
        what: &'static str,
        /// The offending text.
        value: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// A Pod or Job without containers.
    #[error("{kind} `{name}` has no containers")]
    NoContainers {
        /// `Pod` or `Job`.
        kind: &'static str,
        /// The object's name.
        name: String,
    },
    /// Two containers with the same name.
    #[error("{kind} `{name}` has two containers named `{container}`")]
    DuplicateContainer {
        /// `Pod` or `Job`.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The repeated container name.
        container: String,
    },
    /// The manifest did not serialize (not expected for builder output).
    #[error("cannot serialize the {kind} manifest")]
    Serialize {
        /// The object's kind.
        kind: &'static str,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },
}

/// Builder results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Serializes a checked manifest, into a buffer sized for a typical object
/// so that it rarely grows.
fn serialize<T: serde::Serialize>(kind: &'static str, manifest: &T) -> Result<String> {
    let mut buffer = Vec::with_capacity(512);
    serde_json::to_writer(&mut buffer, manifest)
        .map_err(|source| Error::Serialize { kind, source })?;
    // serde_json writes UTF-8 only; the check is a cheap scan.
    String::from_utf8(buffer).map_err(|e| Error::Serialize {
        kind,
        source: serde::ser::Error::custom(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_name_the_problem() {
        let error = Error::Invalid {
            what: "Pod name",
            value: "Bad".into(),
            reason: "must be lower case",
        };
        assert_eq!(
            error.to_string(),
            r#"Pod name "Bad" is invalid: must be lower case"#
        );
        let error = Error::NoContainers {
            kind: "Pod",
            name: "p".into(),
        };
        assert_eq!(error.to_string(), "Pod `p` has no containers");
        let error = Error::DuplicateContainer {
            kind: "Job",
            name: "j".into(),
            container: "c".into(),
        };
        assert_eq!(error.to_string(), "Job `j` has two containers named `c`");
        let source = serde_json::from_str::<u8>("x").unwrap_err();
        let error = Error::Serialize {
            kind: "Pod",
            source,
        };
        assert_eq!(error.to_string(), "cannot serialize the Pod manifest");
    }

    #[test]
    fn a_build_error_becomes_a_failed_policy_error_with_its_message() {
        let error: crate::PolicyError = Error::NoContainers {
            kind: "Pod",
            name: "p".into(),
        }
        .into();
        assert_eq!(
            error,
            crate::PolicyError::Failed("Pod `p` has no containers".into())
        );
    }
}
