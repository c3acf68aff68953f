//! Jaeger for the tests: a collector on loopback per test
//! ([`policyhost::traces::jaeger::LocalJaeger`], the binary `cargo xtask
//! jaeger` builds), and the spans of a DataJob as its query API answers.

use std::collections::BTreeMap;

use policyhost::traces::jaeger::LocalJaeger;
use serde::Deserialize;

use super::process::http_get;
use super::{scratch, target_dir};

/// Starts a Jaeger of its own for the test `tag`.
pub fn start(tag: &str) -> LocalJaeger {
    let binary = target_dir().join("jaeger/bin/jaeger");
    assert!(
        binary.is_file(),
        "{} is missing: run `cargo xtask jaeger` first",
        binary.display()
    );
    let dir = scratch().join(format!("jaeger-{tag}-{}", std::process::id()));
    LocalJaeger::start(&binary, &dir).unwrap_or_else(|error| panic!("start jaeger: {error}"))
}

/// One span, as the query API shows it.
#[derive(Debug, Clone)]
pub struct Span {
    /// Its trace.
    pub trace: String,
    /// Its id.
    pub id: String,
    /// Its parent's id; none for a trace's root.
    pub parent: Option<String>,
    /// Its name.
    pub name: String,
    /// Its attributes, as text.
    pub tags: BTreeMap<String, String>,
    /// Its events: each one's fields, as text.
    pub events: Vec<BTreeMap<String, String>>,
    /// When it started, microseconds since the Unix epoch.
    pub start: u64,
    /// Microseconds.
    pub duration: u64,
}

impl Span {
    /// The attribute `key`, if the span has it.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.get(key).map(String::as_str)
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Trace>,
}

#[derive(Deserialize)]
struct Trace {
    spans: Vec<RawSpan>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpan {
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(rename = "spanID")]
    span_id: String,
    operation_name: String,
    #[serde(default)]
    references: Vec<Reference>,
    #[serde(default)]
    tags: Vec<KeyValue>,
    #[serde(default)]
    logs: Vec<Log>,
    start_time: u64,
    duration: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    ref_type: String,
    #[serde(rename = "spanID")]
    span_id: String,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    value: serde_json::Value,
}

#[derive(Deserialize)]
struct Log {
    fields: Vec<KeyValue>,
}

fn text(fields: Vec<KeyValue>) -> BTreeMap<String, String> {
    fields
        .into_iter()
        .map(|kv| {
            let value = match kv.value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            (kv.key, value)
        })
        .collect()
}

/// The query API's whole answer for the traces of the DataJob `job`
/// (`namespace/name`), as text; empty if it does not answer.
pub fn raw(jaeger: &LocalJaeger, job: &str) -> String {
    let tags = serde_json::json!({ "job": job }).to_string();
    let tags: String = form_urlencoded::byte_serialize(tags.as_bytes()).collect();
    answer(jaeger, &format!("&tags={tags}"))
}

/// The query API's answer for the service's traces that `filter` (query
/// parameters) selects, as text; empty if it does not answer.
fn answer(jaeger: &LocalJaeger, filter: &str) -> String {
    let path = format!("/api/traces?service=policyhost{filter}&limit=10000&lookback=1h");
    match http_get(jaeger.query(), &path) {
        Some((200, body)) => body,
        _ => String::new(),
    }
}

/// Every span of every trace of the DataJob `job` (`namespace/name`).
pub fn spans(jaeger: &LocalJaeger, job: &str) -> Vec<Span> {
    parse(&raw(jaeger, job))
}

/// Every span the collector holds of the service, whatever DataJob.
pub fn every_span(jaeger: &LocalJaeger) -> Vec<Span> {
    parse(&answer(jaeger, ""))
}

fn parse(body: &str) -> Vec<Span> {
    let Ok(answer) = serde_json::from_str::<Answer>(body) else {
        return Vec::new();
    };
    answer
        .data
        .into_iter()
        .flat_map(|trace| trace.spans)
        .map(|span| Span {
            // The query API drops an id's leading zeros; W3C's ids have them.
            trace: format!("{:0>32}", span.trace_id),
            id: format!("{:0>16}", span.span_id),
            parent: span
                .references
                .into_iter()
                .find(|r| r.ref_type == "CHILD_OF")
                .map(|r| format!("{:0>16}", r.span_id)),
            name: span.operation_name,
            tags: text(span.tags),
            events: span.logs.into_iter().map(|log| text(log.fields)).collect(),
            start: span.start_time,
            duration: span.duration,
        })
        .collect()
}
