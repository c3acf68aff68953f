//! The failure a policy reports to the host.
//!
//! ```
//! use policyhost_sdk::PolicyError;
//!
//! fn check(replicas: u32) -> Result<(), PolicyError> {
//!     if replicas == 0 {
//!         return Err(PolicyError::invalid_params("params.replicas: must be at least 1"));
//!     }
//!     Ok(())
//! }
//! assert_eq!(check(0).unwrap_err().to_string(), "invalid params: params.replicas: must be at least 1");
//! ```

use serde::Serialize;

/// A failure the policy reports itself; it crosses the component boundary as
/// the WIT `policy-error`, so it carries a message rather than a cause.
///
/// Serializes as `{"invalidParams": "..."}` or `{"failed": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicyError {
    /// `spec.params` do not fit the policy's schema; the message names the
    /// field. The host does not retry until the DataJob's spec changes.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// Any other failure; the host retries with backoff.
    #[error("policy failed: {0}")]
    Failed(String),
}

impl PolicyError {
    /// A [`PolicyError::InvalidParams`] with this message.
    #[must_use]
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::InvalidParams(message.into())
    }

    /// A [`PolicyError::Failed`] with the error and all its causes, joined by `: `.
    #[must_use]
    pub fn failed(error: &(dyn std::error::Error + 'static)) -> Self {
        Self::Failed(chain(error))
    }

    /// A [`PolicyError::Failed`] with this message.
    #[must_use]
    pub fn failed_with(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// The message without the variant's prefix.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            Self::InvalidParams(message) | Self::Failed(message) => message,
        }
    }
}

impl From<crate::build::Error> for PolicyError {
    fn from(error: crate::build::Error) -> Self {
        Self::failed(&error)
    }
}

/// `error: cause: cause of cause`.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_kind_of_failure() {
        assert_eq!(
            PolicyError::invalid_params("params.replicas: too big").to_string(),
            "invalid params: params.replicas: too big"
        );
        assert_eq!(
            PolicyError::failed_with("boom").to_string(),
            "policy failed: boom"
        );
    }

    #[test]
    fn failed_keeps_the_whole_cause_chain() {
        let inner = std::io::Error::other("disk on fire");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot write")]
        struct Outer(#[source] std::io::Error);
        let error = PolicyError::failed(&Outer(inner));
        assert_eq!(error.message(), "cannot write: disk on fire");
    }

    #[test]
    fn errors_serialize_as_the_result_json_shape() {
        let json = serde_json::to_value(PolicyError::invalid_params("x")).unwrap();
        assert_eq!(json, serde_json::json!({ "invalidParams": "x" }));
        let json = serde_json::to_value(PolicyError::failed_with("y")).unwrap();
        assert_eq!(json, serde_json::json!({ "failed": "y" }));
    }
}
