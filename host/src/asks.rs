//! Bounded asks: the floors and caps on what one policy result may ask of
//! the host, so that one DataJob cannot turn into a flood of API writes.
//!
//! A result asks for a requeue delay, a cleanup retry delay and Events; a
//! hostile (or buggy) policy asks for `0 ms` and thousands of Events on every
//! call. The host grants at most this much:
//!
//! - a `requeue-after` shorter than [`Asks::min_requeue`] waits the floor;
//! - a cleanup `retry-after` (and a failed cleanup's backoff) shorter than
//!   [`Asks::min_cleanup_retry`] waits the floor
//!   ([`crate::finalizer::machine::Pacing`]);
//! - Events: at most [`events::Limits::per_result`] per result and
//!   [`events::Limits::per_minute`] per DataJob (a token bucket); the rest
//!   are counted and reported in one `EventsDropped` Event
//!   ([`crate::apply::Events`]).
//!
//! The caps on status (conditions, message, phase, outputs depth) are output
//! rules, checked with the rest of a result in `runtime::output::status`.

use std::time::Duration;

use crate::apply::events;

/// The floors and caps, set by operator flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asks {
    /// The shortest `requeue-after` a reconcile result gets (`--min-requeue`).
    pub min_requeue: Duration,
    /// The shortest wait between two `cleanup` calls of one DataJob
    /// (`--min-cleanup-retry`).
    pub min_cleanup_retry: Duration,
    /// Events per result and per DataJob.
    pub events: events::Limits,
}

impl Default for Asks {
    fn default() -> Self {
        Self {
            min_requeue: Duration::from_secs(1),
            min_cleanup_retry: Duration::from_secs(1),
            events: events::Limits::default(),
        }
    }
}

impl Asks {
    /// The delay a result asking for `requeue-after` `ms` gets.
    #[must_use]
    pub fn requeue_after(&self, ms: u64) -> Duration {
        Duration::from_millis(ms).max(self.min_requeue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requeue_below_the_floor_waits_the_floor_and_one_above_gets_what_it_asked() {
        let asks = Asks::default();
        assert_eq!(asks.requeue_after(0), Duration::from_secs(1));
        assert_eq!(asks.requeue_after(999), Duration::from_secs(1));
        assert_eq!(asks.requeue_after(30_000), Duration::from_secs(30));
    }
}
