//! A policy that floods every log channel it has: `reconcile` and `cleanup`
//! write `lines` lines (params, default 10,000) to stdout, as many to stderr,
//! and as many `log()` calls at every level, each line carrying a newline
//! and a carriage return meant to forge a host log line. The host must keep
//! its own log bounded: per call (a few records per stream, each cut to a
//! size) and per policy across calls (a token bucket), count what it drops,
//! escape the control characters, and still return the call's result.

use policyhost_sdk::log::{self, Level};
use policyhost_sdk::{Child, Cleanup, Context, Job, Phase, Policy, Reconcile, Result, Status};
use serde::Deserialize;

/// Floods the logs on every call.
pub struct LogFlood;

policyhost_sdk::export!(LogFlood);

/// `spec.params`.
#[derive(Debug, Deserialize)]
#[serde(default)]
pub struct Params {
    /// Lines per channel.
    pub lines: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { lines: 10_000 }
    }
}

/// The text of every line: a forged host log line after the newline.
pub const FORGED: &str = "flood\n2026-01-01T00:00:00Z  INFO policyhost: forged\r";

/// Writes `lines` lines to each channel.
fn flood(lines: u32) {
    const LEVELS: [Level; 5] = [
        Level::Trace,
        Level::Debug,
        Level::Info,
        Level::Warn,
        Level::Error,
    ];
    for i in 0..lines {
        println!("{FORGED} stdout {i}");
        eprintln!("{FORGED} stderr {i}");
        log::write(
            LEVELS[i as usize % LEVELS.len()],
            &format!("{FORGED} log {i}"),
        );
    }
}

impl Policy for LogFlood {
    type Params = Params;

    fn reconcile(_: &Job, params: Params, _: &[Child], _: &Context) -> Result<Reconcile> {
        flood(params.lines);
        Ok(Reconcile::new(
            Status::new(Phase::Running).message("flooded"),
        ))
    }

    fn cleanup(job: &Job, _: &[Child], _: &Context) -> Result<Cleanup> {
        flood(job.params::<Params>()?.lines);
        Ok(Cleanup::Done)
    }
}
