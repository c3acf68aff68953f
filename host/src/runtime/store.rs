//! The per-call store state: WASI context, resource table, memory limiter and
//! the policy's log line budget.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{Level, LogHost};
use super::limiter::MemoryLimiter;
use super::wasi::WasiState;

/// Most `log` lines one call may write; the rest are counted and dropped.
pub(crate) const LOG_LINES: u32 = 100;
/// Longest `log` line kept, in bytes; longer lines are cut.
pub(crate) const LOG_LINE_BYTES: usize = 4096;

/// Everything a call's store holds; dropped with the store when the call ends.
pub(crate) struct StoreState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: GuestLog,
}

/// Where the policy's `log` lines go: tracing, under target `policyhost::guest`.
pub(crate) struct GuestLog {
    pub(crate) policy: Arc<str>,
    pub(crate) job: String,
    pub(crate) lines: u32,
    pub(crate) dropped: u32,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiState for StoreState {}

impl LogHost for StoreState {
    fn log(&mut self, level: Level, mut message: String) {
        let log = &mut self.log;
        if log.lines >= LOG_LINES {
            log.dropped += 1;
            return;
        }
        log.lines += 1;
        if message.len() > LOG_LINE_BYTES {
            let mut cut = LOG_LINE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let (policy, job) = (&*log.policy, log.job.as_str());
        match level {
            Level::Trace => tracing::trace!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Debug => tracing::debug!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Info => tracing::info!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Warn => tracing::warn!(target: "policyhost::guest", policy, job, "{message}"),
            Level::Error => tracing::error!(target: "policyhost::guest", policy, job, "{message}"),
        }
    }
}
