//! Least privilege, proven by the operator's own traffic: `deploy/` is
//! installed on devcluster, its Deployment runs as two replicas presenting
//! the ServiceAccount's identity, a scenario makes the operator do everything
//! it does (reconcile, prune, a worker's change, fault, hot swap, cleanup,
//! failover, release), and every request devcluster recorded from that
//! identity is checked against the RBAC rules of `deploy/`: a request they
//! do not allow, or a rule (verb, resource, name) no request needed, fails
//! the test; and removing any one rule must make some request forbidden.

use std::collections::BTreeSet;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use policyhost::policies::report::Annotations;
use serde_json::{Value, json};

use crate::common::cluster::{Env, condition, eventually, phase};
use crate::common::deployment::{self, NAMESPACE, SERVICE_ACCOUNT_USER, issued_token_kubeconfig};
use crate::common::process::{kubectl, kustomize, policy_dir};
use crate::common::rbac::{Attributes, Grant, Rule, allowing, grant_allows, grants};
use crate::common::requests::Request;
use crate::common::{guest_bytes, policyhost_bin, workspace};
use policyhost::vocabulary::{GRANT_LABEL, POLICY_LABEL, REVISION_OF_LABEL};

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Rule {
    let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
    Rule {
        verbs: own(verbs),
        api_groups: own(groups),
        resources: own(resources),
        resource_names: own(names),
    }
}

fn request(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes {
        user: SERVICE_ACCOUNT_USER.to_owned(),
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource: resource.to_owned(),
        subresource: subresource.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

fn objects_with(rules: &Value, cluster_rules: &Value) -> Vec<Value> {
    vec![
        json!({"kind": "ClusterRole", "metadata": {"name": "c"}, "rules": cluster_rules}),
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "c"},
               "roleRef": {"kind": "ClusterRole", "name": "c"},
               "subjects": [{"kind": "ServiceAccount", "name": "policyhost", "namespace": NAMESPACE}]}),
        json!({"kind": "Role", "metadata": {"name": "r", "namespace": NAMESPACE}, "rules": rules}),
        json!({"kind": "RoleBinding", "metadata": {"name": "r", "namespace": NAMESPACE},
               "roleRef": {"kind": "Role", "name": "r"},
               "subjects": [{"kind": "ServiceAccount", "name": "policyhost"}]}),
        // Bound to someone else: grants the operator nothing.
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "other"},
               "roleRef": {"kind": "ClusterRole", "name": "c"},
               "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": NAMESPACE}]}),
    ]
}

#[test]
fn rules_match_verbs_groups_resources_subresources_and_names_as_kube_apiserver_does() {
    let r = rule(
        &["get", "patch"],
        &["policyhost.dev"],
        &["datajobs/status"],
        &[],
    );
    assert!(crate::common::rbac::rule_allows(
        &r,
        &request("patch", "policyhost.dev", "datajobs/status", "a", "j")
    ));
    assert!(
        !crate::common::rbac::rule_allows(
            &r,
            &request("patch", "policyhost.dev", "datajobs", "a", "j")
        ),
        "a subresource rule does not grant the resource"
    );
    let any_status = rule(&["patch"], &["*"], &["*/status"], &[]);
    assert!(crate::common::rbac::rule_allows(
        &any_status,
        &request("patch", "apps", "deployments/status", "a", "d")
    ));
    assert!(!crate::common::rbac::rule_allows(
        &any_status,
        &request("patch", "apps", "deployments", "a", "d")
    ));
    let named = rule(
        &["get", "update"],
        &["coordination.k8s.io"],
        &["leases"],
        &["l"],
    );
    assert!(crate::common::rbac::rule_allows(
        &named,
        &request("update", "coordination.k8s.io", "leases", "ns", "l")
    ));
    assert!(!crate::common::rbac::rule_allows(
        &named,
        &request("update", "coordination.k8s.io", "leases", "ns", "other")
    ));
    assert!(
        !crate::common::rbac::rule_allows(
            &named,
            &request("list", "coordination.k8s.io", "leases", "ns", "")
        ),
        "resourceNames never match a request without a name"
    );
    assert!(!crate::common::rbac::rule_allows(
        &named,
        &request("update", "", "leases", "ns", "l")
    ));
}

#[test]
fn a_rolebinding_grants_only_in_its_namespace_and_only_to_its_subjects() {
    let objects = objects_with(
        &json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
        &json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
    );
    let granted = grants(&objects, SERVICE_ACCOUNT_USER);
    assert_eq!(
        granted.len(),
        2,
        "the other binding grants this user nothing"
    );
    let allowed = |r: &Attributes| !allowing(&granted, r).is_empty();
    assert!(allowed(&request("list", "", "configmaps", NAMESPACE, "")));
    assert!(!allowed(&request("list", "", "configmaps", "default", "")));
    assert!(
        !allowed(&request("list", "", "configmaps", "", "")),
        "not across all namespaces either"
    );
    assert!(allowed(&request("list", "", "pods", "", "")));
    assert!(allowed(&request("list", "", "pods", "default", "")));
    let other = grants(&objects, "system:serviceaccount:policyhost-system:other");
    assert_eq!(
        other.len(),
        1,
        "the other account gets the ClusterRole, not the Role"
    );
    assert!(
        grants(&objects, "system:serviceaccount:default:policyhost").is_empty(),
        "a namesake in another namespace gets nothing"
    );
}

/// What the authorizer is asked for one recorded request: an apply patch
/// that created its object needs `create` too (kube-apiserver's patch
/// handler checks it).
fn attributes(r: &Request) -> Vec<Attributes> {
    let base = Attributes {
        user: r.identity.clone(),
        verb: r.verb.clone(),
        group: r.group.clone(),
        resource: r.resource.clone(),
        subresource: r.subresource.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    };
    let mut out = vec![base.clone()];
    if r.verb == "patch" && r.code == 201 {
        out.push(Attributes {
            verb: "create".into(),
            ..base
        });
    }
    out
}

/// One thing a rule grants: a verb on a group's resource (and name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Atom {
    source: String,
    verb: String,
    group: String,
    resource: String,
    name: String,
}

fn atoms(grant: &Grant) -> Vec<Atom> {
    let names = if grant.rule.resource_names.is_empty() {
        vec![String::new()]
    } else {
        grant.rule.resource_names.clone()
    };
    let mut out = Vec::new();
    for verb in &grant.rule.verbs {
        for group in &grant.rule.api_groups {
            for resource in &grant.rule.resources {
                for name in &names {
                    out.push(Atom {
                        source: grant.source.clone(),
                        verb: verb.clone(),
                        group: group.clone(),
                        resource: resource.clone(),
                        name: name.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Whether some request used `atom` of `grant`.
fn used(atom: &Atom, grant: &Grant, requests: &[Attributes]) -> bool {
    requests.iter().any(|r| {
        let combined = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        grant_allows(grant, r)
            && r.verb == atom.verb
            && r.group == atom.group
            && combined == atom.resource
            && (atom.name.is_empty() || r.name == atom.name)
    })
}

/// Requests the rules forbid, and rule atoms no request used.
fn check(objects: &[Value], requests: &[Attributes]) -> (Vec<String>, Vec<String>) {
    let granted = grants(objects, SERVICE_ACCOUNT_USER);
    let forbidden: BTreeSet<String> = requests
        .iter()
        .filter(|r| allowing(&granted, r).is_empty())
        .map(|r| format!("{r:?}"))
        .collect();
    let unneeded: BTreeSet<String> = granted
        .iter()
        .flat_map(|g| atoms(g).into_iter().map(move |a| (a, g)))
        .filter(|(atom, grant)| !used(atom, grant, requests))
        .map(|(atom, _)| format!("{atom:?}"))
        .collect();
    (
        forbidden.into_iter().collect(),
        unneeded.into_iter().collect(),
    )
}

/// `fanout` under another digest: the same behaviour, another version.
fn fanout_version(label: &str) -> Vec<u8> {
    let mut out = guest_bytes("fanout");
    let name = b"policyhost-test-version";
    let mut body = vec![u8::try_from(name.len()).expect("short")];
    body.extend_from_slice(name);
    body.extend_from_slice(label.as_bytes());
    out.push(0);
    out.push(u8::try_from(body.len()).expect("short"));
    out.extend_from_slice(&body);
    out
}

/// `policyhost policy push` as the platform team runs it.
/// A one-worker fanout DataJob, run until it succeeds.
async fn one_worker_succeeds(env: &Env, name: &str) {
    env.create_job(
        name,
        "fanout",
        json!({"replicas": 1, "image": "busybox:1.36"}),
    )
    .await;
    env.wait_job(name, "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
}

async fn push(kubeconfig: &std::path::Path, file: &std::path::Path, name: &str) {
    let mut command = std::process::Command::new(policyhost_bin());
    command
        .args(["policy", "push"])
        .arg(file)
        .args(["--name", name, "--namespace", NAMESPACE, "--wait"])
        .args(["--allowed-namespaces", "*"])
        .arg("--kubeconfig")
        .arg(kubeconfig);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("policy push")
        .expect("run policy push");
    assert!(
        output.status.success(),
        "policy push {name}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_uses_exactly_the_permissions_deploy_grants_and_each_rule_is_needed() {
    let env = Env::cluster_only().await;
    let Some(request_log) = env.requests() else {
        eprintln!("skipped: needs a request log (devcluster's, or the API server's audit log)");
        return;
    };
    let admin = env.kubeconfig_file();
    deployment::install(&admin).await;
    if env.cluster.is_none() {
        // A real cluster may hold this test's policies (and revisions) of an
        // earlier run; the others (the guide's teams') are other tests'.
        for label in [POLICY_LABEL, REVISION_OF_LABEL] {
            Api::<ConfigMap>::namespaced(env.client.clone(), NAMESPACE)
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&format!("{label} in (fanout,panics)")),
                )
                .await
                .expect("delete the policies of an earlier run");
        }
    }
    let dir = policy_dir(&["fanout", "panics"], &format!("rbac-{}", env.namespace));
    let v1 = dir.join("fanout-v1.wasm");
    let v2 = dir.join("fanout-v2.wasm");
    std::fs::write(&v1, fanout_version("v1")).expect("write v1");
    std::fs::write(&v2, fanout_version("v2")).expect("write v2");

    // Two replicas of the Deployment, quick failover; one revision kept
    // per policy, so the swap below forgets the first.
    let mut running = deployment::run_deployment(
        &env.client,
        &admin,
        2,
        &[
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "500ms",
            "--policy-history",
            "1",
        ],
    )
    .await;
    push(&admin, &v1, "fanout").await;
    push(&admin, &dir.join("panics.wasm"), "panics").await;
    let leader = eventually("a replica to lead", || async {
        running
            .replicas
            .iter()
            .position(|r| r.get("/leaderz").is_some_and(|(code, _)| code == 200))
    })
    .await;

    // Reconcile, then prune.
    let forever = json!({"devcluster.policyhost.dev/run-seconds": "-1"});
    env.create_job(
        "scale",
        "fanout",
        json!({"replicas": 3, "image": "busybox:1.36", "podAnnotations": forever}),
    )
    .await;
    env.wait_pods("scale", "three workers", |p| p.len() == 3)
        .await;
    env.patch_spec("scale", json!({"params": {"replicas": 1}}))
        .await;
    env.wait_pods("scale", "pruned to one", |p| p.len() == 1)
        .await;
    // A changed worker: the first change of a created child reads it and
    // hands its fields over, then applies.
    env.patch_spec(
        "scale",
        json!({"params": {"podAnnotations": {"example.com/note": "changed"}}}),
    )
    .await;
    env.wait_pods("scale", "the changed worker", |p| {
        !p.is_empty()
            && p.iter()
                .all(|pod| pod.annotations().contains_key("example.com/note"))
    })
    .await;
    // A guest fault: a condition and warning Events, retried.
    env.create_job("boom", "panics", json!({})).await;
    env.wait_job("boom", "Ready=False", |j| {
        condition(j, "Ready").is_some_and(|c| c.status == "False")
    })
    .await;
    // Hot swap: the DataJobs of the policy are reconciled by the new version.
    push(&admin, &v2, "fanout").await;
    let v2_digest = policyhost::runtime::Digest::of(&fanout_version("v2")).to_hex();
    env.wait_job("scale", "reconciled by v2", |j| {
        j.status
            .as_ref()
            .and_then(|s| s.policy.as_ref())
            .is_some_and(|p| p.digest == v2_digest)
    })
    .await;
    // The swap kept v2's revision and forgot v1's.
    let revisions: Api<ConfigMap> = Api::namespaced(env.client.clone(), NAMESPACE);
    eventually("v2's revision, and only it", || async {
        let kept: Vec<String> = revisions
            .list(&ListParams::default().labels(&format!("{REVISION_OF_LABEL}=fanout")))
            .await
            .ok()?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        (kept == [format!("revision-fanout-{}", &v2_digest[..16])]).then_some(())
    })
    .await;
    // The platform team grants the policy: the host reads its ConfigMap
    // again to load it with the grant (a bad grant refuses the load, the
    // version in service keeps serving), and again when the grant goes.
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NAMESPACE);
    let grant = ConfigMap {
        metadata: ObjectMeta {
            name: Some("grant-fanout".into()),
            labels: Some([(GRANT_LABEL.to_owned(), "fanout".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("origins".to_owned(), "storage.example.com".to_owned())].into()),
        ..ConfigMap::default()
    };
    configmaps
        .create(&PostParams::default(), &grant)
        .await
        .expect("create the grant");
    let verdict = || async {
        let map = configmaps.get("policy-fanout").await.ok()?;
        Some(Annotations::read(map.metadata.annotations.as_ref()?))
    };
    eventually("the version with a bad grant to be refused", || async {
        verdict()
            .await?
            .error?
            .starts_with("InvalidGrant: ")
            .then_some(())
    })
    .await;
    configmaps
        .delete("grant-fanout", &DeleteParams::default())
        .await
        .expect("delete the grant");
    eventually("the version to load again without the grant", || async {
        let verdict = verdict().await?;
        (verdict.error.is_none() && verdict.loaded_digest == Some(v2_digest.clone())).then_some(())
    })
    .await;

    // Delete with cleanup: the finalizer goes once cleanup is done.
    one_worker_succeeds(&env, "done").await;
    env.jobs()
        .delete("done", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("`done` to be released and gone", || async {
        env.jobs()
            .get_opt("done")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Failover: the leader dies, the other replica takes over and works.
    running.replicas[leader].signal("KILL");
    let survivor = 1 - leader;
    eventually("the other replica to lead", || async {
        running.replicas[survivor]
            .get("/leaderz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    // A replacement replica, as the Deployment controller starts one. It
    // fills its caches with paginated lists, as every replica does on an
    // API server without streaming lists (devcluster has them, and `auto`
    // uses them): the requests such a server gets are part of the proof.
    let mut replacement = deployment::run_deployment(
        &env.client,
        &admin,
        1,
        &[
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "500ms",
            "--streaming-lists",
            "never",
        ],
    )
    .await;
    let newcomer = replacement.replicas.pop().expect("one replica");
    eventually("the replacement to be ready", || async {
        newcomer
            .get("/readyz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    one_worker_succeeds(&env, "after").await;
    // A graceful stop releases the Lease, and the replacement takes over.
    running.replicas[survivor].signal("TERM");
    let status = running.replicas[survivor].wait();
    assert!(status.success(), "{}", running.replicas[survivor].logs());
    eventually("the replacement to lead", || async {
        newcomer
            .get("/leaderz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    env.patch_spec("after", json!({"params": {"replicas": 2}}))
        .await;
    env.wait_pods("after", "two workers", |p| p.len() == 2)
        .await;
    let mut newcomer = newcomer;
    newcomer.signal("TERM");
    let status = newcomer.wait();
    assert!(status.success(), "{}", newcomer.logs());

    let log: Vec<Request> = request_log
        .all()
        .into_iter()
        .filter(|r| r.identity == SERVICE_ACCOUNT_USER)
        .collect();
    assert!(!log.is_empty(), "the operator's requests were recorded");
    let refused: Vec<&Request> = log.iter().filter(|r| r.code == 403).collect();
    assert!(refused.is_empty(), "the API server forbade: {refused:#?}");
    let requests: Vec<Attributes> = log.iter().flat_map(attributes).collect();
    let objects = kustomize(&workspace().join("deploy"));
    let (forbidden, unneeded) = check(&objects, &requests);
    let used: BTreeSet<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{} {}{}{} in {:?}{}",
                r.verb,
                r.group,
                if r.group.is_empty() { "" } else { "/" },
                if r.subresource.is_empty() {
                    r.resource.clone()
                } else {
                    format!("{}/{}", r.resource, r.subresource)
                },
                r.namespace,
                if r.name.is_empty() || r.resource != "leases" {
                    String::new()
                } else {
                    format!(" name {}", r.name)
                }
            )
        })
        .collect();
    eprintln!(
        "the operator's requests:\n  {}",
        used.iter().cloned().collect::<Vec<_>>().join("\n  ")
    );
    assert!(
        forbidden.is_empty(),
        "requests deploy/ does not allow:\n{}",
        forbidden.join("\n")
    );
    assert!(
        unneeded.is_empty(),
        "rules no request needed:\n{}",
        unneeded.join("\n")
    );

    // A rule no request needed is reported.
    let mut wider = objects.clone();
    let role = wider
        .iter_mut()
        .find(|o| o["kind"] == "Role")
        .expect("a Role in deploy/");
    role["rules"]
        .as_array_mut()
        .expect("rules")
        .push(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}));
    let (forbidden, unneeded) = check(&wider, &requests);
    assert!(forbidden.is_empty());
    assert_eq!(unneeded.len(), 1, "{unneeded:?}");
    assert!(unneeded[0].contains("secrets"), "{unneeded:?}");

    // Each rule is needed: without it, some request is forbidden.
    let mut rules_checked = 0;
    for (index, object) in objects.iter().enumerate() {
        let count = object["rules"].as_array().map_or(0, Vec::len);
        for rule in 0..count {
            let mut without = objects.clone();
            if let Some(rules) = without[index]["rules"].as_array_mut() {
                rules.remove(rule);
            }
            let (forbidden, _) = check(&without, &requests);
            assert!(
                !forbidden.is_empty(),
                "{} {} rule {rule} can be removed without forbidding any request",
                object["kind"],
                object["metadata"]["name"]
            );
            rules_checked += 1;
        }
    }
    assert!(rules_checked >= 6, "{rules_checked} rules checked");
    if env.cluster.is_none() {
        let denied = each_rule_is_needed_by_the_real_authorizer(&env, &objects, &requests).await;
        assert_eq!(denied, rules_checked, "rules the real authorizer needs");
    }
    drop(running);
}

/// For each rule of `deploy/`'s Role and ClusterRole: removes it from the
/// live object and waits until kube-apiserver's RBAC authorizer denies some
/// request the operator made that, by our evaluator, only that rule allowed
/// (a SubjectAccessReview: the check behind every 403), then puts it back.
/// Returns how many rules were shown needed.
async fn each_rule_is_needed_by_the_real_authorizer(
    env: &Env,
    objects: &[Value],
    requests: &[Attributes],
) -> usize {
    let roles: Api<Role> = Api::namespaced(env.client.clone(), NAMESPACE);
    let cluster_roles: Api<ClusterRole> = Api::all(env.client.clone());
    let mut shown = 0;
    for (index, object) in objects.iter().enumerate() {
        let Some(rules) = object["rules"].as_array() else {
            continue;
        };
        let name = object["metadata"]["name"].as_str().expect("a name");
        let set_rules = |rules: Value| {
            let patch = Patch::Merge(json!({ "rules": rules }));
            let (roles, cluster_roles) = (roles.clone(), cluster_roles.clone());
            let kind = object["kind"].clone();
            async move {
                let params = PatchParams::default();
                if kind == "Role" {
                    roles.patch(name, &params, &patch).await.map(drop)
                } else {
                    cluster_roles.patch(name, &params, &patch).await.map(drop)
                }
                .expect("patch the live rules");
            }
        };
        for rule in 0..rules.len() {
            let mut without = objects.to_vec();
            without[index]["rules"]
                .as_array_mut()
                .expect("rules")
                .remove(rule);
            let granted = grants(&without, SERVICE_ACCOUNT_USER);
            let needing: Vec<&Attributes> = requests
                .iter()
                .filter(|r| allowing(&granted, r).is_empty())
                .collect();
            set_rules(without[index]["rules"].clone()).await;
            eventually(
                &format!("the real authorizer to deny a request without {name} rule {rule}"),
                || async {
                    for request in &needing {
                        if !real_authorizer_allows(&env.client, request).await {
                            return Some(());
                        }
                    }
                    None
                },
            )
            .await;
            set_rules(Value::Array(rules.clone())).await;
            shown += 1;
        }
    }
    shown
}

/// What kube-apiserver's authorizer answers for `request` by the operator's
/// ServiceAccount (with the groups its token carries).
async fn real_authorizer_allows(client: &kube::Client, request: &Attributes) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(SERVICE_ACCOUNT_USER.to_owned()),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{NAMESPACE}"),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(request.verb.clone()),
                group: Some(request.group.clone()),
                resource: Some(request.resource.clone()),
                subresource: Some(request.subresource.clone()),
                namespace: Some(request.namespace.clone()),
                name: Some(request.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|status| status.allowed)
}

/// The same on a real cluster, where the API server decides: with the
/// guide's objects applied, team A's `publisher` ServiceAccount (a token the
/// server issued) replaces its own policy, and is answered 403 for team B's
/// and for a policy nobody created for it; team B replaces its own.
async fn teams_publish_as_the_real_authorizer_decides(env: &Env, objects: &[Value]) {
    let admin = env.kubeconfig_file();
    let scratch = crate::common::scratch();
    for namespace in [NAMESPACE, "team-a", "team-b"] {
        let (ok, text) = kubectl(Some(&admin), &["create", "namespace", namespace]);
        assert!(ok || text.contains("already exists"), "{text}");
    }
    for team in ["team-a", "team-b"] {
        let (ok, text) = kubectl(
            Some(&admin),
            &["create", "serviceaccount", "publisher", "-n", team],
        );
        assert!(ok || text.contains("already exists"), "{text}");
    }
    let file = scratch.join(format!("{}-publishers.yaml", env.namespace));
    let yaml = serde_saphyr::to_string_multiple(objects).expect("YAML");
    std::fs::write(&file, yaml).expect("write the guide's objects");
    let (ok, text) = kubectl(
        Some(&admin),
        &["apply", "-f", file.to_str().expect("a UTF-8 path")],
    );
    assert!(ok, "apply the guide's objects: {text}");
    let publisher = |team: &str| {
        let kubeconfig = scratch.join(format!("{}-{team}.kubeconfig", env.namespace));
        issued_token_kubeconfig(&admin, team, "publisher", &kubeconfig);
        kubeconfig
    };
    let (team_a, team_b) = (publisher("team-a"), publisher("team-b"));
    // RBAC objects reach the authorizer through its informers: wait for it.
    eventually("team A's own push to be allowed", || async {
        push_as(&team_a, "etl").status.success().then_some(())
    })
    .await;
    for (name, why) in [
        ("reports", "team B's policy"),
        ("brand-new", "a policy nobody created"),
    ] {
        let out = push_as(&team_a, name);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("forbidden"),
            "team A pushing {why}: {stderr}"
        );
    }
    let out = push_as(&team_b, "reports");
    assert!(
        out.status.success(),
        "team B pushing its own: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Candidates: its own, yes; team B's, neither published nor promoted.
    let out = shadow_as(&team_a, "etl");
    assert!(
        out.status.success(),
        "team A shadowing its own: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for out in [
        shadow_as(&team_a, "reports"),
        promote_as(&team_a, "reports"),
        policy_as(&team_a, &["rollback", "reports"]),
        policy_as(&team_a, &["history", "reports"]),
        policy_as(&team_a, &["pin", "reports", "team-a", "00"]),
        policy_as(&team_a, &["unpin", "reports", "team-a"]),
        policy_as(&team_a, &["rollout", "reports", "start", "--force"]),
        policy_as(&team_a, &["rollout", "reports", "status"]),
        policy_as(&team_a, &["rollout", "reports", "pause"]),
        policy_as(&team_a, &["rollout", "reports", "resume"]),
        policy_as(&team_a, &["rollout", "reports", "abort"]),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("forbidden"),
            "team A on team B's candidate, history, pins and rollout: {stderr}"
        );
    }
    // Another team's DataJobs, and so their decisions, are not its to read.
    let out = std::process::Command::new(policyhost_bin())
        .args(["explain", "team-b/nightly", "--kubeconfig"])
        .arg(&team_a)
        .env("POLICYHOST_LOG", "warn")
        .output()
        .expect("run policyhost explain");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("forbidden"),
        "team A explaining team B's DataJob: {stderr}"
    );
    // Its own promote is authorized: it promotes, or says the candidate is
    // not in service (an operator of another test on this cluster may have
    // loaded it, or none did).
    let out = promote_as(&team_a, "etl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("not in service"),
        "{stderr}"
    );
    if let Some(log) = env.requests() {
        let refused = log
            .all()
            .into_iter()
            .filter(|r| {
                r.identity == "system:serviceaccount:team-a:publisher"
                    && r.name == "policy-reports"
                    && r.code == 403
            })
            .count();
        assert!(refused > 0, "the audit log records the 403 for team A");
    }
}

/// The objects of the YAML block of the operator guide's policy delivery
/// section: each team's ConfigMap, and its publisher Role and RoleBinding.
fn guide_publisher_rbac() -> Vec<Value> {
    let guide = std::fs::read_to_string(workspace().join("docs/operator.md")).expect("the guide");
    let heading = "### Policy delivery: who may publish and who may use a policy\n";
    let section = &guide[guide.find(heading).expect("the policy delivery section")..];
    let section = &section[heading.len()..];
    let section = &section[..section.find("\n### ").unwrap_or(section.len())];
    let start = section.find("```yaml\n").expect("a YAML block") + "```yaml\n".len();
    let block = &section[start..start + section[start..].find("\n```").expect("its end")];
    serde_saphyr::from_multiple(block).expect("YAML documents")
}

/// `policy push` run as `kubeconfig`'s user, of fanout as policy `name`.
fn push_as(kubeconfig: &std::path::Path, name: &str) -> std::process::Output {
    publish_as(kubeconfig, name, &[])
}

/// `policy push --shadow` run as `kubeconfig`'s user: fanout as the
/// candidate of policy `name`.
fn shadow_as(kubeconfig: &std::path::Path, name: &str) -> std::process::Output {
    publish_as(kubeconfig, name, &["--shadow"])
}

fn publish_as(kubeconfig: &std::path::Path, name: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(policyhost_bin())
        .args(["policy", "push"])
        .arg(crate::common::guest("fanout"))
        .args(["--name", name, "--namespace", NAMESPACE])
        .args(["--allowed-namespaces", "team-a"])
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("POLICYHOST_LOG", "warn")
        .output()
        .expect("run policyhost policy push")
}

/// `policy promote` run as `kubeconfig`'s user, of policy `name`.
fn promote_as(kubeconfig: &std::path::Path, name: &str) -> std::process::Output {
    policy_as(kubeconfig, &["promote", name])
}

/// `policy ARGS…` run as `kubeconfig`'s user in the policy namespace.
fn policy_as(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(policyhost_bin())
        .arg("policy")
        .args(args)
        .args(["--namespace", NAMESPACE, "--kubeconfig"])
        .arg(kubeconfig)
        .env("POLICYHOST_LOG", "warn")
        .output()
        .expect("run policyhost policy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_guide_s_rbac_a_team_may_replace_its_own_policy_but_not_another_team_s() {
    let objects = guide_publisher_rbac();
    let env = Env::cluster_only().await;
    let Some(cluster) = env.cluster.as_ref() else {
        return teams_publish_as_the_real_authorizer_decides(&env, &objects).await;
    };
    // The platform team's part: the namespace and each team's ConfigMap.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create the policy namespace");
    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NAMESPACE);
    let precreated: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .collect();
    assert_eq!(precreated.len(), 8, "four ConfigMaps per team's policy");
    for map in precreated {
        let map: ConfigMap = serde_json::from_value(map.clone()).expect("a ConfigMap");
        maps.create(&PostParams::default(), &map)
            .await
            .expect("create a team's ConfigMap");
    }

    let team_a = "system:serviceaccount:team-a:publisher";
    let admin = env.kubeconfig_file();
    let kubeconfig = admin.with_extension("team-a.kubeconfig");
    crate::common::process::kubeconfig_with_token(&admin, team_a, &kubeconfig);
    let granted = grants(&objects, team_a);
    assert!(!granted.is_empty(), "the guide binds a Role to team A");
    // Every authorizer request team A's pushes onto ConfigMap `name` made,
    // and whether the guide's rules allow it.
    let verdicts = |name: &str| -> Vec<(Attributes, bool)> {
        cluster
            .counters()
            .requests()
            .iter()
            .filter(|r| r.identity == team_a && r.resource == "configmaps" && r.name == name)
            .flat_map(attributes)
            .map(|a| {
                let allowed = !allowing(&granted, &a).is_empty();
                (a, allowed)
            })
            .collect()
    };

    // Its own: devcluster lets every request through, the rules decide.
    let out = push_as(&kubeconfig, "etl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let own = verdicts("policy-etl");
    assert!(own.iter().any(|(a, _)| a.verb == "patch"), "{own:?}");
    assert!(own.iter().all(|(_, allowed)| *allowed), "{own:?}");

    // Team B's: the apply that would replace it is denied.
    push_as(&kubeconfig, "reports");
    let other = verdicts("policy-reports");
    assert!(other.iter().any(|(a, _)| a.verb == "patch"), "{other:?}");
    assert!(other.iter().all(|(_, allowed)| !*allowed), "{other:?}");

    // Its own candidate: allowed; team B's, to publish or to promote: denied.
    let out = shadow_as(&kubeconfig, "etl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let own = verdicts("candidate-etl");
    assert!(own.iter().any(|(a, _)| a.verb == "patch"), "{own:?}");
    assert!(own.iter().all(|(_, allowed)| *allowed), "{own:?}");
    shadow_as(&kubeconfig, "reports");
    promote_as(&kubeconfig, "reports");
    let theirs = verdicts("candidate-reports");
    for verb in ["patch", "get"] {
        assert!(
            theirs.iter().any(|(a, _)| a.verb == verb),
            "{verb}: {theirs:?}"
        );
    }
    assert!(theirs.iter().all(|(_, allowed)| !*allowed), "{theirs:?}");

    // A policy nobody created for it: the apply would create, which is denied.
    push_as(&kubeconfig, "brand-new");
    let new = verdicts("policy-brand-new");
    assert!(
        new.iter()
            .any(|(a, allowed)| a.verb == "create" && !*allowed),
        "{new:?}"
    );

    // And team B may replace its own.
    let team_b = grants(&objects, "system:serviceaccount:team-b:publisher");
    let mut patch = other
        .iter()
        .find(|(a, _)| a.verb == "patch")
        .map(|(a, _)| a.clone())
        .expect("a patch");
    patch.user = "system:serviceaccount:team-b:publisher".into();
    assert!(!allowing(&team_b, &patch).is_empty());
}
