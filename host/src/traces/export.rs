//! The way out: the SDK's batch processor and OTLP exporter, bounded and
//! counted, and the exporter's HTTP client on a runtime of its own.
//!
//! The batch processor exports from a thread of its own, blocking on each
//! export; hyper needs a Tokio runtime, and the operator's would be the
//! wrong one (an export stalled on a slow collector must not hold a worker
//! of it). So the client carries a one-thread runtime, entered only by that
//! thread.
//!
//! The batch processor drops spans when its queue is full, and says how many
//! only at shutdown. [`Bounded`] keeps its own count of the spans between
//! the end of their span and the end of their export, refuses (and counts)
//! any beyond the same bound as the processor's queue, so the processor
//! never drops one unseen, and [`Counted`] counts what each export did with
//! its batch. Memory is bounded by the queue: at most
//! `OTEL_BSP_MAX_QUEUE_SIZE` (2,048) finished spans wait.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry::Context;
use opentelemetry_http::{HttpClient, HttpError, hyper::HyperClient};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};

/// The default bound, as the batch processor's (`OTEL_BSP_MAX_QUEUE_SIZE`).
const QUEUE: usize = 2_048;

/// How long one export may take, unless `OTEL_EXPORTER_OTLP_TIMEOUT` says
/// otherwise: the exporter's default.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What became of the installed pipeline's spans so far: one per process,
/// as the `tracing` subscriber it feeds.
static INSTALLED: OnceLock<Arc<Counters>> = OnceLock::new();

/// What became of a pipeline's spans.
#[derive(Debug, Default)]
struct Counters {
    exported: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    fn stats(&self) -> Stats {
        Stats {
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// Spans exported and dropped so far ([`stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Spans the collector took.
    pub exported: u64,
    /// Spans lost: refused with the queue full, or in an export that failed.
    pub dropped: u64,
}

/// Spans exported and dropped since the process started (none without
/// tracing).
#[must_use]
pub fn stats() -> Stats {
    INSTALLED.get().map_or(
        Stats {
            exported: 0,
            dropped: 0,
        },
        |counters| counters.stats(),
    )
}

/// The bound: `OTEL_BSP_MAX_QUEUE_SIZE`, else [`QUEUE`].
fn queue_bound() -> usize {
    std::env::var("OTEL_BSP_MAX_QUEUE_SIZE")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(QUEUE)
}

/// The batch processor behind a bound of spans not yet exported.
#[derive(Debug)]
pub(super) struct Bounded {
    inner: BatchSpanProcessor,
    waiting: Arc<AtomicUsize>,
    bound: usize,
    counters: Arc<Counters>,
}

impl Bounded {
    /// Batches `exporter`'s spans (`OTEL_BSP_*` honoured), at most the
    /// queue's bound of them waiting.
    pub(super) fn new<E: SpanExporter + 'static>(exporter: E) -> Self {
        let bound = queue_bound();
        let waiting = Arc::new(AtomicUsize::new(0));
        let counters = Arc::new(Counters::default());
        let counted = Counted {
            inner: exporter,
            waiting: Arc::clone(&waiting),
            counters: Arc::clone(&counters),
        };
        let config = BatchConfigBuilder::default()
            .with_max_queue_size(bound)
            .build();
        let inner = BatchSpanProcessor::builder(counted)
            .with_batch_config(config)
            .build();
        Self {
            inner,
            waiting,
            bound,
            counters,
        }
    }

    /// Makes this pipeline's counts the process's [`stats`] (the first
    /// installed stays: there is one subscriber).
    pub(super) fn publish(&self) {
        let _ = INSTALLED.set(Arc::clone(&self.counters));
    }
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let admitted = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.bound).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.inner.on_end(span);
        } else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, counting what each export did with its batch and
/// releasing its place in the bound.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    waiting: Arc<AtomicUsize>,
    counters: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        let counters = &self.counters;
        let counter = if result.is_ok() {
            &counters.exported
        } else {
            &counters.dropped
        };
        counter.fetch_add(spans as u64, Ordering::Relaxed);
        self.waiting.fetch_sub(spans, Ordering::AcqRel);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter's HTTP client: hyper (as the host's other clients), driven
/// by a one-thread runtime of its own.
pub(super) struct OwnRuntime {
    client: HyperClient,
    runtime: Mutex<tokio::runtime::Runtime>,
}

impl OwnRuntime {
    /// A client whose requests end after the export timeout.
    pub(super) fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("policyhost-traces")
            .build()?;
        Ok(Self {
            client: HyperClient::with_default_connector(export_timeout(), None),
            runtime: Mutex::new(runtime),
        })
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT` (in
/// milliseconds), else [`EXPORT_TIMEOUT`].
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
    .map_or(EXPORT_TIMEOUT, Duration::from_millis)
}

impl fmt::Debug for OwnRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnRuntime").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl HttpClient for OwnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // The batch processor's thread blocks on this future: blocking on
        // the runtime inside it is that same wait.
        let runtime = self.runtime.lock().unwrap_or_else(PoisonError::into_inner);
        runtime.block_on(self.client.send_bytes(request))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::*;

    /// An exporter that holds every export until it is opened, then fails
    /// or takes them.
    #[derive(Debug, Clone, Default)]
    struct Gate {
        open: Arc<AtomicBool>,
        fail: bool,
    }

    impl SpanExporter for Gate {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            while !self.open.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if self.fail {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "collector down".into(),
                ))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn a_stalled_collector_costs_counted_spans_not_memory_and_the_rest_are_exported() {
        let gate = Gate::default();
        let bounded = Bounded::new(gate.clone());
        let (bound, counters) = (bounded.bound, Arc::clone(&bounded.counters));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(bounded)
            .build();
        let tracer = provider.tracer("test");
        // The collector takes nothing: past the bound, spans are dropped.
        for _ in 0..bound + 500 {
            tracer.in_span("pass", |_| {});
        }
        let dropped = counters.stats().dropped;
        assert!(
            (500..=bound as u64 + 500).contains(&dropped),
            "{dropped} of {} spans dropped with {bound} allowed to wait",
            bound + 500
        );
        gate.open.store(true, Ordering::Release);
        provider.force_flush().expect("flushed");
        let exported = counters.stats().exported;
        assert_eq!(
            exported + dropped,
            bound as u64 + 500,
            "every span is either exported or counted as dropped"
        );
        provider.shutdown().expect("shut down");
    }

    #[test]
    fn a_failed_export_counts_its_spans_as_dropped() {
        let gate = Gate {
            open: Arc::new(AtomicBool::new(true)),
            fail: true,
        };
        let bounded = Bounded::new(gate);
        let counters = Arc::clone(&bounded.counters);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(bounded)
            .build();
        let tracer = provider.tracer("test");
        for _ in 0..10 {
            tracer.in_span("pass", |_| {});
        }
        let _ = provider.force_flush();
        assert_eq!(
            counters.stats(),
            Stats {
                exported: 0,
                dropped: 10
            }
        );
        let _ = provider.shutdown();
    }
}
