//! The one wasmtime engine of the process: pooling allocator, fuel, and epoch
//! interruption driven by a ticker thread.

use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::error::{Error, Result};
use super::limits::HostMaxima;

/// How the engine and its instance pool are set up.
///
/// The pool settings matter for the cost of a call: every call instantiates
/// a fresh instance, and returning its linear memory to the pool means
/// resetting it. See `docs/BENCHMARKS.md` ("runtime") for what was measured.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The largest limits any policy may get.
    pub maxima: HostMaxima,
    /// Instances that may be alive at once (the pool's size), each with up
    /// to [`PER_CALL`] core instances, memories and tables. The
    /// [`Runtime`](super::Runtime) raises it to the calls it can have in
    /// flight, so that the calls of one policy can never take the
    /// instances another policy's calls need.
    pub max_instances: u32,
    /// The epoch period: deadlines are enforced within about one tick.
    pub epoch_tick: Duration,
    /// Bytes of each linear memory reset with `memset` (and kept resident)
    /// rather than `madvise` when an instance is returned to the pool.
    pub memory_keep_resident: usize,
    /// Bytes of each table reset with `memset` rather than `madvise`.
    pub table_keep_resident: usize,
    /// Decommits batched into one `madvise` round.
    ///
    /// A memory waiting in a batch is out of wasmtime's reach when the
    /// module it held is dropped: its memory image (and with it the
    /// module's compiled code) stays in the slot until the slot is used
    /// again, so every version of a policy that was ever instantiated could
    /// stay resident, up to one per pool slot (`docs/BENCHMARKS.md`, "memory
    /// across policy swaps"). The default, 1, decommits at once.
    pub decommit_batch_size: usize,
    /// Reset only the pages an instance dirtied (Linux `PAGEMAP_SCAN`,
    /// 6.7+), when the kernel supports it.
    pub pagemap_scan: bool,
    /// The guest's native (wasm) stack limit, in bytes.
    pub max_wasm_stack: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            maxima: HostMaxima::default(),
            max_instances: 64,
            epoch_tick: Duration::from_millis(1),
            memory_keep_resident: 2 << 20,
            table_keep_resident: 64 << 10,
            decommit_batch_size: 1,
            // Measured on fanout: a memset of the few dirty KiB beats the
            // PAGEMAP_SCAN ioctl (docs/BENCHMARKS.md, "runtime").
            pagemap_scan: false,
            max_wasm_stack: 1 << 20,
        }
    }
}

/// What one call may take from the instance pool: one component instance
/// made of at most this many core instances, linear memories and tables.
///
/// A policy built for `wasm32-wasip2` needs 3 core instances (the program
/// and two adapter shims), 1 memory and 2 tables; one built by
/// componentize-py 14 core instances (CPython, its libraries and the WASI
/// adapter), by componentize-qjs fewer. A component that needs
/// more cannot be instantiated, so it is rejected at load time by the trial
/// instantiation, instead of taking pool entries other calls need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    /// Core module instances.
    pub core_instances: u32,
    /// Linear memories (each capped by the policy's memory limit).
    pub memories: u32,
    /// Tables.
    pub tables: u32,
}

/// The allowance of every call.
pub const PER_CALL: Allowance = Allowance {
    core_instances: 16,
    memories: 2,
    tables: 4,
};

/// The shared engine plus the thread that advances its epoch.
///
/// Dropping it stops the ticker.
pub(crate) struct Engine {
    engine: wasmtime::Engine,
    clock: Arc<EpochClock>,
    compatibility: u64,
    ticker: Option<JoinHandle<()>>,
}

/// Wall-clock ticks against the engine's epoch, and the guest calls in
/// flight: the ticker parks once no call has run for a while, so an idle
/// operator spends no CPU on it.
struct EpochClock {
    started: Instant,
    tick: Duration,
    state: Mutex<TickState>,
    /// Wakes the ticker when the first call starts, or to stop it.
    wake: Condvar,
}

struct TickState {
    /// Wall-clock ticks the engine's epoch accounts for: incremented by the
    /// ticker, or skipped over while it was parked.
    counted: u64,
    /// Calls whose deadline is armed.
    in_flight: usize,
    /// When the last call ended (or the clock started).
    last_active: Instant,
    /// The ticker waits for a call (nothing to interrupt).
    parked: bool,
    stopping: bool,
}

impl EpochClock {
    /// Wall-clock ticks since the clock started.
    fn due(&self) -> u64 {
        let ticks = self.started.elapsed().as_nanos() / self.tick.as_nanos().max(1);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The state holds plain counters that are consistent at every step, so
    /// a panic elsewhere cannot leave them torn.
    fn lock(&self) -> MutexGuard<'_, TickState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ticker's loop. The epoch follows the wall clock, not the number
    /// of wake-ups: on a loaded machine a wake-up comes late, and counting
    /// wake-ups would stretch every deadline.
    fn run(&self, engine: &wasmtime::Engine) {
        let mut state = self.lock();
        while !state.stopping {
            if state.in_flight == 0 && state.last_active.elapsed() >= IDLE_BEFORE_PARKING {
                state.parked = true;
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.parked = false;
                continue;
            }
            state = self
                .wake
                .wait_timeout(state, self.tick)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            let due = self.due();
            while state.counted < due {
                engine.increment_epoch();
                state.counted += 1;
            }
        }
    }
}

/// How long the ticker keeps running after the last call: parking at once
/// would cost a wake-up (two context switches) on every call that arrives
/// while no other is in flight.
const IDLE_BEFORE_PARKING: Duration = Duration::from_secs(1);

/// An armed deadline: while it lives, the ticker advances the epoch.
pub(crate) struct Deadline {
    clock: Arc<EpochClock>,
    ticks: u64,
}

impl Deadline {
    /// Epoch ticks to hand to `Store::set_epoch_deadline`.
    pub(crate) fn ticks(&self) -> u64 {
        self.ticks
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let mut state = self.clock.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.last_active = Instant::now();
    }
}

/// An engine of two instances, as the runtime's own tests use it.
#[cfg(test)]
impl Engine {
    pub(crate) fn for_tests() -> Self {
        Self::new(&EngineConfig {
            max_instances: 2,
            ..EngineConfig::default()
        })
        .expect("an engine")
    }
}

impl Engine {
    /// Builds the engine and starts its epoch ticker.
    pub(crate) fn new(config: &EngineConfig) -> Result<Self> {
        let mut pool = PoolingAllocationConfig::new();
        let slots = config.max_instances.max(1);
        // Per-call allowances × calls ≤ pool: the totals are exactly the
        // allowance times the slots, and no component may take more than
        // its allowance.
        pool.total_component_instances(slots)
            .max_core_instances_per_component(PER_CALL.core_instances)
            .max_memories_per_component(PER_CALL.memories)
            .max_tables_per_component(PER_CALL.tables)
            .total_core_instances(slots.saturating_mul(PER_CALL.core_instances))
            .total_memories(slots.saturating_mul(PER_CALL.memories))
            .total_tables(slots.saturating_mul(PER_CALL.tables))
            .max_memory_size(usize::try_from(config.maxima.0.memory_bytes).unwrap_or(usize::MAX))
            .linear_memory_keep_resident(config.memory_keep_resident)
            .table_keep_resident(config.table_keep_resident)
            .decommit_batch_size(config.decommit_batch_size.max(1))
            .pagemap_scan(if config.pagemap_scan {
                Enabled::Auto
            } else {
                Enabled::No
            });
        let mut wasm = compile_settings();
        wasm.wasm_backtrace_max_frames(std::num::NonZeroUsize::new(64))
            .max_wasm_stack(config.max_wasm_stack)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = wasmtime::Engine::new(&wasm).map_err(|source| Error::Host {
            context: "configuring the WebAssembly engine",
            source,
        })?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compatibility = hasher.finish();
        let clock = Arc::new(EpochClock {
            started: Instant::now(),
            tick: config.epoch_tick.max(Duration::from_micros(100)),
            state: Mutex::new(TickState {
                counted: 0,
                in_flight: 0,
                last_active: Instant::now(),
                parked: false,
                stopping: false,
            }),
            wake: Condvar::new(),
        });
        let ticker = std::thread::Builder::new()
            .name("policyhost-epoch".into())
            .spawn({
                let clock = Arc::clone(&clock);
                let engine = engine.clone();
                move || clock.run(&engine)
            })
            .map_err(|source| Error::Io {
                context: "starting the epoch ticker thread".into(),
                source,
            })?;
        Ok(Self {
            engine,
            clock,
            compatibility,
            ticker: Some(ticker),
        })
    }

    pub(crate) fn wasmtime(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// A hash of everything that makes compiled code valid for this engine.
    pub(crate) fn compatibility(&self) -> u64 {
        self.compatibility
    }

    /// Arms a deadline for one call. Its ticks are the timeout rounded up,
    /// plus one because the current tick may end right after the call
    /// starts, plus the ticks the ticker is behind (it will catch them up
    /// at once, and they must not count). The first call after the ticker
    /// parked skips the ticks nobody needed instead of replaying them.
    pub(crate) fn deadline(&self, timeout: Duration) -> Deadline {
        let tick = self.clock.tick.as_nanos().max(1);
        let ticks = u64::try_from(timeout.as_nanos().div_ceil(tick)).unwrap_or(u64::MAX / 2);
        let due = self.clock.due();
        let mut state = self.clock.lock();
        if state.parked {
            state.counted = state.counted.max(due);
            self.clock.wake.notify_one();
        }
        state.in_flight += 1;
        let behind = due.saturating_sub(state.counted);
        Deadline {
            clock: Arc::clone(&self.clock),
            ticks: ticks.saturating_add(1).saturating_add(behind),
        }
    }
}

/// The settings that shape compiled code, shared by the engine that runs
/// policies and the one a compile process builds (see `compile::process`):
/// code compiled by one loads into the other only if both agree on them.
pub(crate) fn compile_settings() -> wasmtime::Config {
    let mut wasm = wasmtime::Config::new();
    wasm.consume_fuel(true)
        .epoch_interruption(true)
        .memory_init_cow(true)
        .parallel_compilation(true);
    wasm
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.clock.lock().stopping = true;
        self.clock.wake.notify_one();
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_whole_ticks_plus_one() {
        let engine = Engine::new(&EngineConfig {
            max_instances: 2,
            // A long tick, so that the ticker is never behind in this test.
            epoch_tick: Duration::from_secs(1),
            ..EngineConfig::default()
        })
        .unwrap();
        assert_eq!(engine.deadline(Duration::from_secs(10)).ticks(), 11);
        assert_eq!(engine.deadline(Duration::from_millis(10_500)).ticks(), 12);
    }

    #[test]
    fn the_ticker_runs_only_while_a_deadline_is_armed() {
        let engine = Engine::new(&EngineConfig {
            max_instances: 2,
            epoch_tick: Duration::from_millis(1),
            ..EngineConfig::default()
        })
        .unwrap();
        let counted = || engine.clock.lock().counted;
        let wait_until = |done: &dyn Fn() -> bool| {
            let give_up = Instant::now() + Duration::from_secs(10);
            while !done() {
                assert!(Instant::now() < give_up, "the ticker did not advance");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let deadline = engine.deadline(Duration::from_secs(1));
        let armed_at = counted();
        wait_until(&|| counted() >= armed_at + 5);
        drop(deadline);
        // Idle: after a second the ticker parks, and the count stays put
        // although the wall clock moves on.
        wait_until(&|| engine.clock.lock().parked);
        let idle = counted();
        wait_until(&|| engine.clock.due() > idle + 20);
        assert_eq!(counted(), idle);
        // The next call skips the idle ticks rather than owing them.
        let deadline = engine.deadline(Duration::from_secs(1));
        assert_eq!(deadline.ticks(), 1_001);
    }

    /// A component of `modules` core instances of a module with one memory.
    fn component_with_memories(modules: usize) -> Vec<u8> {
        let instances = "(core instance (instantiate $m))".repeat(modules);
        wat::parse_str(format!(
            "(component (core module $m (memory 1)) {instances})"
        ))
        .expect("valid component text")
    }

    fn instantiate(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<()> {
        let component = wasmtime::component::Component::new(engine.wasmtime(), bytes)?;
        let linker = wasmtime::component::Linker::<()>::new(engine.wasmtime());
        let mut store = wasmtime::Store::new(engine.wasmtime(), ());
        linker.instantiate(&mut store, &component).map(|_| ())
    }

    #[test]
    fn a_component_over_its_per_call_allowance_cannot_instantiate_and_takes_nothing() {
        let engine = Engine::new(&EngineConfig {
            max_instances: 2,
            ..EngineConfig::default()
        })
        .unwrap();
        let allowed = usize::try_from(PER_CALL.memories).unwrap();
        let greedy = component_with_memories(allowed + 1);
        let error = instantiate(&engine, &greedy).expect_err("over the allowance");
        assert!(
            format!("{error:?}").contains("memories"),
            "the error names what is over: {error:?}"
        );
        // Every slot still holds a call that stays within the allowance.
        let fair = component_with_memories(allowed);
        let component = wasmtime::component::Component::new(engine.wasmtime(), &fair).unwrap();
        let linker = wasmtime::component::Linker::<()>::new(engine.wasmtime());
        let mut stores: Vec<_> = (0..2)
            .map(|_| wasmtime::Store::new(engine.wasmtime(), ()))
            .collect();
        for store in &mut stores {
            linker
                .instantiate(&mut *store, &component)
                .expect("an instance within the allowance");
        }
        // And the pool is exactly that: a third call at once finds no room.
        let mut third = wasmtime::Store::new(engine.wasmtime(), ());
        assert!(linker.instantiate(&mut third, &component).is_err());
    }
}
