//! Traces through a real collector: `policyhost run --otlp-endpoint` sends
//! each pass of a DataJob to a Jaeger on loopback (built from its Go module
//! by `cargo xtask jaeger`), and its query API finds them all by the
//! DataJob's name: the passes, the wait before each, the guest calls with
//! their log lines, the API requests, the cleanup and the release. A
//! collector that never answers costs dropped spans, counted, and nothing
//! else; a candidate's shadow call is a span of the pass it shadows. Runs
//! on devcluster and on the real control plane.

use std::collections::BTreeSet;
use std::net::TcpListener;

use kube::api::DeleteParams;
use serde_json::json;

use crate::common::cluster::{Env, eventually, phase};
use crate::common::jaeger::{self, Span};
use crate::common::process::Replica;
use crate::common::replicas::{alone_args, ops_namespace, replica_args};
use crate::common::{for_every_namespace, guest_bytes, publishing};

/// The batch processor's delay in the tests: spans reach Jaeger within it.
const SCHEDULE_DELAY_MS: &str = "100";

/// A DataJob whose one Pod ends as soon as it starts.
fn quick(replicas: u32) -> serde_json::Value {
    json!({
        "replicas": replicas,
        "image": "busybox:1.36",
        "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "0"},
    })
}

/// The replica `name`, leading, exporting to `endpoint` with `env`.
fn traced_replica(
    env: &Env,
    ops: &str,
    name: &str,
    endpoint: &str,
    vars: &[(&str, &str)],
) -> Replica {
    let mut args = replica_args(env, ops);
    args.extend(["--otlp-endpoint".to_owned(), endpoint.to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    vars.push(("POD_NAME".to_owned(), name.to_owned()));
    Replica::start_with_env(name, &env.kubeconfig_file(), &args, &vars)
}

/// The value of the sample `name` (no labels) in `replica`'s scrape.
fn sample(replica: &Replica, name: &str) -> Option<f64> {
    let (_, text) = replica.get("/metrics")?;
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))?;
    line.trim().parse().ok()
}

fn child_of<'a>(spans: &'a [Span], parent: &Span, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent.as_deref() == Some(parent.id.as_str()) && s.name == name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datajobs_passes_reach_jaeger_as_traces_from_its_creation_to_its_release() {
    let env = Env::cluster_only().await;
    let collector = jaeger::start(&env.namespace);
    let ops = ops_namespace(&env).await;
    let replica = traced_replica(
        &env,
        &ops,
        "traced",
        &collector.otlp_endpoint(),
        &[("OTEL_BSP_SCHEDULE_DELAY", SCHEDULE_DELAY_MS)],
    );
    env.create_job("traced", "fanout", quick(2)).await;
    env.wait_job("traced", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    let job = format!("{}/traced", env.namespace);
    // A child's change once the DataJob rests: its pass waits out the
    // settle window (earlier ones may have found it queued already).
    env.pods()
        .delete("traced-worker-0", &DeleteParams::default())
        .await
        .expect("delete a worker");
    eventually("a pass for the child's change in Jaeger", || {
        let spans = jaeger::spans(&collector, &job);
        let settled = spans
            .iter()
            .any(|s| s.parent.is_none() && s.tag("cause") == Some("child-changed"));
        async move { settled.then_some(()) }
    })
    .await;
    env.delete_job_and_wait("traced").await;
    let spans = eventually("the release's and the last pass's traces in Jaeger", || {
        let spans = jaeger::spans(&collector, &job);
        let released = spans.iter().any(|s| s.name == "release");
        let forgotten = spans.iter().any(|s| s.name == "forget");
        async move { (released && forgotten).then_some(spans) }
    })
    .await;
    let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();

    // Each pass is the root of its trace, named for what it is and by whom
    // (the last one only forgets the DataJob, gone).
    let roots: Vec<&Span> = spans.iter().filter(|s| s.parent.is_none()).collect();
    let kinds: BTreeSet<&str> = roots.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["reconcile", "cleanup", "forget"]),
        "{names:?}"
    );
    // Nothing outside a pass is a trace of its own: no watch, no Lease, no
    // policy load.
    let every = jaeger::every_span(&collector);
    let strays: BTreeSet<&str> = every
        .iter()
        .filter(|s| s.parent.is_none())
        .map(|s| s.name.as_str())
        .filter(|name| !["reconcile", "cleanup", "forget"].contains(name))
        .collect();
    assert!(strays.is_empty(), "roots that are no pass: {strays:?}");
    for root in &roots {
        assert_eq!(root.tag("job"), Some(job.as_str()), "{root:?}");
        if root.name != "forget" {
            assert_eq!(root.tag("policy"), Some("fanout"), "{root:?}");
            assert_eq!(root.tag("digest").map(str::len), Some(64), "{root:?}");
        }
        assert!(
            root.tag("cause").is_some() && root.tag("next").is_some(),
            "{root:?}"
        );
        assert_eq!(
            child_of(&spans, root, "queue wait").len(),
            1,
            "each pass's wait in the queue: {root:?}"
        );
    }
    // A child's change waited out the settle window before its pass.
    let settled = roots
        .iter()
        .find(|r| r.tag("cause") == Some("child-changed"))
        .expect("a pass for a child's change");
    assert_eq!(
        child_of(&spans, settled, "settle window").len(),
        1,
        "{names:?}"
    );

    // The first pass added the finalizer and went on: its guest call, with
    // its figures and the policy's log lines as events, then one create per
    // Pod. (A later pass created the deleted worker again; the query API
    // answers in no particular order.)
    let created = roots
        .iter()
        .filter(|r| !child_of(&spans, r, "create pods").is_empty())
        .min_by_key(|r| r.start)
        .expect("a pass that created Pods");
    let added = child_of(&spans, created, "finalizer add-finalizer");
    assert_eq!(added.len(), 1, "the finalizer in the same pass: {names:?}");
    assert_eq!(added[0].tag("next"), Some("reconcile"), "{:?}", added[0]);
    let calls = child_of(&spans, created, "guest reconcile");
    assert_eq!(calls.len(), 1, "{names:?}");
    let call = calls[0];
    assert_eq!(call.tag("result"), Some("ok"), "{call:?}");
    for figure in ["fuel", "memory_peak_bytes", "instantiate_us"] {
        let value: u64 = call.tag(figure).and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(value > 0, "{figure} of {call:?}");
    }
    assert!(
        call.events
            .iter()
            .any(|e| e.get("event").is_some_and(|m| m.contains("phase"))),
        "the policy's log line as an event: {call:?}"
    );
    for create in child_of(&spans, created, "create pods") {
        assert_eq!(create.tag("verb"), Some("create"));
        assert_eq!(create.tag("code"), Some("201"));
        assert_eq!(create.tag("namespace"), Some(env.namespace.as_str()));
        assert_eq!(create.tag("retries"), Some("0"));
    }
    let created_pods = spans
        .iter()
        .filter(|s| s.name == "create pods" && s.tag("code") == Some("201"))
        .count();
    assert!(created_pods >= 2, "each worker's create: {names:?}");
    assert!(names.contains("apply datajobs/status"), "{names:?}");

    // The deletion: the cleanup through the finalizer's step, its guest
    // call, then the release: the finalizer's removal.
    let cleanup = roots
        .iter()
        .find(|r| r.name == "cleanup" && !child_of(&spans, r, "finalizer cleanup").is_empty())
        .expect("a cleanup pass");
    let step = child_of(&spans, cleanup, "finalizer cleanup")[0];
    assert_eq!(
        child_of(&spans, step, "guest cleanup").len(),
        1,
        "{names:?}"
    );
    let release = spans
        .iter()
        .find(|s| s.name == "release")
        .expect("the release");
    let patches = child_of(&spans, release, "patch datajobs");
    assert_eq!(patches.len(), 1, "{names:?}");
    assert_eq!(patches[0].tag("code"), Some("200"));

    let exported = sample(&replica, "policyhost_trace_spans_exported_total").unwrap_or(0.0);
    assert!(exported >= spans.len() as f64, "{exported} exported");
    assert_eq!(
        sample(&replica, "policyhost_trace_spans_dropped_total"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_costs_counted_spans_and_nothing_else() {
    let env = Env::cluster_only().await;
    // Takes connections and never answers: every export times out.
    let silent = TcpListener::bind("127.0.0.1:0").expect("a listener");
    let endpoint = format!("http://{}", silent.local_addr().expect("its address"));
    let held = std::thread::spawn(move || silent.incoming().take(64).collect::<Vec<_>>());
    let ops = ops_namespace(&env).await;
    let replica = traced_replica(
        &env,
        &ops,
        "silent",
        &endpoint,
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", SCHEDULE_DELAY_MS),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "20"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
        ],
    );
    let names: Vec<String> = (0..12).map(|i| format!("job-{i}")).collect();
    for name in &names {
        env.create_job(name, "fanout", quick(1)).await;
    }
    for name in &names {
        env.wait_job(name, "Succeeded", |j| phase(j) == Some("Succeeded"))
            .await;
    }
    let dropped = eventually("spans dropped and counted", || {
        let dropped = sample(&replica, "policyhost_trace_spans_dropped_total");
        async move { dropped.filter(|&n| n > 0.0) }
    })
    .await;
    assert_eq!(
        sample(&replica, "policyhost_trace_spans_exported_total"),
        Some(0.0),
        "{dropped} dropped"
    );
    drop(replica);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidates_shadow_call_is_a_span_of_the_pass_it_shadows() {
    let env = Env::cluster_only().await;
    let collector = jaeger::start(&env.namespace);
    let endpoint = collector.otlp_endpoint();
    let name = format!("{}-shadowed", env.namespace);
    let args = alone_args(&env, &["--otlp-endpoint", endpoint.as_str()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let vars = [
        ("POD_NAME".to_owned(), name.clone()),
        (
            "OTEL_BSP_SCHEDULE_DELAY".to_owned(),
            SCHEDULE_DELAY_MS.to_owned(),
        ),
    ];
    let _replica = Replica::start_with_env(&name, &env.kubeconfig_file(), &args, &vars);
    publishing::push(&env, "fanout", &guest_bytes("fanout")).await;
    publishing::push_candidate(
        &env,
        "fanout",
        &guest_bytes("fanout-next"),
        &for_every_namespace(),
    )
    .await;
    env.create_job("shadowed", "fanout", quick(1)).await;
    env.wait_job("shadowed", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    let job = format!("{}/shadowed", env.namespace);
    // The shadow's span ends before its pass's does, so the two may reach
    // Jaeger in different batches: wait for both.
    let (spans, shadow, pass) = eventually("a shadow call's span and its pass in Jaeger", || {
        let spans = jaeger::spans(&collector, &job);
        let pair = spans.iter().find_map(|shadow| {
            let pass = spans
                .iter()
                .find(|s| Some(s.id.as_str()) == shadow.parent.as_deref())?;
            (shadow.name == "shadow reconcile").then(|| (shadow.clone(), pass.clone()))
        });
        async move { pair.map(|(shadow, pass)| (spans, shadow, pass)) }
    })
    .await;
    let shadow = &shadow;
    assert_eq!(pass.name, "reconcile", "{pass:?}");
    assert_eq!(shadow.tag("policy"), Some("fanout"), "{shadow:?}");
    assert_eq!(shadow.tag("entry"), Some("reconcile"), "{shadow:?}");
    assert_ne!(shadow.tag("candidate"), pass.tag("digest"), "{shadow:?}");
    assert!(
        matches!(shadow.tag("verdict"), Some("same" | "differs")),
        "{shadow:?}"
    );
    // The candidate's own call, inside the shadow's span.
    assert_eq!(child_of(&spans, shadow, "guest reconcile").len(), 1);
}
