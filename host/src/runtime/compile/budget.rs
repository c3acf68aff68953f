//! Each team's share of compile time: a token bucket of compile seconds
//! (a policy no `--team` rule names is a team of its own; the buckets are
//! keyed by [`crate::fair::Team::key`]).
//!
//! The compile slot is handed round between the policies waiting for it
//! (see [`super::Compiler::turn`]), so one policy's compiles delay another's
//! by at most one compile. That bounds the delay, not the cost: a policy
//! that keeps publishing components that compile to the time cap would keep
//! a compile process (and the cores it uses beside the guest calls) busy
//! whenever nobody else waits. The budget caps that: each policy may use
//! `seconds` of compile time at once, and regains them over `window`; past
//! that its next compile is refused (not queued: a queued compile would
//! hold a loader worker) with the time until it may compile again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How much compile time each policy may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CompileBudget {
    /// Compile time a policy may use at once (the bucket's size).
    pub seconds: Duration,
    /// The time over which it is regained: a policy that compiles without
    /// pause gets `seconds / window` of the compile slot.
    pub window: Duration,
}

impl CompileBudget {
    /// The operator's default: a minute of compile time per ten minutes.
    /// A version of an example policy compiles in about 0.2 s; a policy
    /// whose every version compiles to the 10 s time cap gets six compiles
    /// at once, then one every 100 s (a tenth of the compile slot).
    pub const DEFAULT: Self = Self {
        seconds: Duration::from_secs(60),
        window: Duration::from_secs(600),
    };
}

/// A policy that used its compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    /// Its budget.
    pub budget: CompileBudget,
    /// How long until it may compile again.
    pub retry_after: Duration,
}

/// The buckets of the policies that used compile time recently.
pub(crate) struct Budgets {
    budget: Option<CompileBudget>,
    buckets: Mutex<HashMap<Arc<str>, Bucket>>,
}

/// What a policy has left, as of `at`; negative after a compile that ran
/// past it (the policy waits until it is positive again).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    seconds: f64,
    at: Instant,
}

impl Budgets {
    /// Budgets of `budget` each; `None`: unlimited.
    pub(crate) fn new(budget: Option<CompileBudget>) -> Self {
        Self {
            budget,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// May `policy` start a compile at `now`?
    pub(crate) fn admit(&self, policy: &str, now: Instant) -> Result<(), Exhausted> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let rate = rate(budget);
        let Some(left) = self.lock().get(policy).map(|b| b.refilled(budget, now)) else {
            return Ok(());
        };
        if left.seconds > 0.0 {
            return Ok(());
        }
        // Until the balance is positive again (a millisecond past zero).
        let wait = (-left.seconds / rate).max(0.0) + 0.001;
        Err(Exhausted {
            budget,
            retry_after: Duration::try_from_secs_f64(wait).unwrap_or(budget.window),
        })
    }

    /// Counts `used` of compile time against `policy`, at `now`.
    pub(crate) fn charge(&self, policy: &Arc<str>, used: Duration, now: Instant) {
        let Some(budget) = self.budget else {
            return;
        };
        let mut buckets = self.lock();
        // Full buckets are forgotten: the map holds only the policies that
        // compiled within the last window.
        buckets.retain(|_, bucket| bucket.refilled(budget, now).seconds < full(budget));
        let bucket = buckets.entry(Arc::clone(policy)).or_insert(Bucket {
            seconds: full(budget),
            at: now,
        });
        *bucket = bucket.refilled(budget, now);
        bucket.seconds -= used.as_secs_f64();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Bucket>> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Bucket {
    fn refilled(self, budget: CompileBudget, now: Instant) -> Self {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        Self {
            seconds: (self.seconds + elapsed * rate(budget)).min(full(budget)),
            at: now,
        }
    }
}

fn full(budget: CompileBudget) -> f64 {
    budget.seconds.as_secs_f64()
}

/// Seconds regained per second.
fn rate(budget: CompileBudget) -> f64 {
    full(budget) / budget.window.as_secs_f64().max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: CompileBudget = CompileBudget {
        seconds: Duration::from_secs(30),
        window: Duration::from_secs(300),
    };

    #[test]
    fn a_policy_past_its_budget_waits_until_it_regained_what_it_overran() {
        let budgets = Budgets::new(Some(BUDGET));
        let policy: Arc<str> = "noisy".into();
        let start = Instant::now();
        for i in 0..3 {
            assert_eq!(budgets.admit(&policy, start), Ok(()), "compile {i}");
            budgets.charge(&policy, Duration::from_secs(10), start);
        }
        let refused = budgets.admit(&policy, start).unwrap_err();
        assert_eq!(refused.budget, BUDGET);
        // 0 s left: a millisecond of regain (at 0.1 s per s) away.
        assert!(
            refused.retry_after <= Duration::from_millis(20),
            "{refused:?}"
        );
        // A compile that ran 10 s past the budget costs 100 s of waiting.
        let later = start + Duration::from_millis(20);
        assert_eq!(budgets.admit(&policy, later), Ok(()));
        budgets.charge(&policy, Duration::from_secs(10), later);
        let refused = budgets.admit(&policy, later).unwrap_err();
        let expected = Duration::from_secs(100);
        assert!(
            refused.retry_after.abs_diff(expected) < Duration::from_millis(50),
            "{refused:?}"
        );
        assert_eq!(budgets.admit(&policy, later + expected), Ok(()));
    }

    #[test]
    fn one_policy_using_its_budget_leaves_the_others_theirs() {
        let budgets = Budgets::new(Some(BUDGET));
        let now = Instant::now();
        budgets.charge(&"noisy".into(), Duration::from_secs(60), now);
        assert!(budgets.admit("noisy", now).is_err());
        assert_eq!(budgets.admit("quiet", now), Ok(()));
    }

    #[test]
    fn without_a_budget_every_compile_is_admitted_and_nothing_is_kept() {
        let budgets = Budgets::new(None);
        let now = Instant::now();
        budgets.charge(&"noisy".into(), Duration::from_secs(3600), now);
        assert_eq!(budgets.admit("noisy", now), Ok(()));
        assert!(budgets.lock().is_empty());
    }

    #[test]
    fn a_policy_whose_bucket_refilled_is_forgotten() {
        let budgets = Budgets::new(Some(BUDGET));
        let now = Instant::now();
        budgets.charge(&"once".into(), Duration::from_secs(1), now);
        budgets.charge(&"other".into(), Duration::from_secs(1), now + BUDGET.window);
        let kept: Vec<String> = budgets.lock().keys().map(|k| k.to_string()).collect();
        assert_eq!(kept, ["other"]);
    }
}
