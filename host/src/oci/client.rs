//! HTTP to a registry, as the OCI distribution API needs it and no more:
//! HTTPS only, one exchange per connection, every body capped while it is
//! read (a declared length over the cap is refused before reading), a
//! redirect followed only to a host the caller allows, and credentials
//! sent only to the registry (or the token service it names, if allowed).
//!
//! A registry is hostile input like any other: a general-purpose client
//! would follow redirects anywhere and read a manifest of any size.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, LOCATION};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

use super::credentials::Basic;
use super::reference::Prefix;

/// The most redirects one request follows.
const MAX_REDIRECTS: usize = 3;
/// The largest token response or error body read.
const SMALL_BODY: u64 = 64 << 10;

/// Why an exchange with a registry failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A URL the registry named (a redirect, an upload location, a token
    /// realm) is not HTTPS, or does not parse.
    #[error("the registry named `{url}`: {problem}")]
    BadUrl {
        /// The URL as named.
        url: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A redirect or token realm on a host the policy may not pull from.
    #[error("the registry sent the client on to {host}, which is not an allowed registry")]
    HostNotAllowed {
        /// The host it named.
        host: String,
    },
    /// More redirects than [`MAX_REDIRECTS`].
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    /// Connecting, TLS or HTTP failed.
    #[error("cannot reach {host}: {source}")]
    Unreachable {
        /// The host.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// A body larger than the caller allows.
    #[error("the registry sent {}{size} bytes, more than the {limit} allowed", if *.at_least { "over " } else { "" })]
    TooLarge {
        /// Its declared size, or the bytes read when it went past.
        size: u64,
        /// True when `size` is a lower bound.
        at_least: bool,
        /// The cap.
        limit: u64,
    },
    /// The registry asked for credentials and none were given, or refused
    /// the ones given.
    #[error("the registry refused {}: {status}", if *.with_credentials { "the pull secret's credentials" } else { "an anonymous request (no pull secret names it)" })]
    Unauthorized {
        /// 401 or 403.
        status: StatusCode,
        /// Whether credentials were sent.
        with_credentials: bool,
    },
    /// The registry's authentication challenge cannot be answered.
    #[error("the registry's challenge `{0}` is not Basic or Bearer")]
    Challenge(String),
    /// The token service did not answer with a token.
    #[error("the token service did not answer with a token: {0}")]
    Token(String),
}

/// Trust and timeouts of the registry client.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Certificate authorities trusted besides the web's.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Time to connect and finish the TLS handshake.
    pub connect_timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            extra_roots: Vec::new(),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A registry client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    tls: tokio_rustls::TlsConnector,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// An answer, its body read within its cap.
#[derive(Debug)]
pub struct Response {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Response {
    /// The `Content-Type` without parameters.
    #[must_use]
    pub fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map_or("", |value| value.split(';').next().unwrap_or("").trim())
    }
}

/// One request to send: where, what, and what its answer may be.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// `GET`, `HEAD`, `POST`, `PUT`.
    pub method: Method,
    /// `https://host/path?query`.
    pub uri: Uri,
    /// `Accept`, if any.
    pub accept: &'a [&'a str],
    /// `Content-Type` of the body, if any.
    pub content_type: Option<&'a str>,
    /// The body.
    pub body: Bytes,
    /// The largest answer body read.
    pub limit: u64,
}

/// The hosts a session may reach: the request's own, a redirect's, a
/// token realm's (`host` or `host:port`).
#[derive(Debug, Clone, Copy)]
pub enum Hosts<'a> {
    /// One registry.
    Only(&'a str),
    /// The registries of a grant's repository prefixes.
    Of(&'a [Prefix]),
}

impl Hosts<'_> {
    fn allow(self, host: &str) -> bool {
        match self {
            Self::Only(registry) => registry.eq_ignore_ascii_case(host),
            Self::Of(prefixes) => prefixes
                .iter()
                .any(|prefix| prefix.registry().eq_ignore_ascii_case(host)),
        }
    }
}

/// Who the client is to a registry, and where it may be sent.
#[derive(Debug)]
pub struct Session<'a> {
    /// The credentials for this registry, if any.
    pub credentials: Option<&'a Basic>,
    /// Where it may be sent.
    pub hosts: Hosts<'a>,
    /// The `Authorization` earned so far (a bearer token, or Basic).
    pub authorization: Option<HeaderValue>,
}

impl<'a> Session<'a> {
    /// A session with `registry` alone, as `credentials`.
    #[must_use]
    pub fn with(registry: &'a str, credentials: Option<&'a Basic>) -> Self {
        Self {
            credentials,
            hosts: Hosts::Only(registry),
            authorization: None,
        }
    }
}

impl Client {
    /// A client trusting the web's roots and `config.extra_roots`.
    ///
    /// # Errors
    ///
    /// A root rustls does not take.
    pub fn new(config: &ClientConfig) -> Result<Self, rustls::Error> {
        Ok(Self {
            tls: crate::tls::connector(&config.extra_roots)?,
            connect_timeout: config.connect_timeout,
        })
    }

    /// Sends `call` as `session` allows: answers a 401 challenge once
    /// (Basic, or a bearer token from the realm it names), follows
    /// redirects to allowed hosts (credentials only to the first host).
    ///
    /// # Errors
    ///
    /// [`ClientError`]; an HTTP error status is an `Ok` response.
    pub async fn send(
        &self,
        session: &mut Session<'_>,
        call: Call<'_>,
    ) -> Result<Response, ClientError> {
        let host = authority(&call.uri)?;
        if !session.hosts.allow(&host) {
            return Err(ClientError::HostNotAllowed { host });
        }
        let mut response = self.follow(session, &call).await?;
        if response.status == StatusCode::UNAUTHORIZED && session.authorization.is_none() {
            session.authorization = Some(self.answer(session, &response).await?);
            response = self.follow(session, &call).await?;
        }
        if matches!(
            response.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            return Err(ClientError::Unauthorized {
                status: response.status,
                with_credentials: session.credentials.is_some(),
            });
        }
        Ok(response)
    }

    /// One request and its redirects.
    async fn follow(
        &self,
        session: &Session<'_>,
        call: &Call<'_>,
    ) -> Result<Response, ClientError> {
        let origin = authority(&call.uri)?;
        let mut uri = call.uri.clone();
        for _ in 0..=MAX_REDIRECTS {
            let here = authority(&uri)?;
            let authorization = if here == origin {
                session.authorization.clone()
            } else {
                None
            };
            let response = self.exchange(call, &uri, authorization).await?;
            if !response.status.is_redirection() || call.method != Method::GET {
                return Ok(response);
            }
            let location = response
                .headers
                .get(LOCATION)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            uri = resolve(&uri, location)?;
            let host = authority(&uri)?;
            if !session.hosts.allow(&host) {
                return Err(ClientError::HostNotAllowed { host });
            }
        }
        Err(ClientError::TooManyRedirects)
    }

    /// The `Authorization` that answers a 401's challenge.
    async fn answer(
        &self,
        session: &Session<'_>,
        response: &Response,
    ) -> Result<HeaderValue, ClientError> {
        let challenge = response
            .headers
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            let Some(credentials) = session.credentials else {
                return Err(ClientError::Unauthorized {
                    status: response.status,
                    with_credentials: false,
                });
            };
            return Ok(basic(credentials));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(ClientError::Challenge(super::shown(challenge)));
        }
        let params = challenge_params(params);
        let realm = params
            .iter()
            .find(|(key, _)| key == "realm")
            .map(|(_, value)| value.as_str())
            .ok_or_else(|| ClientError::Challenge(super::shown(challenge)))?;
        let mut uri = parse_https(realm)?;
        let host = authority(&uri)?;
        if !session.hosts.allow(&host) {
            return Err(ClientError::HostNotAllowed { host });
        }
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                params
                    .iter()
                    .filter(|(key, _)| key == "service" || key == "scope"),
            )
            .finish();
        if !query.is_empty() {
            uri = parse_https(&format!("{realm}?{query}"))?;
        }
        let call = Call {
            method: Method::GET,
            uri,
            accept: &["application/json"],
            content_type: None,
            body: Bytes::new(),
            limit: SMALL_BODY,
        };
        let token = self
            .exchange(&call, &call.uri, session.credentials.map(basic))
            .await?;
        if !token.status.is_success() {
            return Err(ClientError::Unauthorized {
                status: token.status,
                with_credentials: session.credentials.is_some(),
            });
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let parsed: Token = serde_json::from_slice(&token.body)
            .map_err(|_| ClientError::Token("the answer is not JSON".into()))?;
        let token = parsed
            .token
            .or(parsed.access_token)
            .ok_or_else(|| ClientError::Token("no `token` in the answer".into()))?;
        HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| ClientError::Token("the token is not a header value".into()))
    }

    /// One exchange on a connection of its own.
    async fn exchange(
        &self,
        call: &Call<'_>,
        uri: &Uri,
        authorization: Option<HeaderValue>,
    ) -> Result<Response, ClientError> {
        let host = authority(uri)?;
        let unreachable = |source: std::io::Error| ClientError::Unreachable {
            host: host.clone(),
            source,
        };
        let (name, port) = split_host(uri)?;
        let connect = async {
            let tcp = TcpStream::connect((name.as_str(), port)).await?;
            // A request's headers and body go out as separate writes: with
            // Nagle's algorithm the second waits for the delayed ACK of the
            // first (40 ms a request on Linux).
            tcp.set_nodelay(true)?;
            let server = ServerName::try_from(name.trim_matches(['[', ']']).to_owned())
                .map_err(std::io::Error::other)?;
            self.tls.connect(server, tcp).await
        };
        let stream = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| unreachable(std::io::ErrorKind::TimedOut.into()))?
            .map_err(unreachable)?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| unreachable(std::io::Error::other(error)))?;
        tokio::spawn(connection);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = Request::builder()
            .method(call.method.clone())
            .uri(path)
            .header(HOST, host.as_str())
            .header(CONTENT_LENGTH, call.body.len());
        if !call.accept.is_empty() {
            request = request.header(ACCEPT, call.accept.join(", "));
        }
        if let Some(content_type) = call.content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        let request = request
            .body(Full::new(call.body.clone()))
            .map_err(|error| unreachable(std::io::Error::other(error)))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| unreachable(std::io::Error::other(error)))?;
        let (parts, body) = response.into_parts();
        let limit = if parts.status.is_success() {
            call.limit
        } else {
            SMALL_BODY
        };
        let body = read_capped(body, &parts.headers, limit, &unreachable).await?;
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Reads `body` while it stays within `limit`; a declared length over it
/// is refused before reading.
async fn read_capped(
    mut body: hyper::body::Incoming,
    headers: &HeaderMap,
    limit: u64,
    unreachable: &impl Fn(std::io::Error) -> ClientError,
) -> Result<Bytes, ClientError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if let Some(size) = declared.filter(|size| *size > limit) {
        return Err(ClientError::TooLarge {
            size,
            at_least: false,
            limit,
        });
    }
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| unreachable(std::io::Error::other(error)))?;
        if let Ok(data) = frame.into_data() {
            let size = (read.len() + data.len()) as u64;
            if size > limit {
                return Err(ClientError::TooLarge {
                    size,
                    at_least: true,
                    limit,
                });
            }
            read.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(read))
}

/// `Basic base64(user:password)`.
fn basic(credentials: &Basic) -> HeaderValue {
    let token = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", credentials.username, credentials.password));
    let mut value =
        HeaderValue::try_from(format!("Basic {token}")).unwrap_or(HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

/// `key="value", key=value` pairs of a challenge.
fn challenge_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            quoted.split_once('"').unwrap_or((quoted, ""))
        } else {
            after.split_once(',').unwrap_or((after, ""))
        };
        params.push((key, value.to_owned()));
        rest = next.trim_start_matches([',', ' ']);
    }
    params
}

/// `https://…` parsed.
fn parse_https(text: &str) -> Result<Uri, ClientError> {
    let bad = |problem| ClientError::BadUrl {
        url: super::shown(text),
        problem,
    };
    let uri: Uri = text.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme() != Some(&http::uri::Scheme::HTTPS) {
        return Err(bad("only HTTPS is used"));
    }
    if uri.authority().is_none() {
        return Err(bad("no host"));
    }
    Ok(uri)
}

/// `location` relative to `base`.
fn resolve(base: &Uri, location: &str) -> Result<Uri, ClientError> {
    if location.starts_with('/') && !location.starts_with("//") {
        let authority = authority(base)?;
        return parse_https(&format!("https://{authority}{location}"));
    }
    parse_https(location)
}

/// `host` or `host:port` of an HTTPS URL, lowercase, without a default port.
fn authority(uri: &Uri) -> Result<String, ClientError> {
    let authority = uri.authority().ok_or_else(|| ClientError::BadUrl {
        url: super::shown(&uri.to_string()),
        problem: "no host",
    })?;
    let host = authority.host().to_ascii_lowercase();
    Ok(match authority.port_u16() {
        Some(port) if port != 443 => format!("{host}:{port}"),
        _ => host,
    })
}

/// The host to connect to and its port.
fn split_host(uri: &Uri) -> Result<(String, u16), ClientError> {
    let authority = uri.authority().ok_or_else(|| ClientError::BadUrl {
        url: super::shown(&uri.to_string()),
        problem: "no host",
    })?;
    Ok((
        authority.host().to_owned(),
        authority.port_u16().unwrap_or(443),
    ))
}

/// The URL of `path` on `registry` (`host[:port]`).
///
/// # Errors
///
/// A registry name that does not make a URL.
pub fn url(registry: &str, path: &str) -> Result<Uri, ClientError> {
    parse_https(&format!("https://{registry}{path}"))
}

/// A URL the registry named (an upload location), relative to `base`.
///
/// # Errors
///
/// Not HTTPS, or does not parse.
pub fn named(base: &Uri, location: &str) -> Result<Uri, ClientError> {
    resolve(base, location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_gives_its_realm_service_and_scope() {
        let params = challenge_params(
            r#"realm="https://auth.example.com/token",service="registry.example.com",scope="repository:team-a/fanout:pull""#,
        );
        assert_eq!(
            params,
            [
                ("realm".into(), "https://auth.example.com/token".into()),
                ("service".into(), "registry.example.com".into()),
                ("scope".into(), "repository:team-a/fanout:pull".into()),
            ]
        );
    }

    #[test]
    fn a_location_resolves_against_the_registry_and_only_https_is_followed() {
        let base: Uri = "https://registry.example.com:5000/v2/x/blobs/sha256:1"
            .parse()
            .expect("uri");
        let relative = resolve(&base, "/v2/x/blobs/uploads/abc?state=1").expect("relative");
        assert_eq!(
            relative.to_string(),
            "https://registry.example.com:5000/v2/x/blobs/uploads/abc?state=1"
        );
        assert_eq!(
            authority(&resolve(&base, "https://blobs.example.com/b").expect("absolute"))
                .expect("authority"),
            "blobs.example.com"
        );
        assert!(matches!(
            resolve(&base, "http://blobs.example.com/b"),
            Err(ClientError::BadUrl { .. })
        ));
        assert!(matches!(
            resolve(&base, "//blobs.example.com/b"),
            Err(ClientError::BadUrl { .. })
        ));
    }
}
