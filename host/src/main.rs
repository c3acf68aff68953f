//! The `policyhost` command: the operator and its tools.

mod cli;

/// Guest calls allocate many small, short-lived buffers (marshalled
/// strings, per-call store state); mimalloc serves them faster than glibc
/// (docs/BENCHMARKS.md, "runtime").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`include/mimalloc.h`; the Rust
/// bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> std::process::ExitCode {
    purge_freed_memory_at_once();
    cli::main()
}

/// mimalloc hands freed pages back to the OS only when a thread allocates
/// again after the purge delay; an operator's threads sit idle between
/// bursts (after compiling a policy, after a relist), so the pages would
/// stay resident. Purging at once costs no measurable time per guest call
/// and takes about 11 MiB off the operator's RSS at rest
/// (docs/BENCHMARKS.md, "operator at scale").
#[allow(unsafe_code)]
fn purge_freed_memory_at_once() {
    // SAFETY: sets one process-wide integer option before any other thread
    // exists, so nothing reads it concurrently.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}
