//! What a DataJob may own, end to end: a child name taken by someone else
//! (a team's own ConfigMap, another DataJob's child, an object created
//! while the operator's create was on its way) is refused and the object
//! left alone; an object of another namespace naming a DataJob's UID is
//! never its child; a child being deleted is not ready; pruning deletes
//! only what the DataJob controls; metadata the host owns, duplicate
//! children and cluster-scoped kinds are refused before anything is
//! applied.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodSpec};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::operator::{Operator, Options};
use policyhost::policies::configmap::Settings;
use policyhost::policies::load;
use policyhost::runtime::AllowedKind;
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, condition, create_namespace, eventually};
use crate::common::faults::{FaultProxy, Refuse};
use crate::common::requests::RequestLog;
use crate::common::{guest_bytes, runtime};

fn config_maps(env: &Env) -> Api<ConfigMap> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn config_map(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let own = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: (!labels.is_empty()).then(|| own(labels)),
            ..ObjectMeta::default()
        },
        data: Some(own(data)),
        ..ConfigMap::default()
    }
}

/// Waits for `Ready=False` on DataJob `name` and returns its reason and message.
async fn refused(env: &Env, name: &str) -> (String, String) {
    let job = env
        .wait_job(name, "Ready=False", |j| {
            condition(j, "Ready").is_some_and(|c| c.status == "False")
        })
        .await;
    let ready = condition(&job, "Ready").expect("Ready");
    (ready.reason.clone(), ready.message.clone())
}

/// Asserts that the team's ConfigMap `mine` is as the team left it: never
/// written, adopted or labelled.
async fn left_alone(maps: &Api<ConfigMap>, mine: &ConfigMap) {
    let after = maps.get(&mine.name_any()).await.expect("still there");
    assert_eq!(
        after.resource_version(),
        mine.resource_version(),
        "never written"
    );
    assert!(after.owner_references().is_empty(), "never adopted");
    assert!(after.labels().is_empty(), "never labelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_own_configmap_is_never_adopted_changed_or_deleted() {
    let env = Env::start(&["claims-name"]).await;
    let maps = config_maps(&env);
    let mine = maps
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[("owner", "team")]),
        )
        .await
        .expect("the team's ConfigMap");

    env.create_job("thief", "claims-name", json!({"name": "settings"}))
        .await;
    let (reason, message) = refused(&env, "thief").await;
    assert_eq!(reason, "ChildConflict", "{message}");
    assert!(
        message.contains("ConfigMap settings already exists") && message.contains("no controller"),
        "{message}"
    );
    let note = env.warning(&env.namespace, "thief", "ChildConflict").await;
    assert!(note.contains("ConfigMap settings"), "{note}");

    left_alone(&maps, &mine).await;

    // Deleting the DataJob garbage-collects nothing of the team's. A
    // dependent of the DataJob's own shows when the collector has acted.
    let thief = env.jobs().get("thief").await.expect("the DataJob");
    let mut dependent = config_map("thief-dependent", &[], &[]);
    dependent.metadata.owner_references = Some(vec![thief.owner_ref(&()).expect("an owner")]);
    maps.create(&PostParams::default(), &dependent)
        .await
        .expect("the DataJob's dependent");
    env.jobs()
        .delete("thief", &DeleteParams::default())
        .await
        .expect("delete the DataJob");
    eventually("the DataJob's dependent collected", || {
        let maps = maps.clone();
        async move {
            maps.get_opt("thief-dependent")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    let survived = maps.get("settings").await.expect("survives the DataJob");
    assert_eq!(survived.uid(), mine.uid());
    assert_eq!(survived.data, mine.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_datajob_claiming_a_name_is_refused_and_the_first_keeps_its_child_without_a_fight()
{
    let env = Env::start(&["claims-name"]).await;
    let maps = config_maps(&env);
    let first = env
        .create_job("first", "claims-name", json!({"name": "shared"}))
        .await;
    env.wait_job("first", "Ready=True", |j| {
        condition(j, "Ready").is_some_and(|c| c.status == "True")
    })
    .await;
    let child = maps.get("shared").await.expect("the first DataJob's child");
    assert_eq!(child.owner_references()[0].uid, first.uid().expect("uid"));

    env.create_job("second", "claims-name", json!({"name": "shared"}))
        .await;
    let (reason, message) = refused(&env, "second").await;
    assert_eq!(reason, "ChildConflict");
    assert!(
        message.contains("ConfigMap shared already exists and is controlled by DataJob first"),
        "{message}"
    );
    // The second keeps being retried with backoff (50 ms, 100 ms, ...):
    // over this window it is refused again and again, and not one write
    // reaches the child.
    let log = env.requests();
    let since = log.as_ref().map(RequestLog::mark);
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let now = maps.get("shared").await.expect("still there");
        assert_eq!(now.resource_version(), child.resource_version(), "no fight");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let (Some(log), Some(since)) = (log, since) {
        let writes = log
            .operator_since(since, &env.namespace)
            .into_iter()
            .filter(|r| {
                r.resource == "configmaps"
                    && r.name == "shared"
                    && !matches!(r.verb.as_str(), "get" | "list" | "watch")
            })
            .count();
        assert_eq!(writes, 0, "no write to the child while refused");
    }
    let kept = maps.get("shared").await.expect("the child");
    assert_eq!(kept.owner_references().len(), 1);
    assert_eq!(kept.owner_references()[0].uid, first.uid().expect("uid"));
    assert_eq!(
        kept.data
            .as_ref()
            .and_then(|d| d.get("claimedBy"))
            .map(String::as_str),
        Some("first")
    );
    let first_now = env.jobs().get("first").await.expect("first");
    assert_eq!(
        condition(&first_now, "Ready").map(|c| c.status.as_str()),
        Some("True")
    );
}

/// Waits for `Ready=True` on DataJob `name` and returns its message.
async fn ready(env: &Env, name: &str) -> String {
    let job = env
        .wait_job(name, "Ready=True", |j| {
            condition(j, "Ready").is_some_and(|c| c.status == "True")
        })
        .await;
    condition(&job, "Ready").expect("Ready").message.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_datajob_costs_its_finalizer_its_create_and_one_status_write() {
    let env = Env::start(&["claims-name"]).await;
    let Some(log) = env.requests() else {
        return; // No request log on this cluster.
    };
    let since = log.mark();
    let job = env
        .create_job("lean", "claims-name", json!({"name": "lean-settings"}))
        .await;
    ready(&env, "lean").await;
    // Ready is written by the pass the create's watch event brought; then
    // the operator has nothing left to do.
    env.wait_idle().await;
    let child = config_maps(&env).get("lean-settings").await.expect("child");
    assert_eq!(child.owner_references()[0].uid, job.uid().expect("uid"));
    let requests: Vec<String> = log
        .operator_since(since, &env.namespace)
        .into_iter()
        .filter(|r| !matches!(r.verb.as_str(), "list" | "watch"))
        .map(|r| {
            let sub = if r.subresource.is_empty() { "" } else { "/" };
            format!("{} {}{sub}{} {}", r.verb, r.resource, r.subresource, r.name)
        })
        .collect();
    assert_eq!(
        requests,
        [
            "patch datajobs lean",
            "create configmaps lean-settings",
            "patch datajobs/status lean"
        ],
        "the finalizer, one create (no read before it), one status write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_created_while_the_operators_create_is_on_its_way_is_never_adopted() {
    let mut env = Env::cluster_only().await;
    let proxy = FaultProxy::start(env.client_config()).await;
    env.start_operator(OperatorSetup {
        api: Some(proxy.config()),
        ..OperatorSetup::with(&["claims-name"])
    })
    .await;
    let maps = config_maps(&env);
    // Every write that could bring the child into being waits at the proxy,
    // the create and a server-side apply alike.
    for verb in ["create", "patch"] {
        proxy.hold(Refuse {
            verb,
            resource: "configmaps",
            code: 0,
        });
    }
    env.create_job("late", "claims-name", json!({"name": "report"}))
        .await;
    eventually("the operator's write of the child, held", || async {
        proxy
            .held()
            .iter()
            .any(|t| t.resource == "configmaps")
            .then_some(())
    })
    .await;
    // A team takes the name meanwhile.
    let mine = maps
        .create(
            &PostParams::default(),
            &config_map("report", &[], &[("owner", "team")]),
        )
        .await
        .expect("the team's ConfigMap");
    proxy.release();

    let (reason, message) = refused(&env, "late").await;
    assert_eq!(reason, "ChildConflict", "{message}");
    assert!(
        message.contains("ConfigMap report already exists") && message.contains("no controller"),
        "{message}"
    );
    left_alone(&maps, &mine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_of_another_namespace_naming_a_datajobs_uid_is_never_its_child() {
    let mut env = Env::cluster_only().await;
    let other = format!("{}-other", env.namespace);
    create_namespace(&env.client, &other).await;
    env.start_operator(OperatorSetup {
        extra_namespaces: vec![other.clone()],
        ..OperatorSetup::with(&["claims-name"])
    })
    .await;
    let suspended = DataJob::new(
        "etl",
        DataJobSpec {
            policy: "claims-name".into(),
            params: json!({"name": "etl-settings"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            suspend: true,
            ..DataJobSpec::default()
        },
    );
    env.jobs()
        .create(&PostParams::default(), &suspended)
        .await
        .expect("create the suspended DataJob");
    let job = env
        .wait_job("etl", "suspended", |j| {
            condition(j, "Suspended").is_some_and(|c| c.status == "True")
        })
        .await;
    let uid = job.uid().expect("uid");
    // Another team's object, named like etl's child, with the operator's
    // labels and etl's UID as controller, held Terminating by its own finalizer.
    let theirs: Api<ConfigMap> = Api::namespaced(env.client.clone(), &other);
    let instance = env.instance();
    let mut impostor = config_map(
        "etl-settings",
        &[
            ("policyhost.dev/managed-by", instance.as_str()),
            ("policyhost.dev/datajob", "etl"),
        ],
        &[("owner", "team-b")],
    );
    impostor.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "policyhost.dev/v1alpha1".into(),
            kind: "DataJob".into(),
            name: "etl".into(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    impostor.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    theirs
        .create(&PostParams::default(), &impostor)
        .await
        .expect("the other team's object");
    theirs
        .delete("etl-settings", &DeleteParams::default())
        .await
        .expect("delete it: Terminating");
    let metrics = &env.operator().metrics;
    eventually("the foreign object seen and counted", || async {
        (metrics.foreign_children.get() >= 1).then_some(())
    })
    .await;

    env.patch_spec("etl", json!({"suspend": false})).await;
    ready(&env, "etl").await;
    let child = config_maps(&env)
        .get("etl-settings")
        .await
        .expect("etl's child exists in etl's namespace");
    assert_eq!(child.owner_references()[0].uid, uid);
    assert_eq!(
        child
            .data
            .as_ref()
            .and_then(|d| d.get("claimedBy"))
            .map(String::as_str),
        Some("etl")
    );
    let foreign = theirs.get("etl-settings").await.expect("still Terminating");
    assert_eq!(
        foreign
            .data
            .as_ref()
            .and_then(|d| d.get("owner"))
            .map(String::as_str),
        Some("team-b"),
        "the other team's object is not written"
    );
    theirs
        .patch(
            "etl-settings",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the other team's object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_being_deleted_is_not_ready_and_is_created_again_once_gone() {
    let env = Env::start(&["claims-name"]).await;
    let maps = config_maps(&env);
    let job = env
        .create_job("keep", "claims-name", json!({"name": "keep-settings"}))
        .await;
    ready(&env, "keep").await;
    let first = maps.get("keep-settings").await.expect("the child");
    // Someone holds the child Terminating with a finalizer of their own.
    maps.patch(
        "keep-settings",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .expect("add a finalizer");
    maps.delete("keep-settings", &DeleteParams::default())
        .await
        .expect("delete the child");
    let (reason, message) = refused(&env, "keep").await;
    assert_eq!(reason, "ChildTerminating", "{message}");
    assert!(
        message.contains("ConfigMap keep-settings is being deleted"),
        "{message}"
    );
    maps.patch(
        "keep-settings",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the child");
    let first_uid = first.uid();
    let again = eventually("the child created again", || {
        let maps = maps.clone();
        let first_uid = first_uid.clone();
        async move {
            maps.get_opt("keep-settings")
                .await
                .ok()
                .flatten()
                .filter(|c| c.uid() != first_uid && c.metadata.deletion_timestamp.is_none())
        }
    })
    .await;
    assert_eq!(again.owner_references()[0].uid, job.uid().expect("uid"));
    ready(&env, "keep").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_child_was_created_with_goes_when_the_policy_drops_it() {
    let env = Env::start(&["claims-name"]).await;
    let maps = config_maps(&env);
    env.create_job(
        "drop",
        "claims-name",
        json!({"name": "drop-settings", "data": {"a": "1", "b": "2"}}),
    )
    .await;
    eventually("the child with a and b", || {
        let maps = maps.clone();
        async move {
            let data = maps.get_opt("drop-settings").await.ok()??.data?;
            (data.get("b").map(String::as_str) == Some("2")).then_some(())
        }
    })
    .await;
    // A merge patch: `null` removes the key from the params.
    env.patch_spec("drop", json!({"params": {"data": {"b": null}}}))
        .await;
    let data = eventually("b dropped", || {
        let maps = maps.clone();
        async move {
            let data = maps.get_opt("drop-settings").await.ok()??.data?;
            (!data.contains_key("b")).then_some(data)
        }
    })
    .await;
    assert_eq!(data.get("a").map(String::as_str), Some("1"));
    assert_eq!(data.get("claimedBy").map(String::as_str), Some("drop"));
    let child = maps.get("drop-settings").await.expect("the child");
    let ours: Vec<&str> = child
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some("policyhost"))
        .filter_map(|e| e.operation.as_deref())
        .collect();
    assert_eq!(
        ours,
        ["Apply"],
        "the create's fields were handed to the apply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_takes_its_changed_annotations_and_keeps_its_defaults() {
    let env = Env::start(&["fanout"]).await;
    let forever = ("devcluster.policyhost.dev/run-seconds", "-1");
    env.create_job(
        "notes",
        "fanout",
        json!({"replicas": 1, "image": "busybox:1.36",
            "podAnnotations": {forever.0: forever.1, "example.com/note": "a"}}),
    )
    .await;
    let created = env
        .wait_pods("notes", "one worker", |pods| pods.len() == 1)
        .await
        .remove(0);
    // The server defaulted fields the policy never set; the create recorded
    // them as the operator's, and the hand-over makes them its apply's.
    // The spec as the server made it, but for the node the scheduler picks.
    let unbound = |pod: &Pod| {
        pod.spec.clone().map(|spec| PodSpec {
            node_name: None,
            ..spec
        })
    };
    let spec = unbound(&created);
    assert_eq!(
        spec.as_ref().and_then(|s| s.dns_policy.as_deref()),
        Some("ClusterFirst")
    );
    env.patch_spec(
        "notes",
        json!({"params": {"podAnnotations": {"example.com/note": null, "example.com/other": "b"}}}),
    )
    .await;
    let changed = env
        .wait_pods("notes", "the new annotations", |pods| {
            pods.iter().any(|p| {
                let notes = p.annotations();
                notes.get("example.com/other").map(String::as_str) == Some("b")
                    && !notes.contains_key("example.com/note")
            })
        })
        .await
        .remove(0);
    assert_eq!(changed.uid(), created.uid(), "the same Pod, updated");
    assert_eq!(
        changed.annotations().get(forever.0).map(String::as_str),
        Some(forever.1)
    );
    assert_eq!(unbound(&changed), spec, "the defaults stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_deletes_only_children_the_datajob_controls() {
    let env = Env::start(&["claims-name"]).await;
    let maps = config_maps(&env);
    // Carries the operator's labels for DataJob `keeper`, but no owner
    // reference: in the child cache, never in the owner index.
    let instance = env.instance();
    let forged = maps
        .create(
            &PostParams::default(),
            &config_map(
                "keeper-forged",
                &[
                    ("policyhost.dev/managed-by", instance.as_str()),
                    ("policyhost.dev/datajob", "keeper"),
                ],
                &[("owner", "team")],
            ),
        )
        .await
        .expect("a ConfigMap labelled as the DataJob's child");

    env.create_job("keeper", "claims-name", json!({"name": "keeper-a"}))
        .await;
    eventually("keeper-a created", || {
        let maps = maps.clone();
        async move { maps.get_opt("keeper-a").await.ok()? }
    })
    .await;
    env.patch_spec("keeper", json!({"params": {"name": "keeper-b"}}))
        .await;
    eventually("keeper-a pruned, keeper-b created", || {
        let maps = maps.clone();
        async move {
            let a = maps.get_opt("keeper-a").await.ok()?;
            let b = maps.get_opt("keeper-b").await.ok()?;
            (a.is_none_or(|a| a.metadata.deletion_timestamp.is_some()) && b.is_some()).then_some(())
        }
    })
    .await;
    let survived = maps
        .get("keeper-forged")
        .await
        .expect("not pruned: the DataJob does not control it");
    assert_eq!(survived.resource_version(), forged.resource_version());
}

/// Each mode of `host-metadata`, and what the `InvalidOutput` message names.
const HOST_METADATA: &[(&str, &str)] = &[
    ("finalizers", "metadata.finalizers"),
    ("ownerReferences", "metadata.ownerReferences"),
    ("policyLabel", "label `policyhost.dev/policy`"),
    ("reservedLabel", "label `policyhost.dev/managed-by`"),
    (
        "reservedAnnotation",
        "annotation `policyhost.dev/force-release`",
    ),
    ("generateName", "metadata.generateName"),
    ("uid", "metadata.uid"),
    ("resourceVersion", "metadata.resourceVersion"),
    ("managedFields", "metadata.managedFields"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_metadata_duplicates_and_cluster_scoped_kinds_are_invalid_output_and_nothing_is_applied()
 {
    let env = Env::start(&["host-metadata", "duplicate-children", "cluster-scoped"]).await;
    let mut expected: Vec<(String, &str)> = Vec::new();
    for (mode, named) in HOST_METADATA {
        let name = format!("meta-{}", mode.to_ascii_lowercase());
        env.create_job(&name, "host-metadata", json!({ "mode": mode }))
            .await;
        expected.push((name, named));
    }
    env.create_job("twins", "duplicate-children", json!({}))
        .await;
    expected.push(("twins".into(), "duplicates children[0]"));
    env.create_job("global", "cluster-scoped", json!({})).await;
    expected.push((
        "global".into(),
        "kind `v1` `Namespace` is not in the policy's allowed kinds",
    ));

    for (job, named) in &expected {
        let (reason, message) = refused(&env, job).await;
        assert_eq!(reason, "InvalidOutput", "{job}: {message}");
        assert!(message.contains(named), "{job}: {message}");
    }
    let maps = config_maps(&env)
        .list(&ListParams::default())
        .await
        .expect("list ConfigMaps");
    let applied: Vec<String> = maps
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| n.ends_with("-meta") || n.starts_with("twins"))
        .collect();
    assert!(applied.is_empty(), "applied: {applied:?}");
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    assert!(
        namespaces
            .get_opt("global-ns")
            .await
            .expect("get")
            .is_none(),
        "no Namespace was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_child_kind_is_refused_at_operator_start() {
    let env = Env::cluster_only().await;
    let options = Options {
        namespaces: vec![env.namespace.clone()],
        instance: env.instance(),
        child_kinds: vec![
            AllowedKind::new("v1", "ConfigMap"),
            AllowedKind::new("v1", "Namespace"),
        ],
        ..Options::default()
    };
    let error = match Operator::new(env.client_config(), options).await {
        Ok(_) => panic!("an operator with a cluster-scoped child kind started"),
        Err(error) => error,
    };
    assert!(
        matches!(error, policyhost::operator::Error::ClusterScopedKind { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "v1 Namespace is cluster-scoped: a child kind must be namespaced (remove it from --child-kind)"
    );
}

#[test]
fn a_policy_whose_allowed_kinds_name_a_cluster_scoped_kind_is_refused_at_load() {
    let runtime = runtime();
    let data = BTreeMap::from([(
        "allowedKinds".to_owned(),
        "v1/ConfigMap, v1/Namespace".to_owned(),
    )]);
    let binary = BTreeMap::from([(
        "policy.wasm".to_owned(),
        k8s_openapi::ByteString(guest_bytes("cluster-scoped")),
    )]);
    // The host's child kinds are namespaced (the operator refuses any other
    // at start), so a cluster-scoped kind is never one it manages.
    let error = load::load_blocking(
        &runtime,
        &load::Config::default(),
        "cluster-scoped",
        Settings::parse(&data).expect("the settings read"),
        load::Component::In(&binary),
        load::Given::default(),
    )
    .expect_err("a cluster-scoped kind in allowedKinds");
    assert_eq!(error.reason(), "InvalidConfig");
    assert!(
        matches!(
            &error,
            load::Error::Config(policyhost::policies::configmap::Error::KindNotManaged { .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("v1/Namespace"), "{error}");
}
