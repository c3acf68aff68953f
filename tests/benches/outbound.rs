//! Outbound HTTP through the runtime, against the test cloud
//! (`tests/common/cloud.rs`, HTTPS on loopback): what a granted call costs
//! when it makes no request, beside the calls of policies without a grant;
//! and requests through the host's client, one per call and eight per call,
//! with their latency percentiles.
//!
//! `cargo bench -p policyhost-tests --bench outbound` (guests first:
//! `cargo xtask guests`; `OUTBOUND_CALLS=N` changes the calls per block).
//!
//! The call figures alternate blocks of each kind, so that the machine's
//! noise falls on all of them alike; percentiles are nearest rank
//! (`policyhost-measure`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use policyhost::outbound::{ClientConfig, Outbound};
use policyhost::runtime::{Input, Policy, PolicySpec, Runtime, RuntimeConfig, reference};
use policyhost_measure::percentile;
use serde_json::json;

#[path = "../common/mod.rs"]
mod common;

use common::bench::env_number;
use common::cloud::Cloud;

struct Kind {
    name: &'static str,
    policy: Arc<Policy>,
    input: Input,
    requests: u32,
    samples: Vec<Duration>,
}

fn granted(runtime: &Runtime, origin: &str) -> Arc<Policy> {
    let data = [
        ("origins".to_owned(), origin.to_owned()),
        ("requestsPerCall".to_owned(), "8".to_owned()),
    ]
    .into_iter()
    .collect();
    let grant = policyhost::grants::network::parse(&data).expect("grant");
    let outbound = Outbound::new(grant, &Default::default()).expect("no credentials");
    runtime
        .load(
            PolicySpec::new("http-probe").outbound(Some(Arc::new(outbound))),
            &common::guest_bytes("http-probe"),
        )
        .expect("load http-probe")
}

fn probe_input(urls: &[String]) -> Input {
    let requests: Vec<_> = urls.iter().map(|url| json!({ "url": url })).collect();
    common::input(common::job(
        "bench",
        "team-a",
        json!({ "requests": requests }),
    ))
}

fn main() {
    let calls = env_number("OUTBOUND_CALLS", 2_000);
    let cloud = Cloud::start();
    let runtime = Runtime::new(RuntimeConfig {
        threads: 1,
        outbound: ClientConfig {
            extra_roots: vec![cloud.ca()],
        },
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let origin = cloud.origin();
    let probe = granted(&runtime, &origin);
    let url = format!("{origin}/buckets/bench");
    let mut kinds = vec![
        Kind {
            name: "fanout-10 (no grant)",
            policy: common::load(&runtime, "fanout", Default::default()),
            input: reference::fanout(10),
            requests: 0,
            samples: Vec::new(),
        },
        Kind {
            name: "static-counter (no grant)",
            policy: common::load(&runtime, "static-counter", Default::default()),
            input: common::input(common::job("bench", "team-a", json!({}))),
            requests: 0,
            samples: Vec::new(),
        },
        Kind {
            name: "http-probe, granted, no request",
            policy: Arc::clone(&probe),
            input: probe_input(&[]),
            requests: 0,
            samples: Vec::new(),
        },
        Kind {
            name: "http-probe, 1 request per call",
            policy: Arc::clone(&probe),
            input: probe_input(std::slice::from_ref(&url)),
            requests: 1,
            samples: Vec::new(),
        },
        Kind {
            name: "http-probe, 8 requests per call",
            policy: Arc::clone(&probe),
            input: probe_input(&vec![url.clone(); 8]),
            requests: 8,
            samples: Vec::new(),
        },
    ];
    println!("load before: {}", policyhost_measure::load_average_text());
    for _round in 0..4 {
        for kind in &mut kinds {
            // The requests' kinds get fewer calls: each is a TLS handshake.
            let n = if kind.requests == 0 {
                calls
            } else {
                calls / 10 / kind.requests as usize
            };
            for _ in 0..n.max(1) {
                let started = Instant::now();
                let outcome = runtime.reconcile_blocking(&kind.policy, &kind.input);
                let took = started.elapsed();
                outcome
                    .result
                    .unwrap_or_else(|e| panic!("{}: {e}", kind.name));
                assert_eq!(
                    outcome.report.outbound.requests, kind.requests,
                    "{}",
                    kind.name
                );
                kind.samples.push(took);
            }
        }
    }
    println!("load after: {}", policyhost_measure::load_average_text());
    println!("| call | calls | p50 | p99 | calls/s | requests/s |");
    println!("|---|---|---|---|---|---|");
    for kind in &mut kinds {
        kind.samples.sort_unstable();
        let total: Duration = kind.samples.iter().sum();
        let per_second = kind.samples.len() as f64 / total.as_secs_f64();
        let p = |q| percentile(&kind.samples, q).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
        println!(
            "| {} | {} | {:.1} µs | {:.1} µs | {:.0} | {} |",
            kind.name,
            kind.samples.len(),
            p(0.50),
            p(0.99),
            per_second,
            if kind.requests == 0 {
                "—".to_owned()
            } else {
                format!("{:.0}", per_second * f64::from(kind.requests))
            },
        );
    }
    println!("cloud requests: {}", cloud.requests());
}
