//! The `policyhost` command: the operator and its tools.

mod cli;

/// The operator's allocator ([`policyhost::allocator`]).
#[global_allocator]
static ALLOCATOR: policyhost::allocator::MiMalloc = policyhost::allocator::MiMalloc;

fn main() -> std::process::ExitCode {
    policyhost::allocator::purge_freed_memory_at_once();
    cli::main()
}
