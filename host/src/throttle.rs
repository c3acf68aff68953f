//! A client-side rate limit on API writes, as a tower layer for the kube client.
//!
//! Lesson four of the design: a reconcile storm (a policy swap re-queueing a
//! thousand DataJobs, say) must not turn into a write storm on the API server.
//! Every request that changes state waits for a token from one shared bucket
//! (`qps` tokens a second, up to `burst` at once), like client-go's
//! flowcontrol. Reads and watches are not limited: they are served from the
//! cache or are long-lived streams.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Method, Request};
use tower::{Layer, Service};

/// Shares one token bucket between every service it wraps.
#[derive(Clone)]
pub struct WriteThrottleLayer {
    bucket: Arc<DefaultDirectRateLimiter>,
}

impl WriteThrottleLayer {
    /// Allows `qps` writes a second on average and `burst` at once.
    #[must_use]
    pub fn new(qps: NonZeroU32, burst: NonZeroU32) -> Self {
        Self::with_quota(Quota::per_second(qps).allow_burst(burst))
    }

    fn with_quota(quota: Quota) -> Self {
        Self {
            bucket: Arc::new(RateLimiter::direct(quota)),
        }
    }
}

impl<S> Layer<S> for WriteThrottleLayer {
    type Service = WriteThrottle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteThrottle {
            inner,
            bucket: Arc::clone(&self.bucket),
        }
    }
}

/// Delays write requests until the shared bucket has a token.
///
/// The inner service must be `Clone` (put a `tower::buffer::Buffer` under it
/// if it is not): a request is only handed to it after its wait.
#[derive(Clone)]
pub struct WriteThrottle<S> {
    inner: S,
    bucket: Arc<DefaultDirectRateLimiter>,
}

/// True for the methods that change state on a Kubernetes API server.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, B> Service<Request<B>> for WriteThrottle<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The instance that was polled ready takes the request; a fresh clone
        // stays behind for the next caller (the tower idiom for delayed calls).
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        let bucket = is_write(request.method()).then(|| Arc::clone(&self.bucket));
        Box::pin(async move {
            if let Some(bucket) = bucket {
                bucket.until_ready().await;
            }
            ready.call(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::{Duration, Instant};

    use tower::ServiceExt;

    use super::*;

    fn request(method: Method) -> Request<()> {
        Request::builder()
            .method(method)
            .uri("/api/v1/pods")
            .body(())
            .expect("a valid request")
    }

    /// A service that accepts every request at once.
    #[derive(Clone)]
    struct Accept;

    impl Service<Request<()>> for Accept {
        type Response = ();
        type Error = Infallible;
        type Future = std::future::Ready<Result<(), Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }

    async fn send(service: &mut WriteThrottle<Accept>, method: Method) {
        let ready = service.ready().await.expect("infallible");
        ready.call(request(method)).await.expect("infallible");
    }

    #[test]
    fn only_reads_are_exempt() {
        assert!(!is_write(&Method::GET));
        assert!(!is_write(&Method::HEAD));
        assert!(is_write(&Method::POST));
        assert!(is_write(&Method::PUT));
        assert!(is_write(&Method::PATCH));
        assert!(is_write(&Method::DELETE));
    }

    #[tokio::test]
    async fn writes_beyond_the_burst_wait_for_tokens() {
        let one = NonZeroU32::MIN;
        let qps = NonZeroU32::new(20).expect("non-zero");
        let layer = WriteThrottleLayer::new(qps, one.saturating_add(4));
        let mut service = layer.layer(Accept);
        let start = Instant::now();
        // A burst of 5, then 10 more at 20/s: at least 10 × 50 ms minus slack.
        for _ in 0..15 {
            send(&mut service, Method::PATCH).await;
        }
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(450),
            "15 writes at burst 5 and 20 qps took only {elapsed:?}"
        );
    }

    #[tokio::test]
    async fn reads_pass_while_the_write_bucket_is_empty() {
        // One write an hour: after the first, any write would wait an hour.
        let layer = WriteThrottleLayer::with_quota(Quota::per_hour(NonZeroU32::MIN));
        let mut service = layer.layer(Accept);
        send(&mut service, Method::POST).await;
        let reads = async {
            for _ in 0..100 {
                send(&mut service, Method::GET).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), reads)
            .await
            .expect("reads are not held back by the write bucket");
        let write = send(&mut service, Method::POST);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), write)
                .await
                .is_err(),
            "a second write within the hour waits"
        );
    }
}
