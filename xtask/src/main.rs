//! Build orchestration for policyhost.

fn main() {}
