//! Runtime benchmarks: one `fanout` reconcile with 10 children, instance
//! per call, compiled to WebAssembly vs natively, and the digests its
//! decision record takes; compile and cache-hit loads.
//!
//! ```sh
//! cargo xtask guests
//! cargo bench -p policyhost --bench runtime
//! ```

#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use policyhost::runtime::{Input, PolicySpec, Runtime, RuntimeConfig, reference};
use policyhost::shadow::diff::answer_digest;
use policyhost::shadow::record::input_digest;
use policyhost_measure::{Process, cpu_seconds, percentile_ms};
use policyhost_sdk::testing::{ChildFixture, JobFixture};

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

/// The same inputs for the policy compiled natively, built once: the native
/// side runs exactly the policy's code (params parsing included), as the
/// component does after its inputs are lowered.
struct Native {
    job: policyhost_sdk::Job,
    children: Vec<policyhost_sdk::Child>,
    ctx: policyhost_sdk::Context,
}

impl Native {
    fn new(input: &Input) -> Self {
        let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("JSON");
        let status = input.job.status.as_deref().map(json).expect("a status");
        let job = JobFixture::new(&input.job.name)
            .params(json(&input.job.params))
            .status(status)
            .to_job();
        let children = input
            .children
            .iter()
            .map(|child| {
                ChildFixture::pod(child.name.clone())
                    .phase(policyhost_sdk::ChildPhase::Running)
                    .ready(true)
                    .to_child()
            })
            .collect();
        let ctx = policyhost_sdk::Context::new(input.ctx.now_unix_ms, input.ctx.attempt, "native");
        Self { job, children, ctx }
    }

    fn reconcile(&self) -> Result<policyhost_sdk::Reconcile, policyhost_sdk::PolicyError> {
        policyhost_sdk::run_reconcile::<fanout::Fanout>(&self.job, &self.children, &self.ctx)
    }
}

fn calls(c: &mut Criterion) {
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let policy = runtime
        .load(PolicySpec::new("fanout"), &guest("fanout"))
        .expect("load fanout");
    let input = reference::fanout(10);
    let check = runtime.reconcile_blocking(&policy, &input);
    let reconciled = check.result.as_ref().expect("fanout reconciles");
    assert_eq!(reconciled.children.len(), 10);

    let native = Native::new(&input);
    side_by_side(&runtime, &policy, &input, &native);
    through_the_pool(&runtime, &policy, &input);

    let mut group = c.benchmark_group("fanout-10");
    group.bench_function("wasm", |b| {
        b.iter(|| runtime.reconcile_blocking(&policy, &input).result.is_ok());
    });
    assert_eq!(native.reconcile().expect("native").children.len(), 10);
    group.bench_function("native", |b| {
        b.iter(|| native.reconcile().is_ok());
    });
    // What a serving call's decision record adds to it: the digests of its
    // input and its answer.
    group.bench_function("decision-digests", |b| {
        b.iter(|| (input_digest(&input), answer_digest(&check.result)));
    });
    group.finish();
}

/// Median latency and CPU time per call of wasm and native calls, measured
/// in alternating blocks in the same run so that machine noise hits both
/// alike; printed once.
fn side_by_side(runtime: &Runtime, policy: &policyhost::Policy, input: &Input, native: &Native) {
    const BLOCKS: usize = 40;
    const PER_BLOCK: usize = 500;
    let (mut wasm, mut native_times) = (Vec::new(), Vec::new());
    let (mut wasm_cpu, mut native_cpu) = (0.0, 0.0);
    for _ in 0..BLOCKS {
        let cpu = thread_cpu_seconds();
        for _ in 0..PER_BLOCK {
            let t = Instant::now();
            let ok = runtime.reconcile_blocking(policy, input).result.is_ok();
            wasm.push(t.elapsed());
            assert!(ok);
        }
        let middle = thread_cpu_seconds();
        for _ in 0..PER_BLOCK {
            let t = Instant::now();
            let ok = native.reconcile().is_ok();
            native_times.push(t.elapsed());
            assert!(ok);
        }
        let end = thread_cpu_seconds();
        wasm_cpu += middle - cpu;
        native_cpu += end - middle;
    }
    wasm.sort_unstable();
    native_times.sort_unstable();
    let p = |v: &[Duration], q: f64| percentile_ms(v, q) * 1e3;
    let calls = (BLOCKS * PER_BLOCK) as f64;
    eprintln!(
        "side by side, {} calls each: wasm p50 {:.1} µs p99 {:.1} µs CPU {:.1} µs/call | native p50 {:.1} µs p99 {:.1} µs CPU {:.1} µs/call | ratio p50 {:.2}x, CPU {:.2}x",
        wasm.len(),
        p(&wasm, 0.5),
        p(&wasm, 0.99),
        wasm_cpu * 1e6 / calls,
        p(&native_times, 0.5),
        p(&native_times, 0.99),
        native_cpu * 1e6 / calls,
        p(&wasm, 0.5) / p(&native_times, 0.5),
        wasm_cpu / native_cpu
    );
}

/// CPU time (user + system) of the calling thread so far (clock ticks of
/// 10 ms: summed over many blocks).
fn thread_cpu_seconds() -> f64 {
    cpu_seconds(Process::ThisThread).unwrap_or(0.0)
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
            percentile_ms(&latencies, 0.5) * 1e3,
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
