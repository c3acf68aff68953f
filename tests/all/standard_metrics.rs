//! controller-runtime's standard metrics, held to the real thing: a Go
//! program built against controller-runtime v0.25.3
//! (`tools/standard-metrics/families`, built by `cargo xtask
//! standard-metrics`) lists the families a controller-runtime operator
//! exports, with their types, label names and buckets, and `policyhost run`
//! must export each the same; then the queries of kubebuilder's Grafana
//! dashboards (v4.16.0) are evaluated on two of its scrapes by Prometheus'
//! own PromQL engine (`tools/standard-metrics/dashboards`), and each must
//! find series.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;
use serde_json::json;

use crate::common::cluster::{Env, condition, eventually, phase};
use crate::common::process::Replica;
use crate::common::replicas::{ops_namespace, replica_args};
use crate::common::scrape::Scrape;
use crate::common::{scratch, target_dir};

/// The built reference program `name` (`families` or `dashboards`).
fn tool(name: &str) -> PathBuf {
    let path = target_dir().join("standard-metrics").join(name).join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask standard-metrics` first",
        path.display()
    );
    path
}

/// A family as the reference lists it.
#[derive(Debug, Deserialize)]
struct Family {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    labels: Vec<String>,
    /// Upper bounds as Go prints them (the shortest decimal of the float),
    /// read with Rust's correctly rounded parser.
    #[serde(default)]
    buckets: Vec<String>,
}

/// A dashboard query's result.
#[derive(Debug, Deserialize)]
struct Query {
    #[serde(default)]
    title: String,
    expr: String,
    series: usize,
    error: Option<String>,
}

/// Runs the reference program `name` with `args` and reads its JSON answer.
fn answer<T: serde::de::DeserializeOwned>(name: &str, args: &[&std::ffi::OsStr]) -> T {
    let out = Command::new(tool(name))
        .args(args)
        .output()
        .expect("run a reference program");
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("an answer in JSON")
}

/// What differs between `family` and the scrape's family of that name:
/// none if it is exported with the same type, label names and buckets.
fn differences(family: &Family, scrape: &Scrape) -> Vec<String> {
    // OpenMetrics names a counter's family without its `_total`.
    let (base, samples) = match family.kind.as_str() {
        "counter" => (
            family.name.trim_end_matches("_total").to_owned(),
            vec![family.name.clone()],
        ),
        "histogram" => (
            family.name.clone(),
            ["_bucket", "_sum", "_count"]
                .iter()
                .map(|suffix| format!("{}{suffix}", family.name))
                .collect(),
        ),
        _ => (family.name.clone(), vec![family.name.clone()]),
    };
    let mut found = Vec::new();
    match scrape.types.get(&base) {
        None => return vec![format!("{}: not exported", family.name)],
        Some(kind) if *kind != family.kind => {
            found.push(format!("{}: a {kind}, not a {}", family.name, family.kind))
        }
        Some(_) => {}
    }
    let want: BTreeSet<&str> = family.labels.iter().map(String::as_str).collect();
    for sample in &samples {
        let Some(labels) = scrape.series.get(sample) else {
            found.push(format!("{sample}: no samples"));
            continue;
        };
        let have: BTreeSet<&str> = labels
            .iter()
            .map(String::as_str)
            .filter(|label| *label != "le")
            .collect();
        if have != want {
            found.push(format!("{sample}: labels {have:?}, not {want:?}"));
        }
    }
    if family.kind == "histogram" {
        let bucket = format!("{}_bucket", family.name);
        let have = scrape.bounds.get(&bucket).cloned().unwrap_or_default();
        let want: Vec<f64> = family
            .buckets
            .iter()
            .map(|bound| bound.parse().unwrap_or(f64::NAN))
            .collect();
        if have != want {
            found.push(format!("{bucket}: bounds {have:?}, not {want:?}"));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_runtime_families_and_kubebuilder_dashboards_find_policyhost() {
    let env = Env::cluster_only().await;
    let ops = ops_namespace(&env).await;
    let args = replica_args(&env, &ops);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = Replica::start("standard", &env.kubeconfig_file(), &args);
    eventually("the replica to lead", || async {
        let (_, text) = replica.get("/metrics")?;
        text.lines()
            .any(|line| line.starts_with("leader_election_master_status{") && line.ends_with(" 1"))
            .then_some(())
    })
    .await;
    let quick = json!({
        "replicas": 1,
        "image": "busybox:1.36",
        "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "0"},
    });
    // A pass that succeeds, and one refused for its params: a terminal error.
    env.create_job("ok", "fanout", quick).await;
    env.create_job("bad", "fanout", json!({"replicas": "three"}))
        .await;
    env.wait_job("ok", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    env.wait_job("bad", "refused for its params", |j| {
        condition(j, "Ready").is_some_and(|c| c.reason == "InvalidParams")
    })
    .await;
    let first = replica.get("/metrics").expect("a scrape").1;

    let scrape = Scrape::parse(&first);
    let reference: Vec<Family> = answer("families", &[]);
    let named: Vec<&str> = reference.iter().map(|f| f.name.as_str()).collect();
    for expected in [
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds",
        "workqueue_depth",
        "workqueue_queue_duration_seconds",
        "rest_client_requests_total",
        "leader_election_master_status",
        "process_resident_memory_bytes",
    ] {
        assert!(named.contains(&expected), "{expected} not in {named:?}");
    }
    // A controller-runtime operator registers its webhooks' panic counters
    // whether it serves webhooks or not; policyhost serves none.
    let differences: Vec<String> = reference
        .iter()
        .filter(|family| !family.name.contains("webhook"))
        .flat_map(|family| differences(family, &scrape))
        .collect();
    assert!(
        differences.is_empty(),
        "{}\n\n{first}",
        differences.join("\n")
    );
    for line in [
        r#"controller_runtime_reconcile_errors_total{controller="datajob"} "#,
        r#"controller_runtime_terminal_reconcile_errors_total{controller="datajob"} "#,
    ] {
        let counted = first
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .and_then(|n| n.trim().parse::<f64>().ok());
        assert!(counted >= Some(1.0), "{line}: {counted:?}\n{first}");
    }

    // A second scrape after more work, so that rates have two points.
    env.create_job(
        "again",
        "fanout",
        json!({"replicas": 1, "image": "busybox:1.36"}),
    )
    .await;
    env.wait_job("again", "its Pod created", |j| phase(j).is_some())
        .await;
    let second = replica.get("/metrics").expect("a scrape").1;
    let dir = scratch().join(format!("{}-standard-metrics", env.namespace));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let (one, two) = (dir.join("first.txt"), dir.join("second.txt"));
    std::fs::write(&one, &first).expect("write a scrape");
    std::fs::write(&two, &second).expect("write a scrape");
    let templates = target_dir().join("standard-metrics/kubebuilder");
    let labels = [
        "job=policyhost".to_owned(),
        format!("namespace={ops}"),
        "pod=standard".to_owned(),
        format!("instance={}", replica.addr),
    ];
    let os = |text: &'static str| std::ffi::OsStr::new(text);
    let mut args = Vec::new();
    for scrape in [&one, &two] {
        args.extend([os("--scrape"), scrape.as_os_str()]);
    }
    for label in &labels {
        args.extend([os("--label"), std::ffi::OsStr::new(label.as_str())]);
    }
    let (runtime, resources) = (templates.join("runtime.go"), templates.join("resources.go"));
    args.extend([runtime.as_os_str(), resources.as_os_str()]);
    let queries: Vec<Query> = answer("dashboards", &args);
    assert!(queries.len() >= 10, "{queries:?}");
    let empty: Vec<&Query> = queries
        .iter()
        .filter(|q| q.series == 0 || q.error.is_some())
        .collect();
    assert!(
        empty.is_empty(),
        "queries of kubebuilder's dashboards that find nothing: {empty:#?}"
    );
    for query in &queries {
        eprintln!("{} series: {} ({})", query.series, query.title, query.expr);
    }
    drop(replica);
}
