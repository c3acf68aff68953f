//! A policy whose `reconcile` opens a TCP connection with
//! `std::net::TcpStream`, which on `wasm32-wasip2` imports `wasi:sockets`
//! (`tcp`, `tcp-create-socket`, `network`, `instance-network`). The sandbox
//! links those interfaces and allows no socket: the connect must fail inside
//! the guest, which reports `failed` naming the refusal; `Succeeded` would
//! mean the policy reached the network.

use std::net::TcpStream;

use policyhost_sdk::{
    Child, Context, Job, NoParams, Phase, Policy, PolicyError, Reconcile, Result, Status,
};

/// Tries to reach the network.
pub struct SocketImport;

policyhost_sdk::export!(SocketImport);

impl Policy for SocketImport {
    type Params = NoParams;

    fn reconcile(_: &Job, _: NoParams, _: &[Child], _: &Context) -> Result<Reconcile> {
        match TcpStream::connect(("127.0.0.1", 80)) {
            Ok(_) => Ok(Reconcile::new(
                Status::new(Phase::Succeeded).message("connected"),
            )),
            Err(error) => Err(PolicyError::failed_with(format!("cannot connect: {error}"))),
        }
    }
}
