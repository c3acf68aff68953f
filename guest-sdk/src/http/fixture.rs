//! Canned HTTP exchanges: what a test expects a call to request, and what
//! it answers. The native harness replays them for [`super::Request::send`];
//! the host's `policy test` and `policy run --http-fixtures` replay the same
//! JSON for the component, so one list serves both.
//!
//! ```json
//! [
//!   { "request": { "method": "PUT", "url": "https://storage.example.com/buckets/demo" },
//!     "response": { "status": 201, "body": "{\"name\":\"demo\"}" } },
//!   { "request": { "method": "DELETE", "url": "https://storage.example.com/buckets/demo" },
//!     "error": "ConnectionTimeout" }
//! ]
//! ```
//!
//! Requests must come in the listed order; a `body` in a request must
//! match exactly, and without it any body does. A request that is not the
//! next one listed fails with [`super::Error::Unexpected`], and a listed one
//! never made fails the test.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Error, Method, Response};

/// One expected request and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exchange {
    /// The request the call must make.
    pub request: ExpectedRequest,
    /// The answer (unless `error` is set).
    #[serde(default)]
    pub response: StubResponse,
    /// Instead of an answer, this `wasi:http` error code (`ConnectionTimeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an expected request must be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectedRequest {
    /// Its method.
    pub method: Method,
    /// Its URL, exactly.
    pub url: String,
    /// Its body as UTF-8, exactly; unset: any body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// A canned response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StubResponse {
    /// The status code (default 200).
    #[serde(default = "ok")]
    pub status: u16,
    /// Headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body, as UTF-8.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
}

fn ok() -> u16 {
    200
}

impl Default for StubResponse {
    fn default() -> Self {
        Self {
            status: ok(),
            headers: BTreeMap::new(),
            body: String::new(),
        }
    }
}

/// A list of exchanges being replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    expected: Vec<Exchange>,
    made: usize,
    unexpected: Vec<String>,
}

impl Replay {
    /// Replays `expected`, in order.
    #[must_use]
    pub fn new(expected: Vec<Exchange>) -> Self {
        Self {
            expected,
            made: 0,
            unexpected: Vec::new(),
        }
    }

    /// The answer to a request: the next exchange's, if the request is it.
    ///
    /// # Errors
    ///
    /// [`Error::Unexpected`] when it is not the next listed request (it is
    /// also remembered for [`Replay::finish`]), or the exchange's `error`.
    pub fn answer(&mut self, method: &Method, url: &str, body: &[u8]) -> Result<Response, Error> {
        let miss = |reason: String| Error::Unexpected {
            method: method.clone(),
            url: url.to_owned(),
            reason,
        };
        let outcome = match self.expected.get(self.made) {
            None => Err(miss(format!(
                "all {} listed exchanges were made",
                self.expected.len()
            ))),
            Some(next) if next.request.method != *method || next.request.url != url => {
                Err(miss(format!(
                    "exchange {} expects {} {}",
                    self.made + 1,
                    next.request.method,
                    next.request.url
                )))
            }
            Some(next)
                if next
                    .request
                    .body
                    .as_deref()
                    .is_some_and(|want| want.as_bytes() != body) =>
            {
                Err(miss(format!(
                    "exchange {} expects another body",
                    self.made + 1
                )))
            }
            Some(next) => Ok(next.clone()),
        };
        let exchange = match outcome {
            Ok(exchange) => exchange,
            Err(error) => {
                self.unexpected.push(error.to_string());
                return Err(error);
            }
        };
        self.made += 1;
        if let Some(code) = exchange.error {
            return Err(Error::of_code(code));
        }
        let response = exchange.response;
        Ok(Response {
            status: response.status,
            headers: response
                .headers
                .into_iter()
                .map(|(name, value)| (name.to_ascii_lowercase(), value))
                .collect(),
            body: response.body.into_bytes(),
        })
    }

    /// Checks that the call made exactly the listed requests.
    ///
    /// # Errors
    ///
    /// Each unexpected request, and the first listed one never made.
    pub fn finish(&self) -> Result<(), String> {
        let mut problems = self.unexpected.clone();
        if let Some(missed) = self.expected.get(self.made) {
            problems.push(format!(
                "{} of {} listed exchanges were made; the next was {} {}",
                self.made,
                self.expected.len(),
                missed.request.method,
                missed.request.url
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    //! The replay of the current thread's call.

    use std::cell::RefCell;

    use super::{Exchange, Replay};

    thread_local! {
        static REPLAY: RefCell<Replay> = RefCell::new(Replay::default());
    }

    /// Starts replaying `expected` for the next call on this thread.
    pub(crate) fn install(expected: Vec<Exchange>) {
        REPLAY.with(|replay| *replay.borrow_mut() = Replay::new(expected));
    }

    /// Ends the replay: whether the call made exactly the listed requests.
    pub(crate) fn finish() -> Result<(), String> {
        REPLAY.with(|replay| replay.take().finish())
    }

    pub(crate) fn with<R>(f: impl FnOnce(&mut Replay) -> R) -> R {
        REPLAY.with(|replay| f(&mut replay.borrow_mut()))
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use native::{finish, install};

/// Natively: the answer from the thread's replay.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn send(request: &super::Request, _url: &super::Url<'_>) -> Result<Response, Error> {
    native::with(|replay| replay.answer(&request.method, &request.url, &request.body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchanges(json: &str) -> Vec<Exchange> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn listed_requests_are_answered_in_order_and_others_fail() {
        let mut replay = Replay::new(exchanges(
            r#"[{"request":{"method":"PUT","url":"https://s/b","body":"{}"},"response":{"status":201,"headers":{"ETag":"1"}}},
               {"request":{"method":"DELETE","url":"https://s/b"},"error":"ConnectionTimeout"}]"#,
        ));
        let error = replay.answer(&Method::Get, "https://s/b", b"").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("exchange 1 expects PUT https://s/b"),
            "{error}"
        );
        let error = replay
            .answer(&Method::Put, "https://s/b", b"[]")
            .unwrap_err();
        assert!(error.to_string().contains("another body"), "{error}");
        let created = replay.answer(&Method::Put, "https://s/b", b"{}").unwrap();
        assert_eq!(created.status, 201);
        assert_eq!(created.header("etag"), Some("1"));
        let error = replay
            .answer(&Method::Delete, "https://s/b", b"")
            .unwrap_err();
        assert_eq!(
            error,
            Error::Failed {
                code: "ConnectionTimeout".into()
            }
        );
        let problems = replay.finish().unwrap_err();
        assert_eq!(
            problems.matches("unexpected request").count(),
            2,
            "{problems}"
        );
    }

    #[test]
    fn a_listed_request_never_made_fails_the_finish() {
        let mut replay = Replay::new(exchanges(
            r#"[{"request":{"method":"GET","url":"https://s/"}}]"#,
        ));
        assert!(
            replay
                .finish()
                .unwrap_err()
                .contains("0 of 1 listed exchanges were made")
        );
        assert_eq!(
            replay
                .answer(&Method::Get, "https://s/", b"")
                .unwrap()
                .status,
            200
        );
        assert_eq!(replay.finish(), Ok(()));
    }
}
