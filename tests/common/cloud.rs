//! A small storage "cloud" for the outbound tests: HTTPS on 127.0.0.1 with
//! a certificate of its own CA, a ledger of the buckets it holds (created,
//! deleted, by whom, when), and faults on demand: 5xx answers, stalls (at
//! random or of one bucket), connection resets, wrong content, slow and
//! endless bodies.
//!
//! Routes: `PUT|GET|DELETE /buckets/<name>` (the ledger; faults apply
//! here), `GET /stall` (never answers), `GET /drip` (headers, then one
//! byte, then nothing), `GET /big?bytes=N`, `GET /redirect` (302 to
//! another origin), `GET /private` (200 only with the expected
//! `authorization`, whose value it never sends back; `/buckets` too once
//! told so), `GET /echo` (sends the request's `authorization` back, as the
//! header `x-echo-authorization` and as the text body, the way an echo or
//! debug route does).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use rand::{RngExt as _, SeedableRng as _};
use rustls::pki_types::CertificateDer;

use super::https::{Body, Reset, Server};

/// How often the cloud misbehaves on `/buckets` requests (fractions of 1).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Answered 503 without acting.
    pub fail: f64,
    /// Never answered.
    pub stall: f64,
    /// The connection is dropped without an answer.
    pub reset: f64,
    /// 200 with a body that is not what was asked for (and no action).
    pub garbage: f64,
}

/// One bucket's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its owner, as the creating request said (the DataJob's uid).
    pub owner: String,
    /// When it was created.
    pub created: Instant,
    /// When it was deleted, if it was.
    pub deleted: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    ledger: BTreeMap<String, Record>,
    faults: Faults,
    requests: u64,
    token: Option<String>,
    bucket_token: Option<String>,
    authorized: u64,
    /// Buckets whose requests are never answered, and how many were held.
    stalled: BTreeMap<String, u64>,
    /// Each request's method, path and `Idempotency-Key`, in arrival order.
    keys: Vec<(String, String, Option<String>)>,
    /// Each request's path and `traceparent`, in arrival order.
    traceparents: Vec<(String, Option<String>)>,
    rng: Option<rand::rngs::StdRng>,
}

/// A running cloud; stopped when dropped.
pub struct Cloud {
    server: Server,
    state: Arc<Mutex<State>>,
}

impl Cloud {
    /// Starts a cloud on a free port of 127.0.0.1, trusted by `ca()`.
    pub fn start() -> Self {
        let state = Arc::new(Mutex::new(State {
            rng: Some(rand::rngs::StdRng::seed_from_u64(7)),
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        let server = Server::start("policyhost test cloud CA", move |request| {
            let state = Arc::clone(&shared);
            async move { answer(request, &state).await }
        });
        Self { server, state }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn origin(&self) -> String {
        format!("https://{}", self.server.address())
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.server.address().port()
    }

    /// The CA its certificate is signed by.
    pub fn ca(&self) -> CertificateDer<'static> {
        self.server.ca()
    }

    /// That CA as a PEM file in `dir` (for `--outbound-ca`).
    pub fn ca_file(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join(format!("cloud-{}-ca.pem", self.port()));
        std::fs::write(&path, self.server.ca_pem()).expect("write the cloud's CA");
        path
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Misbehaves from now on as `faults` say.
    pub fn set_faults(&self, faults: Faults) {
        self.with(|state| state.faults = faults);
    }

    /// Requires `authorization: <token>` on `/private`.
    pub fn require_token(&self, token: &str) {
        self.with(|state| state.token = Some(token.to_owned()));
    }

    /// Requires `authorization: <token>` on `/buckets` too (401 without).
    pub fn require_token_on_buckets(&self, token: &str) {
        self.with(|state| state.bucket_token = Some(token.to_owned()));
    }

    /// Never answers a request for bucket `name` from now on.
    pub fn stall_bucket(&self, name: &str) {
        self.with(|state| state.stalled.insert(name.to_owned(), 0));
    }

    /// How many requests for a stalled bucket `name` were held.
    pub fn held(&self, name: &str) -> u64 {
        self.with(|state| state.stalled.get(name).copied().unwrap_or_default())
    }

    /// Requests answered on `/private` with the right token.
    pub fn authorized(&self) -> u64 {
        self.with(|state| state.authorized)
    }

    /// The ledger.
    pub fn ledger(&self) -> BTreeMap<String, Record> {
        self.with(|state| state.ledger.clone())
    }

    /// Buckets alive now.
    pub fn live(&self) -> usize {
        self.with(|state| {
            state
                .ledger
                .values()
                .filter(|r| r.deleted.is_none())
                .count()
        })
    }

    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.with(|state| state.requests)
    }

    /// Each request's method, path and `Idempotency-Key`, in arrival order.
    pub fn idempotency_keys(&self) -> Vec<(String, String, Option<String>)> {
        self.with(|state| state.keys.clone())
    }

    /// Each request's path and `traceparent`, in arrival order.
    pub fn traceparents(&self) -> Vec<(String, Option<String>)> {
        self.with(|state| state.traceparents.clone())
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Full::new(body.into()).boxed())
        .expect("a response")
}

enum Fault {
    Fail,
    Stall,
    Reset,
    Garbage,
}

fn draw(state: &mut State) -> Option<Fault> {
    let faults = state.faults;
    let roll: f64 = state.rng.as_mut().map_or(1.0, |rng| rng.random());
    let mut edge = 0.0;
    for (share, fault) in [
        (faults.fail, Fault::Fail),
        (faults.stall, Fault::Stall),
        (faults.reset, Fault::Reset),
        (faults.garbage, Fault::Garbage),
    ] {
        edge += share;
        if roll < edge {
            return Some(fault);
        }
    }
    None
}

async fn answer(request: Request<Incoming>, state: &Mutex<State>) -> Result<Response<Body>, Reset> {
    let lock = || state.lock().unwrap_or_else(PoisonError::into_inner);
    lock().requests += 1;
    let path = request.uri().path().to_owned();
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    lock()
        .keys
        .push((request.method().to_string(), path.clone(), key));
    lock().traceparents.push((path.clone(), traceparent));
    let query = request.uri().query().unwrap_or_default().to_owned();
    if let Some(name) = path.strip_prefix("/buckets/") {
        let name = name.to_owned();
        let required = lock().bucket_token.clone();
        let sent = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if required.is_some() && sent != required.as_deref() {
            return Ok(text(StatusCode::UNAUTHORIZED, "no or wrong authorization"));
        }
        let fault = {
            let mut state = lock();
            match state.stalled.get_mut(&name) {
                Some(held) => {
                    *held += 1;
                    Some(Fault::Stall)
                }
                None => draw(&mut state),
            }
        };
        match fault {
            Some(Fault::Fail) => return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "try later")),
            Some(Fault::Stall) => std::future::pending::<()>().await,
            Some(Fault::Reset) => return Err(Reset),
            Some(Fault::Garbage) => return Ok(text(StatusCode::OK, "<html>not json</html>")),
            None => {}
        }
        let method = request.method().clone();
        let body = request
            .into_body()
            .collect()
            .await
            .map_err(|_| Reset)?
            .to_bytes();
        return Ok(bucket(&method, &name, &body, &mut lock()));
    }
    Ok(match path.as_str() {
        "/stall" => std::future::pending().await,
        "/drip" => {
            let first: Result<Frame<Bytes>, Infallible> = Ok(Frame::data(Bytes::from_static(b"x")));
            let frames = futures::StreamExt::chain(
                futures::stream::iter([first]),
                futures::stream::pending(),
            );
            Response::new(StreamBody::new(frames).boxed())
        }
        "/big" => {
            let bytes: usize = query
                .strip_prefix("bytes=")
                .and_then(|n| n.parse().ok())
                .unwrap_or(1 << 20);
            text(StatusCode::OK, vec![b'b'; bytes])
        }
        "/redirect" => Response::builder()
            .status(StatusCode::FOUND)
            .header("location", "https://example.invalid/")
            .body(Full::new(Bytes::new()).boxed())
            .expect("a response"),
        "/echo" => {
            let sent = request.headers().get("authorization").cloned();
            let mut response = Response::builder().status(StatusCode::OK);
            let mut body = Vec::new();
            if let Some(value) = sent {
                body = [b"authorization: ", value.as_bytes(), b"\n"].concat();
                response = response.header("x-echo-authorization", value);
            }
            response
                .body(Full::new(Bytes::from(body)).boxed())
                .expect("a response")
        }
        "/private" => {
            let sent = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let mut state = lock();
            if sent.is_some() && sent == state.token {
                state.authorized += 1;
                text(StatusCode::OK, "authorized")
            } else {
                text(StatusCode::UNAUTHORIZED, "no or wrong authorization")
            }
        }
        _ => text(StatusCode::NOT_FOUND, "no such route"),
    })
}

fn bucket(method: &http::Method, name: &str, body: &[u8], state: &mut State) -> Response<Body> {
    let live = state
        .ledger
        .get(name)
        .is_some_and(|record| record.deleted.is_none());
    match *method {
        http::Method::PUT => {
            let owner = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["owner"].as_str().map(str::to_owned))
                .unwrap_or_default();
            if live {
                return text(StatusCode::OK, format!(r#"{{"name":"{name}"}}"#));
            }
            state.ledger.insert(
                name.to_owned(),
                Record {
                    owner,
                    created: Instant::now(),
                    deleted: None,
                },
            );
            text(StatusCode::CREATED, format!(r#"{{"name":"{name}"}}"#))
        }
        http::Method::GET if live => text(StatusCode::OK, format!(r#"{{"name":"{name}"}}"#)),
        http::Method::DELETE if live => {
            if let Some(record) = state.ledger.get_mut(name) {
                record.deleted = Some(Instant::now());
            }
            text(StatusCode::NO_CONTENT, "")
        }
        http::Method::GET | http::Method::DELETE => text(StatusCode::NOT_FOUND, "no such bucket"),
        _ => text(StatusCode::METHOD_NOT_ALLOWED, ""),
    }
}
