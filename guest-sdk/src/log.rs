//! Log lines that end up in the host's log, tagged with the policy and DataJob.
//!
//! In the component they go through the host's `log` import (bounded in size
//! and number per call; the excess is dropped). Natively they are captured
//! per thread, and [`crate::testing`] hands them back with each run.
//!
//! ```
//! let replicas = 3;
//! policyhost_sdk::info!("creating {replicas} workers");
//! policyhost_sdk::log::write(policyhost_sdk::log::Level::Warn, "image has no tag");
//! ```

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Diagnostics for policy authors.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the policy handled.
    Warn,
    /// Something failed.
    Error,
}

/// Writes one line to the host's log.
pub fn write(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::__private::generated::policyhost::reconcile::host;
        let level = match level {
            Level::Trace => host::Level::Trace,
            Level::Debug => host::Level::Debug,
            Level::Info => host::Level::Info,
            Level::Warn => host::Level::Warn,
            Level::Error => host::Level::Error,
        };
        host::log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    capture::push(level, message);
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod capture {
    //! The native stand-in for the host's log: one buffer per thread.

    use std::cell::RefCell;

    use super::Level;

    thread_local! {
        static LINES: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
    }

    pub(crate) fn push(level: Level, message: &str) {
        LINES.with(|lines| lines.borrow_mut().push((level, message.to_owned())));
    }

    /// Takes the lines written on this thread so far.
    pub(crate) fn take() -> Vec<(Level, String)> {
        LINES.with(|lines| std::mem::take(&mut *lines.borrow_mut()))
    }
}

/// Logs at [`Level::Trace`], with `format!` arguments.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Debug`], with `format!` arguments.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Info`], with `format!` arguments.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Warn`], with `format!` arguments.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Error`], with `format!` arguments.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)+)) };
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn native_log_lines_are_captured_in_order() {
        let _ = capture::take();
        crate::info!("one {}", 1);
        crate::error!("two");
        assert_eq!(
            capture::take(),
            vec![
                (Level::Info, "one 1".to_owned()),
                (Level::Error, "two".to_owned())
            ]
        );
        assert!(capture::take().is_empty());
    }
}
