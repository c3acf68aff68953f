//! Per-key exponential backoff.

use std::time::Duration;

/// How long to wait before retrying a key that failed `failures` times in a row:
/// `base × 2^(failures − 1)`, capped at `max`.
///
/// kube-runtime's controller leaves retry timing to each reconciler; a
/// controller that retries a failing object at a fixed rate floods the API
/// server (lesson four of the design), so the queue owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base: Duration,
    /// The longest delay; failures beyond it keep retrying at this pace.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(200),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The delay after the `failures`-th consecutive failure (1-based; 0 gives zero).
    #[must_use]
    pub fn delay(&self, failures: u32) -> Duration {
        let Some(exponent) = failures.checked_sub(1) else {
            return Duration::ZERO;
        };
        // 2^exponent overflows u32 past 31; anything that large is past `max`.
        let factor = 1u32.checked_shl(exponent).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_delay_doubles_with_each_failure() {
        let delays: Vec<u128> = (0..=5).map(|n| backoff().delay(n).as_millis()).collect();
        assert_eq!(delays, [0, 100, 200, 400, 800, 1600]);
    }

    #[test]
    fn the_delay_stops_growing_at_the_maximum() {
        assert_eq!(backoff().delay(8), Duration::from_secs(10));
        assert_eq!(backoff().delay(40), Duration::from_secs(10));
        assert_eq!(backoff().delay(u32::MAX), Duration::from_secs(10));
    }
}
