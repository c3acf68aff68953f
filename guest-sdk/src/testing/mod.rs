//! Runs a policy natively under `cargo test`: fixture DataJob and children
//! in, result (and log lines) out. Native builds only.
//!
//! The harness calls the policy exactly as the component glue does (params
//! parsed first, invalid params reported as `invalid-params`), and
//! [`Outcome::to_json`] gives the result JSON the host's `policy run` prints,
//! so a golden file checked here also checks the compiled component.
//!
//! ```
//! use policyhost_sdk::testing::{Call, ChildFixture, JobFixture};
//! use policyhost_sdk::{Child, ChildPhase, Context, Job, Phase, Policy, PolicyError, Reconcile, Status, Result};
//!
//! struct Count;
//!
//! impl Policy for Count {
//!     type Params = policyhost_sdk::NoParams;
//!
//!     fn reconcile(_: &Job, _: Self::Params, children: &[Child], _: &Context)
//!         -> Result<Reconcile>
//!     {
//!         policyhost_sdk::info!("{} children", children.len());
//!         Ok(Reconcile::new(Status::new(Phase::Running).message(children.len().to_string())))
//!     }
//! }
//!
//! let outcome = Call::new(JobFixture::new("demo"))
//!     .child(ChildFixture::pod("demo-0").phase(ChildPhase::Running).ready(true))
//!     .reconcile::<Count>();
//! assert_eq!(outcome.result.as_ref().unwrap().status.message, "1");
//! assert_eq!(outcome.logs[0].1, "1 children");
//! let json = outcome.to_json()?;
//! assert_eq!(json["status"]["phase"], "Running");
//! # Ok::<(), policyhost_sdk::testing::Error>(())
//! ```

mod fixture;
mod golden;

use serde::Serialize;
use serde_json::Value;

pub use fixture::{ChildFixture, JobFixture};
pub use golden::{Golden, Kind, assert_golden_dir};

use crate::http::Exchange;
use crate::log::Level;
use crate::{Cleanup, Context, Policy, PolicyError, Reconcile};

/// Why the harness could not produce or load something.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The policy's result cannot be turned into result JSON, e.g. a manifest
    /// that is not JSON (the host rejects it as invalid output too).
    #[error("the policy returned invalid output")]
    InvalidOutput(#[source] serde_json::Error),
    /// A golden file could not be read.
    #[error("cannot read golden file {path}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The call's HTTP requests were not the case's exchanges.
    #[error("the call's HTTP requests differ from the listed exchanges: {0}")]
    Http(String),
    /// A golden file is not a valid case.
    #[error("golden file {path} is not a valid case")]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        #[source]
        source: serde_json::Error,
    },
}

/// Harness results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One call's inputs: a DataJob, its children and the context.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Call {
    job: JobFixture,
    children: Vec<ChildFixture>,
    context: Context,
    http: Vec<Exchange>,
}

/// The time [`Call::new`] puts in the context: 2023-11-14T22:13:20Z.
pub const DEFAULT_NOW_UNIX_MS: u64 = 1_700_000_000_000;

impl Call {
    /// A call about `job`, with no children, at [`DEFAULT_NOW_UNIX_MS`],
    /// attempt 1, policy digest `native`.
    pub fn new(job: JobFixture) -> Self {
        Self {
            job,
            children: Vec::new(),
            context: Context::new(DEFAULT_NOW_UNIX_MS, 1, "native"),
            http: Vec::new(),
        }
    }

    /// The HTTP exchanges the call is expected to make, in order, with
    /// their canned answers (see [`crate::http`]); without them, any
    /// request fails the call.
    pub fn http(mut self, exchanges: impl IntoIterator<Item = Exchange>) -> Self {
        self.http.extend(exchanges);
        self
    }

    /// Adds a child.
    pub fn child(mut self, child: ChildFixture) -> Self {
        self.children.push(child);
        self
    }

    /// Adds children.
    pub fn children(mut self, children: impl IntoIterator<Item = ChildFixture>) -> Self {
        self.children.extend(children);
        self
    }

    /// Sets the context's time.
    pub fn now_unix_ms(mut self, now: u64) -> Self {
        self.context.now_unix_ms = now;
        self
    }

    /// Sets the context's attempt number.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.context.attempt = attempt;
        self
    }

    /// Sets the whole context.
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Runs `P::reconcile` as the host would.
    pub fn reconcile<P: Policy>(&self) -> Outcome<Reconcile> {
        self.run("reconcile", |job, children, ctx| {
            crate::policy::run_reconcile::<P>(job, children, ctx)
        })
    }

    /// Runs `P::cleanup` as the host would.
    pub fn cleanup<P: Policy>(&self) -> Outcome<Cleanup> {
        self.run("cleanup", |job, children, ctx| {
            crate::policy::run_cleanup::<P>(job, children, ctx)
        })
    }

    fn run<T>(
        &self,
        operation: &str,
        call: impl FnOnce(&crate::Job, &[crate::Child], &Context) -> Result<T, PolicyError>,
    ) -> Outcome<T> {
        let job = self.job.to_job();
        let children: Vec<_> = self.children.iter().map(ChildFixture::to_child).collect();
        let ctx = self.context.clone().for_operation(&job.uid, operation);
        drop(crate::log::capture::take());
        crate::http::install(self.http.clone());
        let result = call(&job, &children, &ctx);
        Outcome {
            result,
            logs: crate::log::capture::take(),
            http: crate::http::finish(),
        }
    }
}

/// What a call returned, and the log lines it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Outcome<T> {
    /// The policy's answer.
    pub result: Result<T, PolicyError>,
    /// Log lines in order.
    pub logs: Vec<(Level, String)>,
    /// Whether the call made exactly the expected HTTP exchanges, and if
    /// not, how it differed.
    pub http: std::result::Result<(), String>,
}

impl<T: Serialize> Outcome<T> {
    /// The result JSON the host's `policy run` prints for the same answer:
    /// the result itself, or `{"invalidParams": ..}` / `{"failed": ..}`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOutput`] if a manifest or the outputs are not JSON.
    pub fn to_json(&self) -> Result<Value> {
        match &self.result {
            Ok(value) => serde_json::to_value(value),
            Err(error) => serde_json::to_value(error),
        }
        .map_err(Error::InvalidOutput)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Child, ChildPhase, DesiredChild, Job, Phase, Status};

    struct Echo;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct EchoParams {
        #[serde(default)]
        broken: bool,
    }

    impl Policy for Echo {
        type Params = EchoParams;

        fn reconcile(
            job: &Job,
            params: EchoParams,
            children: &[Child],
            ctx: &Context,
        ) -> crate::Result<Reconcile> {
            crate::info!("attempt {}", ctx.attempt);
            let manifest = if params.broken {
                "{".to_owned()
            } else {
                json!({ "kind": "ConfigMap" }).to_string()
            };
            let status = Status::new(Phase::Running)
                .message(format!("{}/{} {} {}", job.namespace, job.name, job.uid, ctx.now_unix_ms))
                .outputs(&json!({
                    "children": children.iter().map(|c| format!("{} {:?} {}", c.name, c.phase, c.ready)).collect::<Vec<_>>(),
                    "previous": job.status_json,
                    "label": job.label("team"),
                }))?;
            Ok(Reconcile::new(status).child(DesiredChild::from_json(
                "v1",
                "ConfigMap",
                "c",
                manifest,
            )))
        }
    }

    #[test]
    fn fixtures_reach_the_policy_as_the_host_would_send_them() {
        let outcome = Call::new(
            JobFixture::new("demo")
                .namespace("team-a")
                .uid("u-1")
                .label("team", "a")
                .status(json!({ "x": 1 })),
        )
        .child(
            ChildFixture::pod("p")
                .phase(ChildPhase::Running)
                .ready(true),
        )
        .now_unix_ms(42)
        .attempt(3)
        .reconcile::<Echo>();
        let json = outcome.to_json().unwrap();
        assert_eq!(json["status"]["message"], "team-a/demo u-1 42");
        assert_eq!(
            json["status"]["outputs"],
            json!({ "children": ["p Running true"], "previous": "{\"x\":1}", "label": "a" })
        );
        assert_eq!(outcome.logs, vec![(Level::Info, "attempt 3".to_owned())]);
    }

    #[test]
    fn invalid_params_become_the_invalid_params_json() {
        let outcome = Call::new(JobFixture::new("demo").params(json!({ "broken": "yes" })))
            .reconcile::<Echo>();
        let json = outcome.to_json().unwrap();
        assert_eq!(
            json,
            json!({ "invalidParams": "params.broken: invalid type: string \"yes\", expected a boolean" })
        );
    }

    #[test]
    fn a_manifest_that_is_not_json_is_an_invalid_output_error() {
        let outcome = Call::new(JobFixture::new("demo").params(json!({ "broken": true })))
            .reconcile::<Echo>();
        assert!(outcome.result.is_ok());
        let error = outcome.to_json().unwrap_err();
        assert!(matches!(error, Error::InvalidOutput(_)));
        assert_eq!(error.to_string(), "the policy returned invalid output");
    }

    #[test]
    fn the_default_cleanup_waits_for_running_children() {
        let running = Call::new(JobFixture::new("demo").deleting_since(1))
            .child(ChildFixture::pod("p").phase(ChildPhase::Running))
            .cleanup::<Echo>();
        assert_eq!(running.result, Ok(Cleanup::RetryAfter { ms: 2000 }));
        let finished = Call::new(JobFixture::new("demo").deleting_since(1))
            .child(ChildFixture::pod("p").phase(ChildPhase::Failed))
            .child(ChildFixture::config_map("c"))
            .cleanup::<Echo>();
        assert_eq!(finished.to_json().unwrap(), json!({ "result": "done" }));
    }

    #[test]
    fn harness_error_messages_name_the_file() {
        let error = Error::Read {
            path: "a.json".into(),
            source: std::io::Error::other("gone"),
        };
        assert_eq!(error.to_string(), "cannot read golden file a.json");
        let source = serde_json::from_str::<u8>("x").unwrap_err();
        let error = Error::Parse {
            path: "b.json".into(),
            source,
        };
        assert_eq!(error.to_string(), "golden file b.json is not a valid case");
    }
}
