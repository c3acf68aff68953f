//! Blocking HTTP requests to the origins the platform team granted the
//! policy, for what garbage collection cannot reach: a bucket, a DNS record,
//! a credential issued elsewhere.
//!
//! In the component a request goes through `wasi:http/outgoing-handler`,
//! and the host decides: an origin outside the policy's grant, an address
//! on the host's or the cluster's networks, too many requests or too large
//! a body is refused with an [`Error`] naming the `wasi:http` error code,
//! before any connection. The host adds the grant's credentials itself
//! (the request never shows them to the policy; a server that sends one
//! back hands it over, and the host redacts it from all the policy
//! publishes), verifies TLS and does not follow
//! redirects: a 3xx is a [`Response`] like any other.
//!
//! Natively (under [`crate::testing`]), requests are answered from the
//! [`Exchange`]s a test or golden case lists, in order; any other request
//! fails the call, so a policy's tests stay deterministic.
//!
//! ```no_run
//! use policyhost_sdk::http::Request;
//!
//! # fn demo() -> Result<(), policyhost_sdk::http::Error> {
//! let response = Request::put("https://storage.example.com/buckets/etl-42")
//!     .header("content-type", "application/json")
//!     .header("idempotency-key", "6f1c…-reconcile")
//!     .body(br#"{"region":"eu"}"#.to_vec())
//!     .send()?;
//! if response.status == 404 {
//!     // gone
//! }
//! # Ok(()) }
//! ```
//!
//! Cleanup answers `Done` only when the service confirms the resource is
//! gone; every other answer, a refusal or a timeout keeps the finalizer and
//! is retried, so an external resource is never leaked. Use
//! [`crate::Context::idempotency_key`] for services that take one.

mod fixture;
#[cfg(target_arch = "wasm32")]
mod wasi;

use std::time::Duration;

pub use fixture::{Exchange, ExpectedRequest, Replay, StubResponse};
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use fixture::{finish, install};

/// An HTTP method.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// `GET`, `PUT`, ...
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Its method.
    pub method: Method,
    /// Its URL: `http` or `https`, a host, an optional port, path and query.
    pub url: String,
    /// Its headers, in order.
    pub headers: Vec<(String, String)>,
    /// Its body (empty: none).
    pub body: Vec<u8>,
    /// How long each step may take, within the call's network deadline.
    pub timeouts: Timeouts,
}

/// How long each step of one exchange may take. The host ends every
/// request at the call's network deadline anyway; these only end it
/// earlier, so that a policy can give up on a slow server and report it
/// (or try another) within the same call. A timeout the host reaches is
/// [`Error::Failed`] with `ConnectionTimeout` (connecting) or
/// `ConnectionReadTimeout` (waiting for the answer or its body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// Resolving the name, connecting and the TLS handshake.
    pub connect: Option<Duration>,
    /// From sending the request to the response's status and headers.
    pub first_byte: Option<Duration>,
    /// Between two parts of the response body.
    pub between_bytes: Option<Duration>,
}

impl Request {
    /// A request of `method` to `url`.
    #[must_use]
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeouts: Timeouts::default(),
        }
    }

    /// A `GET`.
    #[must_use]
    pub fn get(url: impl Into<String>) -> Self {
        Self::new(Method::Get, url)
    }

    /// A `PUT`.
    #[must_use]
    pub fn put(url: impl Into<String>) -> Self {
        Self::new(Method::Put, url)
    }

    /// A `POST`.
    #[must_use]
    pub fn post(url: impl Into<String>) -> Self {
        Self::new(Method::Post, url)
    }

    /// A `DELETE`.
    #[must_use]
    pub fn delete(url: impl Into<String>) -> Self {
        Self::new(Method::Delete, url)
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets how long each step may take.
    #[must_use]
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Sends the request and reads the whole response.
    ///
    /// # Errors
    ///
    /// The host refused it, the network failed, or (natively) no fixture
    /// expects it; see [`Error`].
    pub fn send(&self) -> Result<Response, Error> {
        let url = Url::parse(&self.url)?;
        #[cfg(target_arch = "wasm32")]
        {
            wasi::send(self, &url)
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            fixture::send(self, &url)
        }
    }
}

/// A response: status, headers and the whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header (`name` in any case).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Whether the status is 2xx.
    #[must_use]
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as UTF-8 text (lossy).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Why a request has no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The URL is not `http(s)://host[:port][/path][?query]`.
    #[error("`{url}` is not an http or https URL with a host")]
    Url {
        /// The URL.
        url: String,
    },
    /// The host refused the request before connecting. `code` is the
    /// `wasi:http` error code's case in UpperCamelCase: `HttpRequestDenied`
    /// (an origin outside the grant, or too many requests in this call),
    /// `DestinationIpProhibited` (the name resolves to a restricted
    /// address), `ConnectionLimitReached` (the policy's concurrency).
    #[error("the host refused the request: {code}")]
    Refused {
        /// The `wasi:http` error code.
        code: String,
    },
    /// The exchange failed; `code` is the `wasi:http` error code's case, such
    /// as `ConnectionTimeout` (the call's network deadline) or
    /// `HttpResponseBodySize`.
    #[error("the request failed: {code}")]
    Failed {
        /// The `wasi:http` error code.
        code: String,
    },
    /// Natively: no fixture expects this request.
    #[error("unexpected request {method} {url}: {reason}")]
    Unexpected {
        /// Its method.
        method: Method,
        /// Its URL.
        url: String,
        /// Which fixture it missed, and how.
        reason: String,
    },
}

/// The error codes of the host's refusals.
const REFUSALS: &[&str] = &[
    "HttpRequestDenied",
    "DestinationIpProhibited",
    "ConnectionLimitReached",
];

impl Error {
    /// The error of a `wasi:http` error code (its case in UpperCamelCase):
    /// [`Error::Refused`] for the host's refusals, else [`Error::Failed`].
    pub(crate) fn of_code(code: String) -> Self {
        if REFUSALS.contains(&code.as_str()) {
            Self::Refused { code }
        } else {
            Self::Failed { code }
        }
    }

    /// Whether the host refused the request (a grant question, not a
    /// network one: retrying does not help until the grant changes).
    #[must_use]
    pub fn is_refused(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }
}

/// A URL split as `wasi:http` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url<'a> {
    pub(crate) https: bool,
    pub(crate) authority: &'a str,
    pub(crate) path_and_query: &'a str,
}

impl<'a> Url<'a> {
    pub(crate) fn parse(url: &'a str) -> Result<Self, Error> {
        let bad = || Error::Url {
            url: url.to_owned(),
        };
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(bad());
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() || authority.contains(['@', '#', ' ']) || path.contains(['#', ' '])
        {
            return Err(bad());
        }
        Ok(Self {
            https,
            authority,
            path_and_query: if path.is_empty() { "/" } else { path },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_splits_into_scheme_authority_and_path() {
        let url = Url::parse("https://api.example.com:8443/v1/b?x=1").unwrap();
        assert!(url.https);
        assert_eq!(url.authority, "api.example.com:8443");
        assert_eq!(url.path_and_query, "/v1/b?x=1");
        assert_eq!(Url::parse("http://h").unwrap().path_and_query, "/");
        assert_eq!(Url::parse("http://h?q").unwrap().path_and_query, "?q");
        for bad in [
            "ftp://h/",
            "https://",
            "https:///x",
            "https://u@h/",
            "h/x",
            "https://h/#f",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_response_finds_headers_in_any_case() {
        let response = Response {
            status: 204,
            headers: vec![("etag".into(), "\"1\"".into())],
            body: b"ok".to_vec(),
        };
        assert_eq!(response.header("ETag"), Some("\"1\""));
        assert!(response.is_success());
        assert_eq!(response.text(), "ok");
    }
}
