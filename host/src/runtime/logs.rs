//! Where a policy's log lines and its stdout/stderr go: the host's log,
//! capped per call and per policy so that no policy can drown it.
//!
//! # Guarantees
//!
//! - Per call: at most [`LOG_LINES`] `log()` records and the last
//!   [`OUTPUT_LINES`] lines each of stdout and stderr (of the last
//!   [`super::wasi::CAPTURE_BYTES`] captured), each cut to
//!   [`LOG_LINE_BYTES`].
//! - Per policy, across calls and versions: a token bucket
//!   ([`LogRate`]: a burst, then a steady rate) that every record of the
//!   policy takes a token from; records at a level the host's filter does not
//!   show take none.
//! - What is dropped is counted in the call's report (and from there in the
//!   `policyhost_guest_log_records_dropped_total` metric), and a call that
//!   dropped records says so in one record of its own, if its policy still
//!   has a token for it.
//!
//! Records go to tracing under the targets `policyhost::guest` (`log()`),
//! `policyhost::guest::stdout` and `policyhost::guest::stderr`, with the
//! fields `policy` and `job` (`namespace/name`). Their text is the guest's,
//! with its grant's credentials redacted ([`crate::outbound::redact`]): a
//! `log()` line before it is cut, stdout and stderr as the whole text the
//! call captured, so a value split over writes is whole again. The text log
//! format escapes its control characters (see `cli::logging`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use wasmtime::component::{HasData, Linker};

use super::bindings::{Level, LogHost, add_log_to_linker};
use crate::outbound::Redactor;

/// Most `log` lines one call may write; the rest are counted and dropped.
pub(crate) const LOG_LINES: u32 = 100;
/// Most lines of stdout, and of stderr, forwarded per call (the last ones).
pub(crate) const OUTPUT_LINES: usize = 20;
/// Longest record kept, in bytes; longer ones are cut.
pub(crate) const LOG_LINE_BYTES: usize = 4096;

/// How many guest log records a policy may send to the host's log: `burst`
/// at once, then `per_second`. Shared by every version of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRate {
    /// Records the policy may write at once (the bucket's size).
    pub burst: u32,
    /// Records per second the bucket refills with.
    pub per_second: u32,
}

impl Default for LogRate {
    fn default() -> Self {
        Self {
            burst: 500,
            per_second: 50,
        }
    }
}

/// One policy's token bucket.
#[derive(Debug)]
pub(crate) struct Budget {
    rate: LogRate,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl Budget {
    fn new(rate: LogRate) -> Self {
        Self {
            rate,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(rate.burst),
                refilled: Instant::now(),
            }),
        }
    }

    /// Takes a token for one record, if there is one.
    fn take(&self) -> bool {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * f64::from(self.rate.per_second))
            .min(f64::from(self.rate.burst));
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The buckets of every policy name the runtime has loaded.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    rate: LogRate,
    by_policy: Mutex<HashMap<Arc<str>, Arc<Budget>>>,
}

impl Budgets {
    pub(crate) fn new(rate: LogRate) -> Self {
        Self {
            rate,
            by_policy: Mutex::default(),
        }
    }

    /// The bucket of `policy`: the same for every version of it.
    pub(crate) fn of(&self, policy: &Arc<str>) -> Arc<Budget> {
        let mut map = self
            .by_policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            map.entry(Arc::clone(policy))
                .or_insert_with(|| Arc::new(Budget::new(self.rate))),
        )
    }
}

/// What one call sent to the host's log, and what it dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// `log` lines written by the guest.
    pub(crate) lines: u32,
    /// `log` records not emitted (over the call's cap or the policy's rate).
    pub(crate) dropped: u32,
    /// stdout/stderr lines not emitted (same).
    pub(crate) output_dropped: u32,
    /// Of the records dropped, those over the policy's rate.
    pub(crate) throttled: u32,
}

/// One call's log: tagged with the policy and the DataJob, capped.
pub(crate) struct GuestLog {
    pub(crate) policy: Arc<str>,
    pub(crate) job: String,
    pub(crate) budget: Arc<Budget>,
    pub(crate) counts: Counts,
    /// The credentials of the policy's grant, kept out of its records.
    pub(crate) redactor: Redactor,
}

/// Whether the host's filter shows records of `level` from the guest.
fn shown(level: Level) -> bool {
    match level {
        Level::Trace => tracing::enabled!(target: "policyhost::guest", tracing::Level::TRACE),
        Level::Debug => tracing::enabled!(target: "policyhost::guest", tracing::Level::DEBUG),
        Level::Info => tracing::enabled!(target: "policyhost::guest", tracing::Level::INFO),
        Level::Warn => tracing::enabled!(target: "policyhost::guest", tracing::Level::WARN),
        Level::Error => tracing::enabled!(target: "policyhost::guest", tracing::Level::ERROR),
    }
}

/// `text` cut to [`LOG_LINE_BYTES`] at a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= LOG_LINE_BYTES {
        return text;
    }
    let mut end = LOG_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Gives the log binding a call's [`GuestLog`], as wasmtime-wasi's views
/// give theirs their context.
pub(crate) trait LogView {
    /// The call's log.
    fn log(&mut self) -> &mut GuestLog;
}

/// Links the `policyhost:reconcile/host` log to [`GuestLog`].
struct Logs;

impl HasData for Logs {
    type Data<'a> = &'a mut GuestLog;
}

impl LogHost for GuestLog {
    fn log(&mut self, level: Level, message: String) {
        self.write(level, &message);
    }
}

/// Links `policyhost:reconcile/host` (the policy's log) into `linker`.
pub(crate) fn add_to_linker<T: LogView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    add_log_to_linker::<T, Logs>(linker, T::log)
}

impl GuestLog {
    pub(crate) fn new(
        policy: Arc<str>,
        job: String,
        budget: Arc<Budget>,
        redactor: Redactor,
    ) -> Self {
        Self {
            policy,
            job,
            budget,
            counts: Counts::default(),
            redactor,
        }
    }

    /// Whether one more record may go out; counts it as throttled if not.
    fn admit(&mut self) -> bool {
        let admitted = self.budget.take();
        if !admitted {
            self.counts.throttled = self.counts.throttled.saturating_add(1);
        }
        admitted
    }

    /// A `log()` call of the guest.
    pub(crate) fn write(&mut self, level: Level, message: &str) {
        let counts = &mut self.counts;
        counts.lines = counts.lines.saturating_add(1);
        if counts.lines > LOG_LINES {
            counts.dropped = counts.dropped.saturating_add(1);
            return;
        }
        if !shown(level) {
            return;
        }
        if !self.admit() {
            self.counts.dropped = self.counts.dropped.saturating_add(1);
            return;
        }
        let message = self.redactor.redact_prefix(message, LOG_LINE_BYTES);
        let (policy, job) = (&*self.policy, self.job.as_str());
        match level {
            Level::Trace => tracing::trace!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Debug => tracing::debug!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Info => tracing::info!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Warn => tracing::warn!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Error => tracing::error!(target: "policyhost::guest", policy, job, "{message}"),
        }
    }

    /// Re-emits what the guest printed (the last [`OUTPUT_LINES`] lines of
    /// each stream), then a summary if anything of this call was dropped.
    pub(crate) fn forward(&mut self, stdout: &str, stderr: &str) {
        for (text, stderr) in [(stdout, false), (stderr, true)] {
            let shown = if stderr {
                tracing::enabled!(target: "policyhost::guest::stderr", tracing::Level::WARN)
            } else {
                tracing::enabled!(target: "policyhost::guest::stdout", tracing::Level::INFO)
            };
            if !shown {
                continue;
            }
            let text = self.redactor.redact(text);
            let lines = text.lines().filter(|l| !l.is_empty());
            let total = lines.clone().count();
            let skip = total.saturating_sub(OUTPUT_LINES);
            self.counts.output_dropped = self
                .counts
                .output_dropped
                .saturating_add(u32::try_from(skip).unwrap_or(u32::MAX));
            for line in lines.skip(skip) {
                if !self.admit() {
                    self.counts.output_dropped = self.counts.output_dropped.saturating_add(1);
                    continue;
                }
                let (policy, job, line) = (&*self.policy, self.job.as_str(), cut(line));
                if stderr {
                    tracing::warn!(target: "policyhost::guest::stderr", policy, job, "{line}");
                } else {
                    tracing::info!(target: "policyhost::guest::stdout", policy, job, "{line}");
                }
            }
        }
        let Counts {
            dropped,
            output_dropped,
            throttled,
            ..
        } = self.counts;
        if dropped + output_dropped > 0 && self.budget.take() {
            tracing::warn!(
                target: "policyhost::guest",
                policy = &*self.policy,
                job = self.job.as_str(),
                log_dropped = dropped,
                output_lines_dropped = output_dropped,
                over_policy_rate = throttled,
                "guest log records dropped (caps: {LOG_LINES} log lines and {OUTPUT_LINES} lines per output stream per call, and the policy's log rate)"
            );
        }
    }
}

/// The whole lines of a capture: when it dropped older bytes (`cut`), its
/// first line is the end of a longer one, and goes with them (it may begin
/// inside a credential, where no redaction would know it).
pub(crate) fn whole_lines(text: &str, cut: bool) -> &str {
    if !cut {
        return text;
    }
    text.split_once('\n').map_or("", |(_, rest)| rest)
}

/// How long a full bucket of `rate` takes to refill: for tests and docs.
#[cfg(test)]
fn refill_time(rate: LogRate) -> std::time::Duration {
    std::time::Duration::from_secs_f64(f64::from(rate.burst) / f64::from(rate.per_second.max(1)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const RATE: LogRate = LogRate {
        burst: 10,
        per_second: 5,
    };

    #[test]
    fn a_budget_gives_its_burst_then_its_rate() {
        let budget = Budget::new(RATE);
        let start = Instant::now();
        let taken = (0..100).filter(|_| budget.take_at(start)).count();
        assert_eq!(taken, 10);
        // One second later: five more, not ten.
        let later = start + Duration::from_secs(1);
        let taken = (0..100).filter(|_| budget.take_at(later)).count();
        assert_eq!(taken, 5);
        // Idle for long: back to the burst, never more.
        let much_later = later + refill_time(RATE) * 10;
        let taken = (0..100).filter(|_| budget.take_at(much_later)).count();
        assert_eq!(taken, 10);
    }

    #[test]
    fn every_version_of_a_policy_shares_one_budget() {
        let budgets = Budgets::new(RATE);
        let name: Arc<str> = "flood".into();
        let a = budgets.of(&name);
        let b = budgets.of(&Arc::from("flood"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &budgets.of(&Arc::from("other"))));
    }

    #[test]
    fn records_over_the_policy_rate_are_dropped_and_counted_across_calls() {
        let budget = Arc::new(Budget::new(RATE));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let mut total = Counts::default();
            for call in 0..3 {
                let mut log = GuestLog::new(
                    "flood".into(),
                    format!("ns/job-{call}"),
                    Arc::clone(&budget),
                    Redactor::none(),
                );
                for _ in 0..8 {
                    log.write(Level::Info, "hello");
                }
                log.forward("a\nb\n", "");
                total.lines += log.counts.lines;
                total.dropped += log.counts.dropped;
                total.output_dropped += log.counts.output_dropped;
                total.throttled += log.counts.throttled;
            }
            // 3 calls × (8 log + 2 stdout) = 30 records, a bucket of 10
            // (the refill over the test's microseconds is below one token).
            assert_eq!(total.lines, 24);
            assert_eq!(total.dropped + total.output_dropped, 20);
            assert_eq!(total.throttled, 20);
        });
    }

    #[test]
    fn a_call_keeps_the_last_output_lines_and_cuts_long_records() {
        let budget = Arc::new(Budget::new(LogRate {
            burst: 1000,
            per_second: 1,
        }));
        let mut log = GuestLog::new("p".into(), "ns/j".into(), budget, Redactor::none());
        let stdout: String = (0..50).map(|i| format!("line {i}\n")).collect();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || log.forward(&stdout, ""));
        assert_eq!(log.counts.output_dropped, 30);
        assert_eq!(log.counts.throttled, 0);
        let long = "é".repeat(LOG_LINE_BYTES);
        assert_eq!(cut(&long).len(), LOG_LINE_BYTES);
        assert!(cut("short") == "short");
    }

    #[test]
    fn a_capture_that_dropped_bytes_loses_its_first_partial_line() {
        assert_eq!(whole_lines("a\nb\n", false), "a\nb\n");
        assert_eq!(whole_lines("cret-token\nb\n", true), "b\n");
        assert_eq!(whole_lines("cret-token", true), "");
    }

    #[test]
    fn log_lines_over_the_call_cap_are_dropped() {
        let budget = Arc::new(Budget::new(LogRate {
            burst: 1000,
            per_second: 1,
        }));
        let mut log = GuestLog::new("p".into(), "ns/j".into(), budget, Redactor::none());
        for _ in 0..LOG_LINES + 7 {
            log.write(Level::Error, "x");
        }
        assert_eq!(log.counts.lines, LOG_LINES + 7);
        assert_eq!(log.counts.dropped, 7);
    }

    /// The host's log as text, shared with the subscriber writing it.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_credential_is_redacted_from_log_lines_and_output_even_where_a_line_is_cut() {
        const TOKEN: &str = "Bearer s3cret-token";
        let budget = Arc::new(Budget::new(LogRate {
            burst: 1000,
            per_second: 1,
        }));
        let redactor = Redactor::new([TOKEN.as_bytes()]).expect("redactor");
        let mut log = GuestLog::new("p".into(), "ns/j".into(), budget, redactor);
        let written = Shared::default();
        let writer = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        // The cut at LOG_LINE_BYTES falls inside the value.
        let long = format!("{}{TOKEN}", "x".repeat(LOG_LINE_BYTES - 4));
        // stdout and stderr as the call's capture holds them: whatever the
        // writes were, one text.
        let stdout = format!("echo: {}\n", TOKEN);
        tracing::subscriber::with_default(subscriber, || {
            log.write(Level::Info, &format!("the server said {TOKEN}"));
            log.write(Level::Warn, &long);
            log.forward(&stdout, &format!("{TOKEN}\n"));
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            !text.contains("xxxxBear"),
            "a part of the value was kept: {text}"
        );
        assert!(text.contains("the server said [redacted]"), "{text}");
        assert!(text.contains("xxxx[red"), "{text}");
        assert!(text.contains("echo: [redacted]"), "{text}");
        assert_eq!(text.matches("[redacted]").count(), 3, "{text}");
    }
}
