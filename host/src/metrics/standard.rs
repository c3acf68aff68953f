//! controller-runtime's metrics (v0.25.3): the names, label sets and
//! buckets every operator built on it exports, which the dashboards and
//! alerts people reuse query (kubebuilder's Grafana dashboards among them).
//!
//! They count the same passes and the same queue as the `policyhost_*`
//! metrics, the standard way: one controller and one queue, both named
//! [`CONTROLLER`]. The queue's gauges and counters are read from the queue
//! when `/metrics` is scraped, as client-go's workqueue reports them.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::Register as _;
use super::process::ProcessCollector;
use super::rest_client::{RequestLabels, RequestsLayer};
use crate::queue::Stats;

/// The `controller` label of every series, and the queue's `name`.
pub const CONTROLLER: &str = "datajob";

/// Labels naming the controller.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

/// Labels of a reconcile's result.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResult {
    controller: &'static str,
    result: &'static str,
}

/// Labels naming a work queue (client-go names it after its controller).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: &'static str,
    controller: &'static str,
}

/// Labels of a work queue's depth; `priority` is empty: the queue has none.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    name: &'static str,
    controller: &'static str,
    priority: &'static str,
}

/// Labels naming a Lease.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseName {
    name: String,
}

/// How a reconcile ended, as controller-runtime labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; nothing until a change.
    Success,
    /// Done; called again after a delay the policy asked for.
    RequeueAfter,
    /// Failed; retried after a backoff.
    Error,
    /// Failed in a way only a change can fix: not retried.
    TerminalError,
}

impl Outcome {
    /// The `result` label (a terminal error is an `error` too).
    fn result(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error | Self::TerminalError => "error",
        }
    }
}

/// controller-runtime's reconcile-time buckets, 5 ms .. 60 s.
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

/// client-go's work-queue buckets, 10 ns .. 1,000 s, computed as Go's
/// `prometheus.ExponentialBuckets(10e-9, 10, 12)` does (each the one
/// before times ten), so that every bound is the same float as theirs.
fn queue_histogram() -> Histogram {
    Histogram::new(std::iter::successors(Some(10e-9), |bound| Some(bound * 10.0)).take(12))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The standard metrics, registered on the registry's root.
pub struct Standard {
    reconcile_total: Family<ControllerResult, Counter>,
    reconcile_errors_total: Family<ControllerLabel, Counter>,
    terminal_reconcile_errors_total: Family<ControllerLabel, Counter>,
    reconcile_time: HistogramFamily<ControllerLabel>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    requests_total: Family<RequestLabels, Counter>,
    leader_status: Family<LeaseName, Gauge>,
    queue: Arc<QueueCollector>,
}

impl Standard {
    /// Registers the standard families on `registry` (unprefixed), with
    /// the series controller-runtime starts at zero.
    pub(super) fn new(registry: &mut Registry) -> Self {
        let standard = Self {
            reconcile_total: registry.add(
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default(),
            ),
            reconcile_errors_total: registry.add(
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default(),
            ),
            terminal_reconcile_errors_total: registry.add(
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                Family::default(),
            ),
            reconcile_time: registry.add(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Family::new_with_constructor(reconcile_time_histogram),
            ),
            queue_duration: registry.add(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                Family::new_with_constructor(queue_histogram),
            ),
            work_duration: registry.add(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                Family::new_with_constructor(queue_histogram),
            ),
            requests_total: registry.add(
                "rest_client_requests",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                Family::default(),
            ),
            leader_status: registry.add(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
                Family::default(),
            ),
            queue: Arc::default(),
        };
        // A panic in a pass is not caught to be counted: the counter
        // stays zero, as controller-runtime's does unless it recovers.
        let panics: Family<ControllerLabel, Counter> = registry.add(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            Family::default(),
        );
        // No pass has a deadline of its own: each guest call has, and a
        // call past it is a guest fault (`DeadlineExceeded`) and the pass
        // an error. Zero, as controller-runtime's without a timeout.
        let timeouts: Family<ControllerLabel, Counter> = registry.add(
            "controller_runtime_reconcile_timeouts",
            "Total number of reconciliation timeouts per controller",
            Family::default(),
        );
        for family in [
            &standard.reconcile_errors_total,
            &standard.terminal_reconcile_errors_total,
            &panics,
            &timeouts,
        ] {
            family
                .get_or_create(&ControllerLabel {
                    controller: CONTROLLER,
                })
                .inc_by(0);
        }
        for outcome in [Outcome::Success, Outcome::RequeueAfter, Outcome::Error] {
            standard
                .reconcile_total
                .get_or_create(&ControllerResult {
                    controller: CONTROLLER,
                    result: outcome.result(),
                })
                .inc_by(0);
        }
        // controller-runtime's `requeue` result: a pass that asks to be
        // called again without a delay. A policy's pass cannot.
        standard
            .reconcile_total
            .get_or_create(&ControllerResult {
                controller: CONTROLLER,
                result: "requeue",
            })
            .inc_by(0);
        registry.register_collector(Box::new(Arc::clone(&standard.queue)));
        registry.register_collector(Box::new(ProcessCollector));
        standard
    }

    /// Counts one pass ending in `outcome` after `took`.
    pub fn reconciled(&self, outcome: Outcome, took: Duration) {
        let controller = ControllerLabel {
            controller: CONTROLLER,
        };
        self.reconcile_total
            .get_or_create(&ControllerResult {
                controller: CONTROLLER,
                result: outcome.result(),
            })
            .inc();
        if matches!(outcome, Outcome::Error | Outcome::TerminalError) {
            self.reconcile_errors_total.get_or_create(&controller).inc();
        }
        if outcome == Outcome::TerminalError {
            self.terminal_reconcile_errors_total
                .get_or_create(&controller)
                .inc();
        }
        self.reconcile_time
            .get_or_create(&controller)
            .observe(took.as_secs_f64());
    }

    /// Records a key that waited `waited` in the queue before a worker
    /// took it, and was then worked on for `worked`.
    pub fn dequeued(&self, waited: Duration, worked: Duration) {
        let queue = QueueLabels {
            name: CONTROLLER,
            controller: CONTROLLER,
        };
        self.queue_duration
            .get_or_create(&queue)
            .observe(waited.as_secs_f64());
        self.work_duration
            .get_or_create(&queue)
            .observe(worked.as_secs_f64());
    }

    /// Sets whether this replica holds `lease` (the leader Lease, or a
    /// shard's member Lease).
    pub fn leading(&self, lease: &str, leading: bool) {
        self.leader_status
            .get_or_create(&LeaseName {
                name: lease.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// Reports the queue `stats` reads, worked on by `workers` workers, from
    /// now on. The first queue attached is the one reported.
    pub fn attach_queue(&self, workers: usize, stats: impl Fn() -> Stats + Send + Sync + 'static) {
        let _ = self.queue.source.set(QueueSource {
            workers,
            stats: Box::new(stats),
        });
    }

    /// A client layer counting each request sent to `host` (the API
    /// server's `host:port`) in `rest_client_requests_total`.
    #[must_use]
    pub fn requests_layer(&self, host: &str) -> RequestsLayer {
        RequestsLayer::new(self.requests_total.clone(), host)
    }
}

/// The work queue as the metrics read it.
struct QueueSource {
    workers: usize,
    stats: Box<dyn Fn() -> Stats + Send + Sync>,
}

/// Encodes the queue's families from its stats at each scrape.
#[derive(Default)]
struct QueueCollector {
    source: OnceLock<QueueSource>,
}

impl fmt::Debug for QueueCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueCollector")
            .field("attached", &self.source.get().is_some())
            .finish()
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Collector for QueueCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let Some(source) = self.source.get() else {
            return Ok(());
        };
        let stats = (source.stats)();
        let queue = QueueLabels {
            name: CONTROLLER,
            controller: CONTROLLER,
        };
        let controller = ControllerLabel {
            controller: CONTROLLER,
        };
        let depth = DepthLabels {
            name: CONTROLLER,
            controller: CONTROLLER,
            priority: "",
        };
        one(
            &mut encoder,
            (
                "workqueue_depth",
                "Current depth of workqueue by workqueue and priority",
            ),
            &depth,
            ConstGauge::new(gauge(stats.ready)),
        )?;
        one(
            &mut encoder,
            (
                "workqueue_adds",
                "Total number of adds handled by workqueue",
            ),
            &queue,
            ConstCounter::new(stats.adds),
        )?;
        one(
            &mut encoder,
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
            ),
            &queue,
            ConstGauge::new(stats.unfinished.as_secs_f64()),
        )?;
        one(
            &mut encoder,
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
            ),
            &queue,
            ConstGauge::new(stats.longest.as_secs_f64()),
        )?;
        one(
            &mut encoder,
            (
                "workqueue_retries",
                "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
            ),
            &queue,
            ConstCounter::new(stats.retries),
        )?;
        one(
            &mut encoder,
            (
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            ),
            &controller,
            ConstGauge::new(gauge(source.workers)),
        )?;
        one(
            &mut encoder,
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            ),
            &controller,
            ConstGauge::new(gauge(stats.in_flight)),
        )
    }
}

/// Encodes a family `(name, help)` of one series, `labels`.
fn one(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help): (&str, &str),
    labels: &impl EncodeLabelSet,
    metric: impl EncodeMetric,
) -> Result<(), fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(family.encode_family(labels)?)
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;

    #[test]
    fn passes_and_the_queue_render_under_controller_runtime_names() {
        let metrics = Metrics::default();
        let standard = &metrics.standard;
        standard.reconciled(Outcome::Success, Duration::from_millis(20));
        standard.reconciled(Outcome::TerminalError, Duration::from_millis(3));
        standard.dequeued(Duration::from_millis(1), Duration::from_millis(20));
        standard.leading("policyhost", true);
        standard.attach_queue(4, || Stats {
            ready: 3,
            in_flight: 2,
            adds: 9,
            retries: 1,
            unfinished: Duration::from_millis(1500),
            longest: Duration::from_secs(1),
        });
        let text = metrics.render();
        for line in [
            r#"controller_runtime_reconcile_total{controller="datajob",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="datajob",result="error"} 1"#,
            r#"controller_runtime_reconcile_total{controller="datajob",result="requeue"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="datajob"} 1"#,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="datajob"} 1"#,
            r#"controller_runtime_reconcile_panics_total{controller="datajob"} 0"#,
            r#"controller_runtime_reconcile_timeouts_total{controller="datajob"} 0"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="0.025",controller="datajob"} 2"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="datajob"} 2"#,
            r#"workqueue_depth{name="datajob",controller="datajob",priority=""} 3"#,
            r#"workqueue_adds_total{name="datajob",controller="datajob"} 9"#,
            r#"workqueue_retries_total{name="datajob",controller="datajob"} 1"#,
            r#"workqueue_unfinished_work_seconds{name="datajob",controller="datajob"} 1.5"#,
            r#"workqueue_longest_running_processor_seconds{name="datajob",controller="datajob"} 1.0"#,
            r#"workqueue_queue_duration_seconds_count{name="datajob",controller="datajob"} 1"#,
            r#"workqueue_work_duration_seconds_count{name="datajob",controller="datajob"} 1"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="datajob"} 4"#,
            r#"controller_runtime_active_workers{controller="datajob"} 2"#,
            r#"leader_election_master_status{name="policyhost"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(text.contains("# TYPE workqueue_adds counter"), "{text}");
    }
}
