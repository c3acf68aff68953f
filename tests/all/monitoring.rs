//! The alert rules and the Grafana dashboard in `deploy/monitoring/` name
//! only metrics, and labels, that `policyhost run` exports on `/metrics`.
//!
//! A scenario makes every metric family show samples (success, invalid
//! params, a guest fault, a cleanup that fails until it is blocked and force
//! released, a rejected policy version, ...); then every expression is parsed
//! with a PromQL parser and each selector, label matcher and grouping label
//! is looked up in the scrape.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use policyhost::crd::{CleanupSpec, DataJob, DataJobSpec};
use promql_parser::label::Matchers;
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::{Value, json};

use crate::common::cluster::{Env, condition, eventually, phase};
use crate::common::process::{Replica, policy_dir, yaml_documents};
use crate::common::scrape::Scrape;
use crate::common::{guest_bytes, workspace};

/// Labels Prometheus adds to every scraped series (target labels).
const TARGET_LABELS: [&str; 4] = ["instance", "job", "pod", "namespace"];

/// What an expression reads: selectors with their matcher labels, and the
/// labels it groups or matches by.
#[derive(Debug, Default)]
struct Reads {
    selectors: Vec<(String, Vec<String>)>,
    grouping: Vec<String>,
}

fn matcher_labels(matchers: &Matchers) -> Vec<String> {
    matchers
        .matchers
        .iter()
        .chain(matchers.or_matchers.iter().flatten())
        .map(|m| m.name.clone())
        .filter(|name| name != "__name__")
        .collect()
}

fn modifier_labels(modifier: Option<&LabelModifier>) -> Vec<String> {
    match modifier {
        Some(LabelModifier::Include(labels) | LabelModifier::Exclude(labels)) => {
            labels.labels.clone()
        }
        None => Vec::new(),
    }
}

fn walk(expr: &Expr, reads: &mut Reads) {
    match expr {
        Expr::VectorSelector(vs) => reads.selectors.push((
            vs.name.clone().unwrap_or_default(),
            matcher_labels(&vs.matchers),
        )),
        Expr::MatrixSelector(ms) => reads.selectors.push((
            ms.vs.name.clone().unwrap_or_default(),
            matcher_labels(&ms.vs.matchers),
        )),
        Expr::Aggregate(agg) => {
            reads
                .grouping
                .extend(modifier_labels(agg.modifier.as_ref()));
            walk(&agg.expr, reads);
            if let Some(param) = &agg.param {
                walk(param, reads);
            }
        }
        Expr::Binary(bin) => {
            if let Some(modifier) = &bin.modifier {
                reads
                    .grouping
                    .extend(modifier_labels(modifier.matching.as_ref()));
            }
            walk(&bin.lhs, reads);
            walk(&bin.rhs, reads);
        }
        Expr::Unary(u) => walk(&u.expr, reads),
        Expr::Paren(p) => walk(&p.expr, reads),
        Expr::Subquery(s) => walk(&s.expr, reads),
        Expr::Call(call) => {
            for arg in &call.args.args {
                walk(arg, reads);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Grafana's variables replaced by values PromQL accepts.
fn without_grafana_variables(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("${policy}", ".*")
        .replace("$policy", ".*")
}

/// Every expression in `deploy/monitoring/`, with where it is.
fn expressions() -> Vec<(String, String)> {
    let dir = workspace().join("deploy/monitoring");
    let mut all = Vec::new();
    let rules = std::fs::read_to_string(dir.join("alerts.yaml")).expect("alerts.yaml");
    for doc in yaml_documents(&rules) {
        for group in doc["groups"].as_array().expect("groups") {
            for rule in group["rules"].as_array().expect("rules") {
                let name = rule["alert"].as_str().or(rule["record"].as_str());
                all.push((
                    format!("alerts.yaml {}", name.unwrap_or("?")),
                    rule["expr"].as_str().expect("expr").to_owned(),
                ));
            }
        }
    }
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("dashboard.json")).expect("json"))
            .expect("dashboard.json is JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            all.push((
                format!("dashboard.json panel {:?}", panel["title"]),
                without_grafana_variables(target["expr"].as_str().expect("expr")),
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("list") {
        // `label_values(metric, label)`: the metric as a selector, the label grouped by.
        if let Some(query) = variable["definition"].as_str()
            && let Some(args) = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
            && let Some((metric, label)) = args.split_once(',')
        {
            all.push((
                format!("dashboard.json variable {:?}", variable["name"]),
                format!("count by ({}) ({})", label.trim(), metric.trim()),
            ));
        }
    }
    all
}

/// What is wrong with `expr` against `scrape`; empty when nothing is.
fn problems(where_: &str, expr: &str, scrape: &Scrape) -> Vec<String> {
    let parsed = match parser::parse(expr) {
        Ok(parsed) => parsed,
        Err(error) => return vec![format!("{where_}: `{expr}` does not parse: {error}")],
    };
    let mut reads = Reads::default();
    walk(&parsed, &mut reads);
    let mut found = Vec::new();
    let mut available: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
    for (name, labels) in &reads.selectors {
        let Some(exported) = scrape.series.get(name) else {
            found.push(format!("{where_}: `{name}` is not exported"));
            continue;
        };
        available.extend(exported.iter().map(String::as_str));
        for label in labels {
            if !exported.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                found.push(format!("{where_}: `{name}` has no label `{label}`"));
            }
        }
    }
    if reads.selectors.is_empty() {
        found.push(format!("{where_}: `{expr}` reads no metric"));
    }
    for label in &reads.grouping {
        if !available.contains(label.as_str()) {
            found.push(format!(
                "{where_}: grouping by `{label}`, which none of its metrics has"
            ));
        }
    }
    found
}

#[test]
fn the_checker_finds_unknown_metrics_labels_and_groupings() {
    let scrape = Scrape::parse(
        "# TYPE policyhost_reconcile counter\n\
         policyhost_reconcile_total{policy=\"a,b\",result=\"success\"} 1\n\
         # TYPE policyhost_queue_depth gauge\n\
         policyhost_queue_depth 0\n\
         # TYPE policyhost_empty counter\n",
    );
    assert_eq!(scrape.empty_families(), ["policyhost_empty"]);
    let ok = "sum by (policy) (rate(policyhost_reconcile_total{result!=\"success\"}[5m])) / on (policy) sum by (policy) (rate(policyhost_reconcile_total[5m]))";
    assert_eq!(problems("ok", ok, &scrape), Vec::<String>::new());
    assert_eq!(
        problems("x", "max(policyhost_queue_length) > 1", &scrape),
        ["x: `policyhost_queue_length` is not exported"]
    );
    assert_eq!(
        problems("x", "policyhost_reconcile_total{kind=\"Trap\"}", &scrape),
        ["x: `policyhost_reconcile_total` has no label `kind`"]
    );
    assert_eq!(
        problems("x", "sum by (kind) (policyhost_reconcile_total)", &scrape),
        ["x: grouping by `kind`, which none of its metrics has"]
    );
    assert_eq!(
        problems("x", "max by (pod) (policyhost_queue_depth)", &scrape),
        Vec::<String>::new(),
        "target labels are added by Prometheus"
    );
    assert!(problems("x", "sum(rate(", &scrape)[0].contains("does not parse"));
}

/// A DataJob of `policy` with `params` and a cleanup budget.
fn datajob(name: &str, policy: &str, params: Value, max_attempts: Option<u32>) -> DataJob {
    let Value::Object(params) = params else {
        panic!("params must be an object")
    };
    DataJob::new(
        name,
        DataJobSpec {
            policy: policy.to_owned(),
            params,
            cleanup: max_attempts.map(|n| CleanupSpec {
                max_attempts: Some(n),
                ..CleanupSpec::default()
            }),
            ..DataJobSpec::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_alert_and_dashboard_expression_names_metrics_the_binary_exports() {
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let policies = policy_dir(&["fanout", "panics", "flaky-cleanup"], &env.namespace);
    let replica = Replica::start(
        "metrics",
        &kubeconfig,
        &[
            "--namespace",
            &env.namespace,
            "--policy-dir",
            &policies.to_string_lossy(),
            "--policy-namespace",
            &env.policy_namespace,
            "--lease-namespace",
            &env.namespace,
            "--cleanup-timeout",
            "1h",
        ],
    );
    eventually("the operator to be ready", || async {
        replica
            .get("/readyz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;

    let jobs = env.jobs();
    let create = |job: DataJob| {
        let jobs = jobs.clone();
        async move {
            jobs.create(&PostParams::default(), &job)
                .await
                .expect("create")
        }
    };
    let fanout = json!({"replicas": 1, "image": "busybox:1.36"});
    create(datajob("ok", "fanout", fanout, None)).await;
    create(datajob("bad", "fanout", json!({"replicas": "three"}), None)).await;
    create(datajob("boom", "panics", json!({}), None)).await;
    create(datajob(
        "flaky",
        "flaky-cleanup",
        json!({"failures": 100, "configMaps": 1}),
        Some(1),
    ))
    .await;
    // A policy version the host rejects.
    let every_namespace = crate::common::for_every_namespace().to_data();
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("policy-broken".into()),
                    labels: Some(
                        [("policyhost.dev/policy".to_owned(), "broken".to_owned())].into(),
                    ),
                    ..ObjectMeta::default()
                },
                data: Some(every_namespace.clone()),
                binary_data: Some(
                    [(
                        "policy.wasm".to_owned(),
                        k8s_openapi::ByteString(b"not a component".to_vec()),
                    )]
                    .into(),
                ),
                ..ConfigMap::default()
            },
        )
        .await
        .expect("create the policy ConfigMap");
    // And one it loads.
    configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("policy-good".into()),
                    labels: Some([("policyhost.dev/policy".to_owned(), "good".to_owned())].into()),
                    ..ObjectMeta::default()
                },
                data: Some(every_namespace),
                binary_data: Some(
                    [(
                        "policy.wasm".to_owned(),
                        k8s_openapi::ByteString(guest_bytes("fanout")),
                    )]
                    .into(),
                ),
                ..ConfigMap::default()
            },
        )
        .await
        .expect("create the policy ConfigMap");

    env.wait_job("ok", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    env.wait_job("flaky", "its child applied", |j| {
        phase(j).is_some() && j.finalizers().iter().any(|f| f == "policyhost.dev/cleanup")
    })
    .await;
    // Cleanup: one that is done, one that fails until blocked, then released by hand.
    for name in ["ok", "flaky"] {
        jobs.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    env.wait_job("flaky", "CleanupBlocked", |j| {
        condition(j, "CleanupBlocked").is_some_and(|c| c.status == "True")
    })
    .await;
    // Gauges of DataJobs being deleted have samples only while they are.
    let blocked_text = eventually("a scrape while `flaky` is blocked", || async {
        let (_, text) = replica.get("/metrics")?;
        Scrape::parse(&text)
            .series
            .contains_key("policyhost_pending_finalizer_oldest_seconds")
            .then_some(text)
    })
    .await;
    jobs.patch(
        "flaky",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"policyhost.dev/force-release": "true"}}}),
        ),
    )
    .await
    .expect("annotate");

    let scrape = eventually("every metric family to have samples", || async {
        let (_, text) = replica.get("/metrics")?;
        let mut scrape = Scrape::parse(&text);
        // Families without samples are left out of a scrape: wait for the
        // ones the last steps fill.
        let filled = ["force_releases_total", "policy_load_duration_seconds_count"]
            .iter()
            .all(|name| scrape.series.contains_key(&format!("policyhost_{name}")));
        if scrape.empty_families().is_empty() && filled {
            scrape.merge(Scrape::parse(&blocked_text));
            Some(scrape)
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            None
        }
    })
    .await;

    let mut found = Vec::new();
    let expressions = expressions();
    assert!(expressions.len() > 20, "{expressions:?}");
    for (where_, expr) in &expressions {
        found.extend(problems(where_, expr, &scrape));
    }
    assert!(
        found.is_empty(),
        "{}\nexported: {:#?}",
        found.join("\n"),
        scrape.series
    );
    // Every family of policyhost's own is shown somewhere (the standard
    // families are the standard dashboards' business: see
    // `standard_metrics.rs`).
    let read: BTreeSet<String> = expressions
        .iter()
        .filter_map(|(_, e)| parser::parse(e).ok())
        .flat_map(|e| {
            let mut reads = Reads::default();
            walk(&e, &mut reads);
            reads.selectors.into_iter().map(|(name, _)| name)
        })
        .collect();
    let unshown: Vec<&String> = scrape
        .families
        .iter()
        .filter(|f| f.starts_with("policyhost_"))
        .filter(|f| {
            !read
                .iter()
                .any(|r| r == *f || r.starts_with(&format!("{f}_")))
        })
        .collect();
    assert!(
        unshown.is_empty(),
        "families neither alerted on nor on the dashboard: {unshown:?}"
    );
    drop(replica);
}
