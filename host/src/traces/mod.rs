//! OpenTelemetry traces: each reconcile and cleanup pass a trace, sent over
//! OTLP/HTTP to a collector when one is configured, and nothing at all
//! otherwise.
//!
//! The spans are `tracing` spans of the target [`TARGET`], at levels the
//! log's default filter leaves off (the pass span aside, which is the log's
//! `reconcile` context as it always was), so with tracing off they cost a
//! disabled callsite's check. [`install`] builds the layer that turns them
//! into OpenTelemetry spans: the maintained SDK's batch processor and OTLP
//! exporter behind a bound of our own (`export`), so that a collector that
//! is down or slow costs dropped spans, counted, never memory or the
//! operator's progress. [`context`] links what `tracing` cannot: spans
//! recorded after the fact (the queue wait) and the `traceparent` header of
//! outbound requests. [`api`] is the API client's pair of layers, a span per
//! request and the count of its attempts. Below a pass the sampler left out
//! no span is opened ([`context::is_traced`]).

pub mod api;
pub mod context;
mod export;
#[cfg(feature = "dev")]
pub mod jaeger;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

pub use export::{Stats, stats};

/// The target of every span the traces are made of (the guest's log lines,
/// target `policyhost::guest`, become their events).
pub const TARGET: &str = "policyhost::trace";

/// The service name, unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
/// name another.
const SERVICE: &str = "policyhost";

/// The OTLP/HTTP path of traces under a collector's base address.
const TRACES_PATH: &str = "/v1/traces";

/// How traces are exported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The collector's OTLP/HTTP base address (`http://collector:4318`);
    /// without it, tracing is on only if `OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` names one.
    pub endpoint: Option<String>,
    /// The share of passes traced, 0 to 1; without it, `OTEL_TRACES_SAMPLER`
    /// (and its argument) decides, else every pass is.
    pub sample_ratio: Option<f64>,
}

/// Why traces cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sampling ratio is not a share.
    #[error("the trace sampling ratio {0} is not between 0 and 1")]
    Ratio(f64),
    /// The exporter refused its configuration (an endpoint that is no URL,
    /// a protocol other than http/protobuf).
    #[error("cannot export traces: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The exporter's own runtime could not start.
    #[error("cannot start the trace exporter: {0}")]
    Runtime(#[from] std::io::Error),
}

impl Config {
    /// True when traces are to be exported: an endpoint is given, by flag
    /// or by the standard variables, and `OTEL_SDK_DISABLED` or
    /// `OTEL_TRACES_EXPORTER=none` does not turn the SDK off.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled_in(|name| std::env::var(name).ok())
    }

    /// [`enabled`](Self::enabled), with the environment `var` reads.
    fn enabled_in(&self, var: impl Fn(&str) -> Option<String>) -> bool {
        let set = |name: &str| var(name).is_some_and(|value| !value.trim().is_empty());
        let is = |name: &str, value: &str| {
            var(name).is_some_and(|v| v.trim().eq_ignore_ascii_case(value))
        };
        let endpoint = self.endpoint.is_some()
            || set("OTEL_EXPORTER_OTLP_ENDPOINT")
            || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        endpoint && !is("OTEL_SDK_DISABLED", "true") && !is("OTEL_TRACES_EXPORTER", "none")
    }
}

/// The exporting pipeline: the `tracing` layer to install, and the provider
/// to flush when the process ends.
pub struct Tracing<S> {
    /// Turns the spans of [`TARGET`] (and the guest's log lines in them)
    /// into OpenTelemetry spans.
    pub layer: Box<dyn Layer<S> + Send + Sync>,
    /// Flushes on [`shutdown`](Guard::shutdown).
    pub guard: Guard,
}

/// Holds the provider: [`shutdown`](Self::shutdown) exports what is queued,
/// within a bound.
pub struct Guard(SdkTracerProvider);

impl Guard {
    /// Exports the spans still queued, waiting at most `timeout`.
    pub fn shutdown(self, timeout: Duration) {
        if let Err(error) = self.0.shutdown_with_timeout(timeout) {
            tracing::warn!(%error, "traces not all exported at shutdown");
        }
    }
}

/// Builds the exporting pipeline, if `config` turns tracing on.
///
/// # Errors
/// A ratio outside 0..=1, an endpoint that is no URL, or a protocol other
/// than OTLP/HTTP with protobuf.
pub fn install<S>(config: &Config) -> Result<Option<Tracing<S>>, Error>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    if !config.enabled() {
        return Ok(None);
    }
    if let Some(ratio) = config.sample_ratio
        && !(0.0..=1.0).contains(&ratio)
    {
        return Err(Error::Ratio(ratio));
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(export::OwnRuntime::new()?);
    if let Some(endpoint) = &config.endpoint {
        exporter = exporter.with_endpoint(traces_url(endpoint));
    }
    let processor = export::Bounded::new(exporter.build()?);
    processor.publish();
    let mut provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource());
    if let Some(ratio) = config.sample_ratio {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(ratio),
        )));
    }
    let provider = provider.build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SERVICE))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(
            Targets::new()
                .with_target(TARGET, LevelFilter::TRACE)
                .with_target("policyhost::guest", LevelFilter::INFO),
        );
    Ok(Some(Tracing {
        layer: Box::new(layer),
        guard: Guard(provider),
    }))
}

/// The traces URL under a collector's base address, as the exporter builds
/// it from `OTEL_EXPORTER_OTLP_ENDPOINT`: a given URL that already ends in
/// the path is kept.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        base.to_owned()
    } else {
        format!("{base}{TRACES_PATH}")
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`),
/// named `policyhost` where neither names the service.
fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(SERVICE).build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_is_off_unless_an_endpoint_is_given_and_the_sdk_is_not_disabled() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let flag = Config {
            endpoint: Some("http://c:4318".into()),
            sample_ratio: None,
        };
        let none = Config::default();
        assert!(!none.enabled_in(env(&[])), "off by default");
        assert!(flag.enabled_in(env(&[])));
        assert!(none.enabled_in(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])));
        assert!(none.enabled_in(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces"
        )])));
        assert!(!none.enabled_in(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(!flag.enabled_in(env(&[("OTEL_SDK_DISABLED", "TRUE")])));
        assert!(!flag.enabled_in(env(&[("OTEL_TRACES_EXPORTER", "none")])));
    }

    #[test]
    fn a_ratio_outside_zero_to_one_is_refused() {
        let config = Config {
            endpoint: Some("http://127.0.0.1:4318".into()),
            sample_ratio: Some(1.5),
        };
        let refused = install::<tracing_subscriber::Registry>(&config).err();
        assert!(
            matches!(refused, Some(Error::Ratio(r)) if r == 1.5),
            "{refused:?}"
        );
    }

    #[test]
    fn the_traces_path_is_added_to_a_base_address_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
