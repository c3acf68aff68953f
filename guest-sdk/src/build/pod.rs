//! A core `v1` Pod, and the Pod spec shared with [`super::BatchJob`].

use std::borrow::Cow;

use super::json::Json;
use super::kinds::{self, PERSISTENT_VOLUME_CLAIM, POD};
use super::meta::{self, Insert, Meta, Pairs};
use super::pod_template::PodTemplate;
use super::{Container, Error, Result, names};
use crate::DesiredChild;

/// What the kubelet does when a container exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart it, whatever the exit code (long-running services).
    Always,
    /// Restart it if it failed.
    OnFailure,
    /// Never restart it: the Pod ends `Succeeded` or `Failed` (the builders'
    /// default, since DataJob children usually run to completion).
    Never,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        kinds::DEFAULT_RESTART_POLICY
    }
}

impl RestartPolicy {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::OnFailure => "OnFailure",
            Self::Never => "Never",
        }
    }
}

/// A volume of a Pod backed by a PersistentVolumeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimVolume<'a> {
    /// The name its containers mount it by (a DNS-1123 label).
    pub(crate) name: Cow<'a, str>,
    /// The claim's name.
    pub(crate) claim: Cow<'a, str>,
}

/// The part of a Pod spec the builders set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodSpec<'a> {
    pub(crate) restart_policy: RestartPolicy,
    pub(crate) containers: Vec<Container<'a>>,
    pub(crate) service_account: Option<Cow<'a, str>>,
    pub(crate) node_selector: Pairs<'a>,
    pub(crate) volumes: Vec<ClaimVolume<'a>>,
    pub(crate) active_deadline_seconds: Option<u64>,
}

impl PodSpec<'_> {
    pub(crate) fn check(&self, kind: &'static str, name: &str) -> Result<()> {
        if self.containers.is_empty() {
            return Err(Error::NoContainers {
                kind,
                name: name.to_owned(),
            });
        }
        for (i, container) in self.containers.iter().enumerate() {
            container.check()?;
            if self.containers[..i]
                .iter()
                .any(|c| c.name() == container.name())
            {
                return Err(Error::DuplicateContainer {
                    kind,
                    name: name.to_owned(),
                    container: container.name().to_owned(),
                });
            }
        }
        if let Some(account) = &self.service_account {
            names::check_subdomain("service account name", account)?;
        }
        self.node_selector.check_labels()?;
        self.check_volumes(kind, name)
    }

    /// Volume names are unique labels, claims are claim names, and every
    /// mount names a declared volume.
    fn check_volumes(&self, kind: &'static str, name: &str) -> Result<()> {
        for (i, volume) in self.volumes.iter().enumerate() {
            names::check_label("volume name", &volume.name)?;
            if self.volumes[..i].iter().any(|v| v.name == volume.name) {
                return Err(Error::Invalid {
                    what: "volume name",
                    value: volume.name.clone().into_owned(),
                    reason: "must be unique within the Pod",
                });
            }
            names::check_name(&PERSISTENT_VOLUME_CLAIM, &volume.claim)?;
        }
        for container in &self.containers {
            for volume in container.mounted_volumes() {
                if !self.volumes.iter().any(|v| v.name == volume) {
                    return Err(Error::UndeclaredVolume {
                        kind,
                        name: name.to_owned(),
                        container: container.name().to_owned(),
                        volume: volume.to_owned(),
                    });
                }
            }
        }
        Ok(())
    }
}

impl PodSpec<'_> {
    /// Writes the spec as JSON; `env_insert` learns, container by
    /// container, where further environment variables would go.
    pub(crate) fn write(&self, json: &mut Json, env_insert: &mut impl FnMut(Insert)) {
        json.raw("{\"restartPolicy\":");
        json.string(self.restart_policy.as_str());
        json.raw(",\"containers\":[");
        for (i, container) in self.containers.iter().enumerate() {
            if i > 0 {
                json.byte(b',');
            }
            container.write(json, env_insert);
        }
        json.byte(b']');
        if let Some(account) = &self.service_account {
            json.raw(",\"serviceAccountName\":");
            json.string(account);
        }
        if !self.node_selector.is_empty() {
            json.raw(",\"nodeSelector\":");
            self.node_selector.write(json);
        }
        if !self.volumes.is_empty() {
            json.raw(",\"volumes\":[");
            for (i, volume) in self.volumes.iter().enumerate() {
                if i > 0 {
                    json.byte(b',');
                }
                json.raw("{\"name\":");
                json.string(&volume.name);
                json.raw(",\"persistentVolumeClaim\":{\"claimName\":");
                json.string(&volume.claim);
                json.raw("}}");
            }
            json.byte(b']');
        }
        if let Some(seconds) = self.active_deadline_seconds {
            json.raw(",\"activeDeadlineSeconds\":");
            json.number(seconds);
        }
        json.byte(b'}');
    }

    /// Bytes the spec takes as JSON, roughly: what to reserve.
    pub(crate) fn json_len(&self) -> usize {
        64 + self
            .containers
            .iter()
            .map(Container::json_len)
            .sum::<usize>()
            + self.service_account.as_ref().map_or(0, |a| a.len() + 24)
            + self.node_selector.json_len()
            + self
                .volumes
                .iter()
                .map(|v| v.name.len() + v.claim.len() + 56)
                .sum::<usize>()
    }
}

/// A core `v1` Pod.
///
/// ```
/// use policyhost_sdk::build::{Container, Pod};
///
/// let pod = Pod::new("demo-worker-0")
///     .label("app", "demo")
///     .container(Container::new("worker", "busybox").command(["true"]))
///     .build()?;
/// let manifest: serde_json::Value = serde_json::from_str(&pod.manifest)?;
/// assert_eq!(manifest["spec"]["restartPolicy"], "Never");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Pod<'a> {
    meta: Meta<'a>,
    spec: PodSpec<'a>,
}

impl<'a> Pod<'a> {
    /// A Pod named `name` (a DNS-1123 subdomain), restart policy `Never`.
    pub fn new(name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            meta: Meta::new(name.into()),
            spec: PodSpec::default(),
        }
    }

    /// Sets the restart policy.
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.spec.restart_policy = policy;
        self
    }

    /// Adds a container.
    pub fn container(mut self, container: Container<'a>) -> Self {
        self.spec.containers.push(container);
        self
    }

    /// Runs the Pod as this service account.
    pub fn service_account(mut self, name: impl Into<Cow<'a, str>>) -> Self {
        self.spec.service_account = Some(name.into());
        self
    }

    /// Requires a node label.
    pub fn node_selector(
        mut self,
        key: impl Into<Cow<'a, str>>,
        value: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.spec.node_selector.set(key.into(), value.into());
        self
    }

    /// Lets the Pod run at most this many seconds.
    pub fn active_deadline_seconds(mut self, seconds: u64) -> Self {
        self.spec.active_deadline_seconds = Some(seconds);
        self
    }

    /// Declares the volume `volume` (a DNS-1123 label, unique in the Pod),
    /// backed by the PersistentVolumeClaim `claim`, for containers to
    /// [`mount`](Container::mount).
    pub fn volume_claim(
        mut self,
        volume: impl Into<Cow<'a, str>>,
        claim: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.spec.volumes.push(ClaimVolume {
            name: volume.into(),
            claim: claim.into(),
        });
        self
    }

    /// Checks the Pod and writes its manifest.
    ///
    /// # Errors
    ///
    /// [`Error`] naming the invalid name, label, container, quantity or
    /// volume, or a mount of an undeclared volume.
    pub fn build(self) -> Result<DesiredChild> {
        names::check_name(&POD, &self.meta.name)?;
        self.meta.check()?;
        self.spec.check(POD.kind, &self.meta.name)?;
        let mut json = Json::with_capacity(
            64 + self.meta.name.len()
                + self.meta.labels.json_len()
                + self.meta.annotations.json_len()
                + self.spec.json_len(),
        );
        meta::head(&mut json, &POD);
        self.meta.write(&mut json);
        json.raw(",\"spec\":");
        self.spec.write(&mut json, &mut |_| {});
        json.byte(b'}');
        Ok(DesiredChild::from_json(
            POD.api_version,
            POD.kind,
            self.meta.name,
            json.into_string(),
        ))
    }

    /// Checks everything but the name and writes the manifest once, for
    /// many Pods that differ only in their name and in labels and
    /// environment variables added to each: see [`PodTemplate`]. The name
    /// given to [`Pod::new`] only appears in error messages.
    ///
    /// # Errors
    ///
    /// [`Error`] naming the invalid label, container, quantity or volume, or
    /// a mount of an undeclared volume.
    pub fn template(self) -> Result<PodTemplate<'a>> {
        PodTemplate::new(self)
    }

    pub(crate) fn parts(&self) -> (&Meta<'a>, &PodSpec<'a>) {
        (&self.meta, &self.spec)
    }

    pub(crate) fn parts_mut(&mut self) -> (&mut Meta<'a>, &mut PodSpec<'a>) {
        (&mut self.meta, &mut self.spec)
    }
}

meta::metadata_setters!(Pod {
    label: "Sets a label.",
    annotation: "Sets an annotation.",
});

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn manifest(child: &DesiredChild) -> Value {
        serde_json::from_str(&child.manifest).unwrap()
    }

    #[test]
    fn a_pod_manifest_has_every_field_that_was_set() {
        let pod = Pod::new("job-worker-0")
            .label("app", "job")
            .annotation("note", "x")
            .restart_policy(RestartPolicy::OnFailure)
            .service_account("runner")
            .node_selector("disk", "ssd")
            .active_deadline_seconds(600)
            .container(
                Container::new("worker", "busybox:1.36")
                    .command(["sh", "-c"])
                    .args(["echo $MODE"])
                    .env("MODE", "fast")
                    .env("MODE", "slow")
                    .request("cpu", "100m")
                    .limit("memory", "64Mi")
                    .working_dir("/data")
                    .port("http", 8080),
            )
            .build()
            .unwrap();
        assert_eq!(
            (
                pod.api_version.as_str(),
                pod.kind.as_str(),
                pod.name.as_str()
            ),
            ("v1", "Pod", "job-worker-0")
        );
        assert_eq!(
            manifest(&pod),
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": "job-worker-0", "labels": { "app": "job" },
                              "annotations": { "note": "x" } },
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [{
                        "name": "worker", "image": "busybox:1.36",
                        "command": ["sh", "-c"], "args": ["echo $MODE"],
                        "env": [{ "name": "MODE", "value": "slow" }],
                        "resources": { "requests": { "cpu": "100m" }, "limits": { "memory": "64Mi" } },
                        "workingDir": "/data",
                        "ports": [{ "name": "http", "containerPort": 8080, "protocol": "TCP" }],
                    }],
                    "serviceAccountName": "runner",
                    "nodeSelector": { "disk": "ssd" },
                    "activeDeadlineSeconds": 600,
                },
            })
        );
    }

    #[test]
    fn a_minimal_pod_omits_unset_fields() {
        let pod = Pod::new("p")
            .container(Container::new("c", "img"))
            .build()
            .unwrap();
        assert_eq!(
            manifest(&pod),
            json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" },
                    "spec": { "restartPolicy": "Never", "containers": [{ "name": "c", "image": "img" }] } })
        );
    }

    #[test]
    fn an_upper_case_pod_name_is_refused() {
        let error = Pod::new("Worker")
            .container(Container::new("c", "img"))
            .build()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Pod name \"Worker\" is invalid: must consist of lower-case letters, digits, '-' and '.'"
        );
    }

    #[test]
    fn a_pod_without_containers_is_refused() {
        assert!(matches!(
            Pod::new("p").build(),
            Err(Error::NoContainers { .. })
        ));
    }

    #[test]
    fn duplicate_container_names_are_refused() {
        let error = Pod::new("p")
            .container(Container::new("c", "a"))
            .container(Container::new("c", "b"))
            .build()
            .unwrap_err();
        assert!(
            matches!(error, Error::DuplicateContainer { ref container, .. } if container == "c")
        );
    }

    #[test]
    fn invalid_container_fields_are_refused() {
        let cases = [
            Container::new("C", "img"),
            Container::new("c", " "),
            Container::new("c", "img").env("1X", "v"),
            Container::new("c", "img").request("cpu", "lots"),
            Container::new("c", "img").port("a-very-long-port-name", 80),
            Container::new("c", "img").port("http", 0),
        ];
        for container in cases {
            let shown = format!("{container:?}");
            assert!(
                Pod::new("p").container(container).build().is_err(),
                "{shown}"
            );
        }
    }

    #[test]
    fn invalid_labels_are_refused() {
        let error = Pod::new("p")
            .label("a b", "x")
            .container(Container::new("c", "i"))
            .build();
        assert!(error.is_err());
        let error = Pod::new("p")
            .label("a", "not ok")
            .container(Container::new("c", "i"))
            .build();
        assert!(error.is_err());
    }
}
