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

/// A benchmark's command line, flag by flag (the `--bench` that `cargo
/// bench` passes is left out), each flag's value read on demand.
pub struct Flags(std::vec::IntoIter<String>);

impl Flags {
    /// This process's arguments.
    pub fn from_env() -> Self {
        let args: Vec<String> = std::env::args()
            .skip(1)
            .filter(|arg| arg != "--bench")
            .collect();
        Self(args.into_iter())
    }

    /// The next flag.
    pub fn next_flag(&mut self) -> Option<String> {
        self.0.next()
    }

    /// The value that follows `flag`.
    pub fn value(&mut self, flag: &str) -> anyhow::Result<String> {
        self.0
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
    }
}

/// Runs a benchmark's async body on a multi-threaded runtime: its `main`.
pub fn block_on<F: std::future::Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(body)
}
