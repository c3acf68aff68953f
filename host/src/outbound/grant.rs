//! The outbound grant of a policy, as the host enforces it: which origins
//! it may reach over HTTP, how much, and which credentials the host adds
//! for it. Where a grant comes from (the platform team's ConfigMap
//! `grant-<policy>`) is [`crate::grants`]' business, not this module's.

use std::time::Duration;

use http::HeaderName;

use super::origin::{Origin, OriginPattern};

/// A header the host adds to the requests to one origin, its value read
/// from a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The one origin it is sent to.
    pub origin: OriginPattern,
    /// The header (lowercase).
    pub header: HeaderName,
    /// The Secret, in the host's namespace.
    pub secret: String,
    /// The key in the Secret's `data` whose value is the header's value.
    pub key: String,
}

/// What a policy may do over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The origins it may reach.
    pub origins: Vec<OriginPattern>,
    /// Requests one call may make.
    pub requests_per_call: u32,
    /// Bytes of one request body.
    pub request_body_bytes: u64,
    /// Bytes of one response body.
    pub response_body_bytes: u64,
    /// Percent of the call's deadline it may spend waiting on the network.
    pub network_percent: u8,
    /// Requests in flight at once across its calls.
    pub concurrency: u32,
    /// Headers the host adds.
    pub credentials: Vec<Credential>,
}

impl Grant {
    /// Requests per call without `requestsPerCall`.
    pub const REQUESTS_PER_CALL: u32 = 8;
    /// Request body bytes without `requestBodyBytes`.
    pub const REQUEST_BODY_BYTES: u64 = 64 << 10;
    /// Response body bytes without `responseBodyBytes`.
    pub const RESPONSE_BODY_BYTES: u64 = 1 << 20;
    /// Percent of the deadline without `networkShare`.
    pub const NETWORK_PERCENT: u8 = 50;
    /// Requests in flight without `concurrency`.
    pub const CONCURRENCY: u32 = 4;

    /// A grant of these origins with every other setting at its default.
    #[must_use]
    pub fn to(origins: Vec<OriginPattern>) -> Self {
        Self {
            origins,
            requests_per_call: Self::REQUESTS_PER_CALL,
            request_body_bytes: Self::REQUEST_BODY_BYTES,
            response_body_bytes: Self::RESPONSE_BODY_BYTES,
            network_percent: Self::NETWORK_PERCENT,
            concurrency: Self::CONCURRENCY,
            credentials: Vec::new(),
        }
    }

    /// The first of the grant's patterns that admits `origin`.
    #[must_use]
    pub fn admitting(&self, origin: &Origin) -> Option<&OriginPattern> {
        self.origins.iter().find(|pattern| pattern.admits(origin))
    }

    /// How long a call of `timeout` may wait on the network.
    #[must_use]
    pub fn network_budget(&self, timeout: Duration) -> Duration {
        timeout * u32::from(self.network_percent) / 100
    }

    /// The Secrets the grant reads, each once.
    #[must_use]
    pub fn secrets(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.credentials.iter().map(|c| c.secret.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}
