//! End-to-end tests of policyhost, one module per area, in one binary.
//!
//! Guest policies are built by `cargo xtask guests` (which `cargo xtask test`
//! runs first); `common::guest` finds them and says so when one is missing.

#[path = "../common/mod.rs"]
mod common;

mod asks;
mod binary;
mod cli;
mod compilation;
mod delivery;
mod deploy;
mod explain;
mod fairness;
mod finalizer;
mod fuzz_corpus;
mod golden;
mod guests;
mod guide;
mod image;
mod leader;
mod loading;
mod monitoring;
mod oci;
mod operator;
mod outbound;
mod ownership;
mod peers;
mod policy_guide;
mod polyglot;
mod rbac;
mod rollback;
mod rollout;
mod runtime;
mod scaffold;
mod shadow;
mod shards;
mod standard_metrics;
mod traces;
mod update_strategy;
