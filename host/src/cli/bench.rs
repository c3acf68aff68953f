//! `policyhost policy bench`: calls per second, latency percentiles and
//! fuel per call of one policy, instance-per-call, on C threads.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use policyhost::Runtime;
use policyhost::runtime::{EngineConfig, Input, PolicySpec, RuntimeConfig};
use policyhost_measure::{Process, cpu_seconds, percentile};
use serde::Serialize;

use super::LimitArgs;
use super::duration::{self, DurationArg};
use super::terminal::{self, println};

/// Arguments of `policy bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The policy component (`.wasm`).
    file: PathBuf,
    /// The DataJob (YAML or JSON).
    #[arg(long, value_name = "JOB.yaml")]
    job: PathBuf,
    /// Synthetic running worker Pods handed to every call.
    #[arg(long, value_name = "N", default_value_t = 10)]
    children: usize,
    /// How long to measure (after a short warm-up).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::seconds_before)]
    duration: DurationArg,
    /// Threads calling concurrently.
    #[arg(long, value_name = "C", default_value_t = 1)]
    concurrency: usize,
    /// Print the figures as JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    pool: PoolArgs,
}

/// Instance pool settings, to measure what they change (defaults: the
/// runtime's).
#[derive(Debug, Args)]
struct PoolArgs {
    /// Bytes of each linear memory reset with memset and kept resident.
    #[arg(long, value_name = "BYTES")]
    memory_keep_resident: Option<usize>,
    /// Bytes of each table reset with memset and kept resident.
    #[arg(long, value_name = "BYTES")]
    table_keep_resident: Option<usize>,
    /// Decommits batched per madvise round.
    #[arg(long, value_name = "N")]
    decommit_batch_size: Option<usize>,
    /// Reset only dirtied pages (Linux PAGEMAP_SCAN) when available.
    #[arg(long, value_name = "BOOL")]
    pagemap_scan: Option<bool>,
    /// Instances alive at once (the pool's size; it reserves address space
    /// for each, which tools such as valgrind limit).
    #[arg(long, value_name = "N")]
    max_instances: Option<u32>,
}

impl PoolArgs {
    fn apply(&self, config: &mut EngineConfig) {
        if let Some(bytes) = self.memory_keep_resident {
            config.memory_keep_resident = bytes;
        }
        if let Some(bytes) = self.table_keep_resident {
            config.table_keep_resident = bytes;
        }
        if let Some(n) = self.decommit_batch_size {
            config.decommit_batch_size = n;
        }
        if let Some(enabled) = self.pagemap_scan {
            config.pagemap_scan = enabled;
        }
        if let Some(n) = self.max_instances {
            config.max_instances = n;
        }
    }
}

/// The figures `policy bench` reports.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Figures {
    calls: u64,
    errors: u64,
    seconds: f64,
    calls_per_second: f64,
    p50_us: f64,
    p99_us: f64,
    fuel_per_call: u64,
    instantiate_p50_us: f64,
    instantiate_us: f64,
    /// Process CPU time (user + system) per call: what a call costs when the
    /// machine is shared and wall-clock throughput understates it.
    cpu_us_per_call: Option<f64>,
    concurrency: usize,
    children: usize,
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let bytes = super::read(&args.file)?;
    let now = policyhost::runtime::reference::NOW_UNIX_MS;
    let mut input = super::input::load(&args.job, None, Some(now), 1)?;
    input.children = policyhost::runtime::reference::workers(&input.job.name, args.children);
    let mut config = RuntimeConfig {
        threads: args.concurrency.max(1),
        ..RuntimeConfig::default()
    };
    args.pool.apply(&mut config.engine);
    let runtime = Runtime::new(config)?;
    let spec = PolicySpec::new("bench").limits(args.limits.policy_limits());
    let policy = runtime.load(spec, &bytes).context("loading the policy")?;
    let probe = runtime.reconcile_blocking(&policy, &input);
    let fuel_per_call = probe.report.fuel_consumed;
    probe.result.context("the policy fails on this input")?;
    warm_up(&runtime, &policy, &input);

    let duration = args.duration.0.max(Duration::from_millis(100));
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let bar = ProgressBar::new(duration.as_millis() as u64).with_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} [{bar:30}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let cpu_before = cpu_seconds(Process::This);
    let started = Instant::now();
    // Each call's time and the part of it spent instantiating, in ns.
    let samples: Vec<(u32, u32)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.concurrency.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::with_capacity(1 << 20);
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let outcome = runtime.reconcile_blocking(&policy, &input);
                        let failed = outcome.result.is_err();
                        let instantiate = outcome.report.instantiate;
                        // The result is dropped inside the measured time: a
                        // caller pays for it too.
                        drop(outcome);
                        let nanos = |d: Duration| u32::try_from(d.as_nanos()).unwrap_or(u32::MAX);
                        mine.push((nanos(t.elapsed()), nanos(instantiate)));
                        calls.fetch_add(1, Ordering::Relaxed);
                        if failed {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    mine
                })
            })
            .collect();
        while started.elapsed() < duration {
            std::thread::sleep(Duration::from_millis(100));
            let secs = started.elapsed().as_secs_f64();
            bar.set_position(started.elapsed().as_millis() as u64);
            bar.set_message(format!(
                "{:.0} calls/s",
                calls.load(Ordering::Relaxed) as f64 / secs
            ));
        }
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(Process::This)
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    bar.finish_and_clear();
    let (mut latencies, mut instantiations): (Vec<u32>, Vec<u32>) = samples.into_iter().unzip();
    let instantiating: u64 = instantiations.iter().map(|&ns| u64::from(ns)).sum();
    latencies.sort_unstable();
    instantiations.sort_unstable();
    let total = latencies.len() as u64;
    let figures = Figures {
        calls: total,
        errors: errors.load(Ordering::Relaxed),
        seconds,
        calls_per_second: total as f64 / seconds,
        p50_us: micros(percentile(&latencies, 0.50)),
        p99_us: micros(percentile(&latencies, 0.99)),
        fuel_per_call,
        instantiate_p50_us: micros(percentile(&instantiations, 0.50)),
        instantiate_us: instantiating as f64 / total.max(1) as f64 / 1000.0,
        cpu_us_per_call: cpu.map(|cpu| cpu * 1e6 / total.max(1) as f64),
        concurrency: args.concurrency.max(1),
        children: args.children,
    };
    if args.json {
        terminal::print_json(&figures)?;
    } else {
        println!(
            "{} calls in {:.2} s on {} thread(s), {} children: {:.0} calls/s, p50 {:.1} µs, p99 {:.1} µs, {} fuel/call, instantiate p50 {:.1} µs (mean {:.1}), CPU {} µs/call, {} errors",
            figures.calls,
            figures.seconds,
            figures.concurrency,
            figures.children,
            figures.calls_per_second,
            figures.p50_us,
            figures.p99_us,
            figures.fuel_per_call,
            figures.instantiate_p50_us,
            figures.instantiate_us,
            figures
                .cpu_us_per_call
                .map_or_else(|| "?".to_owned(), |us| format!("{us:.1}")),
            figures.errors
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn warm_up(runtime: &Runtime, policy: &policyhost::Policy, input: &Input) {
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        let _ = runtime.reconcile_blocking(policy, input);
    }
}

/// Nanoseconds as microseconds; `0` without samples.
fn micros(nanos: Option<u32>) -> f64 {
    nanos.map_or(0.0, |ns| f64::from(ns) / 1000.0)
}
