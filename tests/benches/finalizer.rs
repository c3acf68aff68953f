//! Finalizer benchmark: N DataJobs (default 1,000) deleted at once, each
//! with a cleanup that succeeds at once; the time from the deletion to the
//! release of each one's finalizer (its `DELETED` watch event).
//!
//! ```sh
//! cargo xtask guests
//! cargo bench -p policyhost-tests --bench finalizer
//! FINALIZER_BENCH_JOBS=5000 FINALIZER_BENCH_QPS=1000 cargo bench -p policyhost-tests --bench finalizer
//! cargo xtask bench finalizer --real     # on devcluster, then on the real control plane
//! ```
//!
//! devcluster and the operator (8 workers, the default write limit unless
//! `FINALIZER_BENCH_QPS` says otherwise) run in this process; with
//! `POLICYHOST_TEST_KUBECONFIG` set, the cluster is that one instead (see
//! `tests/common/cluster.rs`). The DataJobs run the `flaky-cleanup` policy with no
//! planned failure and one ConfigMap child each. They are deleted twice over:
//! once with one `deletecollection` request (all at once, the clock starts
//! when it is sent), once with one DELETE per DataJob, 64 in flight (each
//! clock starts when its own request is sent).

#[path = "../common/mod.rs"]
mod common;

use common::bench::env_number;
use policyhost_measure::{load_average_text, percentile_ms};

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{Env, OperatorSetup, eventually_within, phase, real_kubeconfig};
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::vocabulary::FINALIZER;
use serde_json::json;

fn main() {
    common::bench::block_on(bench());
}

/// How long the setup and the releases may take: the real control plane
/// writes at tens of objects per second on a small machine, so creating and
/// reconciling 1,000 DataJobs (four writes each) takes minutes there, not
/// the tests' 60 s. Only the releases are measured.
const PATIENCE: Duration = Duration::from_secs(900);

/// When each DataJob's `DELETED` event arrived.
type Released = Arc<Mutex<HashMap<String, Instant>>>;

async fn bench() {
    let jobs = env_number("FINALIZER_BENCH_JOBS", 1000);
    let mut setup = OperatorSetup::with(&["flaky-cleanup"]);
    setup.workers = 8;
    if let Some(qps) = NonZeroU32::new(env_number("FINALIZER_BENCH_QPS", 0)) {
        setup.api_qps = Some(qps);
    }
    let env = Env::start_with(setup).await;
    let server = real_kubeconfig().map_or("devcluster (in process)".to_owned(), |path| {
        format!("the cluster of {}", path.display())
    });
    println!(
        "finalizer bench on {server}: {jobs} DataJobs, load average {} at start",
        load_average_text()
    );
    for (round, by_collection) in [("deletecollection", true), ("one DELETE each", false)] {
        run_round(&env, jobs, round, by_collection).await;
    }
    println!("load average {} at the end", load_average_text());
    let metrics = env.operator().metrics.render();
    for line in metrics.lines().filter(|l| {
        l.starts_with("policyhost_cleanup_total")
            || l.starts_with("policyhost_finalizer_conflicts_total")
            || l.starts_with("policyhost_cleanup_duration_seconds_sum")
            || l.starts_with("policyhost_cleanup_duration_seconds_count")
    }) {
        println!("  {line}");
    }
}

async fn run_round(env: &Env, jobs: u32, round: &str, by_collection: bool) {
    let started = Instant::now();
    futures::stream::iter(0..jobs)
        .map(|i| {
            let api = env.jobs();
            async move {
                let job = DataJob::new(
                    &format!("bench-{i}"),
                    DataJobSpec {
                        policy: "flaky-cleanup".into(),
                        params: json!({}).as_object().cloned().unwrap_or_default(),
                        ..DataJobSpec::default()
                    },
                );
                api.create(&PostParams::default(), &job).await
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await
        .expect("create the DataJobs");
    let api = env.jobs();
    eventually_within(
        "every DataJob reconciled with its finalizer",
        PATIENCE,
        || {
            let api = api.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let list = api.list(&ListParams::default()).await.ok()?;
                let ready = list
                    .items
                    .iter()
                    .filter(|j| {
                        phase(j) == Some("Running")
                            && j.finalizers().iter().any(|f| f == FINALIZER)
                            && j.status
                                .as_ref()
                                .and_then(|s| s.children.as_ref())
                                .is_some_and(|c| c.total == 1)
                    })
                    .count();
                (ready == jobs as usize).then_some(())
            }
        },
    )
    .await;
    // Let the operator go idle and its write bucket refill (burst / qps = 2 s),
    // so the deletion does not queue behind the creation's last writes.
    let queue = Arc::clone(&env.operator().shared.queue);
    eventually_within("the operator idle", PATIENCE, || {
        let queue = Arc::clone(&queue);
        async move {
            (queue.is_empty() && queue.in_flight() == 0 && queue.delayed() == 0).then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "\n[{round}] {jobs} DataJobs created and reconciled in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // A watcher of our own, synced before the deletion.
    let released: Released = Arc::default();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let sink = Arc::clone(&released);
    let watch = tokio::spawn({
        let events = watcher(env.jobs(), watcher::Config::default()).default_backoff();
        async move {
            let mut synced = Some(synced_tx);
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Delete(job)) => {
                        sink.lock()
                            .expect("released")
                            .insert(job.name_any(), Instant::now());
                    }
                    _ => {}
                }
            }
        }
    });
    synced_rx.await.expect("the watch synced");

    let load = load_average_text();
    let mut deleted_at: HashMap<String, Instant> = HashMap::new();
    let t0 = Instant::now();
    if by_collection {
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .expect("deletecollection");
        println!(
            "[{round}] the deletecollection request took {:.0} ms",
            t0.elapsed().as_secs_f64() * 1000.0
        );
        for i in 0..jobs {
            deleted_at.insert(format!("bench-{i}"), t0);
        }
    } else {
        let sent: Vec<(String, Instant)> = futures::stream::iter(0..jobs)
            .map(|i| {
                let api = api.clone();
                async move {
                    let name = format!("bench-{i}");
                    let at = Instant::now();
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .expect("delete");
                    (name, at)
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        println!(
            "[{round}] {jobs} DELETE requests sent in {:.0} ms",
            t0.elapsed().as_secs_f64() * 1000.0
        );
        deleted_at.extend(sent);
    }
    eventually_within("every DataJob released", PATIENCE, || {
        let released = Arc::clone(&released);
        async move { (released.lock().expect("released").len() >= jobs as usize).then_some(()) }
    })
    .await;
    let last = t0.elapsed();
    watch.abort();

    let released = released.lock().expect("released").clone();
    let mut latencies: Vec<Duration> = deleted_at
        .iter()
        .map(|(name, at)| released[name].saturating_duration_since(*at))
        .collect();
    latencies.sort();
    let pick = |q: f64| percentile_ms(&latencies, q);
    println!(
        "[{round}] deletion -> finalizer released: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
         all released {:.2} s after the first deletion; load average {load} before the deletion, {} after",
        pick(0.50),
        pick(0.90),
        pick(0.99),
        pick(1.0),
        last.as_secs_f64(),
        load_average_text()
    );
    // The children go by garbage collection before the next round: on a
    // real control plane, kube-controller-manager's collector deletes them
    // within its client's rate limit (20 requests/s by default), which takes
    // longer than the tests' patience.
    let collected = Instant::now();
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    eventually_within("the children garbage-collected", PATIENCE, || {
        let config_maps = config_maps.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let params = ListParams::default().labels("policyhost.dev/managed-by");
            let list = config_maps.list(&params).await.ok()?;
            list.items.is_empty().then_some(())
        }
    })
    .await;
    println!(
        "[{round}] the children garbage-collected {:.1} s after the last release",
        collected.elapsed().as_secs_f64()
    );
}
