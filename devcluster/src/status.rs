//! Kubernetes `Status` errors: the codes, reasons and messages kube-apiserver sends.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::object::GroupResource;

/// One cause inside a `Status.details.causes` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// Machine-readable cause type, e.g. `FieldValueRequired`.
    pub(crate) reason: &'static str,
    /// Human-readable message.
    pub(crate) message: String,
    /// The field path the cause refers to.
    pub(crate) field: String,
}

/// An API error rendered as a `Status` object, as kube-apiserver does.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub(crate) code: u16,
    /// `Status.reason`.
    pub(crate) reason: &'static str,
    /// `Status.message`.
    pub(crate) message: String,
    /// `Status.details`, already shaped.
    pub(crate) details: Option<Value>,
    /// Seconds for a `Retry-After` header and `details.retryAfterSeconds`.
    pub(crate) retry_after: Option<u32>,
}

/// Results of API operations.
pub(crate) type Result<T, E = ApiError> = std::result::Result<T, E>;

fn details(gr: &GroupResource, name: &str) -> Value {
    let mut d = serde_json::Map::new();
    if !name.is_empty() {
        d.insert("name".into(), name.into());
    }
    if !gr.group.is_empty() {
        d.insert("group".into(), gr.group.as_str().into());
    }
    d.insert("kind".into(), gr.resource.as_str().into());
    Value::Object(d)
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 404 for a missing object: `pods "x" not found`.
    pub(crate) fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", gr.qualified()),
        )
        .with_details(details(gr, name))
    }

    /// 404 for a path that names no resource.
    pub(crate) fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 for a create of an existing name.
    pub(crate) fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gr.qualified()),
        )
        .with_details(details(gr, name))
    }

    /// 409 for a stale resourceVersion or a failed precondition.
    pub(crate) fn conflict(gr: &GroupResource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                gr.qualified()
            ),
        )
        .with_details(details(gr, name))
    }

    /// The 409 for an update against a stale resourceVersion.
    pub(crate) fn stale(gr: &GroupResource, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with field causes: `Pod "x" is invalid: field: message`.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let joined = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>();
        let summary = if joined.len() == 1 {
            joined[0].clone()
        } else {
            format!("[{}]", joined.join(", "))
        };
        let kind_q = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let mut d = serde_json::Map::new();
        d.insert("name".into(), name.into());
        if !group.is_empty() {
            d.insert("group".into(), group.into());
        }
        d.insert("kind".into(), kind.into());
        d.insert("causes".into(), Value::Array(causes_json));
        Self::new(
            422,
            "Invalid",
            format!("{kind_q} \"{name}\" is invalid: {summary}"),
        )
        .with_details(Value::Object(d))
    }

    /// 422 without a qualified resource, as for a JSON patch that cannot be applied.
    pub(crate) fn unprocessable_patch() -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({}))
    }

    /// Any code and reason with `details.causes`, for errors whose status the patch
    /// implementations decide (the 409 of an apply conflict, for one).
    pub(crate) fn with_causes(
        code: u16,
        reason: &'static str,
        message: impl Into<String>,
        causes: &[Cause],
    ) -> Self {
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Self::new(code, reason, message).with_details(json!({ "causes": causes }))
    }

    /// 400.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// The 400 for a body that does not decode into its kind's type:
    /// `ConfigMap in version "v1" cannot be handled as a ConfigMap: ...`.
    pub(crate) fn undecodable(kind: &str, version: &str, why: impl std::fmt::Display) -> Self {
        Self::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {why}"
        ))
    }

    /// 403 for namespaced creates in a terminating namespace.
    pub(crate) fn namespace_terminating(gr: &GroupResource, name: &str, ns: &str) -> Self {
        let mut d = details(gr, name);
        if let Some(m) = d.as_object_mut() {
            m.insert(
                "causes".into(),
                json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace"
                }]),
            );
        }
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                gr.qualified()
            ),
        )
        .with_details(d)
    }

    /// 405.
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 406 when nothing in `Accept` can be produced.
    pub(crate) fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml; got {accept}"
            ),
        )
    }

    /// 415 for a request body in a format the server does not read; `accepted` lists
    /// what it does.
    pub(crate) fn unsupported_media_type(accepted: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
        )
    }

    /// 410 with the message a watch or list from a compacted resourceVersion gets.
    pub(crate) fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 500.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// 500 with no reason: what kube-apiserver answers for an error that
    /// carries no status of its own (a failed server-side apply).
    pub(crate) fn unknown(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 503: the server cannot be reached.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 429 with `Retry-After`.
    pub(crate) fn too_many_requests(retry_after: u32) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        )
        .with_details(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    /// 504 for a read at a resourceVersion the server has not reached.
    pub(crate) fn too_large_resource_version(rv: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {rv}, current: {current}"),
        )
        .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}));
        e.retry_after = Some(1);
        e
    }

    /// The `Status` object as JSON.
    pub(crate) fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(m) = v.as_object_mut() {
            // An unknown reason is left out, as Go's `omitempty` does.
            if self.reason.is_empty() {
                m.remove("reason");
            }
            if let Some(d) = &self.details {
                m.insert("details".into(), without_empty_fields(d.clone()));
            }
        }
        v
    }
}

/// `details` and its causes as Go encodes `StatusDetails`: every field is `omitempty`, so
/// an empty name, group or field is left out rather than sent as `""`.
fn without_empty_fields(mut details: Value) -> Value {
    fn prune(m: &mut serde_json::Map<String, Value>) {
        m.retain(|_, v| !matches!(v, Value::String(s) if s.is_empty()));
    }
    if let Some(m) = details.as_object_mut() {
        prune(m);
        if let Some(Value::Array(causes)) = m.get_mut("causes") {
            causes
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .for_each(prune);
        }
    }
    details
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut resp = (code, [("content-type", "application/json")], body).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(v) = secs.to_string().parse()
        {
            resp.headers_mut().insert("retry-after", v);
        }
        resp
    }
}

/// A success `Status`, as returned by some deletes.
pub(crate) fn success(gr: &GroupResource, name: &str, uid: &str) -> Value {
    let mut d = details(gr, name);
    if let Some(m) = d.as_object_mut() {
        m.insert("uid".into(), uid.into());
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

/// Wraps an internal failure as a 500.
pub(crate) fn internal(e: impl std::error::Error) -> ApiError {
    ApiError::internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> GroupResource {
        GroupResource::new("", "pods")
    }

    #[test]
    fn not_found_reads_like_kube_apiserver() {
        let e = ApiError::not_found(&pods(), "web");
        assert_eq!(e.code, 404);
        assert_eq!(e.to_string(), "pods \"web\" not found");
        assert_eq!(
            e.to_status()["details"],
            json!({"name": "web", "kind": "pods"})
        );
    }

    #[test]
    fn conflict_names_the_group_qualified_resource() {
        let e = ApiError::stale(&GroupResource::new("apps", "deployments"), "d");
        assert_eq!(
            e.to_string(),
            "Operation cannot be fulfilled on deployments.apps \"d\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(e.to_status()["reason"], "Conflict");
    }

    #[test]
    fn invalid_joins_causes_like_kube_apiserver() {
        let e = ApiError::invalid(
            "ConfigMap",
            "",
            "x",
            vec![Cause {
                reason: "FieldValueRequired",
                message: "Required value".into(),
                field: "metadata.name".into(),
            }],
        );
        assert_eq!(
            e.to_string(),
            "ConfigMap \"x\" is invalid: metadata.name: Required value"
        );
        assert_eq!(e.code, 422);
    }

    #[test]
    fn an_error_without_a_status_of_its_own_is_a_500_without_a_reason() {
        let status = ApiError::unknown("failed").to_status();
        assert_eq!(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "failed", "code": 500})
        );
    }

    #[test]
    fn an_undecodable_body_names_its_kind_and_version() {
        let e = ApiError::undecodable("ConfigMap", "v1", "json: ...");
        assert_eq!(
            (e.code, e.to_string().as_str()),
            (
                400,
                "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: ..."
            )
        );
    }

    #[test]
    fn details_leave_out_empty_fields_as_go_omitempty_does() {
        let e = ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause {
                reason: "FieldValueForbidden",
                message: "Forbidden".into(),
                field: String::new(),
            }],
        );
        assert_eq!(
            e.to_status()["details"],
            json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": [{"reason": "FieldValueForbidden", "message": "Forbidden"}]})
        );
    }
}
