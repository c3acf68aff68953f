//! A DataJob's children, found through the owner index vs by a scan of the
//! naive cache, on the same objects: 50,000 foreign Pods plus 1,000 DataJobs
//! × 5 worker Pods; and the ownership check the operator makes before each
//! apply, for one DataJob's 5 desired children, all cached and its own.
//!
//! `cargo bench -p policyhost-tests --bench lookup`
//! (`SCALE_LOOKUP_PODS=N` changes the foreign Pod count).
//!
//! Both caches hold every object (the indexed one as slim records, the
//! naive one whole, as typed `Pod`s decoded from JSON), so the figure compares the
//! lookups alone; deployed, the indexed cache would not even hold the
//! foreign Pods. Each iteration asks for the children of the next DataJob.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, GroupVersionKind};
use policyhost::apply::ownership::{self, Verdict};
use policyhost::cache::{
    ChildCache, ChildCaches, ChildRecord, Children, Event, ObjectKey, OwnerKey, Scope,
};
use policyhost::projection::ChildObject;
use policyhost_naive_cache::{FullObject, NaiveCache, NaiveCaches};
use serde_json::{Value, json};

#[path = "../common/foreign.rs"]
mod foreign;

const JOBS: usize = 1_000;

fn rss_mib() -> f64 {
    policyhost_measure::memory(policyhost_measure::Process::This).map_or(0.0, |m| m.rss_mib)
}
const REPLICAS: usize = 5;

fn job_uid(job: usize) -> String {
    format!("20000000-0000-4000-8000-{job:012}")
}

/// Worker `r` of DataJob `job`, as stored: a foreign Pod's bulk with the
/// operator's labels and a DataJob as controller.
fn child(job: usize, r: usize) -> Value {
    let mut pod = foreign::stored(job * REPLICAS + r);
    let meta = &mut pod["metadata"];
    meta["name"] = json!(format!("job-{job:04}-worker-{r}"));
    meta["namespace"] = json!("scale");
    meta["uid"] = json!(format!(
        "30000000-0000-4000-8000-{:012}",
        job * REPLICAS + r
    ));
    meta["labels"] = json!({"policyhost.dev/managed-by": "policyhost",
        "policyhost.dev/datajob": format!("job-{job:04}")});
    meta["annotations"] = json!({"policyhost.dev/applied-hash": "0123456789abcdef"});
    meta["ownerReferences"] = json!([{"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
        "name": format!("job-{job:04}"), "uid": job_uid(job), "controller": true,
        "blockOwnerDeletion": true}]);
    pod
}

fn caches(pods: usize) -> (ChildCaches, NaiveCaches) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
    let indexed = ChildCache::new(resource.clone(), vec![Scope::Cluster]);
    let naive = NaiveCache::new(resource, vec![Scope::Cluster]);
    let wire = || {
        (0..pods)
            .map(foreign::stored)
            .chain((0..JOBS).flat_map(|job| (0..REPLICAS).map(move |r| child(job, r))))
            .map(|object| serde_json::to_vec(&object).expect("serialise"))
    };
    let before = rss_mib();
    for bytes in wire() {
        let slim: ChildObject = serde_json::from_slice(&bytes).expect("a child object");
        indexed
            .store
            .apply(Event::Apply(ChildRecord::from_object(&slim)));
    }
    let middle = rss_mib();
    for bytes in wire() {
        let full: Pod = serde_json::from_slice(&bytes).expect("a Pod");
        naive
            .store
            .apply(Event::Apply(FullObject::Pod(Box::new(full))));
    }
    let after = rss_mib();
    let count = (pods + JOBS * REPLICAS) as f64;
    let each = |mib: f64| mib * 1_048_576.0 / count;
    eprintln!(
        "{count} Pods cached: the slim records grew the process by {:.1} MiB ({:.0} B each), \
         the whole objects by {:.1} MiB ({:.0} B each)",
        middle - before,
        each(middle - before),
        after - middle,
        each(after - middle)
    );
    (
        ChildCaches::new(vec![indexed]),
        NaiveCaches::new(vec![naive]),
    )
}

fn lookups(c: &mut Criterion) {
    let pods = std::env::var("SCALE_LOOKUP_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50_000);
    let (indexed, naive) = caches(pods);
    let uids: Vec<String> = (0..JOBS).map(job_uid).collect();
    let owners: Vec<OwnerKey> = uids
        .iter()
        .map(|uid| OwnerKey::new("scale", uid.as_str()))
        .collect();
    for owner in owners.iter().step_by(97) {
        assert_eq!(indexed.of(owner).len(), REPLICAS);
        assert_eq!(naive.of(owner), indexed.of(owner), "both caches agree");
    }
    let mut group = c.benchmark_group(format!("children-of-a-datajob-among-{pods}-foreign-pods"));
    group.measurement_time(Duration::from_secs(10));
    let mut next = owners.iter().cycle();
    group.bench_function("owner-index", |b| {
        b.iter(|| next.next().map(|owner| black_box(indexed.of(owner))));
    });
    let mut next = owners.iter().cycle();
    group.bench_function("naive-scan", |b| {
        b.iter(|| next.next().map(|owner| black_box(naive.of(owner))));
    });
    group.finish();
    ownership_checks(c, &indexed, &uids);
}

/// `ownership::from_cache` for each of a DataJob's desired children, as
/// `apply::children` asks it before applying a result (the next DataJob at
/// each iteration).
fn ownership_checks(c: &mut Criterion, caches: &ChildCaches, uids: &[String]) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
    let keys: Vec<Vec<ObjectKey>> = (0..JOBS)
        .map(|job| {
            (0..REPLICAS)
                .map(|r| ObjectKey::namespaced("scale", format!("job-{job:04}-worker-{r}")))
                .collect()
        })
        .collect();
    let check = |job: usize| {
        keys[job]
            .iter()
            .map(|key| ownership::from_cache(caches, &resource, key, &uids[job]))
            .filter(|verdict| *verdict == Some(Verdict::Ours))
            .count()
    };
    assert!(
        (0..JOBS).all(|job| check(job) == REPLICAS),
        "every child is the DataJob's own"
    );
    let mut group = c.benchmark_group(format!("ownership-check-of-{REPLICAS}-children"));
    group.measurement_time(Duration::from_secs(10));
    let mut next = (0..JOBS).cycle();
    group.bench_function("from-cache", |b| {
        b.iter(|| black_box(check(next.next().unwrap_or(0))));
    });
    group.finish();
}

criterion_group!(benches, lookups);
criterion_main!(benches);
