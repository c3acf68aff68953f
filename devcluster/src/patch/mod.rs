//! PATCH bodies: the patch type from `Content-Type`, and one dispatch that turns the
//! current object and the patch into the patched object.
//!
//! JSON patch and JSON merge patch are plain JSON operations; strategic merge patch
//! ([`strategic`]) and server-side apply ([`crate::apply`]) merge by the kind's
//! [`schema`]. Custom resources do not take strategic merge patch (415).

pub(crate) mod json;
pub(crate) mod merge;
pub mod strategic;

use std::sync::Arc;

use serde_json::Value;

use crate::apply;
use crate::gotypes::{self, Numbers};
use crate::schema;
use crate::status::{ApiError, Cause, Result};

/// The patch media types a kind takes, for 415 messages: built-in kinds take all four,
/// custom resources all but strategic merge patch.
pub(crate) fn served_types(strategic: bool) -> &'static str {
    if strategic {
        "application/json-patch+json, application/merge-patch+json, \
         application/strategic-merge-patch+json, application/apply-patch+yaml"
    } else {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    }
}

/// The patch types Kubernetes defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type for a `Content-Type` header value.
    pub(crate) fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }

    /// Whether a patch of this type creates the object when it does not exist
    /// (server-side apply does; the other types answer 404).
    pub(crate) fn creates_missing(self) -> bool {
        self == Self::Apply
    }
}

/// What a patch needs besides the document: who is patching and how.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    /// `fieldManager`.
    pub(crate) field_manager: Option<String>,
    /// `force` (server-side apply).
    pub(crate) force: bool,
    /// How objects of the kind merge; `None` for an untyped merge.
    pub(crate) schema: Option<Arc<schema::Schema>>,
    /// The group/version of the endpoint (`apps/v1`).
    pub(crate) api_version: String,
    /// The subresource patched (`status`), if any.
    pub(crate) subresource: Option<String>,
    /// The time of the write, RFC 3339, for `managedFields`.
    pub(crate) time: String,
}

impl Context {
    fn schema(&self) -> Arc<schema::Schema> {
        self.schema
            .clone()
            .unwrap_or_else(|| Arc::new(schema::Schema::untyped()))
    }
}

/// Applies a patch of type `ty` to `current`.
///
/// The patched object of a built-in kind is read into its Go type, as
/// kube-apiserver reads it, each patch type by its own decoder and with its
/// own error (see [`crate::gotypes`]).
///
/// A server-side apply that creates the object applies to a seed holding only its
/// identity (apiVersion, kind, name, namespace), which no manager owns.
pub(crate) fn apply(ty: PatchType, current: Value, body: &[u8], ctx: &Context) -> Result<Value> {
    let schema = ctx.schema();
    match ty {
        PatchType::Json => {
            let ops = json::decode(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut doc = current;
            json::apply(&mut doc, &ops).map_err(|error| {
                tracing::debug!(%error, "json patch does not apply");
                ApiError::unprocessable_patch()
            })?;
            decode_patched(&doc, &schema)?;
            Ok(doc)
        }
        PatchType::Merge => {
            let patch: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut doc = current;
            merge::merge(&mut doc, &patch);
            decode_patched(&doc, &schema)?;
            Ok(doc)
        }
        PatchType::Strategic => {
            if !schema.supports_strategic_merge() {
                return Err(ApiError::unsupported_media_type(served_types(false)));
            }
            let patch: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let patched =
                strategic::strategic_merge(&current, &patch, &schema).map_err(strategic_error)?;
            if let Some(go_type) = schema.types() {
                // Reported with the patch, as Go prints its map.
                go_type
                    .convert_unstructured(&patched, Numbers::PreserveInts)
                    .map_err(|e| {
                        invalid_patch(&gotypes::plain(&patch, Numbers::PreserveInts), e)
                    })?;
            }
            Ok(patched)
        }
        PatchType::Apply => {
            let config = apply::parse_body(body).map_err(apply_error)?;
            check_apply_kind(&config, &current, ctx)?;
            let request = apply::Request {
                manager: ctx.field_manager.as_deref().unwrap_or_default(),
                api_version: &ctx.api_version,
                subresource: ctx.subresource.as_deref(),
                time: &ctx.time,
            };
            let applied = apply::apply(Some(&current), &config, &request, ctx.force, &schema)
                .map_err(apply_error)?;
            if let Some(go_type) = schema.types() {
                go_type
                    .convert_unstructured(&applied, Numbers::Floats)
                    .map_err(|e| {
                        ApiError::unknown(format!(
                            "failed to convert new object ({}) to proper version: unable to \
                             convert unstructured object to {}: {e}",
                            apply::describe(&config),
                            apply::group_version_kind(&config)
                        ))
                    })?;
            }
            Ok(applied)
        }
    }
}

/// A JSON or merge patch's result read into the kind's Go type, as its JSON.
fn decode_patched(patched: &Value, schema: &schema::Schema) -> Result<()> {
    let Some(go_type) = schema.types() else {
        return Ok(());
    };
    // kube-apiserver quotes the patched object as its own encoder writes it.
    go_type
        .decode_json(patched)
        .map_err(|e| invalid_patch(&patched.to_string(), e))
}

/// The 422 of a patched object that does not fit its type: ` "" is
/// invalid: patch: Invalid value: "<the patch>": <why>`, with no kind nor
/// name, as kube-apiserver's patcher builds it.
fn invalid_patch(patch: &str, why: gotypes::Error) -> ApiError {
    let cause = Cause {
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {}: {why}", gotypes::quote(patch)),
        field: "patch".into(),
    };
    ApiError::invalid("", "", "", vec![cause])
}

/// An apply of another kind than the endpoint's is a 400 naming the kind sent, as
/// kube-apiserver's decoder answers it (after the options, whose errors come first).
fn check_apply_kind(config: &Value, current: &Value, ctx: &Context) -> Result<()> {
    let kind = config["kind"].as_str().unwrap_or_default();
    if kind.is_empty()
        || kind == current["kind"].as_str().unwrap_or_default()
        || ctx.field_manager.as_deref().is_none_or(str::is_empty)
    {
        return Ok(());
    }
    let api_version = config["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Err(ApiError::bad_request(format!(
        "invalid object type: {group}/{version}, Kind={kind}"
    )))
}

/// The status of a failed strategic merge patch.
fn strategic_error(e: strategic::Error) -> ApiError {
    match e.code() {
        415 => ApiError::unsupported_media_type(served_types(false)),
        400 => ApiError::bad_request(e.to_string()),
        code => ApiError::with_causes(code, e.reason(), e.to_string(), &[]),
    }
}

/// The status of a failed apply: 409 with one cause per conflicting field, 422 for
/// the field manager as kube-apiserver validates `PatchOptions`, 400 for bodies.
pub(crate) fn apply_error(e: apply::Error) -> ApiError {
    match &e {
        apply::Error::MissingManager | apply::Error::InvalidManager(_) => {
            let message = e.to_string();
            let cause = Cause {
                reason: if matches!(e, apply::Error::MissingManager) {
                    "FieldValueRequired"
                } else {
                    "FieldValueInvalid"
                },
                message: message
                    .strip_prefix("fieldManager: ")
                    .unwrap_or(&message)
                    .to_owned(),
                field: "fieldManager".into(),
            };
            ApiError::invalid("PatchOptions", "meta.k8s.io", "", vec![cause])
        }
        apply::Error::Conflicts(_) => {
            let causes: Vec<Cause> = e
                .causes()
                .into_iter()
                .map(|c| Cause {
                    reason: c.reason,
                    message: c.message,
                    field: c.field,
                })
                .collect();
            ApiError::with_causes(e.code(), e.reason(), e.to_string(), &causes)
        }
        apply::Error::Invalid { .. } => ApiError::unknown(e.status_message()),
        _ => ApiError::bad_request(e.status_message()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failed_test_is_a_422_invalid_like_kube_apiserver() {
        let err = apply(
            PatchType::Json,
            json!({"metadata": {"finalizers": ["a"]}}),
            br#"[{"op":"test","path":"/metadata/finalizers/0","value":"b"}]"#,
            &Context::default(),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.reason, "Invalid");
        assert_eq!(
            err.message,
            "the server rejected our request due to an error in our request"
        );
    }

    #[test]
    fn an_undecodable_json_patch_is_a_400() {
        let err = apply(PatchType::Json, json!({}), b"{", &Context::default()).unwrap_err();
        assert_eq!(err.code, 400);
    }

    #[test]
    fn strategic_merge_is_415_without_a_strategic_schema() {
        let err = apply(PatchType::Strategic, json!({}), b"{}", &Context::default()).unwrap_err();
        assert_eq!(err.code, 415);
        assert_eq!(
            err.message,
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        );
    }

    #[test]
    fn apply_conflicts_are_409s_with_a_cause_per_field() {
        let ctx = |manager: &str| Context {
            field_manager: Some(manager.into()),
            api_version: "v1".into(),
            time: "2024-05-01T10:00:00Z".into(),
            schema: crate::kinds::schema("", "v1", "ConfigMap").map(|s| Arc::new(s.clone())),
            ..Context::default()
        };
        let body = |v: &str| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: {v:?}\n")
        };
        let seed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let live = apply(PatchType::Apply, seed, body("1").as_bytes(), &ctx("alice")).unwrap();
        let err = apply(PatchType::Apply, live, body("2").as_bytes(), &ctx("bob")).unwrap_err();
        assert_eq!((err.code, err.reason), (409, "Conflict"));
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"alice\": .data.a"
        );
        assert_eq!(
            err.to_status()["details"],
            json!({"causes": [{"reason": "FieldManagerConflict",
                               "message": "conflict with \"alice\"", "field": ".data.a"}]})
        );
    }

    #[test]
    fn apply_without_a_field_manager_is_invalid_patch_options() {
        let ctx = Context {
            api_version: "v1".into(),
            ..Context::default()
        };
        let err = apply(
            PatchType::Apply,
            json!({}),
            br#"{"apiVersion": "v1", "kind": "ConfigMap"}"#,
            &ctx,
        )
        .unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert_eq!(
            err.message,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
    }

    fn typed(group: &str, kind: &str) -> Context {
        let api_version = if group.is_empty() {
            "v1".to_owned()
        } else {
            format!("{group}/v1")
        };
        Context {
            field_manager: Some("m".into()),
            api_version,
            time: "2024-05-01T10:00:00Z".into(),
            schema: crate::kinds::schema(group, "v1", kind).map(|s| Arc::new(s.clone())),
            ..Context::default()
        }
    }

    fn configmap() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
               "data": {"a": "x"}})
    }

    #[test]
    fn a_json_or_merge_patch_that_mistypes_a_field_is_a_422_quoting_the_result() {
        let cases: [(PatchType, &[u8]); 2] = [
            (PatchType::Merge, br#"{"data": {"b": true}}"#),
            (
                PatchType::Json,
                br#"[{"op": "add", "path": "/data/b", "value": true}]"#,
            ),
        ];
        for (ty, body) in cases {
            let err = apply(ty, configmap(), body, &typed("", "ConfigMap")).unwrap_err();
            assert_eq!((err.code, err.reason), (422, "Invalid"));
            let patched = r#"{\"apiVersion\":\"v1\",\"data\":{\"a\":\"x\",\"b\":true},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}"#;
            let why =
                "json: cannot unmarshal bool into Go struct field ConfigMap.data of type string";
            assert_eq!(
                err.message,
                format!(" \"\" is invalid: patch: Invalid value: \"{patched}\": {why}")
            );
            assert_eq!(err.to_status()["details"]["causes"][0]["field"], "patch");
        }
    }

    #[test]
    fn a_strategic_merge_patch_that_mistypes_a_field_is_a_422_quoting_the_patch() {
        let err = apply(
            PatchType::Strategic,
            configmap(),
            br#"{"data": {"b": true}}"#,
            &typed("", "ConfigMap"),
        )
        .unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert_eq!(
            err.message,
            " \"\" is invalid: patch: Invalid value: \"map[data:map[b:true]]\": unrecognized type: string"
        );
    }

    #[test]
    fn an_apply_that_mistypes_a_field_is_a_500_without_a_reason() {
        let err = apply(
            PatchType::Apply,
            configmap(),
            br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": true}}"#,
            &typed("", "ConfigMap"),
        )
        .unwrap_err();
        assert_eq!((err.code, err.reason), (500, ""));
        assert_eq!(
            err.message,
            "failed to create typed patch object (/c; /v1, Kind=ConfigMap): .data.b: expected \
             string, got &value.valueUnstructured{Value:true}"
        );
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                "metadata": {"name": "d"}});
        let err = apply(
            PatchType::Apply,
            deployment,
            br#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1.5}}"#,
            &typed("apps", "Deployment"),
        )
        .unwrap_err();
        assert_eq!((err.code, err.reason), (500, ""));
        assert_eq!(
            err.message,
            "failed to convert new object (/d; apps/v1, Kind=Deployment) to proper version: \
             unable to convert unstructured object to apps/v1, Kind=Deployment: cannot convert \
             float64 to int32"
        );
    }

    #[test]
    fn content_types_name_the_patch_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
    }
}
