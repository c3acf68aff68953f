//! What a policy answers: desired children, status, events, cleanup progress.
//!
//! ```
//! use policyhost_sdk::{Cleanup, Condition, Event, Phase, Reconcile, Status};
//!
//! let status = Status::new(Phase::Running)
//!     .message("3/3 running")
//!     .condition(Condition::new("WorkersReady", true, "AllReady", "all workers ready"))
//!     .outputs(&serde_json::json!({ "running": 3 }))?;
//! let result = Reconcile::new(status).event(Event::normal("Running", "3 workers running"));
//! assert_eq!(serde_json::to_value(&result)?["status"]["conditions"][0]["status"], "True");
//! assert_eq!(serde_json::to_value(Cleanup::RetryAfter { ms: 2000 })?["result"], "retryAfter");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every type here serializes (serde) to the result JSON shared by the native
//! harness and the host's `policy run`: camelCase keys, manifests and outputs
//! embedded as parsed JSON, optional fields omitted.

use serde::ser::{Error as _, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::PolicyError;

/// The conventional DataJob phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not all children exist or have started.
    Pending,
    /// The work is under way.
    Running,
    /// The work finished successfully.
    Succeeded,
    /// The work failed for good.
    Failed,
}

impl Phase {
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    /// Reads a phase written by [`Phase::as_str`].
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Running, Self::Succeeded, Self::Failed]
            .into_iter()
            .find(|phase| phase.as_str() == text)
    }

    /// True for [`Succeeded`](Self::Succeeded) and [`Failed`](Self::Failed).
    #[must_use]
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

impl From<Phase> for String {
    fn from(phase: Phase) -> Self {
        phase.as_str().to_owned()
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A child the policy wants to exist. Build one with [`crate::build`], or from
/// any serializable manifest with [`DesiredChild::from_manifest`].
///
/// The host forces the namespace, owner reference and `policyhost.dev/*`
/// labels, and rejects the whole result if the kind is not allowed for the
/// policy or the manifest disagrees with the fields here.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DesiredChild {
    /// Must equal the manifest's `apiVersion`.
    pub api_version: String,
    /// Must equal the manifest's `kind`.
    pub kind: String,
    /// Must equal the manifest's `metadata.name`.
    pub name: String,
    /// The full object as JSON text.
    pub manifest: String,
}

impl DesiredChild {
    /// A child from any manifest that serializes to a Kubernetes object.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Failed`] if the manifest does not serialize to JSON.
    pub fn from_manifest<T: Serialize + ?Sized>(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
        manifest: &T,
    ) -> Result<Self, PolicyError> {
        let manifest = serde_json::to_string(manifest).map_err(|e| PolicyError::failed(&e))?;
        Ok(Self::from_json(api_version, kind, name, manifest))
    }

    /// A child from manifest JSON text, taken as is (the host checks it).
    #[must_use]
    pub fn from_json(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
        manifest: impl Into<String>,
    ) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            manifest: manifest.into(),
        }
    }
}

impl Serialize for DesiredChild {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let manifest: serde_json::Value = serde_json::from_str(&self.manifest).map_err(|e| {
            S::Error::custom(format_args!(
                "the manifest of child `{}` is not JSON: {e}",
                self.name
            ))
        })?;
        let mut out = serializer.serialize_struct("DesiredChild", 4)?;
        out.serialize_field("apiVersion", &self.api_version)?;
        out.serialize_field("kind", &self.kind)?;
        out.serialize_field("name", &self.name)?;
        out.serialize_field("manifest", &manifest)?;
        out.end()
    }
}

/// A Kubernetes status condition on the DataJob.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Condition {
    /// The condition type in UpperCamelCase, e.g. `WorkersReady`.
    pub kind: String,
    /// True or False.
    pub status: bool,
    /// One UpperCamelCase word, e.g. `AllRunning`.
    pub reason: String,
    /// A human-readable sentence.
    pub message: String,
}

impl Condition {
    /// A condition of type `kind`.
    #[must_use]
    pub fn new(
        kind: impl Into<String>,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind: kind.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("Condition", 4)?;
        out.serialize_field("type", &self.kind)?;
        out.serialize_field("status", if self.status { "True" } else { "False" })?;
        out.serialize_field("reason", &self.reason)?;
        out.serialize_field("message", &self.message)?;
        out.end()
    }
}

/// The status the policy reports for the DataJob.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// The phase, conventionally one of [`Phase`].
    pub phase: String,
    /// A human-readable summary.
    pub message: String,
    /// Conditions owned by the policy.
    pub conditions: Vec<Condition>,
    /// `status.outputs` as JSON text (an object); handed back on the next call
    /// as [`Job::status_json`](crate::Job::status_json).
    pub outputs: String,
}

impl Status {
    /// A status in this phase, with no message, conditions or outputs (`{}`).
    #[must_use]
    pub fn new(phase: impl Into<String>) -> Self {
        Self {
            phase: phase.into(),
            message: String::new(),
            conditions: Vec::new(),
            outputs: "{}".to_owned(),
        }
    }

    /// Sets the summary message.
    #[must_use]
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Adds a condition, replacing one of the same type.
    #[must_use]
    pub fn condition(mut self, condition: Condition) -> Self {
        self.conditions.retain(|c| c.kind != condition.kind);
        self.conditions.push(condition);
        self
    }

    /// Sets `status.outputs` from a value that serializes to a JSON object.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Failed`] if `outputs` does not serialize to JSON.
    pub fn outputs<T: Serialize + ?Sized>(mut self, outputs: &T) -> Result<Self, PolicyError> {
        self.outputs = serde_json::to_string(outputs).map_err(|e| PolicyError::failed(&e))?;
        Ok(self)
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let outputs: serde_json::Value = serde_json::from_str(&self.outputs)
            .map_err(|e| S::Error::custom(format_args!("status.outputs is not JSON: {e}")))?;
        let mut out = serializer.serialize_struct("Status", 4)?;
        out.serialize_field("phase", &self.phase)?;
        out.serialize_field("message", &self.message)?;
        out.serialize_field("conditions", &self.conditions)?;
        out.serialize_field("outputs", &outputs)?;
        out.end()
    }
}

/// A Kubernetes Event the host records on the DataJob.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// A `Warning` event rather than a `Normal` one.
    pub warning: bool,
    /// One UpperCamelCase word.
    pub reason: String,
    /// A human-readable sentence.
    pub message: String,
}

impl Event {
    /// A `Normal` event.
    #[must_use]
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A `Warning` event.
    #[must_use]
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("Event", 3)?;
        out.serialize_field("type", if self.warning { "Warning" } else { "Normal" })?;
        out.serialize_field("reason", &self.reason)?;
        out.serialize_field("message", &self.message)?;
        out.end()
    }
}

/// What `reconcile` wants to be true.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Reconcile {
    /// The complete desired set of children; owned children not in it are pruned.
    pub children: Vec<DesiredChild>,
    /// The DataJob's new status.
    pub status: Status,
    /// Call again after this many milliseconds even if nothing changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// Events to record on the DataJob.
    pub events: Vec<Event>,
}

impl Reconcile {
    /// A result with this status and, so far, no children (all would be pruned).
    #[must_use]
    pub fn new(status: Status) -> Self {
        Self {
            children: Vec::new(),
            status,
            requeue_after_ms: None,
            events: Vec::new(),
        }
    }

    /// Adds a desired child.
    #[must_use]
    pub fn child(mut self, child: DesiredChild) -> Self {
        self.children.push(child);
        self
    }

    /// Adds desired children.
    #[must_use]
    pub fn children(mut self, children: impl IntoIterator<Item = DesiredChild>) -> Self {
        self.children.extend(children);
        self
    }

    /// Adds an event.
    #[must_use]
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Asks to be called again after `ms` milliseconds.
    #[must_use]
    pub fn requeue_after_ms(mut self, ms: u64) -> Self {
        self.requeue_after_ms = Some(ms);
        self
    }
}

/// What `cleanup` reports.
///
/// Serializes as `{"result": "done"}` or
/// `{"result": "retryAfter", "retryAfterMs": 2000}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum Cleanup {
    /// Cleanup is complete: the host may remove its finalizer.
    Done,
    /// Not yet: call again after `ms` milliseconds.
    RetryAfter {
        /// Milliseconds until the next call.
        #[serde(rename = "retryAfterMs")]
        ms: u64,
    },
}

impl Cleanup {
    /// [`Cleanup::Done`] once no child that runs ([`crate::Child::runs`])
    /// is pending or running, else [`Cleanup::RetryAfter`] `retry_ms`.
    #[must_use]
    pub fn once_stopped(children: &[crate::Child], retry_ms: u64) -> Self {
        if children
            .iter()
            .any(|child| child.runs() && child.phase.is_active())
        {
            Self::RetryAfter { ms: retry_ms }
        } else {
            Self::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reconcile_result_serializes_to_the_shared_result_json() {
        let result = Reconcile::new(
            Status::new(Phase::Running)
                .message("1/1 running")
                .condition(Condition::new("WorkersReady", true, "AllRunning", "ok"))
                .outputs(&json!({ "desired": 1 }))
                .unwrap(),
        )
        .child(DesiredChild::from_json(
            "v1",
            "ConfigMap",
            "c",
            r#"{"kind":"ConfigMap"}"#,
        ))
        .event(Event::warning("Failed", "x"))
        .event(Event::normal("Created", "y"));
        assert_eq!(
            serde_json::to_value(&result).unwrap(),
            json!({
                "children": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                               "manifest": { "kind": "ConfigMap" } }],
                "status": { "phase": "Running", "message": "1/1 running",
                            "conditions": [{ "type": "WorkersReady", "status": "True",
                                             "reason": "AllRunning", "message": "ok" }],
                            "outputs": { "desired": 1 } },
                "events": [{ "type": "Warning", "reason": "Failed", "message": "x" },
                           { "type": "Normal", "reason": "Created", "message": "y" }],
            })
        );
    }

    #[test]
    fn requeue_after_appears_only_when_set() {
        let result = Reconcile::new(Status::new(Phase::Pending)).requeue_after_ms(5000);
        assert_eq!(
            serde_json::to_value(&result).unwrap()["requeueAfterMs"],
            json!(5000)
        );
    }

    #[test]
    fn a_manifest_that_is_not_json_fails_to_serialize_naming_the_child() {
        let result = Reconcile::new(Status::new(Phase::Pending)).child(DesiredChild::from_json(
            "v1",
            "Pod",
            "bad",
            "{not json",
        ));
        let error = serde_json::to_value(&result).unwrap_err().to_string();
        assert!(
            error.contains("the manifest of child `bad` is not JSON"),
            "{error}"
        );
    }

    #[test]
    fn cleanup_results_serialize_with_a_result_tag() {
        assert_eq!(
            serde_json::to_value(Cleanup::Done).unwrap(),
            json!({ "result": "done" })
        );
        assert_eq!(
            serde_json::to_value(Cleanup::RetryAfter { ms: 1000 }).unwrap(),
            json!({ "result": "retryAfter", "retryAfterMs": 1000 })
        );
    }

    #[test]
    fn a_condition_of_the_same_type_replaces_the_old_one() {
        let status = Status::new(Phase::Running)
            .condition(Condition::new("A", false, "X", ""))
            .condition(Condition::new("A", true, "Y", ""));
        assert_eq!(status.conditions, vec![Condition::new("A", true, "Y", "")]);
    }

    #[test]
    fn phases_round_trip_through_their_names() {
        for phase in [
            Phase::Pending,
            Phase::Running,
            Phase::Succeeded,
            Phase::Failed,
        ] {
            assert_eq!(Phase::parse(phase.as_str()), Some(phase));
        }
        assert_eq!(Phase::parse("Exploded"), None);
    }

    #[test]
    fn a_pending_claim_does_not_hold_the_cleanup_a_running_pod_does() {
        use crate::ChildPhase;
        use crate::testing::ChildFixture;
        let claim = ChildFixture::new("v1", "PersistentVolumeClaim", "scratch").to_child();
        let done = ChildFixture::pod("w-1")
            .phase(ChildPhase::Succeeded)
            .to_child();
        let running = ChildFixture::pod("w-0")
            .phase(ChildPhase::Running)
            .to_child();
        let job = ChildFixture::new("batch/v1", "Job", "j").to_child();
        assert_eq!(
            Cleanup::once_stopped(&[claim.clone(), done], 2000),
            Cleanup::Done
        );
        assert_eq!(
            Cleanup::once_stopped(&[claim, running], 2000),
            Cleanup::RetryAfter { ms: 2000 }
        );
        assert_eq!(
            Cleanup::once_stopped(&[job], 2000),
            Cleanup::RetryAfter { ms: 2000 }
        );
    }
}
