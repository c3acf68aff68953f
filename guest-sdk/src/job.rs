//! The DataJob a call is about: its identity, labels, `spec.params` and the
//! outputs the policy wrote last time.
//!
//! ```
//! use policyhost_sdk::testing::JobFixture;
//!
//! #[derive(Debug, serde::Deserialize)]
//! struct Params { replicas: u32 }
//!
//! let job = JobFixture::new("demo").params(serde_json::json!({ "replicas": "three" })).to_job();
//! let error = job.params::<Params>().unwrap_err();
//! assert_eq!(error.message(), r#"params.replicas: invalid type: string "three", expected u32"#);
//! ```

use serde::de::DeserializeOwned;

use crate::PolicyError;

/// One label or annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, e.g. `app.kubernetes.io/name`.
    pub key: String,
    /// The value.
    pub value: String,
}

/// The DataJob being reconciled or cleaned up, as the host's cache holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Job {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; every child lands here, whatever a manifest says.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation`; bumped on every spec change.
    pub generation: u64,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<KeyValue>,
    /// `metadata.annotations`, sorted by key.
    pub annotations: Vec<KeyValue>,
    /// `spec.params` as JSON text (`{}` when unset); see [`Job::params`].
    pub params_json: String,
    /// `status.outputs` as the host last wrote it (JSON text), if it ever did;
    /// see [`Job::previous_outputs`].
    pub status_json: Option<String>,
    /// When deletion was requested, in Unix milliseconds; set during `cleanup`.
    pub deletion_unix_ms: Option<u64>,
}

impl Job {
    /// Deserializes `spec.params` into the policy's own type.
    ///
    /// # Errors
    ///
    /// [`PolicyError::InvalidParams`] naming the offending field, e.g.
    /// `params.replicas: invalid type: string "three", expected u32`.
    pub fn params<P: DeserializeOwned>(&self) -> Result<P, PolicyError> {
        let text = if self.params_json.trim().is_empty() {
            "{}"
        } else {
            &self.params_json
        };
        // Params are almost always valid: parse them plainly, and only on
        // failure parse again, tracking the path, for the message.
        if let Ok(value) = serde_json::from_str(text) {
            return Ok(value);
        }
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let value: P = serde_path_to_error::deserialize(&mut deserializer)
            .map_err(|error| PolicyError::InvalidParams(describe(&error)))?;
        deserializer.end().map_err(|error| {
            PolicyError::InvalidParams(format!("params: {}", without_position(&error)))
        })?;
        Ok(value)
    }

    /// The `status.outputs` the policy returned last time, if any and if they
    /// still deserialize into `T` (an output shape from an older policy version
    /// reads as `None`).
    #[must_use]
    pub fn previous_outputs<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(self.status_json.as_deref()?).ok()
    }

    /// The value of a label.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        find(&self.labels, key)
    }

    /// The value of an annotation.
    #[must_use]
    pub fn annotation(&self, key: &str) -> Option<&str> {
        find(&self.annotations, key)
    }

    /// True during `cleanup` (deletion was requested).
    #[must_use]
    pub fn is_deleting(&self) -> bool {
        self.deletion_unix_ms.is_some()
    }
}

pub(crate) fn find<'a>(pairs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.as_str())
}

/// serde_json's message without its ` at line L column C` suffix: the
/// position depends on how the host formatted the JSON, the path does not.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&suffix) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

/// `params.a.b: message`, or `params: message` at the root.
fn describe(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    let inner = without_position(error.inner());
    if path == "." {
        format!("params: {inner}")
    } else if path.starts_with('[') {
        format!("params{path}: {inner}")
    } else {
        format!("params.{path}: {inner}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Params {
        replicas: u32,
        #[serde(default)]
        backoff_limit: u32,
        #[serde(default)]
        nested: Option<Nested>,
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Nested {
        sizes: Vec<u8>,
    }

    fn job(params: &str) -> Job {
        Job {
            name: "j".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            generation: 1,
            labels: vec![KeyValue {
                key: "a".into(),
                value: "1".into(),
            }],
            annotations: vec![],
            params_json: params.into(),
            status_json: None,
            deletion_unix_ms: None,
        }
    }

    #[test]
    fn params_deserialize_into_the_policy_type() {
        let params: Params = job(r#"{"replicas": 3, "backoffLimit": 2}"#)
            .params()
            .unwrap();
        assert_eq!(
            params,
            Params {
                replicas: 3,
                backoff_limit: 2,
                nested: None
            }
        );
    }

    #[test]
    fn a_wrongly_typed_param_names_the_field() {
        let error = job(r#"{"replicas": "three"}"#)
            .params::<Params>()
            .unwrap_err();
        assert_eq!(
            error,
            PolicyError::InvalidParams(
                "params.replicas: invalid type: string \"three\", expected u32".into()
            )
        );
    }

    #[test]
    fn a_nested_bad_param_names_the_full_path() {
        let error = job(r#"{"replicas": 1, "nested": {"sizes": [1, 300]}}"#)
            .params::<Params>()
            .unwrap_err();
        assert!(
            error
                .message()
                .starts_with("params.nested.sizes[1]: invalid value: integer `300`"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_param_is_reported_at_the_root() {
        let error = job("{}").params::<Params>().unwrap_err();
        assert!(
            error
                .message()
                .starts_with("params: missing field `replicas`"),
            "{error}"
        );
    }

    #[test]
    fn empty_params_read_as_an_empty_object() {
        #[derive(serde::Deserialize)]
        struct Empty {}
        assert!(job("").params::<Empty>().is_ok());
    }

    #[test]
    fn trailing_garbage_after_params_is_invalid() {
        let error = job(r#"{"replicas": 1} x"#).params::<Params>().unwrap_err();
        assert!(matches!(error, PolicyError::InvalidParams(_)), "{error}");
    }

    #[test]
    fn previous_outputs_of_another_shape_read_as_none() {
        let mut job = job("{}");
        assert_eq!(job.previous_outputs::<Nested>(), None);
        job.status_json = Some(r#"{"sizes": [1]}"#.into());
        assert_eq!(
            job.previous_outputs::<Nested>(),
            Some(Nested { sizes: vec![1] })
        );
        job.status_json = Some(r#"{"other": true}"#.into());
        assert_eq!(job.previous_outputs::<Nested>(), None);
    }

    #[test]
    fn labels_are_looked_up_by_key() {
        assert_eq!(job("{}").label("a"), Some("1"));
        assert_eq!(job("{}").label("b"), None);
    }
}
