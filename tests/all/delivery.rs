//! Policy delivery end to end: versions pushed as ConfigMaps are hot-swapped
//! without a restart, bad versions are rejected with their reason while the
//! last good one serves, swaps under load never fail a reconcile, large
//! components travel gzip'd; `policy push`, `policy list` and `dev`'s
//! directory watch through the built binary.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::policies::configmap::{self, Compression, MODULE_GZ_KEY, MODULE_KEY, Settings};
use policyhost::policies::report::Annotations;
use policyhost::policies::tenancy::Tenancy;
use policyhost::publisher::publish;
use policyhost::runtime::Digest;
use serde_json::{Value, json};

use crate::common::cluster::{Env, OperatorSetup, condition, eventually, phase};
use crate::common::process::policyhost;
use crate::common::publishing::{events_about, events_on, policy_map, push, push_map, wait_event};
use crate::common::variants::{built_for, custom_section, version};
use crate::common::{for_every_namespace, guest, guest_bytes, policyhost_bin};
use policyhost::vocabulary::{GRANT_LABEL, LOADED_DIGEST_ANNOTATION, OBSERVED_ANNOTATION};

fn digest(bytes: &[u8]) -> String {
    Digest::of(bytes).to_hex()
}

fn fanout(replicas: u32) -> Value {
    json!({"replicas": replicas, "image": "busybox:1.36", "command": ["true"]})
}

fn fanout_forever(replicas: u32) -> Value {
    json!({"replicas": replicas, "image": "busybox:1.36",
        "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "-1"}})
}

/// The digest the operator's registry serves for `name`.
fn serving(env: &Env, name: &str) -> Option<String> {
    env.operator()
        .shared
        .registry
        .get(name)
        .ok()
        .map(|p| p.digest().to_hex())
}

fn status_digest(job: &DataJob) -> Option<&str> {
    job.status
        .as_ref()
        .and_then(|s| s.policy.as_ref())
        .map(|p| p.digest.as_str())
}

/// Reconciles of `policy` by result other than `success`, from /metrics.
fn failed_reconciles(env: &Env, policy: &str) -> BTreeMap<String, u64> {
    let prefix = format!("policyhost_reconcile_total{{policy=\"{policy}\",result=\"");
    env.operator()
        .metrics
        .render()
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (result, value) = rest.split_once("\"} ")?;
            (result != "success").then(|| (result.to_owned(), value.trim().parse().unwrap_or(0)))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_version_takes_over_from_the_last_without_a_restart() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let v1 = version(&guest_bytes("fanout"), "v1");
    let v2 = version(&guest_bytes("fanout"), "v2");
    let (d1, d2) = (digest(&v1), digest(&v2));

    let verdict = push(&env, "fanout", &v1).await;
    assert_eq!(verdict.error, None);
    assert_eq!(verdict.loaded_digest.as_deref(), Some(d1.as_str()));
    assert!(verdict.loaded_at.is_some());
    assert_eq!(serving(&env, "fanout").as_deref(), Some(d1.as_str()));
    wait_event(
        &env,
        "policy-fanout",
        "PolicyLoaded",
        &format!("sha256:{d1} in service"),
    )
    .await;

    for name in ["a", "b", "c"] {
        env.create_job(name, "fanout", fanout_forever(1)).await;
    }
    let mut pods_before = BTreeSet::new();
    for name in ["a", "b", "c"] {
        env.wait_job(name, "reconciled by v1", |j| status_digest(j) == Some(&d1))
            .await;
        for pod in env.wait_pods(name, "a worker", |p| p.len() == 1).await {
            pods_before.insert(pod.uid().expect("uid"));
        }
    }

    let verdict = push(&env, "fanout", &v2).await;
    assert_eq!(verdict.error, None);
    assert_eq!(verdict.loaded_digest.as_deref(), Some(d2.as_str()));
    for name in ["a", "b", "c"] {
        let job = env
            .wait_job(name, "reconciled by v2", |j| status_digest(j) == Some(&d2))
            .await;
        let ready = condition(&job, "Ready").expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Reconciled")
        );
    }
    wait_event(
        &env,
        "policy-fanout",
        "PolicyLoaded",
        &format!("sha256:{d2} in service"),
    )
    .await;

    // The swap re-ran the policy; it did not restart the workers.
    let mut pods_after = BTreeSet::new();
    for name in ["a", "b", "c"] {
        for pod in env.wait_pods(name, "a worker", |p| p.len() == 1).await {
            pods_after.insert(pod.uid().expect("uid"));
        }
    }
    assert_eq!(pods_before, pods_after);

    let metrics = env.operator().metrics.render();
    assert!(
        metrics.contains(&format!(
            "policyhost_policy_info{{policy=\"fanout\",digest=\"{d2}\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&d1),
        "the replaced version has no series left"
    );
}

/// A bad version of a policy: how it is made, the reason it must be
/// rejected with, and a piece of the message.
struct BadVersion {
    what: &'static str,
    map: ConfigMap,
    reason: &'static str,
    says: &'static str,
}

fn bad_versions(env: &Env, good: &[u8]) -> Vec<BadVersion> {
    let with_binary = |key: &str, bytes: Vec<u8>| {
        let mut map = policy_map(env, "fanout", good, &for_every_namespace());
        map.binary_data = Some(BTreeMap::from([(key.to_owned(), ByteString(bytes))]));
        map.data = Some(for_every_namespace().to_data());
        map
    };
    let with_data = |pairs: &[(&str, &str)]| {
        let mut map = policy_map(env, "fanout", good, &for_every_namespace());
        let data = map.data.get_or_insert_default();
        for (key, value) in pairs {
            data.insert((*key).to_owned(), (*value).to_owned());
        }
        map
    };
    let mut pinned_elsewhere = policy_map(env, "fanout", good, &for_every_namespace());
    pinned_elsewhere
        .data
        .get_or_insert_default()
        .insert("sha256".into(), digest(b"another component"));
    // 40 MiB of zeros: a few KiB gzip'd, above the host's 32 MiB maximum.
    let bomb = custom_section(good, "padding", &vec![0; 40 << 20]);
    let oversize = configmap::build(
        "fanout",
        &env.policy_namespace,
        &bomb,
        &for_every_namespace(),
        Compression::Always,
    )
    .expect("it fits gzip'd");
    vec![
        BadVersion {
            what: "corrupt bytes",
            map: with_binary(MODULE_KEY, b"this is not WebAssembly".to_vec()),
            reason: "Corrupt",
            says: "magic bytes",
        },
        BadVersion {
            what: "corrupt gzip",
            map: with_binary(MODULE_GZ_KEY, b"not gzip either".to_vec()),
            reason: "Corrupt",
            says: "gzip",
        },
        BadVersion {
            what: "a core module",
            map: with_binary(MODULE_KEY, wat::parse_str("(module)").expect("wat")),
            reason: "CoreModule",
            says: "wasm32-wasip2",
        },
        BadVersion {
            what: "the wrong world",
            map: with_binary(MODULE_KEY, wat::parse_str("(component)").expect("wat")),
            reason: "IncompatibleWorld",
            says: "missing export `reconcile`",
        },
        BadVersion {
            what: "a component built for another world",
            map: with_binary(
                MODULE_KEY,
                built_for(&guest_bytes("fanout"), "policyhost:reconcile@0.2.0"),
            ),
            reason: "UnservedWorld",
            says: "for world `policyhost:reconcile@0.2.0`; this host serves `policyhost:reconcile@0.1.0`",
        },
        BadVersion {
            what: "a disallowed import",
            map: with_binary(MODULE_KEY, guest_bytes("keyvalue-import")),
            reason: "UnsupportedImport",
            says: "wasi:keyvalue/store",
        },
        BadVersion {
            what: "a digest mismatch",
            map: pinned_elsewhere,
            reason: "DigestMismatch",
            says: "is not the pinned `data.sha256`",
        },
        BadVersion {
            what: "an over-size component",
            map: oversize,
            reason: "TooLarge",
            says: "more than the 33554432 bytes",
        },
        BadVersion {
            what: "a bad limit",
            map: with_data(&[("memory", "64MB")]),
            reason: "InvalidConfig",
            says: "`data.memory` is `64MB`",
        },
        BadVersion {
            what: "an unknown key",
            map: with_data(&[("timout", "2s")]),
            reason: "InvalidConfig",
            says: "unknown key `data.timout`",
        },
        BadVersion {
            what: "a kind the host does not manage",
            map: with_data(&[("allowedKinds", "v1/Pod,apps/v1/Deployment")]),
            reason: "InvalidConfig",
            says: "apps/v1/Deployment",
        },
        BadVersion {
            what: "a memory cap below the initial memory",
            map: with_data(&[("memory", "64Ki")]),
            reason: "InstantiationFailed",
            says: "cannot be instantiated",
        },
        BadVersion {
            what: "no component",
            map: with_binary("other.bin", vec![1, 2, 3]),
            reason: "NoModule",
            says: "policy.wasm",
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_bad_version_is_rejected_with_its_reason_while_the_last_good_one_serves() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let good = version(&guest_bytes("fanout"), "good");
    let good_digest = digest(&good);
    push(&env, "fanout", &good).await;
    env.create_job("steady", "fanout", fanout_forever(1)).await;
    env.wait_job("steady", "reconciled", |j| {
        status_digest(j) == Some(&good_digest)
    })
    .await;

    for bad in bad_versions(&env, &good) {
        println!("pushing {}", bad.what);
        let verdict = push_map(&env, &bad.map).await;
        let error = verdict.error.unwrap_or_default();
        assert!(
            error.starts_with(&format!("{}: ", bad.reason)) && error.contains(bad.says),
            "{}: expected {} saying `{}`, got `{error}`",
            bad.what,
            bad.reason,
            bad.says
        );
        assert_eq!(
            verdict.loaded_digest.as_deref(),
            Some(good_digest.as_str()),
            "{}: the annotations still name the version in service",
            bad.what
        );
        assert_eq!(
            serving(&env, "fanout").as_deref(),
            Some(good_digest.as_str()),
            "{}: the last good version keeps serving",
            bad.what
        );
        let event = wait_event(&env, "policy-fanout", "PolicyRejected", bad.says).await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert!(
            event
                .message
                .as_deref()
                .is_some_and(|m| m.contains(&format!("sha256:{good_digest}) keeps serving"))),
            "{}: {event:?}",
            bad.what
        );
    }

    let metrics = env.operator().metrics.render();
    assert_load_errors_counted(
        &metrics,
        &[
            "Corrupt",
            "CoreModule",
            "IncompatibleWorld",
            "UnservedWorld",
            "UnsupportedImport",
            "DigestMismatch",
            "TooLarge",
            "InvalidConfig",
            "InstantiationFailed",
            "NoModule",
        ],
    );

    // The DataJob never noticed, and still reconciles on the good version.
    let job = reconciled_again(&env, "steady").await;
    assert!(condition(&job, "Ready").is_some_and(|c| c.status == "True"));
    assert_eq!(status_digest(&job), Some(good_digest.as_str()));
    assert!(failed_reconciles(&env, "fanout").is_empty());

    // A good version again clears the error.
    let verdict = push(&env, "fanout", &good).await;
    assert_eq!(verdict.error, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datajobs_of_a_policy_with_no_good_version_report_policy_unavailable_naming_the_rejection()
{
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    env.create_job("early", "late-policy", fanout(1)).await;
    let job = env
        .wait_job("early", "PolicyUnavailable", |j| {
            condition(j, "Ready").is_some_and(|c| c.reason == "PolicyUnavailable")
        })
        .await;
    assert!(
        condition(&job, "Ready").is_some_and(|c| c.message.contains("no policy of this name")),
        "{:?}",
        job.status
    );

    let good = guest_bytes("fanout");
    let mut bad = policy_map(&env, "late-policy", &good, &for_every_namespace());
    bad.data
        .get_or_insert_default()
        .insert("sha256".into(), digest(b"something else"));
    let verdict = push_map(&env, &bad).await;
    assert!(
        verdict
            .error
            .is_some_and(|e| e.starts_with("DigestMismatch"))
    );
    env.wait_job("early", "the rejection named", |j| {
        condition(j, "Ready").is_some_and(|c| {
            c.reason == "PolicyUnavailable"
                && c.message.contains("rejected (DigestMismatch)")
                && c.message.contains("data.sha256")
        })
    })
    .await;
    assert!(
        env.pods()
            .list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .is_empty()
    );

    push(&env, "late-policy", &good).await;
    let job = env
        .wait_job("early", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    assert_eq!(status_digest(&job), Some(digest(&good).as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_configmap_takes_the_policy_out_of_service_and_datajobs_keep_their_children() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let component = guest_bytes("fanout");
    push(&env, "fanout", &component).await;
    env.create_job("keep", "fanout", fanout_forever(2)).await;
    let pods = env
        .wait_pods("keep", "two running workers", |p| {
            p.len() == 2
                && p.iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await;
    let before = env
        .wait_job("keep", "Running", |j| phase(j) == Some("Running"))
        .await;

    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    maps.delete("policy-fanout", &DeleteParams::default())
        .await
        .expect("delete the policy ConfigMap");
    let after = env
        .wait_job("keep", "PolicyUnavailable", |j| {
            condition(j, "Ready").is_some_and(|c| {
                c.reason == "PolicyUnavailable" && c.message.contains("taken out of service")
            })
        })
        .await;
    assert_eq!(serving(&env, "fanout"), None);
    assert_eq!(
        after.finalizers(),
        before.finalizers(),
        "finalizers are kept"
    );
    let uids = |pods: &[k8s_openapi::api::core::v1::Pod]| -> BTreeSet<String> {
        pods.iter().filter_map(ResourceExt::uid).collect()
    };
    let still = env
        .wait_pods("keep", "the same workers", |p| p.len() == 2)
        .await;
    assert_eq!(uids(&still), uids(&pods), "children are kept");
    assert!(
        !env.operator()
            .metrics
            .render()
            .contains("policyhost_policy_info{policy=\"fanout\""),
        "no version in service"
    );

    push(&env, "fanout", &component).await;
    env.wait_job("keep", "Ready again", |j| {
        condition(j, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let again = env
        .wait_pods("keep", "the same workers", |p| p.len() == 2)
        .await;
    assert_eq!(uids(&again), uids(&pods));
}

/// An operator serving the policy ConfigMaps of the test's policy
/// namespace, for one team of publishers (`--policy-tenancy single-team`).
fn single_team() -> OperatorSetup {
    OperatorSetup {
        policy_tenancy: Tenancy::SingleTeam,
        ..OperatorSetup::configmaps()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_single_team_host_a_second_configmap_naming_the_same_policy_is_rejected_until_the_first_goes()
 {
    let env = Env::start_with(single_team()).await;
    let first = version(&guest_bytes("fanout"), "first");
    let second = version(&guest_bytes("fanout"), "second");
    push(&env, "fanout", &first).await;
    let mut other = policy_map(&env, "fanout", &second, &for_every_namespace());
    other.metadata.name = Some("fanout-copy".into());
    let verdict = push_map(&env, &other).await;
    assert!(
        verdict
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("Conflict: ") && e.contains("policy-fanout")),
        "{verdict:?}"
    );
    assert_eq!(serving(&env, "fanout"), Some(digest(&first)));

    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    maps.delete("policy-fanout", &DeleteParams::default())
        .await
        .expect("delete the first");
    let expected = digest(&second);
    eventually("the second ConfigMap to take over", || async {
        (serving(&env, "fanout").as_deref() == Some(expected.as_str())).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_too_large_for_a_plain_configmap_travels_gzipped() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    // fanout plus 1.5 MiB of data that compresses: over the 1 MiB limit as is.
    let padding: Vec<u8> = (0..3 << 19).map(|i: u32| (i % 251) as u8).collect();
    let large = custom_section(&guest_bytes("fanout"), "padding", &padding);
    assert!(large.len() > configmap::CONFIGMAP_LIMIT);
    assert!(matches!(
        configmap::build(
            "big",
            &env.policy_namespace,
            &large,
            &for_every_namespace(),
            Compression::Never
        ),
        Err(configmap::Error::DoesNotFit { .. })
    ));
    let map = policy_map(&env, "big", &large, &for_every_namespace());
    let binary = map.binary_data.as_ref().expect("binaryData");
    assert!(binary.contains_key(MODULE_GZ_KEY) && !binary.contains_key(MODULE_KEY));
    assert!(binary[MODULE_GZ_KEY].0.len() < configmap::CONFIGMAP_LIMIT);

    let verdict = push_map(&env, &map).await;
    assert_eq!(verdict.error, None);
    assert_eq!(verdict.loaded_digest, Some(digest(&large)));
    wait_event(&env, "policy-big", "PolicyLoaded", "from gzip").await;
    env.create_job("big-job", "big", fanout(1)).await;
    let job = env
        .wait_job("big-job", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    assert_eq!(status_digest(&job), Some(digest(&large).as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_under_load_never_fail_a_reconcile_and_every_status_names_a_good_version() {
    const JOBS: usize = 500;
    const SWAPS: usize = 100;
    let mut setup = OperatorSetup::configmaps();
    setup.workers = 8;
    setup.api_qps = std::num::NonZeroU32::new(5000);
    let env = Env::start_with(setup).await;
    let v1 = version(&guest_bytes("fanout"), "load-1");
    let v2 = version(&guest_bytes("fanout"), "load-2");
    let (d1, d2) = (digest(&v1), digest(&v2));
    push(&env, "fanout", &v1).await;

    // Every digest any DataJob status ever names, seen through a watch.
    let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
    let watching = {
        let seen = Arc::clone(&seen);
        let jobs = env.jobs();
        tokio::spawn(async move {
            let events = watcher(jobs, watcher::Config::default()).applied_objects();
            futures::pin_mut!(events);
            while let Some(Ok(job)) = events.next().await {
                if let Some(digest) = status_digest(&job) {
                    seen.lock().expect("lock").insert(digest.to_owned());
                }
            }
        })
    };

    let creator = &env;
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(50) {
        futures::future::join_all(chunk.iter().map(|i| async move {
            creator
                .create_job(&format!("load-{i}"), "fanout", fanout(1))
                .await
        }))
        .await;
    }
    let bad = {
        let mut map = policy_map(&env, "fanout", &v1, &for_every_namespace());
        map.data
            .get_or_insert_default()
            .insert("sha256".into(), digest(b"not this one"));
        map
    };
    for swap in 1..=SWAPS {
        let (component, expected) = if swap % 2 == 1 {
            (&v2, &d2)
        } else {
            (&v1, &d1)
        };
        let verdict = push(&env, "fanout", component).await;
        assert_eq!(
            verdict.loaded_digest.as_ref(),
            Some(expected),
            "swap {swap}"
        );
        if swap % 10 == 5 {
            let verdict = push_map(&env, &bad).await;
            assert!(verdict.error.is_some(), "the bad version is rejected");
            assert_eq!(serving(&env, "fanout").as_ref(), Some(expected));
        }
    }
    // The last swap put v1 back: every DataJob converges to it.
    let jobs = env.jobs();
    eventually("every DataJob reconciled by the last version", || {
        let jobs = jobs.clone();
        let d1 = d1.clone();
        async move {
            let list = jobs.list(&ListParams::default()).await.ok()?.items;
            (list.len() == JOBS && list.iter().all(|j| status_digest(j) == Some(d1.as_str())))
                .then_some(())
        }
    })
    .await;
    watching.abort();

    assert_eq!(
        failed_reconciles(&env, "fanout"),
        BTreeMap::new(),
        "no reconcile failed"
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        HashSet::from([d1.clone(), d2.clone()]),
        "every status names one of the two good versions, and both acted"
    );
    let total: f64 = env
        .operator()
        .metrics
        .render()
        .lines()
        .filter(|l| {
            l.starts_with("policyhost_reconcile_total{policy=\"fanout\",result=\"success\"}")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    println!("{total} successful reconciles");
    assert!(total >= JOBS as f64, "{total} reconciles");
}

// --- The CLI against devcluster -------------------------------------------

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let file = crate::common::scratch().join(name);
    std::fs::write(&file, bytes).expect("write scratch file");
    file
}

/// `policy list -o json` for the test's policy namespace.
fn list(env: &Env, config: &Path) -> Vec<Value> {
    let out = policyhost(&[
        "policy",
        "list",
        "--namespace",
        &env.policy_namespace,
        "--kubeconfig",
        path(config),
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a JSON array")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_push_publishes_a_checked_version_and_policy_list_shows_what_serves() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let config = env.kubeconfig_file();
    let fanout = guest("fanout");
    let fanout_digest = digest(&guest_bytes("fanout"));
    let allowed = format!("{},team-b", env.namespace);

    let out = policyhost(&[
        "policy",
        "push",
        path(&fanout),
        "--name",
        "fanout",
        "--namespace",
        &env.policy_namespace,
        "--kubeconfig",
        path(&config),
        "--memory",
        "32Mi",
        "--timeout",
        "2s",
        "--fuel",
        "100000000",
        "--allowed-namespaces",
        &allowed,
        "--wait",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!(
            "configmap/policy-fanout applied in namespace {}",
            env.policy_namespace
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("serving sha256:{fanout_digest}")),
        "{stdout}"
    );
    let limits = *env
        .operator()
        .shared
        .registry
        .get("fanout")
        .expect("serving")
        .limits();
    assert_eq!(
        (limits.memory_bytes, limits.timeout, limits.fuel),
        (32 << 20, Duration::from_secs(2), 100_000_000)
    );
    let map: ConfigMap = Api::namespaced(env.client.clone(), &env.policy_namespace)
        .get("policy-fanout")
        .await
        .expect("the ConfigMap");
    assert_eq!(
        map.data.as_ref().expect("data")["sha256"],
        fanout_digest,
        "pinned"
    );

    let rows = list(&env, &config);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["policy"], "fanout");
    assert_eq!(rows[0]["status"], "Serving");
    assert_eq!(rows[0]["digest"], fanout_digest.as_str());
    assert_eq!(rows[0]["servingDigest"], fanout_digest.as_str());
    assert_eq!(
        rows[0]["sdk"],
        format!("rust {}", env!("CARGO_PKG_VERSION")),
        "the SDK the component says it was built with"
    );
    assert!(rows[0]["loadedAt"].is_string());
    assert_eq!(rows[0]["allowedNamespaces"], allowed.as_str());
    let registry = &env.operator().shared.registry;
    let caller = |namespace| policyhost::policies::Caller {
        namespace,
        name: "any",
        uid: "any",
    };
    assert!(registry.get_for("fanout", &caller(&env.namespace)).is_ok());
    assert!(registry.get_for("fanout", &caller("team-c")).is_err());

    // Refused before anything is written: the same checks as `policy check`.
    let out = policyhost(&[
        "policy",
        "push",
        path(&guest("keyvalue-import")),
        "--name",
        "fanout",
        "--namespace",
        &env.policy_namespace,
        "--kubeconfig",
        path(&config),
        "--allowed-namespaces",
        &allowed,
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("error[UnsupportedImport]"),
        "{}",
        text(&out.stderr)
    );
    let out = policyhost(&[
        "policy",
        "push",
        path(&fanout),
        "--name",
        "fanout",
        "--namespace",
        &env.policy_namespace,
        "--kubeconfig",
        path(&config),
        "--allowed-namespaces",
        &allowed,
        "--fuel",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("`data.fuel` is `0`"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        list(&env, &config)[0]["status"],
        "Serving",
        "nothing was pushed"
    );

    // Accepted by the CLI, rejected by the host: `--wait` says so, exit 3.
    let other = scratch("fanout-v2.wasm", &version(&guest_bytes("fanout"), "cli"));
    let out = policyhost(&[
        "policy",
        "push",
        path(&other),
        "--name",
        "fanout",
        "--namespace",
        &env.policy_namespace,
        "--kubeconfig",
        path(&config),
        "--allowed-namespaces",
        &allowed,
        "--allowed-kinds",
        "apps/v1/Deployment",
        "--wait",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("rejected: InvalidConfig:"), "{stdout}");
    assert!(
        stdout.contains(&format!("still serving sha256:{fanout_digest}")),
        "{stdout}"
    );
    let _ = std::fs::remove_file(&other);
    let rows = list(&env, &config);
    assert_eq!(rows[0]["status"], "Rejected");
    assert_eq!(rows[0]["servingDigest"], fanout_digest.as_str());
    assert!(
        rows[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("apps/v1/Deployment"))
    );

    let table = policyhost(&[
        "policy",
        "list",
        "--namespace",
        &env.policy_namespace,
        "--kubeconfig",
        path(&config),
    ]);
    let table = text(&table.stdout);
    assert!(table.starts_with("POLICY"), "{table}");
    assert!(
        table.contains("Rejected") && table.contains(&fanout_digest[..12]),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_push_publishes_an_outbound_policy_and_wait_reports_outbound_not_granted_until_its_grant()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let config = env.kubeconfig_file();
    let push = |file: &Path| {
        policyhost(&[
            "policy",
            "push",
            path(file),
            "--name",
            "bucket",
            "--namespace",
            &env.policy_namespace,
            "--kubeconfig",
            path(&config),
            "--allowed-namespaces",
            &env.namespace,
            "--wait",
        ])
    };
    let out = push(&guest("bucket"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stderr.contains("note: the policy imports `wasi:http/")
            && stderr.contains("the ConfigMap `grant-bucket`"),
        "{stderr}"
    );
    assert!(
        stdout.contains("configmap/policy-bucket applied")
            && stdout.contains("rejected: OutboundNotGranted: "),
        "{stdout}"
    );

    // The platform team's grant: the version loads with it, and the next
    // push is reported in service.
    let grant = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("grant-bucket".into()),
            labels: Some(BTreeMap::from([(
                GRANT_LABEL.to_owned(),
                "bucket".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "origins".to_owned(),
            "https://storage.example.com".to_owned(),
        )])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(env.client.clone(), &env.policy_namespace)
        .create(&PostParams::default(), &grant)
        .await
        .expect("create the grant");
    eventually("bucket in service with its grant", || async {
        serving(&env, "bucket")
    })
    .await;
    let next = version(&guest_bytes("bucket"), "granted");
    let file = scratch("bucket-granted.wasm", &next);
    let out = push(&file);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("serving sha256:{}", digest(&next))),
        "{stdout}"
    );
    let _ = std::fs::remove_file(&file);
}

/// Stops a child process when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_republishes_a_rebuilt_policy_and_the_operator_swaps_it_in() {
    let dir = crate::common::scratch().join("dev-policies");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("policy dir");
    std::fs::copy(guest("fanout"), dir.join("fanout.wasm")).expect("copy fanout");
    let config = dir.join("dev.kubeconfig");
    let job = dir.join("job.yaml");
    std::fs::write(
        &job,
        // Not in `default`: that is dev's policy namespace, where DataJobs are refused.
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: dev-team}\n---\n\
         apiVersion: policyhost.dev/v1alpha1\nkind: DataJob\nmetadata: {name: live, namespace: dev-team}\n\
         spec: {policy: fanout, params: {replicas: 1, image: busybox, podAnnotations: {devcluster.policyhost.dev/run-seconds: \"-1\"}}}\n",
    )
    .expect("write the DataJob");
    let dev = Running(
        Command::new(policyhost_bin())
            .args([
                "dev",
                "--policy-dir",
                path(&dir),
                "--kubeconfig",
                path(&config),
            ])
            .args(["--apply", path(&job)])
            .env("POLICYHOST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start policyhost dev"),
    );
    let client = eventually("policyhost dev to serve its cluster", || async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&config).ok()?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .ok()?;
        let client = Client::try_from(config).ok()?;
        Api::<DataJob>::namespaced(client.clone(), "dev-team")
            .get_opt("live")
            .await
            .ok()
            .flatten()
            .map(|_| client)
    })
    .await;
    let jobs: Api<DataJob> = Api::namespaced(client.clone(), "dev-team");
    let first = digest(&guest_bytes("fanout"));
    eventually("the DataJob reconciled by the published fanout", || async {
        let job = jobs.get("live").await.ok()?;
        (status_digest(&job) == Some(first.as_str())).then_some(())
    })
    .await;

    // "Rebuild" the policy: the file is replaced in place.
    let rebuilt = version(&guest_bytes("fanout"), "rebuilt");
    let tmp = dir.join("fanout.wasm.tmp");
    std::fs::write(&tmp, &rebuilt).expect("write the rebuilt policy");
    std::fs::rename(&tmp, dir.join("fanout.wasm")).expect("replace the policy");
    let second = digest(&rebuilt);
    eventually("the DataJob reconciled by the rebuilt fanout", || async {
        let job = jobs.get("live").await.ok()?;
        (status_digest(&job) == Some(second.as_str())).then_some(())
    })
    .await;
    // The swap comes first, the report on the ConfigMap right after it: the
    // DataJob may be reconciled by the new version before the annotation is written.
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    eventually("the ConfigMap reporting the rebuilt fanout", || async {
        let map = maps.get("policy-fanout").await.ok()?;
        (map.annotations().get(LOADED_DIGEST_ANNOTATION) == Some(&second)).then_some(())
    })
    .await;
    drop(dev);
    let _ = std::fs::remove_dir_all(&dir);
}

// --- Tenancy: who may publish and who may use a policy ----------------------

/// Events on the DataJob `name` of `namespace` with reason `reason`.
async fn job_events(env: &Env, namespace: &str, name: &str, reason: &str) -> Vec<Event> {
    events_about(env, namespace, ("DataJob", name), reason).await
}

/// Whether the operator ever called `policy` (a call records its fuel).
fn called(env: &Env, policy: &str) -> bool {
    env.operator().metrics.render().contains(&format!(
        "policyhost_guest_fuel_consumed_count{{policy=\"{policy}\"}}"
    ))
}

fn ready_reason(job: &DataJob) -> Option<&str> {
    condition(job, "Ready").map(|c| c.reason.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datajob_in_the_policy_namespace_is_refused_before_any_call_and_no_policy_configmap_appears()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let fanout = version(&guest_bytes("fanout"), "serving");
    push(&env, "fanout", &fanout).await;
    let forger = push(&env, "policy-forger", &guest_bytes("policy-forger")).await;
    assert_eq!(forger.error, None, "the forger is a loadable policy");

    let jobs: Api<DataJob> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let hijack = DataJob::new(
        "hijack",
        DataJobSpec {
            policy: "policy-forger".into(),
            params: serde_json::Map::from_iter([("target".to_owned(), json!("fanout"))]),
            ..DataJobSpec::default()
        },
    );
    jobs.create(&PostParams::default(), &hijack)
        .await
        .expect("create the DataJob in the policy namespace");
    let job = eventually("the DataJob refused for its namespace", || async {
        jobs.get("hijack")
            .await
            .ok()
            .filter(|j| ready_reason(j) == Some("PolicyNamespace"))
    })
    .await;
    let ready = condition(&job, "Ready").expect("Ready");
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .contains("holds this host's policy ConfigMaps"),
        "{ready:?}"
    );
    assert!(
        job.finalizers().is_empty(),
        "nothing is done for it, not even the finalizer"
    );
    eventually("a PolicyNamespace Event on the DataJob", || async {
        let events = job_events(&env, &env.policy_namespace, "hijack", "PolicyNamespace").await;
        events
            .first()
            .map(|e| assert_eq!(e.type_.as_deref(), Some("Warning")))
    })
    .await;

    assert!(
        !called(&env, "policy-forger"),
        "the policy was never called"
    );
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    assert!(
        maps.get_opt("policy-fanout-forged")
            .await
            .expect("get")
            .is_none(),
        "no new policy ConfigMap"
    );
    let serving_map = maps
        .get("policy-fanout")
        .await
        .expect("the serving ConfigMap");
    assert!(
        serving_map.owner_references().is_empty()
            && !serving_map
                .data
                .as_ref()
                .is_some_and(|d| d.get("description").is_some_and(|t| t.contains("forged"))),
        "the serving ConfigMap is untouched: {:?}",
        serving_map.metadata
    );
    assert_eq!(serving(&env, "fanout"), Some(digest(&fanout)));

    // Deleting it waits on nothing.
    jobs.delete("hijack", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the refused DataJob gone", || async {
        jobs.get_opt("hijack")
            .await
            .ok()
            .and_then(|j| j.is_none().then_some(()))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_with_an_owner_reference_or_child_labels_is_ignored_and_the_serving_version_keeps_serving()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let good = version(&guest_bytes("fanout"), "good");
    let other = version(&guest_bytes("fanout"), "from-a-child");
    push(&env, "fanout", &good).await;
    env.create_job("steady", "fanout", fanout_forever(1)).await;
    env.wait_job("steady", "reconciled", |j| {
        status_digest(j) == Some(&digest(&good))
    })
    .await;

    // A real owner, so that nothing garbage-collects the owned ConfigMaps.
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let owner = maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("owner".into()),
                    ..Default::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .expect("create the owner");
    let owner_ref = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.uid().expect("uid"),
        controller: Some(true),
        ..Default::default()
    };
    let mut owned = policy_map(&env, "fanout", &other, &for_every_namespace());
    owned.metadata.name = Some("fanout-owned".into());
    owned.metadata.owner_references = Some(vec![owner_ref.clone()]);
    let mut child = policy_map(&env, "fanout", &other, &for_every_namespace());
    child.metadata.name = Some("fanout-child".into());
    child.metadata.labels.get_or_insert_default().insert(
        "policyhost.dev/managed-by".into(),
        "another-instance".into(),
    );
    // And the serving ConfigMap itself, given an owner and new content.
    let mut taken = policy_map(&env, "fanout", &other, &for_every_namespace());
    taken.metadata.owner_references = Some(vec![owner_ref]);
    for map in [&owned, &child, &taken] {
        publish::apply(&env.client, map).await.expect("apply");
    }
    for (name, says) in [
        ("fanout-owned", "has an ownerReference (ConfigMap owner)"),
        (
            "fanout-child",
            "has the child label `policyhost.dev/managed-by`",
        ),
        ("policy-fanout", "has an ownerReference (ConfigMap owner)"),
    ] {
        let event = wait_event(&env, name, "PolicyIgnored", says).await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
    }
    assert_eq!(
        serving(&env, "fanout"),
        Some(digest(&good)),
        "the last clean version keeps serving"
    );
    for name in ["fanout-owned", "fanout-child"] {
        let map = maps.get(name).await.expect("get");
        assert!(
            map.annotations().get(OBSERVED_ANNOTATION).is_none(),
            "{name}: not the host's to annotate, and no Conflict claimed"
        );
    }
    let metrics = env.operator().metrics.render();
    assert_load_errors_counted(&metrics, &["OwnedConfigMap", "ChildConfigMap"]);
    // DataJobs keep reconciling on the clean version.
    let job = reconciled_again(&env, "steady").await;
    assert_eq!(status_digest(&job), Some(digest(&good).as_str()));
}

/// Asserts that `metrics` counts a load error of `fanout` for each reason.
fn assert_load_errors_counted(metrics: &str, reasons: &[&str]) {
    for reason in reasons {
        assert!(
            metrics.contains(&format!(
                "policyhost_policy_load_errors_total{{policy=\"fanout\",reason=\"{reason}\"}}"
            )),
            "{reason}: {metrics}"
        );
    }
}

/// Asks DataJob `name` for two forever-running workers and waits until they
/// run and the status observes the change: it still reconciles.
async fn reconciled_again(env: &Env, name: &str) -> DataJob {
    env.patch_spec(name, json!({"params": fanout_forever(2)}))
        .await;
    env.wait_pods(name, "two workers", |p| p.len() == 2).await;
    env.wait_job(name, "reconciled again", |j| {
        j.status.as_ref().and_then(|s| s.observed_generation) == j.metadata.generation
    })
    .await
}

/// Pushes fanout `component` allowing `namespaces`; returns the verdict.
async fn push_allowing(env: &Env, component: &[u8], namespaces: &str) -> Annotations {
    let settings = Settings::parse(&BTreeMap::from([(
        configmap::keys::ALLOWED_NAMESPACES.to_owned(),
        namespaces.to_owned(),
    )]))
    .expect("a valid list");
    push_map(env, &policy_map(env, "fanout", component, &settings)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_serves_only_the_namespaces_it_allows_and_a_swap_that_changes_the_list_requeues_its_datajobs()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let component = guest_bytes("fanout");
    let verdict = push_allowing(&env, &component, "team-a").await;
    assert_eq!(verdict.error, None);
    // Workers that finish, so that a cleanup, once allowed, is done.
    env.create_job("elsewhere", "fanout", fanout(1)).await;
    let job = env
        .wait_job("elsewhere", "PolicyNotAllowed", |j| {
            ready_reason(j) == Some("PolicyNotAllowed")
        })
        .await;
    let message = &condition(&job, "Ready").expect("Ready").message;
    assert!(
        message.contains(&format!(
            "does not allow DataJobs of namespace {}",
            env.namespace
        )) && message.contains("`team-a`"),
        "{message}"
    );
    assert!(job.finalizers().is_empty(), "refused: no finalizer either");
    assert!(!called(&env, "fanout"), "never a call");
    eventually("a PolicyNotAllowed Event", || async {
        (!job_events(&env, &env.namespace, "elsewhere", "PolicyNotAllowed")
            .await
            .is_empty())
        .then_some(())
    })
    .await;

    // The team lets this namespace in: the swap re-queues the DataJob.
    push_allowing(&env, &component, &format!("team-a,{}", env.namespace)).await;
    env.wait_pods("elsewhere", "a worker", |p| p.len() == 1)
        .await;
    env.wait_job("elsewhere", "Ready", |j| {
        ready_reason(j) == Some("Reconciled")
    })
    .await;

    // And out again: refused, its children kept, its deletion waits.
    push_allowing(&env, &component, "team-a").await;
    env.wait_job("elsewhere", "PolicyNotAllowed again", |j| {
        ready_reason(j) == Some("PolicyNotAllowed")
    })
    .await;
    env.wait_pods("elsewhere", "the worker kept", |p| p.len() == 1)
        .await;
    env.jobs()
        .delete("elsewhere", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = env
        .wait_job("elsewhere", "cleanup waiting for the policy", |j| {
            j.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.reason == "PolicyUnavailable" && c.message.contains("does not allow DataJobs")
                })
            })
        })
        .await;
    assert!(
        !terminating.finalizers().is_empty(),
        "the finalizer is kept"
    );
    push_allowing(&env, &component, "*").await;
    let jobs = env.jobs();
    eventually("the DataJob cleaned up and gone", || async {
        jobs.get_opt("elsewhere")
            .await
            .ok()
            .and_then(|j| j.is_none().then_some(()))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_strict_host_refuses_a_policy_without_allowed_namespaces_or_from_a_configmap_of_another_name()
 {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    let component = guest_bytes("fanout");

    let unsaid = policy_map(&env, "fanout", &component, &Settings::default());
    let verdict = push_map(&env, &unsaid).await;
    let error = verdict.error.unwrap_or_default();
    assert!(
        error.starts_with("InvalidConfig: ")
            && error.contains("`data.allowedNamespaces` is required on this host"),
        "{error}"
    );
    assert_eq!(serving(&env, "fanout"), None);

    let verdict = push_allowing(&env, &component, &env.namespace).await;
    assert_eq!(verdict.error, None);
    let d = digest(&component);
    assert_eq!(serving(&env, "fanout"), Some(d.clone()));

    // Another team's ConfigMap, which its RBAC lets it write, relabelled to
    // claim this policy: refused for its name, whatever the load order.
    let mut sneaky = policy_map(
        &env,
        "fanout",
        &version(&component, "sneaky"),
        &for_every_namespace(),
    );
    sneaky.metadata.name = Some("policy-reports".into());
    let verdict = push_map(&env, &sneaky).await;
    let error = verdict.error.unwrap_or_default();
    assert!(
        error.starts_with("NameMismatch: ") && error.contains("only the ConfigMap `policy-fanout`"),
        "{error}"
    );
    assert_eq!(serving(&env, "fanout"), Some(d));
}

/// Another team's ConfigMap, which its RBAC lets it write, relabelled to
/// claim `fanout` with its own code. Its name, `policy-aaa`, lists before
/// `policy-fanout`: ConfigMaps list in name order.
fn impostor(env: &Env, component: &[u8]) -> ConfigMap {
    let mut map = policy_map(
        env,
        "fanout",
        &version(component, "impostor"),
        &for_every_namespace(),
    );
    map.metadata.name = Some("policy-aaa".into());
    map
}

/// Waits until ConfigMap `name` has `count` Events with `reason`.
async fn events_counted(env: &Env, name: &str, reason: &str, count: usize) {
    eventually(&format!("{count} {reason} Events on {name}"), || async {
        (events_on(env, name, reason).await.len() >= count).then_some(())
    })
    .await;
}

/// Pushes fanout `owner` and then [`impostor`], and runs a DataJob on the
/// owner's version; restarts the operator with `setup`, and waits for its
/// verdicts on both ConfigMaps. Returns the impostor's error annotation
/// after the restart.
async fn impostor_across_a_restart(setup: fn() -> OperatorSetup, refused: &str) -> (Env, String) {
    let mut env = Env::start_with(setup()).await;
    let owner = version(&guest_bytes("fanout"), "owner");
    let owner_digest = digest(&owner);
    assert_eq!(push(&env, "fanout", &owner).await.error, None);
    env.create_job("victim", "fanout", fanout_forever(1)).await;
    env.wait_job("victim", "reconciled by the owner's version", |j| {
        status_digest(j) == Some(owner_digest.as_str())
    })
    .await;
    let verdict = push_map(&env, &impostor(&env, &owner)).await;
    let error = verdict.error.unwrap_or_default();
    assert!(error.starts_with(refused), "{error}");
    assert_eq!(serving(&env, "fanout"), Some(owner_digest.clone()));
    events_counted(&env, "policy-fanout", "PolicyLoaded", 1).await;
    events_counted(&env, "policy-aaa", "PolicyRejected", 1).await;

    // A restart: the new operator lists `policy-aaa` first.
    env.stop_operator().await;
    env.start_operator(setup()).await;
    events_counted(&env, "policy-fanout", "PolicyLoaded", 2).await;
    events_counted(&env, "policy-aaa", "PolicyRejected", 2).await;
    assert_eq!(
        serving(&env, "fanout"),
        Some(owner_digest.clone()),
        "the owner's version serves after the restart"
    );
    let job = reconciled_again(&env, "victim").await;
    assert_eq!(status_digest(&job), Some(owner_digest.as_str()));
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let map = maps.get("policy-aaa").await.expect("the impostor");
    let error = Annotations::read(map.annotations())
        .error
        .unwrap_or_default();
    (env, error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_configmap_listed_first_never_serves_another_teams_datajobs_even_after_a_restart()
 {
    let (_env, error) =
        impostor_across_a_restart(OperatorSetup::configmaps, "NameMismatch: ").await;
    assert!(
        error.starts_with("NameMismatch: ") && error.contains("only the ConfigMap `policy-fanout`"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_single_team_host_the_first_publisher_keeps_its_name_across_a_restart_whatever_the_list_order()
 {
    let (env, error) = impostor_across_a_restart(single_team, "Conflict: ").await;
    assert!(
        error.starts_with("Conflict: ") && error.contains("policy-fanout"),
        "{error}"
    );
    // The host's record of who provides the name.
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let provides = |map: ConfigMap| Annotations::read(map.annotations()).provides;
    let owner = maps.get("policy-fanout").await.expect("the owner");
    assert_eq!(provides(owner).as_deref(), Some("fanout"));
    let impostor = maps.get("policy-aaa").await.expect("the impostor");
    assert_eq!(provides(impostor), None);
}
