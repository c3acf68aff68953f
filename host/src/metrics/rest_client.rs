//! client-go's `rest_client_requests_total`: each request the API client
//! sends, counted by status code, method and host when its answer (or its
//! failure) comes back.
//!
//! The layer sits innermost in the client, under the retry layer, so that
//! each attempt counts, as client-go counts each; a write the leader fence
//! refuses is never sent, and not counted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::{Layer, Service};

/// Labels of a request: client-go's.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The status code, or `<error>` when no answer came.
    code: String,
    /// The HTTP method.
    method: String,
    /// The API server's `host:port`.
    host: String,
}

/// Wraps services with [`CountRequests`].
#[derive(Clone)]
pub struct RequestsLayer {
    requests: Family<RequestLabels, Counter>,
    host: Arc<str>,
}

impl RequestsLayer {
    pub(super) fn new(requests: Family<RequestLabels, Counter>, host: &str) -> Self {
        Self {
            requests,
            host: host.into(),
        }
    }
}

impl<S> Layer<S> for RequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            requests: self.requests.clone(),
            host: Arc::clone(&self.host),
        }
    }
}

/// Counts each request `inner` answers.
#[derive(Clone)]
pub struct CountRequests<S> {
    inner: S,
    requests: Family<RequestLabels, Counter>,
    host: Arc<str>,
}

impl<S, B, R: 'static> Service<Request<B>> for CountRequests<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let requests = self.requests.clone();
        let host = Arc::clone(&self.host);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = answer.as_ref().map_or_else(
                |_| "<error>".to_owned(),
                |response| response.status().as_str().to_owned(),
            );
            let host = host.to_string();
            requests
                .get_or_create(&RequestLabels { code, method, host })
                .inc();
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::StatusCode;

    use super::*;

    /// Answers every request with the status its path names.
    #[derive(Clone)]
    struct Status;

    impl Service<Request<()>> for Status {
        type Response = Response<()>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<()>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            let code: u16 = request.uri().path()[1..].parse().expect("a status path");
            let mut response = Response::new(());
            *response.status_mut() = StatusCode::from_u16(code).expect("a status");
            std::future::ready(Ok(response))
        }
    }

    #[tokio::test]
    async fn each_answer_is_counted_by_code_method_and_host() {
        let family: Family<RequestLabels, Counter> = Family::default();
        let mut service = RequestsLayer::new(family.clone(), "10.0.0.1:6443").layer(Status);
        for (method, path) in [("GET", "/200"), ("GET", "/200"), ("PATCH", "/409")] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .expect("a request");
            service.call(request).await.expect("an answer");
        }
        let count = |code: &str, method: &str| {
            family
                .get_or_create(&RequestLabels {
                    code: code.to_owned(),
                    method: method.to_owned(),
                    host: "10.0.0.1:6443".to_owned(),
                })
                .get()
        };
        assert_eq!(count("200", "GET"), 2);
        assert_eq!(count("409", "PATCH"), 1);
        assert_eq!(count("200", "PATCH"), 0);

        // No answer at all (a refused connection): `<error>`.
        let mut unreachable =
            RequestsLayer::new(family.clone(), "10.0.0.1:6443").layer(tower::service_fn(
                |_: Request<()>| async { Err::<Response<()>, _>("connection refused") },
            ));
        let request = Request::builder().uri("/").body(()).expect("a request");
        assert!(unreachable.call(request).await.is_err());
        assert_eq!(count("<error>", "GET"), 1);
    }
}
