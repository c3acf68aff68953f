//! Leader election with two `policyhost run` processes against one
//! devcluster: one leads, the other follows with warm caches and takes over
//! when the leader is killed or cut off; a deposed leader sends no write.
//!
//! Each replica presents its own bearer token, which devcluster records as
//! the identity of every request, with its arrival order.

use std::time::{Duration, Instant};

use devcluster::counters::Request;
use devcluster::{DevCluster, Faults};
use serde_json::json;

use crate::common::cluster::{Env, create_namespace, eventually, phase};
use crate::common::process::{Replica, kubeconfig_with_token, policy_dir};

/// Election timing of the test replicas: short, so failover takes seconds.
const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);
/// Scheduling slack on a loaded machine.
const SLACK: Duration = Duration::from_millis(1500);

const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// A namespace for the replicas' Lease, like `policyhost-system`.
async fn ops_namespace(env: &Env) -> String {
    let name = format!("{}-ops", env.namespace);
    create_namespace(&env.client, &name).await;
    name
}

/// Two replicas, `replica-a` leading and `replica-b` following.
struct Pair {
    a: Replica,
    b: Replica,
}

impl Pair {
    async fn start(env: &Env, cluster: &DevCluster, ops: &str) -> Self {
        let base = crate::common::scratch().join(format!("{}.kubeconfig", env.namespace));
        cluster.write_kubeconfig(&base).expect("kubeconfig");
        let policies = policy_dir(&["fanout"], &env.namespace);
        let policies = policies.to_string_lossy().into_owned();
        let timing = [
            format!("{}s", LEASE.as_secs()),
            format!("{}ms", RENEW.as_millis()),
            format!("{}ms", RETRY.as_millis()),
        ];
        let args = [
            "--namespace",
            env.namespace.as_str(),
            "--policy-dir",
            policies.as_str(),
            "--lease-namespace",
            ops,
            "--lease-duration",
            timing[0].as_str(),
            "--renew-deadline",
            timing[1].as_str(),
            "--retry-period",
            timing[2].as_str(),
        ];
        let replica = |name: &str| {
            let kubeconfig = base.with_extension(format!("{name}.kubeconfig"));
            kubeconfig_with_token(&base, name, &kubeconfig);
            Replica::start(name, &kubeconfig, &args)
        };
        let a = replica("replica-a");
        wait_leading(&a).await;
        let b = replica("replica-b");
        wait_role(&b, "follower (leader: replica-a)").await;
        Self { a, b }
    }
}

/// Waits until `/leaderz` answers 200.
async fn wait_leading(replica: &Replica) {
    eventually(&format!("{} to lead", replica.name), || async {
        replica
            .get("/leaderz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
}

/// Waits until `/readyz` answers 200 with `ready: <role>`.
async fn wait_role(replica: &Replica, role: &str) {
    let want = format!("ready: {role}");
    eventually(&format!("{} to report `{want}`", replica.name), || async {
        replica
            .get("/readyz")
            .filter(|(code, body)| *code == 200 && *body == want)
            .map(|_| ())
    })
    .await;
}

/// The first Lease write of `identity`: for a follower, its takeover.
fn first_lease_write(log: &[Request], identity: &str) -> u64 {
    log.iter()
        .find(|r| r.identity == identity && r.resource == "leases" && r.verb == "update")
        .map(|r| r.seq)
        .unwrap_or_else(|| panic!("{identity} never wrote the Lease"))
}

/// Every write of `identity`.
fn writes<'a>(log: &'a [Request], identity: &str) -> Vec<&'a Request> {
    log.iter()
        .filter(|r| r.identity == identity && WRITES.contains(&r.verb.as_str()))
        .collect()
}

/// Fanout params: `replicas` Pods that each run `seconds`.
fn params(replicas: u32, seconds: u32) -> serde_json::Value {
    json!({
        "replicas": replicas,
        "image": "busybox:1.36",
        "podAnnotations": {"devcluster.policyhost.dev/run-seconds": seconds.to_string()},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_from_a_killed_leader_within_the_lease_duration_and_finishes_its_work()
 {
    let env = Env::cluster_only().await;
    let Some(cluster) = env.cluster.as_ref() else {
        eprintln!("skipped: needs devcluster's request records");
        return;
    };
    let ops = ops_namespace(&env).await;
    let mut pair = Pair::start(&env, cluster, &ops).await;

    // Work in progress when the leader dies: Pods running for 3 s.
    env.create_job("before", "fanout", params(2, 3)).await;
    env.wait_job("before", "Running under replica-a", |j| {
        phase(j) == Some("Running")
    })
    .await;

    pair.a.signal("KILL");
    let killed = Instant::now();
    let _ = pair.a.wait();
    // Work that arrives while nobody leads.
    env.create_job("during", "fanout", params(1, 0)).await;

    wait_leading(&pair.b).await;
    let takeover = killed.elapsed();
    eprintln!("replica-b leads {takeover:?} after replica-a was killed");
    // The follower saw the last renewal at most a retry period (+20% jitter)
    // before the kill; it takes the Lease at its first attempt after the
    // lease duration from then.
    assert!(
        takeover <= LEASE + RETRY.mul_f64(2.4) + SLACK,
        "takeover after {takeover:?}; lease duration {LEASE:?}, retry period {RETRY:?}\n{}",
        pair.b.logs()
    );

    for name in ["before", "during"] {
        env.wait_job(name, "Succeeded under replica-b", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
    }
    let log = cluster.counters().requests();
    let takeover_seq = first_lease_write(&log, "replica-b");
    let late: Vec<_> = writes(&log, "replica-a")
        .into_iter()
        .filter(|r| r.seq > takeover_seq)
        .collect();
    assert!(
        late.is_empty(),
        "replica-a wrote after losing the Lease: {late:?}"
    );
    let finished_by_b = writes(&log, "replica-b")
        .into_iter()
        .any(|r| r.resource == "datajobs" && r.subresource == "status" && r.name == "before");
    assert!(finished_by_b, "replica-b wrote the status of `before`");

    pair.b.signal("TERM");
    assert!(pair.b.wait().success(), "{}", pair.b.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_writing_before_the_follower_takes_over() {
    let env = Env::cluster_only().await;
    let Some(cluster) = env.cluster.as_ref() else {
        eprintln!("skipped: needs devcluster's request records and faults");
        return;
    };
    let ops = ops_namespace(&env).await;
    let pair = Pair::start(&env, cluster, &ops).await;

    for i in 0..3 {
        env.create_job(&format!("job-{i}"), "fanout", params(2, 2))
            .await;
    }
    env.wait_job("job-0", "Running under replica-a", |j| {
        phase(j) == Some("Running")
    })
    .await;

    // replica-a's requests no longer reach the server; it keeps running.
    cluster.faults().set(Faults {
        partitioned: vec!["replica-a".into()],
        ..Faults::default()
    });
    let cut = Instant::now();
    eventually("replica-a to stop leading", || async {
        pair.a
            .get("/leaderz")
            .filter(|(code, _)| *code == 503)
            .map(|_| ())
    })
    .await;
    let fenced = cut.elapsed();
    wait_leading(&pair.b).await;
    let takeover = cut.elapsed();
    eprintln!("replica-a fenced after {fenced:?}, replica-b leads after {takeover:?}");
    assert!(
        fenced <= RENEW + SLACK,
        "replica-a wrote for {fenced:?} without renewing (renew deadline {RENEW:?})"
    );
    assert!(
        fenced < takeover,
        "replica-a stopped writing ({fenced:?}) before replica-b started ({takeover:?})"
    );
    env.create_job("during", "fanout", params(1, 0)).await;

    // The partition heals: replica-a reads the Lease, sees replica-b, and
    // follows with warm caches.
    cluster.faults().clear();
    wait_role(&pair.a, "follower (leader: replica-b)").await;
    for name in ["job-0", "job-1", "job-2", "during"] {
        env.wait_job(name, "Succeeded under replica-b", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
    }
    let (_, metrics) = pair.a.get("/metrics").expect("replica-a's metrics");
    assert!(metrics.contains("policyhost_leader 0"), "{metrics}");

    let log = cluster.counters().requests();
    let takeover_seq = first_lease_write(&log, "replica-b");
    let late: Vec<_> = writes(&log, "replica-a")
        .into_iter()
        .filter(|r| r.seq > takeover_seq)
        .collect();
    assert!(
        late.is_empty(),
        "replica-a wrote after losing the Lease: {late:?}"
    );
    let healed_reads = log
        .iter()
        .filter(|r| r.identity == "replica-a" && r.seq > takeover_seq)
        .count();
    assert!(
        healed_reads > 0,
        "replica-a talks to the server again after the partition (and only reads)"
    );
}
