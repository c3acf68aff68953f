//! One call of a policy: a fresh instance from the `*Pre`, capped by the
//! limiter, fuel and an epoch deadline; the result checked, the grant's
//! credentials redacted from all it says, and the cost reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::ResourceTable;

use super::bindings::{Child, Context, DataJob, DatajobPolicy, PolicyError as WitPolicyError};
use super::clock::{Refused, VirtualClock};
use super::engine::Engine;
use super::error::{Error, PolicyError, Result};
use super::limiter::{MemoryAccount, MemoryLimiter};
use super::load::Policy;
use super::logs::{GuestLog, whole_lines};
use super::output::{self, Cleaned, Reconciled};
use super::store::StoreState;
use super::wasi::{self, Capture};
use crate::outbound::{CallHttp, Caller, Client, OutboundReport, Recorded};
use crate::traces;
use tracing::field;

/// The inputs of one call: the DataJob, its children, the context.
#[derive(Debug, Clone)]
pub struct Input {
    /// The DataJob, projected (see [`crate::projection`]).
    pub job: DataJob,
    /// Its children, sorted by kind and name.
    pub children: Vec<Child>,
    /// Time and attempt. `policy-digest` is filled in by the runtime.
    pub ctx: Context,
}

/// The answer of one call and what it cost. Every call has a report,
/// faults included.
#[derive(Debug)]
pub struct Outcome<T> {
    /// The checked result, or the typed fault.
    pub result: Result<T>,
    /// Fuel, time and memory used.
    pub report: CallReport,
    /// The outbound requests it made, and their answers.
    pub requests: Vec<Recorded>,
}

/// What one call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallReport {
    /// Fuel consumed (of [`super::Limits::fuel`]).
    pub fuel_consumed: u64,
    /// Wall-clock time from store creation to the checked result.
    #[serde(serialize_with = "micros")]
    pub duration: Duration,
    /// Of which: creating the store and instantiating (the rest is
    /// marshalling, running the guest and checking its result).
    #[serde(serialize_with = "micros")]
    pub instantiate: Duration,
    /// Linear memory accounts: cap, peak, denied growth.
    pub memory: MemoryAccount,
    /// `log` lines written.
    pub log_lines: u32,
    /// `log` lines not sent to the host's log: over the call's cap or the
    /// policy's log rate.
    pub log_dropped: u32,
    /// Bytes of stdout/stderr dropped over the capture bound.
    pub output_dropped: u64,
    /// Lines of stdout/stderr not sent to the host's log: over the call's
    /// cap or the policy's log rate.
    pub output_lines_dropped: u32,
    /// Of the records dropped, those over the policy's log rate.
    pub log_throttled: u32,
    /// The call held its thread past its deadline and the pool replaced
    /// the thread (the call's result is lost: `DeadlineExceeded`).
    pub thread_replaced: bool,
    /// Requests made and refused over outbound HTTP.
    pub outbound: OutboundReport,
}

fn micros<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Whether a call's requests may leave the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network<'a> {
    /// As the policy's grant allows (none without one).
    Granted,
    /// Never: a candidate's shadow call, which must have no side effect.
    /// A request the serving call made the same way (its record) gets the
    /// same answer; any other is refused and counted
    /// ([`crate::outbound::Refusal::Shadow`]).
    Offline(&'a [Recorded]),
}

/// Calls `reconcile` on the current thread and checks its result.
pub(crate) fn reconcile(
    (engine, client): (&Engine, &Client),
    policy: &Policy,
    input: &Input,
    network: Network<'_>,
) -> Outcome<Reconciled> {
    run(
        (engine, client, network),
        policy,
        input,
        "reconcile",
        |bindings, store, ctx| bindings.call_reconcile(store, &input.job, &input.children, ctx),
        |result| {
            output::validate(
                result,
                &input.job.namespace,
                &policy.allowed_kinds,
                &policy.limits,
                policy.redactor(),
            )
        },
    )
}

/// Calls `cleanup` on the current thread.
pub(crate) fn cleanup(
    (engine, client): (&Engine, &Client),
    policy: &Policy,
    input: &Input,
    network: Network<'_>,
) -> Outcome<Cleaned> {
    run(
        (engine, client, network),
        policy,
        input,
        "cleanup",
        |bindings, store, ctx| bindings.call_cleanup(store, &input.job, &input.children, ctx),
        |result| Ok(Cleaned::from(result)),
    )
}

/// Instantiates the policy once, under its limits, without calling it: a
/// trial a loader runs before putting a version in service, so a component
/// whose start function traps or whose initial memory is above its cap is
/// rejected at load time instead of failing every call.
pub(crate) fn instantiate(engine: &Engine, client: &Client, policy: &Policy) -> Outcome<()> {
    let input = Input {
        job: DataJob {
            name: "policyhost-trial".into(),
            namespace: "policyhost-trial".into(),
            uid: String::new(),
            generation: 0,
            labels: Vec::new(),
            annotations: Vec::new(),
            params: "{}".into(),
            status: None,
            deletion_unix_ms: None,
        },
        children: Vec::new(),
        ctx: Context {
            now_unix_ms: 0,
            attempt: 0,
            policy_digest: String::new(),
        },
    };
    run(
        (engine, client, Network::Granted),
        policy,
        &input,
        "instantiate",
        |_, _, _| Ok(Ok(())),
        Ok,
    )
}

type Answer<T> = wasmtime::Result<std::result::Result<T, WitPolicyError>>;

/// Runs one call on the current thread (a pool thread, or a CLI).
fn run<T, U>(
    (engine, client, network): (&Engine, &Client, Network<'_>),
    policy: &Policy,
    input: &Input,
    entry: &'static str,
    call: impl FnOnce(&DatajobPolicy, &mut Store<StoreState>, &Context) -> Answer<T>,
    check: impl FnOnce(T) -> Result<U>,
) -> Outcome<U> {
    let started = Instant::now();
    let span = call_span(policy, entry).entered();
    let ctx = Context {
        policy_digest: policy.digest_hex.clone(),
        ..input.ctx.clone()
    };
    let stdout = Capture::default();
    let stderr = Capture::default();
    let mut table = ResourceTable::new();
    table.set_max_capacity(wasi::TABLE_ENTRIES);
    let job = format!("{}/{}", input.job.namespace, input.job.name);
    let timeout = policy.limits.timeout;
    let until = started + timeout;
    let mut clock = VirtualClock::new(ctx.now_unix_ms, timeout);
    let caller = || Caller {
        policy: policy.name.clone(),
        job: job.clone(),
        cleanup_of: (entry == "cleanup").then(|| input.job.uid.clone()),
    };
    let http = match (&policy.outbound, network) {
        (None, _) => CallHttp::none(),
        (Some(outbound), network) => {
            // Even a shadow's answers reach the guest through a task of
            // wasi:http's: a wait on it must be real (and short), else it
            // would read as never ready.
            clock = clock.with_real_waits(until);
            let deadline = started + outbound.grant().network_budget(timeout);
            match network {
                Network::Granted => {
                    CallHttp::granted(Arc::clone(outbound), client.clone(), deadline, caller())
                }
                Network::Offline(served) => {
                    CallHttp::shadow(Arc::clone(outbound), served, deadline, caller())
                }
            }
        }
    };
    let state = StoreState {
        wasi: wasi::context(&ctx, &input.job.uid, &stdout, &stderr),
        table,
        clock,
        limiter: MemoryLimiter::new(policy.limits.memory_bytes),
        log: GuestLog::new(
            policy.name.clone(),
            job,
            policy.log_budget.clone(),
            policy.redactor().clone(),
        ),
        http,
        deadline: (until, timeout),
    };
    let mut store = Store::new(engine.wasmtime(), state);
    let mut instantiate = Duration::ZERO;
    store.limiter(|state| &mut state.limiter);
    let fuel = policy.limits.fuel;
    let result = match store.set_fuel(fuel) {
        Err(source) => Err(Failure::Host(Error::Host {
            context: "setting the fuel budget",
            source,
        })),
        Ok(()) => {
            let deadline = engine.deadline(policy.limits.timeout);
            store.set_epoch_deadline(deadline.ticks());
            store.epoch_deadline_trap();
            invoke(&mut store, policy, &ctx, call, started, &mut instantiate)
        }
    };
    let fuel_consumed = fuel.saturating_sub(store.get_fuel().unwrap_or(0));
    let memory = store.data().limiter.account();
    let outbound = store.data().http.report();
    let requests = store.data().http.recorded();
    let mut log = store.into_data().log;
    let (out, out_dropped) = stdout.take();
    let (err, err_dropped) = stderr.take();
    log.forward(
        whole_lines(&out, out_dropped > 0),
        whole_lines(&err, err_dropped > 0),
    );
    let result = match result {
        Ok(Ok(raw)) => Ok(raw),
        Ok(Err(error)) => Err(error),
        Err(Failure::Instantiate(error)) => Err(classify(error, policy, memory, &err, false)),
        Err(Failure::Call(error)) => Err(classify(error, policy, memory, &err, true)),
        Err(Failure::Host(error)) => Err(error),
    };
    // The result was redacted as it was checked; what the host says of a
    // fault may quote the policy.
    let result = result
        .and_then(check)
        .map_err(|error| error.redacted(policy.redactor()));
    let report = CallReport {
        fuel_consumed,
        duration: started.elapsed(),
        instantiate,
        memory,
        log_lines: log.counts.lines,
        log_dropped: log.counts.dropped,
        output_dropped: out_dropped + err_dropped,
        output_lines_dropped: log.counts.output_dropped,
        log_throttled: log.counts.throttled,
        thread_replaced: false,
        outbound,
    };
    if let Err(error) = &result {
        tracing::debug!(reason = error.reason(), %error, fuel_consumed, "policy call failed");
    }
    record_call(&span, &report, &result);
    Outcome {
        result,
        report,
        requests,
    }
}

/// The span of a call within a traced pass; none otherwise: a trial
/// instance, or a call of the CLI's, is no trace of its own.
fn call_span(policy: &Policy, entry: &'static str) -> tracing::Span {
    if !traces::context::is_traced(&tracing::Span::current()) {
        return tracing::Span::none();
    }
    tracing::debug_span!(
        target: traces::TARGET,
        "guest call",
        "otel.name" = format_args!("guest {entry}"),
        "otel.status_code" = field::Empty,
        policy = %policy.name,
        digest = %policy.digest_hex,
        entry,
        instantiate_us = field::Empty,
        fuel = field::Empty,
        memory_peak_bytes = field::Empty,
        result = field::Empty,
    )
}

/// What the call came to, on its span.
fn record_call<T>(span: &tracing::Span, report: &CallReport, result: &Result<T>) {
    if span.is_disabled() {
        return;
    }
    span.record("instantiate_us", report.instantiate.as_micros() as u64);
    span.record("fuel", report.fuel_consumed);
    span.record("memory_peak_bytes", report.memory.peak);
    match result {
        Ok(_) => span.record("result", "ok"),
        Err(error) => span
            .record("result", error.reason())
            .record("otel.status_code", "error"),
    };
}

enum Failure {
    Instantiate(wasmtime::Error),
    Call(wasmtime::Error),
    Host(Error),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::Host(error)
    }
}

fn invoke<T>(
    store: &mut Store<StoreState>,
    policy: &Policy,
    ctx: &Context,
    call: impl FnOnce(&DatajobPolicy, &mut Store<StoreState>, &Context) -> Answer<T>,
    started: Instant,
    instantiate: &mut Duration,
) -> Result<Result<T>, Failure> {
    let bindings = policy
        .pre
        .instantiate(&mut *store)
        .map_err(Failure::Instantiate)?;
    *instantiate = started.elapsed();
    let answer = call(&bindings, store, ctx).map_err(Failure::Call)?;
    Ok(answer.map_err(|e| Error::PolicyError(PolicyError::from(e))))
}

/// Turns a wasmtime failure into the typed fault it is.
fn classify(
    error: wasmtime::Error,
    policy: &Policy,
    memory: MemoryAccount,
    stderr: &str,
    during_call: bool,
) -> Error {
    let trap = error.downcast_ref::<wasmtime::Trap>().copied();
    match trap {
        Some(wasmtime::Trap::OutOfFuel) => {
            return Error::OutOfFuel {
                fuel: policy.limits.fuel,
            };
        }
        Some(wasmtime::Trap::Interrupt) => {
            return Error::DeadlineExceeded {
                timeout: policy.limits.timeout,
            };
        }
        _ => {}
    }
    if let Some(Refused::PastDeadline { .. }) = error.downcast_ref::<Refused>() {
        return Error::DeadlineExceeded {
            timeout: policy.limits.timeout,
        };
    }
    if let Some(requested) = memory.denied {
        return Error::MemoryLimitExceeded {
            limit: memory.limit,
            requested,
        };
    }
    if !during_call && trap.is_none() {
        return Error::Host {
            context: "instantiating the policy",
            source: error,
        };
    }
    let backtrace = error
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(|bt| bt.to_string());
    let message = panic_message(stderr)
        .or_else(|| trap.map(|t| t.to_string()))
        .unwrap_or_else(|| error.root_cause().to_string());
    Error::Trap {
        message,
        backtrace,
        source: error,
    }
}

/// The guest's last words: a Rust panic message from its stderr, on one line.
fn panic_message(stderr: &str) -> Option<String> {
    let text: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let start = text.iter().rposition(|line| line.contains("panicked at"))?;
    let message = text[start..].join(" ");
    // Drop the `thread '<name>' (<id>) ` prefix the standard library writes.
    let from = message.find("panicked at").unwrap_or(0);
    let message = message[from..].to_owned();
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_taken_from_a_rust_panic_on_stderr() {
        let stderr = "\nthread '<unnamed>' (1) panicked at src/lib.rs:10:5:\nboom: the policy gave up\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("panicked at src/lib.rs:10:5: boom: the policy gave up")
        );
        assert_eq!(panic_message("just noise\n"), None);
    }
}
