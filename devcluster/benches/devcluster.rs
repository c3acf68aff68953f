//! devcluster benchmarks (see docs/BENCHMARKS.md).

fn main() {}
