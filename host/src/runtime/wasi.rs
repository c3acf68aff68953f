//! The deny-all WASI context a policy runs with, and the WASI interfaces linked.
//!
//! What a Rust `wasm32-wasip2` guest imports was read off the built policies
//! (`policyhost policy check`): `fanout` and `static-counter` import
//! `wasi:cli/{environment,exit,stdin,stdout,stderr,terminal-*}` and
//! `wasi:io/{error,poll,streams}` through the standard library even though
//! they never use them (start-up, panic messages on stderr), and nothing else
//! from WASI. `wasi:clocks/*` and `wasi:random/*` are imported as soon as a
//! policy reads `SystemTime`/`Instant` or builds a `HashMap` with the default
//! hasher; both are harmless once virtualised, so they are linked too.
//! Those interfaces, and only those, are linked ([`ALLOWED_INTERFACES`]),
//! each backed by a context that gives nothing away:
//!
//! - no arguments, no environment variables, stdin closed;
//! - stdout and stderr captured into bounded buffers (the excess is counted
//!   and dropped) and forwarded to tracing under the targets
//!   `policyhost::guest::stdout` / `policyhost::guest::stderr`;
//! - both clocks and `wasi:io/poll` virtual ([`super::clock`]): they start
//!   at the call's `now-unix-ms` and move only by what the policy waits, a
//!   wait is answered at once (never slept through), and a wait past the
//!   call's timeout ends the call with `DeadlineExceeded`; so a policy sees
//!   the same time through WASI as in its context, replays identically, and
//!   never holds a call thread in a host function;
//! - random bytes from a generator seeded from the DataJob uid, the attempt
//!   and the policy digest: deterministic for the same inputs;
//! - a resource table of at most [`TABLE_ENTRIES`] handles (pollables,
//!   streams), so host memory a guest pins through handles is bounded.
//!
//! None of the linked host functions can block: stdin is closed (a read
//! answers "closed" at once), stdout and stderr accept every write and flush
//! at once (blocking or not: their pollables are always ready), random
//! requests are capped at 64 KiB, and waits are virtual. Time spent in host
//! functions counts against the epoch deadline like guest code.
//!
//! `wasi:http/types` and `wasi:http/outgoing-handler` are linked only for a
//! policy with an outbound grant ([`crate::outbound`]), into a linker of its
//! own whose blocking stream operations end at the call's deadline
//! ([`super::streams`]); a policy that imports them without a grant is
//! rejected at load time with [`super::Error::OutboundNotGranted`].
//!
//! `wasi:filesystem` and `wasi:sockets` are linked and give nothing: no
//! directory is preopened, so no descriptor can ever be opened (a Rust
//! `std::fs` call, or CPython's import of a module it did not freeze, fails
//! with an error the policy sees); TCP, UDP and name lookups are not
//! allowed, so creating a socket fails at once, before any socket of the
//! host's is made. componentize-py imports both in every component,
//! componentize-qjs the file system: a sandbox without them could
//! not run a Python or JavaScript policy at all.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use rand::SeedableRng as _;
use sha2::{Digest as _, Sha256};
use wasmtime::component::Linker;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream, WasiCli, WasiCliView};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiView};

use super::bindings::Context;

/// The interfaces a policy may import (package/interface, any `0.2.x` for
/// WASI, `0.1.x` for the policyhost contract).
pub const ALLOWED_INTERFACES: &[&str] = &[
    "policyhost:reconcile/host",
    "policyhost:reconcile/types",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// The interfaces a policy with an outbound grant may import besides.
pub const OUTBOUND_INTERFACES: &[&str] = &["wasi:http/types", "wasi:http/outgoing-handler"];

/// Whether an import name (`ns:pkg/iface@version`) is provided by the
/// sandbox (the outbound interfaces included: whether the policy may have
/// them is its grant's question).
pub(crate) fn is_allowed_import(name: &str) -> bool {
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    if !ALLOWED_INTERFACES.contains(&path) && !OUTBOUND_INTERFACES.contains(&path) {
        return false;
    }
    let wanted = if path.starts_with("wasi:") {
        "0.2."
    } else {
        "0.1."
    };
    version.starts_with(wanted)
}

/// Whether an import is one of the [`OUTBOUND_INTERFACES`].
pub(crate) fn is_outbound_import(name: &str) -> bool {
    let path = name.split_once('@').map_or(name, |(path, _)| path);
    OUTBOUND_INTERFACES.contains(&path)
}

/// Most handles a call's resource table holds at once.
pub(crate) const TABLE_ENTRIES: usize = 1 << 16;

/// Links the deny-all WASI interfaces of wasmtime-wasi's context (random,
/// cli, file system and sockets) into `linker`; the clocks, the streams,
/// the log and outbound HTTP are linked by their own modules.
pub(crate) fn add_to_linker<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView as _};
    use wasmtime_wasi::p2::bindings::sync::{filesystem as sync_fs, sockets as sync_sockets};
    use wasmtime_wasi::p2::bindings::{cli, filesystem, random, sockets};
    use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView as _};
    let l = linker;
    random::random::add_to_linker::<T, WasiRandom>(l, |t| t.ctx().ctx.random())?;
    random::insecure::add_to_linker::<T, WasiRandom>(l, |t| t.ctx().ctx.random())?;
    random::insecure_seed::add_to_linker::<T, WasiRandom>(l, |t| t.ctx().ctx.random())?;
    cli::exit::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::environment::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::stdin::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::stdout::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::stderr::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_input::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_output::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_stdin::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_stdout::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_stderr::add_to_linker::<T, WasiCli>(l, T::cli)?;
    sync_fs::types::add_to_linker::<T, WasiFilesystem>(l, T::filesystem)?;
    filesystem::preopens::add_to_linker::<T, WasiFilesystem>(l, T::filesystem)?;
    sockets::network::add_to_linker::<T, WasiSockets>(l, &Default::default(), T::sockets)?;
    sockets::instance_network::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync_sockets::tcp::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sockets::tcp_create_socket::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync_sockets::udp::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync_sockets::udp_create_socket::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sockets::ip_name_lookup::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    Ok(())
}

/// How much of stdout and of stderr one call may write; the rest is dropped.
pub(crate) const CAPTURE_BYTES: usize = 16 << 10;

/// Builds the WASI context of one call.
pub(crate) fn context(ctx: &Context, job_uid: &str, stdout: &Capture, stderr: &Capture) -> WasiCtx {
    let seed = seed(job_uid, ctx);
    let mut builder = WasiCtxBuilder::new();
    let mut insecure_seed = [0u8; 16];
    insecure_seed.copy_from_slice(&seed[..16]);
    builder
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .secure_random(rand::rngs::StdRng::from_seed(seed))
        .insecure_random(rand::rngs::StdRng::from_seed(seed))
        .insecure_random_seed(u128::from_le_bytes(insecure_seed))
        .max_random_size(64 << 10)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    builder.build()
}

/// The random seed of a call: SHA-256 of the DataJob uid, the attempt and
/// the policy digest, so that replays with the same inputs see the same bytes.
fn seed(job_uid: &str, ctx: &Context) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(job_uid.as_bytes());
    hasher.update(ctx.attempt.to_le_bytes());
    hasher.update(ctx.policy_digest.as_bytes());
    hasher.finalize().into()
}

/// A bounded in-memory stdout or stderr keeping the most recent output:
/// older bytes beyond the bound are dropped and counted, and writes always
/// succeed (a guest must not fail, or panic, because its output was cut).
#[derive(Debug, Clone, Default)]
pub(crate) struct Capture {
    inner: Arc<Mutex<CaptureBuf>>,
}

#[derive(Debug, Default)]
struct CaptureBuf {
    bytes: Vec<u8>,
    dropped: u64,
}

impl Capture {
    fn with<R>(&self, f: impl FnOnce(&mut CaptureBuf) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The captured text (lossy UTF-8) and how many bytes were dropped.
    pub(crate) fn take(&self) -> (String, u64) {
        self.with(|buf| {
            let text = String::from_utf8_lossy(&buf.bytes).into_owned();
            let dropped = buf.dropped;
            buf.bytes.clear();
            buf.dropped = 0;
            (text, dropped)
        })
    }

    /// Keeps the last [`CAPTURE_BYTES`]: a panic message comes last.
    fn push(&self, data: &[u8]) {
        self.with(|buf| {
            let cut = data.len().saturating_sub(CAPTURE_BYTES);
            let data = &data[cut..];
            let excess = (buf.bytes.len() + data.len()).saturating_sub(CAPTURE_BYTES);
            buf.bytes.drain(..excess);
            buf.bytes.extend_from_slice(data);
            buf.dropped += (cut + excess) as u64;
        });
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 << 10)
    }
}

impl Pollable for Capture {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
    {
        Box::pin(std::future::ready(()))
    }
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(attempt: u32) -> Context {
        Context {
            now_unix_ms: 1_700_000_000_000,
            attempt,
            policy_digest: "abc".into(),
        }
    }

    #[test]
    fn imports_outside_the_allow_list_or_version_are_refused() {
        assert!(is_allowed_import("wasi:cli/environment@0.2.3"));
        assert!(is_allowed_import("policyhost:reconcile/host@0.1.0"));
        assert!(is_allowed_import("wasi:sockets/tcp@0.2.9"));
        assert!(is_allowed_import("wasi:filesystem/preopens@0.2.3"));
        assert!(!is_allowed_import("wasi:keyvalue/store@0.2.0-draft"));
        assert!(!is_allowed_import("wasi:sockets/tcp@0.3.0"));
        assert!(!is_allowed_import("wasi:cli/environment@0.3.0"));
        assert!(!is_allowed_import("wasi:cli/environment"));
        assert!(is_allowed_import("wasi:http/outgoing-handler@0.2.3"));
        assert!(is_outbound_import("wasi:http/types@0.2.0"));
        assert!(!is_outbound_import("wasi:io/streams@0.2.0"));
        assert!(!is_allowed_import("wasi:http/incoming-handler@0.2.3"));
    }

    #[test]
    fn the_random_seed_depends_on_uid_and_attempt_only_through_the_inputs() {
        assert_eq!(seed("uid", &ctx(1)), seed("uid", &ctx(1)));
        assert_ne!(seed("uid", &ctx(1)), seed("uid", &ctx(2)));
        assert_ne!(seed("uid", &ctx(1)), seed("other", &ctx(1)));
    }

    #[test]
    fn capture_keeps_the_latest_bytes_within_the_bound_and_counts_the_rest() {
        let capture = Capture::default();
        capture.push(&vec![b'x'; CAPTURE_BYTES + 10]);
        capture.push(b"panicked at the end");
        let (text, dropped) = capture.take();
        assert_eq!(text.len(), CAPTURE_BYTES);
        assert!(text.ends_with("xpanicked at the end"));
        assert_eq!(dropped, 10 + "panicked at the end".len() as u64);
        assert_eq!(capture.take(), (String::new(), 0));
    }
}
