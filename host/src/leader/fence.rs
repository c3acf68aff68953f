//! The write fence: a tower layer that refuses API writes unless this
//! replica leads, checked at the moment each request is handed on.
//!
//! Put it innermost in the client (before any buffer or throttle layer), so
//! a write that waited for a throttle token is checked after its wait, right
//! before it goes to the connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request};
use tower::{Layer, Service};

use super::Leadership;

/// Why a write was not sent: this replica does not lead (or its last
/// renewal is older than the renew deadline).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{method} {path} not sent: this replica does not hold the leader Lease")]
pub struct Fenced {
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
}

/// Wraps services with [`Fence`].
#[derive(Clone)]
pub struct FenceLayer {
    leadership: Leadership,
    refused: Option<prometheus_client::metrics::counter::Counter>,
}

impl FenceLayer {
    /// Fences writes on `leadership`; `refused` counts the writes refused.
    #[must_use]
    pub fn new(
        leadership: Leadership,
        refused: Option<prometheus_client::metrics::counter::Counter>,
    ) -> Self {
        Self {
            leadership,
            refused,
        }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fence<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fence {
            inner,
            leadership: self.leadership.clone(),
            refused: self.refused.clone(),
        }
    }
}

/// Refuses write requests unless [`Leadership::permits_writes`].
#[derive(Clone)]
pub struct Fence<S> {
    inner: S,
    leadership: Leadership,
    refused: Option<prometheus_client::metrics::counter::Counter>,
}

/// True for the methods that change state on a Kubernetes API server.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, B> Service<Request<B>> for Fence<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
    S::Error: From<Fenced> + Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !is_write(request.method()) {
            return Box::pin(self.inner.call(request));
        }
        let fenced = Fenced {
            method: request.method().to_string(),
            path: request.uri().path().to_owned(),
        };
        let leadership = self.leadership.clone();
        let refused = self.refused.clone();
        // The HTTP client sends when its future is first polled, which may be
        // later than this call (a buffer hands the future back to the caller):
        // check then. An unpolled future dropped here sends nothing.
        let send = self.inner.call(request);
        Box::pin(async move {
            if !leadership.permits_writes() {
                if let Some(refused) = refused {
                    refused.inc();
                }
                tracing::debug!(method = %fenced.method, path = %fenced.path, "write fenced");
                return Err(S::Error::from(fenced));
            }
            send.await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;
    use tower::{BoxError, ServiceExt};

    use super::*;

    /// Accepts every request, answering its method.
    #[derive(Clone)]
    struct Echo;

    impl Service<Request<()>> for Echo {
        type Response = String;
        type Error = BoxError;
        type Future = std::future::Ready<Result<String, BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            std::future::ready(Ok(request.method().to_string()))
        }
    }

    fn request(method: Method) -> Request<()> {
        Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/a/pods/p")
            .body(())
            .expect("a valid request")
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_while_leading_and_reads_always() {
        let leadership = Leadership::elected();
        let refused = prometheus_client::metrics::counter::Counter::default();
        let mut fence = FenceLayer::new(leadership.clone(), Some(refused.clone())).layer(Echo);

        let read = fence
            .ready()
            .await
            .expect("ready")
            .call(request(Method::GET));
        assert_eq!(read.await.expect("a read passes"), "GET");
        let write = fence
            .ready()
            .await
            .expect("ready")
            .call(request(Method::PATCH));
        let error = write.await.expect_err("a follower's write is refused");
        let fenced = error.downcast_ref::<Fenced>().expect("a Fenced error");
        assert_eq!(
            fenced.to_string(),
            "PATCH /api/v1/namespaces/a/pods/p not sent: this replica does not hold the leader Lease"
        );
        assert_eq!(refused.get(), 1);

        leadership.lead_until(Instant::now() + Duration::from_secs(1), "me");
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            let write = fence.ready().await.expect("ready").call(request(method));
            assert!(write.await.is_ok(), "the leader writes");
        }

        // A write handed over in time but sent (polled) after the validity.
        let queued = fence
            .ready()
            .await
            .expect("ready")
            .call(request(Method::PUT));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(queued.await.is_err(), "checked when sent, not when queued");
        let write = fence
            .ready()
            .await
            .expect("ready")
            .call(request(Method::DELETE));
        assert!(
            write.await.is_err(),
            "no write once the validity has passed, though nobody said so"
        );
        assert_eq!(refused.get(), 3);
    }
}
