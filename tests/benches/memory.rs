//! Memory follows what is in service: the operator's RSS after one version
//! of a heavy policy (a 12 MiB data segment) is in service, after 50 swaps
//! between distinct versions, and after the policy is deleted.
//!
//! ```sh
//! cargo xtask guests && cargo build -p policyhost
//! cargo bench -p policyhost-tests --bench memory --profile dev
//! MEMORY_BENCH_SWAPS=50 MEMORY_BENCH_DATA_MIB=12 cargo bench -p policyhost-tests --bench memory --profile dev
//! MEMORY_BENCH_HOLD=60 cargo bench ...   # keeps the operator 60 s more, for /proc/<pid>/smaps
//! ```
//!
//! devcluster runs in this process; the operator is the `policyhost` binary
//! of the bench's profile (with `--release`, build the binary with
//! `--release` too), run as its own process as `deploy/` runs it, so its
//! `VmRSS` is the operator's alone. Each version is `fanout`
//! with a data segment of its own bytes (another digest, other compiled
//! code, another memory image), published as a gzip'd ConfigMap; one
//! DataJob of the policy is reconciled by each version before the next is
//! pushed, so every version has been instantiated from the pool.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::bench::env_number;
use common::cluster::Env;
use common::process::Replica;
use common::variants;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};
use policyhost::crd::DataJob;
use policyhost::policies::access::Access;
use policyhost::policies::configmap::{self, Compression, Settings};
use policyhost::publisher::publish;
use policyhost::runtime::Digest;
use policyhost_measure::{Process, load_average_text, memory};
use serde_json::json;

const POLICY: &str = "ballast";
const JOB: &str = "ballast-job";

fn main() {
    common::bench::block_on(bench());
}

/// The digest that last acted on a DataJob, as its status records it.
fn acted(job: &DataJob) -> Option<String> {
    job.status
        .as_ref()
        .and_then(|s| s.policy.as_ref())
        .map(|p| p.digest.clone())
}

/// Publishes `component` and waits until the DataJob was reconciled by it.
async fn swap(env: &Env, component: &[u8]) {
    let digest = Digest::of(component).to_hex();
    let settings = Settings {
        namespaces: Access::parse(&env.namespace),
        ..Settings::default()
    };
    let map = configmap::build(
        POLICY,
        &env.policy_namespace,
        component,
        &settings,
        Compression::Always,
    )
    .expect("a policy ConfigMap");
    publish::apply(&env.client, &map).await.expect("apply");
    let verdict = publish::wait_observed(&env.client, &map, Duration::from_secs(120))
        .await
        .expect("the operator's verdict");
    assert_eq!(verdict.error, None, "the version loads");
    let jobs: Api<DataJob> = env.jobs();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let job = jobs.get_opt(JOB).await.ok().flatten();
        if job.as_ref().and_then(acted).as_deref() == Some(digest.as_str()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the DataJob was not reconciled by {digest}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The operator's RSS and peak, MiB, once it has settled.
async fn rss(replica: &Replica) -> (f64, f64) {
    // Freed pages go back at once (mimalloc's purge delay is 0), but a
    // call's store and the pool's decommit batch finish just after the
    // status write this bench waits for.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let measured = memory(Process::Pid(replica.pid())).expect("the operator runs");
    (measured.rss_mib, measured.peak_mib)
}

async fn bench() {
    let swaps: u64 = env_number("MEMORY_BENCH_SWAPS", 50);
    let data_mib: usize = env_number("MEMORY_BENCH_DATA_MIB", 12);
    println!("{}", load_average_text());
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let replica = Replica::start(
        "memory",
        &kubeconfig,
        &[
            "--namespace",
            &env.namespace,
            "--policy-namespace",
            &env.policy_namespace,
            "--lease-namespace",
            &env.namespace,
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while replica.get("/readyz").is_none_or(|(code, _)| code != 200) {
        assert!(
            Instant::now() < deadline,
            "the operator is not ready: {}",
            replica.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (idle, _) = rss(&replica).await;

    let fanout = common::guest_bytes("fanout");
    let version = |i: u64| variants::with_data_segment(&fanout, data_mib << 20, i);
    // The DataJob first: it waits for its policy, then each version
    // reconciles it.
    env.create_job(JOB, POLICY, json!({"replicas": 1, "image": "busybox"}))
        .await;
    swap(&env, &version(0)).await;
    let (one, _) = rss(&replica).await;

    let started = Instant::now();
    for i in 1..=swaps {
        swap(&env, &version(i)).await;
    }
    let took = started.elapsed();
    let (after_swaps, peak) = rss(&replica).await;

    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    maps.delete(&configmap::configmap_name(POLICY), &DeleteParams::default())
        .await
        .expect("delete the policy ConfigMap");
    // The policy is out of service once the DataJob says so.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = env.jobs().get_opt(JOB).await.ok().flatten();
        let unavailable = job
            .and_then(|j| j.status)
            .is_some_and(|s| s.conditions.iter().any(|c| c.reason == "PolicyUnavailable"));
        if unavailable {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the DataJob does not report the policy gone"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (deleted, _) = rss(&replica).await;

    println!("versions: fanout + {data_mib} MiB data segment, {swaps} swaps in {took:.1?}");
    println!("operator RSS, MiB:");
    println!("  idle, no policy              {idle:>7.1}");
    println!("  one version in service       {one:>7.1}");
    println!("  after {swaps:>3} swaps              {after_swaps:>7.1}  (peak {peak:.1})");
    println!("  policy deleted               {deleted:>7.1}");
    println!("  after swaps - one version    {:>7.1}", after_swaps - one);
    if let Ok(hold) = std::env::var("MEMORY_BENCH_HOLD") {
        println!("operator pid {}", replica.pid());
        tokio::time::sleep(Duration::from_secs(hold.parse().unwrap_or(60))).await;
    }
    println!("largest mappings after deletion (RSS, MiB):");
    for (name, rss) in mappings(replica.pid()).into_iter().take(8) {
        println!("  {rss:>7.1}  {name}");
    }
}

/// Resident memory of `pid` by mapping name (`[anon]` for anonymous
/// memory), largest first.
fn mappings(pid: u32) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut by_name: std::collections::BTreeMap<String, f64> = Default::default();
    let mut current = String::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            current = fields
                .get(5..)
                .map(|rest| rest.join(" "))
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "[anon]".into());
        } else if fields.first() == Some(&"Rss:") {
            let kib: f64 = fields.get(1).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            *by_name.entry(current.clone()).or_default() += kib / 1024.0;
        }
    }
    let mut list: Vec<(String, f64)> = by_name.into_iter().collect();
    list.sort_by(|a, b| b.1.total_cmp(&a.1));
    list
}
