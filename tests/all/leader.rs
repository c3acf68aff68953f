//! Leader election with two `policyhost run` processes on one Lease: one
//! leads, the other follows with warm caches and takes over when the leader
//! is killed or cut off; a deposed leader sends no write.
//!
//! Each replica has an identity of its own, which the request log records
//! with every request in arrival order: on devcluster a bearer token, on a
//! real cluster a ServiceAccount whose requests the audit log names. The
//! leader reaches the API server through a fault proxy, which cuts it off.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::cluster::{Env, eventually, phase};
use crate::common::faults::{FaultProxy, Refuse};
use crate::common::process::Replica;
use crate::common::replicas::{LEASE, RENEW, RETRY, ops_namespace, replica_args, replica_identity};
use crate::common::requests::Request;

/// Scheduling slack on a loaded machine.
const SLACK: Duration = Duration::from_millis(1500);

const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Two replicas, `replica-a` leading and `replica-b` following, each with
/// an identity of its own that the request log records.
struct Pair {
    a: Replica,
    b: Replica,
    /// The users `a` and `b` authenticate as.
    identities: [String; 2],
    /// What stands between `a` and the API server: cutting `a` off is
    /// refusing all it asks.
    a_proxy: FaultProxy,
}

impl Pair {
    async fn start(env: &Env, ops: &str) -> Self {
        let base = env.kubeconfig_file();
        let args = replica_args(env, ops);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let scratch = crate::common::scratch();
        let mut identities = Vec::new();
        let mut replica = async |name: &str| {
            let kubeconfig = scratch.join(format!("{}-{name}.kubeconfig", env.namespace));
            identities.push(replica_identity(env, &base, ops, name, &kubeconfig).await);
            (name.to_owned(), kubeconfig)
        };
        let through_proxy = async |(name, kubeconfig): (String, std::path::PathBuf)| {
            let file = kube::config::Kubeconfig::read_from(&kubeconfig).expect("a kubeconfig");
            let upstream = kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .expect("the replica's client configuration");
            let proxy = FaultProxy::start(upstream).await;
            let proxied = kubeconfig.with_extension("proxied.kubeconfig");
            proxy.write_kubeconfig(&proxied);
            let replica = Replica::start(&name, &proxied, &args);
            (proxy, replica)
        };
        let a = replica("replica-a").await;
        let b = replica("replica-b").await;
        let identities = identities.try_into().expect("two identities");
        let (a_proxy, a) = through_proxy(a).await;
        wait_leading(&a).await;
        let b = Replica::start(&b.0, &b.1, &args);
        wait_role(&b, "follower (leader: replica-a)").await;
        Self {
            a,
            b,
            identities,
            a_proxy,
        }
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
    let Some(requests) = env.requests() else {
        eprintln!("skipped: needs a request log (devcluster's, or the API server's audit log)");
        return;
    };
    let ops = ops_namespace(&env).await;
    let mut pair = Pair::start(&env, &ops).await;
    let [a, b] = pair.identities.clone();

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
    let log = requests.all();
    let takeover_seq = first_lease_write(&log, &b);
    let late: Vec<_> = writes(&log, &a)
        .into_iter()
        .filter(|r| r.seq > takeover_seq)
        .collect();
    assert!(
        late.is_empty(),
        "replica-a wrote after losing the Lease: {late:?}"
    );
    let finished_by_b = writes(&log, &b)
        .into_iter()
        .any(|r| r.resource == "datajobs" && r.subresource == "status" && r.name == "before");
    assert!(finished_by_b, "replica-b wrote the status of `before`");

    pair.b.signal("TERM");
    assert!(pair.b.wait().success(), "{}", pair.b.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_writing_before_the_follower_takes_over() {
    let env = Env::cluster_only().await;
    let Some(requests) = env.requests() else {
        eprintln!("skipped: needs a request log (devcluster's, or the API server's audit log)");
        return;
    };
    let ops = ops_namespace(&env).await;
    let pair = Pair::start(&env, &ops).await;
    let [a, b] = pair.identities.clone();

    for i in 0..3 {
        env.create_job(&format!("job-{i}"), "fanout", params(2, 2))
            .await;
    }
    env.wait_job("job-0", "Running under replica-a", |j| {
        phase(j) == Some("Running")
    })
    .await;

    // replica-a's requests no longer reach the server; it keeps running.
    pair.a_proxy.refuse(Refuse::everything(503));
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
    pair.a_proxy.clear();
    wait_role(&pair.a, "follower (leader: replica-b)").await;
    for name in ["job-0", "job-1", "job-2", "during"] {
        env.wait_job(name, "Succeeded under replica-b", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
    }
    let (_, metrics) = pair.a.get("/metrics").expect("replica-a's metrics");
    assert!(metrics.contains("policyhost_leader 0"), "{metrics}");

    let log = requests.all();
    let takeover_seq = first_lease_write(&log, &b);
    let late: Vec<_> = writes(&log, &a)
        .into_iter()
        .filter(|r| r.seq > takeover_seq)
        .collect();
    assert!(
        late.is_empty(),
        "replica-a wrote after losing the Lease: {late:?}"
    );
    let healed_reads = log
        .iter()
        .filter(|r| r.identity == a && r.seq > takeover_seq)
        .count();
    assert!(
        healed_reads > 0,
        "replica-a talks to the server again after the partition (and only reads)"
    );
}
