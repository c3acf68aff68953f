//! Host bindings of the `policyhost:reconcile/datajob-policy` world, generated
//! from `wit/policy.wit`, with a tracing span around every import call but
//! `log`.

mod generated {
    wasmtime::component::bindgen!({
        world: "datajob-policy",
        path: "../wit",
        // `log` is traced by the host's own records of it, credentials
        // redacted (`logs`); bindgen's trace would show the message as the
        // policy wrote it.
        imports: {
            "policyhost:reconcile/host.log": exact,
            default: tracing,
        },
        // The operator's cache compares child records to skip no-op changes.
        additional_derives: [PartialEq],
    });
}

pub use generated::policyhost::reconcile::host::Level;
pub(crate) use generated::policyhost::reconcile::host::{
    Host as LogHost, add_to_linker as add_log_to_linker,
};
pub use generated::policyhost::reconcile::types::{
    Child, ChildPhase, CleanupResult, Condition, Context, DataJob, DesiredChild, Event, KeyValue,
    PolicyError, ReconcileResult, Status,
};
pub(crate) use generated::{DatajobPolicy, DatajobPolicyPre};
