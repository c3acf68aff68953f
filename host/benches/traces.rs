//! What tracing costs a call: one `fanout` reconcile with 10 children, in a
//! pass's span as the operator makes it, with tracing off (the log's
//! subscriber alone, as `policyhost run` without `--otlp-endpoint`), on at
//! ratio 1.0 and on at 0.1, exporting to a Jaeger on loopback; alternating
//! blocks in one run, p50 and p99 of each, and the spans exported.
//!
//! ```sh
//! cargo xtask guests && cargo xtask jaeger
//! cargo bench -p policyhost --bench traces
//! ```

#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use policyhost::runtime::{Input, Policy, PolicySpec, Runtime, RuntimeConfig, reference};
use policyhost::traces::{self, jaeger::LocalJaeger};
use policyhost_measure::percentile_ms;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, Registry};

const BLOCKS: usize = 20;
const PER_BLOCK: usize = 500;

fn target() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn guest(name: &str) -> Vec<u8> {
    let path = target()
        .join("wasm32-wasip2/guest")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask guests` first", path.display()))
}

/// The log's subscriber as `policyhost run` has it (info, to nowhere), and
/// the traces' layer if one is given.
fn subscriber(traces: Option<Layer>) -> tracing::Dispatch {
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(EnvFilter::new("info"))
        .boxed();
    let layers: Vec<Layer> = std::iter::once(log).chain(traces).collect();
    tracing::Dispatch::new(Registry::default().with(layers))
}

type Layer = Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync>;

/// One call in a pass's span, as the controller's worker opens it.
fn pass(runtime: &Runtime, policy: &Policy, input: &Input) -> Duration {
    let span = tracing::info_span!(
        target: traces::TARGET,
        parent: None,
        "reconcile",
        job = "bench/fanout",
        cause = "changed",
    );
    let _entered = span.enter();
    let t = Instant::now();
    let ok = runtime.reconcile_blocking(policy, input).result.is_ok();
    let took = t.elapsed();
    assert!(ok);
    took
}

fn main() {
    let binary = target().join("jaeger/bin/jaeger");
    assert!(
        binary.is_file(),
        "{}: run `cargo xtask jaeger` first",
        binary.display()
    );
    let dir = std::env::temp_dir().join(format!("policyhost-bench-traces-{}", std::process::id()));
    let jaeger = LocalJaeger::start(&binary, &dir).expect("start jaeger");
    let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let policy = runtime
        .load(PolicySpec::new("fanout"), &guest("fanout"))
        .expect("load fanout");
    let input = reference::fanout(10);

    let on = |ratio: f64| {
        let config = traces::Config {
            endpoint: Some(jaeger.otlp_endpoint()),
            sample_ratio: Some(ratio),
        };
        let traces::Tracing { layer, guard } = traces::install::<Registry>(&config)
            .expect("the traces' pipeline")
            .expect("tracing on");
        (subscriber(Some(layer)), Some(guard))
    };
    let mut variants = [
        (
            "absent (no subscriber at all)",
            (tracing::Dispatch::none(), None),
            Vec::new(),
        ),
        ("off", (subscriber(None), None), Vec::new()),
        ("on, ratio 1.0", on(1.0), Vec::new()),
        ("on, ratio 0.1", on(0.1), Vec::new()),
    ];
    for _ in 0..BLOCKS {
        for (_, (dispatch, _), times) in &mut variants {
            tracing::dispatcher::with_default(dispatch, || {
                for _ in 0..PER_BLOCK {
                    times.push(pass(&runtime, &policy, &input));
                }
            });
        }
    }
    for (name, (_, guard), times) in &mut variants {
        if let Some(guard) = guard.take() {
            guard.shutdown(Duration::from_secs(10));
        }
        times.sort_unstable();
        let p = |q: f64| percentile_ms(times, q) * 1e3;
        println!(
            "fanout-10 call in a pass span, tracing {name}: p50 {:.1} µs, p99 {:.1} µs ({} calls)",
            p(0.5),
            p(0.99),
            times.len()
        );
    }
    // What tracing off leaves on a call's path: the check whether the
    // current span is traced (a call's, and each outbound or API request's).
    tracing::dispatcher::with_default(&variants[1].1.0, || {
        let span = tracing::info_span!(target: traces::TARGET, parent: None, "reconcile");
        let _entered = span.enter();
        const CHECKS: u32 = 1_000_000;
        let t = Instant::now();
        let traced = (0..CHECKS)
            .filter(|_| traces::context::is_traced(&tracing::Span::current()))
            .count();
        assert_eq!(traced, 0);
        println!(
            "tracing off: the check whether a span is traced, {:.0} ns",
            t.elapsed().as_nanos() as f64 / f64::from(CHECKS)
        );
    });
    // The process's counts are the first pipeline's: ratio 1.0.
    let stats = traces::stats();
    println!(
        "at ratio 1.0: {} spans exported, {} dropped, for {} passes",
        stats.exported,
        stats.dropped,
        BLOCKS * PER_BLOCK
    );
    drop(jaeger);
}
