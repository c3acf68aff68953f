//! The per-call store state: WASI context, resource table, virtual clock,
//! memory limiter, the policy's log, and its outbound HTTP; each capability
//! reaches its part through its view, as wasmtime-wasi's do.

use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtxView, WasiHttpView};

use super::clock::{ClockView, Time, VirtualClock};
use super::limiter::MemoryLimiter;
use super::logs::{GuestLog, LogView};
use super::streams::{Bounded, StreamsView};
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

impl ClockView for StoreState {
    fn time(&mut self) -> Time<'_> {
        Time {
            clock: &mut self.clock,
            table: &mut self.table,
        }
    }
}

impl StreamsView for StoreState {
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

impl LogView for StoreState {
    fn log(&mut self) -> &mut GuestLog {
        &mut self.log
    }
}
