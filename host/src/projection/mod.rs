//! Slim projections of Kubernetes objects into the records a policy sees
//! (`data-job`, `child`), shared by the CLI and the operator's cache.
//!
//! The rules follow the WIT doc comments: Pods map `status.phase` and the
//! `Ready` condition; batch Jobs map their `Complete` / `Failed` conditions
//! and active Pods; kinds without a lifecycle are `succeeded` and ready once
//! they exist. Labels and annotations are sorted by key; children are sorted
//! by kind and name.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::crd::DataJob;
use crate::runtime::{Child, DataJob as JobRecord, KeyValue};

mod child;

pub use child::{ChildObject, ChildStatus, StatusCondition};

/// The result type of projections.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an object could not be projected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The text is not YAML/JSON, or not a Kubernetes object of the expected shape.
    #[error("cannot read {what}")]
    Parse {
        /// What was being read: `the DataJob`, `the objects`.
        what: &'static str,
        /// The parser's error, with the line and column (boxed: it is
        /// over 100 bytes, and every `Result` of this module would carry it).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// An object's fields have the wrong types (e.g. labels that are not strings).
    #[error("{what} is not a well-formed Kubernetes object")]
    Shape {
        /// Which object, e.g. `Pod w-0`.
        what: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// An object lacks a field every Kubernetes object has.
    #[error("{what} has no {field}")]
    Missing {
        /// Which object, e.g. `Pod w-0`.
        what: String,
        /// The missing field, e.g. `metadata.name`.
        field: &'static str,
    },
}

/// Projects a DataJob into the `data-job` record.
///
/// `spec.params` become JSON (`{}` when unset), `status.outputs` the
/// previous outputs, `metadata.deletionTimestamp` Unix milliseconds.
#[must_use]
pub fn data_job(job: &DataJob) -> JobRecord {
    let meta = &job.metadata;
    JobRecord {
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        uid: meta.uid.clone().unwrap_or_default(),
        generation: meta
            .generation
            .and_then(|g| u64::try_from(g).ok())
            .unwrap_or(0),
        labels: sorted(meta.labels.as_ref()),
        annotations: sorted(meta.annotations.as_ref()),
        params: Value::Object(job.spec.params.clone()).to_string(),
        status: job
            .status
            .as_ref()
            .and_then(|s| s.outputs.as_ref())
            .map(|outputs| Value::Object(outputs.clone()).to_string()),
        deletion_unix_ms: meta
            .deletion_timestamp
            .as_ref()
            .and_then(|t| u64::try_from(t.0.as_millisecond()).ok()),
    }
}

/// Reads a DataJob from YAML or JSON text.
pub fn data_job_from_yaml(text: &str) -> Result<DataJob> {
    serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|source| Error::Parse {
        what: "the DataJob",
        source: Box::new(source),
    })
}

/// How files are read. Scalars as YAML 1.2 reads them: `yes`, `on`, `y`,
/// `017` and `1_000` are strings, and `<<` is an ordinary key (merge keys
/// are YAML 1.1). A repeated key's last value wins; `.inf` and `.nan`
/// become `null`, as JSON has neither. serde-saphyr's defaults differ in
/// each of these (they read YAML 1.1 scalars, refuse repeated keys and
/// non-finite numbers), and cap a stream at 1,024 documents and 250,000
/// nodes, fewer than a `kubectl get pods -o yaml` of a few thousand Pods
/// holds. Nesting stays capped, at 128 levels.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        budget: serde_saphyr::budget! {
            max_depth: 128,
            max_documents: usize::MAX,
            max_nodes: usize::MAX,
            max_events: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
        },
    }
}

/// Projects one Kubernetes object (as JSON) into a `child` record.
pub fn child(object: &Value) -> Result<Child> {
    let what = || {
        format!(
            "{} {}",
            str_at(object, &["kind"]).unwrap_or("object"),
            str_at(object, &["metadata", "name"]).unwrap_or("")
        )
    };
    let parsed = ChildObject::deserialize(object).map_err(|source| Error::Shape {
        what: what(),
        source,
    })?;
    let missing = |field| Error::Missing {
        what: what(),
        field,
    };
    if parsed.api_version.is_none() {
        return Err(missing("apiVersion"));
    }
    if parsed.kind.is_none() {
        return Err(missing("kind"));
    }
    if parsed.metadata.name.is_none() {
        return Err(missing("metadata.name"));
    }
    Ok(parsed.project())
}

/// Projects many objects and sorts them by kind and name, as the policy expects.
pub fn children<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Result<Vec<Child>> {
    let mut children = objects.into_iter().map(child).collect::<Result<Vec<_>>>()?;
    children.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    Ok(children)
}

/// Reads Kubernetes objects from multi-document YAML (or JSON), flattening
/// `kind: List` documents (as `kubectl get -o yaml` prints them).
pub fn objects_from_yaml(text: &str) -> Result<Vec<Value>> {
    // Empty and `null` documents are skipped by the parser.
    let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(text, yaml_options())
        .map_err(|source| Error::Parse {
            what: "the objects",
            source: Box::new(source),
        })?;
    let mut objects = Vec::new();
    for value in documents {
        match value {
            Value::Null => {}
            Value::Object(ref map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                if let Some(Value::Array(items)) = map.get("items") {
                    objects.extend(items.iter().cloned());
                }
            }
            other => objects.push(other),
        }
    }
    Ok(objects)
}

fn str_at<'a>(object: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(object, |value, key| value.get(key))
        .and_then(Value::as_str)
}

/// Labels or annotations as key-value records, sorted by key.
pub(crate) fn sorted(map: Option<&BTreeMap<String, String>>) -> Vec<KeyValue> {
    map.map(|m| {
        m.iter()
            .map(|(key, value)| KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect()
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::runtime::ChildPhase;

    #[test]
    fn pods_map_phase_and_the_ready_condition() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w-0", "labels": {"b": "2", "a": "1"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        let child = child(&pod).unwrap();
        assert_eq!(child.phase, ChildPhase::Running);
        assert!(child.ready);
        assert!(!child.deleting);
        assert_eq!(child.labels[0].key, "a");
        let pending = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-1", "deletionTimestamp": "2024-01-01T00:00:00Z"}});
        let child = super::child(&pending).unwrap();
        assert_eq!(child.phase, ChildPhase::Pending);
        assert!(!child.ready);
        assert!(child.deleting);
    }

    #[test]
    fn jobs_map_their_conditions_and_active_pods() {
        let job = |status: Value| json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "status": status});
        let complete = child(&job(
            json!({"conditions": [{"type": "Complete", "status": "True"}]}),
        ))
        .unwrap();
        assert_eq!(
            (complete.phase, complete.ready),
            (ChildPhase::Succeeded, true)
        );
        let failed = child(&job(
            json!({"conditions": [{"type": "Failed", "status": "True"}]}),
        ))
        .unwrap();
        assert_eq!((failed.phase, failed.ready), (ChildPhase::Failed, false));
        let running = child(&job(json!({"active": 2}))).unwrap();
        assert_eq!((running.phase, running.ready), (ChildPhase::Running, true));
        let pending = child(&job(json!({}))).unwrap();
        assert_eq!(pending.phase, ChildPhase::Pending);
    }

    #[test]
    fn kinds_without_a_lifecycle_are_succeeded_and_ready() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let child = child(&cm).unwrap();
        assert_eq!((child.phase, child.ready), (ChildPhase::Succeeded, true));
    }

    #[test]
    fn objects_without_a_name_are_refused() {
        let err = child(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}})).unwrap_err();
        assert_eq!(err.to_string(), "Pod  has no metadata.name");
    }

    #[test]
    fn yaml_lists_and_documents_are_flattened_and_sorted() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: b}}\n- {apiVersion: v1, kind: Pod, metadata: {name: a}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: z}\n---\n";
        let objects = objects_from_yaml(text).unwrap();
        assert_eq!(objects.len(), 3);
        let names: Vec<String> = children(&objects)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["z", "a", "b"]);
    }

    #[test]
    fn yaml_scalars_read_as_yaml_1_2_reads_them() {
        let objects = objects_from_yaml(
            "kind: ConfigMap\ndata: {a: yes, b: on, c: y, d: 017, e: 1_000, f: 0o17, g: 0x1F, h: True, i: .inf, j: 1, j: 2}\nm: {<<: {x: 1}}\n",
        )
        .unwrap();
        assert_eq!(
            objects,
            [json!({"kind": "ConfigMap",
                "data": {"a": "yes", "b": "on", "c": "y", "d": "017", "e": "1_000", "f": 15,
                         "g": 31, "h": true, "i": null, "j": 2},
                "m": {"<<": {"x": 1}}})]
        );
    }

    #[test]
    fn large_files_are_read_whole() {
        // More documents (1,100) and nodes (over 250,000) than serde-saphyr
        // accepts by default.
        let mut text = String::from("kind: List\nitems:\n");
        for i in 0..90_000 {
            text.push_str(&format!("- {{name: p{i}}}\n"));
        }
        for i in 0..1_100 {
            text.push_str(&format!("---\nkind: Pod\nmetadata: {{name: d{i}}}\n"));
        }
        assert_eq!(objects_from_yaml(&text).unwrap().len(), 91_100);
    }

    #[test]
    fn a_syntax_error_names_what_was_read_and_where() {
        let err = objects_from_yaml("kind: Pod\n---\nkind: [Pod\n").unwrap_err();
        assert_eq!(err.to_string(), "cannot read the objects");
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(
            cause.starts_with("error: line 3 column 7: unclosed bracket '['"),
            "{cause}"
        );
        let err = data_job_from_yaml("kind: DataJob\nspec: [\n").unwrap_err();
        assert_eq!(err.to_string(), "cannot read the DataJob");
    }

    #[test]
    fn a_datajob_projects_params_outputs_and_deletion_time() {
        let job = data_job_from_yaml(
            "apiVersion: policyhost.dev/v1alpha1\nkind: DataJob\nmetadata:\n  name: etl\n  namespace: team\n  uid: u-1\n  generation: 3\n  labels: {z: '1', a: '2'}\n  deletionTimestamp: '2024-01-01T00:00:01Z'\nspec:\n  policy: fanout\n  params: {replicas: 2}\nstatus:\n  outputs: {running: 1}\n",
        )
        .unwrap();
        let record = data_job(&job);
        assert_eq!(record.name, "etl");
        assert_eq!(record.namespace, "team");
        assert_eq!(record.generation, 3);
        assert_eq!(record.labels[0].key, "a");
        assert_eq!(record.params, r#"{"replicas":2}"#);
        assert_eq!(record.status.as_deref(), Some(r#"{"running":1}"#));
        assert_eq!(record.deletion_unix_ms, Some(1_704_067_201_000));
    }
}
