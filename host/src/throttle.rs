//! A client-side rate limit on API writes, as a tower layer for the kube client.
//!
//! Lesson four of the design: a reconcile storm (a policy swap re-queueing a
//! thousand DataJobs, say) must not turn into a write storm on the API server.
//! Every request that changes state waits for a token from one shared bucket
//! (`qps` tokens a second, up to `burst` at once), like client-go's
//! flowcontrol. Reads and watches are not limited: they are served from the
//! cache or are long-lived streams.
//!
//! The bucket is shared fairly between policies: writers wait for their
//! turn at a one-slot [`Gate`] in front of it, which hands the next token to
//! the waiting policy furthest behind its share (see [`crate::fair`]). A
//! policy alone gets every token; a policy that floods takes only its share
//! while others write. Whose a write is comes from the task-local set by
//! [`fair::writing_for`] around each reconcile; writes outside one (policy
//! ConfigMap annotations, Events of the loader) are the host's.
//!
//! The budget stays a layer on the client, rather than moving to each place
//! the controller writes, so that no write can bypass it: children, status,
//! finalizer patches and Events all go through the same client.
//!
//! Shards divide the budget: with N live replicas each write takes N
//! tokens ([`WriteThrottleLayer::divide_among`]), so that together they
//! send what the platform team configured, not N times as much.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Method, Request};
use tower::{Layer, Service};

use crate::fair::{self, Gate};

/// Shares one token bucket between every service it wraps.
#[derive(Clone)]
pub struct WriteThrottleLayer {
    budget: Arc<Budget>,
}

/// The token bucket and the turns to take from it.
struct Budget {
    bucket: DefaultDirectRateLimiter,
    turns: Arc<Gate>,
    /// Tokens one write takes: the replicas that share the budget.
    replicas: AtomicU32,
}

impl Budget {
    /// Waits for a token, in the current writer's fair turn.
    ///
    /// Called from the response future, so that the task-local writer is
    /// the caller's even under a `tower::buffer::Buffer` (kube's client has
    /// one), whose worker task runs `Service::call`.
    async fn until_ready(&self) {
        let writer = fair::current_writer();
        let _turn = self.turns.acquire(&writer).await;
        let replicas =
            NonZeroU32::new(self.replicas.load(Ordering::Relaxed)).unwrap_or(NonZeroU32::MIN);
        if self.bucket.until_n_ready(replicas).await.is_err() {
            // More replicas than the burst: one token each, the burst
            // bounding what they send together.
            self.bucket.until_ready().await;
        }
    }
}

impl WriteThrottleLayer {
    /// Allows `qps` writes a second on average and `burst` at once.
    #[must_use]
    pub fn new(qps: NonZeroU32, burst: NonZeroU32) -> Self {
        Self::with_quota(Quota::per_second(qps).allow_burst(burst))
    }

    fn with_quota(quota: Quota) -> Self {
        Self {
            budget: Arc::new(Budget {
                bucket: RateLimiter::direct(quota),
                turns: Gate::new(1),
                replicas: AtomicU32::new(1),
            }),
        }
    }

    /// Shares the budget among `replicas` (at least 1): each write takes
    /// that many tokens from now on.
    pub fn divide_among(&self, replicas: usize) {
        let replicas = u32::try_from(replicas.max(1)).unwrap_or(u32::MAX);
        self.budget.replicas.store(replicas, Ordering::Relaxed);
    }
}

impl<S> Layer<S> for WriteThrottleLayer {
    type Service = WriteThrottle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteThrottle {
            inner,
            budget: Arc::clone(&self.budget),
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
    budget: Arc<Budget>,
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
        let budget = is_write(request.method()).then(|| Arc::clone(&self.budget));
        Box::pin(async move {
            if let Some(budget) = budget {
                budget.until_ready().await;
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
    async fn replicas_sharing_the_budget_each_write_a_share_of_it() {
        let qps = NonZeroU32::new(40).expect("non-zero");
        let burst = NonZeroU32::new(8).expect("non-zero");
        let layer = WriteThrottleLayer::new(qps, burst);
        let mut service = layer.layer(Accept);
        let start = Instant::now();
        for _ in 0..6 {
            send(&mut service, Method::PATCH).await;
        }
        let whole = start.elapsed();
        layer.divide_among(4);
        tokio::time::sleep(Duration::from_millis(250)).await;
        let start = Instant::now();
        // A quarter of the bucket: a burst of 2, then 10/s.
        for _ in 0..6 {
            send(&mut service, Method::PATCH).await;
        }
        let divided = start.elapsed();
        assert!(
            divided >= Duration::from_millis(350),
            "6 writes at a quarter of 40 qps took only {divided:?} (alone: {whole:?})"
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

    /// Sends one write through `service` (a buffered throttle) as `tenant`.
    async fn write_as<S>(service: S, tenant: fair::Tenant)
    where
        S: Service<Request<()>> + Send,
        S::Future: Send,
        S::Error: std::fmt::Debug,
    {
        fair::writing_for(tenant, async move {
            let ready = service.oneshot(request(Method::PATCH));
            ready.await.expect("accepted");
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_policy_writing_little_is_not_held_behind_one_writing_much_through_a_buffer() {
        let qps = NonZeroU32::new(50).expect("non-zero");
        let layer = WriteThrottleLayer::new(qps, NonZeroU32::MIN);
        // kube's client puts a Buffer in front of every layer: `call` runs
        // on its worker task, not the writer's.
        let service = tower::buffer::Buffer::new(layer.layer(Accept), 1024);
        let share = fair::Share::DEFAULT;
        let (noisy, quiet) = (
            fair::Tenant::new("noisy", share),
            fair::Tenant::new("quiet", share),
        );
        let mut flood = tokio::task::JoinSet::new();
        for _ in 0..100 {
            flood.spawn(write_as(service.clone(), noisy.clone()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let start = Instant::now();
        for _ in 0..5 {
            write_as(service.clone(), quiet.clone()).await;
        }
        let took = start.elapsed();
        let flood_left = flood.len() - {
            let mut finished = 0;
            while flood.try_join_next().is_some() {
                finished += 1;
            }
            finished
        };
        // First come, first served, the five would wait for the hundred
        // (two seconds at 50/s); taking turns, each waits for one of the
        // flood's tokens at most.
        assert!(
            took < Duration::from_millis(800),
            "5 writes beside a flood of 100 took {took:?}"
        );
        assert!(
            flood_left > 40,
            "the flood was still queued ({flood_left} left)"
        );
        flood.abort_all();
    }
}
