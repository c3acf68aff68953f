//! The per-call store state: WASI context, resource table, virtual clock,
//! memory limiter, the policy's log, and its outbound HTTP.

use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtxView, WasiHttpView};

use super::bindings::{Level, LogHost};
use super::clock::{Time, VirtualClock};
use super::limiter::MemoryLimiter;
use super::logs::GuestLog;
use super::streams::Bounded;
use super::wasi::WasiState;
use crate::outbound::CallHttp;

/// Everything a call's store holds; dropped with the store when the call ends.
pub(crate) struct StoreState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) clock: VirtualClock,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: GuestLog,
    pub(crate) http: CallHttp,
    /// When the call's time is up, and its timeout.
    pub(crate) deadline: (Instant, Duration),
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiState for StoreState {
    fn time(&mut self) -> Time<'_> {
        Time {
            clock: &mut self.clock,
            table: &mut self.table,
        }
    }

    fn streams(&mut self) -> Bounded<'_> {
        Bounded {
            table: &mut self.table,
            until: self.deadline.0,
            timeout: self.deadline.1,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let (ctx, hooks) = self.http.parts();
        WasiHttpCtxView {
            hooks,
            table: &mut self.table,
            ctx,
        }
    }
}

impl LogHost for StoreState {
    fn log(&mut self, level: Level, message: String) {
        self.log.write(level, &message);
    }
}
