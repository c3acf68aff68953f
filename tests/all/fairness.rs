//! Fairness between policies: a policy whose every call runs to its
//! deadline delays only its own DataJobs — in the call gate, in the
//! instance pool, and end to end on devcluster (the noisy neighbour).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::ListParams;
use policyhost::Runtime;
use policyhost::runtime::{EngineConfig, Error, PolicyLimits, RuntimeConfig};
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, eventually_within, phase};
use crate::common::{self, input, job, load};
use policyhost::runtime::reference;

/// Limits under which `infinite-loop` runs to its deadline, not its fuel.
fn to_the_deadline(timeout: Duration) -> PolicyLimits {
    PolicyLimits {
        timeout_ms: Some(u64::try_from(timeout.as_millis()).expect("small")),
        fuel: Some(u64::MAX),
        ..PolicyLimits::default()
    }
}

fn spin_input() -> policyhost::runtime::Input {
    input(job("noisy", "team-a", json!({})))
}

/// Waits until `infinite-loop` holds both call threads, or panics saying
/// `never` after `patience`.
async fn until_both_threads_loop(runtime: &Runtime, patience: Duration, never: &str) {
    let busy = Instant::now();
    while runtime.calls_running("infinite-loop") < 2 {
        assert!(busy.elapsed() < patience, "{never}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_the_next_free_thread_not_behind_every_queued_call_of_another_policy() {
    let runtime = common::runtime();
    let deadline = Duration::from_millis(300);
    let noisy = load(&runtime, "infinite-loop", to_the_deadline(deadline));
    let fanout = load(&runtime, "fanout", PolicyLimits::default());
    // Eight calls of 300 ms on two threads: four rounds, 1.2 s first come,
    // first served.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (runtime, noisy) = (runtime.clone(), Arc::clone(&noisy));
        calls.spawn(async move { runtime.reconcile(noisy, spin_input()).await.result });
    }
    until_both_threads_loop(
        &runtime,
        Duration::from_secs(10),
        "the loop calls never ran",
    )
    .await;
    let start = Instant::now();
    let outcome = runtime.reconcile(fanout, reference::fanout(10)).await;
    let waited = start.elapsed();
    outcome.result.expect("fanout succeeds beside the loop");
    eprintln!("fanout beside 8 queued deadline-long calls took {waited:?}");
    assert!(
        waited < Duration::from_millis(800),
        "fanout waited {waited:?}: behind the other policy's queue, not for one thread"
    );
    for call in calls.join_all().await {
        assert!(
            matches!(call, Err(Error::DeadlineExceeded { .. })),
            "{call:?}"
        );
    }
}

#[test]
fn the_instance_pool_holds_every_call_in_flight_even_when_configured_smaller() {
    let config = RuntimeConfig {
        threads: 2,
        engine: EngineConfig {
            // Too small on purpose: one policy's two calls would take it all.
            max_instances: 1,
            ..EngineConfig::default()
        },
        ..RuntimeConfig::default()
    };
    assert_eq!(
        config.instances_needed(),
        2 + policyhost::runtime::RESERVED_INSTANCES
    );
    let runtime = Runtime::new(config).expect("runtime");
    let deadline = Duration::from_millis(500);
    let noisy = load(&runtime, "infinite-loop", to_the_deadline(deadline));
    let fanout = load(&runtime, "fanout", PolicyLimits::default());
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    tokio.block_on(async {
        // Both call threads held by one policy, to its deadline...
        let calls: Vec<_> = (0..2)
            .map(|_| {
                let (runtime, noisy) = (runtime.clone(), Arc::clone(&noisy));
                tokio::spawn(async move { runtime.reconcile(noisy, spin_input()).await })
            })
            .collect();
        until_both_threads_loop(
            &runtime,
            Duration::from_secs(10),
            "the loop calls never ran",
        )
        .await;
        // ...while loads of other policies still find instances for their
        // trial instantiation, and a blocking call still runs.
        let trials: Vec<_> = (0..2)
            .map(|_| {
                let (runtime, fanout) = (runtime.clone(), Arc::clone(&fanout));
                tokio::task::spawn_blocking(move || runtime.instantiate_blocking(&fanout))
            })
            .collect();
        for trial in trials {
            trial
                .await
                .expect("trial")
                .expect("an instance for the trial");
        }
        let blocking = runtime.reconcile_blocking(&fanout, &reference::fanout(3));
        blocking.result.expect("an instance for a blocking call");
        for call in calls {
            let outcome = call.await.expect("call");
            assert!(
                matches!(outcome.result, Err(Error::DeadlineExceeded { .. })),
                "each loop call got its instance and ran to its deadline: {:?}",
                outcome.result
            );
        }
    });
}

/// How long each fanout worker Pod runs: a short job, still the larger
/// part of fanout's convergence, as in any real workload.
const POD_SECONDS: &str = "1.5";

/// Creates `n` fanout DataJobs named `<prefix>-<i>` and returns how long
/// they take until every one has succeeded.
async fn fanout_convergence(env: &Env, prefix: &str, n: usize) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        env.create_job(
            &format!("{prefix}-{i}"),
            "fanout",
            json!({
                "replicas": 2,
                "image": "busybox:1.36",
                "command": ["true"],
                "backoffLimit": 1,
                "podAnnotations": {"devcluster.policyhost.dev/run-seconds": POD_SECONDS},
            }),
        )
        .await;
    }
    let jobs = env.jobs();
    let prefix = format!("{prefix}-");
    eventually_within(
        &format!("{n} fanout DataJobs {prefix}* to succeed"),
        Duration::from_secs(30),
        || {
            let (jobs, prefix) = (jobs.clone(), prefix.clone());
            async move {
                let list = jobs.list(&ListParams::default()).await.ok()?;
                let done = list
                    .items
                    .iter()
                    .filter(|job| job.name_any().starts_with(&prefix))
                    .filter(|job| phase(job) == Some("Succeeded"))
                    .count();
                (done == n).then_some(())
            }
        },
    )
    .await;
    start.elapsed()
}

/// Calls of `infinite-loop` stopped by a guest fault so far.
fn noisy_faults(env: &Env) -> f64 {
    env.operator()
        .metrics
        .render()
        .lines()
        .filter(|line| {
            line.starts_with("policyhost_guest_faults_total")
                && line.contains("policy=\"infinite-loop\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_converges_within_twice_its_time_alone_beside_a_hundred_datajobs_that_run_to_the_deadline()
 {
    let deadline = Duration::from_millis(50);
    let env = Env::start_with(OperatorSetup {
        workers: 8,
        // Every call of the noisy policy runs to the host's maximum deadline.
        max_timeout: Some(deadline),
        ..OperatorSetup::with(&["fanout", "infinite-loop"])
    })
    .await;
    let alone = fanout_convergence(&env, "alone", 10).await;

    for i in 0..100 {
        env.create_job(&format!("noisy-{i}"), "infinite-loop", json!({}))
            .await;
    }
    // The noisy policy holds every call thread before fanout comes.
    let runtime = env.operator().shared.runtime.clone();
    until_both_threads_loop(
        &runtime,
        Duration::from_secs(30),
        "the noisy DataJobs never ran",
    )
    .await;
    let queued = env.operator().shared.queue.len();
    let faults_before = noisy_faults(&env);
    let beside = fanout_convergence(&env, "beside", 10).await;
    let noisy_faults = noisy_faults(&env) - faults_before;
    eprintln!(
        "10 fanout DataJobs: {alone:?} alone, {beside:?} beside 100 deadline-long DataJobs \
         ({queued} keys queued when fanout came, {noisy_faults} noisy calls stopped at the deadline meanwhile)"
    );
    assert!(
        noisy_faults >= 10.0,
        "the noisy policy kept running to its deadline meanwhile ({noisy_faults} deadline faults)"
    );
    assert!(
        beside <= alone * 2,
        "fanout took {beside:?} beside the noisy policy, more than twice {alone:?} alone"
    );
}
