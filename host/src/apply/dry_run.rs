//! What the API server would say to a result's children, without writing
//! them: each child the result would create or change goes to the server
//! with `dryRun=All`, as [`super::children`] would send it (the same
//! manifest, field manager, ownership rules and UID precondition).
//! Admission, validation, immutable fields and quotas all answer a dry
//! run, so this tells what no local check can.
//!
//! One difference from the apply it stands for: the fields the operator's
//! create left to a child are handed to its apply first ([`super::fields`]),
//! a write a dry run cannot make, so a child never applied since its
//! create is checked with them still held by the create. A field the
//! candidate drops then stays, and the server judges what remains (a
//! renamed container of such a Pod reads as a second container).
//!
//! A dry run is a write as far as the API server's budget goes: it goes
//! through the operator's throttled client, in the writer's fair share, and
//! only as many as its caller permits are sent.

use std::fmt;
use std::sync::Arc;

use kube::api::{Api, DynamicObject, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::children::{Error, Planned, Step, applied, created, plan, refuses_as_immutable};
use crate::cache::{ChildRecord, Children};
use crate::chain::display_chain;
use crate::crd::DataJob;
use crate::runtime::{UpdateStrategy, ValidChild};
use crate::vocabulary::FIELD_MANAGER;

/// What the server said of the children a result would write.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DryRun {
    /// Children sent with `dryRun=All`.
    pub sent: u32,
    /// Children the server, or the ownership rules before it, refused.
    pub refused: Vec<Refused>,
    /// Children left without the server's word: the caller permitted no
    /// more requests.
    pub unchecked: u32,
}

/// One child refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The child's kind.
    pub kind: String,
    /// The child's name.
    pub name: String,
    /// Why, on one line: the server's code, reason and what it found wrong.
    pub why: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.kind, self.name, self.why)
    }
}

/// Sends every child of `desired` that [`super::children::reconcile_children`]
/// would create or change for `job` as a dry run, while `permit` allows
/// one more request; children as they are already need none, and pruning
/// is not tried (a delete cannot be refused for its content).
pub async fn dry_run(
    client: &Client,
    caches: &dyn Children,
    instance: &str,
    job: &DataJob,
    desired: &[ValidChild],
    current: &[Arc<ChildRecord>],
    mut permit: impl FnMut() -> bool,
) -> DryRun {
    let mut outcome = DryRun::default();
    let planned = match plan(caches, instance, job, desired, current) {
        Ok(planned) => planned,
        Err(error) => {
            outcome.refused = refusals(&error);
            return outcome;
        }
    };
    let namespace = job.namespace().unwrap_or_default();
    for (planned, step) in planned {
        // A child to recreate is deleted first, and one held not written.
        if matches!(
            step,
            Step::Unchanged | Step::Terminating | Step::Held | Step::Recreate(_)
        ) {
            continue;
        }
        if !permit() {
            outcome.unchecked += 1;
            continue;
        }
        outcome.sent += 1;
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, planned.resource);
        match send(&api, &planned, &step).await {
            Ok(()) => {}
            // What the real pass recreates (or, a finished Pod, holds).
            Err(Sent::Server(error))
                if planned.child.update == UpdateStrategy::Recreate
                    && refuses_as_immutable(&error) => {}
            Err(error) => outcome.refused.push(Refused {
                kind: planned.child.kind.clone(),
                name: planned.child.name.clone(),
                why: error.to_string(),
            }),
        }
    }
    outcome
}

/// Why a dry run did not pass.
enum Sent {
    /// The manifest could not be made an object (never for a valid child).
    Manifest(Error),
    /// The API server refused it.
    Server(kube::Error),
}

impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Manifest(error) => f.write_str(&display_chain(error)),
            Self::Server(error) => f.write_str(&display_chain(error)),
        }
    }
}

/// One dry run; a create that finds the name taken is not refused here
/// (the real pass asks whose it is).
async fn send(api: &Api<DynamicObject>, planned: &Planned<'_>, step: &Step) -> Result<(), Sent> {
    let sent = match step {
        Step::Update(target) => {
            let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
            let patch = applied(planned.manifest.clone(), target);
            api.patch(&planned.child.name, &params, &patch)
                .await
                .map(drop)
        }
        _ => {
            let object = created(planned).map_err(Sent::Manifest)?;
            let params = PostParams {
                dry_run: true,
                field_manager: Some(FIELD_MANAGER.to_owned()),
            };
            match api.create(&params, &object).await {
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                other => other.map(drop),
            }
        }
    };
    sent.map_err(Sent::Server)
}

/// A result the plan refused before any request, child by child.
fn refusals(error: &Error) -> Vec<Refused> {
    match error {
        Error::Conflict { conflicts } => conflicts
            .iter()
            .map(|conflict| Refused {
                kind: conflict.kind.clone(),
                name: conflict.name.clone(),
                why: format!("already exists and is {}", conflict.holder),
            })
            .collect(),
        Error::UnwatchedKind { kind, name, .. }
        | Error::Manifest { kind, name, .. }
        | Error::Lookup { kind, name, .. }
        | Error::Create { kind, name, .. }
        | Error::Apply { kind, name, .. }
        | Error::Recreate { kind, name, .. }
        | Error::Prune { kind, name, .. } => {
            let text = display_chain(error);
            let why = text
                .strip_prefix(&format!("{kind} {name}: "))
                .unwrap_or(&text)
                .to_owned();
            vec![Refused {
                kind: kind.clone(),
                name: name.clone(),
                why,
            }]
        }
    }
}
