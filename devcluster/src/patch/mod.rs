//! PATCH bodies: the patch type from `Content-Type`, and one dispatch that turns the
//! current object and the patch into the patched object.
//!
//! Strategic merge patch and server-side apply answer 415 until their implementations
//! are wired into [`apply`].

pub(crate) mod json;
pub(crate) mod merge;
pub mod schema;
pub mod strategic;

use serde_json::Value;

use crate::status::{ApiError, Result};

/// The patch media types served, for 415 messages.
pub(crate) const SERVED_TYPES: &str = "application/json-patch+json, application/merge-patch+json";

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
#[allow(
    dead_code,
    reason = "read by strategic merge patch and server-side apply once they are wired in"
)]
pub(crate) struct Context {
    /// `fieldManager`.
    pub(crate) field_manager: Option<String>,
    /// `force` (server-side apply).
    pub(crate) force: bool,
    /// The object's kind, for type-aware patches.
    pub(crate) kind: String,
}

/// Applies a patch of type `ty` to `current`.
pub(crate) fn apply(ty: PatchType, current: Value, body: &[u8], _ctx: &Context) -> Result<Value> {
    match ty {
        PatchType::Json => {
            let ops = json::decode(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut doc = current;
            json::apply(&mut doc, &ops).map_err(|error| {
                tracing::debug!(%error, "json patch does not apply");
                ApiError::unprocessable_patch()
            })?;
            Ok(doc)
        }
        PatchType::Merge => {
            let patch: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut doc = current;
            merge::merge(&mut doc, &patch);
            Ok(doc)
        }
        PatchType::Strategic | PatchType::Apply => {
            Err(ApiError::unsupported_media_type(SERVED_TYPES))
        }
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
    fn strategic_and_apply_are_unsupported_for_now() {
        for ty in [PatchType::Strategic, PatchType::Apply] {
            assert_eq!(
                apply(ty, json!({}), b"{}", &Context::default())
                    .unwrap_err()
                    .code,
                415
            );
        }
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
    }
}
