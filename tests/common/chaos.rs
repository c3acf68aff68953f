//! The outbound chaos scenario: DataJobs of the `bucket` policy, each with
//! its bucket in the test cloud, all deleted while the cloud fails 30 % of
//! requests and stalls 5 % and the operator's processes are killed; then
//! the checks that no bucket outlived its DataJob.

use std::time::Duration;

use kube::api::{DeleteParams, ListParams};
use serde_json::json;

use super::cloud::{Cloud, Faults};
use super::cluster::{Env, eventually_within};
use super::history::History;

/// Creates one `bucket` DataJob per name and waits until every bucket lives.
pub async fn create_buckets(env: &Env, cloud: &Cloud, names: &[String]) {
    for name in names {
        env.create_job(name, "bucket", json!({ "service": cloud.origin() }))
            .await;
    }
    eventually_within("every bucket created", Duration::from_secs(300), || async {
        (cloud.live() == names.len()).then_some(())
    })
    .await;
}

/// Deletes every DataJob of `names` through the cloud's faults, calling
/// `kill(round)` for `rounds` rounds, each after some progress; returns
/// once the API server lists none and the watch saw each go.
pub async fn delete_through_faults(
    env: &Env,
    cloud: &Cloud,
    names: &[String],
    rounds: usize,
    mut kill: impl AsyncFnMut(usize),
) -> History {
    cloud.set_faults(Faults {
        fail: 0.30,
        stall: 0.05,
        ..Faults::default()
    });
    let history = History::start(env).await;
    for name in names {
        env.jobs()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete the DataJob");
    }
    for round in 0..rounds {
        let before = (history.releases(), cloud.live());
        eventually_within(
            "progress before the kill",
            Duration::from_secs(120),
            || async { ((history.releases(), cloud.live()) != before).then_some(()) },
        )
        .await;
        kill(round).await;
    }
    // The API server says when every DataJob is gone (a timeout here is
    // the operator's), then the watch must have seen each go (a timeout
    // there is the watch's).
    eventually_within(
        "every DataJob gone from the API server",
        Duration::from_secs(600),
        || async {
            let left = env.jobs().list(&ListParams::default()).await.ok()?;
            left.items.is_empty().then_some(())
        },
    )
    .await;
    eprintln!(
        "the API server lists no DataJob; the watch saw {} of {} go",
        history.releases(),
        names.len()
    );
    eventually_within(
        "the watch to see every DataJob go",
        Duration::from_secs(60),
        || async { (history.releases() == names.len()).then_some(()) },
    )
    .await;
    history
}

/// No bucket lives, and none was deleted after its DataJob was released.
pub fn assert_buckets_went_first(env: &Env, cloud: &Cloud, history: &History, names: &[String]) {
    assert_eq!(cloud.live(), 0, "buckets outlived their DataJobs");
    let ledger = cloud.ledger();
    for name in names {
        let bucket = format!("{}-{name}", env.namespace);
        let deleted = ledger[&bucket].deleted.expect("deleted");
        let released = history.released_at(name).expect("released");
        assert!(
            deleted <= released,
            "{name} was released before its bucket was deleted"
        );
    }
    eprintln!(
        "{} requests to the cloud for {} buckets",
        cloud.requests(),
        names.len()
    );
}
