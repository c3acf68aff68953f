//! Shared helpers: start a cluster, typed and dynamic APIs, waiting on conditions.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use devcluster::{Config, DevCluster};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

/// A started cluster with a client.
pub struct Cluster {
    pub dc: DevCluster,
    pub client: Client,
}

/// Starts a cluster with the test defaults (no Pod simulation unless asked).
pub async fn start() -> Cluster {
    start_with(Config {
        pods: None,
        ..Config::default()
    })
    .await
}

/// Starts a cluster with `config`.
pub async fn start_with(config: Config) -> Cluster {
    let dc = DevCluster::start(config).await.expect("cluster starts");
    let client = dc.client().expect("client");
    Cluster { dc, client }
}

impl Cluster {
    /// ConfigMaps in `ns`.
    pub fn cms(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates a namespace.
    pub async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .expect("namespace created");
    }

    /// Creates a ConfigMap with labels.
    pub async fn cm(&self, ns: &str, name: &str, labels: serde_json::Value) -> ConfigMap {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "data": {"k": "v"},
        }))
        .unwrap();
        self.cms(ns)
            .create(&PostParams::default(), &cm)
            .await
            .expect("configmap created")
    }

    /// Installs the DataJob CRD (with a status subresource and printer columns) and waits
    /// until it is served.
    pub async fn datajob_crd(&self) -> ApiResource {
        let crds: Api<DynamicObject> = Api::all_with(self.client.clone(), &crd_resource());
        let crd: DynamicObject = serde_json::from_value(datajob_crd()).unwrap();
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd created");
        let ar = datajob_resource();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "default", &ar);
        eventually("the CRD is served", || async {
            api.list(&Default::default()).await.is_ok()
        })
        .await;
        ar
    }
}

impl Cluster {
    /// Installs the DataJob CRD and creates DataJob `name` (policy `fanout`)
    /// in `default`.
    pub async fn datajob_created(&self, name: &str) {
        let ar = self.datajob_crd().await;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "default", &ar);
        api.create(&PostParams::default(), &datajob(name, "fanout"))
            .await
            .expect("datajob created");
    }
}

/// The CRD resource itself.
pub fn crd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    )
}

/// `policyhost.dev/v1alpha1` `DataJob`.
pub fn datajob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policyhost.dev", "v1alpha1", "DataJob"),
        "datajobs",
    )
}

/// The DataJob CRD manifest.
pub fn datajob_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "datajobs.policyhost.dev"},
        "spec": {
            "group": "policyhost.dev",
            "scope": "Namespaced",
            "names": {"plural": "datajobs", "singular": "datajob", "kind": "DataJob", "shortNames": ["dj"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Policy", "type": "string", "jsonPath": ".spec.policy"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ]
            }]
        }
    })
}

/// A DataJob object.
pub fn datajob(name: &str, policy: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "policyhost.dev/v1alpha1",
        "kind": "DataJob",
        "metadata": {"name": name},
        "spec": {"policy": policy, "params": {}},
    }))
    .unwrap()
}

/// Waits until `check` holds, for at most 10 seconds.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(what, Duration::from_secs(10), check).await;
}

/// Waits until `check` holds, for at most `limit`.
pub async fn eventually_within<F, Fut>(what: &str, limit: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Cluster {
    /// Sends `method path` with a JSON `body` (none when `Null`) as it is, and returns the
    /// status code and the body, for the fields kube-rs's types would hide.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: serde_json::Value,
    ) -> (u16, String) {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body)
            .unwrap();
        let resp = self.client.send(req.map(Into::into)).await.unwrap();
        let code = resp.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        (code, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// [`Cluster::raw`] for an answer in JSON.
    pub async fn raw_json(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let (code, text) = self.raw(method, path, content_type, body).await;
        (code, serde_json::from_str(&text).unwrap())
    }
}

/// The API error inside a kube error.
pub fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// `kubectl` against one cluster, with a directory of its own for the
/// kubeconfig, kubectl's discovery cache and the manifests a test writes;
/// removed when dropped.
pub struct Kubectl {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// kubectl against `c`.
    pub fn new(c: &Cluster) -> Self {
        let kubectl = Self::in_dir(&format!("kubectl-{}", c.dc.addr().port()));
        c.dc.write_kubeconfig(&kubectl.kubeconfig).unwrap();
        kubectl
    }

    /// kubectl against the cluster `kubeconfig` names; `name` tells its
    /// directory from others'.
    pub fn with_kubeconfig(kubeconfig: &Path, name: &str) -> Self {
        let kubectl = Self::in_dir(name);
        std::fs::copy(kubeconfig, &kubectl.kubeconfig).unwrap();
        kubectl
    }

    fn in_dir(name: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("devcluster-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        Self { dir, kubeconfig }
    }

    /// The command, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args);
        cmd
    }

    /// Runs kubectl off the async runtime.
    pub async fn output(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
            .await
            .unwrap()
    }

    /// Runs kubectl; returns (success, stdout + stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String) {
        let out = self.output(args).await;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Runs kubectl, which must succeed; returns stdout + stderr.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (ok, text) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{text}");
        text
    }

    /// `kubectl ARGS -o json`, parsed.
    pub async fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all).await).unwrap()
    }

    /// A file `name` in this kubectl's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes `value` as YAML into this kubectl's directory; returns its path.
    pub fn file(&self, name: &str, value: &serde_json::Value) -> String {
        let path = self.path(name);
        std::fs::write(&path, serde_saphyr::to_string(value).unwrap()).unwrap();
        path.display().to_string()
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
