//! What a call asked of the network, and what came back: each request's
//! method, URL and body digest, and the answer, recorded as the bodies go
//! by. A candidate's shadow call is answered from the serving call's
//! record ([`super::Fixtures`]): a request the serving call made the same
//! way (method and URL, in order) gets the serving call's answer, any
//! other is refused, and none leaves the host. The shadow then compares
//! the two lists, so a cleanup that would delete something else outside
//! shows before it runs.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use policyhost_sdk::http::{Exchange, ExpectedRequest, Method, StubResponse};
use sha2::{Digest as _, Sha256};
use wasmtime_wasi_http::{Error, WasiBody};

/// The most requests of one call recorded: the grant's `requestsPerCall`
/// bounds a serving call; this bounds the record whatever the grant says.
pub const RECORDED_REQUESTS: usize = 64;
/// The most bytes of one response body kept for the shadow's replay.
pub const RECORDED_BODY_BYTES: usize = 64 * 1024;

/// One request of a call and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Its method.
    pub method: Method,
    /// Its URL, as the policy wrote it.
    pub url: String,
    /// The SHA-256 (hex) of its body; `None` for none, or until it was sent.
    pub body: Option<String>,
    /// What came back.
    pub answer: Answer,
}

/// What came back for a recorded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Nothing yet, or the call ended first.
    Pending,
    /// A response: status, headers, and up to [`RECORDED_BODY_BYTES`] of
    /// its body (`cut` when there was more).
    Response {
        /// The status code.
        status: u16,
        /// The headers, names lowercase.
        headers: Vec<(String, String)>,
        /// The body kept.
        body: Vec<u8>,
        /// Whether the body was longer than what is kept.
        cut: bool,
    },
    /// A `wasi:http` error instead (a refusal included), by its name.
    Failed(String),
}

impl Recorded {
    /// The request on one line, as the shadow compares it:
    /// `DELETE https://s.example.com/buckets/a`, then the body's digest.
    #[must_use]
    pub fn line(&self) -> String {
        match &self.body {
            Some(digest) => format!("{} {} body sha256:{digest}", self.method, self.url),
            None => format!("{} {}", self.method, self.url),
        }
    }

    /// The request and its answer for a DataJob's decision record:
    /// `DELETE https://s.example.com/buckets/a 204`. Method, origin and
    /// path only: no user info, query, header or body, which may hold what
    /// the host injected or a service answered.
    #[must_use]
    pub fn outline(&self) -> String {
        let answer = match &self.answer {
            Answer::Pending => "no answer".to_owned(),
            Answer::Response { status, .. } => status.to_string(),
            Answer::Failed(error) => error.clone(),
        };
        let target = match self.url.parse::<http::Uri>() {
            Ok(uri) => {
                let scheme = uri.scheme_str().unwrap_or("http");
                let host = uri.host().unwrap_or_default();
                let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
                format!("{scheme}://{host}{port}{}", uri.path())
            }
            Err(_) => "(a URL that does not parse)".to_owned(),
        };
        format!("{} {target} {answer}", self.method)
    }

    /// The exchange a shadow call is answered with, when the request had
    /// an answer to replay: a cut body is replayed as the size error the
    /// candidate would not otherwise see.
    fn exchange(&self) -> Option<Exchange> {
        let (response, error) = match &self.answer {
            Answer::Pending => return None,
            Answer::Failed(code) => (StubResponse::default(), Some(code.clone())),
            Answer::Response { cut: true, .. } => (
                StubResponse::default(),
                Some("HttpResponseBodySize".to_owned()),
            ),
            Answer::Response {
                status,
                headers,
                body,
                cut: false,
            } => (
                StubResponse {
                    status: *status,
                    headers: headers.iter().cloned().collect(),
                    body: String::from_utf8_lossy(body).into_owned(),
                },
                None,
            ),
        };
        Some(Exchange {
            request: ExpectedRequest {
                method: self.method.clone(),
                url: self.url.clone(),
                body: None,
            },
            response,
            error,
        })
    }
}

/// The exchanges a shadow call is answered from: the serving call's, in
/// order, up to the first without an answer.
#[must_use]
pub fn exchanges(served: &[Recorded]) -> Vec<Exchange> {
    served.iter().map_while(Recorded::exchange).collect()
}

/// One call's record, shared with the tasks of its requests.
#[derive(Debug, Default, Clone)]
pub(crate) struct Recording(Arc<Mutex<Vec<Recorded>>>);

/// Where one request's record is.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    recording: Recording,
    at: usize,
}

impl Recording {
    /// Records a request `method` `url`; `None` past [`RECORDED_REQUESTS`].
    pub(crate) fn start(&self, method: &http::Method, url: String) -> Option<Slot> {
        let method = method_of(method)?;
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if all.len() >= RECORDED_REQUESTS {
            return None;
        }
        all.push(Recorded {
            method,
            url,
            body: None,
            answer: Answer::Pending,
        });
        Some(Slot {
            recording: self.clone(),
            at: all.len() - 1,
        })
    }

    /// What was recorded.
    pub(crate) fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Slot {
    fn with(&self, f: impl FnOnce(&mut Recorded)) {
        let mut all = self
            .recording
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(recorded) = all.get_mut(self.at) {
            f(recorded);
        }
    }

    /// The request failed with `error` (no response).
    pub(crate) fn failed(&self, error: &Error) {
        let name = error_name(error);
        self.with(|recorded| recorded.answer = Answer::Failed(name));
    }

    /// `request` with its body digested as it is sent.
    pub(crate) fn request(&self, request: http::Request<WasiBody>) -> http::Request<WasiBody> {
        let slot = self.clone();
        request.map(|body| {
            WasiBody::new(Tap {
                inner: body,
                slot,
                seen: Seen::Digest(Sha256::new(), 0),
            })
        })
    }

    /// `response` recorded, its body kept as it is read.
    pub(crate) fn response(&self, response: http::Response<WasiBody>) -> http::Response<WasiBody> {
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let status = response.status().as_u16();
        self.with(|recorded| {
            recorded.answer = Answer::Response {
                status,
                headers,
                body: Vec::new(),
                cut: false,
            };
        });
        let slot = self.clone();
        response.map(|body| {
            WasiBody::new(Tap {
                inner: body,
                slot,
                seen: Seen::Kept,
            })
        })
    }
}

/// What a tapped body does with what goes by.
enum Seen {
    /// A request body: digested, and its length.
    Digest(Sha256, u64),
    /// A response body: kept in the record.
    Kept,
}

/// A body passed on unchanged while its slot records it.
struct Tap {
    inner: WasiBody,
    slot: Slot,
    seen: Seen,
}

impl Body for Tap {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match (&frame, &mut this.seen) {
            (Some(Ok(frame)), Seen::Digest(digest, length)) => {
                if let Some(data) = frame.data_ref() {
                    digest.update(data);
                    *length += data.len() as u64;
                }
            }
            (Some(Ok(frame)), Seen::Kept) => {
                if let Some(data) = frame.data_ref() {
                    this.slot.with(|recorded| keep(recorded, data));
                }
            }
            (None, Seen::Digest(digest, length)) => {
                let hex = hex::encode(std::mem::take(digest).finalize());
                let sent = *length > 0;
                this.slot
                    .with(|recorded| recorded.body = sent.then_some(hex));
            }
            (Some(Err(error)), Seen::Kept) => this.slot.failed(error),
            (None, Seen::Kept) | (Some(Err(_)), Seen::Digest(..)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Adds `data` to the response body kept, up to [`RECORDED_BODY_BYTES`].
fn keep(recorded: &mut Recorded, data: &[u8]) {
    if let Answer::Response { body, cut, .. } = &mut recorded.answer {
        let room = RECORDED_BODY_BYTES.saturating_sub(body.len());
        body.extend_from_slice(&data[..data.len().min(room)]);
        *cut |= data.len() > room;
    }
}

/// The method a fixture names, for the methods the SDK sends.
pub(crate) fn method_of(method: &http::Method) -> Option<Method> {
    Some(match *method {
        http::Method::GET => Method::Get,
        http::Method::HEAD => Method::Head,
        http::Method::POST => Method::Post,
        http::Method::PUT => Method::Put,
        http::Method::PATCH => Method::Patch,
        http::Method::DELETE => Method::Delete,
        _ => return None,
    })
}

/// The `wasi:http` error's case name, as a fixture names it.
fn error_name(error: &Error) -> String {
    let debug = format!("{error:?}");
    debug
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt as _, Full};

    use super::*;

    fn boxed(text: &'static str) -> WasiBody {
        Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    #[tokio::test]
    async fn a_request_is_recorded_with_its_body_digest_and_its_answer() {
        let recording = Recording::default();
        let slot = recording
            .start(&http::Method::DELETE, "https://s.example.com/b/a".into())
            .expect("room");
        let request = slot.request(http::Request::new(boxed("{\"x\":1}")));
        request.into_body().collect().await.unwrap();
        let response = http::Response::builder()
            .status(204)
            .header("x-id", "7")
            .body(boxed("gone"))
            .unwrap();
        slot.response(response).into_body().collect().await.unwrap();
        let recorded = recording.take();
        assert_eq!(recorded.len(), 1);
        let digest = hex::encode(Sha256::digest(b"{\"x\":1}"));
        assert_eq!(
            recorded[0].line(),
            format!("DELETE https://s.example.com/b/a body sha256:{digest}")
        );
        assert_eq!(
            recorded[0].answer,
            Answer::Response {
                status: 204,
                headers: vec![("x-id".into(), "7".into())],
                body: b"gone".to_vec(),
                cut: false
            }
        );
        let replayed = exchanges(&recorded);
        assert_eq!(replayed.len(), 1);
        assert_eq!(replayed[0].response.status, 204);
        assert_eq!(replayed[0].response.body, "gone");
        assert_eq!(replayed[0].request.body, None, "any body matches");
    }

    #[test]
    fn a_failure_replays_as_its_error_and_the_record_is_bounded() {
        let recording = Recording::default();
        let slot = recording
            .start(&http::Method::GET, "https://s.example.com/".into())
            .expect("room");
        slot.failed(&Error::ConnectionTimeout);
        let replayed = exchanges(&recording.take());
        assert_eq!(replayed[0].error.as_deref(), Some("ConnectionTimeout"));
        let pending = recording.start(&http::Method::GET, "https://s.example.com/".into());
        assert!(pending.is_some());
        assert!(
            exchanges(&recording.take()).is_empty(),
            "nothing to replay past a request without an answer"
        );
        for _ in 0..RECORDED_REQUESTS {
            assert!(recording.start(&http::Method::GET, "u".into()).is_some());
        }
        assert!(recording.start(&http::Method::GET, "u".into()).is_none());
    }

    #[test]
    fn the_outline_keeps_method_origin_path_and_answer_and_nothing_else() {
        let recorded = |url: &str, answer| Recorded {
            method: Method::Delete,
            url: url.into(),
            body: Some("ab".into()),
            answer,
        };
        let response = Answer::Response {
            status: 204,
            headers: vec![("set-cookie".into(), "session=s3cret".into())],
            body: b"token s3cret".to_vec(),
            cut: false,
        };
        assert_eq!(
            recorded(
                "https://u:s3cret@s.example.com:8443/b/a?key=s3cret#f",
                response
            )
            .outline(),
            "DELETE https://s.example.com:8443/b/a 204"
        );
        assert_eq!(
            recorded(
                "http://s.example.com/",
                Answer::Failed("ConnectionTimeout".into())
            )
            .outline(),
            "DELETE http://s.example.com/ ConnectionTimeout"
        );
        assert_eq!(
            recorded("not a url", Answer::Pending).outline(),
            "DELETE (a URL that does not parse) no answer"
        );
    }
}
