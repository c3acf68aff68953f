//! Prometheus metrics of the operator, served on `/metrics`: its own
//! (prefix `policyhost_`) and, beside them, controller-runtime's standard
//! names ([`standard`]).

mod process;
mod rest_client;
mod spans;
pub mod standard;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

pub use self::rest_client::RequestsLayer;
use self::standard::Standard;
use crate::outbound::Refusal;
use crate::runtime::CallReport;

/// Labels of a call's outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyResult {
    /// The policy name.
    pub policy: String,
    /// `success`, or the reason of the failure (e.g. `InvalidParams`, `ApplyFailed`).
    pub result: String,
}

/// Labels of a guest fault.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuestFault {
    /// The policy name.
    pub policy: String,
    /// The fault, e.g. `OutOfFuel`, `DeadlineExceeded`, `Trap`.
    pub kind: String,
}

/// Labels of guest log records dropped.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LogDropped {
    /// The policy name.
    pub policy: String,
    /// Which cap dropped them: `call` (per call) or `policy` (the policy's log rate).
    pub cap: String,
}

/// Labels of a refused outbound request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundRefused {
    /// The policy name.
    pub policy: String,
    /// Why: `origin`, `address`, `requests-per-call` or `concurrency`.
    pub reason: String,
}

/// Labels naming a policy.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    /// The policy name.
    pub policy: String,
}

/// Labels of DataJobs waiting for their finalizer's release.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PendingLabels {
    /// The policy name.
    pub policy: String,
    /// `cleaning`, `failing`, `blocked` or `policy-unavailable`.
    pub state: String,
}

/// Labels of the policy version in service.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyDigest {
    /// The policy name.
    pub policy: String,
    /// The SHA-256 digest of its component.
    pub digest: String,
}

/// Labels of a rejected policy version.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyReason {
    /// The policy name.
    pub policy: String,
    /// Why it was rejected, e.g. `DigestMismatch`, `UnsupportedImport`.
    pub reason: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 100 µs .. ~52 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~56 s in steps of 25 %, fine enough to read p50 and p99 from.
    Histogram::new(exponential_buckets(0.001, 1.25, 50))
}

fn fuel_histogram() -> Histogram {
    // 1,000 .. ~10^11 units.
    Histogram::new(exponential_buckets(1000.0, 4.0, 20))
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    /// Reconciles by policy and result.
    pub reconcile_total: Family<PolicyResult, Counter>,
    /// Time of a reconcile, from leaving the queue to its last write.
    pub reconcile_duration: HistogramFamily<PolicyLabel>,
    /// Fuel consumed per guest call.
    pub guest_fuel: HistogramFamily<PolicyLabel>,
    /// Guest faults by policy and kind.
    pub guest_faults_total: Family<GuestFault, Counter>,
    /// Guest log records (`log()`, stdout and stderr lines) not sent to the
    /// host's log, by policy and cap.
    pub guest_log_dropped_total: Family<LogDropped, Counter>,
    /// Guest-call threads replaced because a call held one past its deadline.
    pub guest_threads_replaced_total: Family<PolicyLabel, Counter>,
    /// Outbound HTTP requests policies sent (a connection was opened).
    pub outbound_requests_total: Family<PolicyLabel, Counter>,
    /// Outbound HTTP requests the host refused, by policy and reason.
    pub outbound_refused_total: Family<OutboundRefused, Counter>,
    /// Keys ready in the work queue.
    pub queue_depth: Gauge,
    /// Keys waiting for a delay (requeue-after or backoff).
    pub queue_delayed: Gauge,
    /// Time a worker spends on one key.
    pub work_duration: Histogram,
    /// `cleanup` calls by policy and result (`done`, `retry`, or the failure's reason).
    pub cleanup_total: Family<PolicyResult, Counter>,
    /// Time of one `cleanup` call.
    pub cleanup_duration: HistogramFamily<PolicyLabel>,
    /// DataJobs Terminating whose finalizer is not released yet, by policy and state.
    pub pending_finalizers: Family<PendingLabels, Gauge>,
    /// Finalizers released without cleanup by the force-release annotation.
    pub force_releases_total: Family<PolicyLabel, Counter>,
    /// Age of the oldest DataJob of a policy waiting for its finalizer's release.
    pub pending_oldest: Family<PolicyLabel, Gauge<f64, AtomicU64>>,
    /// Finalizer patches refused for a conflict or a failed precondition (then retried).
    pub finalizer_conflicts: Counter,
    /// 1 while this replica holds the leader Lease (always, without election).
    pub leader: Gauge,
    /// Writes the leader fence refused (sent while not leading).
    pub fenced_writes: Counter,
    /// The shard buckets this replica serves (of 64; all without shards).
    pub shard_buckets: Gauge,
    /// The DataJobs of the buckets it serves, as cached.
    pub shard_datajobs: Gauge,
    /// The children cached: those of the buckets it serves.
    pub shard_children: Gauge,
    /// 1 for the version of each policy in service.
    pub policy_info: Family<PolicyDigest, Gauge>,
    /// The bytes of compiled code each pinned version keeps loaded.
    pub policy_pinned_code_bytes: Family<PolicyDigest, Gauge>,
    /// Rejected policy versions by policy and reason.
    pub policy_load_errors_total: Family<PolicyReason, Counter>,
    /// Rollout transitions (a step, a pause, a rollback), by policy and reason.
    pub rollout_transitions_total: Family<PolicyReason, Counter>,
    /// Time from a policy ConfigMap's change to its version in service.
    pub policy_load_duration: HistogramFamily<PolicyLabel>,
    /// Time from a key's enqueue (the change that made it work) to the end
    /// of its reconcile's last write: queue wait plus reconcile.
    pub reconcile_latency: Histogram,
    /// Events not recorded on DataJobs of a policy, over the per-result cap
    /// or the per-DataJob rate.
    pub events_dropped_total: Family<PolicyLabel, Counter>,
    /// Objects with the operator's labels whose controller reference names
    /// a DataJob of another namespace: never anyone's child.
    pub foreign_children: Counter,
    /// Shadow calls of candidate versions by policy and result (`same`,
    /// `differs`, `fault`, `skipped`).
    pub shadow_calls_total: Family<PolicyResult, Counter>,
    /// A candidate's differing children sent to the API server as dry runs,
    /// by policy and result (`accepted`, `refused`), and those its budget
    /// left unchecked (`unchecked`).
    pub shadow_dry_runs_total: Family<PolicyResult, Counter>,
    /// controller-runtime's names for the same passes, queue, requests and
    /// leadership.
    pub standard: Standard,
}

/// Registers a metric and hands it back, so each metric of [`Metrics`] is
/// declared in one expression: its field, name, help and kind together.
trait Register {
    fn add<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M;
}

impl Register for Registry {
    fn add<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        // The metric is a handle to shared atomics: the clone registered
        // and the one returned count together.
        self.register(name, help, metric.clone());
        metric
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let standard = Standard::new(&mut registry);
        let own = registry.sub_registry_with_prefix("policyhost");
        own.register_collector(Box::new(spans::SpansCollector));
        // Fields are evaluated in the order written, which is the order
        // `/metrics` lists them in.
        Self {
            reconcile_total: own.add(
                "reconcile",
                "Reconciles of DataJobs by policy and result",
                Family::default(),
            ),
            reconcile_duration: own.add(
                "reconcile_duration_seconds",
                "Time of one reconcile, from leaving the queue to its last write",
                Family::new_with_constructor(seconds_histogram),
            ),
            guest_fuel: own.add(
                "guest_fuel_consumed",
                "Fuel consumed by one guest call",
                Family::new_with_constructor(fuel_histogram),
            ),
            guest_faults_total: own.add(
                "guest_faults",
                "Guest faults by policy and kind",
                Family::default(),
            ),
            guest_log_dropped_total: own.add(
                "guest_log_records_dropped",
                "Guest log records (log(), stdout and stderr lines) not sent to the host's log, by policy and cap (call, policy)",
                Family::default(),
            ),
            guest_threads_replaced_total: own.add(
                "guest_threads_replaced",
                "Guest-call threads abandoned and replaced because a call held one past its deadline",
                Family::default(),
            ),
            outbound_requests_total: own.add(
                "outbound_requests",
                "Outbound HTTP requests policies sent through the host",
                Family::default(),
            ),
            outbound_refused_total: own.add(
                "outbound_refused",
                "Outbound HTTP requests the host refused before connecting, by policy and reason (origin, address, requests-per-call, concurrency, shadow)",
                Family::default(),
            ),
            queue_depth: own.add(
                "queue_depth",
                "DataJobs ready in the work queue",
                Gauge::default(),
            ),
            queue_delayed: own.add(
                "queue_delayed",
                "DataJobs waiting in the work queue for a requeue or a backoff",
                Gauge::default(),
            ),
            work_duration: own.add(
                "queue_work_duration_seconds",
                "Time a worker spends on one DataJob",
                seconds_histogram(),
            ),
            cleanup_total: own.add(
                "cleanup",
                "Cleanup calls of deleted DataJobs by policy and result (done, retry, or the failure's reason)",
                Family::default(),
            ),
            cleanup_duration: own.add(
                "cleanup_duration_seconds",
                "Time of one cleanup call",
                Family::new_with_constructor(seconds_histogram),
            ),
            pending_finalizers: own.add(
                "pending_finalizers",
                "DataJobs Terminating whose finalizer is not released yet, by policy and state \
                 (cleaning, failing, blocked, policy-unavailable)",
                Family::default(),
            ),
            pending_oldest: own.add(
                "pending_finalizer_oldest_seconds",
                "Seconds since deletion of the oldest DataJob of a policy whose finalizer is not released yet (0: none)",
                Family::default(),
            ),
            force_releases_total: own.add(
                "force_releases",
                "Finalizers released without a successful cleanup by the force-release annotation",
                Family::default(),
            ),
            finalizer_conflicts: own.add(
                "finalizer_conflicts",
                "Finalizer patches refused for a conflict or a failed precondition, then retried",
                Counter::default(),
            ),
            leader: own.add(
                "leader",
                "1 while this replica holds the leader Lease and reconciles, 0 while it follows",
                Gauge::default(),
            ),
            shard_buckets: own.add(
                "shard_buckets",
                "The shard buckets (of 64) whose DataJobs this replica serves: all of them without shards",
                Gauge::default(),
            ),
            shard_datajobs: own.add(
                "shard_datajobs",
                "The cached DataJobs of the buckets this replica serves",
                Gauge::default(),
            ),
            shard_children: own.add(
                "shard_children",
                "The cached children: those of the DataJobs of the buckets this replica serves",
                Gauge::default(),
            ),
            fenced_writes: own.add(
                "fenced_writes",
                "API writes refused before sending because this replica did not hold the leader Lease",
                Counter::default(),
            ),
            policy_info: own.add(
                "policy_info",
                "1 for the version (component digest) of each policy in service",
                Family::default(),
            ),
            policy_pinned_code_bytes: own.add(
                "policy_pinned_code_bytes",
                "Bytes of compiled code each version some DataJobs are pinned to keeps loaded (one series per policy and digest)",
                Family::default(),
            ),
            policy_load_errors_total: own.add(
                "policy_load_errors",
                "Policy versions rejected, by policy and reason",
                Family::default(),
            ),
            rollout_transitions_total: own.add(
                "rollout_transitions",
                "Rollout transitions, by policy and reason (StepStarted, Paused, Resumed, Complete, RolledBack, Aborted)",
                Family::default(),
            ),
            policy_load_duration: own.add(
                "policy_load_duration_seconds",
                "Time to load a policy version: decode, compile or cache hit, validate, trial instance",
                Family::new_with_constructor(seconds_histogram),
            ),
            reconcile_latency: own.add(
                "reconcile_latency_seconds",
                "Time from a DataJob's enqueue to the last write of its reconcile",
                latency_histogram(),
            ),
            events_dropped_total: own.add(
                "events_dropped",
                "Events not recorded on DataJobs of a policy: over the per-result cap or the per-DataJob rate",
                Family::default(),
            ),
            foreign_children: own.add(
                "foreign_children",
                "Objects with the operator's labels naming a DataJob of another namespace as controller; never taken for children",
                Counter::default(),
            ),
            shadow_calls_total: own.add(
                "shadow_calls",
                "Shadow calls of candidate versions by policy and result (same, differs, fault, skipped)",
                Family::default(),
            ),
            shadow_dry_runs_total: own.add(
                "shadow_dry_runs",
                "A candidate's differing children sent to the API server as dry runs, by policy and result (accepted, refused), or left unchecked by the dry-run budget (unchecked)",
                Family::default(),
            ),
            standard,
            registry,
        }
    }
}

impl Metrics {
    /// Counts one reconcile of `policy` ending in `result` after `duration`.
    pub fn reconciled(&self, policy: &str, result: &str, duration: Duration) {
        self.reconcile_total
            .get_or_create(&PolicyResult {
                policy: policy.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&PolicyLabel {
                policy: policy.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// Counts one shadow call of `policy`'s candidate ending in `result`.
    pub fn shadow_call(&self, policy: &str, result: &str) {
        self.shadow_calls_total
            .get_or_create(&PolicyResult {
                policy: policy.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts `n` dry runs of `policy`'s candidate's children ending in `result`.
    pub fn shadow_dry_runs(&self, policy: &str, result: &str, n: u64) {
        if n > 0 {
            self.shadow_dry_runs_total
                .get_or_create(&PolicyResult {
                    policy: policy.to_owned(),
                    result: result.to_owned(),
                })
                .inc_by(n);
        }
    }

    /// Records the cost of one guest call, and its fault if it faulted.
    pub fn guest_call(&self, policy: &str, report: &CallReport, fault: Option<&str>) {
        #[allow(clippy::cast_precision_loss)] // fuel is far below 2^52 in practice
        self.guest_fuel
            .get_or_create(&PolicyLabel {
                policy: policy.to_owned(),
            })
            .observe(report.fuel_consumed as f64);
        if let Some(kind) = fault {
            self.guest_faults_total
                .get_or_create(&GuestFault {
                    policy: policy.to_owned(),
                    kind: kind.to_owned(),
                })
                .inc();
        }
        let dropped = report.log_dropped + report.output_lines_dropped;
        for (cap, count) in [
            ("call", dropped.saturating_sub(report.log_throttled)),
            ("policy", report.log_throttled),
        ] {
            if count > 0 {
                self.guest_log_dropped_total
                    .get_or_create(&LogDropped {
                        policy: policy.to_owned(),
                        cap: cap.to_owned(),
                    })
                    .inc_by(u64::from(count));
            }
        }
        if report.thread_replaced {
            self.guest_threads_replaced_total
                .get_or_create(&PolicyLabel {
                    policy: policy.to_owned(),
                })
                .inc();
        }
        let outbound = &report.outbound;
        if outbound.requests > 0 {
            self.outbound_requests_total
                .get_or_create(&PolicyLabel {
                    policy: policy.to_owned(),
                })
                .inc_by(u64::from(outbound.requests));
        }
        for refusal in Refusal::ALL {
            let count = outbound.refused(refusal);
            if count > 0 {
                self.outbound_refused_total
                    .get_or_create(&OutboundRefused {
                        policy: policy.to_owned(),
                        reason: refusal.as_str().to_owned(),
                    })
                    .inc_by(u64::from(count));
            }
        }
    }

    /// Counts one `cleanup` call of `policy` ending in `result` after `duration`.
    pub fn cleaned(&self, policy: &str, result: &str, duration: Duration) {
        self.cleanup_total
            .get_or_create(&PolicyResult {
                policy: policy.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        self.cleanup_duration
            .get_or_create(&PolicyLabel {
                policy: policy.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// Sets how many DataJobs of `policy` wait in `state` for their finalizer.
    pub fn pending(&self, policy: &str, state: &str, count: i64) {
        self.pending_finalizers
            .get_or_create(&PendingLabels {
                policy: policy.to_owned(),
                state: state.to_owned(),
            })
            .set(count);
    }

    /// Sets how long the oldest DataJob of `policy` has waited for its finalizer.
    pub fn pending_oldest(&self, policy: &str, seconds: f64) {
        self.pending_oldest
            .get_or_create(&PolicyLabel {
                policy: policy.to_owned(),
            })
            .set(seconds);
    }

    /// Counts `count` Events dropped on DataJobs of `policy`.
    pub fn events_dropped(&self, policy: &str, count: u64) {
        self.events_dropped_total
            .get_or_create(&PolicyLabel {
                policy: policy.to_owned(),
            })
            .inc_by(count);
    }

    /// Counts one force release of a DataJob of `policy`.
    pub fn force_released(&self, policy: &str) {
        self.force_releases_total
            .get_or_create(&PolicyLabel {
                policy: policy.to_owned(),
            })
            .inc();
    }

    /// Records that `policy` now serves the component `serving` (none: it
    /// is out of service) instead of `replaced`.
    pub fn policy_swapped(&self, policy: &str, replaced: Option<&str>, serving: Option<&str>) {
        let labels = |digest: &str| PolicyDigest {
            policy: policy.to_owned(),
            digest: digest.to_owned(),
        };
        if let Some(old) = replaced.filter(|old| Some(*old) != serving) {
            self.policy_info.remove(&labels(old));
        }
        if let Some(new) = serving {
            self.policy_info.get_or_create(&labels(new)).set(1);
        }
    }

    /// The versions of `policy` pinned now, with their code's bytes, in
    /// place of those pinned before (`before`, digests).
    pub fn policy_pinned(&self, policy: &str, before: &[String], now: &[(String, usize)]) {
        let labels = |digest: &str| PolicyDigest {
            policy: policy.to_owned(),
            digest: digest.to_owned(),
        };
        for old in before {
            self.policy_pinned_code_bytes.remove(&labels(old));
        }
        for (digest, bytes) in now {
            self.policy_pinned_code_bytes
                .get_or_create(&labels(digest))
                .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
        }
    }

    /// Counts a rejected version of `policy`.
    pub fn policy_rejected(&self, policy: &str, reason: &str) {
        self.policy_load_errors_total
            .get_or_create(&PolicyReason {
                policy: policy.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a transition of `policy`'s rollout.
    pub fn rollout_moved(&self, policy: &str, reason: &str) {
        self.rollout_transitions_total
            .get_or_create(&PolicyReason {
                policy: policy.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// The metrics in the Prometheus text format.
    #[must_use]
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::OutboundReport;

    #[test]
    fn rendered_metrics_carry_the_prefix_and_labels() {
        let metrics = Metrics::default();
        metrics.reconciled("fanout", "success", Duration::from_millis(3));
        metrics.guest_call(
            "fanout",
            &CallReport {
                fuel_consumed: 5000,
                ..CallReport::default()
            },
            Some("OutOfFuel"),
        );
        metrics.queue_depth.set(4);
        metrics.reconcile_latency.observe(0.002);
        let text = metrics.render();
        assert!(
            text.contains(r#"policyhost_reconcile_total{policy="fanout",result="success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"policyhost_guest_faults_total{policy="fanout",kind="OutOfFuel"} 1"#)
        );
        assert!(text.contains("policyhost_reconcile_duration_seconds_count{policy=\"fanout\"} 1"));
        assert!(text.contains("policyhost_guest_fuel_consumed_count{policy=\"fanout\"} 1"));
        assert!(text.contains("policyhost_queue_depth 4"));
        assert!(text.contains("policyhost_reconcile_latency_seconds_count 1"));
    }

    #[test]
    fn finalizer_metrics_are_rendered_with_their_labels() {
        let metrics = Metrics::default();
        metrics.cleaned("fanout", "done", Duration::from_millis(1));
        metrics.cleaned("fanout", "Trap", Duration::from_millis(1));
        metrics.pending("fanout", "blocked", 2);
        metrics.force_released("fanout");
        metrics.finalizer_conflicts.inc();
        let text = metrics.render();
        for line in [
            r#"policyhost_cleanup_total{policy="fanout",result="done"} 1"#,
            r#"policyhost_cleanup_total{policy="fanout",result="Trap"} 1"#,
            r#"policyhost_cleanup_duration_seconds_count{policy="fanout"} 2"#,
            r#"policyhost_pending_finalizers{policy="fanout",state="blocked"} 2"#,
            r#"policyhost_force_releases_total{policy="fanout"} 1"#,
            "policyhost_finalizer_conflicts_total 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn the_policy_info_series_follows_the_version_in_service() {
        let metrics = Metrics::default();
        metrics.policy_swapped("fanout", None, Some("aaa"));
        metrics.policy_swapped("fanout", Some("aaa"), Some("bbb"));
        metrics.policy_rejected("fanout", "DigestMismatch");
        let text = metrics.render();
        assert!(
            text.contains(r#"policyhost_policy_info{policy="fanout",digest="bbb"} 1"#),
            "{text}"
        );
        assert!(!text.contains(r#"digest="aaa""#), "{text}");
        assert!(text.contains(
            r#"policyhost_policy_load_errors_total{policy="fanout",reason="DigestMismatch"} 1"#
        ));
        metrics.policy_swapped("fanout", Some("bbb"), None);
        assert!(!metrics.render().contains("digest=\"bbb\""));
    }

    #[test]
    fn the_oldest_pending_age_and_the_leader_role_are_rendered() {
        let metrics = Metrics::default();
        metrics.pending_oldest("fanout", 42.5);
        metrics.leader.set(1);
        metrics.fenced_writes.inc();
        let text = metrics.render();
        for line in [
            r#"policyhost_pending_finalizer_oldest_seconds{policy="fanout"} 42.5"#,
            "policyhost_leader 1",
            "policyhost_fenced_writes_total 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn dropped_guest_log_records_and_replaced_threads_are_counted_by_policy() {
        let metrics = Metrics::default();
        let report = CallReport {
            log_dropped: 7,
            output_lines_dropped: 5,
            log_throttled: 4,
            thread_replaced: true,
            outbound: OutboundReport {
                requests: 3,
                refused: [2, 1, 0, 0, 0],
            },
            ..CallReport::default()
        };
        metrics.guest_call("flood", &report, Some("DeadlineExceeded"));
        let text = metrics.render();
        for line in [
            r#"policyhost_guest_log_records_dropped_total{policy="flood",cap="call"} 8"#,
            r#"policyhost_guest_log_records_dropped_total{policy="flood",cap="policy"} 4"#,
            r#"policyhost_guest_threads_replaced_total{policy="flood"} 1"#,
            r#"policyhost_outbound_requests_total{policy="flood"} 3"#,
            r#"policyhost_outbound_refused_total{policy="flood",reason="origin"} 2"#,
            r#"policyhost_outbound_refused_total{policy="flood",reason="address"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    /// A metric left out of the registry would still count, but never
    /// show on `/metrics`: every field gets a sample here, and every one
    /// must be rendered, under its name and kind, in declaration order.
    #[test]
    fn every_metric_is_registered_and_rendered_in_order() {
        let metrics = Metrics::default();
        // Naming each field: a metric added to the struct does not compile
        // here until it gets a sample and a line below.
        let Metrics {
            registry: _,
            reconcile_total,
            reconcile_duration,
            guest_fuel,
            guest_faults_total,
            guest_log_dropped_total,
            guest_threads_replaced_total,
            outbound_requests_total,
            outbound_refused_total,
            queue_depth,
            queue_delayed,
            work_duration,
            cleanup_total,
            cleanup_duration,
            pending_finalizers,
            force_releases_total,
            pending_oldest,
            finalizer_conflicts,
            leader,
            fenced_writes,
            shard_buckets,
            shard_datajobs,
            shard_children,
            policy_info,
            policy_pinned_code_bytes,
            policy_load_errors_total,
            rollout_transitions_total,
            policy_load_duration,
            reconcile_latency,
            events_dropped_total,
            foreign_children,
            shadow_calls_total,
            shadow_dry_runs_total,
            standard: _,
        } = &metrics;
        let policy = PolicyLabel {
            policy: "p".to_owned(),
        };
        let result = PolicyResult {
            policy: "p".to_owned(),
            result: "success".to_owned(),
        };
        reconcile_total.get_or_create(&result).inc();
        reconcile_duration.get_or_create(&policy).observe(0.1);
        guest_fuel.get_or_create(&policy).observe(1000.0);
        guest_faults_total
            .get_or_create(&GuestFault {
                policy: "p".to_owned(),
                kind: "Trap".to_owned(),
            })
            .inc();
        guest_log_dropped_total
            .get_or_create(&LogDropped {
                policy: "p".to_owned(),
                cap: "call".to_owned(),
            })
            .inc();
        guest_threads_replaced_total.get_or_create(&policy).inc();
        outbound_requests_total.get_or_create(&policy).inc();
        outbound_refused_total
            .get_or_create(&OutboundRefused {
                policy: "p".to_owned(),
                reason: "origin".to_owned(),
            })
            .inc();
        queue_depth.set(1);
        queue_delayed.set(1);
        work_duration.observe(0.1);
        cleanup_total.get_or_create(&result).inc();
        cleanup_duration.get_or_create(&policy).observe(0.1);
        pending_finalizers
            .get_or_create(&PendingLabels {
                policy: "p".to_owned(),
                state: "blocked".to_owned(),
            })
            .set(1);
        force_releases_total.get_or_create(&policy).inc();
        pending_oldest.get_or_create(&policy).set(1.0);
        finalizer_conflicts.inc();
        leader.set(1);
        fenced_writes.inc();
        shard_buckets.set(1);
        shard_datajobs.set(1);
        shard_children.set(1);
        policy_info
            .get_or_create(&PolicyDigest {
                policy: "p".to_owned(),
                digest: "d".to_owned(),
            })
            .set(1);
        policy_pinned_code_bytes
            .get_or_create(&PolicyDigest {
                policy: "p".to_owned(),
                digest: "d".to_owned(),
            })
            .set(1);
        policy_load_errors_total
            .get_or_create(&PolicyReason {
                policy: "p".to_owned(),
                reason: "DigestMismatch".to_owned(),
            })
            .inc();
        rollout_transitions_total
            .get_or_create(&PolicyReason {
                policy: "p".to_owned(),
                reason: "RolledBack".to_owned(),
            })
            .inc();
        policy_load_duration.get_or_create(&policy).observe(0.1);
        reconcile_latency.observe(0.1);
        events_dropped_total.get_or_create(&policy).inc();
        foreign_children.inc();
        shadow_calls_total.get_or_create(&result).inc();
        shadow_dry_runs_total.get_or_create(&result).inc();
        let text = metrics.render();
        let rendered: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE policyhost_"))
            .collect();
        assert_eq!(
            rendered,
            [
                "reconcile counter",
                "reconcile_duration_seconds histogram",
                "guest_fuel_consumed histogram",
                "guest_faults counter",
                "guest_log_records_dropped counter",
                "guest_threads_replaced counter",
                "outbound_requests counter",
                "outbound_refused counter",
                "queue_depth gauge",
                "queue_delayed gauge",
                "queue_work_duration_seconds histogram",
                "cleanup counter",
                "cleanup_duration_seconds histogram",
                "pending_finalizers gauge",
                "pending_finalizer_oldest_seconds gauge",
                "force_releases counter",
                "finalizer_conflicts counter",
                "leader gauge",
                "shard_buckets gauge",
                "shard_datajobs gauge",
                "shard_children gauge",
                "fenced_writes counter",
                "policy_info gauge",
                "policy_pinned_code_bytes gauge",
                "policy_load_errors counter",
                "rollout_transitions counter",
                "policy_load_duration_seconds histogram",
                "reconcile_latency_seconds histogram",
                "events_dropped counter",
                "foreign_children counter",
                "shadow_calls counter",
                "shadow_dry_runs counter",
                "trace_spans_exported counter",
                "trace_spans_dropped counter",
            ],
            "{text}"
        );
    }
}
