//! The one wasmtime engine of the process: pooling allocator, fuel, and epoch
//! interruption driven by a ticker thread.

use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

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
    /// Instances that may be alive at once (the pool's size).
    pub max_instances: u32,
    /// The epoch period: deadlines are enforced within about one tick.
    pub epoch_tick: Duration,
    /// Bytes of each linear memory reset with `memset` (and kept resident)
    /// rather than `madvise` when an instance is returned to the pool.
    pub memory_keep_resident: usize,
    /// Bytes of each table reset with `memset` rather than `madvise`.
    pub table_keep_resident: usize,
    /// Decommits batched into one `madvise` round.
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
            decommit_batch_size: 16,
            // Measured on fanout: a memset of the few dirty KiB beats the
            // PAGEMAP_SCAN ioctl (docs/BENCHMARKS.md, "runtime").
            pagemap_scan: false,
            max_wasm_stack: 1 << 20,
        }
    }
}

/// The shared engine plus the thread that advances its epoch.
///
/// Dropping it stops the ticker.
pub(crate) struct Engine {
    engine: wasmtime::Engine,
    tick: Duration,
    clock: Arc<EpochClock>,
    compatibility: u64,
    ticker: Option<Ticker>,
}

struct Ticker {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Where the epoch should be (wall-clock ticks since the ticker started)
/// and where the ticker has brought it so far.
struct EpochClock {
    started: std::time::Instant,
    done: std::sync::atomic::AtomicU64,
}

impl EpochClock {
    fn due(&self, tick: Duration) -> u64 {
        let ticks = self.started.elapsed().as_nanos() / tick.as_nanos().max(1);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

impl Engine {
    /// Builds the engine and starts its epoch ticker.
    pub(crate) fn new(config: &EngineConfig) -> Result<Self> {
        let mut pool = PoolingAllocationConfig::new();
        let slots = config.max_instances.max(1);
        pool.total_component_instances(slots)
            .total_core_instances(slots * 8)
            .total_memories(slots * 2)
            .total_tables(slots * 4)
            .max_memory_size(usize::try_from(config.maxima.0.memory_bytes).unwrap_or(usize::MAX))
            .linear_memory_keep_resident(config.memory_keep_resident)
            .table_keep_resident(config.table_keep_resident)
            .decommit_batch_size(config.decommit_batch_size.max(1))
            .pagemap_scan(if config.pagemap_scan {
                Enabled::Auto
            } else {
                Enabled::No
            });
        let mut wasm = wasmtime::Config::new();
        wasm.consume_fuel(true)
            .epoch_interruption(true)
            .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(64))
            .max_wasm_stack(config.max_wasm_stack)
            .memory_init_cow(true)
            .parallel_compilation(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = wasmtime::Engine::new(&wasm).map_err(|source| Error::Host {
            context: "configuring the WebAssembly engine",
            source,
        })?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compatibility = hasher.finish();
        let tick = config.epoch_tick.max(Duration::from_micros(100));
        let clock = Arc::new(EpochClock {
            started: std::time::Instant::now(),
            done: std::sync::atomic::AtomicU64::new(0),
        });
        let ticker = Ticker::start(engine.clone(), tick, Arc::clone(&clock)).map_err(|source| {
            Error::Io {
                context: "starting the epoch ticker thread".into(),
                source,
            }
        })?;
        Ok(Self {
            engine,
            tick,
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

    /// Epoch ticks for a deadline: rounded up, plus one because the current
    /// tick may end right after the call starts, plus the ticks the ticker
    /// is behind (it will catch them up at once, and they must not count).
    pub(crate) fn deadline_ticks(&self, timeout: Duration) -> u64 {
        let tick = self.tick.as_nanos().max(1);
        let ticks = u64::try_from(timeout.as_nanos().div_ceil(tick)).unwrap_or(u64::MAX / 2);
        let behind = self
            .clock
            .due(self.tick)
            .saturating_sub(self.clock.done.load(Ordering::Acquire));
        ticks.saturating_add(1).saturating_add(behind)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.stop.store(true, Ordering::Relaxed);
            ticker.thread.thread().unpark();
            let _ = ticker.thread.join();
        }
    }
}

impl Ticker {
    fn start(
        engine: wasmtime::Engine,
        tick: Duration,
        clock: Arc<EpochClock>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("policyhost-epoch".into())
            .spawn(move || {
                // The epoch follows the wall clock, not the number of
                // wake-ups: on a loaded machine a wake-up comes late, and
                // counting wake-ups would stretch every deadline.
                let mut epoch: u64 = 0;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(tick);
                    let due = clock.due(tick);
                    while epoch < due {
                        engine.increment_epoch();
                        epoch += 1;
                    }
                    clock.done.store(epoch, Ordering::Release);
                }
            })?;
        Ok(Self { stop, thread })
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
        assert_eq!(engine.deadline_ticks(Duration::from_secs(10)), 11);
        assert_eq!(engine.deadline_ticks(Duration::from_millis(10_500)), 12);
    }
}
