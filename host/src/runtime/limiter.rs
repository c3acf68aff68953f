//! Caps a call's linear memory and tables, and keeps the accounts that show it.

use wasmtime::ResourceLimiter;

/// A [`ResourceLimiter`] for one call: denies any growth past the cap and
/// records the peak it allowed and the largest request it denied.
///
/// Denying a growth makes `memory.grow` return -1 in the guest; a Rust guest
/// then aborts ("memory allocation failed"), and the call maps to
/// [`super::Error::MemoryLimitExceeded`] because a denial was recorded.
#[derive(Debug, Clone, Copy)]
pub struct MemoryLimiter {
    limit: u64,
    peak: u64,
    denied: Option<u64>,
    tables_limit: usize,
}

/// What the limiter saw during one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryAccount {
    /// The cap, in bytes.
    pub limit: u64,
    /// The largest linear memory the call was allowed, in bytes.
    pub peak: u64,
    /// The largest size it asked for and was refused, in bytes.
    pub denied: Option<u64>,
}

/// Most table elements one call may have (function pointers of the guest).
const TABLE_ELEMENTS: usize = 100_000;

impl MemoryLimiter {
    /// A limiter allowing `limit` bytes of linear memory.
    #[must_use]
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            peak: 0,
            denied: None,
            tables_limit: TABLE_ELEMENTS,
        }
    }

    /// The accounts so far.
    #[must_use]
    pub fn account(&self) -> MemoryAccount {
        MemoryAccount {
            limit: self.limit,
            peak: self.peak,
            denied: self.denied,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let desired = desired as u64;
        let over_own_max = maximum.is_some_and(|max| desired > max as u64);
        if desired > self.limit || over_own_max {
            self.denied = Some(self.denied.map_or(desired, |d| d.max(desired)));
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.tables_limit && maximum.is_none_or(|max| desired <= max))
    }

    fn instances(&self) -> usize {
        // A component built by wit-component instantiates a handful of core
        // modules (the policy, shims and fix-ups); a generous bound.
        64
    }

    fn memories(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_cap_is_denied_and_recorded() {
        let mut limiter = MemoryLimiter::new(1 << 20);
        assert!(limiter.memory_growing(0, 65536, None).unwrap());
        assert!(limiter.memory_growing(65536, 1 << 20, None).unwrap());
        assert!(!limiter.memory_growing(1 << 20, 2 << 20, None).unwrap());
        let account = limiter.account();
        assert_eq!(account.peak, 1 << 20);
        assert_eq!(account.denied, Some(2 << 20));
        assert!(account.peak <= account.limit);
    }

    #[test]
    fn growth_past_the_memory_own_maximum_is_denied() {
        let mut limiter = MemoryLimiter::new(1 << 30);
        assert!(!limiter.memory_growing(0, 2 << 20, Some(1 << 20)).unwrap());
    }
}
