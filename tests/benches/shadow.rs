//! What a candidate costs the serving path: the same workload with and
//! without a candidate of its policy, in one run.
//!
//! ```sh
//! cargo xtask guests
//! cargo bench -p policyhost-tests --bench shadow
//! SHADOW_BENCH_JOBS=300 SHADOW_BENCH_POKES=200 SHADOW_BENCH_ROUNDS=2 cargo bench -p policyhost-tests --bench shadow
//! SHADOW_BENCH_CANDIDATE=differing cargo bench -p policyhost-tests --bench shadow
//! SHADOW_BENCH_CANDIDATE=same,canary cargo bench -p policyhost-tests --bench shadow
//! ```
//!
//! devcluster and the operator (2 call threads, 8 workers) run in this
//! process, a fresh pair per run; runs alternate without and with a
//! candidate (ABBA…, or ABCCBA… for a list of candidates), so drift of a
//! shared machine falls on each. A candidate (`SHADOW_BENCH_CANDIDATE`) is `same`, `fanout` under another
//! digest: every shadow call that is made answers `same`; or `differing`,
//! `fanout-next` with every DataJob labelled for its renamed container:
//! every shadow call made differs, and its workers go to the API server as
//! dry runs (refused once the Pods exist), whose requests count among the
//! operator's; or `canary`, `fanout` under another digest rolled out to
//! half of the DataJobs (a rollout step of 50 %): the serving path while
//! a rollout routes each pass; or `unrecorded`, no candidate and no
//! decision record (`--decision-history 0`), against which `no` (the
//! default record) shows what the record costs. Each run has two phases:
//!
//! - **burst** (saturated): `SHADOW_BENCH_JOBS` fanout DataJobs (2 workers
//!   each) created at once. Their calls queue for the 2 call threads, so
//!   shadow calls should be skipped. Measured: each DataJob's time from its
//!   create to `Succeeded` (p50, p99), the whole burst, the operator's API
//!   requests per DataJob in the DataJobs' namespace and in the policy
//!   namespace (the candidate's summary), guest calls of the serving
//!   version, and shadow calls by result.
//! - **steady** (idle pool): `SHADOW_BENCH_POKES` times, one DataJob is
//!   annotated and the time until its reconcile is counted is taken, one
//!   at a time: the serving path's latency when a shadow call is made
//!   beside every reconcile, and the requests that costs.

#[path = "../common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::bench::env_number;
use common::cluster::{Env, OperatorSetup};
use common::publishing::push;
use common::variants::version;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use policyhost::crd::DataJob;
use policyhost::metrics::PolicyResult;
use policyhost::policies::configmap;
use policyhost::vocabulary::{POLICY_LABEL, ROLE_LABEL, ROLLOUT_ROLE};
use policyhost_measure::{load_average_text, percentile_ms};
use serde_json::json;

fn main() {
    common::bench::block_on(bench());
}

/// The candidate a run has, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Candidate {
    /// None.
    #[default]
    No,
    /// `fanout` under another digest: answers the same.
    Same,
    /// `fanout-next` renaming every DataJob's container: answers otherwise,
    /// and the API server refuses its Pods.
    Differing,
    /// `fanout` under another digest, rolled out to half of the DataJobs
    /// (a rollout's step of 50 %): those are served by it, the others by
    /// the serving version with it beside.
    Canary,
    /// None, and no decision record kept (`--decision-history 0`): what
    /// the record costs the serving path, against `No`.
    Unrecorded,
}

impl Candidate {
    fn label(self) -> &'static str {
        match self {
            Self::No => "no",
            Self::Same => "same",
            Self::Differing => "differing",
            Self::Canary => "canary",
            Self::Unrecorded => "unrecorded",
        }
    }
}

/// The label `fanout-next` renames a DataJob's container for.
const RENAME_LABEL: &str = "policyhost.dev/test-rename";

/// What one run measured.
#[derive(Debug, Default)]
struct Run {
    candidate: Candidate,
    /// Create to `Succeeded`, per DataJob.
    burst_latency: Vec<Duration>,
    /// First create to the last `Succeeded`.
    burst: Duration,
    burst_job_requests: usize,
    burst_policy_requests: usize,
    burst_serving_calls: u64,
    burst_shadow: HashMap<&'static str, u64>,
    burst_dry_runs: HashMap<&'static str, u64>,
    /// Annotate to reconcile counted, per poke.
    steady_latency: Vec<Duration>,
    steady_job_requests: usize,
    steady_policy_requests: usize,
    steady_shadow: HashMap<&'static str, u64>,
    steady_dry_runs: HashMap<&'static str, u64>,
}

const RESULTS: [&str; 4] = ["same", "differs", "fault", "skipped"];
const DRY_RUNS: [&str; 3] = ["accepted", "refused", "unchecked"];

/// `fanout`'s count of each of `results`.
fn counted(
    results: &[&'static str],
    count: impl Fn(&PolicyResult) -> u64,
) -> HashMap<&'static str, u64> {
    results
        .iter()
        .map(|result| {
            let labels = PolicyResult {
                policy: "fanout".into(),
                result: (*result).into(),
            };
            (*result, count(&labels))
        })
        .collect()
}

fn shadow_calls(env: &Env) -> HashMap<&'static str, u64> {
    let metrics = &env.operator().metrics;
    counted(&RESULTS, |labels| {
        metrics.shadow_calls_total.get_or_create(labels).get()
    })
}

fn dry_runs(env: &Env) -> HashMap<&'static str, u64> {
    let metrics = &env.operator().metrics;
    counted(&DRY_RUNS, |labels| {
        metrics.shadow_dry_runs_total.get_or_create(labels).get()
    })
}

fn since(
    now: &HashMap<&'static str, u64>,
    then: &HashMap<&'static str, u64>,
) -> HashMap<&'static str, u64> {
    now.iter().map(|(r, n)| (*r, n - then[r])).collect()
}

/// Reconciles of fanout so far, whatever their result.
fn reconciles(env: &Env) -> u64 {
    env.operator()
        .metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("policyhost_reconcile_total{policy=\"fanout\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn run(candidate: Candidate, jobs: usize, pokes: usize) -> Run {
    let mut setup = OperatorSetup::configmaps();
    setup.workers = 8;
    if candidate == Candidate::Unrecorded {
        setup.decision_history = 0;
    }
    let env = Env::start_with(setup).await;
    let fanout = common::guest_bytes("fanout");
    push(&env, "fanout", &fanout).await;
    let component = match candidate {
        Candidate::No | Candidate::Unrecorded => None,
        Candidate::Same | Candidate::Canary => Some(version(&fanout, "candidate")),
        Candidate::Differing => Some(common::guest_bytes("fanout-next")),
    };
    if let Some(component) = component {
        let map = configmap::into_candidate(
            common::publishing::policy_map(
                &env,
                "fanout",
                &component,
                &common::for_every_namespace(),
            ),
            "fanout",
        );
        let loaded = common::publishing::push_map(&env, &map).await;
        if candidate == Candidate::Canary {
            let digest = loaded.loaded_digest.expect("the candidate loads");
            roll_out_half(&env, &digest).await;
        }
    }
    let log = env.requests().expect("devcluster's request log");
    let mut out = Run {
        candidate,
        ..Run::default()
    };

    // Burst: every DataJob at once; each one's Succeeded from a watch.
    let mark = log.mark();
    let (calls, shadow, dry) = (reconciles(&env), shadow_calls(&env), dry_runs(&env));
    let api = env.jobs();
    let mut events = Box::pin(
        watcher::watcher(api.clone(), watcher::Config::default())
            .applied_objects()
            .default_backoff(),
    );
    let started = Instant::now();
    let mut created = HashMap::new();
    for i in 0..jobs {
        let name = format!("job-{i}");
        created.insert(name.clone(), Instant::now());
        create(&api, &name, candidate).await;
    }
    let mut done = HashMap::new();
    while done.len() < jobs {
        let job = tokio::time::timeout(Duration::from_secs(300), events.next())
            .await
            .expect("every DataJob succeeds within 5 minutes")
            .expect("the watch goes on")
            .expect("a DataJob");
        let name = job.metadata.name.clone().unwrap_or_default();
        if common::cluster::phase(&job) == Some("Succeeded") && !done.contains_key(&name) {
            done.insert(name.clone(), created[&name].elapsed());
        }
    }
    out.burst = started.elapsed();
    out.burst_latency = done.into_values().collect();
    env.wait_idle().await;
    out.burst_job_requests = log.operator_since(mark, &env.namespace).len();
    out.burst_policy_requests = log.operator_since(mark, &env.policy_namespace).len();
    out.burst_serving_calls = reconciles(&env) - calls;
    out.burst_shadow = since(&shadow_calls(&env), &shadow);
    out.burst_dry_runs = since(&dry_runs(&env), &dry);

    // Steady: one DataJob at a time, the pool idle.
    let mark = log.mark();
    let (shadow, dry) = (shadow_calls(&env), dry_runs(&env));
    for i in 0..pokes {
        let name = format!("job-{}", i % jobs);
        let before = reconciles(&env);
        let patch =
            json!({"metadata": {"annotations": {"bench.policyhost.dev/poke": i.to_string()}}});
        let started = Instant::now();
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("annotate");
        while reconciles(&env) == before {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        out.steady_latency.push(started.elapsed());
    }
    env.wait_idle().await;
    // The candidate's summary, written at most every 5 s, lands in the log.
    tokio::time::sleep(policyhost::shadow::report::EVERY + Duration::from_secs(1)).await;
    out.steady_job_requests = log.operator_since(mark, &env.namespace).len();
    out.steady_policy_requests = log.operator_since(mark, &env.policy_namespace).len();
    out.steady_shadow = since(&shadow_calls(&env), &shadow);
    out.steady_dry_runs = since(&dry_runs(&env), &dry);
    out
}

/// Rolls the candidate `digest` of fanout out to half of its DataJobs (one
/// step of 50 %, for an hour), and waits until the host routes by it.
async fn roll_out_half(env: &Env, digest: &str) {
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let plan: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": configmap::rollout_name("fanout"),
            "labels": {POLICY_LABEL: "fanout", ROLE_LABEL: ROLLOUT_ROLE},
        },
        "data": {"digest": format!("sha256:{digest}"), "steps": "50%", "stepWait": "1h"},
    }))
    .expect("a rollout ConfigMap");
    maps.create(&PostParams::default(), &plan)
        .await
        .expect("create the rollout");
    let registry = &env.operator().shared.registry;
    common::cluster::eventually("the canary in force", || async {
        registry.canary("fanout").map(|_| ())
    })
    .await;
}

/// Creates the fanout DataJob `name` (two workers), labelled for the
/// renamed container when the candidate differs.
async fn create(api: &Api<DataJob>, name: &str, candidate: Candidate) {
    let mut job: DataJob = serde_json::from_value(json!({
        "apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
        "metadata": {"name": name},
        "spec": {"policy": "fanout",
            "params": {"replicas": 2, "image": "busybox:1.36", "command": ["true"]}},
    }))
    .expect("a DataJob");
    if candidate == Candidate::Differing {
        job.metadata.labels = Some([(RENAME_LABEL.to_owned(), "yes".to_owned())].into());
    }
    api.create(&PostParams::default(), &job)
        .await
        .expect("create the DataJob");
}

fn ms(samples: &[Duration], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort();
    percentile_ms(&sorted, q)
}

/// The counts of `results`, slash-separated.
fn counts_text(counts: &HashMap<&'static str, u64>, results: &[&str]) -> String {
    results
        .iter()
        .map(|result| counts[result].to_string())
        .collect::<Vec<_>>()
        .join("/")
}

async fn bench() {
    let jobs = env_number("SHADOW_BENCH_JOBS", 200);
    let pokes = env_number("SHADOW_BENCH_POKES", 100);
    let rounds = env_number("SHADOW_BENCH_ROUNDS", 1);
    let arms: Vec<Candidate> = std::env::var("SHADOW_BENCH_CANDIDATE")
        .unwrap_or_else(|_| "same".to_owned())
        .split(',')
        .map(|arm| match arm.trim() {
            "same" => Candidate::Same,
            "differing" => Candidate::Differing,
            "canary" => Candidate::Canary,
            "unrecorded" => Candidate::Unrecorded,
            other => panic!(
                "SHADOW_BENCH_CANDIDATE={other}: same, differing, canary or unrecorded (or a list)"
            ),
        })
        .collect();
    let labels: Vec<&str> = arms.iter().map(|arm| arm.label()).collect();
    println!(
        "shadow bench: {jobs} DataJobs, {pokes} pokes, {rounds} rounds (ABBA), candidate {}; load average {} at start",
        labels.join(", "),
        load_average_text()
    );
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut order = vec![Candidate::No];
        order.extend(&arms);
        if round % 2 == 1 {
            order.reverse();
        }
        for candidate in order {
            let run = run(candidate, jobs, pokes).await;
            println!(
                "  run with candidate {}: burst {:.1} s, steady p50 {:.2} ms",
                candidate.label(),
                run.burst.as_secs_f64(),
                ms(&run.steady_latency, 0.5)
            );
            runs.push(run);
        }
    }
    println!(
        "| candidate | burst | DataJob create→Succeeded p50 / p99 | operator requests / DataJob (jobs ns + policy ns) | serving calls / DataJob | shadow calls same/differs/fault/skipped | dry runs accepted/refused/unchecked | steady reconcile p50 / p99 | steady requests / poke (jobs ns + policy ns) | steady shadow calls | steady dry runs |"
    );
    println!("|---|---:|---:|---:|---:|---|---|---:|---:|---|---|");
    for run in &runs {
        let per_job = |n: usize| n as f64 / jobs as f64;
        let per_poke = |n: usize| n as f64 / pokes as f64;
        println!(
            "| {} | {:.1} s | {:.0} / {:.0} ms | {:.2} + {:.2} | {:.2} | {} | {} | {:.2} / {:.2} ms | {:.2} + {:.2} | {} | {} |",
            run.candidate.label(),
            run.burst.as_secs_f64(),
            ms(&run.burst_latency, 0.5),
            ms(&run.burst_latency, 0.99),
            per_job(run.burst_job_requests),
            per_job(run.burst_policy_requests),
            run.burst_serving_calls as f64 / jobs as f64,
            counts_text(&run.burst_shadow, &RESULTS),
            counts_text(&run.burst_dry_runs, &DRY_RUNS),
            ms(&run.steady_latency, 0.5),
            ms(&run.steady_latency, 0.99),
            per_poke(run.steady_job_requests),
            per_poke(run.steady_policy_requests),
            counts_text(&run.steady_shadow, &RESULTS),
            counts_text(&run.steady_dry_runs, &DRY_RUNS),
        );
    }
    println!("load average {} at the end", load_average_text());
}
