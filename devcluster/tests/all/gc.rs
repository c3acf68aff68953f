//! ownerReference garbage collection in the three propagation modes, and namespace deletion.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{Cluster, api_error, eventually, start};

async fn owner_and_dependents(c: &Cluster, block: bool) -> ConfigMap {
    let owner = c.cm("default", "owner", json!({})).await;
    for i in 0..3 {
        let dep: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("dep-{i}"), "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.metadata.uid, "blockOwnerDeletion": block, "controller": true,
            }]},
        }))
        .unwrap();
        c.cms("default")
            .create(&PostParams::default(), &dep)
            .await
            .unwrap();
    }
    owner
}

async fn exists(c: &Cluster, name: &str) -> bool {
    c.cms("default").get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn background_deletion_removes_dependents_after_the_owner() {
    let c = start().await;
    owner_and_dependents(&c, false).await;
    c.cms("default")
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(!exists(&c, "owner").await);
    eventually("dependents are collected", || async {
        c.cms("default")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let c = start().await;
    owner_and_dependents(&c, true).await;
    let api = c.cms("default");
    let pp = PatchParams::default();
    api.patch(
        "dep-0",
        &pp,
        &Patch::Merge(json!({"metadata": {"finalizers": ["test/hold"]}})),
    )
    .await
    .unwrap();
    let resp = api
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let owner = resp.left().expect("owner kept during foreground deletion");
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_owned())
    );
    eventually("unblocked dependents are gone", || async {
        !exists(&c, "dep-1").await && !exists(&c, "dep-2").await
    })
    .await;
    assert!(exists(&c, "owner").await, "the owner waits for dep-0");
    assert!(
        api.get("dep-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    api.patch(
        "dep-0",
        &pp,
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("the owner goes once dependents are gone", || async {
        !exists(&c, "owner").await
    })
    .await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_owner_reference() {
    let c = start().await;
    owner_and_dependents(&c, false).await;
    c.cms("default")
        .delete("owner", &DeleteParams::orphan())
        .await
        .unwrap();
    eventually("the owner is gone", || async { !exists(&c, "owner").await }).await;
    for i in 0..3 {
        let dep = c.cms("default").get(&format!("dep-{i}")).await.unwrap();
        assert!(dep.metadata.owner_references.unwrap_or_default().is_empty());
    }
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_content_then_the_namespace() {
    let c = start().await;
    c.namespace("doomed").await;
    c.cm("doomed", "a", json!({})).await;
    c.cm("doomed", "held", json!({})).await;
    let pp = PatchParams::default();
    c.cms("doomed")
        .patch(
            "held",
            &pp,
            &Patch::Merge(json!({"metadata": {"finalizers": ["test/hold"]}})),
        )
        .await
        .unwrap();
    let nss: Api<Namespace> = Api::all(c.client.clone());
    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let ns = nss.get("doomed").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    eventually("unheld content is deleted", || async {
        c.cms("doomed").get_opt("a").await.unwrap().is_none()
    })
    .await;
    let e = api_error(
        c.cms("doomed")
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("because it is being terminated"),
        "{}",
        e.message
    );
    assert!(nss.get_opt("doomed").await.unwrap().is_some());
    c.cms("doomed")
        .patch(
            "held",
            &pp,
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("the namespace is gone", || async {
        nss.get_opt("doomed").await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn deleting_a_namespace_with_many_objects_finishes_promptly() {
    let c = start().await;
    c.namespace("big").await;
    for i in 0..1000 {
        c.cm("big", &format!("cm-{i}"), json!({})).await;
    }
    let nss: Api<Namespace> = Api::all(c.client.clone());
    let started = std::time::Instant::now();
    nss.delete("big", &DeleteParams::default()).await.unwrap();
    eventually("the namespace is gone", || async {
        nss.get_opt("big").await.unwrap().is_none()
    })
    .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        c.cms("big")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn a_foreground_delete_is_200_and_only_orphan_dependents_false_is_202() {
    let c = start().await;
    let delete_a = || {
        c.raw_json(
            "DELETE",
            "/api/v1/namespaces/default/configmaps/a",
            "application/json",
            json!({"propagationPolicy": "Foreground"}),
        )
    };
    let (code, owner) = delete_a().await;
    assert_eq!(code, 404, "{owner}");
    c.cm("default", "a", json!({})).await;
    let (code, owner) = delete_a().await;
    assert_eq!(code, 200);
    assert_eq!(
        owner["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let held = json!({"metadata": {"name": "b", "finalizers": ["example.com/hold"]}});
    c.raw(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        held,
    )
    .await;
    let (code, _) = c
        .raw_json(
            "DELETE",
            "/api/v1/namespaces/default/configmaps/b",
            "application/json",
            json!({"orphanDependents": false}),
        )
        .await;
    assert_eq!(code, 202);
}

/// A claim, as a policy's child would be: admission protects it, it waits
/// for a volume, its spec stays as created, and deleting it waits for the
/// last Pod that mounts it.
#[tokio::test]
async fn a_claim_is_protected_while_a_pod_mounts_it() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
    let c = start().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "scratch"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    assert_eq!(
        created.metadata.finalizers.as_deref(),
        Some(&["kubernetes.io/pvc-protection".to_owned()][..])
    );
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    let phase = created.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Pending"));

    let grow = json!({"spec": {"accessModes": ["ReadWriteOnce"]}});
    let refused = claims
        .patch("scratch", &PatchParams::default(), &Patch::Merge(grow))
        .await
        .unwrap_err();
    let status = api_error(refused);
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("spec is immutable after creation"),
        "{}",
        status.message
    );

    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "worker"},
        "spec": {"containers": [{"name": "w", "image": "busybox",
                                 "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                 "volumes": [{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // A second Pod that mounts it and has finished holds nothing.
    let mut done = pod.clone();
    done.metadata.name = Some("done".into());
    pods.create(&PostParams::default(), &done).await.unwrap();
    let finished = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status("done", &PatchParams::default(), &Patch::Merge(finished))
        .await
        .unwrap();
    claims
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    // The collector works in order: once a dependent of an owner deleted
    // after the claim is collected, the claim's turn has passed.
    owner_and_dependents(&c, false).await;
    c.cms("default")
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the marker's dependents are collected", || async {
        !exists(&c, "dep-2").await
    })
    .await;
    let held = claims.get("scratch").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some(), "terminating");

    pods.delete("worker", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the claim goes with its last unfinished Pod", || async {
        claims.get_opt("scratch").await.unwrap().is_none()
    })
    .await;
}
