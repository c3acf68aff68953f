//! A body with a byte cap and a deadline: what the host puts around every
//! request and response body of a policy's exchange, so that neither a
//! large body nor a server that stops sending can outlast the call.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::Error;

/// `inner`, ended with an error past `limit` bytes or at `deadline`.
pub(crate) struct Bounded<B> {
    inner: B,
    sent: u64,
    limit: u64,
    too_large: fn(Option<u64>) -> Error,
    deadline: Pin<Box<Sleep>>,
    done: bool,
}

impl<B> Bounded<B> {
    /// A request body of at most `limit` bytes.
    pub(crate) fn request(inner: B, limit: u64, deadline: Instant) -> Self {
        Self::new(inner, limit, Error::HttpRequestBodySize, deadline)
    }

    /// A response body of at most `limit` bytes.
    pub(crate) fn response(inner: B, limit: u64, deadline: Instant) -> Self {
        Self::new(inner, limit, Error::HttpResponseBodySize, deadline)
    }

    fn new(inner: B, limit: u64, too_large: fn(Option<u64>) -> Error, deadline: Instant) -> Self {
        Self {
            inner,
            sent: 0,
            limit,
            too_large,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            done: false,
        }
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
                ready!(this.deadline.as_mut().poll(cx));
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
        let body = Bounded::response(Full::new(Bytes::from_static(b"hello")), 5, later(1000));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes, "hello");
    }

    #[tokio::test]
    async fn a_body_over_its_limit_ends_with_the_size_error() {
        let body = Bounded::response(Full::new(Bytes::from_static(b"hello")), 4, later(1000));
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
        let error = Bounded::response(stalled, 100, later(300))
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(error, Error::ConnectionReadTimeout), "{error:?}");
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }
}
