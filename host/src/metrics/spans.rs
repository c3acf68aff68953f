//! The traces' own figures, read from [`crate::traces::stats`] at each
//! scrape: spans exported, and spans dropped (the queue full while the
//! collector is down or slow, or an export that failed). Both stay 0
//! without tracing.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;

use super::process::encode;
use crate::traces;

/// Encodes `trace_spans_exported_total` and `trace_spans_dropped_total`.
#[derive(Debug)]
pub(super) struct SpansCollector;

impl Collector for SpansCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let stats = traces::stats();
        encode(
            &mut encoder,
            "trace_spans_exported",
            "Spans the trace collector took",
            ConstCounter::new(stats.exported),
        )?;
        encode(
            &mut encoder,
            "trace_spans_dropped",
            "Spans dropped: the export queue full, or an export that failed",
            ConstCounter::new(stats.dropped),
        )
    }
}
