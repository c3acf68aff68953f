//! Golden files: one call's inputs and its expected result JSON.
//!
//! A golden file is a JSON object:
//!
//! ```json
//! {
//!   "description": "all workers running",
//!   "call": "reconcile",
//!   "job": { "name": "demo", "namespace": "default", "params": { "replicas": 2 } },
//!   "children": [ { "name": "demo-worker-0", "phase": "running", "ready": true } ],
//!   "context": { "nowUnixMs": 1700000000000, "attempt": 1, "policyDigest": "native" },
//!   "expected": { "children": [], "status": {}, "events": [] }
//! }
//! ```
//!
//! `job` and `children` use the fixture JSON of [`JobFixture`] and
//! [`ChildFixture`]; `children` and `context` are optional. `call` is
//! `reconcile` or `cleanup`. `http` (optional) lists the HTTP exchanges the
//! call makes, with their canned answers ([`crate::http::Exchange`]); the
//! call fails on any other request. `expected` is the result JSON (the same
//! shape the host's `policy run` prints). Set `POLICYHOST_BLESS=1` to rewrite `expected`
//! from the current result instead of comparing.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Call, ChildFixture, Error, JobFixture, Result};
use crate::http::Exchange;
use crate::{Context, Policy};

/// Which export a golden case calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    /// `reconcile`.
    Reconcile,
    /// `cleanup`.
    Cleanup,
}

/// The context of a golden case, with the defaults of [`Call::new`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ContextFixture {
    #[serde(default = "default_now")]
    now_unix_ms: u64,
    #[serde(default = "default_attempt")]
    attempt: u32,
    #[serde(default = "default_digest")]
    policy_digest: String,
}

impl Default for ContextFixture {
    fn default() -> Self {
        Self {
            now_unix_ms: default_now(),
            attempt: default_attempt(),
            policy_digest: default_digest(),
        }
    }
}

fn default_now() -> u64 {
    super::DEFAULT_NOW_UNIX_MS
}

fn default_attempt() -> u32 {
    1
}

fn default_digest() -> String {
    "native".to_owned()
}

/// One golden case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Golden {
    /// What the case shows.
    #[serde(default)]
    pub description: String,
    /// Which export it calls.
    pub call: Kind,
    /// The DataJob.
    pub job: JobFixture,
    /// Its children.
    #[serde(default)]
    pub children: Vec<ChildFixture>,
    #[serde(default)]
    context: ContextFixture,
    /// The HTTP exchanges the call makes, in order (see [`crate::http`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<Exchange>,
    /// The expected result JSON.
    pub expected: Value,
}

impl Golden {
    /// Reads a golden file.
    ///
    /// # Errors
    ///
    /// [`Error::Read`] or [`Error::Parse`], naming the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.into(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| Error::Parse {
            path: path.into(),
            source,
        })
    }

    /// Reads every `*.json` file of a directory, sorted by name.
    ///
    /// # Errors
    ///
    /// The first file (or the directory) that cannot be read or parsed.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<(PathBuf, Self)>> {
        let dir = dir.as_ref();
        let read_error = |source| Error::Read {
            path: dir.into(),
            source,
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_error)? {
            let path = entry.map_err(read_error)?.path();
            if path.extension().is_some_and(|ext| ext == "json") {
                paths.push(path);
            }
        }
        paths.sort();
        paths
            .into_iter()
            .map(|path| Self::load(&path).map(|case| (path, case)))
            .collect()
    }

    /// The context of the call (defaults filled in).
    #[must_use]
    pub fn context(&self) -> Context {
        let ctx = &self.context;
        Context::new(ctx.now_unix_ms, ctx.attempt, ctx.policy_digest.clone())
    }

    /// The inputs exactly as a policy receives them (the host maps these
    /// records onto its WIT bindings to replay the case in a component).
    #[must_use]
    pub fn inputs(&self) -> (crate::Job, Vec<crate::Child>, Context) {
        let children = self.children.iter().map(ChildFixture::to_child).collect();
        (self.job.to_job(), children, self.context())
    }

    /// The case's inputs as a [`Call`].
    pub fn to_call(&self) -> Call {
        Call::new(self.job.clone())
            .children(self.children.iter().cloned())
            .context(self.context())
            .http(self.http.iter().cloned())
    }

    /// Runs the case against `P` and returns the result JSON.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOutput`] if the result is not valid output,
    /// [`Error::Http`] if the call's requests were not the case's.
    pub fn run<P: Policy>(&self) -> Result<Value> {
        let call = self.to_call();
        let (json, http) = match self.call {
            Kind::Reconcile => {
                let outcome = call.reconcile::<P>();
                (outcome.to_json(), outcome.http)
            }
            Kind::Cleanup => {
                let outcome = call.cleanup::<P>();
                (outcome.to_json(), outcome.http)
            }
        };
        http.map_err(Error::Http)?;
        json
    }
}

/// Runs every golden case in `dir` against `P` and panics, naming each
/// mismatching file, if a result differs from its `expected`. With
/// `POLICYHOST_BLESS=1` in the environment it rewrites `expected` instead.
///
/// # Panics
///
/// On a mismatch, an unreadable case, or an empty directory: it is a test
/// assertion.
pub fn assert_golden_dir<P: Policy>(dir: impl AsRef<Path>) {
    let dir = dir.as_ref();
    let bless = std::env::var_os("POLICYHOST_BLESS").is_some_and(|v| v == "1");
    let cases = Golden::load_dir(dir).unwrap_or_else(|e| panic!("{}", crate::error::chain(&e)));
    assert!(!cases.is_empty(), "no golden files in {}", dir.display());
    let mut mismatches = Vec::new();
    for (path, mut case) in cases {
        let actual = case
            .run::<P>()
            .unwrap_or_else(|e| panic!("{}: {}", path.display(), crate::error::chain(&e)));
        if actual == case.expected {
            continue;
        }
        if bless {
            case.expected = actual;
            let text = serde_json::to_string_pretty(&case).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(&path, text + "\n")
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        } else {
            mismatches.push(format!(
                "{}:\n  expected: {}\n  actual:   {}",
                path.display(),
                case.expected,
                actual
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "golden mismatches (POLICYHOST_BLESS=1 rewrites them):\n{}",
        mismatches.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ChildPhase;

    #[test]
    fn a_minimal_case_gets_the_documented_defaults() {
        let case: Golden = serde_json::from_value(json!({
            "call": "cleanup",
            "job": { "name": "demo", "labels": { "b": "2", "a": "1" }, "status": { "phase": "Running" } },
            "children": [{ "name": "demo-0", "phase": "failed" }],
            "expected": { "result": "done" },
        }))
        .unwrap();
        let (job, children, ctx) = case.inputs();
        assert_eq!(
            (job.namespace.as_str(), job.uid.as_str(), job.generation),
            ("default", "uid-demo", 1)
        );
        assert_eq!(job.params_json, "{}");
        assert_eq!(job.status_json.as_deref(), Some(r#"{"phase":"Running"}"#));
        let keys: Vec<_> = job.labels.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"], "labels are sorted by key");
        assert_eq!(children[0].kind, "Pod");
        assert_eq!(children[0].phase, ChildPhase::Failed);
        assert!(!children[0].ready);
        assert_eq!(
            ctx,
            Context::new(super::super::DEFAULT_NOW_UNIX_MS, 1, "native")
        );
        assert_eq!(case.call, Kind::Cleanup);
    }

    #[test]
    fn an_unknown_field_in_a_case_is_refused() {
        let error = serde_json::from_value::<Golden>(json!({
            "call": "reconcile", "job": { "name": "x", "nmespace": "y" }, "expected": {}
        }))
        .unwrap_err();
        assert!(
            error.to_string().contains("unknown field `nmespace`"),
            "{error}"
        );
    }
}
