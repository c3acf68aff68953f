//! The sandboxed policy runtime: loads policy components and calls them, one
//! fresh, capped instance per call.
//!
//! # Expected flow
//!
//! 1. Build one [`Runtime`] per process ([`Runtime::new`]): it owns the
//!    wasmtime engine (pooling allocator, fuel, epoch ticker), the linker
//!    (the contract's `host` interface plus a deny-all WASI, see [`wasi`]),
//!    the compile cache and the pool of threads guest calls run on.
//! 2. Load each policy version with [`Runtime::load`] (blocking: it may
//!    compile) or [`Runtime::load_async`] (on a blocking thread). The bytes
//!    are digested, held to the static compile limits and compiled once per
//!    digest (in a capped child process when configured, see [`compile`]),
//!    checked against the world and the allowed imports, and pre-linked
//!    into a [`Policy`].
//! 3. Call it with [`Runtime::reconcile`] / [`Runtime::cleanup`] (async,
//!    on the pool) or their `_blocking` twins. Each call instantiates a fresh
//!    instance, so no state survives between calls or DataJobs. Async calls
//!    pass a fair [`Gate`] first: one slot per pool thread, shared between
//!    policies by their shares (see [`crate::fair`]).
//!
//! # Guarantees
//!
//! Every call is capped in linear memory ([`MemoryLimiter`]), fuel and
//! wall-clock time (epoch interruption); its result is capped in bytes and
//! children and checked ([`output`]): namespace, allowed kinds, manifest
//! shape, DNS-1123 names. Every call returns a [`CallReport`], faults included.
//!
//! # Errors
//!
//! See [`Error`]: load-time rejections name the import or export at fault;
//! call-time faults are typed and never take the host down.
//!
//! # Example
//!
//! ```no_run
//! # async fn example(bytes: Vec<u8>, input: policyhost::runtime::Input) -> policyhost::runtime::Result<()> {
//! use policyhost::runtime::{PolicySpec, Runtime, RuntimeConfig};
//!
//! let runtime = Runtime::new(RuntimeConfig::default())?;
//! let policy = runtime.load_async(PolicySpec::new("fanout"), bytes).await?;
//! let outcome = runtime.reconcile(policy, input).await;
//! println!("{} fuel in {:?}", outcome.report.fuel_consumed, outcome.report.duration);
//! let reconciled = outcome.result?;
//! # let _ = reconciled; Ok(()) }
//! ```

mod bindings;
mod cache;
mod call;
mod clock;
pub mod compile;
mod engine;
mod error;
pub mod kinds;
mod limiter;
mod limits;
mod load;
mod logs;
pub mod made_with;
pub mod output;
mod pool;
pub mod reference;
mod store;
mod streams;
pub mod wasi;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;

use crate::fair::{Gate, Share, Tenant};
use crate::outbound::{Client, ClientConfig, Recorded};

pub use bindings::{
    Child, ChildPhase, CleanupResult, Condition, Context, DataJob, DesiredChild, Event, KeyValue,
    Level, ReconcileResult, Status,
};
pub use cache::{CacheStats, Digest, Source};
pub use call::{CallReport, Input, Network, Outcome};
pub use compile::{
    CompileBudget, CompileConfig, CompileLimit, CompileProcess, CompileStats, Footprint, Refusal,
};
pub use engine::{Allowance, EngineConfig, PER_CALL};
pub use error::{Error, PolicyError, Result};
pub use limiter::{MemoryAccount, MemoryLimiter};
pub use limits::{Clamped, HostMaxima, LimitKind, Limits, PolicyLimits};
pub use load::{Policy, PolicySpec};
pub use logs::LogRate;
pub use made_with::MadeWith;
pub use output::{AllowedKind, Cleaned, Reconciled, UpdateStrategy, ValidChild};

use store::StoreState;
use streams::Reach;

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Engine and instance pool settings, including the host maxima.
    pub engine: EngineConfig,
    /// Limits of a policy that asks for none.
    pub defaults: Limits,
    /// Threads running guest calls (and compiles) for the async API: the
    /// bound on concurrent calls.
    pub threads: usize,
    /// Directory for compiled components, reused across restarts.
    pub cache_dir: Option<PathBuf>,
    /// How long past its deadline a call may hold its pool thread before the
    /// caller gets `DeadlineExceeded` and the pool replaces the thread (the
    /// async API only). Covers checking the result after the guest returns.
    pub thread_grace: Duration,
    /// How many log records (`log()`, stdout, stderr) each policy may send
    /// to the host's log across calls.
    pub guest_logs: LogRate,
    /// How components are compiled: static limits, and the compile process.
    pub compile: CompileConfig,
    /// The largest fair share a policy may ask for; larger ones are clamped
    /// (and reported like clamped limits).
    pub max_share: Share,
    /// Whom the client of policies' outbound requests trusts.
    pub outbound: ClientConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            engine: EngineConfig::default(),
            defaults: Limits::default(),
            threads: std::thread::available_parallelism().map_or(2, usize::from),
            cache_dir: None,
            thread_grace: Duration::from_millis(100),
            guest_logs: LogRate::default(),
            compile: CompileConfig::default(),
            max_share: Share::new(DEFAULT_MAX_SHARE).unwrap_or_default(),
            outbound: ClientConfig::default(),
        }
    }
}

/// The default of [`RuntimeConfig::max_share`]: enough to give a critical
/// team ten times the default, not enough to shut the others out.
pub const DEFAULT_MAX_SHARE: u32 = 10;

/// Instances kept beyond one per call thread, for calls that do not pass
/// the [`Gate`]: trial instantiations of versions being loaded (the policy
/// ConfigMap source loads one at a time) and the CLI's blocking calls.
pub const RESERVED_INSTANCES: u32 = 4;

impl RuntimeConfig {
    /// The instance pool this configuration needs: one instance per call
    /// thread (the gate admits no more calls) plus [`RESERVED_INSTANCES`],
    /// or the configured size if that is larger.
    #[must_use]
    pub fn instances_needed(&self) -> u32 {
        let threads = u32::try_from(self.threads.max(1)).unwrap_or(u32::MAX);
        self.engine
            .max_instances
            .max(threads.saturating_add(RESERVED_INSTANCES))
    }
}

/// Loads and calls policies. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: engine::Engine,
    /// The sandbox every policy gets.
    linker: Linker<StoreState>,
    /// The sandbox and `wasi:http`, for policies with an outbound grant.
    outbound_linker: Linker<StoreState>,
    /// The client of their requests.
    client: Client,
    cache: cache::Cache,
    compiler: compile::Compiler,
    pool: pool::Pool,
    /// Admits async calls to the pool, fairly between policies.
    calls: Arc<Gate>,
    defaults: Limits,
    maxima: HostMaxima,
    budgets: logs::Budgets,
    thread_grace: Duration,
    max_share: Share,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("maxima", &self.inner.maxima)
            .finish_non_exhaustive()
    }
}

/// Links every capability a call may reach, one call each, as
/// wasmtime-wasi links its own: the log, the deny-all WASI context, the
/// virtual clocks, the streams, and, for `Reach::Outbound`, `wasi:http`.
fn link_capabilities(linker: &mut Linker<StoreState>, reach: Reach) -> wasmtime::Result<()> {
    logs::add_to_linker(linker)?;
    wasi::add_to_linker(linker)?;
    clock::add_to_linker(linker)?;
    streams::add_to_linker(linker, reach)?;
    if reach == Reach::Outbound {
        crate::outbound::add_to_linker(linker)?;
    }
    Ok(())
}

impl Runtime {
    /// Builds the engine, the linker and the call pool.
    ///
    /// The instance pool is sized by [`RuntimeConfig::instances_needed`]:
    /// every call the runtime can have in flight finds its instance.
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        let engine = engine::Engine::new(&EngineConfig {
            max_instances: config.instances_needed(),
            ..config.engine.clone()
        })?;
        let link = |reach| -> Result<Linker<StoreState>> {
            let mut linker = Linker::new(engine.wasmtime());
            link_capabilities(&mut linker, reach).map_err(|source| Error::Host {
                context: "linking the host interfaces",
                source,
            })?;
            Ok(linker)
        };
        let linker = link(Reach::Sandbox)?;
        let outbound_linker = link(Reach::Outbound)?;
        let client = Client::new(&config.outbound).map_err(|source| Error::Host {
            context: "building the outbound HTTP client",
            source: wasmtime::Error::new(source),
        })?;
        let threads = config.threads.max(1);
        let pool = pool::Pool::new(threads).map_err(|source| Error::Io {
            context: "starting the guest call threads".into(),
            source,
        })?;
        let (defaults, _) =
            PolicyLimits::default().resolve(&config.defaults, &config.engine.maxima);
        let compiler = compile::Compiler::new(config.compile, &engine);
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                outbound_linker,
                client,
                cache: cache::Cache::new(config.cache_dir),
                compiler,
                pool,
                // As many calls as threads: a queue inside the pool would be
                // first come, first served, so the fair choice is made here,
                // when a thread is free.
                calls: Gate::new(threads),
                defaults,
                maxima: config.engine.maxima,
                budgets: logs::Budgets::new(config.guest_logs),
                thread_grace: config.thread_grace,
                max_share: config.max_share,
            }),
        })
    }

    /// Validates, compiles (or finds in the cache) and pre-links a policy,
    /// on the current thread.
    pub fn load(&self, spec: PolicySpec, bytes: &[u8]) -> Result<Arc<Policy>> {
        let inner = &self.inner;
        load::Loader {
            engine: &inner.engine,
            linker: &inner.linker,
            outbound_linker: &inner.outbound_linker,
            cache: &inner.cache,
            compiler: &inner.compiler,
            defaults: &inner.defaults,
            maxima: &inner.maxima,
            budgets: &inner.budgets,
            max_share: inner.max_share,
        }
        .load(spec, bytes)
        .map(Arc::new)
    }

    /// [`Runtime::load`] on a blocking thread: off the async runtime, and
    /// off the guest call threads, which a compile (up to its time cap)
    /// would keep from the reconciles.
    pub async fn load_async(&self, spec: PolicySpec, bytes: Vec<u8>) -> Result<Arc<Policy>> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.load(spec, &bytes))
            .await
            .map_err(|error| Error::Host {
                context: "loading the policy on a blocking thread",
                source: wasmtime::Error::new(error),
            })?
    }

    /// Calls `reconcile` on the current thread.
    pub fn reconcile_blocking(&self, policy: &Policy, input: &Input) -> Outcome<Reconciled> {
        call::reconcile(self.parts(), policy, input, Network::Granted)
    }

    /// Calls `cleanup` on the current thread.
    pub fn cleanup_blocking(&self, policy: &Policy, input: &Input) -> Outcome<Cleaned> {
        call::cleanup(self.parts(), policy, input, Network::Granted)
    }

    /// Calls `reconcile` on the current thread, no request leaving the
    /// host: what a candidate's shadow call does (beside the serving call
    /// whose requests were `served`), and a replay of recorded calls.
    pub fn reconcile_offline(
        &self,
        policy: &Policy,
        input: &Input,
        served: &[Recorded],
    ) -> Outcome<Reconciled> {
        call::reconcile(self.parts(), policy, input, Network::Offline(served))
    }

    /// Calls `cleanup` on the current thread, no request leaving the host.
    pub fn cleanup_offline(
        &self,
        policy: &Policy,
        input: &Input,
        served: &[Recorded],
    ) -> Outcome<Cleaned> {
        call::cleanup(self.parts(), policy, input, Network::Offline(served))
    }

    fn parts(&self) -> (&engine::Engine, &Client) {
        (&self.inner.engine, &self.inner.client)
    }

    /// A call thread for work below every serving call
    /// ([`Gate::try_spare`]): taken only when no call waits for one, it
    /// leaves another thread free, and such calls hold under a quarter of
    /// the threads (at least one). `None` otherwise.
    #[must_use]
    pub fn spare(&self, tenant: &Tenant) -> Option<Spare> {
        self.inner
            .calls
            .try_spare(tenant)
            .map(|slot| Spare { _slot: slot })
    }

    /// Runs `call` (one of the `*_offline` calls) on a [`Spare`] thread:
    /// a shadow call, bounded as [`Runtime::reconcile`] is.
    pub async fn shadow<T: Send + 'static>(
        &self,
        spare: Spare,
        policy: Arc<Policy>,
        input: Input,
        served: Vec<Recorded>,
        call: fn(&Self, &Policy, &Input, &[Recorded]) -> Outcome<T>,
    ) -> Outcome<T> {
        let this = self.clone();
        let timeout = policy.limits.timeout;
        let outcome = self
            .inner
            .pool
            .run(Some(self.bound(timeout)), move || {
                call(&this, &policy, &input, &served)
            })
            .await
            .unwrap_or_else(|error| failed_outcome(error, timeout));
        drop(spare);
        outcome
    }

    /// Calls `reconcile` on the call pool; waits (asynchronously) for a slot
    /// when every thread is busy, behind the calls of policies that hold
    /// fewer threads per share than this one.
    ///
    /// The call holds its thread at most its timeout plus
    /// [`RuntimeConfig::thread_grace`]; past that the answer is
    /// `DeadlineExceeded` and the pool replaces the thread.
    pub async fn reconcile(&self, policy: Arc<Policy>, input: Input) -> Outcome<Reconciled> {
        self.on_pool(policy, input, Self::reconcile_blocking).await
    }

    /// Calls `cleanup` on the call pool, bounded and admitted like
    /// [`Runtime::reconcile`].
    pub async fn cleanup(&self, policy: Arc<Policy>, input: Input) -> Outcome<Cleaned> {
        self.on_pool(policy, input, Self::cleanup_blocking).await
    }

    /// Runs `call` on the call pool once the policy's tenant has a slot,
    /// bounded by the policy's timeout.
    async fn on_pool<T: Send + 'static>(
        &self,
        policy: Arc<Policy>,
        input: Input,
        call: fn(&Self, &Policy, &Input) -> Outcome<T>,
    ) -> Outcome<T> {
        let _slot = self.inner.calls.acquire(policy.tenant()).await;
        let this = self.clone();
        let timeout = policy.limits.timeout;
        self.inner
            .pool
            .run(Some(self.bound(timeout)), move || {
                call(&this, &policy, &input)
            })
            .await
            .unwrap_or_else(|error| failed_outcome(error, timeout))
    }

    /// The longest a call of `timeout` may hold its pool thread.
    fn bound(&self, timeout: Duration) -> Duration {
        timeout.saturating_add(self.inner.thread_grace)
    }

    /// Pool threads replaced so far because a call held one past its bound.
    #[must_use]
    pub fn threads_replaced(&self) -> u64 {
        self.inner.pool.replaced()
    }

    /// Instantiates `policy` once without calling it (see [`Runtime::load`]
    /// for what loading checks before): the last check before a version is
    /// put in service. Runs on the current thread.
    pub fn instantiate_blocking(&self, policy: &Policy) -> Result<()> {
        call::instantiate(&self.inner.engine, &self.inner.client, policy).result
    }

    /// How the compile cache has been used.
    #[must_use]
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }

    /// What the compiler did: compiles started, refused, recalled, over
    /// budget.
    #[must_use]
    pub fn compile_stats(&self) -> CompileStats {
        self.inner.compiler.stats()
    }

    /// The host maxima policies are clamped to.
    #[must_use]
    pub fn maxima(&self) -> &HostMaxima {
        &self.inner.maxima
    }

    /// Async calls of `policy` running now (holding a call thread).
    #[must_use]
    pub fn calls_running(&self, policy: &str) -> usize {
        self.inner.calls.held(policy)
    }
}

/// A call thread held for a call that must not delay others
/// ([`Runtime::spare`]); given back when dropped.
#[derive(Debug)]
pub struct Spare {
    _slot: crate::fair::Slot,
}

fn pool_failed(error: pool::Error) -> Error {
    Error::Host {
        context: "submitting the call to the guest call pool",
        source: wasmtime::Error::new(error),
    }
}

/// The outcome of a call the pool gave no answer for: shut down, or held
/// past its bound (then the deadline error, as for any call that runs over).
fn failed_outcome<T>(error: pool::Error, timeout: Duration) -> Outcome<T> {
    match error {
        pool::Error::Closed => Outcome {
            result: Err(pool_failed(error)),
            report: CallReport::default(),
            requests: Vec::new(),
        },
        pool::Error::Overran { bound } => Outcome {
            result: Err(Error::DeadlineExceeded { timeout }),
            report: CallReport {
                duration: bound,
                thread_replaced: true,
                ..CallReport::default()
            },
            requests: Vec::new(),
        },
    }
}

/// Compile-time check: the async API can be used from spawned tasks.
#[allow(dead_code)]
fn runtime_futures_should_be_send(runtime: Runtime, policy: Arc<Policy>, input: Input) {
    fn assert_send<T: Send>(_: T) {}
    assert_send(runtime.reconcile(policy.clone(), input.clone()));
    assert_send(runtime.cleanup(policy, input));
    assert_send(runtime.load_async(PolicySpec::new("x"), Vec::new()));
}
