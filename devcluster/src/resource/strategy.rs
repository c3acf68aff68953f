//! What a kind adds to the generic write path, as kube-apiserver's registry strategies
//! do: defaults and status reset on create, what an update keeps or refuses, how a delete
//! proceeds, and what follows a write. The generic path (`crate::ops`) asks the object's
//! strategy and never tests which resource it writes; each built-in kind's strategy is
//! in its file of `crate::kinds`.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Registry, ResourceType};
use crate::object::Stored;
use crate::rand::Rng;
use crate::status::Result;
use crate::store::Txn;

/// A kind's part in writes. Every method has the generic behaviour as its default.
pub(crate) trait Strategy: Send + Sync + std::fmt::Debug {
    /// Normalises a decoded body before anything reads it.
    fn canonicalize(&self, _obj: &mut Map<String, Value>) {}

    /// Defaults and status on create, recorded in the writer's managed fields. By
    /// default a status served as a subresource starts empty: only that subresource
    /// writes it.
    fn prepare_for_create(&self, rt: &ResourceType, body: &mut Value, _rng: &Rng) -> Result<()> {
        if rt.has_status()
            && let Some(o) = body.as_object_mut()
        {
            o.remove("status");
        }
        Ok(())
    }

    /// What admission changes on a new object, after its managed fields are recorded, so
    /// the fields it sets belong to no manager.
    fn admit_create(&self, _body: &mut Value) {}

    /// Keeps what an update of the main resource may not change in `new`, from `old`.
    fn prepare_for_update(&self, _old: &Value, _new: &mut Value) {}

    /// Checks an update of the main resource from `old` to `new`.
    fn validate_update(&self, _rt: &ResourceType, _old: &Value, _new: &Value) -> Result<()> {
        Ok(())
    }

    /// Follows a stored write (the object is `stored`).
    fn after_write(
        &self,
        _txn: &mut Txn<'_>,
        _registry: &Registry,
        _rt: &ResourceType,
        _stored: &Arc<Stored>,
    ) -> Result<()> {
        Ok(())
    }

    /// Follows the removal of an object (its last state is `gone`).
    fn after_remove(&self, _txn: &mut Txn<'_>, _registry: &Registry, _gone: &Arc<Stored>) {}

    /// The grace period of a delete that something outside the store finishes (a
    /// kubelet stopping a Pod), or `None` when the store finishes it.
    fn deletion_grace(&self, _obj: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }

    /// Whether a delete stores the object as deleting before it removes it, so its last
    /// state says it was deleted.
    fn marks_before_removal(&self) -> bool {
        false
    }

    /// Whether deletion always waits for a controller, whatever the finalizers say.
    fn finalized_by_controller(&self) -> bool {
        false
    }

    /// Changes an object as its deletion starts.
    fn begin_deletion(&self, _obj: &mut Value) {}
}

/// Kinds with no part of their own: the generic registry's behaviour.
#[derive(Debug)]
pub(crate) struct Generic;

impl Strategy for Generic {}
