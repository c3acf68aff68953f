//! A body with a byte cap and a deadline: what the host puts around every
//! request and response body of a policy's exchange, so that neither a
//! large body nor a server that stops sending can outlast the call (or the
//! pause between frames the guest allows).

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::Error;

use super::timeouts::bound;

/// `inner`, ended with an error past `limit` bytes, at `deadline`, or
/// when the next frame takes longer than `idle`.
pub(crate) struct Bounded<B> {
    inner: B,
    sent: u64,
    limit: u64,
    too_large: fn(Option<u64>) -> Error,
    deadline: Instant,
    idle: Option<Duration>,
    /// Wakes at the earlier of `deadline` and the next frame's `idle` bound.
    wait: Pin<Box<Sleep>>,
    done: bool,
}

impl<B> Bounded<B> {
    /// A request body of at most `limit` bytes.
    pub(crate) fn request(inner: B, limit: u64, deadline: Instant) -> Self {
        Self::new(inner, limit, Error::HttpRequestBodySize, deadline, None)
    }

    /// A response body of at most `limit` bytes, each frame within `idle`
    /// of the one before.
    pub(crate) fn response(
        inner: B,
        limit: u64,
        deadline: Instant,
        idle: Option<Duration>,
    ) -> Self {
        Self::new(inner, limit, Error::HttpResponseBodySize, deadline, idle)
    }

    fn new(
        inner: B,
        limit: u64,
        too_large: fn(Option<u64>) -> Error,
        deadline: Instant,
        idle: Option<Duration>,
    ) -> Self {
        Self {
            inner,
            sent: 0,
            limit,
            too_large,
            deadline,
            idle,
            wait: Box::pin(tokio::time::sleep_until(bound(deadline, idle))),
            done: false,
        }
    }
}

/// The error of a request whose exchange hyper ended: the request body's
/// own size error when that is what ended it (hyper reports a body's error
/// as its own, which wasi-http would turn into `HttpProtocolError`), else
/// hyper's error.
pub(crate) fn request_error(error: hyper::Error) -> Error {
    let too_large =
        std::iter::successors(std::error::Error::source(&error), |cause| cause.source()).find_map(
            |cause| match cause.downcast_ref::<Error>() {
                Some(Error::HttpRequestBodySize(size)) => Some(*size),
                _ => None,
            },
        );
    match too_large {
        Some(size) => Error::HttpRequestBodySize(size),
        None => Error::Hyper(error),
    }
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Error>,
{
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                ready!(this.wait.as_mut().poll(cx));
                this.done = true;
                return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
            }
        };
        let frame = match frame {
            None => return Poll::Ready(None),
            Some(Err(error)) => {
                this.done = true;
                return Poll::Ready(Some(Err(error.into())));
            }
            Some(Ok(frame)) => frame,
        };
        if this.idle.is_some() {
            this.wait.as_mut().reset(bound(this.deadline, this.idle));
        }
        if let Some(data) = frame.data_ref() {
            this.sent = this.sent.saturating_add(data.len() as u64);
            if this.sent > this.limit {
                this.done = true;
                return Poll::Ready(Some(Err((this.too_large)(Some(this.sent)))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::{BodyExt as _, Full, StreamBody};

    use super::*;

    fn later(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[tokio::test]
    async fn a_body_within_its_limit_passes_whole() {
        let body = Bounded::response(
            Full::new(Bytes::from_static(b"hello")),
            5,
            later(1000),
            None,
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, "hello");
    }

    #[tokio::test]
    async fn a_body_over_its_limit_ends_with_the_size_error() {
        let body = Bounded::response(
            Full::new(Bytes::from_static(b"hello")),
            4,
            later(1000),
            None,
        );
        let error = body.collect().await.unwrap_err();
        assert!(
            matches!(error, Error::HttpResponseBodySize(Some(5))),
            "{error:?}"
        );
        let body = Bounded::request(Full::new(Bytes::from_static(b"hello")), 1, later(1000));
        let error = body.collect().await.unwrap_err();
        assert!(
            matches!(error, Error::HttpRequestBodySize(Some(5))),
            "{error:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_sending_ends_at_the_deadline() {
        let stalled = StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, Error>>());
        let started = Instant::now();
        let error = Bounded::response(stalled, 100, later(300), None)
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(error, Error::ConnectionReadTimeout), "{error:?}");
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_between_frames_longer_than_the_guest_allows_ends_the_body() {
        // A frame every 50 ms passes a 60 ms bound; then the body stalls.
        let frames = futures::StreamExt::then(futures::stream::iter(0..3), |_| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, Error>(Frame::data(Bytes::from_static(b"x")))
        });
        let dripping = StreamBody::new(Box::pin(futures::StreamExt::chain(
            frames,
            futures::stream::pending(),
        )));
        let started = Instant::now();
        let body = Bounded::response(dripping, 100, later(1000), Some(Duration::from_millis(60)));
        let error = body.collect().await.unwrap_err();
        assert!(matches!(error, Error::ConnectionReadTimeout), "{error:?}");
        assert_eq!(started.elapsed(), Duration::from_millis(150 + 60));
    }
}
