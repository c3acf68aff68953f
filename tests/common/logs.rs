//! The host's log of a piece of test code, as JSON lines.
//!
//! A test records with a subscriber of its own (`with_default`), which the
//! host carries to the tasks a call spawns. Tracing caches each callsite's
//! interest for the whole process, and while one dispatcher is registered it
//! asks only the registering thread's: another test's thread, with no
//! subscriber, would cache "never" for a record this test wants. An anchor
//! registered for the whole binary keeps a second dispatcher alive, and
//! answers "sometimes", so every record is asked about where it happens.

use std::sync::{Arc, Mutex, Once, PoisonError};

use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;

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
    anchor();
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
        // A callsite's interest cached before this subscriber was
        // registered: have every callsite asked again.
        tracing::callsite::rebuild_interest_cache();
        f()
    });
    (result, sink.text())
}

/// Installs, once, the global subscriber that records nothing and is
/// interested in every callsite "sometimes".
fn anchor() {
    static ANCHORED: Once = Once::new();
    ANCHORED.call_once(|| {
        let anchor = tracing_subscriber::registry().with(filter_fn(|_| false));
        tracing::subscriber::set_global_default(anchor)
            .expect("no other global subscriber in the test binary");
    });
}
