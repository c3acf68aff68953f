//! The host's HTTP client for policies' requests: resolve, check every
//! address before connecting, connect, verify TLS, one HTTP/1.1 exchange on
//! its own connection, bodies capped, everything bounded by the deadline
//! and each step by the guest's own timeout, if it set a tighter one.
//!
//! One connection per request: a policy makes a handful of requests per
//! call, and a pool shared between calls would let one call's connection
//! carry another's credentials or state.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, Uri};
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use wasmtime_wasi_http::{Error, WasiBody};

use super::address::Restricted;
use super::body::{Bounded, request_error};
use super::origin::{Host, Origin, OriginPattern, Scheme};
use super::timeouts::{Timeouts, bound};
use super::{Refusal, Tally};

/// How the host's client trusts servers.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// Certificate authorities trusted besides the web's (Mozilla's roots,
    /// built in): a company CA, or a test's.
    pub extra_roots: Vec<CertificateDer<'static>>,
}

/// The client every call's requests go through. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// A root the client could not take.
#[derive(Debug, thiserror::Error)]
#[error("cannot trust the configured certificate authority")]
pub struct RootError(#[source] rustls::Error);

impl Client {
    /// A client trusting the web's roots and `config.extra_roots`.
    pub fn new(config: &ClientConfig) -> Result<Self, RootError> {
        Ok(Self {
            tls: crate::tls::connector(&config.extra_roots).map_err(RootError)?,
        })
    }
}

/// One admitted request, and what bounds it.
pub(crate) struct Exchange {
    pub(crate) origin: Origin,
    /// The origin as the host's log shows it, credentials redacted.
    pub(crate) shown: String,
    /// The grant's pattern that admitted it: it decides which addresses
    /// are named explicitly.
    pub(crate) pattern: OriginPattern,
    pub(crate) request: Request<WasiBody>,
    pub(crate) request_limit: u64,
    pub(crate) response_limit: u64,
    pub(crate) deadline: Instant,
    pub(crate) timeouts: Timeouts,
    pub(crate) tally: Arc<Tally>,
    /// `policy` and `namespace/name` of the DataJob, for the log.
    pub(crate) call: Arc<(Arc<str>, String)>,
    /// The policy's concurrency slot, held until the connection closes.
    pub(crate) permit: tokio::sync::OwnedSemaphorePermit,
}

/// The response, and the future that drives the connection until the
/// body is read.
pub(crate) type Sent = (
    Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

impl Client {
    /// Sends the request; every step ends at the exchange's deadline.
    pub(crate) async fn send(self, exchange: Exchange) -> Result<Sent, Error> {
        let deadline = exchange.deadline;
        let call = Arc::clone(&exchange.call);
        let origin = exchange.shown.clone();
        match tokio::time::timeout_at(deadline, self.exchange(exchange)).await {
            Ok(Ok(sent)) => Ok(sent),
            Ok(Err(error)) => {
                tracing::info!(target: "policyhost::outbound", policy = %call.0, job = %call.1, %origin, %error, "outbound request failed");
                Err(error)
            }
            Err(_) => {
                tracing::info!(target: "policyhost::outbound", policy = %call.0, job = %call.1, %origin, "outbound request ran into the call's network deadline");
                Err(Error::ConnectionTimeout)
            }
        }
    }

    async fn exchange(self, exchange: Exchange) -> Result<Sent, Error> {
        let Exchange {
            origin,
            shown,
            pattern,
            mut request,
            request_limit,
            response_limit,
            deadline,
            timeouts,
            tally,
            call,
            permit,
        } = exchange;
        let stream = within(
            deadline,
            timeouts.connect,
            Error::ConnectionTimeout,
            self.open(&origin, &shown, &pattern, &tally, &call),
        )
        .await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let mut connection = Box::pin(connection);
        // The request line carries the path only: the origin is the connection's.
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str)
            .to_owned();
        *request.uri_mut() = Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;
        let request =
            request.map(|body| Bounded::request(body, request_limit, deadline).boxed_unsync());
        let answered = async {
            let mut send = pin!(sender.send_request(request));
            let response = tokio::select! {
                response = &mut send => response.map_err(request_error)?,
                closed = &mut connection => {
                    closed.map_err(request_error)?;
                    send.await.map_err(request_error)?
                }
            };
            Ok(response)
        };
        let response = within(
            deadline,
            timeouts.first_byte,
            Error::ConnectionReadTimeout,
            answered,
        )
        .await?;
        let response = response.map(|body| {
            Bounded::response(body, response_limit, deadline, timeouts.between_bytes).boxed_unsync()
        });
        let drive = async move {
            let closed = connection.await;
            drop(permit);
            closed.map_err(Error::from)
        };
        Ok((response, Box::new(drive)))
    }

    /// A connection to the origin, over TLS for `https`, at an address the
    /// grant allows.
    async fn open(
        &self,
        origin: &Origin,
        shown: &str,
        pattern: &OriginPattern,
        tally: &Tally,
        call: &(Arc<str>, String),
    ) -> Result<Box<dyn Stream>, Error> {
        let addresses = resolve(origin).await?;
        let allowed = allowed_addresses(addresses, shown, pattern, tally, call)?;
        let tcp = connect(&allowed, origin.port).await?;
        tally.sent();
        Ok(match origin.scheme {
            Scheme::Http => Box::new(tcp),
            Scheme::Https => Box::new(self.tls(origin, tcp).await?),
        })
    }

    async fn tls(
        &self,
        origin: &Origin,
        tcp: TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
        let name = match &origin.host {
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
            Host::Name(name) => {
                ServerName::try_from(name.clone()).map_err(|_| Error::HttpRequestUriInvalid)?
            }
        };
        self.tls.connect(name, tcp).await.map_err(tls_error)
    }
}

/// `step`, ended with `error` after the guest's `timeout` if it set one;
/// without one, the deadline over the whole exchange ends it.
async fn within<T>(
    deadline: Instant,
    timeout: Option<Duration>,
    error: Error,
    step: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match timeout {
        None => step.await,
        Some(timeout) => tokio::time::timeout_at(bound(deadline, Some(timeout)), step)
            .await
            .map_err(|_| error)?,
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// Of the addresses an origin's host resolved to, those the client may
/// connect to: every unrestricted one, and a restricted one only if the
/// grant's `pattern` names it. None left is a refusal, counted and logged
/// (the origin as `shown`).
fn allowed_addresses(
    addresses: Vec<IpAddr>,
    origin: &str,
    pattern: &OriginPattern,
    tally: &Tally,
    call: &(Arc<str>, String),
) -> Result<Vec<IpAddr>, Error> {
    let (allowed, restricted): (Vec<IpAddr>, Vec<IpAddr>) = addresses
        .into_iter()
        .partition(|ip| Restricted::of(*ip).is_none() || pattern.names_address(*ip));
    if allowed.is_empty() {
        let range = restricted.first().and_then(|ip| Restricted::of(*ip));
        tally.refused(Refusal::Address);
        tracing::warn!(
            target: "policyhost::outbound",
            policy = %call.0, job = %call.1, %origin,
            addresses = ?restricted, range = range.map(Restricted::as_str),
            reason = Refusal::Address.as_str(),
            "outbound request refused: the name resolves to restricted addresses the grant does not name"
        );
        return Err(Error::DestinationIpProhibited);
    }
    Ok(allowed)
}

/// The addresses of the origin's host: itself for an IP literal.
async fn resolve(origin: &Origin) -> Result<Vec<IpAddr>, Error> {
    match &origin.host {
        Host::Ip(ip) => Ok(vec![*ip]),
        Host::Name(name) => {
            let found = tokio::net::lookup_host((name.as_str(), origin.port))
                .await
                .map_err(|error| Error::DnsError {
                    rcode: Some(error.to_string()),
                    info_code: None,
                })?;
            let mut addresses: Vec<IpAddr> = found.map(|address| address.ip()).collect();
            addresses.dedup();
            if addresses.is_empty() {
                return Err(Error::DestinationNotFound);
            }
            Ok(addresses)
        }
    }
}

/// A connection to the first address that answers, of those checked.
async fn connect(addresses: &[IpAddr], port: u16) -> Result<TcpStream, Error> {
    let mut last = None;
    for ip in addresses {
        match TcpStream::connect(SocketAddr::new(*ip, port)).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(match last.map(|error| error.kind()) {
        Some(io::ErrorKind::ConnectionRefused) | None => Error::ConnectionRefused,
        Some(io::ErrorKind::TimedOut) => Error::ConnectionTimeout,
        Some(_) => Error::DestinationUnavailable,
    })
}

/// A certificate the client does not trust is the guest's
/// `TLS-certificate-error`; anything else a protocol error.
fn tls_error(error: io::Error) -> Error {
    let certificate = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|inner| matches!(inner, rustls::Error::InvalidCertificate(_)));
    if certificate {
        Error::TlsCertificateError
    } else {
        Error::TlsProtocolError
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::Refusal;

    fn allowed(addresses: &[&str], pattern: &str) -> (Result<Vec<IpAddr>, Error>, Tally) {
        let tally = Tally::default();
        let origin = "https://db.internal.example:443";
        let pattern = OriginPattern::parse(pattern).expect("pattern");
        let call = (Arc::from("p"), "ns/job".to_owned());
        let addresses = addresses
            .iter()
            .map(|a| a.parse().expect("address"))
            .collect();
        let result = allowed_addresses(addresses, origin, &pattern, &tally, &call);
        (result, tally)
    }

    #[test]
    fn a_granted_name_that_resolves_to_a_private_address_is_refused_and_counted() {
        for private in [
            "10.0.0.5",
            "192.168.1.2",
            "172.16.0.9",
            "fd00::1",
            "169.254.169.254",
        ] {
            let (result, tally) = allowed(&[private], "https://db.internal.example");
            assert!(
                matches!(result, Err(Error::DestinationIpProhibited)),
                "{private}: {result:?}"
            );
            assert_eq!(tally.report().refused(Refusal::Address), 1, "{private}");
        }
        // Of a public and a private answer, only the public one is dialled.
        let (result, tally) = allowed(&["10.0.0.5", "93.184.215.14"], "https://*.internal.example");
        assert_eq!(
            result.expect("allowed"),
            ["93.184.215.14".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(tally.report().refused(Refusal::Address), 0);
    }
}
