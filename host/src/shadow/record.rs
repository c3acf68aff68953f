//! Opt-in recording of a policy's recent calls, for `policy test --replay`:
//! the inputs of each serving call and its answer, written as golden cases
//! (the SDK's format, `policies/fanout/tests/golden/README.md`) in a ring
//! of a bounded number of files per policy.
//!
//! # Who may read them
//!
//! A recorded case holds a DataJob's spec and its children's names, labels
//! and phases: the data of the team that owns the DataJob, which may not be
//! the policy's. The files live only where the operator writes them
//! (`--record-calls DIR`, a volume of the operator's Pod), directory mode
//! 0700 and file mode 0600 for the operator's user: whoever can read the
//! operator's Pod volumes (the platform team) reads them, and no team
//! through the API. Copy a policy's directory out for its team only when
//! every DataJob in it is that team's.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};
use tracing::warn;

use crate::runtime::{ChildPhase, Input, KeyValue};

/// Where and how much to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The directory: one subdirectory per policy.
    pub dir: PathBuf,
    /// Cases kept per policy: the oldest is overwritten.
    pub per_policy: u32,
}

/// Writes recorded calls.
#[derive(Debug)]
pub struct Recorder {
    config: Config,
    /// Calls recorded so far, per policy.
    counts: Mutex<HashMap<String, u64>>,
}

impl Recorder {
    /// A recorder writing under `config.dir`.
    #[must_use]
    pub fn new(config: Config) -> Self {
        Self {
            config,
            counts: Mutex::default(),
        }
    }

    /// Records one answered call of `policy` (`entry`: `reconcile` or
    /// `cleanup`), off the async runtime. A write that fails is logged and
    /// lost: recording never fails a call.
    pub fn record(&self, policy: &str, entry: &'static str, input: &Input, expected: Value) {
        let slot = {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            let count = counts.entry(policy.to_owned()).or_default();
            let slot = *count % u64::from(self.config.per_policy.max(1));
            *count += 1;
            slot
        };
        let dir = self.config.dir.join(policy);
        let file = dir.join(format!("{slot:05}.json"));
        let case = case(entry, input, expected);
        tokio::task::spawn_blocking(move || {
            if let Err(error) = write(&dir, &file, &case) {
                warn!(file = %file.display(), %error, "cannot record the call");
            }
        });
    }
}

fn write(dir: &Path, file: &Path, case: &Value) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?;
    let text = serde_json::to_string_pretty(case).map_err(std::io::Error::other)?;
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")
}

/// One call as a golden case: its inputs, and `expected`, the answer.
#[must_use]
pub fn case(entry: &str, input: &Input, expected: Value) -> Value {
    let job = &input.job;
    json!({
        "description": format!("recorded {} of {}/{}", entry, job.namespace, job.name),
        "call": entry,
        "job": job_of(input),
        "children": children_of(input),
        "context": {
            "nowUnixMs": input.ctx.now_unix_ms,
            "attempt": input.ctx.attempt,
            "policyDigest": input.ctx.policy_digest,
        },
        "expected": expected,
    })
}

/// The digest (`sha256:…`) of what a call was given about the cluster: the
/// DataJob and its children as a golden case holds them, not the context
/// (clock, attempt, version). Two calls on the same state have one digest,
/// which `policy test --replay --input` finds among recorded cases.
#[must_use]
pub fn input_digest(input: &Input) -> String {
    let state = json!({ "job": job_of(input), "children": children_of(input) });
    super::diff::json_digest(&state).unwrap_or_default()
}

fn job_of(input: &Input) -> Value {
    let job = &input.job;
    let parsed = |text: &str| serde_json::from_str(text).unwrap_or(Value::Null);
    json!({
        "name": job.name,
        "namespace": job.namespace,
        "uid": job.uid,
        "generation": job.generation,
        "labels": map(&job.labels),
        "annotations": map(&job.annotations),
        "params": parsed(&job.params),
        "status": job.status.as_deref().map_or(Value::Null, parsed),
        "deletionUnixMs": job.deletion_unix_ms,
    })
}

fn children_of(input: &Input) -> Value {
    input
        .children
        .iter()
        .map(|child| {
            json!({
                "apiVersion": child.api_version,
                "kind": child.kind,
                "name": child.name,
                "phase": phase(child.phase),
                "ready": child.ready,
                "deleting": child.deleting,
                "labels": map(&child.labels),
            })
        })
        .collect()
}

fn map(pairs: &[KeyValue]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|pair| (pair.key.clone(), Value::String(pair.value.clone())))
        .collect()
}

fn phase(phase: ChildPhase) -> &'static str {
    match phase {
        ChildPhase::Pending => "pending",
        ChildPhase::Running => "running",
        ChildPhase::Succeeded => "succeeded",
        ChildPhase::Failed => "failed",
        ChildPhase::Unknown => "unknown",
    }
}
