//! The `DataJob` custom resource (`policyhost.dev/v1alpha1`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A unit of work run by a policy: `spec.policy` names the policy, which
/// turns `spec.params` into children (Pods, Jobs, ...) and a status.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policyhost.dev",
    version = "v1alpha1",
    kind = "DataJob",
    plural = "datajobs",
    shortname = "dj",
    namespaced,
    status = "DataJobStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".spec.policy"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DataJobSpec {
    /// The name of the policy that reconciles this DataJob.
    pub policy: String,
    /// Parameters in the policy's own schema, handed to it as JSON.
    #[serde(default)]
    #[schemars(schema_with = "free_form_object")]
    pub params: Map<String, Value>,
    /// When true, the policy is not called (children stay as they are).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// The budget of `cleanup` on deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<CleanupSpec>,
}

impl DataJob {
    /// A DataJob `namespace/name` of `policy`, with no params: what a tool
    /// or a test starts from.
    #[must_use]
    pub fn of_policy(namespace: &str, name: &str, policy: &str) -> Self {
        let mut job = Self::new(
            name,
            DataJobSpec {
                policy: policy.to_owned(),
                ..DataJobSpec::default()
            },
        );
        job.metadata.namespace = Some(namespace.to_owned());
        job
    }
}

/// How hard the host tries to clean up before it reports `CleanupBlocked`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CleanupSpec {
    /// Failed `cleanup` calls before the DataJob is reported blocked
    /// (`CleanupBlocked`); the host keeps retrying at its longest backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Seconds after deletion was requested before a DataJob whose cleanup
    /// has not succeeded is reported blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// What the host and the policy report about a DataJob.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataJobStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` (from the policy), or a
    /// host phase such as `Terminating`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// A human-readable summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions from the host (`Ready`, `CleanupFailed`, ...) and the policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The policy version that acted last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyRef>,
    /// Counts of the DataJob's children by phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<ChildCounts>,
    /// Progress of `cleanup` once deletion was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<CleanupStatus>,
    /// The policy's own outputs, handed back to it on the next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_free_form_object")]
    pub outputs: Option<Map<String, Value>>,
    /// The last decisions of its policy, oldest first (`policyhost explain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<Decision>,
}

/// One serving call and what the host did with its answer. Digests and
/// names only: no body, header or query string of any request, so nothing
/// the host injected (a grant's credentials) and nothing a service answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// When the call was made.
    pub at: Time,
    /// `reconcile` or `cleanup`.
    pub call: String,
    /// The digest (`sha256:…`) of the version that answered.
    pub version: String,
    /// The digest of the input: the DataJob as the policy saw it and its
    /// children, not the clock or the attempt.
    pub input: String,
    /// The digest of the answer; none when the call faulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// What the pass came to: the `Ready` reason (`Reconciled`,
    /// `ApplyFailed`, …), the cleanup's (`Done`, `RetryAfter`) or the fault.
    pub outcome: String,
    /// The writes to children, one line each (`created Pod hello-1`,
    /// `refused: …` for the one the API server refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// The reasons of the Events published.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// The outbound requests: method, origin and path, and the answer's
    /// status or error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbound: Vec<String>,
    /// Fuel the call used.
    pub fuel: u64,
    /// Its wall-clock time, in microseconds.
    pub micros: u64,
}

/// Which policy version acted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// The policy's name.
    pub name: String,
    /// The SHA-256 digest (hex) of its component.
    pub digest: String,
}

/// Children by phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildCounts {
    /// All children.
    pub total: u32,
    /// Pending.
    pub pending: u32,
    /// Running.
    pub running: u32,
    /// Succeeded.
    pub succeeded: u32,
    /// Failed.
    pub failed: u32,
}

/// Progress of `cleanup`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CleanupStatus {
    /// Calls of `cleanup` so far whose outcome was recorded; the next call
    /// is told `attempts + 1`.
    pub attempts: u32,
    /// How many of them failed (the budget `spec.cleanup.maxAttempts` counts these).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The last failure, if the last call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When `cleanup` was last called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_time: Option<Time>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The DataJob CRD as the API server should get it: the derived one, with
/// schemars' unsigned integer formats (`uint32`, `uint64`), which
/// kube-apiserver does not know and warns about on every apply, written as
/// the `int64` it knows (each such field also has `minimum: 0`).
pub fn definition() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(DataJob::crd()).unwrap_or_default();
    known_integer_formats(&mut crd);
    serde_json::from_value(crd).unwrap_or_else(|_| DataJob::crd())
}

fn known_integer_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(format)) = map.get_mut("format")
                && format.starts_with("uint")
            {
                *format = "int64".to_owned();
            }
            map.values_mut().for_each(known_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(known_integer_formats),
        _ => {}
    }
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn optional_free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    #[test]
    fn the_crd_has_the_documented_names_and_columns() {
        let crd = definition();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("datajobs.policyhost.dev")
        );
        assert_eq!(crd.spec.names.short_names, Some(vec!["dj".to_owned()]));
        assert_eq!(DataJob::api_version(&()), "policyhost.dev/v1alpha1");
        let version = &crd.spec.versions[0];
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Policy", "Phase", "Age"]);
        let schema = serde_json::to_value(&version.schema).unwrap();
        let params = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["params"];
        assert_eq!(params["x-kubernetes-preserve-unknown-fields"], true);
    }

    #[test]
    fn every_format_in_the_schema_is_one_kube_apiserver_knows() {
        fn formats(value: &Value, found: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    if let Some(Value::String(format)) = map.get("format") {
                        found.push(format.clone());
                    }
                    map.values().for_each(|v| formats(v, found));
                }
                Value::Array(items) => items.iter().for_each(|v| formats(v, found)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        formats(&serde_json::to_value(definition()).unwrap(), &mut found);
        assert!(found.iter().any(|f| f == "int64"), "{found:?}");
        for format in &found {
            assert!(
                ["int32", "int64", "date-time", "double", "float", "byte"]
                    .contains(&format.as_str()),
                "{format} is not a format kube-apiserver knows"
            );
        }
    }

    #[test]
    fn params_are_preserved_as_given() {
        let job: DataJob = serde_saphyr::from_str(
            "apiVersion: policyhost.dev/v1alpha1\nkind: DataJob\nmetadata: {name: a, namespace: b}\nspec:\n  policy: fanout\n  params: {replicas: 3, nested: {x: [1, 2]}}\n",
        )
        .unwrap();
        assert_eq!(job.spec.params["nested"]["x"][1], 2);
        assert!(!job.spec.suspend);
    }
}
