//! Requests answered from canned exchanges instead of the network: how
//! `policy test` and `policy run --http-fixtures` keep a component with
//! outbound HTTP deterministic. The exchanges are the SDK's
//! ([`policyhost_sdk::http::Exchange`]), so a golden case means the same
//! under `cargo test` and here; the grant's checks still apply first.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use policyhost_sdk::http::{Exchange, Replay};
use wasmtime_wasi_http::{Error, WasiBody};

use super::body::Bounded;
use super::client::Sent;
use super::grant::Grant;
use super::origin::OriginPattern;
use super::origin::PatternError;
use super::record::method_of;
use super::{Refusal, Tally};

/// The exchanges the next calls are answered from. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Fixtures(Arc<Mutex<Replay>>);

impl Fixtures {
    fn with<R>(&self, f: impl FnOnce(&mut Replay) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Answers the next requests from `exchanges`, in order.
    pub fn install(&self, exchanges: Vec<Exchange>) {
        self.with(|replay| *replay = Replay::new(exchanges));
    }

    /// Whether the calls since [`Fixtures::install`] made exactly the
    /// listed requests.
    ///
    /// # Errors
    ///
    /// Each unexpected request, and the first listed one never made.
    pub fn finish(&self) -> Result<(), String> {
        self.with(|replay| replay.finish())
    }

    /// The answer to one admitted request; one not in the fixtures is
    /// denied, and counted as a shadow's refusal in `shadow`'s tally.
    pub(crate) async fn answer(
        self,
        request: Request<WasiBody>,
        limit: u64,
        shadow: Option<Arc<Tally>>,
    ) -> Result<Sent, Error> {
        let method = method_of(request.method()).ok_or(Error::HttpRequestMethodInvalid)?;
        let url = request.uri().to_string();
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(3600);
        let body = Bounded::request(request.into_body(), limit, far)
            .collect()
            .await?
            .to_bytes();
        let answer = self.with(|replay| replay.answer(&method, &url, &body));
        let response = answer.map_err(|error| match error {
            policyhost_sdk::http::Error::Refused { code } | policyhost_sdk::http::Error::Failed { code } => {
                error_named(&code)
            }
            unexpected => {
                match &shadow {
                    Some(tally) => tally.refused(Refusal::Shadow),
                    None => tracing::warn!(target: "policyhost::outbound", %unexpected, "request not in the fixtures"),
                }
                Error::HttpRequestDenied
            }
        })?;
        let mut builder = Response::builder().status(response.status);
        for (name, value) in &response.headers {
            builder = builder.header(name, value);
        }
        let body = Full::new(Bytes::from(response.body))
            .map_err(|never| match never {})
            .boxed_unsync();
        let response = builder
            .body(body)
            .map_err(|error| Error::InternalError(Some(error.to_string())))?;
        let done: Box<dyn std::future::Future<Output = Result<(), Error>> + Send> =
            Box::new(std::future::ready(Ok(())));
        Ok((response, done))
    }
}

/// The grant of `policy test` and `policy run --http-fixtures`: exactly the
/// origins the exchanges' URLs name, the other settings at their defaults
/// except the requests per call, which is the number of exchanges.
///
/// # Errors
///
/// A URL whose origin is not a valid origin.
pub fn grant_for(exchanges: &[Exchange]) -> Result<Grant, PatternError> {
    let mut origins: Vec<OriginPattern> = Vec::new();
    for exchange in exchanges {
        let pattern = origin_of(&exchange.request.url)?;
        if !origins.contains(&pattern) {
            origins.push(pattern);
        }
    }
    let mut grant = Grant::to(origins);
    grant.requests_per_call = u32::try_from(exchanges.len())
        .unwrap_or(u32::MAX)
        .max(Grant::REQUESTS_PER_CALL);
    Ok(grant)
}

/// The origin pattern of a URL: its scheme, host and port.
fn origin_of(url: &str) -> Result<OriginPattern, PatternError> {
    let cut = url
        .find("://")
        .map(|at| at + 3)
        .and_then(|start| url[start..].find(['/', '?']).map(|end| start + end))
        .unwrap_or(url.len());
    OriginPattern::parse(&url[..cut])
}

/// The `wasi:http` error of a fixture's `error` (its case in
/// UpperCamelCase, as the SDK reports it).
fn error_named(name: &str) -> Error {
    match name {
        "DnsTimeout" => Error::DnsTimeout,
        "DestinationNotFound" => Error::DestinationNotFound,
        "DestinationUnavailable" => Error::DestinationUnavailable,
        "DestinationIpProhibited" => Error::DestinationIpProhibited,
        "DestinationIpUnroutable" => Error::DestinationIpUnroutable,
        "ConnectionRefused" => Error::ConnectionRefused,
        "ConnectionTerminated" => Error::ConnectionTerminated,
        "ConnectionTimeout" => Error::ConnectionTimeout,
        "ConnectionReadTimeout" => Error::ConnectionReadTimeout,
        "ConnectionWriteTimeout" => Error::ConnectionWriteTimeout,
        "ConnectionLimitReached" => Error::ConnectionLimitReached,
        "TlsProtocolError" => Error::TlsProtocolError,
        "TlsCertificateError" => Error::TlsCertificateError,
        "HttpRequestDenied" => Error::HttpRequestDenied,
        "HttpResponseIncomplete" => Error::HttpResponseIncomplete,
        "HttpResponseTimeout" => Error::HttpResponseTimeout,
        "HttpResponseBodySize" => Error::HttpResponseBodySize(None),
        "HttpProtocolError" => Error::HttpProtocolError,
        other => Error::InternalError(Some(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::origin::{Origin, Scheme};

    fn exchanges(json: &str) -> Vec<Exchange> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_fixtures_grant_admits_exactly_their_origins() {
        let grant = grant_for(&exchanges(
            r#"[{"request":{"method":"PUT","url":"https://s.example.com/buckets/a"}},
                {"request":{"method":"GET","url":"https://s.example.com:443/buckets/a?x"}},
                {"request":{"method":"GET","url":"http://other.example.com:8080"}}]"#,
        ))
        .unwrap();
        let texts: Vec<&str> = grant.origins.iter().map(OriginPattern::as_str).collect();
        assert_eq!(
            texts,
            [
                "https://s.example.com",
                "https://s.example.com:443",
                "http://other.example.com:8080"
            ]
        );
        let admitted = |scheme, authority| {
            grant
                .admitting(&Origin::of(scheme, authority).unwrap())
                .is_some()
        };
        assert!(admitted(Scheme::Https, "s.example.com"));
        assert!(admitted(Scheme::Http, "other.example.com:8080"));
        assert!(!admitted(Scheme::Https, "evil.example.com"));
        assert!(
            grant_for(&exchanges(
                r#"[{"request":{"method":"GET","url":"https://a/b c"}}]"#
            ))
            .is_ok()
        );
        assert!(
            grant_for(&exchanges(
                r#"[{"request":{"method":"GET","url":"ftp://a/"}}]"#
            ))
            .is_err()
        );
    }

    #[test]
    fn a_fixture_error_is_the_wasi_http_error_of_its_name() {
        assert!(matches!(
            error_named("ConnectionTimeout"),
            Error::ConnectionTimeout
        ));
        assert!(matches!(
            error_named("HttpRequestDenied"),
            Error::HttpRequestDenied
        ));
        assert!(
            matches!(error_named("Bogus"), Error::InternalError(Some(name)) if name == "Bogus")
        );
    }
}
