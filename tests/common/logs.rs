//! The host's log of a piece of test code, as JSON lines.

use std::sync::{Arc, Mutex, PoisonError};

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
pub struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    /// What was written so far.
    pub fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes).expect("the log is UTF-8")
    }
}

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with every `policyhost` record (trace and up) written to the
/// returned text, one JSON object per line.
pub fn recorded<R>(f: impl FnOnce() -> R) -> (R, String) {
    let sink = Sink::default();
    let subscriber = {
        let sink = sink.clone();
        tracing_subscriber::fmt()
            .with_env_filter("policyhost=trace")
            .json()
            .with_writer(move || sink.clone())
            .finish()
    };
    let result = tracing::subscriber::with_default(subscriber, || {
        // Another test's thread may have cached a callsite's interest while
        // this subscriber was not yet registered (tracing caches interest
        // per callsite, across threads): have every callsite asked again.
        tracing::callsite::rebuild_interest_cache();
        f()
    });
    (result, sink.text())
}
