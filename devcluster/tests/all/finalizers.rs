//! Finalizers: deletionTimestamp, the kube-runtime finalizer helper's JSON patches, and
//! the rule that no finalizer is added once deletion started.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DeleteParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use serde_json::json;

use crate::common::{api_error, start};

const FINALIZER: &str = "policyhost.dev/cleanup";

#[tokio::test]
async fn the_kube_runtime_finalizer_helper_adds_its_finalizer_and_removes_it_after_cleanup() {
    let c = start().await;
    let api = c.cms("default");
    let cm = c.cm("default", "a", json!({})).await;
    let seen = |want_cleanup: bool| {
        move |ev: Event<k8s_openapi::api::core::v1::ConfigMap>| async move {
            assert_eq!(matches!(ev, Event::Cleanup(_)), want_cleanup);
            Ok::<_, std::io::Error>(Action::await_change())
        }
    };
    // No finalizer yet: the helper adds it (JSON patch `test` null + `add`).
    finalizer(&api, FINALIZER, Arc::new(cm), seen(false))
        .await
        .unwrap();
    let cm = api.get("a").await.unwrap();
    assert_eq!(
        cm.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_owned()][..])
    );
    // Present and not deleting: Apply.
    finalizer(&api, FINALIZER, Arc::new(cm), seen(false))
        .await
        .unwrap();
    // Deleting keeps the object with a deletionTimestamp.
    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    let pending = deleted
        .left()
        .expect("object kept while its finalizer is there");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let cm = api.get("a").await.unwrap();
    assert!(cm.metadata.deletion_timestamp.is_some());
    // Cleanup, then the helper removes its finalizer (`test` index + `remove`) and it is gone.
    finalizer(&api, FINALIZER, Arc::new(cm), seen(true))
        .await
        .unwrap();
    assert_eq!(api_error(api.get("a").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn removing_a_finalizer_at_a_stale_index_fails_and_keeps_the_object() {
    let c = start().await;
    let api = c.cms("default");
    c.cm("default", "a", json!({})).await;
    let pp = PatchParams::default();
    api.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER]}})),
    )
    .await
    .unwrap();
    let snapshot = api.get("a").await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    // The helper acts on a stale copy in which its finalizer sits at another index.
    let cm = api.get("a").await.unwrap();
    let mut stale = cm.clone();
    stale.metadata.finalizers = Some(vec!["other".into(), FINALIZER.into()]);
    let err = finalizer(&api, FINALIZER, Arc::new(stale), |_| async {
        Ok::<_, std::io::Error>(Action::await_change())
    })
    .await
    .unwrap_err();
    match err {
        kube::runtime::finalizer::Error::RemoveFinalizer(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert_eq!(s.reason, "Invalid");
        }
        other => panic!("expected a 422 from the finalizer removal, got {other:?}"),
    }
    assert!(
        api.get("a")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert!(snapshot.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn no_finalizer_can_be_added_to_an_object_being_deleted() {
    let c = start().await;
    let api = c.cms("default");
    c.cm("default", "a", json!({})).await;
    let pp = PatchParams::default();
    api.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"finalizers": ["x/hold"]}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let e = api_error(
        api.patch(
            "a",
            &pp,
            &Patch::Merge(json!({"metadata": {"finalizers": ["x/hold", "y/new"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        e.message
    );
    api.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(api.get("a").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn removing_the_last_finalizer_deletes_the_object_as_it_was_stored_before() {
    let c = start().await;
    let api = c.cms("default");
    c.cm("default", "a", json!({})).await;
    let pp = PatchParams::default();
    let hold = json!({"metadata": {"finalizers": ["x/hold"]}});
    api.patch("a", &pp, &Patch::Merge(hold)).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("a").await.unwrap();
    let rv = deleting.metadata.resource_version.clone().unwrap();
    let mut events = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let release = json!({"metadata": {"finalizers": null, "labels": {"done": "yes"}}});
    let answer = api.patch("a", &pp, &Patch::Merge(release)).await.unwrap();
    assert_eq!(answer.metadata.finalizers, None, "the update's own result");
    assert_eq!(answer.metadata.labels.unwrap()["done"], "yes");
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("no stream error");
    let WatchEvent::Deleted(last) = event else {
        panic!("expected DELETED, got {event:?}")
    };
    assert_eq!(last.metadata.finalizers, Some(vec!["x/hold".to_owned()]));
    assert_eq!(last.metadata.labels, deleting.metadata.labels);
    assert_eq!(
        last.metadata.resource_version, answer.metadata.resource_version,
        "both at the delete's resourceVersion"
    );
}
