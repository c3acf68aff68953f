//! A policy whose `reconcile` opens a `wasi:keyvalue` store: its component
//! imports `wasi:keyvalue/store@0.2.0-draft`, which the sandbox does not
//! link. The host must reject it at load time as `UnsupportedImport`, naming
//! that import, and never run it.

use policyhost_sdk::{
    Child, Context, Job, NoParams, Phase, Policy, PolicyError, Reconcile, Result, Status,
};

/// Reaches for a store the host does not offer.
pub struct KeyvalueImport;

policyhost_sdk::export!(KeyvalueImport);

#[cfg(target_arch = "wasm32")]
mod wasi {
    wit_bindgen::generate!({ path: "keyvalue.wit", world: "keyvalue", generate_all });
}

/// Opens the store named `policy`.
#[cfg(target_arch = "wasm32")]
fn open() -> Result<u32, String> {
    wasi::wasi::keyvalue::store::open("policy")
}

/// Natively there is no store (never called by the tests).
#[cfg(not(target_arch = "wasm32"))]
fn open() -> Result<u32, String> {
    Err("no wasi:keyvalue outside a component".to_owned())
}

impl Policy for KeyvalueImport {
    type Params = NoParams;

    fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        let store = open().map_err(PolicyError::failed_with)?;
        Ok(Reconcile::new(
            Status::new(Phase::Succeeded).message(format!("store {store} opened")),
        ))
    }
}
