//! Shards: `policyhost run --shards` replicas split the DataJobs by the
//! hash of their uid. Each holds a member Lease; each DataJob is served by
//! one replica; a killed replica's buckets are served again once its Lease
//! has expired. Each replica has an identity of its own, which the request
//! log records with every request, so the log says who wrote what.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::shard::Bucket;
use policyhost::shard::probe::server_filters;
use policyhost::vocabulary::SHARD_LABEL;
use serde_json::json;

use crate::common::chaos;
use crate::common::cloud::Cloud;
use crate::common::cluster::{Env, PATIENCE, eventually, eventually_within, phase};
use crate::common::guest_bytes;
use crate::common::process::{Replica, policyhost, text};
use crate::common::publishing::{apply_grant, push};
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
    /// Every replica's flags but its identity.
    args: Vec<String>,
}

impl Shards {
    async fn start(env: &Env, ops: &str, count: usize) -> Self {
        Self::start_with(env, ops, count, &[]).await
    }

    /// [`start`](Self::start), each replica with `extra` flags too.
    async fn start_with(env: &Env, ops: &str, count: usize, extra: &[&str]) -> Self {
        let args = ["--shards"]
            .into_iter()
            .map(str::to_owned)
            .chain(replica_args(env, ops))
            .chain(extra.iter().map(|a| (*a).to_owned()))
            .collect();
        let mut shards = Self {
            replicas: Vec::new(),
            identities: Vec::new(),
            args,
        };
        for _ in 0..count {
            shards.add(env, ops).await;
        }
        shards
    }

    fn kubeconfig(env: &Env, name: &str) -> std::path::PathBuf {
        crate::common::scratch().join(format!("{}-{name}.kubeconfig", env.namespace))
    }

    /// Starts the next replica, `shard-<n>`.
    async fn add(&mut self, env: &Env, ops: &str) {
        let base = env.kubeconfig_file();
        let name = format!("shard-{}", self.identities.len());
        let kubeconfig = Self::kubeconfig(env, &name);
        self.identities
            .push(replica_identity(env, &base, ops, &name, &kubeconfig).await);
        self.launch(env, &name);
    }

    /// Starts `name` again (its identity made before).
    fn launch(&mut self, env: &Env, name: &str) {
        let args: Vec<&str> = self
            .args
            .iter()
            .map(String::as_str)
            .chain(["--leader-identity", name])
            .collect();
        self.replicas
            .push(Replica::start(name, &Self::kubeconfig(env, name), &args));
    }

    /// The running replica `shard-<n>`.
    fn named(&mut self, n: usize) -> &mut Replica {
        let name = format!("shard-{n}");
        self.replicas
            .iter_mut()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} runs"))
    }

    /// Takes `shard-<n>` out of the running replicas.
    fn remove(&mut self, n: usize) -> Replica {
        let name = format!("shard-{n}");
        let at = self
            .replicas
            .iter()
            .position(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} runs"));
        self.replicas.remove(at)
    }

    fn running(&self) -> Vec<&Replica> {
        self.replicas.iter().collect()
    }

    fn stop(&mut self) {
        for replica in &mut self.replicas {
            replica.signal("TERM");
            assert!(replica.wait().success(), "{}", replica.logs());
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

/// Who wrote the status of each DataJob of `namespace`: the identities,
/// by DataJob name.
fn status_writers(log: &[Request], namespace: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut writers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in log.iter().filter(|r| r.namespace == namespace) {
        if r.resource == "datajobs" && r.subresource == "status" && r.verb == "patch" {
            writers
                .entry(r.name.clone())
                .or_default()
                .insert(r.identity.clone());
        }
    }
    writers
}

/// DataJobs of [`three_shards`]' wave created right before a shard's kill.
const DURING_KILL: usize = 60;

/// DataJobs of [`three_shards`]' first wave: a few hundred per shard.
const FIRST_WAVE: usize = 1_000;

/// Creates a `fanout` DataJob of one quick Pod for each of `names`, a few
/// at a time.
async fn create_all(env: &Env, names: &[String]) {
    futures::stream::iter(names)
        .for_each_concurrent(8, |name| async move {
            env.create_job(name, "fanout", quick()).await;
        })
        .await;
}

/// Waits until `count` DataJobs of the namespace have succeeded.
async fn wait_all_succeeded(env: &Env, count: usize) {
    let jobs = env.jobs();
    eventually_within(
        &format!("{count} DataJobs to succeed"),
        PATIENCE * 5,
        || {
            let jobs = jobs.clone();
            async move {
                let list = jobs.list(&ListParams::default()).await.ok()?;
                let done = list
                    .items
                    .iter()
                    .filter(|job| phase(job) == Some("Succeeded"))
                    .count();
                (done >= count).then_some(())
            }
        },
    )
    .await;
}

/// The DataJobs and children each replica holds, from its metrics.
fn held(replica: &Replica) -> Option<(usize, usize)> {
    let (_, metrics) = replica.get("/metrics")?;
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|n| n.trim().parse().ok())
    };
    Some((
        value("policyhost_shard_datajobs")?,
        value("policyhost_shard_children")?,
    ))
}

/// Waits until `replicas` together hold `count` DataJobs and `count`
/// children, each exactly once (one Pod per DataJob), and returns each
/// one's share.
async fn wait_held(replicas: &[&Replica], count: usize) -> Vec<(usize, usize)> {
    eventually(
        &format!("the shards to hold {count} DataJobs and children"),
        || async {
            let held: Option<Vec<(usize, usize)>> = replicas.iter().map(|r| held(r)).collect();
            held.filter(|held| {
                held.iter().map(|h| h.0).sum::<usize>() == count
                    && held.iter().map(|h| h.1).sum::<usize>() == count
            })
        },
    )
    .await
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
    let env = Env::cluster_only().await;
    if !server_filters(&env.client, &env.namespace)
        .await
        .expect("a list of Leases")
    {
        eprintln!("skipped: this API server does not filter by shard (its feature gate is off)");
        return;
    }
    three_shards(env, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_feature_gate_each_shard_keeps_only_its_own_datajobs() {
    // devcluster with the gate off; or the real control plane `cargo xtask
    // test` starts a second time without it.
    let env = Env::cluster_with(devcluster::Features {
        sharded_list_and_watch: false,
    })
    .await;
    if server_filters(&env.client, &env.namespace)
        .await
        .expect("a list of Leases")
    {
        eprintln!("skipped: this API server filters by shard (its feature gate is on)");
        return;
    }
    three_shards(env, false).await;
}

/// Three shards serve 1,000 DataJobs, each by one of them, each shard
/// about a third of them and of their children; one is killed while 60
/// more are being reconciled, and the other two take its buckets over,
/// finish those, and serve 12 DataJobs more. `server_filters`:
/// whether the shards must have found the server applying their selector.
async fn three_shards(env: Env, server_filters: bool) {
    let Some(requests) = env.requests() else {
        eprintln!("skipped: needs a request log (devcluster's, or the API server's audit log)");
        return;
    };
    let ops = ops_namespace(&env).await;
    let mut shards = Shards::start(&env, &ops, 3).await;
    let split = wait_split(&shards.running()).await;
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

    let first: Vec<String> = (0..FIRST_WAVE).map(|i| format!("first-{i}")).collect();
    create_all(&env, &first).await;
    wait_all_succeeded(&env, first.len()).await;
    let writers = status_writers(&requests.all(), &env.namespace);
    for name in &first {
        let by = writers.get(name).cloned().unwrap_or_default();
        assert_eq!(by.len(), 1, "{name}'s status was written by {by:?}");
    }
    let held = wait_held(&shards.running(), first.len()).await;
    eprintln!("DataJobs and children held per shard: {held:?}");
    for &(datajobs, children) in &held {
        for share in [datajobs, children] {
            assert!(
                (FIRST_WAVE / 4..=FIRST_WAVE / 2).contains(&share),
                "a shard holds {share} of {FIRST_WAVE}: {held:?}"
            );
        }
    }
    if !server_filters {
        labelled_by_their_uid(&env, &first).await;
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

    // Shard-2 is killed while a wave of DataJobs is being reconciled.
    let during: Vec<String> = (0..DURING_KILL).map(|i| format!("during-{i}")).collect();
    create_all(&env, &during).await;
    let killed_identity = shards.identities[2].clone();
    let mut killed = shards.remove(2);
    killed.signal("KILL");
    let at = Instant::now();
    let _ = killed.wait();
    let split = wait_split(&shards.running()).await;
    let takeover = at.elapsed();
    eprintln!("buckets per shard {takeover:?} after shard-2 was killed: {split:?}");
    // The others count shard-2 dead a lease duration after they last saw
    // its Lease change (at most a retry period before the kill), then
    // claim its buckets, list them and serve them a round or two later.
    assert!(
        takeover <= LEASE + RETRY * 6 + SLACK,
        "shard-2's buckets served again after {takeover:?} (lease duration {LEASE:?})"
    );

    // Each DataJob of that wave was written by one shard at a time: the
    // killed one, if at all, only before a survivor took its bucket over.
    wait_all_succeeded(&env, FIRST_WAVE + DURING_KILL).await;
    for (name, runs) in writer_runs(&requests.all(), &env.namespace) {
        if during.contains(&name) {
            assert!(
                runs.len() <= 2 && !runs[1..].contains(&killed_identity),
                "{name} was written by turns: {runs:?}"
            );
        }
    }

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
    let writers = status_writers(&requests.all(), &env.namespace);
    for name in &second {
        let by = writers.get(name).cloned().unwrap_or_default();
        assert_eq!(by.len(), 1, "{name}'s status was written by {by:?}");
        assert!(
            !by.contains(&killed_identity),
            "{name} was served by the killed shard"
        );
    }

    shards.stop();
}

/// Who wrote each DataJob of `namespace` (its finalizer and its status),
/// in order: the identities of its writes' runs.
fn writer_runs(log: &[Request], namespace: &str) -> BTreeMap<String, Vec<String>> {
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in log.iter().filter(|r| r.namespace == namespace) {
        if r.resource == "datajobs" && matches!(r.verb.as_str(), "patch" | "update") {
            let run = runs.entry(r.name.clone()).or_default();
            if run.last() != Some(&r.identity) {
                run.push(r.identity.clone());
            }
        }
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_joining_and_leaving_under_load_lose_nothing_and_double_nothing() {
    let env = Env::cluster_only().await;
    let Some(requests) = env.requests() else {
        eprintln!("skipped: needs a request log (devcluster's, or the API server's audit log)");
        return;
    };
    let ops = ops_namespace(&env).await;
    let mut shards = Shards::start(&env, &ops, 1).await;
    wait_split(&shards.running()).await;
    let names: Vec<String> = (0..90).map(|i| format!("load-{i}")).collect();
    let mut created = names.chunks(30);
    let create = async |batch: Option<&[String]>| {
        for name in batch.expect("a batch") {
            env.create_job(name, "fanout", quick()).await;
        }
    };
    // 1 → 3 while the first DataJobs reconcile, and more arrive meanwhile.
    create(created.next()).await;
    shards.add(&env, &ops).await;
    shards.add(&env, &ops).await;
    create(created.next()).await;
    let split = wait_split(&shards.running()).await;
    eprintln!("1 → 3: {split:?}");
    // 3 → 2: shard-1 stops gracefully (its Lease deleted) under load.
    shards.named(1).signal("TERM");
    create(created.next()).await;
    let mut left = shards.remove(1);
    assert!(left.wait().success(), "{}", left.logs());
    let split = wait_split(&shards.running()).await;
    eprintln!("3 → 2: {split:?}");
    for name in &names {
        env.wait_job(name, "Succeeded", |j| phase(j) == Some("Succeeded"))
            .await;
    }
    // One child each: no move made a pass on a half-listed cache.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.namespace);
    let pods = pods.list(&ListParams::default()).await.expect("the Pods");
    let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        if let Some(job) = pod.labels().get("policyhost.dev/datajob") {
            *per_job.entry(job.clone()).or_default() += 1;
        }
    }
    for name in &names {
        assert_eq!(per_job.get(name), Some(&1), "{name}'s Pods: {per_job:?}");
    }
    // The ring changed three times ({0} → {0,1} → {0,1,2} → {0,2}): a
    // DataJob changes hands at most that often; two shards serving one at
    // once would alternate more.
    for (name, runs) in writer_runs(&requests.all(), &env.namespace) {
        if names.contains(&name) {
            assert!(runs.len() <= 4, "{name} was written by turns: {runs:?}");
        }
    }
    shards.stop();
}

/// The outbound chaos of one replica (`outbound::operator`), with shards:
/// 60 DataJobs each create their bucket; all are deleted while the service
/// fails 30 % of requests and stalls 5 %, and two shards are SIGKILLed one
/// after the other (and come back, as a StatefulSet's Pods do). At the
/// end no bucket lives, none was deleted after its DataJob was released,
/// and every DELETE the service saw carried an idempotency key, so a step
/// sent again by the DataJob's next owner was marked as the same step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_killed_during_a_mass_deletion_release_each_datajob_only_after_its_bucket() {
    const JOBS: usize = 60;
    let cloud = Cloud::start();
    let env = Env::cluster_only().await;
    let ops = ops_namespace(&env).await;
    let ca = cloud.ca_file(&crate::common::scratch());
    let ca = ca.to_string_lossy().into_owned();
    let extra = [
        "--policy-namespace",
        env.policy_namespace.as_str(),
        "--outbound-ca",
        ca.as_str(),
        "--min-cleanup-retry",
        "200ms",
    ];
    let mut shards = Shards::start_with(&env, &ops, 3, &extra).await;
    wait_split(&shards.running()).await;
    push(&env, "bucket", &guest_bytes("bucket")).await;
    apply_grant(
        &env,
        "bucket",
        BTreeMap::from([("origins".to_owned(), cloud.origin())]),
    )
    .await;
    let names: Vec<String> = (0..JOBS).map(|i| format!("b{i:02}")).collect();
    chaos::create_buckets(&env, &cloud, &names).await;
    let history = chaos::delete_through_faults(&env, &cloud, &names, 2, async |victim| {
        let mut killed = shards.remove(victim);
        killed.signal("KILL");
        let _ = killed.wait();
        shards.launch(&env, &format!("shard-{victim}"));
    })
    .await;
    chaos::assert_buckets_went_first(&env, &cloud, &history, &names);
    let unmarked: Vec<_> = cloud
        .idempotency_keys()
        .into_iter()
        .filter(|(method, _, key)| method == "DELETE" && key.is_none())
        .collect();
    assert!(unmarked.is_empty(), "DELETEs without a key: {unmarked:?}");
    shards.stop();
}

/// The label fallback: every DataJob of `names` carries the bucket of its
/// uid; and two a team labelled itself, one with a bucket not its own and
/// one with no bucket at all, are served all the same and labelled right.
async fn labelled_by_their_uid(env: &Env, names: &[String]) {
    let bucket_of = |job: &DataJob| {
        Bucket::of_uid(&job.uid().unwrap_or_default())
            .index()
            .to_string()
    };
    let jobs = env
        .jobs()
        .list(&ListParams::default())
        .await
        .expect("a list of DataJobs");
    for name in names {
        let job = jobs
            .items
            .iter()
            .find(|job| job.name_any() == *name)
            .unwrap_or_else(|| panic!("{name} is listed"));
        assert_eq!(
            job.labels().get(SHARD_LABEL),
            Some(&bucket_of(job)),
            "{name}: {:?}",
            job.labels()
        );
    }
    for (name, label) in [("wrong-bucket", "7"), ("no-bucket", "zzz")] {
        let mut job = DataJob::new(
            name,
            DataJobSpec {
                policy: "fanout".into(),
                params: quick().as_object().cloned().unwrap_or_default(),
                ..DataJobSpec::default()
            },
        );
        job.metadata.labels = Some([(SHARD_LABEL.to_owned(), label.to_owned())].into());
        env.jobs()
            .create(&PostParams::default(), &job)
            .await
            .expect("create the DataJob");
        env.wait_job(name, "Succeeded though labelled by its team", |j| {
            phase(j) == Some("Succeeded")
        })
        .await;
        eventually(&format!("{name} labelled with its bucket"), || async {
            let job = env.jobs().get(name).await.ok()?;
            (job.labels().get(SHARD_LABEL) == Some(&bucket_of(&job))).then_some(())
        })
        .await;
    }
}
