//! Outbound HTTP for policies: what cleanup needs to reach what garbage
//! collection cannot (a bucket, a DNS record, a credential issued
//! elsewhere), granted by the platform team and enforced by the host on
//! every request.
//!
//! A policy that imports `wasi:http/outgoing-handler` is loaded only with a
//! [`Grant`] ([`grant`]: origins, requests per call, body sizes, the share
//! of its deadline it may wait on the network, concurrency, credentials).
//! Each request of a call then goes through the host's own client
//! ([`client`]), never through a socket of the guest's:
//!
//! 1. its origin must be one the grant admits ([`origin`]);
//! 2. the call may not have made `requestsPerCall` requests already, and the
//!    policy may not have `concurrency` requests in flight across its calls;
//! 3. the host adds the grant's credential headers for that origin, over
//!    whatever the guest set, where the guest's request cannot read them;
//! 4. the name is resolved and every address checked *before connecting*
//!    ([`address`]): loopback, link-local, private and the like only where
//!    the grant names the address itself;
//! 5. TLS is verified (the web's roots, plus the host's own, see
//!    [`ClientConfig`]); HTTP/1.1; redirects are answered to the guest, never
//!    followed;
//! 6. request and response bodies are capped, and the whole exchange, body
//!    included, ends at the call's network deadline.
//!
//! The values the host injects are the policy's to use, never to publish:
//! wherever the policy's words leave the sandbox, its version's
//! [`Redactor`] replaces them with a marker ([`redact`]).
//!
//! A refusal is a `wasi:http` error code the guest sees, a warning in the
//! host's log and a count in the call's report
//! ([`OutboundReport`], exported as `policyhost_outbound_refused_total`);
//! no connection is opened.

pub mod address;
mod body;
mod client;
pub mod grant;
mod hooks;
pub mod origin;
pub mod record;
pub mod redact;
mod replay;
mod timeouts;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use http::{HeaderName, HeaderValue};

use crate::shard::Replicas;

pub use client::{Client, ClientConfig};
pub use grant::{Credential, Grant};
pub use hooks::IDEMPOTENCY_KEY;
pub(crate) use hooks::{CallHttp, Caller, add_to_linker};
pub use origin::{Origin, OriginPattern};
pub use record::Recorded;
pub use redact::{RedactError, Redactor};
pub use replay::{Fixtures, grant_for};

/// A policy's grant with its credentials read: what the host holds to
/// enforce it. Shared by every call of one policy version.
pub struct Outbound {
    grant: Grant,
    /// The credential headers, values marked sensitive (never logged).
    headers: Vec<(OriginPattern, HeaderName, HeaderValue)>,
    /// Their values, to keep out of what the policy says.
    redactor: Redactor,
    /// Requests in flight across the policy's calls.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The replicas the grant's concurrency is divided among.
    replicas: Replicas,
    /// Set when requests are answered from fixtures, never sent.
    fixtures: Option<Fixtures>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("grant", &self.grant)
            .field("credentials", &self.headers.len())
            .finish_non_exhaustive()
    }
}

/// A credential the grant names that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CredentialError {
    /// The Secret, or its key, is not there.
    #[error(
        "the grant's credential for {origin} names Secret `{secret}` key `{key}`, which does not exist"
    )]
    Missing {
        /// The credential's origin.
        origin: String,
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
    },
    /// The value cannot be an HTTP header value.
    #[error(
        "Secret `{secret}` key `{key}` is not a valid HTTP header value (it has a line break or a control character)"
    )]
    NotAHeaderValue {
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
    },
    /// The value cannot be kept out of what the policy publishes (it is
    /// part of the marker that replaces it, see [`redact`]).
    #[error("Secret `{secret}` key `{key}` cannot be redacted from the policy's output: {why}")]
    Unredactable {
        /// The Secret.
        secret: String,
        /// The key.
        key: String,
        /// Why.
        why: RedactError,
    },
    /// The values together are too long for the host to search for in what
    /// the policy publishes.
    #[error("the grant's credentials are too long to redact from the policy's output")]
    TooLargeToRedact(#[source] RedactError),
}

impl Outbound {
    /// The grant with its credentials' values, found in `secrets` by
    /// (Secret name, key).
    pub fn new(
        grant: Grant,
        secrets: &BTreeMap<(String, String), Vec<u8>>,
    ) -> Result<Self, CredentialError> {
        let headers = grant
            .credentials
            .iter()
            .map(|credential| {
                let lookup = (credential.secret.clone(), credential.key.clone());
                let bytes = secrets
                    .get(&lookup)
                    .ok_or_else(|| CredentialError::Missing {
                        origin: credential.origin.to_string(),
                        secret: credential.secret.clone(),
                        key: credential.key.clone(),
                    })?;
                let mut value = HeaderValue::from_bytes(bytes).map_err(|_| {
                    CredentialError::NotAHeaderValue {
                        secret: credential.secret.clone(),
                        key: credential.key.clone(),
                    }
                })?;
                Redactor::check(bytes).map_err(|why| CredentialError::Unredactable {
                    secret: credential.secret.clone(),
                    key: credential.key.clone(),
                    why,
                })?;
                value.set_sensitive(true);
                Ok((credential.origin.clone(), credential.header.clone(), value))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let redactor = Redactor::new(headers.iter().map(|(_, _, value)| value.as_bytes()))
            .map_err(CredentialError::TooLargeToRedact)?;
        Ok(Self {
            in_flight: in_flight(&grant),
            replicas: Replicas::default(),
            grant,
            headers,
            redactor,
            fixtures: None,
        })
    }

    /// The same, its concurrency divided among `replicas`: with shards, each
    /// holds its share of the requests in flight, so that together they
    /// hold no more than the grant allows.
    #[must_use]
    pub fn shared_among(mut self, replicas: Replicas) -> Self {
        self.replicas = replicas;
        self
    }

    /// A slot for one more request in flight, if this replica's share of
    /// the grant's concurrency has one.
    fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = Arc::clone(&self.in_flight).try_acquire_owned().ok()?;
        let granted = usize::try_from(self.grant.concurrency).unwrap_or(usize::MAX);
        // Counted with this one: two taken at once may both be refused,
        // never both admitted over the share.
        let held = granted.saturating_sub(self.in_flight.available_permits());
        (held <= self.replicas.share(granted)).then_some(permit)
    }

    /// A grant whose requests, once admitted, are answered from the
    /// returned [`Fixtures`] instead of the network (`policy test`,
    /// `policy run --http-fixtures`). It names no credentials.
    #[must_use]
    pub fn replaying(grant: Grant) -> (Self, Fixtures) {
        let fixtures = Fixtures::default();
        let outbound = Self {
            in_flight: in_flight(&grant),
            replicas: Replicas::default(),
            grant: Grant {
                credentials: Vec::new(),
                ..grant
            },
            headers: Vec::new(),
            redactor: Redactor::none(),
            fixtures: Some(fixtures.clone()),
        };
        (outbound, fixtures)
    }

    /// The grant.
    #[must_use]
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// What keeps the credentials' values out of the policy's words.
    #[must_use]
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The credential headers for `origin`.
    fn headers_for<'a>(
        &'a self,
        origin: &'a Origin,
    ) -> impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)> + 'a {
        self.headers
            .iter()
            .filter(move |(pattern, _, _)| pattern.admits(origin))
            .map(|(_, name, value)| (name, value))
    }
}

/// The slots of a grant's `concurrency`, shared by the calls of one version.
fn in_flight(grant: &Grant) -> Arc<tokio::sync::Semaphore> {
    let permits = usize::try_from(grant.concurrency).unwrap_or(usize::MAX);
    Arc::new(tokio::sync::Semaphore::new(permits))
}

/// Why the host refused a request without opening a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its origin is not in the grant.
    Origin,
    /// Every address its name resolved to is restricted, and the grant does
    /// not name any of them.
    Address,
    /// The call made `requestsPerCall` requests already.
    RequestsPerCall,
    /// The policy has `concurrency` requests in flight.
    Concurrency,
    /// The call is a candidate's shadow call, which must have no side
    /// effect: no request leaves the host, and one the serving call did
    /// not make the same way has no answer to replay.
    Shadow,
}

impl Refusal {
    /// Every refusal, in the order of [`OutboundReport::refused`].
    pub const ALL: [Self; 5] = [
        Self::Origin,
        Self::Address,
        Self::RequestsPerCall,
        Self::Concurrency,
        Self::Shadow,
    ];

    /// The metric label and log field.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Origin => "origin",
            Self::Address => "address",
            Self::RequestsPerCall => "requests-per-call",
            Self::Concurrency => "concurrency",
            Self::Shadow => "shadow",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What one call did over HTTP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboundReport {
    /// Requests sent (a connection was opened).
    pub requests: u32,
    /// Requests refused, by [`Refusal`] in the order of [`Refusal::ALL`].
    pub refused: [u32; 5],
}

impl OutboundReport {
    /// The count of one refusal.
    #[must_use]
    pub fn refused(&self, refusal: Refusal) -> u32 {
        self.refused[refusal.index()]
    }
}

/// The counts of one call, shared with its requests' tasks.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    requests: AtomicU32,
    refused: [AtomicU32; 5],
}

impl Tally {
    fn sent(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, refusal: Refusal) {
        self.refused[refusal.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn report(&self) -> OutboundReport {
        OutboundReport {
            requests: self.requests.load(Ordering::Relaxed),
            refused: std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed)),
        }
    }
}

/// The `wasi:http` error code of a body's error, for the guest's
/// `http-error-code`: wasmtime-wasi-http hands a body's errors to the guest
/// as opaque stream errors, so the host's streams for outbound calls
/// ([`crate::runtime`]) put the code in. The codes the host's bodies end
/// with are named; a connection that broke mid-body is
/// `HttpResponseIncomplete`; anything else an internal error with its text.
#[must_use]
pub(crate) fn body_error_code(error: &wasmtime_wasi_http::Error) -> ErrorCode {
    use wasmtime_wasi_http::Error as E;
    match error {
        E::ConnectionReadTimeout => ErrorCode::ConnectionReadTimeout,
        E::ConnectionTimeout => ErrorCode::ConnectionTimeout,
        E::HttpResponseBodySize(size) => ErrorCode::HttpResponseBodySize(*size),
        E::HttpRequestBodySize(size) => ErrorCode::HttpRequestBodySize(*size),
        E::Hyper(_) | E::HttpResponseIncomplete => ErrorCode::HttpResponseIncomplete,
        other => ErrorCode::InternalError(Some(other.to_string())),
    }
}

/// The `wasi:http` error code type the guest reads.
pub(crate) use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;

/// Headers a guest may not set and a credential may not name: the host
/// frames the request and names the server itself.
#[must_use]
pub fn is_forbidden_header(name: &HeaderName) -> bool {
    wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant_with_credential() -> Grant {
        let origin = OriginPattern::parse("https://api.example.com").expect("an origin");
        let mut grant = Grant::to(vec![origin.clone()]);
        grant.credentials.push(Credential {
            origin,
            header: http::header::AUTHORIZATION,
            secret: "token".into(),
            key: "value".into(),
        });
        grant
    }

    fn secrets(value: &str) -> BTreeMap<(String, String), Vec<u8>> {
        BTreeMap::from([(
            ("token".to_owned(), "value".to_owned()),
            value.as_bytes().to_vec(),
        )])
    }

    #[test]
    fn shards_hold_their_share_of_the_grants_concurrency() {
        let mut grant = grant_with_credential();
        grant.concurrency = 7;
        let replicas = Replicas::default();
        let outbound = Outbound::new(grant, &secrets("Bearer s3cret"))
            .unwrap()
            .shared_among(replicas.clone());
        replicas.set(3);
        let held: Vec<_> = std::iter::from_fn(|| outbound.slot()).take(10).collect();
        assert_eq!(held.len(), 2, "7 among 3 replicas: 2 each, 6 in all");
        drop(held);
        replicas.set(1);
        let held: Vec<_> = std::iter::from_fn(|| outbound.slot()).take(10).collect();
        assert_eq!(held.len(), 7, "alone, the whole grant");
    }

    #[test]
    fn the_grants_credentials_are_what_its_redactor_finds() {
        let outbound = Outbound::new(grant_with_credential(), &secrets("Bearer s3cret")).unwrap();
        assert_eq!(
            outbound.redactor().redact("echo: Bearer s3cret"),
            "echo: [redacted]"
        );
        let (replaying, _) = Outbound::replaying(grant_with_credential());
        assert!(replaying.redactor().is_empty());
        let none = Outbound::new(Grant::to(grant_with_credential().origins), &BTreeMap::new());
        assert!(none.unwrap().redactor().is_empty());
    }

    #[test]
    fn a_credential_the_marker_would_show_is_refused_naming_its_secret() {
        let error = Outbound::new(grant_with_credential(), &secrets("act")).unwrap_err();
        assert!(matches!(error, CredentialError::Unredactable { .. }));
        assert_eq!(
            error.to_string(),
            "Secret `token` key `value` cannot be redacted from the policy's output: its value, or a secret part of it, is too short to redact: it occurs in the marker `[redacted]`"
        );
    }
}
