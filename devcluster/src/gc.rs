//! The garbage collector, namespace and claim protection controllers: ownerReference
//! cascades (background, foreground, orphan), emptying terminating namespaces, and
//! releasing deleting claims no Pod uses, run asynchronously after writes.

use std::sync::Arc;

use crate::kinds::{CLAIM_PROTECTION, NAMESPACE_FINALIZER, in_use};
use crate::object::GroupResource;
use crate::object::ObjectKey;
use crate::ops::{self, DeleteOptions, FOREGROUND, ORPHAN, Propagation, Target, Writer};
use crate::resource::Registry;
use crate::store::{GcWork, Store, Txn};

/// How many work items one lock hold may process before letting requests in.
const BATCH: usize = 256;

/// Runs until the store is dropped: waits for queued work and processes it.
pub(crate) async fn run(store: Arc<Store>, registry: Arc<Registry>, rng: Arc<crate::rand::Rng>) {
    loop {
        store.gc_wake.notified().await;
        while batch(&store, &registry, &rng) {
            tokio::task::yield_now().await;
        }
    }
}

/// Processes up to [`BATCH`] items; `true` when more may be queued.
fn batch(store: &Store, registry: &Registry, rng: &crate::rand::Rng) -> bool {
    let mut txn = store.lock();
    let writer = Writer {
        registry,
        rng,
        strict: false,
        manager: Some("kube-controller-manager"),
    };
    for _ in 0..BATCH {
        let Some(work) = txn.next_gc() else {
            return false;
        };
        step(&writer, &mut txn, work);
    }
    true
}

fn step(w: &Writer<'_>, txn: &mut Txn<'_>, work: GcWork) {
    match work {
        GcWork::Owner(uid) => {
            for (gr, key) in txn.dependents(&uid) {
                txn.queue_gc(GcWork::Object(gr, key));
            }
        }
        GcWork::Object(gr, key) => {
            if let Err(error) = object(w, txn, &gr, &key) {
                tracing::debug!(resource = %gr.qualified(), name = %key.name, %error, "garbage collection step failed");
            }
        }
    }
}

fn object(
    w: &Writer<'_>,
    txn: &mut Txn<'_>,
    gr: &GroupResource,
    key: &ObjectKey,
) -> crate::status::Result<()> {
    let Some(obj) = txn.get(gr, key) else {
        return Ok(());
    };
    let Some(rt) = w.registry.get(gr) else {
        return Ok(());
    };
    let uid = obj.meta.uid.clone();
    if gr.group.is_empty() && gr.resource == "namespaces" {
        return namespace(w, txn, key);
    }
    // The claim protection controller: a deleting claim goes once no Pod uses it.
    if gr.group.is_empty()
        && gr.resource == "persistentvolumeclaims"
        && obj.meta.deleting
        && obj.meta.finalizers.iter().any(|f| f == CLAIM_PROTECTION)
        && !in_use(txn, &key.namespace, &key.name)
    {
        w.set_finalizers(txn, &rt, key, |f| f.retain(|x| x != CLAIM_PROTECTION))?;
        return Ok(());
    }
    if obj.meta.deleting && obj.meta.finalizers.iter().any(|f| f == ORPHAN) {
        for (dgr, dkey) in txn.dependents(&uid) {
            let Some(drt) = w.registry.get(&dgr) else {
                continue;
            };
            let Some(dep) = txn.get(&dgr, &dkey) else {
                continue;
            };
            let mut v = dep.value().map_err(crate::status::internal)?;
            if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str() != Some(uid.as_str()));
                if refs.is_empty()
                    && let Some(m) = v["metadata"].as_object_mut()
                {
                    m.remove("ownerReferences");
                }
            }
            w.patch(txn, &Target::of(&drt, &dkey.namespace, &dkey.name), |_| {
                Ok(v)
            })?;
        }
        w.set_finalizers(txn, &rt, key, |f| f.retain(|x| x != ORPHAN))?;
        return Ok(());
    }
    if obj.meta.deleting && obj.meta.finalizers.iter().any(|f| f == FOREGROUND) {
        let mut blocking = false;
        for (dgr, dkey) in txn.dependents(&uid) {
            let Some(drt) = w.registry.get(&dgr) else {
                continue;
            };
            let Some(dep) = txn.get(&dgr, &dkey) else {
                continue;
            };
            if dep.meta.owners.iter().any(|o| o.uid == uid && o.block) {
                blocking = true;
            }
            if !dep.meta.deleting {
                let opts = DeleteOptions {
                    propagation: Some(Propagation::Foreground),
                    ..DeleteOptions::default()
                };
                let target = Target::of(&drt, &dkey.namespace, &dkey.name);
                if let ops::Deleted::Now(_) = w.delete(txn, &target, &opts)? {
                    continue;
                }
            }
        }
        if !blocking {
            w.set_finalizers(txn, &rt, key, |f| f.retain(|x| x != FOREGROUND))?;
        }
        return Ok(());
    }
    if !obj.meta.owners.is_empty() {
        let (alive, dangling): (Vec<_>, Vec<_>) = obj
            .meta
            .owners
            .iter()
            .partition(|o| txn.by_uid(&o.uid).is_some());
        if dangling.is_empty() {
            return Ok(());
        }
        if alive.is_empty() {
            if !obj.meta.deleting {
                let target = Target::of(&rt, &key.namespace, &key.name);
                w.delete(txn, &target, &DeleteOptions::default())?;
            }
        } else {
            let gone: Vec<String> = dangling.iter().map(|o| o.uid.clone()).collect();
            let mut v = obj.value().map_err(crate::status::internal)?;
            if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| {
                    !r["uid"]
                        .as_str()
                        .is_some_and(|u| gone.iter().any(|g| g == u))
                });
            }
            w.patch(txn, &Target::of(&rt, &key.namespace, &key.name), |_| Ok(v))?;
        }
    }
    Ok(())
}

/// A terminating namespace: delete its content, then release it.
fn namespace(w: &Writer<'_>, txn: &mut Txn<'_>, key: &ObjectKey) -> crate::status::Result<()> {
    let ns_gr = GroupResource::new("", "namespaces");
    let Some(ns) = txn.get(&ns_gr, key) else {
        return Ok(());
    };
    if !ns.meta.deleting {
        return Ok(());
    }
    let content = txn.in_namespace(&key.name);
    for (gr, k) in &content {
        let Some(rt) = w.registry.get(gr) else {
            continue;
        };
        if let Some(o) = txn.get(gr, k)
            && !o.meta.deleting
        {
            let target = Target::of(&rt, &k.namespace, &k.name);
            w.delete(txn, &target, &DeleteOptions::default())?;
        }
    }
    if !txn.in_namespace(&key.name).is_empty() {
        return Ok(());
    }
    let mut v = ns.value().map_err(crate::status::internal)?;
    if let Some(f) = v["spec"]["finalizers"].as_array_mut() {
        f.retain(|x| x.as_str() != Some(NAMESPACE_FINALIZER));
    }
    let spec_empty = v["spec"]["finalizers"].as_array().is_none_or(Vec::is_empty);
    if spec_empty && ns.meta.finalizers.is_empty() {
        let gone = txn
            .remove(&ns_gr, key, v)
            .map_err(crate::status::internal)?;
        if let Some(rt) = w.registry.get(&ns_gr) {
            w.after_remove(txn, &rt, &gone);
        }
    } else {
        txn.put(&ns_gr, v).map_err(crate::status::internal)?;
    }
    Ok(())
}
