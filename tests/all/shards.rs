//! Shards: `policyhost run --shards` replicas split the DataJobs by the
//! hash of their uid. Each holds a member Lease; each DataJob is served by
//! one replica; a killed replica's buckets are served again once its Lease
//! has expired. Each replica has an identity of its own, which the request
//! log records with every request, so the log says who wrote what.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::cluster::{Env, eventually, phase};
use crate::common::process::{Replica, policyhost, text};
use crate::common::replicas::{LEASE, RETRY, ops_namespace, replica_args, replica_identity};
use crate::common::requests::Request;

/// Scheduling slack on a loaded machine.
const SLACK: Duration = Duration::from_secs(3);
/// The buckets the hash space is cut into.
const BUCKETS: u64 = 64;

/// Replicas `shard-0`, `shard-1`, … and the users they authenticate as.
struct Shards {
    replicas: Vec<Replica>,
    identities: Vec<String>,
}

impl Shards {
    async fn start(env: &Env, ops: &str, count: usize) -> Self {
        let base = env.kubeconfig_file();
        let args = replica_args(env, ops);
        let args: Vec<&str> = std::iter::once("--shards")
            .chain(args.iter().map(String::as_str))
            .collect();
        let scratch = crate::common::scratch();
        let mut replicas = Vec::new();
        let mut identities = Vec::new();
        for i in 0..count {
            let name = format!("shard-{i}");
            let kubeconfig = scratch.join(format!("{}-{name}.kubeconfig", env.namespace));
            identities.push(replica_identity(env, &base, ops, &name, &kubeconfig).await);
            let args: Vec<&str> = args
                .iter()
                .copied()
                .chain(["--leader-identity", name.as_str()])
                .collect();
            replicas.push(Replica::start(&name, &kubeconfig, &args));
        }
        Self {
            replicas,
            identities,
        }
    }
}

/// The buckets a replica serves, from its metrics.
fn buckets(replica: &Replica) -> Option<u64> {
    let (_, metrics) = replica.get("/metrics")?;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("policyhost_shard_buckets "))
        .and_then(|n| n.trim().parse().ok())
}

/// Waits until each of `replicas` serves some buckets and together all of
/// them, each its own (no bucket is served twice: the sum is exact).
async fn wait_split(replicas: &[&Replica]) -> Vec<u64> {
    let names: Vec<&str> = replicas.iter().map(|r| r.name.as_str()).collect();
    eventually(
        &format!("{names:?} to split the {BUCKETS} buckets"),
        || async {
            let shares: Option<Vec<u64>> = replicas.iter().map(|r| buckets(r)).collect();
            shares.filter(|s| s.iter().all(|&n| n > 0) && s.iter().sum::<u64>() == BUCKETS)
        },
    )
    .await
}

/// Who wrote each DataJob's status: the identities, by DataJob name.
fn status_writers(log: &[Request]) -> BTreeMap<String, BTreeSet<String>> {
    let mut writers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in log {
        if r.resource == "datajobs" && r.subresource == "status" && r.verb == "patch" {
            writers
                .entry(r.name.clone())
                .or_default()
                .insert(r.identity.clone());
        }
    }
    writers
}

/// Fanout params: one Pod that finishes at once.
fn quick() -> serde_json::Value {
    json!({
        "replicas": 1,
        "image": "busybox:1.36",
        "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "0"},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_serve_each_datajob_once_and_take_over_a_killed_ones_share() {
    // The test control plane runs with `ShardedListAndWatch` on, as
    // devcluster does by default: the server filters the DataJobs.
    three_shards(Env::cluster_only().await, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_feature_gate_each_shard_keeps_only_its_own_datajobs() {
    let env = Env::cluster_with(devcluster::Features {
        sharded_list_and_watch: false,
    })
    .await;
    if env.cluster.is_none() {
        eprintln!("skipped: the real control plane runs with the feature gate on");
        return;
    }
    three_shards(env, false).await;
}

/// Three shards serve 24 DataJobs, each by one of them; one is killed and
/// the other two serve its buckets and 12 DataJobs more. `server_filters`:
/// whether the shards must have found the server applying their selector.
async fn three_shards(env: Env, server_filters: bool) {
    let Some(requests) = env.requests() else {
        eprintln!("skipped: needs a request log (devcluster's, or the API server's audit log)");
        return;
    };
    let ops = ops_namespace(&env).await;
    let mut shards = Shards::start(&env, &ops, 3).await;
    let split = wait_split(&shards.replicas.iter().collect::<Vec<_>>()).await;
    eprintln!("buckets per shard: {split:?}");
    let said = if server_filters {
        "the API server filters DataJobs by shard"
    } else {
        "the API server ignores shard selectors"
    };
    for replica in &shards.replicas {
        assert!(
            replica.logs().contains(said),
            "{}: {}",
            replica.name,
            replica.logs()
        );
    }

    let first: Vec<String> = (0..24).map(|i| format!("first-{i}")).collect();
    for name in &first {
        env.create_job(name, "fanout", quick()).await;
    }
    for name in &first {
        env.wait_job(name, "Succeeded", |j| phase(j) == Some("Succeeded"))
            .await;
    }
    let writers = status_writers(&requests.all());
    for name in &first {
        let by = writers.get(name).cloned().unwrap_or_default();
        assert_eq!(by.len(), 1, "{name}'s status was written by {by:?}");
    }
    let serving: BTreeSet<&String> = first
        .iter()
        .flat_map(|name| writers.get(name).into_iter().flatten())
        .collect();
    assert!(
        serving.len() >= 2,
        "24 DataJobs were served by {serving:?} alone"
    );
    // `policyhost status` names the shard serving a DataJob: the one that
    // wrote its status.
    let kubeconfig = env.kubeconfig_file();
    let target = format!("{}/{}", env.namespace, first[0]);
    let out = policyhost(&[
        "status",
        &target,
        "--kubeconfig",
        kubeconfig.to_str().expect("a UTF-8 path"),
    ]);
    let status = text(&out);
    let writer = writers[&first[0]].iter().next().expect("a writer").clone();
    let shard_line = status
        .lines()
        .find(|line| line.starts_with("Shard:"))
        .unwrap_or_else(|| panic!("no Shard line:\n{status}"));
    let served_by = shard_line.rsplit(' ').next().unwrap_or_default();
    assert!(
        served_by.starts_with("shard-") && writer.ends_with(served_by),
        "{shard_line}; {} was written by {writer}",
        first[0]
    );

    let killed_identity = shards.identities[2].clone();
    let mut killed = shards.replicas.pop().expect("three replicas");
    killed.signal("KILL");
    let at = Instant::now();
    let _ = killed.wait();
    let split = wait_split(&shards.replicas.iter().collect::<Vec<_>>()).await;
    let takeover = at.elapsed();
    eprintln!("buckets per shard {takeover:?} after shard-2 was killed: {split:?}");
    // The others count shard-2 dead a lease duration after they last saw
    // its Lease change (at most a retry period before the kill), then
    // claim its buckets, list them and serve them a round or two later.
    assert!(
        takeover <= LEASE + RETRY * 6 + SLACK,
        "shard-2's buckets served again after {takeover:?} (lease duration {LEASE:?})"
    );

    let second: Vec<String> = (0..12).map(|i| format!("second-{i}")).collect();
    for name in &second {
        env.create_job(name, "fanout", quick()).await;
    }
    for name in &second {
        env.wait_job(name, "Succeeded after the kill", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
    }
    let writers = status_writers(&requests.all());
    for name in &second {
        let by = writers.get(name).cloned().unwrap_or_default();
        assert_eq!(by.len(), 1, "{name}'s status was written by {by:?}");
        assert!(
            !by.contains(&killed_identity),
            "{name} was served by the killed shard"
        );
    }

    for replica in &mut shards.replicas {
        replica.signal("TERM");
        assert!(replica.wait().success(), "{}", replica.logs());
    }
}
