//! A policy that makes the HTTP requests its params list, in order, in
//! `reconcile` and in `cleanup`, and reports everything it could see of
//! each: the headers it set, the status, the response headers and body, or
//! the error code. It tries what a hostile policy would: origins outside
//! its grant, loopback and metadata addresses, names that resolve to them,
//! more requests than its grant allows, a server that stalls; and it
//! echoes its own request headers, so a test can show the host's injected
//! credential never reaches it.
//!
//! Params: `{"requests": [{"method": "GET", "url": "...", "headers": {...},
//! "body": "...", "timeoutsMs": {"connect", "firstByte", "betweenBytes"}}]}`. Outputs: `{"results": [{"status", "headers", "body"}
//! | {"error", "refused"}], "sentHeaders": [...]}`; it logs each result at
//! info. `cleanup` answers `done` once every request got a 2xx or 404.

use std::collections::BTreeMap;
use std::time::Duration;

use policyhost_sdk::http::{Method, Request, Timeouts};
use policyhost_sdk::{Child, Cleanup, Context, Job, Phase, Policy, PolicyError, Reconcile, Status};
use serde::{Deserialize, Serialize};

/// The probe.
pub struct HttpProbe;

policyhost_sdk::export!(HttpProbe);

/// `spec.params`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The requests, in order.
    #[serde(default)]
    pub requests: Vec<Planned>,
}

/// One request to make.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Planned {
    /// Its method (default GET).
    #[serde(default = "get")]
    pub method: Method,
    /// Its URL.
    pub url: String,
    /// Headers it sets.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Its body.
    #[serde(default)]
    pub body: String,
    /// Its timeouts, in milliseconds.
    #[serde(default, rename = "timeoutsMs")]
    pub timeouts_ms: TimeoutsMs,
}

/// [`Timeouts`] in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimeoutsMs {
    /// Connecting.
    pub connect: Option<u64>,
    /// Until the response's head.
    pub first_byte: Option<u64>,
    /// Between body parts.
    pub between_bytes: Option<u64>,
}

impl TimeoutsMs {
    fn timeouts(&self) -> Timeouts {
        let ms = |ms: Option<u64>| ms.map(Duration::from_millis);
        Timeouts {
            connect: ms(self.connect),
            first_byte: ms(self.first_byte),
            between_bytes: ms(self.between_bytes),
        }
    }
}

fn get() -> Method {
    Method::Get
}

/// What one request gave.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Seen {
    /// An answer.
    Answer {
        /// Its status.
        status: u16,
        /// Its headers.
        headers: Vec<(String, String)>,
        /// Its body, as text.
        body: String,
    },
    /// No answer.
    Error {
        /// The error code or message.
        error: String,
        /// Whether the host refused it.
        refused: bool,
    },
}

fn probe(params: &Params) -> (Vec<Seen>, Vec<Vec<(String, String)>>) {
    let mut seen = Vec::new();
    let mut sent = Vec::new();
    for planned in &params.requests {
        let mut request = Request::new(planned.method.clone(), &planned.url)
            .body(planned.body.clone())
            .timeouts(planned.timeouts_ms.timeouts());
        for (name, value) in &planned.headers {
            request = request.header(name, value);
        }
        sent.push(request.headers.clone());
        let result = match request.send() {
            Ok(response) => Seen::Answer {
                status: response.status,
                body: response.text(),
                headers: response.headers,
            },
            Err(error) => Seen::Error {
                refused: error.is_refused(),
                error: match &error {
                    policyhost_sdk::http::Error::Refused { code }
                    | policyhost_sdk::http::Error::Failed { code } => code.clone(),
                    other => other.to_string(),
                },
            },
        };
        policyhost_sdk::info!(
            "{} {}: {}",
            planned.method,
            planned.url,
            serde_json::to_string(&result).unwrap_or_default()
        );
        seen.push(result);
    }
    (seen, sent)
}

impl Policy for HttpProbe {
    type Params = Params;

    fn reconcile(
        _: &Job,
        params: Params,
        _: &[Child],
        _: &Context,
    ) -> Result<Reconcile, PolicyError> {
        let (results, sent_headers) = probe(&params);
        let outputs = serde_json::json!({ "results": results, "sentHeaders": sent_headers });
        Ok(Reconcile::new(
            Status::new(Phase::Running).outputs(&outputs)?,
        ))
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup, PolicyError> {
        let params: Params = job.params()?;
        let (results, _) = probe(&params);
        let gone = results.iter().all(|seen| {
            matches!(seen, Seen::Answer { status, .. } if (200..300).contains(status) || *status == 404)
        });
        Ok(if gone {
            Cleanup::Done
        } else {
            Cleanup::RetryAfter { ms: 500 }
        })
    }
}
