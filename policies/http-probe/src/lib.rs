//! A policy that makes the HTTP requests its params list, in order, in
//! `reconcile` and in `cleanup`, and reports everything it could see of
//! each: the headers it set, the status, the response headers and body, or
//! the error code. It tries what a hostile policy would: origins outside
//! its grant, loopback and metadata addresses, names that resolve to them,
//! more requests than its grant allows, a server that stalls; and it
//! echoes its own request headers, so a test can show the host's injected
//! credential never reaches it through its own request.
//!
//! With `"publish": true` it is the policy a reflecting server hands the
//! credential back to (an echo route, an error page quoting the request),
//! and it publishes what it got everywhere a policy's words leave the
//! sandbox: for the first answer, its body in the status message and its
//! headers' values in a condition, an Event, a ConfigMap `<job>-echo`, a
//! `log()` line, stdout and stderr; and the first `cleanup` attempt fails
//! quoting them. Each header value is published whole and without its
//! first word, as a policy that drops an `Authorization` value's scheme
//! word would hold the token alone. The host must redact the credential,
//! and its token, from all of it.
//!
//! Params: `{"requests": [{"method": "GET", "url": "...", "headers": {...},
//! "body": "...", "timeoutsMs": {"connect", "firstByte", "betweenBytes"}}],
//! "cleanup": [...], "publish": false}`: `cleanup`, when set, lists the
//! requests `cleanup` makes instead of `requests`. `{digest}` in a URL is
//! the first 12 hex digits of the acting version's digest, so two versions
//! of the probe ask for different paths. Outputs: `{"results": [{"status", "headers", "body"}
//! | {"error", "refused"}], "sentHeaders": [...]}`; it logs each result at
//! info. `cleanup` answers `done` once every request got a 2xx or 404.

use std::collections::BTreeMap;
use std::time::Duration;

use policyhost_sdk::build::ConfigMap;
use policyhost_sdk::http::{Method, Request, Timeouts};
use policyhost_sdk::{
    Child, Cleanup, Condition, Context, Event, Job, Phase, Policy, PolicyError, Reconcile, Result,
    Status,
};
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
    /// The requests `cleanup` makes, if not `requests`.
    #[serde(default)]
    pub cleanup: Option<Vec<Planned>>,
    /// Publish the first answer everywhere (see the crate's docs).
    #[serde(default)]
    pub publish: bool,
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

fn probe(planned: &[Planned], ctx: &Context) -> (Vec<Seen>, Vec<Vec<(String, String)>>) {
    let digest = ctx.policy_digest.get(..12).unwrap_or_default();
    let mut seen = Vec::new();
    let mut sent = Vec::new();
    for planned in planned {
        let url = planned.url.replace("{digest}", digest);
        let mut request = Request::new(planned.method.clone(), &url)
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

/// The first answer: its body, and its headers' values on one line, each
/// then again without its first word (`Bearer TOKEN` gives `TOKEN`).
fn first_answer(results: &[Seen]) -> Option<(&str, String)> {
    results.iter().find_map(|seen| match seen {
        Seen::Answer { body, headers, .. } => {
            let values: Vec<&str> = headers.iter().map(|(_, value)| value.as_str()).collect();
            let tokens: Vec<&str> = values
                .iter()
                .filter_map(|value| value.split_once(' ').map(|(_, token)| token))
                .collect();
            Some((
                body.as_str(),
                format!("{} | tokens: {}", values.join(" "), tokens.join(" ")),
            ))
        }
        Seen::Error { .. } => None,
    })
}

/// The reconcile of `"publish": true`: what the server said, everywhere.
fn publish(job: &Job, results: &[Seen], outputs: &serde_json::Value) -> Result<Reconcile> {
    let (body, headers) = first_answer(results).unwrap_or_default();
    policyhost_sdk::warn!("the server sent back: {headers}");
    println!("stdout: the server sent back: {headers}");
    eprintln!("stderr: the server sent back: {headers}");
    let status = Status::new(Phase::Running)
        .message(format!("the server said: {body}"))
        .condition(Condition::new(
            "Echoed",
            true,
            "Reflected",
            format!("the server sent back: {headers}"),
        ))
        .outputs(outputs)?;
    let echo = ConfigMap::new(format!("{}-echo", job.name))
        .data("headers", headers.clone())
        .data("body", body)
        .build()?;
    Ok(Reconcile::new(status)
        .children([echo])
        .event(Event::warning(
            "Reflected",
            format!("the server sent back: {headers}"),
        )))
}

impl Policy for HttpProbe {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], ctx: &Context) -> Result<Reconcile> {
        let (results, sent_headers) = probe(&params.requests, ctx);
        let outputs = serde_json::json!({ "results": results, "sentHeaders": sent_headers });
        if params.publish {
            return publish(job, &results, &outputs);
        }
        Ok(Reconcile::new(
            Status::new(Phase::Running).outputs(&outputs)?,
        ))
    }

    fn cleanup(job: &Job, _: &[Child], ctx: &Context) -> Result<Cleanup> {
        let params: Params = job.params()?;
        let (results, _) = probe(params.cleanup.as_ref().unwrap_or(&params.requests), ctx);
        if params.publish && ctx.attempt <= 1 {
            let (_, headers) = first_answer(&results).unwrap_or_default();
            return Err(PolicyError::failed_with(format!(
                "cleanup: the server sent back: {headers}"
            )));
        }
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
