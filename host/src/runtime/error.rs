//! Errors of the policy runtime: load-time rejections and per-call guest faults.

use std::time::Duration;

use super::bindings::PolicyError as WitPolicyError;
use super::compile::{CompileBudget, Refusal};
use crate::outbound::Redactor;

/// The result type of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a policy could not be loaded, or why one call to it failed.
///
/// Load-time variants ([`Error::Corrupt`], [`Error::CoreModule`],
/// [`Error::CompileLimitExceeded`], [`Error::IncompatibleWorld`],
/// [`Error::UnservedWorld`], [`Error::UnsupportedImport`]) mean the
/// component is rejected and the previous version (if any) keeps serving.
/// Call-time variants are guest faults: the host stays up, the DataJob gets a
/// condition and an Event, and its key is retried with backoff.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a WebAssembly binary that wasmtime can compile
    /// (bad magic, truncated or malformed sections, failed validation).
    #[error("policy is not a valid WebAssembly component")]
    Corrupt(#[source] wasmtime::Error),

    /// The bytes are a core WebAssembly module, not a component: it was built
    /// for `wasm32-unknown-unknown`/`wasm32-wasip1` instead of `wasm32-wasip2`.
    #[error(
        "policy is a core WebAssembly module, not a component (build it for the wasm32-wasip2 target)"
    )]
    CoreModule,

    /// Compiling the component would cost more than the host allows: it is
    /// over a static limit (functions, code size, locals, tables, ...,
    /// counted before compiling), or its compile reached the memory or time
    /// cap of the compile process and was stopped. The refusal names the
    /// digest and the limits, so that it is not compiled again.
    #[error("policy is too expensive to compile: {0}")]
    CompileLimitExceeded(Refusal),

    /// The policy's team used the compile time the host gives each team
    /// ([`CompileBudget`]): this version was not compiled, and may be
    /// loaded again once the budget has regained what was overrun. The
    /// bytes were not judged: nothing is remembered against them.
    #[error(
        "{team} used its compile time ({} s per {} s); it may compile again in {} s",
        budget.seconds.as_secs(),
        budget.window.as_secs(),
        retry_after.as_millis().div_ceil(1000)
    )]
    CompileBudgetExhausted {
        /// The team, as text (`policy `p`` for a policy of its own).
        team: String,
        /// Its budget.
        budget: CompileBudget,
        /// How long until it may compile again.
        retry_after: Duration,
    },

    /// The component does not implement the `policyhost:reconcile/datajob-policy`
    /// world: an export is missing or has the wrong type, or an allowed import
    /// has the wrong type.
    #[error(
        "policy does not implement world `{}`: {problem}",
        super::made_with::SERVED_WORLD.replace('@', "/datajob-policy@")
    )]
    IncompatibleWorld {
        /// What is wrong, naming the export or import.
        problem: String,
        /// The type-checking error from wasmtime, when there is one.
        #[source]
        source: Option<wasmtime::Error>,
    },

    /// The component says (in its SDK's section) that it was built for a
    /// world this host does not serve, or says it unreadably: refused
    /// before it is compiled ([`super::made_with`]).
    #[error("policy is refused: {0}")]
    UnservedWorld(#[from] super::made_with::Refused),

    /// The component imports an interface the sandbox does not provide
    /// (sockets, filesystem, HTTP, ...): it is rejected at load time rather
    /// than failing in the middle of a call.
    #[error(
        "policy imports `{import}`{}, which the sandbox does not provide",
        others_suffix(others)
    )]
    UnsupportedImport {
        /// The first such import, e.g. `wasi:sockets/tcp@0.2.3`.
        import: String,
        /// The other unsupported imports, in import order.
        others: Vec<String>,
    },

    /// The component imports outbound HTTP, and its policy has no grant:
    /// network access is the platform team's to give, never the default.
    #[error(
        "policy imports `{import}`, and no outbound grant names it: the platform team grants origins in the ConfigMap `grant-<policy>` (key `origins`)"
    )]
    OutboundNotGranted {
        /// The first outbound import, e.g. `wasi:http/outgoing-handler@0.2.3`.
        import: String,
    },

    /// The guest used up its fuel budget (roughly, instructions) for one call.
    #[error("policy ran out of fuel after {fuel} units")]
    OutOfFuel {
        /// The fuel budget of the call.
        fuel: u64,
    },

    /// The call ran past its wall-clock deadline and was interrupted.
    #[error("policy exceeded its deadline of {} ms", timeout.as_millis())]
    DeadlineExceeded {
        /// The wall-clock budget of the call.
        timeout: Duration,
    },

    /// The guest tried to grow its linear memory (or a table) past the cap;
    /// the growth was denied and the guest then failed.
    #[error("policy exceeded its memory limit of {limit} bytes (it asked for {requested} bytes)")]
    MemoryLimitExceeded {
        /// The memory cap of the call, in bytes.
        limit: u64,
        /// The largest size the guest asked for, in bytes.
        requested: u64,
    },

    /// The guest trapped: a panic, an `unreachable`, an out-of-bounds access,
    /// a stack overflow. `message` holds the guest's own last words (its
    /// stderr, where a Rust panic message goes) or the trap description.
    #[error("policy trapped: {message}")]
    Trap {
        /// The guest's panic message, or the trap description.
        message: String,
        /// The wasm backtrace, one frame per line, when available.
        backtrace: Option<String>,
        /// The trap from wasmtime.
        #[source]
        source: wasmtime::Error,
    },

    /// The result breaks a sandbox rule: a child in another namespace, a kind
    /// not allowed, a manifest that is not a JSON object or disagrees with its
    /// record, a name that is not DNS-1123, metadata the host owns
    /// (finalizers, ownerReferences, `policyhost.dev/*` keys, ...), two
    /// children naming one object. Nothing of the result is applied.
    #[error("policy returned an invalid result: {location}: {rule}")]
    InvalidOutput {
        /// Which part of the result, e.g. `children[3] (Pod worker-3)`.
        location: String,
        /// The rule it breaks.
        rule: String,
    },

    /// The result is larger than the output cap (bytes or number of children).
    #[error("policy output too large: {what} is {actual}, the limit is {limit}")]
    OutputTooLarge {
        /// What was measured: `bytes` or `children`.
        what: &'static str,
        /// The measured size.
        actual: u64,
        /// The cap.
        limit: u64,
    },

    /// The guest itself returned a `policy-error`.
    #[error("policy reported an error: {0}")]
    PolicyError(PolicyError),

    /// The host could not run the call (instance pool exhausted, engine
    /// misconfiguration, worker pool shut down). Not the guest's fault.
    #[error("policy runtime failure: {context}")]
    Host {
        /// What the host was doing.
        context: &'static str,
        /// The underlying error.
        #[source]
        source: wasmtime::Error,
    },

    /// Reading or writing the on-disk compilation cache, or the component file.
    #[error("{context}")]
    Io {
        /// What was being read or written.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

fn others_suffix(others: &[String]) -> String {
    if others.is_empty() {
        String::new()
    } else {
        format!(
            " (and {}: {})",
            others.len(),
            others
                .iter()
                .map(|o| format!("`{o}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// A failure reported by the policy itself (WIT `policy-error`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicyError {
    /// `spec.params` do not fit the policy's schema; retrying does not help.
    InvalidParams(String),
    /// Any other failure; the host retries with backoff.
    Failed(String),
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidParams(message) => write!(f, "invalid params: {message}"),
            Self::Failed(message) => write!(f, "failed: {message}"),
        }
    }
}

impl From<WitPolicyError> for PolicyError {
    fn from(error: WitPolicyError) -> Self {
        match error {
            WitPolicyError::InvalidParams(message) => Self::InvalidParams(message),
            WitPolicyError::Failed(message) => Self::Failed(message),
        }
    }
}

impl Error {
    /// True for faults of one call (the policy stays loaded); false for
    /// load-time rejections and host failures.
    #[must_use]
    pub fn is_guest_fault(&self) -> bool {
        matches!(
            self,
            Self::OutOfFuel { .. }
                | Self::DeadlineExceeded { .. }
                | Self::MemoryLimitExceeded { .. }
                | Self::Trap { .. }
                | Self::InvalidOutput { .. }
                | Self::OutputTooLarge { .. }
                | Self::PolicyError(_)
        )
    }

    /// A short UpperCamelCase name for conditions, Events and metrics labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Corrupt(_) => "Corrupt",
            Self::CoreModule => "CoreModule",
            Self::CompileLimitExceeded(_) => "CompileLimitExceeded",
            Self::CompileBudgetExhausted { .. } => "CompileBudgetExhausted",
            Self::IncompatibleWorld { .. } => "IncompatibleWorld",
            Self::UnservedWorld(_) => "UnservedWorld",
            Self::UnsupportedImport { .. } => "UnsupportedImport",
            Self::OutboundNotGranted { .. } => "OutboundNotGranted",
            Self::OutOfFuel { .. } => "OutOfFuel",
            Self::DeadlineExceeded { .. } => "DeadlineExceeded",
            Self::MemoryLimitExceeded { .. } => "MemoryLimitExceeded",
            Self::Trap { .. } => "Trap",
            Self::InvalidOutput { .. } => "InvalidOutput",
            Self::OutputTooLarge { .. } => "OutputTooLarge",
            Self::PolicyError(PolicyError::InvalidParams(_)) => "InvalidParams",
            Self::PolicyError(PolicyError::Failed(_)) => "PolicyFailed",
            Self::Host { .. } => "HostFailure",
            Self::Io { .. } => "Io",
        }
    }

    /// The error with the values `redactor` finds replaced in every text
    /// that came from the policy: its own error, its last words, the part
    /// of its result a rule names. The rest is the host's own words.
    #[must_use]
    pub(crate) fn redacted(mut self, redactor: &Redactor) -> Self {
        if redactor.is_empty() {
            return self;
        }
        match &mut self {
            Self::PolicyError(
                PolicyError::InvalidParams(message) | PolicyError::Failed(message),
            ) => {
                redactor.redact_string(message);
            }
            Self::Trap {
                message, backtrace, ..
            } => {
                redactor.redact_string(message);
                if let Some(backtrace) = backtrace {
                    redactor.redact_string(backtrace);
                }
            }
            Self::InvalidOutput { location, rule } => {
                redactor.redact_string(location);
                redactor.redact_string(rule);
            }
            _ => {}
        }
        self
    }

    pub(crate) fn invalid_output(location: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::InvalidOutput {
            location: location.into(),
            rule: rule.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile::{CompileLimit, Measure, Over};
    use super::*;

    fn cause() -> wasmtime::Error {
        wasmtime::format_err!("cause")
    }

    fn refusal(limit: CompileLimit) -> Refusal {
        Refusal {
            digest: "ab".into(),
            limits: "cd".into(),
            limit,
            remembered: false,
        }
    }

    #[test]
    fn every_display_string_names_the_problem() {
        let cases: Vec<(Error, &str)> = vec![
            (
                Error::Corrupt(cause()),
                "policy is not a valid WebAssembly component",
            ),
            (
                Error::CoreModule,
                "policy is a core WebAssembly module, not a component (build it for the wasm32-wasip2 target)",
            ),
            (
                Error::CompileLimitExceeded(refusal(CompileLimit::Static(Over {
                    measure: Measure::FunctionBytes,
                    at: "function body 3 of core module 1".into(),
                    actual: 4_194_304,
                    limit: 1_048_576,
                }))),
                "policy is too expensive to compile: function body 3 of core module 1 has 4194304 bytes of code in one function, the limit is 1048576",
            ),
            (
                Error::CompileLimitExceeded(refusal(CompileLimit::Static(Over {
                    measure: Measure::Functions,
                    at: "the component".into(),
                    actual: 50_001,
                    limit: 50_000,
                }))),
                "policy is too expensive to compile: the component has 50001 defined functions, the limit is 50000",
            ),
            (
                Error::CompileLimitExceeded(refusal(CompileLimit::Memory { limit: 268_435_456 })),
                "policy is too expensive to compile: compiling it needs more than 268435456 bytes of memory",
            ),
            (
                Error::CompileLimitExceeded(refusal(CompileLimit::Time { limit_ms: 10_000 })),
                "policy is too expensive to compile: compiling it takes longer than 10000 ms",
            ),
            (
                Error::CompileLimitExceeded(refusal(CompileLimit::Artifact { limit: 1024 })),
                "policy is too expensive to compile: its compiled code is larger than 1024 bytes",
            ),
            (
                Error::CompileLimitExceeded(Refusal {
                    remembered: true,
                    ..refusal(CompileLimit::Time { limit_ms: 5 })
                }),
                "policy is too expensive to compile: compiling it takes longer than 5 ms (refused before under the same limits; not compiled again)",
            ),
            (
                Error::CompileBudgetExhausted {
                    team: "policy `noisy`".into(),
                    budget: CompileBudget {
                        seconds: Duration::from_secs(60),
                        window: Duration::from_secs(600),
                    },
                    retry_after: Duration::from_millis(99_001),
                },
                "policy `noisy` used its compile time (60 s per 600 s); it may compile again in 100 s",
            ),
            (
                Error::IncompatibleWorld {
                    problem: "missing export `cleanup`".into(),
                    source: None,
                },
                "policy does not implement world `policyhost:reconcile/datajob-policy@0.1.0`: missing export `cleanup`",
            ),
            (
                Error::UnsupportedImport {
                    import: "wasi:sockets/tcp@0.2.3".into(),
                    others: vec![],
                },
                "policy imports `wasi:sockets/tcp@0.2.3`, which the sandbox does not provide",
            ),
            (
                Error::UnsupportedImport {
                    import: "wasi:filesystem/types@0.2.6".into(),
                    others: vec![
                        "wasi:sockets/tcp@0.2.6".into(),
                        "wasi:sockets/network@0.2.6".into(),
                    ],
                },
                "policy imports `wasi:filesystem/types@0.2.6` (and 2: `wasi:sockets/tcp@0.2.6`, `wasi:sockets/network@0.2.6`), which the sandbox does not provide",
            ),
            (
                Error::OutOfFuel { fuel: 1000 },
                "policy ran out of fuel after 1000 units",
            ),
            (
                Error::DeadlineExceeded {
                    timeout: Duration::from_millis(250),
                },
                "policy exceeded its deadline of 250 ms",
            ),
            (
                Error::MemoryLimitExceeded {
                    limit: 65536,
                    requested: 131072,
                },
                "policy exceeded its memory limit of 65536 bytes (it asked for 131072 bytes)",
            ),
            (
                Error::Trap {
                    message: "panicked at src/lib.rs:3:5: boom".into(),
                    backtrace: None,
                    source: cause(),
                },
                "policy trapped: panicked at src/lib.rs:3:5: boom",
            ),
            (
                Error::invalid_output(
                    "children[0] (Pod w-0)",
                    "namespace `other` is not the DataJob's namespace `ns`",
                ),
                "policy returned an invalid result: children[0] (Pod w-0): namespace `other` is not the DataJob's namespace `ns`",
            ),
            (
                Error::OutputTooLarge {
                    what: "bytes",
                    actual: 10,
                    limit: 5,
                },
                "policy output too large: bytes is 10, the limit is 5",
            ),
            (
                Error::PolicyError(PolicyError::InvalidParams("replicas: expected u32".into())),
                "policy reported an error: invalid params: replicas: expected u32",
            ),
            (
                Error::PolicyError(PolicyError::Failed("later".into())),
                "policy reported an error: failed: later",
            ),
            (
                Error::Host {
                    context: "instantiating the policy",
                    source: cause(),
                },
                "policy runtime failure: instantiating the policy",
            ),
            (
                Error::Io {
                    context: "reading /x.wasm".into(),
                    source: std::io::Error::other("gone"),
                },
                "reading /x.wasm",
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(error.to_string(), expected);
        }
    }

    #[test]
    fn causes_are_kept_as_sources() {
        use std::error::Error as _;
        let error = Error::Corrupt(cause());
        assert_eq!(
            error.source().map(ToString::to_string).as_deref(),
            Some("cause")
        );
        let error = Error::Io {
            context: "x".into(),
            source: std::io::Error::other("gone"),
        };
        assert_eq!(
            error.source().map(ToString::to_string).as_deref(),
            Some("gone")
        );
    }

    #[test]
    fn guest_faults_are_told_apart_from_load_errors() {
        assert!(Error::OutOfFuel { fuel: 1 }.is_guest_fault());
        assert!(!Error::CoreModule.is_guest_fault());
        assert!(
            !Error::CompileLimitExceeded(refusal(CompileLimit::Memory { limit: 1 }))
                .is_guest_fault()
        );
        assert_eq!(
            Error::CompileLimitExceeded(refusal(CompileLimit::Memory { limit: 1 })).reason(),
            "CompileLimitExceeded"
        );
        assert_eq!(
            Error::PolicyError(PolicyError::InvalidParams(String::new())).reason(),
            "InvalidParams"
        );
    }

    #[test]
    fn every_text_of_the_policys_in_an_error_is_redacted() {
        const TOKEN: &str = "Bearer s3cret-token";
        let redactor = Redactor::new([TOKEN.as_bytes()]).expect("redactor");
        let said = format!("the server said: {TOKEN}");
        let errors = [
            Error::PolicyError(PolicyError::Failed(said.clone())),
            Error::PolicyError(PolicyError::InvalidParams(said.clone())),
            Error::Trap {
                message: said.clone(),
                backtrace: Some(said.clone()),
                source: cause(),
            },
            Error::invalid_output(format!("children[0] (Pod {TOKEN})"), said),
        ];
        for error in errors {
            let reason = error.reason();
            let error = error.redacted(&redactor);
            let Error::Trap { backtrace, .. } = &error else {
                let text = error.to_string();
                assert!(!text.contains("s3cret"), "{text}");
                assert!(text.contains("[redacted]"), "{text}");
                assert_eq!(error.reason(), reason);
                continue;
            };
            assert_eq!(
                error.to_string(),
                "policy trapped: the server said: [redacted]"
            );
            assert_eq!(backtrace.as_deref(), Some("the server said: [redacted]"));
        }
    }
}
