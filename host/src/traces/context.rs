//! What a `tracing` span cannot say by itself: spans of an interval that
//! ended before anyone could open a span for it (a key's wait in the queue),
//! and the W3C `traceparent` of a span, for a request that leaves the
//! process.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tokio::time::Instant;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header that carries the trace context.
pub const TRACEPARENT: &str = "traceparent";

/// Records the interval from `start` to `end` as a child span `name` of
/// `parent` with `attributes`, if `parent` is traced. The times are the
/// queue's (Tokio's) clock, turned into wall-clock time from now.
pub fn interval(
    parent: &tracing::Span,
    name: &'static str,
    start: Instant,
    end: Instant,
    attributes: Vec<KeyValue>,
) {
    if parent.is_disabled() {
        return;
    }
    let cx = parent.context();
    if !cx.span().span_context().is_sampled() {
        return;
    }
    let now = Instant::now();
    let wall = SystemTime::now();
    let at = |instant: Instant| wall - now.saturating_duration_since(instant);
    let tracer = opentelemetry::global::tracer(super::TARGET);
    let mut span = tracer
        .span_builder(name)
        .with_start_time(at(start))
        .with_attributes(attributes)
        .start_with_context(&tracer, &cx);
    span.end_with_timestamp(at(end));
}

/// True when `span` is part of a trace that is exported: enabled, known to
/// the traces' layer, and sampled. Under a pass the sampler left out, no
/// span is opened: none would be exported.
#[must_use]
pub fn is_traced(span: &tracing::Span) -> bool {
    !span.is_disabled() && span.context().span().span_context().is_sampled()
}

/// The `traceparent` header value of `span`, if it is traced.
#[must_use]
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}
