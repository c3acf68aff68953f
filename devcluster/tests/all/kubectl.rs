//! The same scenarios driven by the real `kubectl` binary.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::json;

use crate::common::{Kubectl, datajob_crd, start};

fn datajob_manifest(name: &str, policy: &str) -> serde_json::Value {
    json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob", "metadata": {"name": name}, "spec": {"policy": policy}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_crd_then_its_objects_and_prints_their_columns() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let crd = k.file("crd.yaml", &datajob_crd());
    assert!(
        k.ok(&["apply", "-f", &crd]).await.contains(
            "customresourcedefinition.apiextensions.k8s.io/datajobs.policyhost.dev created"
        )
    );
    k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/datajobs.policyhost.dev",
        "--timeout=20s",
    ])
    .await;
    let dj = k.file("dj.yaml", &datajob_manifest("j1", "fanout"));
    assert!(
        k.ok(&["apply", "-f", &dj])
            .await
            .contains("datajob.policyhost.dev/j1 created")
    );
    let table = k.ok(&["get", "datajobs"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "POLICY", "PHASE", "AGE"]);
    assert!(table.lines().nth(1).unwrap().starts_with("j1"), "{table}");
    assert!(table.contains("fanout"));
    let yaml = k.ok(&["get", "dj", "j1", "-o", "yaml"]).await;
    assert!(yaml.contains("policy: fanout"), "{yaml}");
    assert!(
        yaml.contains("kubectl.kubernetes.io/last-applied-configuration"),
        "{yaml}"
    );
    // Re-applying a changed manifest patches the object (JSON merge patch for custom resources).
    let dj = k.file("dj.yaml", &datajob_manifest("j1", "other"));
    assert!(
        k.ok(&["apply", "-f", &dj])
            .await
            .contains("datajob.policyhost.dev/j1 configured")
    );
    assert_eq!(
        k.ok(&["get", "dj", "j1", "-o", "jsonpath={.spec.policy}"])
            .await,
        "other"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patches_labels_and_annotates() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let cm = k.file("cm.yaml", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}));
    k.ok(&["create", "-f", &cm]).await;
    k.ok(&[
        "patch",
        "configmap",
        "cfg",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ])
    .await;
    k.ok(&["patch", "configmap", "cfg", "--type", "json", "-p", r#"[{"op":"test","path":"/data/a","value":"1"},{"op":"replace","path":"/data/a","value":"9"}]"#]).await;
    let (ok, text) = k
        .run(&[
            "patch",
            "configmap",
            "cfg",
            "--type",
            "json",
            "-p",
            r#"[{"op":"test","path":"/data/a","value":"1"}]"#,
        ])
        .await;
    assert!(!ok);
    assert!(
        text.contains("the server rejected our request due to an error in our request"),
        "{text}"
    );
    k.ok(&["label", "configmap", "cfg", "tier=web"]).await;
    k.ok(&["annotate", "configmap", "cfg", "note=hello"]).await;
    let got: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "configmap", "cfg", "-o", "json"]).await).unwrap();
    assert_eq!(got["data"], json!({"a": "9", "b": "2"}));
    assert_eq!(got["metadata"]["labels"]["tier"], "web");
    assert_eq!(got["metadata"]["annotations"]["note"], "hello");
    let selected = k
        .ok(&["get", "configmaps", "-l", "tier=web", "-o", "name"])
        .await;
    assert_eq!(selected.trim(), "configmap/cfg");
}

/// The lines `stream` gives, as they come, read on a thread of their own.
fn lines_of(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first of `lines` that contains `needle` (each within 20 s), and the
/// lines after it.
async fn first_line_with(
    lines: Receiver<String>,
    needle: &'static str,
) -> Result<(String, Receiver<String>), RecvTimeoutError> {
    tokio::task::spawn_blocking(move || {
        loop {
            let line = lines.recv_timeout(Duration::from_secs(20))?;
            if line.contains(needle) {
                return Ok((line, lines));
            }
        }
    })
    .await
    .expect("the reader thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watches_and_waits_for_deletion() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let mut watch = k
        .command(&[
            "get",
            "configmaps",
            "-w",
            "--output-watch-events",
            "--request-timeout=30s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(watch.stdout.take().unwrap());
    c.cm("default", "watched", json!({})).await;
    let (line, _) = first_line_with(lines, "watched")
        .await
        .expect("kubectl -w prints the new object");
    assert!(line.starts_with("ADDED"), "{line}");
    let _ = watch.kill();
    let _ = watch.wait();

    // `kubectl wait --for=delete` returns once the finalizer is released.
    let pp = kube::api::PatchParams::default();
    c.cms("default")
        .patch(
            "watched",
            &pp,
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": ["test/hold"]}})),
        )
        .await
        .unwrap();
    k.ok(&["delete", "configmap", "watched", "--wait=false"])
        .await;
    // At -v=6 kubectl logs each request once its answer's headers arrive:
    // the watch's line means it found the object still there and waits.
    let mut waiter = k
        .command(&[
            "wait",
            "--for=delete",
            "configmap/watched",
            "--timeout=30s",
            "-v=6",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, watching) = first_line_with(lines_of(waiter.stderr.take().unwrap()), "watch=true")
        .await
        .expect("kubectl wait watches the object while its finalizer holds it");
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "wait returns only after the deletion"
    );
    c.cms("default")
        .patch(
            "watched",
            &pp,
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    let status = tokio::task::spawn_blocking(move || waiter.wait().unwrap())
        .await
        .unwrap();
    let said: Vec<String> = watching.try_iter().collect();
    assert!(status.success(), "{}", said.join("\n"));
    k.ok(&["delete", "namespace", "default", "--wait=false"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_generators_create_namespaces_configmaps_and_secrets() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let wasm: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let path = k.path("policy.wasm");
    std::fs::write(&path, &wasm).unwrap();
    k.ok(&["create", "namespace", "team-a"]).await;
    let from_file = format!("--from-file=policy.wasm={}", path.display());
    k.ok(&[
        "create",
        "configmap",
        "policy",
        "-n",
        "team-a",
        &from_file,
        "--from-literal=limits=small",
    ])
    .await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "team-a",
        "--from-literal=password=hunter2",
    ])
    .await;
    let cm = c.cms("team-a").get("policy").await.unwrap();
    assert_eq!(cm.data.unwrap()["limits"], "small");
    assert_eq!(cm.binary_data.unwrap()["policy.wasm"].0, wasm);
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(c.client.clone(), "team-a");
    assert_eq!(
        secrets.get("creds").await.unwrap().data.unwrap()["password"].0,
        b"hunter2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_rbac_and_disruption_budgets_then_switches_to_server_side_apply() {
    let c = start().await;
    let k = Kubectl::new(&c);
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "reader", "labels": {"team": "a"}},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "reader", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "default"}]});
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    let files: Vec<String> = [
        ("role.yaml", &role),
        ("binding.yaml", &binding),
        ("pdb.yaml", &pdb),
    ]
    .into_iter()
    .map(|(name, value)| k.file(name, value))
    .collect();
    for file in &files {
        k.ok(&["apply", "-f", file]).await;
    }
    let rules = k
        .ok(&[
            "get",
            "clusterrole",
            "reader",
            "-o",
            "jsonpath={.rules[0].verbs}",
        ])
        .await;
    assert_eq!(rules, r#"["get","list"]"#);
    let pdbs = k.ok(&["get", "pdb", "-n", "default", "-o", "name"]).await;
    assert_eq!(pdbs.trim(), "poddisruptionbudget.policy/web");
    // kubectl moves the client-side apply ownership to its server-side manager,
    // then applies: nothing that is still applied may be lost.
    for file in &files {
        k.ok(&["apply", "--server-side", "-f", file]).await;
        let (same, diff) = k.run(&["diff", "-f", file]).await;
        assert!(same && diff.is_empty(), "{file} changed:\n{diff}");
    }
    let labels = k
        .ok(&[
            "get",
            "clusterrole",
            "reader",
            "-o",
            "jsonpath={.metadata.labels.team}",
        ])
        .await;
    assert_eq!(labels, "a");
}
