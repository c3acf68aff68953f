//! Watches: resuming from a resourceVersion, selectors, bookmarks, 410 Gone and
//! kube-runtime's watcher recovering from it, streaming lists.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use crate::common::{eventually, start, start_with};

fn name(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

async fn next_event(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("no stream error")
}

#[tokio::test]
async fn a_watch_from_a_resource_version_replays_later_changes() {
    let c = start().await;
    let a = c.cm("default", "a", json!({})).await;
    c.cm("default", "b", json!({})).await;
    c.cms("default")
        .delete("a", &Default::default())
        .await
        .unwrap();
    let rv = a.metadata.resource_version.unwrap();
    let api = c.cms("default");
    let mut s = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Added(cm) => assert_eq!(name(&cm), "b"),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    match next_event(&mut s).await {
        WatchEvent::Deleted(cm) => assert_eq!(name(&cm), "a"),
        other => panic!("expected DELETED a, got {other:?}"),
    }
    c.cm("default", "c", json!({})).await;
    match next_event(&mut s).await {
        WatchEvent::Added(cm) => assert_eq!(name(&cm), "c"),
        other => panic!("expected ADDED c, got {other:?}"),
    }
}

#[tokio::test]
async fn objects_leaving_a_selector_are_deleted_for_the_watcher() {
    let c = start().await;
    let a = c.cm("default", "a", json!({"app": "x"})).await;
    let api = c.cms("default");
    let rv = a.metadata.resource_version.unwrap();
    let mut s = api
        .watch(&WatchParams::default().labels("app=x"), &rv)
        .await
        .unwrap()
        .boxed();
    let pp = PatchParams::default();
    let moved = api
        .patch(
            "a",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}, "data": {"k": "moved"}})),
        )
        .await
        .unwrap();
    // The last state that matched, at the resourceVersion of the change.
    match next_event(&mut s).await {
        WatchEvent::Deleted(cm) => {
            assert_eq!(cm.metadata.labels.unwrap()["app"], "x");
            assert_eq!(cm.data.unwrap()["k"], "v");
            assert_eq!(
                cm.metadata.resource_version,
                moved.metadata.resource_version
            );
        }
        other => panic!("expected DELETED, got {other:?}"),
    }
    api.patch(
        "a",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    api.patch("a", &pp, &Patch::Merge(json!({"data": {"k": "2"}})))
        .await
        .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Modified(_)));
}

#[tokio::test]
async fn bookmarks_arrive_when_allowed() {
    let c = start().await;
    let a = c.cm("default", "a", json!({})).await;
    let rv = a.metadata.resource_version.unwrap();
    let mut s = c
        .cms("default")
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Bookmark(b) => assert!(
            b.metadata.resource_version.parse::<u64>().unwrap() >= rv.parse::<u64>().unwrap()
        ),
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_gets_410_gone() {
    let c = start_with(devcluster::Config {
        pods: None,
        watch_history: 3,
        ..Default::default()
    })
    .await;
    let first = c.cm("default", "first", json!({})).await;
    for i in 0..5 {
        c.cm("default", &format!("cm-{i}"), json!({})).await;
    }
    let rv = first.metadata.resource_version.unwrap();
    let mut s = c
        .cms("default")
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            assert!(
                e.message.starts_with("too old resource version: "),
                "{}",
                e.message
            );
        }
        other => panic!("expected ERROR 410, got {other:?}"),
    }
}

#[tokio::test]
async fn the_kube_runtime_watcher_recovers_from_410_by_relisting() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(
        writer,
        watcher(c.cms("default"), watcher::Config::default()),
    )
    .applied_objects()
    .for_each(|_| async {});
    let task = tokio::spawn(stream);
    eventually("the first object is seen", || async {
        reader.state().len() == 1
    })
    .await;
    c.dc.faults().force_gone();
    for i in 0..5 {
        c.cm("default", &format!("after-{i}"), json!({})).await;
    }
    eventually("every object is seen after the forced 410", || async {
        reader.state().len() == 6
    })
    .await;
    task.abort();
    assert!(
        c.dc.counters().count("list", "configmaps") >= 2,
        "the watcher re-listed"
    );
}

#[tokio::test]
async fn streaming_lists_end_with_the_initial_events_bookmark() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    c.cm("default", "b", json!({})).await;
    let mut s = c
        .cms("default")
        .watch(&WatchParams::default().initial_events(), "")
        .await
        .unwrap()
        .boxed();
    let mut added = Vec::new();
    loop {
        match next_event(&mut s).await {
            WatchEvent::Added(cm) => added.push(name(&cm)),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["a", "b"]);
    // The kube-runtime watcher in streaming-list mode converges too, and never lists.
    let before = c.dc.counters().count("list", "configmaps");
    let seen = watcher(
        c.cms("default"),
        watcher::Config::default().streaming_lists(),
    )
    .applied_objects()
    .take(2)
    .try_collect::<Vec<_>>();
    let seen = tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(c.dc.counters().count("list", "configmaps"), before);
}

#[tokio::test]
async fn watch_timeout_ends_the_stream() {
    let c = start().await;
    let a = c.cm("default", "a", json!({})).await;
    let rv = a.metadata.resource_version.unwrap();
    let mut s = c
        .cms("default")
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("stream ends in time");
    assert!(end.is_none());
}

#[tokio::test]
async fn shutdown_ends_open_watches_promptly() {
    let c = start().await;
    let a = c.cm("default", "a", json!({})).await;
    let rv = a.metadata.resource_version.unwrap();
    let mut s = c
        .cms("default")
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let addr = c.dc.addr();
    let started = std::time::Instant::now();
    c.dc.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let end = tokio::time::timeout(Duration::from_secs(2), s.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none_or(|r| r.is_err()));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the port is closed"
    );
}

#[tokio::test]
async fn a_streaming_list_needs_not_older_than_but_not_bookmarks() {
    let c = start().await;
    c.cm("default", "a", json!({})).await;
    let path = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1";
    let get = |query: &str| {
        let uri = format!("{path}&{query}");
        let c = &c;
        async move { c.raw("GET", &uri, "", json!(null)).await }
    };
    let (code, body) = get("sendInitialEvents=true").await;
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(code, 422);
    assert_eq!(
        status["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    assert_eq!(status["details"]["causes"].as_array().unwrap().len(), 1);
    let (code, _) = get("resourceVersionMatch=NotOlderThan").await;
    assert_eq!(code, 422, "a match needs sendInitialEvents");
    // Without allowWatchBookmarks the initial events come, and no bookmark.
    let (code, body) = get("sendInitialEvents=true&resourceVersionMatch=NotOlderThan").await;
    assert_eq!(code, 200);
    let types: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
        .collect();
    assert_eq!(types, ["\"ADDED\""]);
    // With them, the closing bookmark has no creationTimestamp.
    let (_, body) =
        get("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
            .await;
    let last: serde_json::Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "BOOKMARK");
    let meta = last["object"]["metadata"].as_object().unwrap();
    assert_eq!(
        meta.keys().collect::<Vec<_>>(),
        ["annotations", "resourceVersion"]
    );
}
