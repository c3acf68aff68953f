//! What the in-process benchmarks share: their knobs (the machine's load
//! is `policyhost_measure`'s).

use std::str::FromStr;

/// A numeric knob from the environment, or its default when unset or
/// unparsable.
pub fn env_number<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
