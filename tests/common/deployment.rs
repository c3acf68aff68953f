//! `deploy/` installed on devcluster with the real `kubectl`, and its
//! Deployment run the way a kubelet would run it: devcluster has no
//! Deployment controller, so the test creates the Pods from the Deployment's
//! template and starts one `policyhost` process per Pod with the template's
//! arguments and environment (the downward API filled in), presenting the
//! ServiceAccount's identity.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::cluster::real_kubeconfig;
use super::process::{Replica, kubeconfig_with_token, kubectl};
use super::workspace;

/// The namespace `deploy/` installs into.
pub const NAMESPACE: &str = "policyhost-system";
/// The user the operator's ServiceAccount token authenticates as.
pub const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:policyhost-system:policyhost";

/// `kubectl apply -k <dir>` with `kubeconfig`; panics with kubectl's output
/// when it fails.
pub async fn apply_k(kubeconfig: &Path, dir: &Path, server_side: bool) -> String {
    let kubeconfig = kubeconfig.to_path_buf();
    let dir = dir.to_string_lossy().into_owned();
    tokio::task::spawn_blocking(move || {
        let mut args = vec!["apply"];
        if server_side {
            args.push("--server-side");
        }
        args.extend(["-k", dir.as_str()]);
        let (ok, text) = kubectl(Some(&kubeconfig), &args);
        assert!(ok, "kubectl {args:?} failed:\n{text}");
        text
    })
    .await
    .expect("kubectl")
}

/// The operator's Deployment, run as Pods and processes.
pub struct Running {
    /// One process per Pod, named as its Pod.
    pub replicas: Vec<Replica>,
}

/// A kubeconfig presenting the ServiceAccount's identity, beside `into`:
/// on devcluster a bearer token that names the user; on a real cluster a
/// token the API server issues for the ServiceAccount (`kubectl create
/// token`), which `admin` may request.
pub fn service_account_kubeconfig(admin: &Path, into: &Path) -> PathBuf {
    let path = into.join("service-account.kubeconfig");
    if real_kubeconfig().is_none() {
        kubeconfig_with_token(admin, SERVICE_ACCOUNT_USER, &path);
        return path;
    }
    issued_token_kubeconfig(admin, NAMESPACE, "policyhost", &path);
    path
}

/// Writes `into`: `admin`'s cluster, authenticated by a token the API
/// server issues for ServiceAccount `namespace/name`.
pub fn issued_token_kubeconfig(admin: &Path, namespace: &str, name: &str, into: &Path) {
    let (ok, token) = kubectl(
        Some(admin),
        &["create", "token", name, "-n", namespace, "--duration=2h"],
    );
    assert!(ok, "kubectl create token: {token}");
    let token_file = into.with_extension("token");
    std::fs::write(&token_file, token.trim()).expect("write the token");
    let mut config = kube::config::Kubeconfig::read_from(admin).expect("read the kubeconfig");
    for user in &mut config.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token_file: Some(token_file.display().to_string()),
            ..kube::config::AuthInfo::default()
        });
    }
    std::fs::write(into, serde_saphyr::to_string(&config).expect("YAML")).expect("write");
}

/// Starts `count` replicas of the installed Deployment: its Pods (running
/// until deleted) and their processes, with `extra` arguments appended.
pub async fn run_deployment(
    client: &Client,
    admin_kubeconfig: &Path,
    count: usize,
    extra: &[&str],
) -> Running {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployment = deployments
        .get("policyhost")
        .await
        .expect("the Deployment of deploy/");
    let template = serde_json::to_value(
        deployment
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .expect("a Pod template"),
    )
    .expect("JSON");
    let container = &template["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        // `run` is added by Replica::start, and each process listens on its own port.
        .filter(|a| *a != "run" && !a.starts_with("--listen"))
        .map(str::to_owned)
        .collect();
    let scratch = admin_kubeconfig.with_extension("replicas");
    std::fs::create_dir_all(&scratch).expect("a directory for the replicas' kubeconfig");
    let sa_kubeconfig = service_account_kubeconfig(admin_kubeconfig, &scratch);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut replicas = Vec::new();
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    for _ in 0..count {
        // Unique in this test process, like a ReplicaSet's Pod names.
        let i = STARTED.fetch_add(1, Ordering::Relaxed);
        let name = format!("policyhost-5d8f7c9b4-{i}x{}", std::process::id() % 1000);
        let mut pod: Pod = serde_json::from_value(template.clone()).expect("a Pod");
        pod.metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NAMESPACE.to_owned()),
            labels: deployment
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.clone()),
            annotations: Some(
                [(
                    "devcluster.policyhost.dev/run-seconds".to_owned(),
                    "-1".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create the operator Pod");
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container["env"].as_array().into_iter().flatten() {
            let key = var["name"].as_str().unwrap_or_default().to_owned();
            let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod.name_any(),
                Some("metadata.namespace") => NAMESPACE.to_owned(),
                Some(other) => panic!("no downward API value for {other}"),
                None => var["value"].as_str().unwrap_or_default().to_owned(),
            };
            env.push((key, value));
        }
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend_from_slice(extra);
        replicas.push(Replica::start_with_env(&name, &sa_kubeconfig, &all, &env));
    }
    Running { replicas }
}

/// `deploy/` rendered and installed by `kubectl apply -k` as an admin.
pub async fn install(admin_kubeconfig: &Path) -> String {
    apply_k(admin_kubeconfig, &workspace().join("deploy"), false).await
}

/// Plays the Deployment controller and the kubelets for `deploy/`'s
/// Deployment once it exists: starts its replicas (as
/// [`run_deployment`]), waits until every one's readiness probe passes, and
/// reports the rollout complete in the Deployment's status, as the
/// controller would (`kubectl rollout status` reads it).
pub async fn roll_out(client: &Client, admin_kubeconfig: &Path, extra: &[&str]) -> Running {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployment = super::cluster::eventually_within(
        "the Deployment of deploy/",
        std::time::Duration::from_secs(600),
        || async { deployments.get_opt("policyhost").await.ok().flatten() },
    )
    .await;
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let running = run_deployment(
        client,
        admin_kubeconfig,
        usize::try_from(replicas).expect("replicas"),
        extra,
    )
    .await;
    super::cluster::eventually_within(
        "every replica to pass its readiness probe",
        std::time::Duration::from_secs(120),
        || async {
            running
                .replicas
                .iter()
                .all(|r| r.get("/readyz").is_some_and(|(code, _)| code == 200))
                .then_some(())
        },
    )
    .await;
    let status = serde_json::json!({"status": {
        "observedGeneration": deployment.metadata.generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ],
    }});
    deployments
        .patch_status(
            "policyhost",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(status),
        )
        .await
        .expect("report the rollout");
    running
}
