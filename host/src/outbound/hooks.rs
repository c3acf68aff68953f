//! One call's side of `wasi:http`: the checks made before any connection
//! (origin, requests per call, concurrency), the credential headers, and
//! the hand-over to the [`Client`].

use std::future::{Future, ready};
use std::sync::Arc;
use std::time::Instant;

use http::Request;
use http::uri::Scheme as UriScheme;
use tracing::Instrument as _;
use tracing::instrument::WithSubscriber as _;
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpHooks, WasiHttpView,
};

use super::client::{Client, Exchange, Sent};
use super::origin::{Origin, Scheme};
use super::record::{Recorded, Recording, Slot, exchanges};
use super::replay::Fixtures;
use super::timeouts::Timeouts;
use super::{Outbound, OutboundReport, Refusal, Tally};
use crate::traces;

/// What a call's store holds for `wasi:http`. A call of a policy without a
/// grant allocates nothing here: its linker has no `wasi:http`, and were
/// anything to reach the hooks, [`Denied`] would refuse it.
/// Links `wasi:http/types` and `wasi:http/outgoing-handler` into `linker`,
/// each request through the call's [`CallHttp`] hooks (its view is
/// wasmtime-wasi-http's `WasiHttpView`).
pub(crate) fn add_to_linker<T: WasiHttpView + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(linker)
}

pub(crate) struct CallHttp {
    ctx: WasiHttpCtx,
    granted: Option<CallHooks>,
    denied: Denied,
}

pub(crate) struct CallHooks {
    outbound: Arc<Outbound>,
    answers: Answers,
    deadline: Instant,
    made: u32,
    tally: Arc<Tally>,
    recording: Recording,
    call: Arc<(Arc<str>, String)>,
    keys: Option<IdempotencyKeys>,
}

/// The `Idempotency-Key` of each request of a cleanup call: the same for
/// the same request however often the cleanup runs, on whichever replica,
/// so that a server that honours the header acts once on a step a
/// cleanup interrupted (by a crash, or a shard's move) sends again.
///
/// A request's key is the SHA-256 of the DataJob's uid, the method, the
/// URL and how many requests of the call went to that method and URL
/// before it: another request never shares it, whatever the cleanup did
/// before. Sent as the draft's structured-field string
/// (draft-ietf-httpapi-idempotency-key-header), and only where the
/// policy set none itself.
struct IdempotencyKeys {
    uid: String,
    sent: std::collections::HashMap<(http::Method, String), u32>,
}

/// The header a cleanup's requests carry.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

impl IdempotencyKeys {
    fn next(&mut self, method: &http::Method, url: &str) -> String {
        use sha2::{Digest as _, Sha256};
        let seen = self
            .sent
            .entry((method.clone(), url.to_owned()))
            .or_default();
        let mut hash = Sha256::new();
        for part in [
            self.uid.as_bytes(),
            method.as_str().as_bytes(),
            url.as_bytes(),
        ] {
            hash.update(part);
            hash.update([0]);
        }
        hash.update(seen.to_be_bytes());
        *seen += 1;
        let digest = hash.finalize();
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("\"{hex}\"")
    }
}

/// Who answers an admitted request.
enum Answers {
    /// The network, through the host's client.
    Network(Client),
    /// The version's fixtures (`policy test`, `policy run --http-fixtures`).
    Fixtures(Fixtures),
    /// The serving call's record, for a shadow call: a request it did not
    /// make is refused as [`Refusal::Shadow`].
    Served(Fixtures),
}

/// The hooks of a call without a grant: every request is denied.
struct Denied;

impl WasiHttpHooks for Denied {
    fn send_request(
        &mut self,
        _request: Request<WasiBody>,
        _options: Option<RequestOptions>,
        _guest_io: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Pending {
        Box::new(ready(Err(Error::HttpRequestDenied)))
    }
}

/// Who a call is, for the log: its policy and `namespace/name`; for a
/// cleanup, its DataJob's uid, which keys its requests' idempotency.
pub(crate) struct Caller {
    pub(crate) policy: Arc<str>,
    pub(crate) job: String,
    pub(crate) cleanup_of: Option<String>,
}

impl CallHttp {
    /// A call of a policy without a grant.
    pub(crate) fn none() -> Self {
        Self {
            ctx: WasiHttpCtx::new(),
            granted: None,
            denied: Denied,
        }
    }

    /// A call of `caller` under `outbound`, whose requests end at
    /// `deadline`: sent by `client`, or answered by the version's fixtures.
    pub(crate) fn granted(
        outbound: Arc<Outbound>,
        client: Client,
        deadline: Instant,
        caller: Caller,
    ) -> Self {
        let answers = match outbound.fixtures.clone() {
            Some(fixtures) => Answers::Fixtures(fixtures),
            None => Answers::Network(client),
        };
        Self::with(outbound, answers, deadline, caller)
    }

    /// A shadow call of a granted policy: no request leaves the host; one
    /// the serving call (its record `served`) made the same way gets its
    /// answer, any other is refused and counted.
    pub(crate) fn shadow(
        outbound: Arc<Outbound>,
        served: &[Recorded],
        deadline: Instant,
        caller: Caller,
    ) -> Self {
        let fixtures = Fixtures::default();
        fixtures.install(exchanges(served));
        Self::with(outbound, Answers::Served(fixtures), deadline, caller)
    }

    fn with(outbound: Arc<Outbound>, answers: Answers, deadline: Instant, caller: Caller) -> Self {
        Self {
            ctx: WasiHttpCtx::new(),
            granted: Some(CallHooks {
                outbound,
                answers,
                deadline,
                made: 0,
                tally: Arc::default(),
                recording: Recording::default(),
                call: Arc::new((caller.policy, caller.job)),
                keys: caller.cleanup_of.map(|uid| IdempotencyKeys {
                    uid,
                    sent: std::collections::HashMap::new(),
                }),
            }),
            denied: Denied,
        }
    }

    /// The requests the call made, and their answers.
    pub(crate) fn recorded(&self) -> Vec<Recorded> {
        self.granted
            .as_ref()
            .map(|hooks| hooks.recording.take())
            .unwrap_or_default()
    }

    /// The context and hooks `wasi:http` works with.
    pub(crate) fn parts(&mut self) -> (&mut WasiHttpCtx, &mut dyn WasiHttpHooks) {
        let hooks: &mut dyn WasiHttpHooks = match &mut self.granted {
            Some(hooks) => hooks,
            None => &mut self.denied,
        };
        (&mut self.ctx, hooks)
    }

    /// What the call did over HTTP.
    pub(crate) fn report(&self) -> OutboundReport {
        self.granted
            .as_ref()
            .map_or_else(OutboundReport::default, |hooks| hooks.tally.report())
    }
}

type Pending = Box<dyn Future<Output = Result<Sent, Error>> + Send>;

impl CallHooks {
    /// Admits the request, credentials added, or says why not.
    fn admit(
        &mut self,
        mut request: Request<WasiBody>,
        options: Option<&RequestOptions>,
    ) -> Result<Exchange, Rejected> {
        let outbound = &self.outbound;
        let uri = request.uri();
        let scheme = match uri.scheme() {
            Some(scheme) if *scheme == UriScheme::HTTPS => Scheme::Https,
            Some(scheme) if *scheme == UriScheme::HTTP => Scheme::Http,
            _ => return Err(Rejected::Invalid),
        };
        let origin = uri
            .authority()
            .and_then(|authority| Origin::of(scheme, authority.as_str()))
            .ok_or(Rejected::Invalid)?;
        let grant = outbound.grant();
        let Some(pattern) = grant.admitting(&origin) else {
            return Err(Rejected::Refused(Refusal::Origin, Some(origin)));
        };
        if self.made >= grant.requests_per_call {
            return Err(Rejected::Refused(Refusal::RequestsPerCall, Some(origin)));
        }
        let Some(permit) = outbound.slot() else {
            return Err(Rejected::Refused(Refusal::Concurrency, Some(origin)));
        };
        self.made += 1;
        if let Some(keys) = &mut self.keys
            && !request.headers().contains_key(IDEMPOTENCY_KEY)
        {
            let key = keys.next(request.method(), &request.uri().to_string());
            if let Ok(value) = http::HeaderValue::from_str(&key) {
                request.headers_mut().insert(IDEMPOTENCY_KEY, value);
            }
        }
        let headers = request.headers_mut();
        for (name, value) in outbound.headers_for(&origin) {
            headers.insert(name.clone(), value.clone());
        }
        let exchange = Exchange {
            pattern: pattern.clone(),
            shown: self.shown(&origin),
            origin,
            request,
            request_limit: grant.request_body_bytes,
            response_limit: grant.response_body_bytes,
            deadline: self.deadline.into(),
            timeouts: Timeouts::of(options),
            tally: Arc::clone(&self.tally),
            call: Arc::clone(&self.call),
            permit,
        };
        Ok(exchange)
    }

    /// `origin` as the host's log shows it: the policy chose it, and a
    /// name under a wildcard may carry a credential.
    fn shown(&self, origin: &Origin) -> String {
        let origin = origin.to_string();
        self.outbound.redactor().redact(&origin).into_owned()
    }

    fn refuse(&self, refusal: Refusal, origin: Option<&Origin>) -> Error {
        self.tally.refused(refusal);
        let origin = origin.map(|origin| self.shown(origin)).unwrap_or_default();
        let (policy, job) = &*self.call;
        tracing::warn!(
            target: "policyhost::outbound",
            %policy, %job, %origin, reason = refusal.as_str(),
            "outbound request refused"
        );
        match refusal {
            Refusal::Origin | Refusal::RequestsPerCall => Error::HttpRequestDenied,
            Refusal::Address => Error::DestinationIpProhibited,
            Refusal::Concurrency => Error::ConnectionLimitReached,
            Refusal::Shadow => Error::HttpRequestDenied,
        }
    }
}

enum Rejected {
    Refused(Refusal, Option<Origin>),
    /// Not an `http` or `https` URL with a host.
    Invalid,
}

impl WasiHttpHooks for CallHooks {
    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _guest_io: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Pending {
        let slot = self
            .recording
            .start(request.method(), request.uri().to_string());
        let sent: Pending = match self.admit(request, options.as_ref()) {
            Ok(mut exchange) => {
                if let Some(slot) = &slot {
                    exchange.request = slot.request(exchange.request);
                }
                match &self.answers {
                    Answers::Fixtures(fixtures) => Box::new(fixtures.clone().answer(
                        exchange.request,
                        exchange.request_limit,
                        None,
                    )),
                    Answers::Served(served) => Box::new(served.clone().answer(
                        exchange.request,
                        exchange.request_limit,
                        Some(Arc::clone(&self.tally)),
                    )),
                    // On the network runtime's threads, the exchange still
                    // logs within its span, to the call's subscriber.
                    Answers::Network(client) => {
                        let span = request_span(&mut exchange);
                        let sent = client.clone().send(exchange).instrument(span.clone());
                        Box::new(traced(span, sent).with_current_subscriber())
                    }
                }
            }
            Err(Rejected::Invalid) => Box::new(ready(Err(Error::HttpRequestUriInvalid))),
            Err(Rejected::Refused(refusal, origin)) => {
                Box::new(ready(Err(self.refuse(refusal, origin.as_ref()))))
            }
        };
        match slot {
            Some(slot) => Box::new(recorded(slot, sent)),
            None => sent,
        }
    }
}

/// The span of an admitted request that leaves the host: its origin (as
/// the log shows it) and method, never its path, query or headers, which
/// may carry what the policy was given. The request carries the span's
/// `traceparent`, so that the server's logs join the trace.
fn request_span(exchange: &mut Exchange) -> tracing::Span {
    if !traces::context::is_traced(&tracing::Span::current()) {
        return tracing::Span::none();
    }
    let method = exchange.request.method().clone();
    let span = tracing::debug_span!(
        target: traces::TARGET,
        "outbound request",
        "otel.name" = format_args!("outbound {method}"),
        "otel.kind" = "client",
        "otel.status_code" = tracing::field::Empty,
        origin = %exchange.shown,
        method = %method,
        status = tracing::field::Empty,
    );
    if let Some(value) = traces::context::traceparent(&span)
        .and_then(|value| http::HeaderValue::from_str(&value).ok())
    {
        exchange
            .request
            .headers_mut()
            .insert(traces::context::TRACEPARENT, value);
    }
    span
}

/// `sent`, its status (or failure) recorded on `span`.
async fn traced(
    span: tracing::Span,
    sent: impl Future<Output = Result<Sent, Error>>,
) -> Result<Sent, Error> {
    let result = sent.await;
    match &result {
        Ok((response, _)) => span.record("status", response.status().as_u16()),
        Err(_) => span.record("otel.status_code", "error"),
    };
    result
}

/// `sent`, its answer recorded in `slot`.
async fn recorded(slot: Slot, sent: Pending) -> Result<Sent, Error> {
    match Box::into_pin(sent).await {
        Ok((response, done)) => Ok((slot.response(response), done)),
        Err(error) => {
            slot.failed(&error);
            Err(error)
        }
    }
}
