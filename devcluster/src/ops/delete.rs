//! Delete: preconditions, the propagation policy as finalizers, graceful deletion, and
//! the bookkeeping after an object is gone.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Target, Writer, finalizers, write_finalizers};
use crate::clock;
use crate::object::GroupResource;
use crate::object::md;
use crate::object::{ObjectKey, Stored};
use crate::resource::ResourceType;
use crate::status::internal;
use crate::status::{ApiError, Result};
use crate::store::{GcWork, Txn};

/// The `orphan` finalizer: dependents lose their ownerReference before the owner goes.
pub(crate) const ORPHAN: &str = "orphan";
/// The `foregroundDeletion` finalizer: dependents go before the owner.
pub(crate) const FOREGROUND: &str = "foregroundDeletion";

/// The deletion propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// Dependents keep living, without the ownerReference.
    Orphan,
    /// The owner goes now, the garbage collector deletes dependents after.
    Background,
    /// Dependents go first, then the owner.
    Foreground,
}

/// `DeleteOptions` as far as they matter here (`dryRun` is the [`Target`]'s).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    /// `propagationPolicy` (or the deprecated `orphanDependents`).
    pub(crate) propagation: Option<Propagation>,
    /// `preconditions.uid`.
    pub(crate) uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub(crate) resource_version: Option<String>,
    /// The deprecated `orphanDependents: false` was sent, which alone makes a delete
    /// that leaves the object in place a 202 Accepted.
    pub(crate) cascade_requested: bool,
    /// `gracePeriodSeconds`: for Pods bound to a node, how long the kubelet has to stop
    /// them (default: the Pod's `terminationGracePeriodSeconds`); 0 deletes at once.
    pub(crate) grace_period: Option<i64>,
}

/// What a delete did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; this was its last state.
    Now(Arc<Stored>),
    /// The object is being deleted and waits for finalizers.
    Pending(Arc<Stored>),
}

/// Marks an object as deleting `at`, with `grace` seconds left; `first`, when its
/// deletion starts, raises the generation of an object that keeps one, as a spec
/// change does (controllers must notice it as they notice a spec change).
fn mark_deleting(v: &mut Value, at: String, grace: i64, first: bool) {
    let m = md(v);
    m.insert("deletionTimestamp".into(), Value::String(at));
    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if first
        && let Some(g) = m
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
    {
        m.insert("generation".into(), json!(g + 1));
    }
}

/// Delete preconditions fail as kube-apiserver's BeforeDelete words them, naming the
/// kind rather than the resource.
fn check_preconditions(rt: &ResourceType, old: &Stored, opts: &DeleteOptions) -> Result<()> {
    let by_kind = GroupResource::new(&rt.gr.group, &rt.kind);
    let name = &old.meta.name;
    if let Some(uid) = &opts.uid
        && *uid != old.meta.uid
    {
        return Err(ApiError::conflict(
            &by_kind,
            name,
            &format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                old.meta.uid
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && rv.parse::<u64>().ok() != Some(old.meta.rv)
    {
        return Err(ApiError::conflict(
            &by_kind,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                old.meta.rv
            ),
        ));
    }
    Ok(())
}

/// The finalizers a delete leaves: the propagation policy's own (`orphan` by default when
/// the object carries it) replaces the other's.
fn propagated(mut f: Vec<String>, policy: Option<Propagation>) -> Vec<String> {
    let has = |f: &[String], x: &str| f.iter().any(|y| y == x);
    let policy = policy.unwrap_or(if has(&f, ORPHAN) {
        Propagation::Orphan
    } else {
        Propagation::Background
    });
    let (own, other) = match policy {
        Propagation::Orphan => (ORPHAN, FOREGROUND),
        Propagation::Foreground => (FOREGROUND, ORPHAN),
        Propagation::Background => {
            f.retain(|x| x != ORPHAN && x != FOREGROUND);
            return f;
        }
    };
    if !has(&f, own) {
        f.push(own.to_owned());
    }
    f.retain(|x| x != other);
    f
}

impl Writer<'_> {
    /// Deletes the object `target` names, honouring preconditions, finalizers, the
    /// propagation policy and its kind's graceful deletion.
    pub(crate) fn delete(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        opts: &DeleteOptions,
    ) -> Result<Deleted> {
        let rt = target.rt;
        let gr = &rt.gr;
        let key = target.key();
        let old = txn
            .get(gr, &key)
            .ok_or_else(|| ApiError::not_found(gr, target.name))?;
        check_preconditions(rt, &old, opts)?;
        let strategy = rt.strategy;
        let mut v = old.value().map_err(internal)?;
        let f = propagated(finalizers(&v), opts.propagation);
        let grace = strategy.deletion_grace(&v, opts.grace_period);
        let current_grace = v["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        if let Some(grace) = grace
            && grace > 0
            && (!old.meta.deleting || grace < current_grace)
        {
            if target.dry_run {
                return Ok(Deleted::Pending(old));
            }
            write_finalizers(&mut v, &f);
            let at = clock::format_rfc3339(clock::now_unix() + grace);
            mark_deleting(&mut v, at, grace, !old.meta.deleting);
            let stored = txn.put(gr, v).map_err(internal)?;
            txn.queue_gc(GcWork::Object(gr.clone(), key));
            return Ok(Deleted::Pending(stored));
        }
        if grace == Some(0) && old.meta.deleting {
            md(&mut v).insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        if f.is_empty() && !strategy.finalized_by_controller() {
            return self.remove_now(txn, target, &old, v);
        }
        if old.meta.deleting && finalizers(&v) == f {
            if v["metadata"]["deletionGracePeriodSeconds"] != json!(current_grace) {
                // A force delete of a terminating Pod that still has finalizers.
                let stored = txn.put(gr, v).map_err(internal)?;
                return Ok(Deleted::Pending(stored));
            }
            return Ok(Deleted::Pending(old));
        }
        write_finalizers(&mut v, &f);
        if !old.meta.deleting {
            mark_deleting(&mut v, clock::now_rfc3339(), 0, true);
            strategy.begin_deletion(&mut v);
        }
        if target.dry_run {
            return Ok(Deleted::Pending(Stored::from_value(&v).map_err(internal)?));
        }
        let stored = txn.put(gr, v).map_err(internal)?;
        txn.queue_gc(GcWork::Object(gr.clone(), key));
        Ok(Deleted::Pending(stored))
    }

    /// Removes `old`, whose last state is `v`: a kind that marks before removal is stored
    /// as deleting first, so its last state says it was deleted.
    fn remove_now(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        old: &Arc<Stored>,
        mut v: Value,
    ) -> Result<Deleted> {
        let rt = target.rt;
        let marks = rt.strategy.marks_before_removal();
        if marks && !old.meta.deleting {
            mark_deleting(&mut v, clock::now_rfc3339(), 0, true);
        }
        let marked = marks && v != old.value().map_err(internal)?;
        if target.dry_run {
            if marked {
                return Ok(Deleted::Now(Stored::from_value(&v).map_err(internal)?));
            }
            return Ok(Deleted::Now(old.clone()));
        }
        if marked {
            txn.put(&rt.gr, v.clone()).map_err(internal)?;
        }
        let gone = txn.remove(&rt.gr, &target.key(), v).map_err(internal)?;
        self.after_remove(txn, rt, &gone);
        Ok(Deleted::Now(gone))
    }

    /// Bookkeeping after an object is gone: its dependents and its namespace are
    /// re-checked, and its kind's strategy has its part.
    pub(crate) fn after_remove(&self, txn: &mut Txn<'_>, rt: &ResourceType, gone: &Arc<Stored>) {
        txn.queue_gc(GcWork::Owner(gone.meta.uid.clone()));
        for o in &gone.meta.owners {
            if let Some((g, k)) = txn.by_uid(&o.uid) {
                txn.queue_gc(GcWork::Object(g, k));
            }
        }
        if rt.namespaced {
            txn.queue_gc(GcWork::Object(
                GroupResource::new("", "namespaces"),
                ObjectKey::new("", &gone.meta.namespace),
            ));
        }
        rt.strategy.after_remove(txn, self.registry, gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_propagation_policy_leaves_its_own_finalizer_only() {
        let f = strings(&["a", ORPHAN]);
        assert_eq!(
            propagated(f.clone(), None),
            f,
            "orphan by default when present"
        );
        assert_eq!(
            propagated(f.clone(), Some(Propagation::Foreground)),
            strings(&["a", FOREGROUND])
        );
        assert_eq!(
            propagated(f, Some(Propagation::Background)),
            strings(&["a"])
        );
        assert_eq!(
            propagated(strings(&[FOREGROUND]), Some(Propagation::Orphan)),
            strings(&[ORPHAN])
        );
        assert!(propagated(Vec::new(), None).is_empty());
    }
}
