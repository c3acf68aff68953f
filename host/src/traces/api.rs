//! A span for each request a pass sends to the API server: its verb,
//! resource, namespace and status code, and how often it was sent again.
//!
//! Two layers of the API client: [`RequestSpans`] outermost, so that the
//! span holds the wait for a write token and every retry, and [`Attempts`]
//! innermost, counting the requests that really left (a retry clones the
//! request with its extensions, so each attempt finds the same counter).
//! Requests outside a traced span (watches, Leases, the policies' loading)
//! get none.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tower::{Layer, Service};
use tracing::{Instrument as _, field};

use super::TARGET;

/// Wraps services with [`SpanRequests`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpans;

impl<S> Layer<S> for RequestSpans {
    type Service = SpanRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SpanRequests { inner }
    }
}

/// Wraps services with [`CountAttempts`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Attempts;

impl<S> Layer<S> for Attempts {
    type Service = CountAttempts<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountAttempts { inner }
    }
}

/// The attempts of one request so far.
#[derive(Debug, Clone, Default)]
struct Sent(Arc<AtomicU32>);

/// Opens a span for each request made within a traced span.
#[derive(Debug, Clone)]
pub struct SpanRequests<S> {
    inner: S,
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, R> Service<Request<B>> for SpanRequests<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Boxed<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if !super::context::is_traced(&tracing::Span::current()) {
            return Box::pin(self.inner.call(request));
        }
        let span = tracing::debug_span!(
            target: TARGET,
            "api request",
            "otel.name" = field::Empty,
            "otel.kind" = "client",
            "otel.status_code" = field::Empty,
            verb = field::Empty,
            resource = field::Empty,
            namespace = field::Empty,
            code = field::Empty,
            retries = field::Empty,
        );
        let target = Target::of(request.method(), request.uri(), is_apply(&request));
        span.record("otel.name", format!("{} {}", target.verb, target.resource));
        span.record("verb", target.verb);
        span.record("resource", target.resource.as_str());
        if let Some(namespace) = &target.namespace {
            span.record("namespace", namespace.as_str());
        }
        let sent = Sent::default();
        request.extensions_mut().insert(sent.clone());
        let answer = span.in_scope(|| self.inner.call(request));
        Box::pin(
            async move {
                let answer = answer.await;
                let span = tracing::Span::current();
                match &answer {
                    Ok(response) => {
                        span.record("code", response.status().as_u16());
                        if response.status().is_server_error() {
                            span.record("otel.status_code", "error");
                        }
                    }
                    Err(_) => {
                        span.record("otel.status_code", "error");
                    }
                }
                let attempts = sent.0.load(Ordering::Relaxed);
                span.record("retries", attempts.saturating_sub(1));
                answer
            }
            .instrument(span),
        )
    }
}

/// Counts each attempt of a request that carries a counter.
#[derive(Debug, Clone)]
pub struct CountAttempts<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for CountAttempts<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if let Some(sent) = request.extensions().get::<Sent>() {
            sent.0.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.call(request)
    }
}

/// True for a server-side apply (a patch of the apply content type).
fn is_apply<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/apply-patch"))
}

/// What a request acts on, as Kubernetes' audit log names it.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    verb: &'static str,
    /// The resource, with its subresource: `datajobs/status`.
    resource: String,
    namespace: Option<String>,
}

impl Target {
    /// Reads a request's path: `/api/v1/…` or `/apis/GROUP/VERSION/…`,
    /// then `namespaces/NS/` for a namespaced resource, then the resource,
    /// its name and a subresource.
    fn of(method: &Method, uri: &http::Uri, apply: bool) -> Self {
        let parts: Vec<&str> = uri.path().split('/').filter(|p| !p.is_empty()).collect();
        let rest = match parts.as_slice() {
            ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
            _ => &[][..],
        };
        let (namespace, rest) = match rest {
            ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
                (Some((*namespace).to_owned()), rest)
            }
            rest => (None, rest),
        };
        let named = rest.len() >= 2;
        let resource = match rest {
            [] => "namespaces".to_owned(),
            [resource] | [resource, _] => (*resource).to_owned(),
            [resource, _, sub, ..] => format!("{resource}/{sub}"),
        };
        let watch = uri.query().is_some_and(|q| {
            q.split('&')
                .any(|pair| pair == "watch=true" || pair == "watch=1")
        });
        let verb = match *method {
            Method::GET if watch => "watch",
            Method::GET if named => "get",
            Method::GET => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH if apply => "apply",
            Method::PATCH => "patch",
            Method::DELETE if named => "delete",
            Method::DELETE => "deletecollection",
            _ => "other",
        };
        Self {
            verb,
            resource,
            namespace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: Method, path: &str, apply: bool) -> (&'static str, String, Option<String>) {
        let uri: http::Uri = path.parse().expect("a path");
        let target = Target::of(&method, &uri, apply);
        (target.verb, target.resource, target.namespace)
    }

    #[test]
    fn verbs_and_resources_are_read_as_the_audit_log_names_them() {
        let ns = Some("team-a".to_owned());
        let cases = [
            (
                target(
                    Method::PATCH,
                    "/apis/policyhost.dev/v1alpha1/namespaces/team-a/datajobs/j1/status?fieldManager=policyhost",
                    true,
                ),
                ("apply", "datajobs/status".to_owned(), ns.clone()),
            ),
            (
                target(Method::POST, "/api/v1/namespaces/team-a/pods", false),
                ("create", "pods".to_owned(), ns.clone()),
            ),
            (
                target(Method::DELETE, "/api/v1/namespaces/team-a/pods/p1", false),
                ("delete", "pods".to_owned(), ns.clone()),
            ),
            (
                target(
                    Method::PATCH,
                    "/apis/policyhost.dev/v1alpha1/namespaces/team-a/datajobs/j1",
                    false,
                ),
                ("patch", "datajobs".to_owned(), ns.clone()),
            ),
            (
                target(
                    Method::GET,
                    "/api/v1/namespaces/team-a/pods?watch=true&labelSelector=a",
                    false,
                ),
                ("watch", "pods".to_owned(), ns),
            ),
            (
                target(Method::GET, "/api/v1/namespaces/team-a", false),
                ("get", "namespaces".to_owned(), None),
            ),
            (
                target(Method::GET, "/apis/coordination.k8s.io/v1/leases", false),
                ("list", "leases".to_owned(), None),
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[derive(Clone)]
    struct Echo;

    impl Service<Request<()>> for Echo {
        type Response = Response<()>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Response<()>, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok(Response::new(())))
        }
    }

    #[test]
    fn each_attempt_of_a_request_counts_once_on_its_shared_counter() {
        let mut service = Attempts.layer(Echo);
        let sent = Sent::default();
        for _ in 0..3 {
            let mut request = Request::new(());
            request.extensions_mut().insert(sent.clone());
            drop(service.call(request));
        }
        drop(service.call(Request::new(())));
        assert_eq!(sent.0.load(Ordering::Relaxed), 3);
    }
}
