//! Entry points of the fuzz targets in `fuzz/`, replayed from their corpus by the test
//! suite.

/// Runs the allocation script `data` on the policy allocator and on the system allocator
/// side by side: four bytes a step (allocate, free or reallocate); every block is
/// aligned, disjoint from the live ones and reads back what the system allocator's copy
/// holds.
pub fn allocator(data: &[u8]) {
    crate::alloc::script::run(data);
}
