//! A `batch/v1` Job.

use std::borrow::Cow;

use super::json::Json;
use super::kinds::{JOB, JOB_RESTART_POLICIES, JOB_RESTART_POLICY_RULE};
use super::meta::{self, Meta};
use super::pod::{ClaimVolume, PodSpec, RestartPolicy};
use super::{Container, Error, Result, names};
use crate::DesiredChild;

/// A `batch/v1` Job: Pods run to completion, retried up to a backoff limit.
///
/// ```
/// use policyhost_sdk::build::{BatchJob, Container};
///
/// let job = BatchJob::new("demo-migrate")
///     .backoff_limit(3)
///     .completions(1)
///     .container(Container::new("migrate", "migrator:2").args(["--all"]))
///     .build()?;
/// assert_eq!((job.api_version.as_str(), job.kind.as_str()), ("batch/v1", "Job"));
/// # Ok::<(), policyhost_sdk::build::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct BatchJob<'a> {
    /// The Job's metadata; its labels are its Pods' too.
    meta: Meta<'a>,
    pod: PodSpec<'a>,
    backoff_limit: Option<u32>,
    completions: Option<u32>,
    parallelism: Option<u32>,
    active_deadline_seconds: Option<u64>,
    ttl_seconds_after_finished: Option<u32>,
}

impl<'a> BatchJob<'a> {
    /// A Job named `name`: a DNS-1123 label (at most 63 characters, since the
    /// name becomes a label on its Pods).
    pub fn new(name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            meta: Meta::new(name.into()),
            pod: PodSpec::default(),
            backoff_limit: None,
            completions: None,
            parallelism: None,
            active_deadline_seconds: None,
            ttl_seconds_after_finished: None,
        }
    }

    /// Adds a container to the Pod template.
    pub fn container(mut self, container: Container<'a>) -> Self {
        self.pod.containers.push(container);
        self
    }

    /// The Pods' restart policy: `Never` (default) or `OnFailure`.
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.pod.restart_policy = policy;
        self
    }

    /// Runs the Pods as this service account.
    pub fn service_account(mut self, name: impl Into<Cow<'a, str>>) -> Self {
        self.pod.service_account = Some(name.into());
        self
    }

    /// Declares the volume `volume` (a DNS-1123 label, unique in the Pod
    /// template), backed by the PersistentVolumeClaim `claim`, for
    /// containers to [`mount`](Container::mount).
    pub fn volume_claim(
        mut self,
        volume: impl Into<Cow<'a, str>>,
        claim: impl Into<Cow<'a, str>>,
    ) -> Self {
        self.pod.volumes.push(ClaimVolume {
            name: volume.into(),
            claim: claim.into(),
        });
        self
    }

    /// Retries failed Pods at most this many times (Kubernetes' default: 6).
    pub fn backoff_limit(mut self, limit: u32) -> Self {
        self.backoff_limit = Some(limit);
        self
    }

    /// Needs this many successful Pods.
    pub fn completions(mut self, count: u32) -> Self {
        self.completions = Some(count);
        self
    }

    /// Runs at most this many Pods at once.
    pub fn parallelism(mut self, count: u32) -> Self {
        self.parallelism = Some(count);
        self
    }

    /// Fails the Job after this many seconds.
    pub fn active_deadline_seconds(mut self, seconds: u64) -> Self {
        self.active_deadline_seconds = Some(seconds);
        self
    }

    /// Lets Kubernetes delete the finished Job after this many seconds.
    pub fn ttl_seconds_after_finished(mut self, seconds: u32) -> Self {
        self.ttl_seconds_after_finished = Some(seconds);
        self
    }

    /// Checks the Job and writes its manifest.
    ///
    /// # Errors
    ///
    /// [`Error`] for a bad name, label, container or volume, or restart
    /// policy `Always`.
    pub fn build(self) -> Result<DesiredChild> {
        names::check_name(&JOB, &self.meta.name)?;
        self.meta.check()?;
        self.pod.check(JOB.kind, &self.meta.name)?;
        let restart_policy = self.pod.restart_policy;
        if !JOB_RESTART_POLICIES.contains(&restart_policy) {
            return Err(Error::Invalid {
                what: "Job restart policy",
                value: restart_policy.as_str().to_owned(),
                reason: JOB_RESTART_POLICY_RULE,
            });
        }
        let mut json = Json::with_capacity(
            192 + self.meta.name.len()
                + (self.meta.labels.json_len() * 2)
                + self.meta.annotations.json_len()
                + self.pod.json_len(),
        );
        meta::head(&mut json, &JOB);
        self.meta.write(&mut json);
        json.raw(",\"spec\":{");
        let numbers = [
            ("\"backoffLimit\":", self.backoff_limit.map(u64::from)),
            ("\"completions\":", self.completions.map(u64::from)),
            ("\"parallelism\":", self.parallelism.map(u64::from)),
            ("\"activeDeadlineSeconds\":", self.active_deadline_seconds),
            (
                "\"ttlSecondsAfterFinished\":",
                self.ttl_seconds_after_finished.map(u64::from),
            ),
        ];
        for (key, value) in numbers {
            if let Some(value) = value {
                json.raw(key);
                json.number(value);
                json.byte(b',');
            }
        }
        json.raw("\"template\":{\"metadata\":");
        self.meta.write_labels(&mut json);
        json.raw(",\"spec\":");
        self.pod.write(&mut json, &mut |_| {});
        json.raw("}}}");
        Ok(DesiredChild::from_json(
            "batch/v1",
            "Job",
            self.meta.name,
            json.into_string(),
        ))
    }
}

meta::metadata_setters!(BatchJob {
    label: "Sets a label on the Job and on its Pods.",
    annotation: "Sets an annotation on the Job.",
});

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_job_manifest_has_a_pod_template() {
        let child = BatchJob::new("once")
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
        let manifest: serde_json::Value = serde_json::from_str(&child.manifest).unwrap();
        assert_eq!(
            manifest,
            json!({ "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": { "name": "once", "labels": { "app": "x" } },
                    "spec": { "backoffLimit": 2, "completions": 3, "parallelism": 1,
                              "activeDeadlineSeconds": 60, "ttlSecondsAfterFinished": 30,
                              "template": { "metadata": { "labels": { "app": "x" } },
                                            "spec": { "restartPolicy": "OnFailure",
                                                      "containers": [{ "name": "c", "image": "img" }] } } } })
        );
    }

    #[test]
    fn a_job_may_not_restart_always() {
        let error = BatchJob::new("j")
            .restart_policy(RestartPolicy::Always)
            .container(Container::new("c", "i"))
            .build()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Job restart policy \"Always\" is invalid: must be Never or OnFailure"
        );
    }

    #[test]
    fn a_job_name_must_fit_in_a_label() {
        let error = BatchJob::new("j".repeat(64))
            .container(Container::new("c", "i"))
            .build();
        assert!(error.is_err());
    }
}
