//! Facts about a call that a pure function cannot find out itself.
//!
//! ```
//! use policyhost_sdk::Context;
//!
//! let ctx = Context::new(1_700_000_000_000, 1, "sha256-hex");
//! let deadline_passed = ctx.now_unix_ms > 1_600_000_000_000;
//! assert!(deadline_passed);
//! ```

/// Facts about this call. Policies are pure functions: the time comes from
/// here, never from a clock, so the same inputs replay to the same result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Context {
    /// The host's wall-clock time when the call started, in Unix milliseconds.
    pub now_unix_ms: u64,
    /// 1 for the first call after the DataJob last changed, counting up on
    /// every retry after an error; for `cleanup`, the cleanup attempt number.
    pub attempt: u32,
    /// The SHA-256 digest (hex) of the policy component running this call.
    pub policy_digest: String,
    /// A key for external services that deduplicate requests: the DataJob's
    /// uid and the operation (`<uid>-reconcile`, `<uid>-cleanup`). The same
    /// for every retry of one operation on one DataJob, different for a
    /// re-created DataJob of the same name.
    pub idempotency_key: String,
}

impl Context {
    /// A context, as the host would hand it over.
    #[must_use]
    pub fn new(now_unix_ms: u64, attempt: u32, policy_digest: impl Into<String>) -> Self {
        Self {
            now_unix_ms,
            attempt,
            policy_digest: policy_digest.into(),
            idempotency_key: String::new(),
        }
    }

    /// The context of `operation` (`reconcile` or `cleanup`) on the DataJob
    /// of uid `uid`: sets [`Context::idempotency_key`].
    #[must_use]
    pub fn for_operation(mut self, uid: &str, operation: &str) -> Self {
        self.idempotency_key = format!("{uid}-{operation}");
        self
    }
}
