//! Fixture DataJobs and children, built in code or read from JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Child, ChildPhase, Job, KeyValue};

/// A DataJob as the host would hand it to a policy.
///
/// In JSON (golden files), camelCase; every field but `name` is optional:
/// `{"name": "demo", "namespace": "default", "uid": "uid-demo", "generation": 1,
///   "labels": {}, "annotations": {}, "params": {}, "status": null,
///   "deletionUnixMs": null}`. `params` and `status` are JSON values here; the
/// host passes them as JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[must_use]
pub struct JobFixture {
    name: String,
    #[serde(default = "default_namespace")]
    namespace: String,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default = "default_generation")]
    generation: u64,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default = "empty_object")]
    params: Value,
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    deletion_unix_ms: Option<u64>,
}

fn default_namespace() -> String {
    "default".to_owned()
}

fn default_generation() -> u64 {
    1
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl JobFixture {
    /// A DataJob named `name` in namespace `default`, generation 1, uid
    /// `uid-<name>`, params `{}`, never reconciled before.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: default_namespace(),
            uid: None,
            generation: 1,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            params: empty_object(),
            status: None,
            deletion_unix_ms: None,
        }
    }

    /// Sets the namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Sets the uid.
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// Sets `metadata.generation`.
    pub fn generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// Sets a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets an annotation.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Sets `spec.params`.
    pub fn params(mut self, params: Value) -> Self {
        self.params = params;
        self
    }

    /// Sets the `status.outputs` an earlier call wrote.
    pub fn status(mut self, outputs: Value) -> Self {
        self.status = Some(outputs);
        self
    }

    /// Marks the DataJob as being deleted since `unix_ms`.
    pub fn deleting_since(mut self, unix_ms: u64) -> Self {
        self.deletion_unix_ms = Some(unix_ms);
        self
    }

    /// The [`Job`] a policy receives.
    #[must_use]
    pub fn to_job(&self) -> Job {
        Job {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self
                .uid
                .clone()
                .unwrap_or_else(|| format!("uid-{}", self.name)),
            generation: self.generation,
            labels: pairs(&self.labels),
            annotations: pairs(&self.annotations),
            params_json: self.params.to_string(),
            status_json: self.status.as_ref().map(Value::to_string),
            deletion_unix_ms: self.deletion_unix_ms,
        }
    }
}

/// Sorted by key, as the host sends them.
fn pairs(map: &BTreeMap<String, String>) -> Vec<KeyValue> {
    map.iter()
        .map(|(key, value)| KeyValue {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// A child as the host's cache projects it.
///
/// In JSON (golden files), camelCase; `apiVersion` defaults to `v1`, `kind`
/// to `Pod`, `phase` (`pending`, `running`, `succeeded`, `failed`,
/// `unknown`) to `pending`, `ready` and `deleting` to false:
/// `{"name": "demo-worker-0", "phase": "running", "ready": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[must_use]
pub struct ChildFixture {
    #[serde(default = "default_api_version")]
    api_version: String,
    #[serde(default = "default_kind")]
    kind: String,
    name: String,
    #[serde(default = "default_phase", with = "phase_name")]
    phase: ChildPhase,
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    deleting: bool,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

fn default_api_version() -> String {
    "v1".to_owned()
}

fn default_kind() -> String {
    "Pod".to_owned()
}

fn default_phase() -> ChildPhase {
    ChildPhase::Pending
}

impl ChildFixture {
    /// A child of any kind, pending and not ready.
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            phase: ChildPhase::Pending,
            ready: false,
            deleting: false,
            labels: BTreeMap::new(),
        }
    }

    /// A `v1` Pod, pending and not ready.
    pub fn pod(name: impl Into<String>) -> Self {
        Self::new("v1", "Pod", name)
    }

    /// A `v1` ConfigMap (phase `succeeded`, ready: it exists).
    pub fn config_map(name: impl Into<String>) -> Self {
        Self::new("v1", "ConfigMap", name)
            .phase(ChildPhase::Succeeded)
            .ready(true)
    }

    /// A `batch/v1` Job, pending.
    pub fn batch_job(name: impl Into<String>) -> Self {
        Self::new("batch/v1", "Job", name)
    }

    /// Sets the phase.
    pub fn phase(mut self, phase: ChildPhase) -> Self {
        self.phase = phase;
        self
    }

    /// Sets readiness.
    pub fn ready(mut self, ready: bool) -> Self {
        self.ready = ready;
        self
    }

    /// Marks the child as being deleted.
    pub fn deleting(mut self, deleting: bool) -> Self {
        self.deleting = deleting;
        self
    }

    /// Sets a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The [`Child`] a policy receives.
    #[must_use]
    pub fn to_child(&self) -> Child {
        Child {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            phase: self.phase,
            ready: self.ready,
            deleting: self.deleting,
            labels: pairs(&self.labels),
        }
    }
}

/// `child-phase` names as in WIT: `pending`, `running`, ...
mod phase_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    use crate::ChildPhase;

    const NAMES: [(ChildPhase, &str); 5] = [
        (ChildPhase::Pending, "pending"),
        (ChildPhase::Running, "running"),
        (ChildPhase::Succeeded, "succeeded"),
        (ChildPhase::Failed, "failed"),
        (ChildPhase::Unknown, "unknown"),
    ];

    pub(super) fn serialize<S: Serializer>(
        phase: &ChildPhase,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let name = NAMES
            .iter()
            .find(|(p, _)| p == phase)
            .map_or("unknown", |(_, name)| *name);
        serializer.serialize_str(name)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<ChildPhase, D::Error> {
        let text = String::deserialize(deserializer)?;
        NAMES
            .iter()
            .find(|(_, name)| *name == text)
            .map(|(phase, _)| *phase)
            .ok_or_else(|| {
                D::Error::unknown_variant(
                    &text,
                    &["pending", "running", "succeeded", "failed", "unknown"],
                )
            })
    }
}
