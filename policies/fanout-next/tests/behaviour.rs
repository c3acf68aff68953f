//! fanout-next answers as fanout does, plus one child where the label asks.

use fanout::Fanout;
use fanout_next::{EXTRA_LABEL, FanoutNext, SECRET_LABEL};
use policyhost_sdk::testing::{Call, JobFixture};
use serde_json::json;

fn call(labelled: bool) -> Call {
    let mut job = JobFixture::new("demo")
        .namespace("team-a")
        .params(json!({ "replicas": 2, "image": "busybox:1.36" }));
    if labelled {
        job = job.label(EXTRA_LABEL, "yes");
    }
    Call::new(job)
}

#[test]
fn an_unlabelled_datajob_gets_fanouts_answer() {
    let next = call(false).reconcile::<FanoutNext>().result.unwrap();
    let fanout = call(false).reconcile::<Fanout>().result.unwrap();
    assert_eq!(next, fanout);
}

#[test]
fn a_labelled_datajob_gets_one_more_configmap() {
    let next = call(true).reconcile::<FanoutNext>().result.unwrap();
    let fanout = call(true).reconcile::<Fanout>().result.unwrap();
    assert_eq!(next.children.len(), fanout.children.len() + 1);
    let extra = next.children.last().unwrap();
    assert_eq!(
        (extra.kind.as_str(), extra.name.as_str()),
        ("ConfigMap", "demo-extra")
    );
    assert_eq!(next.status, fanout.status);
}

#[test]
fn a_datajob_labelled_for_a_secret_gets_the_digest_as_its_token() {
    let job = JobFixture::new("demo")
        .namespace("team-a")
        .label(SECRET_LABEL, "yes")
        .params(json!({ "replicas": 1, "image": "busybox:1.36" }));
    let next = Call::new(job).reconcile::<FanoutNext>().result.unwrap();
    let secret = next.children.last().unwrap();
    assert_eq!(
        (secret.kind.as_str(), secret.name.as_str()),
        ("Secret", "demo-token")
    );
    let manifest: serde_json::Value = serde_json::from_str(&secret.manifest).unwrap();
    assert!(manifest["data"]["token"].is_string(), "{manifest}");
}
