//! Compiling a component within bounds: static limits first
//! ([`Footprint`], read with wasmparser), then the compile itself, in a
//! child process capped in memory and time ([`CompileProcess`]) or, for
//! library users and tests, on the calling thread.
//!
//! # Why a child process
//!
//! The static limits bound what Cranelift is given, not what it does with
//! it: its memory and time are not linear in every input (register
//! allocation, large `br_table`s, deep control flow), and an in-process
//! compile can be neither capped in memory (an allocation failure aborts the
//! whole operator) nor stopped (Cranelift has no cancellation: a timed-out
//! compile would keep a thread and its memory until it ends). A child
//! process can be both: it sets `RLIMIT_AS` and `RLIMIT_CPU` on itself
//! before it reads a byte of the component, and the host kills it at the
//! wall-clock cap. What it pays (a process start, about 10-30 ms, and the
//! compiled code copied through a pipe) is paid once per digest: a compile
//! cache hit does not start a process.
//!
//! # Guarantees
//!
//! - A component over a static limit is never compiled.
//! - With a [`CompileProcess`], no compile holds more than its memory cap or
//!   runs past its time cap, and at most one runs at a time, so the operator
//!   needs its own memory plus one cap.
//! - Compiles are fair between teams ([`crate::fair::Teams`]; a policy no
//!   rule names is a team of its own): the one compile slot goes round
//!   between the teams waiting, so one team's compiles delay another's by
//!   at most one compile, and each team's compile time is capped by a
//!   [`CompileBudget`] ([`Compiler`]).
//! - A refused digest is remembered ([`Refusal`]): in memory, and by the
//!   policy loader on its ConfigMap, so a restart does not compile it again.

mod budget;
mod footprint;
mod process;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

pub use budget::{CompileBudget, Exhausted};
pub use footprint::{Footprint, Measure, Over};
pub use process::{CompileProcess, SUBCOMMAND, serve};

use super::cache::Digest;
use super::engine::Engine;
use super::error::{Error, Result};
use crate::fair::{Gate, Slot, Team};
use budget::Budgets;

/// How the host compiles policy components.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompileConfig {
    /// The static limits, checked before compiling.
    pub limits: Footprint,
    /// Compile in a child process capped in memory and time; `None`
    /// compiles on the calling thread, under the static limits only (for
    /// library users and tests with no binary that serves [`serve`]).
    pub process: Option<CompileProcess>,
    /// The compile time each policy may use; `None`: unlimited (library
    /// users and tests; the operator sets [`CompileBudget::DEFAULT`]).
    pub budget: Option<CompileBudget>,
}

/// What made a component too expensive to compile.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CompileLimit {
    /// A static limit, checked before compiling.
    Static(Over),
    /// The compile process reached its memory cap.
    Memory {
        /// The cap, in bytes of address space.
        limit: u64,
    },
    /// The compile ran past its wall-clock (or CPU) cap and was killed.
    Time {
        /// The cap, in milliseconds.
        limit_ms: u64,
    },
    /// The compiled code is larger than the host accepts back.
    Artifact {
        /// The largest compiled code accepted, in bytes.
        limit: u64,
    },
}

impl fmt::Display for CompileLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Static(over) => over.fmt(f),
            Self::Memory { limit } => {
                write!(f, "compiling it needs more than {limit} bytes of memory")
            }
            Self::Time { limit_ms } => write!(f, "compiling it takes longer than {limit_ms} ms"),
            Self::Artifact { limit } => {
                write!(f, "its compiled code is larger than {limit} bytes")
            }
        }
    }
}

/// A component refused for what compiling it costs: which one, under which
/// limits, and why.
///
/// It is remembered so that the same bytes are not compiled again under
/// the same limits: by the runtime (for its life) and, through
/// [`PolicySpec::remembered`](super::PolicySpec::remembered), by whoever
/// can keep it across restarts (the policy loader writes it on the
/// ConfigMap). Raising a limit, or another engine, changes `limits`, and the
/// component is tried again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The component's digest, lowercase hex.
    pub digest: String,
    /// Which limits it was refused under (a hash of the limits, the caps
    /// and the engine).
    pub limits: String,
    /// Why.
    pub limit: CompileLimit,
    /// True when this refusal was recalled rather than found now.
    #[serde(skip)]
    pub remembered: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.limit.fmt(f)?;
        if self.remembered {
            f.write_str(" (refused before under the same limits; not compiled again)")?;
        }
        Ok(())
    }
}

/// Compiles under a [`CompileConfig`], fairly between teams, and
/// remembers what it refused.
///
/// # Expected flow
///
/// [`check`](Self::check) the static limits (no wait: a component over
/// them never queues), take a [`Turn`] ([`turn`](Self::turn): the team's
/// budget, then the compile slot), look again for a refusal or a cached
/// compile that another load made while this one waited, then
/// [`compile`](Self::compile) under the turn.
///
/// # Guarantees
///
/// - One compile at a time, with or without a compile process.
/// - The slot goes round between the teams waiting for it
///   ([`crate::fair::Gate`], every team with the same weight: a policy's
///   `share` buys guest-call threads, not compiles), so a team with many
///   compiles waiting delays another team's next compile by at most the
///   one running.
/// - A team past its [`CompileBudget`] is refused before it waits.
pub(crate) struct Compiler {
    config: CompileConfig,
    /// [`Refusal::limits`] of this compiler.
    key: String,
    refused: Mutex<HashMap<Digest, Refusal>>,
    /// One compile at a time (so that the Pod needs room for one memory
    /// cap, and one compile's cores), handed round between teams.
    slot: Arc<Gate>,
    budgets: Budgets,
    stats: Counters,
}

/// The compile slot, held by one team; dropping it charges the time it
/// was held to the team's budget.
pub(crate) struct Turn<'a> {
    compiler: &'a Compiler,
    team: Arc<str>,
    started: Instant,
    _slot: Slot,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        self.compiler
            .budgets
            .charge(&self.team, now.saturating_duration_since(self.started), now);
    }
}

/// What the compiler did, counted since the runtime started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Compiles started (in the compile process or here), whatever their end.
    pub started: u64,
    /// Components refused for what compiling them costs, found now.
    pub refused: u64,
    /// Loads refused because the digest was refused before (not compiled).
    pub recalled: u64,
    /// Loads refused because their team used its [`CompileBudget`].
    pub over_budget: u64,
}

#[derive(Default)]
struct Counters {
    started: AtomicU64,
    refused: AtomicU64,
    recalled: AtomicU64,
    over_budget: AtomicU64,
}

impl Compiler {
    pub(crate) fn new(config: CompileConfig, engine: &Engine) -> Self {
        let caps = config
            .process
            .as_ref()
            .map(|p| (p.memory_bytes, p.timeout, p.max_artifact_bytes));
        let text = format!(
            "{:?} {caps:?} {:016x}",
            config.limits,
            engine.compatibility()
        );
        let key = hex::encode(&Sha256::digest(text.as_bytes())[..8]);
        Self {
            budgets: Budgets::new(config.budget),
            config,
            key,
            refused: Mutex::new(HashMap::new()),
            slot: Gate::new(1),
            stats: Counters::default(),
        }
    }

    /// The refusal of `digest` under these limits, if it was refused
    /// before: by this compiler, or as `remembered` says.
    pub(crate) fn recall(&self, digest: Digest, remembered: Option<&Refusal>) -> Option<Refusal> {
        let known = self.lock().get(&digest).cloned();
        let recalled = known.or_else(|| {
            remembered
                .filter(|r| r.limits == self.key && r.digest == digest.to_hex())
                .cloned()
        })?;
        self.stats.recalled.fetch_add(1, Ordering::Relaxed);
        Some(Refusal {
            remembered: true,
            ..recalled
        })
    }

    /// Checks the static limits (a refusal is remembered).
    pub(crate) fn check(&self, digest: Digest, bytes: &[u8]) -> Result<()> {
        match footprint::measure(bytes, &self.config.limits) {
            Ok(_) => Ok(()),
            Err(footprint::Refused::Over(over)) => {
                Err(self.refuse(digest, CompileLimit::Static(over)))
            }
            Err(footprint::Refused::Malformed(error)) => {
                Err(Error::Corrupt(wasmtime::Error::new(error)))
            }
        }
    }

    /// Waits for the compile slot for `team`, behind at most one compile
    /// of each team that waited before it; refused at once if `team` used
    /// its budget.
    ///
    /// Blocking: call it off the async runtime (the loads do, on blocking
    /// threads).
    pub(crate) fn turn(&self, team: &Team) -> Result<Turn<'_>> {
        if let Err(exhausted) = self.budgets.admit(team.key(), Instant::now()) {
            self.stats.over_budget.fetch_add(1, Ordering::Relaxed);
            return Err(Error::CompileBudgetExhausted {
                team: team.to_string(),
                budget: exhausted.budget,
                retry_after: exhausted.retry_after,
            });
        }
        let tenant = team.tenant();
        // The gate's waiters are woken through a oneshot channel, which
        // any executor can wait on; this thread has nothing else to do.
        let slot = futures::executor::block_on(self.slot.acquire(&tenant));
        Ok(Turn {
            compiler: self,
            team: Arc::clone(team.key()),
            started: Instant::now(),
            _slot: slot,
        })
    }

    /// Compiles, under `turn`: in the compile process if there is one, else
    /// here. A component stopped by a cap is refused and remembered.
    pub(crate) fn compile(
        &self,
        _turn: &Turn<'_>,
        engine: &Engine,
        digest: Digest,
        bytes: &[u8],
    ) -> Result<Component> {
        self.stats.started.fetch_add(1, Ordering::Relaxed);
        let result = match &self.config.process {
            None => Component::new(engine.wasmtime(), bytes)
                .map_err(|error| Stopped::Error(Error::Corrupt(error))),
            Some(process) => process::compile(process, engine, bytes),
        };
        result.map_err(|stopped| match stopped {
            Stopped::Error(error) => error,
            Stopped::Limit(limit) => self.refuse(digest, limit),
        })
    }

    /// What the compiler did so far.
    pub(crate) fn stats(&self) -> CompileStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CompileStats {
            started: read(&self.stats.started),
            refused: read(&self.stats.refused),
            recalled: read(&self.stats.recalled),
            over_budget: read(&self.stats.over_budget),
        }
    }

    /// Remembers `digest` as refused for `limit`.
    fn refuse(&self, digest: Digest, limit: CompileLimit) -> Error {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        let refusal = Refusal {
            digest: digest.to_hex(),
            limits: self.key.clone(),
            limit,
            remembered: false,
        };
        let mut refused = self.lock();
        if refused.len() >= MAX_REMEMBERED {
            // Bounded: a team pushing endless bombs must not grow
            // the host. A forgotten refusal costs one capped compile.
            if let Some(forget) = refused.keys().next().copied() {
                refused.remove(&forget);
            }
        }
        refused.insert(digest, refusal.clone());
        drop(refused);
        Error::CompileLimitExceeded(refusal)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, Refusal>> {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Refusals a runtime keeps in memory.
const MAX_REMEMBERED: usize = 1024;

/// Why a compile produced no component.
pub(crate) enum Stopped {
    /// A limit stopped it: the component is refused.
    Limit(CompileLimit),
    /// It failed otherwise (corrupt bytes, a host failure).
    Error(Error),
}

/// The wall-clock cap's default: the Rust fanout compiles in about 150 ms;
/// a Python policy (CPython, 19 MB) in 6.6 s on two cores and 12.5 s on
/// one, a TypeScript one (QuickJS, 2 MB) in 1.3 s on two cores (release
/// binary, `docs/BENCHMARKS.md`): the cap leaves a loaded one-core Pod more
/// than twice the slowest.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The memory cap's default, in bytes of address space. The Rust fanout's
/// compile process maps 163 MiB at its peak (50 MiB resident); a Python
/// policy's needs more than 512 MiB and less than 768 MiB (370 to 390 MiB
/// resident, release binary), a TypeScript one's less than 256 MiB: the cap
/// leaves the largest a third more.
/// The operator's Pod is limited to 1152 MiB and the operator itself stays
/// under 64 MiB with 1,000 DataJobs (docs/BENCHMARKS.md, "operator at
/// scale"), and one compile runs at a time, so the operator and a compile
/// at its cap fit in the Pod.
pub const DEFAULT_MEMORY_BYTES: u64 = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_refusal_is_recalled_only_for_its_digest_and_limits() {
        let engine = Engine::for_tests();
        let compiler = Compiler::new(CompileConfig::default(), &engine);
        let digest = Digest::of(b"component");
        let recorded = Refusal {
            digest: digest.to_hex(),
            limits: compiler.key.clone(),
            limit: CompileLimit::Time { limit_ms: 10 },
            remembered: false,
        };
        let recalled = compiler.recall(digest, Some(&recorded)).unwrap();
        assert!(recalled.remembered);
        assert_eq!(recalled.limit, recorded.limit);
        assert_eq!(compiler.recall(Digest::of(b"other"), Some(&recorded)), None);
        let other_limits = Refusal {
            limits: "0000000000000000".into(),
            ..recorded.clone()
        };
        assert_eq!(compiler.recall(digest, Some(&other_limits)), None);
        // Nothing was learnt from the record: without it, nothing is recalled.
        assert_eq!(compiler.recall(digest, None), None);
    }

    #[test]
    fn other_limits_or_caps_make_another_key() {
        let engine = Engine::for_tests();
        let default = Compiler::new(CompileConfig::default(), &engine).key;
        let lower = Compiler::new(
            CompileConfig {
                limits: Footprint {
                    locals: 10,
                    ..Footprint::LIMITS
                },
                process: None,
                budget: None,
            },
            &engine,
        )
        .key;
        let capped = Compiler::new(
            CompileConfig {
                process: Some(CompileProcess::policyhost(1 << 30, DEFAULT_TIMEOUT)),
                ..CompileConfig::default()
            },
            &engine,
        )
        .key;
        assert_ne!(default, lower);
        assert_ne!(default, capped);
        assert_eq!(
            default,
            Compiler::new(CompileConfig::default(), &engine).key
        );
    }

    #[test]
    fn a_component_over_a_static_limit_is_refused_and_remembered() {
        let engine = Engine::for_tests();
        let compiler = Compiler::new(
            CompileConfig {
                limits: Footprint {
                    functions: 1,
                    ..Footprint::LIMITS
                },
                process: None,
                budget: None,
            },
            &engine,
        );
        let bytes = wat::parse_str("(component (core module (func) (func)))").unwrap();
        let digest = Digest::of(&bytes);
        let Err(Error::CompileLimitExceeded(refusal)) = compiler.check(digest, &bytes) else {
            panic!("refused")
        };
        assert!(!refusal.remembered);
        assert_eq!(refusal.digest, digest.to_hex());
        assert_eq!(
            refusal.to_string(),
            "the component has 2 defined functions, the limit is 1"
        );
        assert_eq!(
            compiler.recall(digest, None).map(|r| r.limit),
            Some(refusal.limit)
        );
    }
}
