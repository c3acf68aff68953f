//! Update and patch: the new state is computed from the old without the store lock, then
//! stored, or (when the last finalizer went) the deletion finishes.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    Part, Target, Writer, check_namespace, check_type, check_url_name, finalizers, str_at,
    write_finalizers,
};
use crate::clock;
use crate::object::{ObjectKey, Stored, md};
use crate::resource::ResourceType;
use crate::status::{ApiError, Result, internal};
use crate::store::{GcWork, Store, Txn};

/// The metadata an update of the main resource cannot change.
const SYSTEM_FIELDS: [&str; 7] = [
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
];

/// What an update computes.
enum Over {
    /// Nothing changed: store nothing, send no event.
    Unchanged,
    /// The new state to store.
    Write(Value),
}

/// A PUT body checked against the URL.
pub(crate) fn put_body(target: &Target<'_>, mut body: Value) -> Result<Value> {
    check_type(target.rt, target.version, &mut body)?;
    if let Some(n) = str_at(&body, &["metadata", "name"]) {
        check_url_name(n, target.name)?;
    }
    check_namespace(target.rt, &body, target.namespace)?;
    Ok(body)
}

/// The patched body: `f` applied to the current object in the requested version.
pub(crate) fn patched_body(
    target: &Target<'_>,
    old: &Stored,
    f: impl FnOnce(Value) -> Result<Value>,
) -> Result<Value> {
    let rt = target.rt;
    let mut current = old.value().map_err(internal)?;
    if rt.custom {
        // Served versions share storage; the patch applies to the requested version.
        current["apiVersion"] = Value::String(rt.api_version(target.version));
    }
    let mut patched = f(current)?;
    if !patched.is_object() {
        return Err(ApiError::bad_request(
            "the patched object is not a JSON object",
        ));
    }
    check_type(rt, target.version, &mut patched)?;
    // A patch names no precondition: a uid it sets is a change of an
    // immutable field, refused in validation (a PUT's uid is a precondition).
    if let Some(uid) = str_at(&patched, &["metadata", "uid"]).filter(|u| !u.is_empty())
        && uid != old.meta.uid
    {
        return Err(rt.field_invalid(
            target.name,
            "metadata.uid",
            "FieldValueInvalid",
            format!("Invalid value: {uid:?}: field is immutable"),
        ));
    }
    // As kube-apiserver checks a patched object: a name the patch removed is the URL's.
    match str_at(&patched, &["metadata", "name"]) {
        None | Some("") => {
            md(&mut patched).insert("name".into(), Value::String(target.name.to_owned()));
        }
        Some(n) => check_url_name(n, target.name)?,
    }
    Ok(patched)
}

/// Whether the parts of two objects whose change bumps `generation` (everything but
/// metadata, and status when it is a subresource) are equal; compared in place, without
/// copying the objects.
fn same_generation_view(rt: &ResourceType, a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let skip = |k: &str| k == "metadata" || (k == "status" && rt.has_status());
    let count = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    count(a) == count(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// The resourceVersion and uid an update names must be the stored object's.
fn check_preconditions(rt: &ResourceType, old: &Stored, new: &Value) -> Result<()> {
    let name = &old.meta.name;
    if let Some(rv) = str_at(new, &["metadata", "resourceVersion"]).filter(|s| !s.is_empty())
        && rv.parse::<u64>().ok() != Some(old.meta.rv)
    {
        return Err(ApiError::stale(&rt.gr, name));
    }
    if let Some(uid) = str_at(new, &["metadata", "uid"]).filter(|s| !s.is_empty())
        && uid != old.meta.uid
    {
        return Err(ApiError::conflict(
            &rt.gr,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old.meta.uid
            ),
        ));
    }
    Ok(())
}

/// `new` laid over `old` as `part` may change it: the status subresource changes only
/// the status (and the managed fields recording it); the main resource changes all but
/// the status and the system fields.
fn merged(rt: &ResourceType, part: Part, old: &Value, mut new: Value) -> Value {
    match part {
        Part::Status => {
            let mut r = old.clone();
            match new.get("status") {
                Some(s) => r["status"] = s.clone(),
                None => {
                    if let Some(o) = r.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = new["metadata"].get("managedFields") {
                md(&mut r).insert("managedFields".into(), mf.clone());
            }
            r
        }
        Part::Main => {
            if rt.has_status() {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            let om = &old["metadata"];
            let m = md(&mut new);
            for k in SYSTEM_FIELDS {
                match om.get(k) {
                    Some(v) => m.insert(k.into(), v.clone()),
                    None => m.remove(k),
                };
            }
            if !m.contains_key("managedFields")
                && let Some(mf) = om.get("managedFields")
            {
                m.insert("managedFields".into(), mf.clone());
            }
            rt.strategy.prepare_for_update(old, &mut new);
            new
        }
    }
}

/// Finalizers cannot be added once deletion started.
fn check_no_new_finalizers(
    rt: &ResourceType,
    old: &Stored,
    old_v: &Value,
    new: &Value,
) -> Result<()> {
    if !old.meta.deleting {
        return Ok(());
    }
    let before = finalizers(old_v);
    let added: Vec<String> = finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .map(|f| format!("{f:?}"))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(rt.field_invalid(
                &old.meta.name,
        "metadata.finalizers",
        "FieldValueForbidden",
        format!(
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            added.join(", ")
        ),
    ))
}

/// The version an object's `apiVersion` names.
fn version_of(v: &Value) -> String {
    v["apiVersion"]
        .as_str()
        .map(|av| av.rsplit('/').next().unwrap_or(av).to_owned())
        .unwrap_or_default()
}

impl Writer<'_> {
    /// Patches the object `target` names: `f` turns the current object into the patched
    /// one, which is then written as an update would be.
    pub(crate) fn patch(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        f: impl FnOnce(Value) -> Result<Value>,
    ) -> Result<Arc<Stored>> {
        let old = txn
            .get(&target.rt.gr, &target.key())
            .ok_or_else(|| ApiError::not_found(&target.rt.gr, target.name))?;
        let patched = patched_body(target, &old, f)?;
        self.write_over(txn, target, &old, patched)
    }

    /// The shared part of update and patch: compute the new state and store it.
    fn write_over(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        old: &Arc<Stored>,
        new: Value,
    ) -> Result<Arc<Stored>> {
        match self.compute_over(target, old, new)? {
            Over::Unchanged => Ok(old.clone()),
            Over::Write(result) => self.commit_over(txn, target, old, result),
        }
    }

    /// What an update of `old` to `new` stores; needs no store access.
    fn compute_over(&self, target: &Target<'_>, old: &Arc<Stored>, new: Value) -> Result<Over> {
        let rt = target.rt;
        check_preconditions(rt, old, &new)?;
        let old_v = old.value().map_err(internal)?;
        // An apply's result carries the managed fields it computed, even none at all.
        let applied_fields = match self.manager {
            None => Some(new["metadata"].get("managedFields").cloned()),
            Some(_) => None,
        };
        let mut result = merged(rt, target.part, &old_v, new);
        md(&mut result).insert(
            "resourceVersion".into(),
            Value::String(old.meta.rv.to_string()),
        );
        let version = version_of(&result);
        self.prune(rt, &version, &mut result)?;
        match (self.manager, applied_fields) {
            (Some(manager), _) => {
                let now = clock::now_rfc3339();
                self.record_fields(manager, target, &version, Some(&old_v), &mut result, &now);
            }
            (None, Some(Some(fields))) => {
                md(&mut result).insert("managedFields".into(), fields);
            }
            (None, _) => {
                md(&mut result).remove("managedFields");
            }
        }
        check_no_new_finalizers(rt, old, &old_v, &result)?;
        if target.part == Part::Main {
            rt.strategy.validate_update(rt, &old_v, &result)?;
        }
        if rt.generation && !same_generation_view(rt, &old_v, &result) {
            let g = old_v["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            md(&mut result).insert("generation".into(), json!(g));
        }
        // `result` carries the old resourceVersion, so equal means nothing changed; a
        // no-op write stores nothing and sends no event, as the real server does.
        if result == old_v {
            return Ok(Over::Unchanged);
        }
        Ok(Over::Write(result))
    }

    /// Stores the result of [`compute_over`](Self::compute_over) over `old`.
    fn commit_over(
        &self,
        txn: &mut Txn<'_>,
        target: &Target<'_>,
        old: &Arc<Stored>,
        result: Value,
    ) -> Result<Arc<Stored>> {
        let rt = target.rt;
        let gr = &rt.gr;
        if target.dry_run {
            return Stored::from_value(&result).map_err(internal);
        }
        let key = old.meta.key();
        // A deleting object goes once its finalizers are gone, unless it is a Pod whose
        // graceful termination the kubelet still has to finish.
        let in_grace = result["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0)
            > 0;
        if old.meta.deleting && finalizers(&result).is_empty() && !in_grace {
            // kube-apiserver removes the object as it was stored before this update: the
            // DELETED event carries that state, finalizers and all. The update is
            // answered with its own result, at the delete's resourceVersion.
            let gone = txn.remove(gr, &key, old.value().map_err(internal)?);
            let gone = gone.map_err(internal)?;
            self.after_remove(txn, rt, &gone);
            let mut answer = result;
            md(&mut answer).insert(
                "resourceVersion".into(),
                Value::String(gone.meta.rv.to_string()),
            );
            return Stored::from_value(&answer).map_err(internal);
        }
        let stored = txn.put(gr, result).map_err(internal)?;
        if stored.meta.deleting || old.meta.owners != stored.meta.owners {
            txn.queue_gc(GcWork::Object(gr.clone(), key));
        }
        self.after_write(txn, rt, &stored)?;
        Ok(stored)
    }

    /// Updates or patches the object `target` names without holding the store lock while
    /// the new state is computed: `f` builds the new body from the current object; if the
    /// object changed meanwhile, it is rebuilt from the newer state (kube-apiserver's
    /// GuaranteedUpdate).
    pub(crate) fn update_unlocked(
        &self,
        store: &Store,
        target: &Target<'_>,
        f: impl Fn(&Arc<Stored>) -> Result<Value>,
    ) -> Result<Arc<Stored>> {
        let gr = &target.rt.gr;
        let key = target.key();
        loop {
            let old = store
                .lock()
                .get(gr, &key)
                .ok_or_else(|| ApiError::not_found(gr, target.name))?;
            let over = self.compute_over(target, &old, f(&old)?)?;
            let mut txn = store.lock();
            match txn.get(gr, &key) {
                Some(cur) if Arc::ptr_eq(&cur, &old) => {}
                Some(_) => continue,
                None => return Err(ApiError::not_found(gr, target.name)),
            }
            return match over {
                Over::Unchanged => Ok(old),
                Over::Write(result) => self.commit_over(&mut txn, target, &old, result),
            };
        }
    }

    /// Replaces `metadata.finalizers` as controllers do.
    pub(crate) fn set_finalizers(
        &self,
        txn: &mut Txn<'_>,
        rt: &ResourceType,
        key: &ObjectKey,
        f: impl FnOnce(&mut Vec<String>),
    ) -> Result<()> {
        let Some(old) = txn.get(&rt.gr, key) else {
            return Ok(());
        };
        let mut v = old.value().map_err(internal)?;
        let mut list = finalizers(&v);
        f(&mut list);
        write_finalizers(&mut v, &list);
        let target = Target::of(rt, &key.namespace, &key.name);
        self.write_over(txn, &target, &old, v).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_ignores_metadata_and_a_status_subresource() {
        let reg = crate::kinds::registry();
        let deploy = reg.lookup("apps", "v1", "deployments").unwrap();
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1}, "status": {"x": 1}});
        let b = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"replicas": 1}, "status": {"x": 2}});
        assert!(same_generation_view(&deploy, &a, &b));
        let c = json!({"metadata": {}, "spec": {"replicas": 2}});
        assert!(!same_generation_view(&deploy, &a, &c));
    }
}
