//! Runtime benchmarks: one `fanout` reconcile with 10 children, instance
//! per call, compiled to WebAssembly vs natively; compile and cache-hit loads.
//!
//! ```sh
//! cargo xtask guests
//! cargo bench -p policyhost --bench runtime
//! ```

#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use policyhost::runtime::{
    Child, ChildPhase, Context, DataJob, Input, PolicySpec, Runtime, RuntimeConfig,
};
use policyhost_sdk::testing::{Call, ChildFixture, JobFixture};

fn guest(name: &str) -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let path = target
        .join("wasm32-wasip2/guest")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask guests` first", path.display()))
}

fn params() -> serde_json::Value {
    serde_json::json!({"replicas": 10, "image": "busybox:1.36", "command": ["sleep", "3600"]})
}

fn outputs() -> serde_json::Value {
    serde_json::json!({"phase": "Running", "desired": 10, "pending": 0, "running": 10, "succeeded": 0, "failed": 0})
}

/// The reference workload: ten running, ready workers, nothing changed.
fn input() -> Input {
    Input {
        job: DataJob {
            name: "bench".into(),
            namespace: "default".into(),
            uid: "uid-bench".into(),
            generation: 1,
            labels: vec![],
            annotations: vec![],
            params: params().to_string(),
            status: Some(outputs().to_string()),
            deletion_unix_ms: None,
        },
        children: (0..10)
            .map(|i| Child {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: format!("bench-worker-{i}"),
                phase: ChildPhase::Running,
                ready: true,
                deleting: false,
                labels: vec![],
            })
            .collect(),
        ctx: Context {
            now_unix_ms: 1_700_000_000_000,
            attempt: 1,
            policy_digest: String::new(),
        },
    }
}

fn native_call() -> Call {
    let mut job = JobFixture::new("bench").params(params());
    job = job.status(outputs());
    (0..10).fold(Call::new(job), |call, i| {
        call.child(
            ChildFixture::pod(format!("bench-worker-{i}"))
                .phase(policyhost_sdk::ChildPhase::Running)
                .ready(true),
        )
    })
}

fn calls(c: &mut Criterion) {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let policy = runtime
        .load(PolicySpec::new("fanout"), &guest("fanout"))
        .expect("load fanout");
    let input = input();
    let check = runtime.reconcile_blocking(&policy, &input);
    assert_eq!(check.result.expect("fanout reconciles").children.len(), 10);

    side_by_side(&runtime, &policy, &input, &native_call());
    through_the_pool(&runtime, &policy, &input);

    let mut group = c.benchmark_group("fanout-10");
    group.bench_function("wasm", |b| {
        b.iter(|| runtime.reconcile_blocking(&policy, &input).result.is_ok());
    });
    let call = native_call();
    let native = call.reconcile::<fanout::Fanout>();
    assert_eq!(native.result.as_ref().expect("native").children.len(), 10);
    group.bench_function("native", |b| {
        b.iter(|| call.reconcile::<fanout::Fanout>().result.is_ok());
    });
    group.finish();
}

/// Median latency of wasm and native calls, measured in alternating blocks
/// in the same run so that machine noise hits both alike; printed once.
fn side_by_side(runtime: &Runtime, policy: &policyhost::Policy, input: &Input, call: &Call) {
    const BLOCKS: usize = 40;
    const PER_BLOCK: usize = 250;
    let (mut wasm, mut native) = (Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        for _ in 0..PER_BLOCK {
            let t = Instant::now();
            let ok = runtime.reconcile_blocking(policy, input).result.is_ok();
            wasm.push(t.elapsed());
            assert!(ok);
        }
        for _ in 0..PER_BLOCK {
            let t = Instant::now();
            let ok = call.reconcile::<fanout::Fanout>().result.is_ok();
            native.push(t.elapsed());
            assert!(ok);
        }
    }
    wasm.sort_unstable();
    native.sort_unstable();
    let p = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    eprintln!(
        "side by side, {} calls each: wasm p50 {:.1} µs p99 {:.1} µs | native p50 {:.1} µs p99 {:.1} µs | ratio p50 {:.2}x",
        wasm.len(),
        p(&wasm, 0.5),
        p(&wasm, 0.99),
        p(&native, 0.5),
        p(&native, 0.99),
        p(&wasm, 0.5) / p(&native, 0.5)
    );
}

/// The async API as the operator uses it: calls hop to the guest call pool.
/// Prints the p50 of one call at a time (the hop's latency) and the
/// throughput of 8 calls in flight on the pool's threads.
fn through_the_pool(runtime: &Runtime, policy: &std::sync::Arc<policyhost::Policy>, input: &Input) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let mut latencies = Vec::with_capacity(5000);
        for _ in 0..5000 {
            let t = Instant::now();
            let outcome = runtime.reconcile(policy.clone(), input.clone()).await;
            latencies.push(t.elapsed());
            assert!(outcome.result.is_ok());
        }
        latencies.sort_unstable();
        let calls = 20_000;
        let started = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (runtime, policy, input) = (runtime.clone(), policy.clone(), input.clone());
                tokio::spawn(async move {
                    for _ in 0..calls / 8 {
                        let outcome = runtime.reconcile(policy.clone(), input.clone()).await;
                        assert!(outcome.result.is_ok());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        let per_second = f64::from(calls) / started.elapsed().as_secs_f64();
        eprintln!(
            "through the pool: one at a time p50 {:.1} µs | 8 in flight on {} threads: {:.0} calls/s",
            latencies[latencies.len() / 2].as_secs_f64() * 1e6,
            std::thread::available_parallelism().map_or(2, usize::from),
            per_second
        );
    });
}

fn loads(c: &mut Criterion) {
    let bytes = guest("fanout");
    let mut group = c.benchmark_group("load-fanout");
    group.sample_size(10);
    group.bench_function("compile", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
                let started = Instant::now();
                runtime
                    .load(PolicySpec::new("fanout"), &bytes)
                    .expect("compile");
                total += started.elapsed();
            }
            total
        });
    });
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    runtime
        .load(PolicySpec::new("fanout"), &bytes)
        .expect("compile");
    group.bench_function("cache-hit", |b| {
        b.iter(|| runtime.load(PolicySpec::new("fanout"), &bytes).is_ok());
    });
    group.finish();
}

criterion_group!(benches, calls, loads);
criterion_main!(benches);
