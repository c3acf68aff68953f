//! What the host tells about a policy ConfigMap: annotations (read by
//! `policyhost policy list`) and the notes of its `PolicyLoaded` /
//! `PolicyRejected` Events.

use std::collections::BTreeMap;

use crate::runtime::{Clamped, Limits, Policy, Source};
use crate::vocabulary::{
    CLAMPED_ANNOTATION, ERROR_ANNOTATION, HISTORY_ANNOTATION, LOADED_AT_ANNOTATION,
    LOADED_DIGEST_ANNOTATION, OBSERVED_ANNOTATION, PINNED_ANNOTATION, PROVIDES_ANNOTATION,
    SDK_ANNOTATION,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value};

/// The annotations the host keeps on one policy ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations {
    /// Fingerprint of the content last processed.
    pub observed: String,
    /// Digest in service from this ConfigMap.
    pub loaded_digest: Option<String>,
    /// When it was put in service.
    pub loaded_at: Option<String>,
    /// `<Reason>: <message>` of the last processed content, if rejected.
    pub error: Option<String>,
    /// The limits lowered to the host maxima.
    pub clamped: Option<String>,
    /// The SDK the component in service was built with.
    pub sdk: Option<String>,
    /// The policy this ConfigMap provides, if any.
    pub provides: Option<String>,
    /// The tag of its artifact as resolved ([`PINNED_ANNOTATION`]); kept
    /// when absent here, as only a load that resolved a tag sets it.
    pub pinned: Option<String>,
    /// The versions the policy served ([`HISTORY_ANNOTATION`]); kept when
    /// absent here, as only a swap of the serving version rewrites it.
    pub history: Option<String>,
}

impl Annotations {
    /// The merge patch that sets these annotations and removes the absent ones.
    fn patch(&self) -> Value {
        let mut annotations = Map::new();
        let mut put = |key: &str, value: Option<&String>| {
            annotations.insert(
                key.to_owned(),
                value.map_or(Value::Null, |v| v.clone().into()),
            );
        };
        put(OBSERVED_ANNOTATION, Some(&self.observed));
        put(LOADED_DIGEST_ANNOTATION, self.loaded_digest.as_ref());
        put(LOADED_AT_ANNOTATION, self.loaded_at.as_ref());
        put(ERROR_ANNOTATION, self.error.as_ref());
        put(CLAMPED_ANNOTATION, self.clamped.as_ref());
        put(SDK_ANNOTATION, self.sdk.as_ref());
        put(PROVIDES_ANNOTATION, self.provides.as_ref());
        if let Some(pinned) = &self.pinned {
            put(PINNED_ANNOTATION, Some(pinned));
        }
        if let Some(history) = &self.history {
            put(HISTORY_ANNOTATION, Some(history));
        }
        serde_json::json!({ "metadata": { "annotations": annotations } })
    }

    /// Writes them on the ConfigMap `name` with a merge patch: a deleted
    /// ConfigMap is not re-created (an apply would), and the fields of
    /// whoever pushed the policy are left alone.
    pub(crate) async fn write(&self, api: &Api<ConfigMap>, name: &str) -> kube::Result<()> {
        api.patch(name, &PatchParams::default(), &Patch::Merge(self.patch()))
            .await
            .map(|_| ())
    }

    /// Reads what the host wrote on a ConfigMap.
    #[must_use]
    pub fn read(annotations: &BTreeMap<String, String>) -> Self {
        let get = |key: &str| annotations.get(key).cloned();
        Self {
            observed: get(OBSERVED_ANNOTATION).unwrap_or_default(),
            loaded_digest: get(LOADED_DIGEST_ANNOTATION),
            loaded_at: get(LOADED_AT_ANNOTATION),
            error: get(ERROR_ANNOTATION),
            clamped: get(CLAMPED_ANNOTATION),
            sdk: get(SDK_ANNOTATION),
            provides: get(PROVIDES_ANNOTATION),
            pinned: get(PINNED_ANNOTATION),
            history: get(HISTORY_ANNOTATION),
        }
    }
}

/// `memory 64Mi, fuel 500000000, timeout 1000ms, children 1000, output 4Mi`.
pub(crate) fn limits_text(limits: &Limits) -> String {
    format!(
        "memory {}, fuel {}, timeout {}ms, children {}, output {}",
        crate::quantity::format_bytes(limits.memory_bytes),
        limits.fuel,
        limits.timeout.as_millis(),
        limits.children,
        crate::quantity::format_bytes(limits.output_bytes),
    )
}

/// The clamped limits on one line, if any.
pub(crate) fn clamped_text(clamped: &[Clamped]) -> Option<String> {
    (!clamped.is_empty()).then(|| {
        clamped
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// The note of a `PolicyLoaded` Event.
pub(crate) fn loaded_note(policy: &Policy, compressed: bool, took_ms: u128) -> String {
    let origin = match policy.source() {
        Source::Compiled => "compiled",
        Source::Memory | Source::Disk => "compile cache hit",
    };
    let mut note = format!(
        "sha256:{} in service ({} bytes{}, {origin}, {took_ms} ms); limits: {}",
        policy.digest(),
        policy.size(),
        if compressed { ", from gzip" } else { "" },
        limits_text(policy.limits()),
    );
    if let Some(clamped) = clamped_text(policy.clamped()) {
        note.push_str("; clamped: ");
        note.push_str(&clamped);
    }
    note
}

/// The note of a `PolicyRejected` Event.
pub(crate) fn rejected_note(reason: &str, message: &str, serving: Option<&str>) -> String {
    let outcome = match serving {
        Some(digest) => format!("the version in service (sha256:{digest}) keeps serving"),
        None => "no version of the policy is in service: its DataJobs report PolicyUnavailable"
            .to_owned(),
    };
    format!("{reason}: {message}; {outcome}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn absent_annotations_are_removed_by_the_patch() {
        let annotations = Annotations {
            observed: "f".into(),
            loaded_digest: Some("d".into()),
            ..Annotations::default()
        };
        assert_eq!(
            annotations.patch(),
            serde_json::json!({"metadata": {"annotations": {
                "policyhost.dev/observed": "f",
                "policyhost.dev/loaded-digest": "d",
                "policyhost.dev/loaded-at": null,
                "policyhost.dev/error": null,
                "policyhost.dev/clamped": null,
                "policyhost.dev/sdk": null,
                "policyhost.dev/provides": null,
            }}})
        );
    }

    #[test]
    fn annotations_read_back_what_was_written() {
        let written = Annotations {
            observed: "f".into(),
            loaded_digest: Some("d".into()),
            loaded_at: Some("2025-01-01T00:00:00Z".into()),
            error: Some("DigestMismatch: x".into()),
            clamped: None,
            sdk: Some("python 0.1.0".into()),
            provides: Some("etl".into()),
            pinned: Some("r.example.com/a/b:1@sha256:00".into()),
            history: Some("[]".into()),
        };
        let map: BTreeMap<String, String> = written
            .patch()
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        assert_eq!(Annotations::read(&map), written);
    }

    #[test]
    fn notes_say_what_serves_after_a_rejection() {
        assert_eq!(
            rejected_note("DigestMismatch", "pin differs", Some("abc")),
            "DigestMismatch: pin differs; the version in service (sha256:abc) keeps serving"
        );
        assert_eq!(
            rejected_note("Corrupt", "bad", None),
            "Corrupt: bad; no version of the policy is in service: its DataJobs report PolicyUnavailable"
        );
    }

    #[test]
    fn limits_read_in_kubernetes_units() {
        let limits = Limits {
            memory_bytes: 64 << 20,
            fuel: 7,
            timeout: Duration::from_millis(1500),
            output_bytes: 1000,
            children: 3,
        };
        assert_eq!(
            limits_text(&limits),
            "memory 64Mi, fuel 7, timeout 1500ms, children 3, output 1000"
        );
    }
}
