//! The `policyhost` command: the operator and its tools.

mod cli;

/// Guest calls allocate many small, short-lived buffers (marshalled
/// strings, per-call store state); mimalloc serves them faster than glibc
/// (docs/BENCHMARKS.md, "runtime").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
