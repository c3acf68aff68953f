//! What the in-process benchmarks share: their knobs and the machine's load.

use std::str::FromStr;

/// A numeric knob from the environment, or its default when unset or
/// unparsable.
pub fn env_number<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The 1, 5 and 15 minute load averages: the figures are only comparable
/// between runs on an equally busy machine.
pub fn load_average() -> String {
    policyhost_measure::load_average_text()
}
