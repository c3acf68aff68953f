//! Builders for the common children, producing valid manifests.
//!
//! Each builder checks names (DNS-1123), label keys and values, container
//! names, environment variable names, resource quantities and volumes, then writes
//! the object's JSON into a [`DesiredChild`](crate::DesiredChild), straight
//! into one buffer. The host sets the namespace, owner reference and
//! `policyhost.dev/*` labels, so builders leave them out.
//!
//! For many Pods that differ only in name, a few labels and environment
//! variables (workers, shards), [`Pod::template`] checks and writes the shared
//! part once; see [`PodTemplate`].
//!
//! ```
//! use policyhost_sdk::build::{
//!     AccessMode, BatchJob, ConfigMap, Container, PersistentVolumeClaim, Pod, RestartPolicy,
//!     Service,
//! };
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
//! let job = BatchJob::new("demo-once").backoff_limit(2).container(worker.clone()).build()?;
//! assert_eq!(job.api_version, "batch/v1");
//!
//! // Storage: a claim, declared as a volume of the Pod, mounted by a container.
//! let claim = PersistentVolumeClaim::new("demo-data")
//!     .storage("10Gi")
//!     .access_mode(AccessMode::ReadWriteMany)
//!     .build()?;
//! let pod = Pod::new("demo-worker-1")
//!     .volume_claim("data", "demo-data")
//!     .container(worker.mount("data", "/data"))
//!     .build()?;
//! # Ok::<(), policyhost_sdk::build::Error>(())
//! ```

mod batch_job;
mod config_map;
mod container;
mod json;
mod kinds;
mod meta;
mod names;
mod persistent_volume_claim;
mod pod;
mod pod_template;
mod service;
mod strategy;

pub use batch_job::BatchJob;
pub use config_map::ConfigMap;
pub use container::Container;
pub use json::push_decimal;
pub use names::{is_dns1035_label, is_dns1123_label, is_dns1123_subdomain};
pub use persistent_volume_claim::{AccessMode, PersistentVolumeClaim};
pub use pod::{Pod, RestartPolicy};
pub use pod_template::{PodTemplate, TemplatePod};
pub use service::Service;
pub use strategy::{UPDATE_STRATEGY_ANNOTATION, UpdateStrategy};

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
    /// A container mounts a volume its Pod (or Job's Pod template) does not
    /// declare.
    #[error("{kind} `{name}` has no volume `{volume}` for container `{container}` to mount")]
    UndeclaredVolume {
        /// `Pod` or `Job`.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The container that mounts it.
        container: String,
        /// The volume it names.
        volume: String,
    },
}

/// Builder results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifests the builders wrote when they went through serde_json,
    /// byte for byte: writing JSON by hand changed nothing a reader sees.
    #[test]
    fn manifests_are_byte_for_byte_what_serde_json_wrote() {
        let pod = Pod::new("job-worker-0")
            .label("app", "job")
            .annotation("note", "say \"hi\"\n\u{1}\\ é")
            .restart_policy(RestartPolicy::OnFailure)
            .service_account("runner")
            .node_selector("disk", "ssd")
            .active_deadline_seconds(600)
            .container(
                Container::new("worker", "busybox:1.36")
                    .command(["sh", "-c"])
                    .args(["echo $MODE\t\u{7f}"])
                    .env("MODE", "fast")
                    .env("MODE", "slow")
                    .request("cpu", "100m")
                    .limit("memory", "64Mi")
                    .working_dir("/data")
                    .port("http", 8080),
            )
            .container(Container::new("side", "img"))
            .build()
            .unwrap();
        let job = BatchJob::new("once")
            .label("app", "x")
            .backoff_limit(2)
            .completions(3)
            .parallelism(1)
            .active_deadline_seconds(60)
            .ttl_seconds_after_finished(30)
            .restart_policy(RestartPolicy::OnFailure)
            .container(Container::new("c", "img"))
            .build()
            .unwrap();
        let service = Service::new("web")
            .selector("app", "web")
            .port("http", 80, 8080)
            .headless()
            .annotation("a", "b")
            .build()
            .unwrap();
        let config = ConfigMap::new("cfg")
            .label("a", "b")
            .data("k", "v\u{0}\u{1f}\u{8}\u{c}\r")
            .build()
            .unwrap();
        let empty = ConfigMap::new("cfg").build().unwrap();
        let expected = [
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"job-worker-0\",\"labels\":{\"app\":\"job\"},\"annotations\":{\"note\":\"say \\\"hi\\\"\\n\\u0001\\\\ é\"}},\"spec\":{\"restartPolicy\":\"OnFailure\",\"containers\":[{\"name\":\"worker\",\"image\":\"busybox:1.36\",\"command\":[\"sh\",\"-c\"],\"args\":[\"echo $MODE\\t\u{7f}\"],\"env\":[{\"name\":\"MODE\",\"value\":\"slow\"}],\"resources\":{\"requests\":{\"cpu\":\"100m\"},\"limits\":{\"memory\":\"64Mi\"}},\"workingDir\":\"/data\",\"ports\":[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"}]},{\"name\":\"side\",\"image\":\"img\"}],\"serviceAccountName\":\"runner\",\"nodeSelector\":{\"disk\":\"ssd\"},\"activeDeadlineSeconds\":600}}",
            "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"once\",\"labels\":{\"app\":\"x\"}},\"spec\":{\"backoffLimit\":2,\"completions\":3,\"parallelism\":1,\"activeDeadlineSeconds\":60,\"ttlSecondsAfterFinished\":30,\"template\":{\"metadata\":{\"labels\":{\"app\":\"x\"}},\"spec\":{\"restartPolicy\":\"OnFailure\",\"containers\":[{\"name\":\"c\",\"image\":\"img\"}]}}}}",
            "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"web\",\"annotations\":{\"a\":\"b\"}},\"spec\":{\"type\":\"ClusterIP\",\"clusterIP\":\"None\",\"selector\":{\"app\":\"web\"},\"ports\":[{\"name\":\"http\",\"port\":80,\"targetPort\":8080,\"protocol\":\"TCP\"}]}}",
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cfg\",\"labels\":{\"a\":\"b\"}},\"data\":{\"k\":\"v\\u0000\\u001f\\b\\f\\r\"}}",
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cfg\"},\"data\":{}}",
        ];
        let actual = [pod, job, service, config, empty].map(|child| child.manifest);
        assert_eq!(actual, expected);
    }

    /// Every builder's `label` and `annotation` land in its own metadata;
    /// a Job's labels also in its Pod template, its annotations not.
    #[test]
    fn every_builder_sets_labels_and_annotations_on_its_metadata() {
        let container = || Container::new("c", "img");
        let children = [
            Pod::new("p")
                .container(container())
                .label("l", "1")
                .annotation("a", "2")
                .build(),
            ConfigMap::new("p")
                .label("l", "1")
                .annotation("a", "2")
                .build(),
            Service::new("p")
                .headless()
                .label("l", "1")
                .annotation("a", "2")
                .build(),
            BatchJob::new("p")
                .container(container())
                .label("l", "1")
                .annotation("a", "2")
                .build(),
            PersistentVolumeClaim::new("p")
                .storage("1Gi")
                .label("l", "1")
                .annotation("a", "2")
                .build(),
        ];
        for child in children {
            let manifest: serde_json::Value =
                serde_json::from_str(&child.unwrap().manifest).unwrap();
            assert_eq!(
                manifest["metadata"],
                serde_json::json!({ "name": "p", "labels": { "l": "1" }, "annotations": { "a": "2" } }),
                "{manifest}"
            );
            if manifest["kind"] == "Job" {
                assert_eq!(
                    manifest["spec"]["template"]["metadata"],
                    serde_json::json!({ "labels": { "l": "1" } })
                );
            }
        }
    }

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
        let error = Error::UndeclaredVolume {
            kind: "Pod",
            name: "p".into(),
            container: "c".into(),
            volume: "data".into(),
        };
        assert_eq!(
            error.to_string(),
            "Pod `p` has no volume `data` for container `c` to mount"
        );
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
