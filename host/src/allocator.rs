//! The operator process's allocator, which every binary that runs the
//! operator declares: mimalloc, purging freed pages at once.
//!
//! Guest calls allocate many small, short-lived buffers (marshalled
//! strings, per-call store state); mimalloc serves them faster than glibc
//! (docs/BENCHMARKS.md, "runtime"). A binary declares it with
//! `#[global_allocator] static ALLOCATOR: MiMalloc = MiMalloc;` and calls
//! [`purge_freed_memory_at_once`] first thing in `main`.

pub use mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`include/mimalloc.h`; the Rust
/// bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc hands freed pages back to the OS only when a thread allocates
/// again after the purge delay; an operator's threads sit idle between
/// bursts (after compiling a policy, after a relist), so the pages would
/// stay resident. Purging at once costs no measurable time per guest call
/// and takes about 11 MiB off the operator's RSS at rest
/// (docs/BENCHMARKS.md, "operator at scale"). Call it before any other
/// thread exists.
#[allow(unsafe_code)]
pub fn purge_freed_memory_at_once() {
    // SAFETY: sets one process-wide integer option; called before any
    // other thread exists, so nothing reads it concurrently.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}
