//! The compile process: the host side ([`compile`]) starts a child, hands it
//! the component on stdin, takes the compiled code from its stdout and
//! kills it at the wall-clock cap; the child side ([`serve`]) caps itself,
//! compiles and answers.
//!
//! The protocol is the child's exit status: 0 with the compiled code on
//! stdout; [`INVALID`] when the component does not compile (the error on
//! stderr); [`OUT_OF_MEMORY`] when the compiler could not get memory;
//! anything else (a signal, a panic) is a crash, and a crash with an
//! allocation failure on stderr is the memory cap at work.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use super::{CompileLimit, Stopped};
use crate::runtime::engine::{self, Engine};
use crate::runtime::error::Error;

/// A child process that compiles: a binary that calls [`serve`] when run
/// with `args` (the `policyhost` binary's hidden `compile` subcommand, see
/// [`CompileProcess::policyhost`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileProcess {
    /// The binary.
    pub program: PathBuf,
    /// Its arguments before the caps (`--memory-bytes`, `--cpu-seconds`).
    pub args: Vec<String>,
    /// The address space the child may map (`RLIMIT_AS`), in bytes: its
    /// own code and stacks included.
    pub memory_bytes: u64,
    /// The wall-clock cap; the child's CPU time is capped at twice this
    /// (its compiler threads run in parallel) in case the host is gone.
    pub timeout: Duration,
    /// The largest compiled code taken back, in bytes.
    pub max_artifact_bytes: u64,
}

/// The hidden subcommand of the `policyhost` binary that runs [`serve`].
pub const SUBCOMMAND: &str = "compile-component";

impl CompileProcess {
    /// The running `policyhost` binary, re-executed with its hidden
    /// subcommand. `/proc/self/exe` is the binary this process runs even
    /// if the file was replaced or deleted since (an upgrade in place), so
    /// the child always has this host's compiler and engine settings.
    #[must_use]
    pub fn policyhost(memory_bytes: u64, timeout: Duration) -> Self {
        Self {
            program: PathBuf::from("/proc/self/exe"),
            args: vec![SUBCOMMAND.to_owned()],
            memory_bytes,
            timeout,
            max_artifact_bytes: memory_bytes / 2,
        }
    }
}

/// Exit status of a child whose component does not compile.
const INVALID: u8 = 3;
/// Exit status of a child whose compiler could not get memory.
const OUT_OF_MEMORY: u8 = 4;
/// What the host keeps of the child's stderr.
const STDERR_BYTES: u64 = 4 << 10;

/// Compiles `bytes` in a child process; on the host side.
pub(super) fn compile(
    process: &CompileProcess,
    engine: &Engine,
    bytes: &[u8],
) -> Result<Component, Stopped> {
    let host = |context: &'static str| {
        move |error: std::io::Error| {
            Stopped::Error(Error::Host {
                context,
                source: wasmtime::Error::new(error),
            })
        }
    };
    let cpu_seconds = process.timeout.as_secs().saturating_mul(2).max(1);
    let mut child = Command::new(&process.program)
        .args(&process.args)
        .arg(format!("--memory-bytes={}", process.memory_bytes))
        .arg(format!("--cpu-seconds={cpu_seconds}"))
        .env_clear()
        // Allocators reserve address space they may never touch (mimalloc
        // a 1 GiB arena, glibc 64 MiB per thread): without these the
        // address-space cap would count reservations, not what the compile
        // maps (fanout's compile: about 1.3 GiB of address space without
        // them, 163 MiB with them, 50 MiB resident).
        .env("MIMALLOC_ARENA_RESERVE", "0")
        .env("MALLOC_ARENA_MAX", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(host("starting the compile process"))?;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let limit = process.max_artifact_bytes;
    let (status, artifact, message) = std::thread::scope(|scope| {
        scope.spawn(move || {
            // A child that stops reading (killed, or failed) closes the
            // pipe: the error is the child's to report.
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(bytes);
            }
        });
        let artifact = scope.spawn(move || {
            // Past the limit the rest is drained, not kept: the child must
            // not block on a full pipe, nor the host hold its output.
            let mut out = Vec::new();
            if let Some(mut stdout) = stdout {
                let _ = (&mut stdout).take(limit + 1).read_to_end(&mut out);
                let _ = std::io::copy(&mut stdout, &mut std::io::sink());
            }
            out
        });
        let message = scope.spawn(move || {
            let mut text = Vec::new();
            if let Some(mut stderr) = stderr {
                let _ = (&mut stderr).take(STDERR_BYTES).read_to_end(&mut text);
                let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            }
            String::from_utf8_lossy(&text).trim().to_owned()
        });
        let status = wait(&mut child, process.timeout);
        let artifact = artifact.join().unwrap_or_default();
        let message = message.join().unwrap_or_default();
        (status, artifact, message)
    });
    let status = status.map_err(host("waiting for the compile process"))?;
    let Some(status) = status else {
        return Err(Stopped::Limit(CompileLimit::Time {
            limit_ms: u64::try_from(process.timeout.as_millis()).unwrap_or(u64::MAX),
        }));
    };
    let memory = CompileLimit::Memory {
        limit: process.memory_bytes,
    };
    match (status.code(), status.signal()) {
        (Some(0), _) if artifact.len() as u64 > limit => {
            Err(Stopped::Limit(CompileLimit::Artifact { limit }))
        }
        (Some(0), _) => load(engine, &artifact),
        (Some(code), _) if code == i32::from(INVALID) => Err(Stopped::Error(Error::Corrupt(
            wasmtime::format_err!("{message}"),
        ))),
        (Some(code), _) if code == i32::from(OUT_OF_MEMORY) => Err(Stopped::Limit(memory)),
        (_, Some(signal)) if signal == rustix::process::Signal::XCPU.as_raw() => {
            Err(Stopped::Limit(CompileLimit::Time {
                limit_ms: cpu_seconds.saturating_mul(1000),
            }))
        }
        _ if message.contains("memory allocation of") => Err(Stopped::Limit(memory)),
        _ => Err(Stopped::Error(Error::Host {
            context: "compiling in the compile process",
            source: wasmtime::format_err!("the compile process failed ({status}): {message}"),
        })),
    }
}

/// Waits for the child until `timeout`; `None` when it had to be killed.
fn wait(child: &mut std::process::Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    // Short polls first: a compile takes tens of milliseconds, and each
    // poll is one `waitid`.
    let mut pause = Duration::from_micros(250);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            // Killing a child that just exited fails harmlessly; `wait`
            // reaps it either way.
            let _ = child.kill();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// Loads the compiled code the child sent back.
fn load(engine: &Engine, artifact: &[u8]) -> Result<Component, Stopped> {
    // SAFETY: the bytes come from a child running this same binary, over
    // a pipe only it and the host hold, produced by
    // `Engine::precompile_component` with the settings this engine was built
    // with (`engine::compile_settings`); wasmtime checks the header and the
    // compatibility of the settings again and refuses anything else. Trusting
    // the compiled code is what compiling in process does too: the child
    // is the same compiler, in a process that can be capped.
    #[allow(unsafe_code)]
    let loaded = unsafe { Component::deserialize(engine.wasmtime(), artifact) };
    loaded.map_err(|source| {
        Stopped::Error(Error::Host {
            context: "loading the code the compile process sent back",
            source,
        })
    })
}

/// The child side: caps this process (address space, CPU), reads a
/// component from stdin, compiles it and writes the compiled code to
/// stdout. Nothing of the component is read before the caps are set.
///
/// A binary that serves compiles runs this for [`CompileProcess::args`]
/// with the two caps the host appends.
#[must_use]
pub fn serve(memory_bytes: u64, cpu_seconds: u64) -> ExitCode {
    use rustix::process::{Resource, Rlimit, Signal, setrlimit};
    let cap = |resource, value| {
        setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
    };
    // The kernel kills the child when the host thread that started it goes
    // away: a compile never outlives the operator. Resident memory stays
    // below the address-space cap; should the Pod run out of memory anyway,
    // the kernel's OOM killer takes the compile first, not the operator.
    let capped = rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .and_then(|()| cap(Resource::Cpu, cpu_seconds))
        .and_then(|()| cap(Resource::As, memory_bytes));
    // A backstop only (the cap is the bound): where /proc is not writable,
    // the compile runs without it.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    if let Err(error) = capped {
        eprintln!("cannot cap the compile process: {error}");
        return ExitCode::FAILURE;
    }
    let mut bytes = Vec::new();
    if let Err(error) = std::io::stdin().lock().read_to_end(&mut bytes) {
        eprintln!("cannot read the component: {error}");
        return ExitCode::FAILURE;
    }
    let compiled = wasmtime::Engine::new(&engine::compile_settings())
        .and_then(|engine| engine.precompile_component(&bytes));
    match compiled {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("cannot write the compiled code: {error}");
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            let text = format!("{error:#}");
            eprintln!("{text}");
            if text.contains("Cannot allocate memory") || text.contains("out of memory") {
                ExitCode::from(OUT_OF_MEMORY)
            } else {
                ExitCode::from(INVALID)
            }
        }
    }
}
