//! The per-call store state: WASI context, resource table, virtual clock,
//! memory limiter and the policy's log.

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{Level, LogHost};
use super::clock::{Time, VirtualClock};
use super::limiter::MemoryLimiter;
use super::logs::GuestLog;
use super::wasi::WasiState;

/// Everything a call's store holds; dropped with the store when the call ends.
pub(crate) struct StoreState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) clock: VirtualClock,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: GuestLog,
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
}

impl LogHost for StoreState {
    fn log(&mut self, level: Level, message: String) {
        self.log.write(level, &message);
    }
}
