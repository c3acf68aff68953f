//! Fault injection on any cluster: a proxy between an operator and its API
//! server that answers the requests a rule names with an error `Status`
//! instead of passing them on, holds the requests another rule names until
//! told to let them go (so a test can act between the operator's requests),
//! cuts open watches mid-stream when told, and records what it refused and
//! what it passed on. On devcluster and on a
//! real kube-apiserver alike, only the operator behind the proxy sees the
//! faults; the test's own client goes straight to the server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use http::{Method, StatusCode};
use tokio::task::JoinHandle;

/// Requests to refuse: a verb on a resource (any subresource), with a code.
#[derive(Debug, Clone)]
pub struct Refuse {
    /// `get`, `list`, `watch`, `create`, `update`, `patch` or `delete`.
    pub verb: &'static str,
    /// The plural resource, e.g. `datajobs`.
    pub resource: &'static str,
    /// The HTTP status code answered, e.g. 409.
    pub code: u16,
}

impl Refuse {
    /// Every request, answered with `code`: the client is cut off.
    pub fn everything(code: u16) -> Self {
        Self {
            verb: "*",
            resource: "*",
            code,
        }
    }

    fn matches(&self, target: &Target) -> bool {
        (self.verb == "*" || self.verb == target.verb)
            && (self.resource == "*" || self.resource == target.resource)
    }
}

/// A request, as the authorizer would name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

struct Inner {
    upstream: kube::Client,
    rules: Mutex<Vec<Refuse>>,
    /// Requests matching these wait while `gate` is closed (`false`).
    holds: Mutex<Vec<Refuse>>,
    gate: tokio::sync::watch::Sender<bool>,
    held: Mutex<Vec<Target>>,
    refused: Mutex<Vec<Target>>,
    passed: Mutex<Vec<Target>>,
    /// Bumped to end every watch open at that moment; each open watch holds
    /// a receiver.
    cuts: tokio::sync::watch::Sender<u64>,
}

/// The running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 and passes requests on to `upstream`'s cluster,
    /// with `upstream`'s credentials.
    pub async fn start(upstream: kube::Config) -> Self {
        let inner = Arc::new(Inner {
            upstream: kube::Client::try_from(upstream).expect("a client of the upstream"),
            rules: Mutex::new(Vec::new()),
            holds: Mutex::new(Vec::new()),
            gate: tokio::sync::watch::Sender::new(true),
            held: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            passed: Mutex::new(Vec::new()),
            cuts: tokio::sync::watch::Sender::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&inner));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, inner, task }
    }

    /// A client configuration that reaches the cluster through the proxy.
    pub fn config(&self) -> kube::Config {
        let url = format!("http://{}", self.addr).parse().expect("a URL");
        kube::Config::new(url)
    }

    /// Writes a kubeconfig that reaches the cluster through the proxy, for an
    /// operator process.
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n",
            self.addr
        );
        std::fs::write(path, text).expect("write the proxy's kubeconfig");
    }

    /// Refuses the requests `rule` names from now on.
    pub fn refuse(&self, rule: Refuse) {
        lock(&self.inner.rules).push(rule);
    }

    /// Holds the requests `rule` names (its code is unused) until
    /// [`release`](Self::release).
    pub fn hold(&self, rule: Refuse) {
        lock(&self.inner.holds).push(rule);
        self.inner.gate.send_replace(false);
    }

    /// The requests held so far (waiting, or let go since).
    pub fn held(&self) -> Vec<Target> {
        lock(&self.inner.held).clone()
    }

    /// Lets every held request go on, and holds nothing from now on.
    pub fn release(&self) {
        lock(&self.inner.holds).clear();
        self.inner.gate.send_replace(true);
    }

    /// Passes every request on again.
    pub fn clear(&self) {
        lock(&self.inner.rules).clear();
    }

    /// The requests refused so far.
    pub fn refused(&self) -> Vec<Target> {
        lock(&self.inner.refused).clone()
    }

    /// The requests passed on so far.
    pub fn passed(&self) -> Vec<Target> {
        lock(&self.inner.passed).clone()
    }

    /// Ends every watch open now, mid-stream, as a dropped connection or an
    /// API server restart would; returns how many it cut.
    pub fn cut_watches(&self) -> usize {
        let open = self.inner.cuts.receiver_count();
        self.inner.cuts.send_modify(|n| *n += 1);
        open
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn forward(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let target = Target::of(request.method(), request.uri());
    let refusal = lock(&inner.rules)
        .iter()
        .find(|rule| rule.matches(&target))
        .map(|rule| rule.code);
    if let Some(code) = refusal {
        lock(&inner.refused).push(target);
        return refused(code);
    }
    let hold = lock(&inner.holds).iter().any(|rule| rule.matches(&target));
    if hold {
        lock(&inner.held).push(target.clone());
        let mut gate = inner.gate.subscribe();
        // The sender lives as long as `inner`, which this request holds.
        let _ = gate.wait_for(|open| *open).await;
    }
    lock(&inner.passed).push(target.clone());
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut upstream = http::Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str),
    );
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(kube::client::Body::from(bytes.to_vec())) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    match inner.upstream.send(upstream).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let body = Body::new(body);
            if target.verb == "watch" {
                Response::from_parts(parts, until_cut(body, inner.cuts.subscribe()))
            } else {
                Response::from_parts(parts, body)
            }
        }
        Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    }
}

/// `body`, ended early by the next cut.
fn until_cut(body: Body, cut: tokio::sync::watch::Receiver<u64>) -> Body {
    let chunks = body.into_data_stream();
    Body::from_stream(futures::stream::unfold(
        (chunks, cut),
        |(mut chunks, mut cut)| async move {
            tokio::select! {
                chunk = chunks.next() => chunk.map(|chunk| (chunk, (chunks, cut))),
                _ = cut.changed() => None,
            }
        },
    ))
}

/// A `Status` with `code`, as the API server would answer it.
fn refused(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let reason = match code {
        409 => "Conflict",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("injected by the test's fault proxy: {code}"),
        "reason": reason,
        "code": code,
    });
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl Target {
    /// The verb and resource of a request to `/api/v1/...` or
    /// `/apis/<group>/<version>/...`.
    fn of(method: &Method, uri: &http::Uri) -> Self {
        let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
            _ => &[][..],
        };
        let rest = match rest {
            ["namespaces", _namespace, rest @ ..] if !rest.is_empty() => rest,
            rest => rest,
        };
        let part = |i: usize| rest.get(i).copied().unwrap_or_default().to_owned();
        let watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = match *method {
            Method::GET if watch => "watch",
            Method::GET if rest.len() < 2 => "list",
            Method::GET => "get",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if rest.len() < 2 => "deletecollection",
            Method::DELETE => "delete",
            _ => "",
        };
        Self {
            verb: verb.to_owned(),
            resource: part(0),
            name: part(1),
            subresource: part(2),
        }
    }
}
