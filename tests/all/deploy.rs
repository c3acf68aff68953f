//! The install manifests in `deploy/`: what `kubectl kustomize` renders, and
//! `kubectl apply -k` against devcluster.

use std::collections::BTreeSet;

use devcluster::{Config as ClusterConfig, DevCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use serde_json::{Value, json};

use crate::common::cluster::{real_cluster_config, real_kubeconfig};
use crate::common::process::{kubectl, kustomize, yaml_documents};
use crate::common::workspace;

/// The namespace `deploy/` installs into.
const NAMESPACE: &str = "policyhost-system";

fn rendered() -> Vec<Value> {
    kustomize(&workspace().join("deploy"))
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in deploy/");
    found[0]
}

/// `value` with every number as a float, to compare numbers by value.
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_floats).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_as_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn kustomize_renders_the_operator_with_a_restrictive_two_replica_deployment() {
    let objects = rendered();
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
    ] {
        assert!(
            kinds.contains(kind),
            "{kind} missing from deploy/: {kinds:?}"
        );
    }
    let cluster_scoped = [
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
    ];
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        if !cluster_scoped.contains(&kind) {
            assert_eq!(
                object["metadata"]["namespace"], NAMESPACE,
                "{kind} in the operator's namespace"
            );
        }
    }

    // The CRD is the generated one.
    let committed = yaml_documents(
        &std::fs::read_to_string(workspace().join("deploy/crd.yaml")).expect("deploy/crd.yaml"),
    );
    assert_eq!(
        numbers_as_floats(&one(&objects, "CustomResourceDefinition")["spec"]),
        numbers_as_floats(&committed[0]["spec"]),
        "kustomize writes `minimum: 0` where the file says `0.0`; nothing else differs"
    );

    let deployment = one(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    for (key, value) in selector.as_object().expect("a selector") {
        assert_eq!(&labels[key], value, "the selector selects the Pods");
    }
    let spec = &pod["spec"];
    assert_eq!(
        spec["serviceAccountName"],
        one(&objects, "ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert!(spec["securityContext"]["runAsUser"].as_u64() > Some(0));
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    assert_eq!(
        container["image"],
        format!(
            "ghcr.io/policyhost/policyhost:{}",
            env!("CARGO_PKG_VERSION")
        ),
        "the image tag is the crate version"
    );
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["privileged"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                container["resources"][kind][resource].is_string(),
                "resources.{kind}.{resource}"
            );
        }
    }
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args[0], "run");
    assert!(args.contains(&"--listen=0.0.0.0:8080"), "{args:?}");
    assert!(args.contains(&"--policy-tenancy=strict"), "{args:?}");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    let port = &container["ports"][0]["name"];
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(&container[probe]["httpGet"]["port"], port, "{probe}");
    }
    let env: Vec<(&str, &str)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?,
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str()?,
            ))
        })
        .collect();
    assert!(env.contains(&("POD_NAME", "metadata.name")), "{env:?}");
    assert!(
        env.contains(&("POD_NAMESPACE", "metadata.namespace")),
        "{env:?}"
    );

    // Voluntary disruptions leave a replica running.
    let pdb = one(&objects, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], *selector);
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);

    // The bindings give the ServiceAccount its roles, the Role in its namespace.
    let account = one(&objects, "ServiceAccount");
    for (binding, role) in [
        ("ClusterRoleBinding", "ClusterRole"),
        ("RoleBinding", "Role"),
    ] {
        let binding = one(&objects, binding);
        assert_eq!(binding["roleRef"]["kind"], role);
        assert_eq!(
            binding["roleRef"]["name"],
            one(&objects, role)["metadata"]["name"]
        );
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                    "namespace": NAMESPACE}])
        );
    }
    // The Lease the operator takes by default (`<instance>-leader`).
    let role = one(&objects, "Role");
    assert!(
        role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r["resourceNames"] == json!(["policyhost-leader"])),
        "{role}"
    );
}

/// On devcluster, or on the real control plane when the tests run against
/// one: the real API server checks the CRD's structural schema, the RBAC
/// objects and the Deployment, and warns of anything it does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_installs_every_object_and_reapplies_cleanly() {
    let (cluster, kubeconfig, client) = match real_cluster_config().await {
        Some(config) => (
            None,
            real_kubeconfig().expect("a kubeconfig"),
            kube::Client::try_from(config).expect("client"),
        ),
        None => {
            let cluster = DevCluster::start(ClusterConfig::default())
                .await
                .expect("devcluster");
            let kubeconfig = crate::common::scratch()
                .join(format!("deploy-{}.kubeconfig", cluster.addr().port()));
            cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");
            let client = cluster.client().expect("client");
            (Some(cluster), kubeconfig, client)
        }
    };
    let deploy = workspace().join("deploy");
    let deploy = deploy.to_string_lossy();
    let apply = |args: &'static [&'static str]| {
        let kubeconfig = kubeconfig.clone();
        let deploy = deploy.clone().into_owned();
        tokio::task::spawn_blocking(move || {
            let mut all = args.to_vec();
            all.push(&deploy);
            kubectl(Some(&kubeconfig), &all)
        })
    };

    let (ok, text) = apply(&["apply", "-k"]).await.expect("kubectl");
    assert!(ok, "kubectl apply -k deploy/ failed:\n{text}");
    assert!(!text.contains("Warning"), "the server warned:\n{text}");
    // A fresh devcluster has none of them; a real cluster the suite shares
    // may have them from an earlier run, and holds the CRD already.
    let fresh = cluster.is_some();
    for object in [
        "namespace/policyhost-system",
        "customresourcedefinition.apiextensions.k8s.io/datajobs.policyhost.dev",
        "serviceaccount/policyhost",
        "clusterrole.rbac.authorization.k8s.io/policyhost",
        "clusterrolebinding.rbac.authorization.k8s.io/policyhost",
        "role.rbac.authorization.k8s.io/policyhost",
        "rolebinding.rbac.authorization.k8s.io/policyhost",
        "deployment.apps/policyhost",
        "poddisruptionbudget.policy/policyhost",
    ] {
        let done = ["created", "configured", "unchanged"]
            .iter()
            .any(|outcome| text.contains(&format!("{object} {outcome}")));
        assert!(done, "`{object}` applied in:\n{text}");
        if fresh {
            assert!(text.contains(&format!("{object} created")), "{text}");
        }
    }

    // What was stored is what was rendered.
    let stored: Deployment = Api::namespaced(client.clone(), NAMESPACE)
        .get("policyhost")
        .await
        .expect("the Deployment");
    assert_eq!(stored.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let role: Role = Api::namespaced(client.clone(), NAMESPACE)
        .get("policyhost")
        .await
        .expect("the Role");
    let rendered_role = rendered()
        .into_iter()
        .find(|o| o["kind"] == "Role")
        .expect("a Role");
    assert_eq!(
        serde_json::to_value(&role.rules).expect("rules"),
        rendered_role["rules"]
    );
    let _: ClusterRole = Api::all(client.clone())
        .get("policyhost")
        .await
        .expect("the ClusterRole");
    let _: ClusterRoleBinding = Api::all(client.clone())
        .get("policyhost")
        .await
        .expect("the ClusterRoleBinding");
    let _: RoleBinding = Api::namespaced(client.clone(), NAMESPACE)
        .get("policyhost")
        .await
        .expect("the RoleBinding");
    let _: ServiceAccount = Api::namespaced(client.clone(), NAMESPACE)
        .get("policyhost")
        .await
        .expect("the ServiceAccount");
    let _: PodDisruptionBudget = Api::namespaced(client.clone(), NAMESPACE)
        .get("policyhost")
        .await
        .expect("the PodDisruptionBudget");

    // Applying again changes nothing; nor does switching to server-side apply.
    let (ok, text) = apply(&["apply", "-k"]).await.expect("kubectl");
    assert!(ok, "second apply failed:\n{text}");
    assert!(
        text.contains("deployment.apps/policyhost unchanged"),
        "{text}"
    );
    let (ok, text) = apply(&["diff", "-k"]).await.expect("kubectl");
    assert!(
        ok && text.is_empty(),
        "kubectl diff -k after apply:\n{text}"
    );
    let (ok, text) = apply(&["apply", "--server-side", "-k"])
        .await
        .expect("kubectl");
    assert!(ok, "server-side apply failed:\n{text}");
    let (ok, text) = apply(&["diff", "-k"]).await.expect("kubectl");
    assert!(
        ok && text.is_empty(),
        "kubectl diff -k after the switch to server-side apply:\n{text}"
    );
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
}

/// Copies the directory tree `from` into `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("read the tree") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

#[test]
fn the_outbound_component_lets_the_operator_get_exactly_the_secrets_an_overlay_names() {
    // The overlay of docs/operator.md ("Outbound HTTP"), beside a copy of deploy/.
    let dir = crate::common::scratch().join("outbound-overlay");
    copy_tree(&workspace().join("deploy"), &dir.join("deploy"));
    let overlay = dir.join("overlay");
    std::fs::create_dir_all(&overlay).expect("the overlay");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n- ../deploy\ncomponents:\n- ../deploy/outbound\npatches:\n\
         - target: {kind: Role, name: policyhost-outbound-credentials}\n  patch: |-\n\
         \x20   - op: replace\n      path: /rules/0/resourceNames\n      value: [storage-token]\n",
    )
    .expect("write the overlay");
    let objects = kustomize(&overlay);
    let roles: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Role").collect();
    let credentials = roles
        .iter()
        .find(|r| r["metadata"]["name"] == "policyhost-outbound-credentials")
        .expect("the credentials Role");
    assert_eq!(credentials["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        credentials["rules"],
        json!([{ "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["storage-token"], "verbs": ["get"] }])
    );
    let binding = objects
        .iter()
        .find(|o| {
            o["kind"] == "RoleBinding" && o["metadata"]["name"] == "policyhost-outbound-credentials"
        })
        .expect("its binding");
    assert_eq!(binding["subjects"][0]["name"], "policyhost");
    // Nothing else in the base reads Secrets.
    for object in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        if object["metadata"]["name"] == "policyhost-outbound-credentials" {
            continue;
        }
        let rules = object["rules"].as_array().cloned().unwrap_or_default();
        assert!(
            !rules.iter().any(|rule| rule["resources"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("secrets")))),
            "{} grants Secrets: {rules:?}",
            object["metadata"]["name"]
        );
    }
}

#[test]
fn the_shards_component_runs_deploys_pod_template_as_three_shards_with_member_leases() {
    // The overlay of deploy/shards/kustomization.yaml, beside a copy of deploy/.
    let dir = crate::common::scratch().join("shards-overlay");
    copy_tree(&workspace().join("deploy"), &dir.join("deploy"));
    let overlay = dir.join("overlay");
    std::fs::create_dir_all(&overlay).expect("the overlay");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n- ../deploy\ncomponents:\n- ../deploy/shards\n",
    )
    .expect("write the overlay");
    let objects = kustomize(&overlay);
    assert!(
        !objects.iter().any(|o| o["kind"] == "Deployment"),
        "the StatefulSet replaces the Deployment"
    );
    let shards = one(&objects, "StatefulSet");
    assert_eq!(shards["spec"]["replicas"], 3);
    assert_eq!(shards["spec"]["podManagementPolicy"], "Parallel");
    // deploy/'s Pod template, with `--shards` added to the arguments.
    let base = rendered();
    let mut template = one(&base, "Deployment")["spec"]["template"].clone();
    template["spec"]["containers"][0]["args"]
        .as_array_mut()
        .expect("the arguments")
        .push(json!("--shards"));
    assert_eq!(shards["spec"]["template"], template);
    assert_eq!(
        shards["spec"]["selector"],
        one(&base, "Deployment")["spec"]["selector"]
    );
    let budget = one(&objects, "PodDisruptionBudget");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        shards["spec"]["selector"]["matchLabels"]
    );
    // Each member writes its Lease and lists the others', in its namespace only.
    let role = one(&objects, "Role");
    assert!(
        role["rules"]
            .as_array()
            .is_some_and(|rules| rules.contains(&json!({
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "update", "delete"],
            }))),
        "{}",
        role["rules"]
    );
    assert!(
        objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .all(|o| !o.to_string().contains("leases")),
        "no cluster-wide Lease rights"
    );
}
