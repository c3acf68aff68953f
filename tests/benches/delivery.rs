//! Policy delivery benchmark: the time from a policy ConfigMap's update to
//! the new digest serving, with a compile (a digest never seen: cache miss),
//! without (a digest compiled before: cache hit), and by rollback (the
//! ConfigMap asks for a version served before, `data.revision`: its
//! revision is read, then a hit); and the time until the DataJobs of the
//! policy have been reconciled by the new version.
//!
//! ```sh
//! cargo xtask guests
//! cargo bench -p policyhost-tests --bench delivery
//! DELIVERY_BENCH_MISSES=50 DELIVERY_BENCH_HITS=200 DELIVERY_BENCH_ROLLBACKS=100 cargo bench -p policyhost-tests --bench delivery
//! ```
//!
//! devcluster and the operator (watching the policy ConfigMaps of its
//! namespace) run in this process. Each sample server-side applies the
//! `fanout` ConfigMap with another version (fanout with a custom section
//! appended: same code, another digest), starts the clock when the request
//! is sent and stops it when the operator's registry serves the new digest:
//! the watch event, decoding, digest and pin check, compile or cache hit,
//! world and import checks, the trial instantiation and the swap. The next
//! sample starts once the operator has reported on the ConfigMap.

#[path = "../common/mod.rs"]
mod common;

use common::bench::env_number;
use common::for_every_namespace;
use common::variants::version;
use policyhost_measure::{load_average_text, percentile_ms};

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::{Env, OperatorSetup};
use kube::api::ListParams;
use policyhost::crd::DataJob;
use policyhost::policies::configmap::{self, Compression};
use policyhost::publisher::publish;
use policyhost::runtime::Digest;
use serde_json::json;

/// DataJobs of the policy, re-reconciled on every swap.
const JOBS: usize = 10;

fn main() {
    common::bench::block_on(bench());
}

struct Sample {
    serving: Duration,
    reconciled: Duration,
}

/// Pushes `component`; returns when the registry serves it and when the
/// status of each of the `job_count` DataJobs names it.
async fn swap(env: &Env, component: &[u8], job_count: usize) -> Sample {
    let map = configmap::build(
        "fanout",
        &env.policy_namespace,
        component,
        &for_every_namespace(),
        Compression::Auto,
    )
    .expect("a policy ConfigMap");
    apply(env, &map, Digest::of(component), job_count).await
}

/// Applies `map`, which serves `digest`; returns when the registry serves
/// it and when the status of each of the `job_count` DataJobs names it.
async fn apply(
    env: &Env,
    map: &k8s_openapi::api::core::v1::ConfigMap,
    digest: Digest,
    job_count: usize,
) -> Sample {
    let digest = digest.to_hex();
    let registry = &env.operator().shared.registry;
    let mut changes = registry.subscribe();
    let started = Instant::now();
    publish::apply(&env.client, map).await.expect("apply");
    let serves = || {
        registry
            .get("fanout")
            .is_ok_and(|p| p.digest().to_hex() == digest)
    };
    while !serves() {
        tokio::time::timeout(Duration::from_secs(60), changes.recv())
            .await
            .expect("the new version within a minute")
            .expect("the registry's change feed");
    }
    let serving = started.elapsed();
    let api = env.jobs();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = api.list(&ListParams::default()).await.map(|l| l.items);
        let done = list.as_ref().is_ok_and(|list| {
            list.len() == job_count && list.iter().all(|j| acted(j) == Some(digest.as_str()))
        });
        if done {
            break;
        }
        if Instant::now() > deadline {
            // Say what is stuck: which DataJobs, under which digest, in which state.
            let jobs: Vec<String> = list
                .unwrap_or_default()
                .iter()
                .map(|j| {
                    let ready = j.status.as_ref().and_then(|s| {
                        s.conditions
                            .iter()
                            .find(|c| c.type_ == "Ready")
                            .map(|c| format!("Ready={} {}: {}", c.status, c.reason, c.message))
                    });
                    format!(
                        "{} acted={:?} {:?}",
                        j.metadata.name.as_deref().unwrap_or_default(),
                        acted(j).map(|d| &d[..12]),
                        ready
                    )
                })
                .collect();
            panic!(
                "after 60 s, not every DataJob was reconciled by {}; the registry serves {:?}:\n{}",
                &digest[..12],
                registry.get("fanout").map(|p| p.digest().to_hex()).ok(),
                jobs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let reconciled = started.elapsed();
    publish::wait_observed(&env.client, map, Duration::from_secs(60))
        .await
        .expect("the operator reports on the ConfigMap");
    Sample {
        serving,
        reconciled,
    }
}

/// The digest that last acted on a DataJob, as its status records it.
fn acted(job: &DataJob) -> Option<&str> {
    job.status
        .as_ref()
        .and_then(|s| s.policy.as_ref())
        .map(|p| p.digest.as_str())
}

fn report(what: &str, samples: &[Sample]) {
    for (measure, pick) in [
        (
            "new digest serving",
            (|s: &Sample| s.serving) as fn(&Sample) -> Duration,
        ),
        ("all DataJobs reconciled by it", |s: &Sample| s.reconciled),
    ] {
        let mut times: Vec<Duration> = samples.iter().map(pick).collect();
        times.sort();
        let ms = |q: f64| percentile_ms(&times, q);
        println!(
            "{what:<10} {measure:<31} n={:<4} p50 {:>7.1} ms  p90 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
            times.len(),
            ms(0.50),
            ms(0.90),
            ms(0.99),
            ms(1.0),
        );
    }
}

async fn bench() {
    let misses = env_number("DELIVERY_BENCH_MISSES", 30);
    let hits = env_number("DELIVERY_BENCH_HITS", 100);
    let rollbacks = env_number("DELIVERY_BENCH_ROLLBACKS", 50);
    let mut setup = OperatorSetup::configmaps();
    setup.workers = 8;
    // `DELIVERY_BENCH_HISTORY=0`: no revision kept (and no rollback).
    setup.policy_history = env_number(
        "DELIVERY_BENCH_HISTORY",
        policyhost::policies::revisions::DEFAULT_KEEP,
    );
    let env = Env::start_with(setup).await;
    let fanout = common::guest_bytes("fanout");
    // A run id: the cache-miss versions are digests no run compiled before.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let (a, b) = (version(&fanout, "hit-a"), version(&fanout, "hit-b"));
    swap(&env, &a, 0).await;
    for i in 0..JOBS {
        env.create_job(
            &format!("bench-{i}"),
            "fanout",
            json!({"replicas": 1, "image": "busybox",
                "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "-1"}}),
        )
        .await;
    }
    swap(&env, &b, JOBS).await;
    println!(
        "delivery bench: {misses} cache misses, {hits} cache hits, {rollbacks} rollbacks, {JOBS} DataJobs; load average {} at start",
        load_average_text()
    );

    let mut compiled = Vec::new();
    let mut created = Vec::new();
    for i in 0..misses {
        let component = version(&fanout, &format!("miss-{run}-{i}"));
        created.push(Digest::of(&component));
        compiled.push(swap(&env, &component, JOBS).await);
    }
    let mut cached = Vec::new();
    for i in 0..hits {
        cached.push(swap(&env, if i % 2 == 0 { &a } else { &b }, JOBS).await);
    }
    // Back and forth between a and b again, each time by rollback.
    let mut rolled = Vec::new();
    for i in 0..rollbacks {
        let digest = Digest::of(if i % 2 == 0 { &a } else { &b });
        let map = configmap::rollback("fanout", &env.policy_namespace, digest);
        rolled.push(apply(&env, &map, digest, JOBS).await);
    }
    report("miss", &compiled);
    report("hit", &cached);
    report("rollback", &rolled);
    println!("load average {} at the end", load_average_text());
    for line in env.operator().metrics.render().lines().filter(|l| {
        l.starts_with("policyhost_policy_load_duration_seconds_sum")
            || l.starts_with("policyhost_policy_load_duration_seconds_count")
            || l.starts_with("policyhost_reconcile_total")
    }) {
        println!("{line}");
    }
    // The compiled code of the one-off versions is of no further use.
    let cache = common::compile_cache();
    if let Ok(entries) = std::fs::read_dir(&cache) {
        let names: Vec<String> = created.iter().map(Digest::to_hex).collect();
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if names.iter().any(|n| file.starts_with(n.as_str())) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
