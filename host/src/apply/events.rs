//! Kubernetes Events (`events.k8s.io/v1`): on DataJobs, from the policy and
//! the host, and on policy ConfigMaps ([`record_on_policy`]).
//!
//! Every Event is an API write, so how many one DataJob gets is bounded, as
//! the Kubernetes event recorder bounds them (its spam filter is a token
//! bucket per object, its aggregator folds the rest into one Event): at most
//! [`Limits::per_result`] of one policy result are recorded, and at most
//! [`Limits::per_minute`] per DataJob, host and policy Events alike (a token
//! bucket holding a minute's worth). What is dropped is counted
//! (`policyhost_events_dropped_total`) and reported in one warning Event
//! [`EVENTS_DROPPED`] on the DataJob as soon as the bucket has a token for
//! it; repeated identical Events become a series (`series.count`), which the
//! recorder does by itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tracing::{debug, warn};

use crate::cache::{Cached as _, ObjectKey};
use crate::chain::Chain;
use crate::crd::DataJob;
use crate::metrics::Metrics;
use crate::runtime::output::ReportedEvent;
use crate::runtime::output::status::truncate;

/// The reason of the Event that reports dropped Events.
pub const EVENTS_DROPPED: &str = "EventsDropped";

/// DataJobs whose buckets are tracked before full (idle) ones are forgotten.
const TRACKED: usize = 10_000;

/// How many Events one DataJob may have recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Events recorded of one policy result (`--max-events-per-result`).
    pub per_result: u32,
    /// Events per minute per DataJob, in bursts of as many
    /// (`--events-per-minute`).
    pub per_minute: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_result: 10,
            per_minute: 30,
        }
    }
}

/// The longest reason the Events API accepts.
const MAX_REASON: usize = 128;
/// The longest note the Events API accepts.
const MAX_NOTE: usize = 1024;

/// Records Events on DataJobs within [`Limits`]; repeated Events become a series.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    buckets: Arc<Mutex<Buckets>>,
    metrics: Arc<Metrics>,
}

impl Events {
    /// A recorder reporting as `policyhost`, instance `instance`, within `limits`.
    #[must_use]
    pub fn new(client: Client, instance: &str, limits: Limits, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: "policyhost".into(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            buckets: Arc::new(Mutex::new(Buckets::new(limits))),
            metrics,
        }
    }

    /// Records an Event on `job`, if its bucket has a token (else it is
    /// counted as dropped). A failure to record is logged, never fatal:
    /// Events are for people, the status is the record.
    pub async fn publish(
        &self,
        job: &DataJob,
        warning: bool,
        action: &str,
        reason: &str,
        message: &str,
    ) {
        let admission = self.admit(job, 1, 0);
        if admission.record > 0 {
            self.send(job, warning, action, reason, message).await;
        }
        self.report_dropped(job, admission).await;
    }

    /// Records a policy result's Events on `job`: the first
    /// [`Limits::per_result`], as far as its bucket allows; the rest are
    /// counted as dropped.
    pub async fn publish_result(&self, job: &DataJob, action: &str, events: &[ReportedEvent]) {
        let limits = self.lock().limits;
        let capped = events
            .len()
            .min(usize::try_from(limits.per_result).unwrap_or(usize::MAX));
        let excess = (events.len() - capped) as u64;
        let admission = self.admit(job, capped, excess);
        for event in &events[..admission.record] {
            self.send(
                job,
                event.kind == "Warning",
                action,
                &event.reason,
                &event.message,
            )
            .await;
        }
        self.report_dropped(job, admission).await;
    }

    fn admit(&self, job: &DataJob, wanted: usize, excess: u64) -> Admission {
        let admission = self
            .lock()
            .admit(&job.key(), wanted, excess, Instant::now());
        let dropped = (wanted - admission.record) as u64 + excess;
        if dropped > 0 {
            self.metrics.events_dropped(&job.spec.policy, dropped);
        }
        admission
    }

    async fn report_dropped(&self, job: &DataJob, admission: Admission) {
        let Some(dropped) = admission.summary else {
            return;
        };
        let limits = self.lock().limits;
        debug!(job = %job.key(), dropped, "Events dropped");
        let note = format!(
            "{dropped} Events on this DataJob were dropped: at most {} of one policy result \
             and {} per minute are recorded (policyhost_events_dropped_total counts them all)",
            limits.per_result, limits.per_minute
        );
        self.send(job, true, "Record", EVENTS_DROPPED, &note).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn send(&self, job: &DataJob, warning: bool, action: &str, reason: &str, message: &str) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: cut(reason, MAX_REASON),
            note: Some(cut(message, MAX_NOTE)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &job.object_ref(&())).await {
            warn!(error = %Chain(&error), reason, "cannot record event");
        }
    }
}

/// What may be recorded of a DataJob's Events now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Admission {
    /// How many of the Events asked for to record.
    record: usize,
    /// Dropped Events to report now (the bucket had a token for the report).
    summary: Option<u64>,
}

/// One token bucket per DataJob, holding up to a minute's worth of Events.
/// Pure bookkeeping: time is passed in.
struct Buckets {
    limits: Limits,
    by_job: HashMap<ObjectKey, Bucket>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// Dropped since the last report.
    dropped: u64,
}

impl Bucket {
    /// Takes a token for a report of the drops, if there are drops and a token.
    fn report(&mut self) -> Option<u64> {
        (self.dropped > 0 && self.tokens >= 1.0).then(|| {
            self.tokens -= 1.0;
            std::mem::take(&mut self.dropped)
        })
    }
}

impl Buckets {
    fn new(limits: Limits) -> Self {
        Self {
            limits,
            by_job: HashMap::new(),
        }
    }

    fn capacity(&self) -> f64 {
        f64::from(self.limits.per_minute)
    }

    /// Takes tokens for up to `wanted` Events of `key` at `now`, counting the
    /// rest and `excess` (Events over the per-result cap) as dropped; takes
    /// one more for a report of the drops when there is one left.
    fn admit(&mut self, key: &ObjectKey, wanted: usize, excess: u64, now: Instant) -> Admission {
        let capacity = self.capacity();
        if self.by_job.len() >= TRACKED && !self.by_job.contains_key(key) {
            self.forget_idle(now);
        }
        let bucket = self.by_job.entry(key.clone()).or_insert(Bucket {
            tokens: capacity,
            at: now,
            dropped: 0,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * capacity / 60.0;
        bucket.tokens = (bucket.tokens + refill).min(capacity);
        bucket.at = now;
        // Drops still unreported go first, so that a DataJob flooding
        // without pause cannot starve its own report.
        let mut summary = bucket.report();
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let available = bucket.tokens.floor() as usize;
        let record = wanted.min(available);
        bucket.tokens -= record as f64;
        bucket.dropped += (wanted - record) as u64 + excess;
        if summary.is_none() {
            summary = bucket.report();
        }
        Admission { record, summary }
    }

    /// Forgets the DataJobs whose buckets have refilled: they are as if new.
    fn forget_idle(&mut self, now: Instant) {
        let capacity = self.capacity();
        self.by_job.retain(|_, bucket| {
            let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * capacity / 60.0;
            bucket.tokens + refill < capacity
        });
    }
}

/// Records one Event on the policy ConfigMap `regarding` (action `Load`),
/// alone, outside any bucket.
///
/// Each load result is its own Event: the series a recorder would make of
/// Events with the same reason would keep the first note, and the note is
/// what tells one version from the next. A failure to record is logged,
/// never fatal: the ConfigMap's annotations are the record.
pub async fn record_on_policy(
    client: &Client,
    instance: &str,
    regarding: ObjectReference,
    warning: bool,
    reason: &str,
    note: &str,
) {
    let now = Timestamp::now();
    let namespace = regarding.namespace.clone().unwrap_or_default();
    let event = events::v1::Event {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                regarding.name.as_deref().unwrap_or("policy"),
                now.as_nanosecond()
            )),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        action: Some("Load".into()),
        reason: Some(cut(reason, MAX_REASON)),
        note: Some(cut(note, MAX_NOTE)),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some("policyhost".into()),
        reporting_instance: Some(instance.to_owned()),
        ..events::v1::Event::default()
    };
    let api: Api<events::v1::Event> = Api::namespaced(client.clone(), &namespace);
    if let Err(error) = api.create(&PostParams::default(), &event).await {
        warn!(error = %Chain(&error), reason, "cannot record event");
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut text = text.to_owned();
    truncate(&mut text, max);
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn buckets(per_minute: u32) -> Buckets {
        Buckets::new(Limits {
            per_result: 10,
            per_minute,
        })
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("ns", name)
    }

    #[test]
    fn a_datajob_gets_a_minutes_worth_at_once_then_its_rate_and_one_report_of_the_rest() {
        let mut buckets = buckets(30);
        let start = Instant::now();
        let first = buckets.admit(&key("a"), 25, 0, start);
        assert_eq!(
            first,
            Admission {
                record: 25,
                summary: None
            }
        );
        // 5 tokens left: 5 recorded, 15 dropped, no token for the report.
        let second = buckets.admit(&key("a"), 20, 0, start);
        assert_eq!(
            second,
            Admission {
                record: 5,
                summary: None
            }
        );
        // Half a token per second: after 4 s, 2 tokens: one Event, one report.
        let later = buckets.admit(&key("a"), 1, 0, start + Duration::from_secs(4));
        assert_eq!(
            later,
            Admission {
                record: 1,
                summary: Some(15)
            }
        );
        // The report resets the count.
        let after = buckets.admit(&key("a"), 0, 0, start + Duration::from_secs(10));
        assert_eq!(
            after,
            Admission {
                record: 0,
                summary: None
            }
        );
    }

    #[test]
    fn a_datajob_flooding_without_pause_still_gets_its_drops_reported() {
        let mut buckets = buckets(30);
        let start = Instant::now();
        buckets.admit(&key("a"), 30, 0, start);
        let mut reports = 0;
        for second in 1..=20 {
            let admission = buckets.admit(&key("a"), 10, 990, start + Duration::from_secs(second));
            reports += u32::from(admission.summary.is_some());
        }
        // Twenty seconds at half a token a second: ten tokens, half of them reports.
        assert!(reports >= 4, "{reports} reports");
    }

    #[test]
    fn events_over_the_per_result_cap_are_reported_with_the_others() {
        let mut buckets = buckets(30);
        let now = Instant::now();
        assert_eq!(
            buckets.admit(&key("a"), 10, 4_990, now),
            Admission {
                record: 10,
                summary: Some(4_990)
            }
        );
    }

    #[test]
    fn each_datajob_has_its_own_bucket() {
        let mut buckets = buckets(3);
        let now = Instant::now();
        assert_eq!(buckets.admit(&key("noisy"), 10, 0, now).record, 3);
        assert_eq!(buckets.admit(&key("quiet"), 1, 0, now).record, 1);
    }

    #[test]
    fn an_idle_datajob_is_forgotten_only_once_its_bucket_is_full_again() {
        let mut buckets = buckets(60);
        let now = Instant::now();
        buckets.admit(&key("a"), 60, 0, now);
        buckets.admit(&key("b"), 1, 0, now);
        buckets.forget_idle(now + Duration::from_secs(2));
        assert!(buckets.by_job.contains_key(&key("a")), "still refilling");
        assert!(!buckets.by_job.contains_key(&key("b")), "full again");
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 5), "abc");
        assert_eq!(cut("abcdef", 5), "ab…");
        assert_eq!(cut("aééé", 5), "a…");
    }
}
