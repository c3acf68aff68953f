//! Policies from a registry: what a push, a first pull (and its compile),
//! and a restart's pull from the artifact cache cost, for `fanout` (0.3 MB)
//! and for a 12 MiB component (`fanout` with a 12 MiB data segment, the
//! size of an interpreter-based policy).
//!
//! ```sh
//! cargo xtask registry && cargo xtask guests
//! cargo bench -p policyhost-tests --bench oci
//! OCI_BENCH_SAMPLES=20 cargo bench -p policyhost-tests --bench oci
//! ```
//!
//! The CNCF distribution registry runs on loopback with TLS and basic auth,
//! as in the tests. Each sample is a new version (another digest), so the
//! push uploads both blobs and the first load compiles. Per sample:
//!
//! - **push**: `policy push --oci`'s upload (config, component, manifest);
//! - **first pull**: a new puller on an empty artifact cache pulls it by
//!   digest (manifest, layer, both digests checked), then the runtime loads
//!   it (compile, validate, with a compile cache of its own);
//! - **restart**: a new puller on the same artifact cache and a new runtime
//!   on the same compile cache: what an operator restart costs, no registry
//!   reached and nothing compiled.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::bench::env_number;
use common::registry::{Registry, USER};
use common::variants::with_data_segment;
use policyhost::oci::{self, BlobCache, Client, ClientConfig, Credentials, PullGrant, Puller};
use policyhost::runtime::{PolicySpec, Runtime, RuntimeConfig};
use policyhost_measure::{load_average_text, percentile_ms};

fn main() {
    common::bench::block_on(bench());
}

/// One sample's times.
#[derive(Debug, Default)]
struct Sample {
    push: Duration,
    pull: Duration,
    compile: Duration,
    restart: Duration,
}

impl Sample {
    fn columns(&self) -> [Duration; 4] {
        [self.push, self.pull, self.compile, self.restart]
    }
}

async fn bench() {
    let samples: usize = env_number("OCI_BENCH_SAMPLES", 10);
    println!("load average before: {}", load_average_text());
    let registry = Registry::start().await;
    let client = Client::new(&ClientConfig {
        extra_roots: vec![registry.ca()],
        ..ClientConfig::default()
    })
    .expect("a registry client");
    let login = Credentials::parse(
        serde_json::json!({"auths": {registry.host(): {"username": USER, "password": registry.password()}}})
            .to_string()
            .as_bytes(),
    )
    .expect("credentials");
    let grant = PullGrant {
        prefixes: vec![
            format!("{}/bench/", registry.host())
                .parse()
                .expect("a prefix"),
        ],
        credentials: login.clone(),
    };
    let fanout = common::guest_bytes("fanout");
    for label in ["fanout", "12 MiB"] {
        let mut measured = Vec::new();
        let mut size = 0;
        for seed in 0..samples as u64 {
            let component = if label == "fanout" {
                common::variants::version(&fanout, &format!("oci-bench-{seed}"))
            } else {
                with_data_segment(&fanout, 12 << 20, seed)
            };
            size = component.len();
            let reference: oci::Reference = format!(
                "{}/bench/{}:{seed}",
                registry.host(),
                label.replace(' ', "-").to_lowercase()
            )
            .parse()
            .expect("a reference");
            let scratch =
                common::scratch().join(format!("oci-bench-{}-{seed}", std::process::id()));
            let _ = std::fs::remove_dir_all(&scratch);
            let (artifacts, compiled) = (scratch.join("artifacts"), scratch.join("compiled"));
            let started = Instant::now();
            let digest = oci::push::push(
                &client,
                &reference,
                login.for_registry(&registry.host()),
                &component,
            )
            .await
            .expect("push");
            let push = started.elapsed();
            let pinned = reference.with_digest(digest);
            let puller =
                |deadline| Puller::new(client.clone(), BlobCache::new(artifacts.clone()), deadline);
            let runtime = || {
                Runtime::new(RuntimeConfig {
                    threads: 1,
                    cache_dir: Some(compiled.clone()),
                    ..RuntimeConfig::default()
                })
                .expect("a runtime")
            };
            let started = Instant::now();
            let pulled = puller(Duration::from_secs(60))
                .pull(&pinned, &grant, 64 << 20)
                .await
                .expect("the first pull");
            let pull = started.elapsed();
            assert!(pulled.from_registry);
            let started = Instant::now();
            runtime()
                .load(PolicySpec::new("bench"), &pulled.component)
                .expect("load");
            let compile = started.elapsed();
            let started = Instant::now();
            let cached = puller(Duration::from_secs(60))
                .pull(&pinned, &grant, 64 << 20)
                .await
                .expect("from the cache");
            runtime()
                .load(PolicySpec::new("bench"), &cached.component)
                .expect("load from the compile cache");
            let restart = started.elapsed();
            assert!(!cached.from_registry, "a restart reaches no registry");
            measured.push(Sample {
                push,
                pull,
                compile,
                restart,
            });
            let _ = std::fs::remove_dir_all(&scratch);
        }
        report(label, size, &measured);
    }
    println!("load average after: {}", load_average_text());
}

fn report(label: &str, size: usize, samples: &[Sample]) {
    println!(
        "\n{label} ({:.2} MB, n={}): p50 / p99 / max, ms",
        size as f64 / 1e6,
        samples.len()
    );
    let names = [
        "push",
        "first pull",
        "first compile",
        "restart: cached pull + load",
    ];
    for (column, name) in names.iter().enumerate() {
        let mut times: Vec<Duration> = samples.iter().map(|s| s.columns()[column]).collect();
        times.sort();
        println!(
            "  {name:<28} {:>8.1} / {:>8.1} / {:>8.1}",
            percentile_ms(&times, 0.5),
            percentile_ms(&times, 0.99),
            percentile_ms(&times, 1.0)
        );
    }
}
