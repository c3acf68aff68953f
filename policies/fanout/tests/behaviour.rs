//! Fanout's behaviour through the native harness, one rule per test.

use fanout::{Fanout, Outputs};
use policyhost_sdk::testing::{Call, ChildFixture, JobFixture};
use policyhost_sdk::{ChildPhase, Cleanup, PolicyError, Reconcile};
use serde_json::{Value, json};

fn job(params: Value) -> JobFixture {
    JobFixture::new("demo").namespace("team-a").params(params)
}

fn params(replicas: u32, backoff_limit: u32) -> Value {
    json!({ "replicas": replicas, "image": "busybox:1.36", "command": ["true"], "backoffLimit": backoff_limit })
}

fn pod(name: &str, phase: ChildPhase) -> ChildFixture {
    ChildFixture::pod(name)
        .phase(phase)
        .ready(phase == ChildPhase::Running)
}

fn reconcile(call: &Call) -> Reconcile {
    call.reconcile::<Fanout>()
        .result
        .expect("reconcile succeeds")
}

fn names(result: &Reconcile) -> Vec<&str> {
    result.children.iter().map(|c| c.name.as_str()).collect()
}

fn outputs(result: &Reconcile) -> Outputs {
    serde_json::from_str(&result.status.outputs).expect("outputs are fanout outputs")
}

fn manifest(result: &Reconcile, name: &str) -> Value {
    let child = result
        .children
        .iter()
        .find(|c| c.name == name)
        .expect("child exists");
    serde_json::from_str(&child.manifest).expect("manifest is JSON")
}

#[test]
fn the_first_call_asks_for_one_pod_per_replica_and_is_pending() {
    let result = reconcile(&Call::new(job(params(3, 1))));
    assert_eq!(
        names(&result),
        ["demo-worker-0", "demo-worker-1", "demo-worker-2"]
    );
    assert_eq!(result.status.phase, "Pending");
    let reasons: Vec<_> = result.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["Started"]);
}

#[test]
fn worker_pods_never_restart_and_carry_their_index() {
    let result = reconcile(&Call::new(job(params(2, 1))));
    let pod = manifest(&result, "demo-worker-1");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(
        pod["metadata"]["labels"]["fanout.policyhost.dev/index"],
        "1"
    );
    assert_eq!(
        pod["metadata"]["labels"]["fanout.policyhost.dev/job"],
        "demo"
    );
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], "busybox:1.36");
    assert_eq!(container["command"], json!(["true"]));
    assert_eq!(
        container["env"],
        json!([{ "name": "FANOUT_INDEX", "value": "1" }])
    );
    assert!(
        pod["metadata"].get("namespace").is_none(),
        "the host sets the namespace"
    );
}

#[test]
fn the_job_is_running_only_once_every_worker_runs() {
    let partly = Call::new(job(params(2, 1)))
        .child(pod("demo-worker-0", ChildPhase::Running))
        .child(pod("demo-worker-1", ChildPhase::Pending));
    assert_eq!(reconcile(&partly).status.phase, "Pending");
    let fully = Call::new(job(params(2, 1)))
        .child(pod("demo-worker-0", ChildPhase::Running))
        .child(pod("demo-worker-1", ChildPhase::Running));
    let result = reconcile(&fully);
    assert_eq!(result.status.phase, "Running");
    assert_eq!(result.status.conditions[0].kind, "WorkersReady");
    assert!(result.status.conditions[0].status);
}

#[test]
fn running_but_unready_workers_leave_workers_ready_false() {
    let call = Call::new(job(params(1, 1)))
        .child(ChildFixture::pod("demo-worker-0").phase(ChildPhase::Running));
    let result = reconcile(&call);
    assert_eq!(result.status.phase, "Running");
    assert!(!result.status.conditions[0].status);
    assert_eq!(result.status.conditions[0].reason, "WorkersNotReady");
}

#[test]
fn a_failed_worker_under_the_limit_is_kept_and_replaced_under_a_new_name() {
    let call = Call::new(job(params(2, 2)))
        .child(pod("demo-worker-0", ChildPhase::Failed))
        .child(pod("demo-worker-0-r1", ChildPhase::Failed))
        .child(pod("demo-worker-1", ChildPhase::Running));
    let result = reconcile(&call);
    assert_eq!(
        names(&result),
        [
            "demo-worker-0",
            "demo-worker-0-r1",
            "demo-worker-0-r2",
            "demo-worker-1"
        ]
    );
    assert_eq!(
        manifest(&result, "demo-worker-0-r2")["metadata"]["labels"]["fanout.policyhost.dev/retry"],
        "2"
    );
    assert_eq!(result.status.phase, "Pending");
    assert_eq!(outputs(&result).failed, 2);
}

#[test]
fn more_failures_than_the_backoff_limit_fail_the_job_and_drop_unfinished_workers() {
    let call = Call::new(job(params(3, 1)))
        .child(pod("demo-worker-0", ChildPhase::Failed))
        .child(pod("demo-worker-1", ChildPhase::Failed))
        .child(pod("demo-worker-2", ChildPhase::Running));
    let result = reconcile(&call);
    assert_eq!(result.status.phase, "Failed");
    assert_eq!(names(&result), ["demo-worker-0", "demo-worker-1"]);
    assert!(
        result
            .events
            .iter()
            .any(|e| e.warning && e.reason == "BackoffLimitExceeded")
    );
}

#[test]
fn exactly_backoff_limit_failures_still_replace() {
    let call = Call::new(job(params(1, 1))).child(pod("demo-worker-0", ChildPhase::Failed));
    let result = reconcile(&call);
    assert_eq!(result.status.phase, "Pending");
    assert_eq!(names(&result), ["demo-worker-0", "demo-worker-0-r1"]);
}

#[test]
fn the_job_succeeds_when_every_index_has_a_succeeded_worker() {
    let call = Call::new(job(params(2, 1)))
        .child(pod("demo-worker-0", ChildPhase::Succeeded))
        .child(pod("demo-worker-1", ChildPhase::Failed))
        .child(pod("demo-worker-1-r1", ChildPhase::Succeeded));
    let result = reconcile(&call);
    assert_eq!(result.status.phase, "Succeeded");
    assert_eq!(
        names(&result),
        ["demo-worker-0", "demo-worker-1", "demo-worker-1-r1"]
    );
    let counts = outputs(&result);
    assert_eq!((counts.desired, counts.succeeded, counts.failed), (2, 2, 1));
}

#[test]
fn phase_events_fire_on_transitions_only() {
    let running = Call::new(job(params(1, 1))).child(pod("demo-worker-0", ChildPhase::Running));
    let first = reconcile(&running);
    assert_eq!(first.events.len(), 1);
    assert_eq!(first.events[0].reason, "Running");
    let previous: Value = serde_json::from_str(&first.status.outputs).unwrap();
    let replay = Call::new(job(params(1, 1)).status(previous))
        .child(pod("demo-worker-0", ChildPhase::Running));
    let outcome = replay.reconcile::<Fanout>();
    assert!(outcome.logs.is_empty(), "same state, nothing logged");
    assert!(
        outcome.result.unwrap().events.is_empty(),
        "same state, no new event"
    );
}

#[test]
fn a_phase_change_is_logged() {
    let outcome = Call::new(job(params(1, 1))).reconcile::<Fanout>();
    let line = (
        policyhost_sdk::log::Level::Info,
        "phase (none) -> Pending".to_owned(),
    );
    assert_eq!(outcome.logs, [line]);
}

#[test]
fn the_same_inputs_give_the_same_result() {
    let call = Call::new(job(params(3, 1)))
        .child(pod("demo-worker-0", ChildPhase::Failed))
        .child(pod("demo-worker-1", ChildPhase::Running))
        .now_unix_ms(5);
    assert_eq!(
        call.reconcile::<Fanout>(),
        call.clone().now_unix_ms(6).reconcile::<Fanout>()
    );
}

#[test]
fn scaling_down_drops_workers_of_removed_indexes_and_foreign_children() {
    let call = Call::new(job(params(1, 1)))
        .child(pod("demo-worker-0", ChildPhase::Running))
        .child(pod("demo-worker-1", ChildPhase::Running))
        .child(pod("other-worker-0", ChildPhase::Running))
        .child(ChildFixture::config_map("demo-worker-0-config"));
    let result = reconcile(&call);
    assert_eq!(names(&result), ["demo-worker-0"]);
    assert_eq!(outputs(&result).running, 1);
}

#[test]
fn params_out_of_range_name_the_field() {
    let cases = [
        (
            json!({ "replicas": 1001, "image": "i" }),
            "params.replicas: 1001 is out of range 1..=1000",
        ),
        (
            json!({ "replicas": 1, "image": "i", "backoffLimit": 5000 }),
            "params.backoffLimit: 5000 is out of range 0..=1000",
        ),
        (
            json!({ "image": "has space" }),
            "params.image: \"has space\" is not an image reference",
        ),
        (
            json!({ "replicas": -1, "image": "i" }),
            "params.replicas: invalid value: integer `-1`, expected u32",
        ),
        (json!({ "replicas": 1 }), "params: missing field `image`"),
    ];
    for (params, message) in cases {
        let outcome = Call::new(job(params)).reconcile::<Fanout>();
        assert_eq!(
            outcome.result,
            Err(PolicyError::InvalidParams(message.to_owned()))
        );
    }
}

#[test]
fn a_job_name_too_long_for_a_label_fails_with_the_builders_message() {
    let outcome =
        Call::new(JobFixture::new("j".repeat(64)).params(params(1, 1))).reconcile::<Fanout>();
    let Err(PolicyError::Failed(message)) = outcome.result else {
        panic!("expected failed")
    };
    assert!(message.starts_with("label value"), "{message}");
}

#[test]
fn cleanup_waits_while_any_worker_is_pending_or_running() {
    for phase in [ChildPhase::Pending, ChildPhase::Running] {
        let call = Call::new(job(params(2, 1)).deleting_since(1))
            .child(pod("demo-worker-0", ChildPhase::Succeeded))
            .child(pod("demo-worker-1", phase));
        assert_eq!(
            call.cleanup::<Fanout>().result,
            Ok(Cleanup::RetryAfter { ms: 2000 })
        );
    }
}

#[test]
fn cleanup_is_done_once_workers_finished_and_stays_done_when_repeated() {
    let call = Call::new(job(params(2, 1)).deleting_since(1))
        .child(pod("demo-worker-0", ChildPhase::Succeeded))
        .child(pod("demo-worker-1", ChildPhase::Failed));
    for attempt in 1..=3 {
        assert_eq!(
            call.clone().attempt(attempt).cleanup::<Fanout>().result,
            Ok(Cleanup::Done)
        );
    }
    let nothing_left = Call::new(job(params(2, 1)).deleting_since(1));
    assert_eq!(nothing_left.cleanup::<Fanout>().result, Ok(Cleanup::Done));
}

#[test]
fn pod_annotations_are_set_on_every_worker() {
    let mut with_annotations = params(2, 1);
    with_annotations["podAnnotations"] = json!({"example.com/team": "data"});
    let result = reconcile(&Call::new(job(with_annotations)));
    for name in ["demo-worker-0", "demo-worker-1"] {
        let pod = manifest(&result, name);
        assert_eq!(pod["metadata"]["annotations"]["example.com/team"], "data");
    }
    let plain = reconcile(&Call::new(job(params(1, 1))));
    assert!(
        manifest(&plain, "demo-worker-0")["metadata"]
            .get("annotations")
            .is_none()
    );
}

fn with_scratch(scratch: Value) -> Value {
    let mut params = params(2, 1);
    params["scratch"] = scratch;
    params
}

#[test]
fn scratch_is_one_shared_claim_that_every_worker_mounts() {
    let result = reconcile(&Call::new(job(with_scratch(
        json!({ "size": "10Gi", "storageClass": "shared" }),
    ))));
    assert_eq!(
        names(&result),
        ["demo-scratch", "demo-worker-0", "demo-worker-1"]
    );
    let claim = manifest(&result, "demo-scratch");
    assert_eq!(claim["kind"], "PersistentVolumeClaim");
    assert_eq!(
        claim["spec"],
        json!({ "accessModes": ["ReadWriteMany"],
                "resources": { "requests": { "storage": "10Gi" } },
                "storageClassName": "shared" })
    );
    for name in ["demo-worker-0", "demo-worker-1"] {
        let pod = manifest(&result, name);
        assert_eq!(
            pod["spec"]["volumes"],
            json!([{ "name": "scratch", "persistentVolumeClaim": { "claimName": "demo-scratch" } }])
        );
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"],
            json!([{ "name": "scratch", "mountPath": "/scratch" }])
        );
    }
}

#[test]
fn the_scratch_claim_outlives_a_failed_job_with_its_finished_workers() {
    let call = Call::new(job(with_scratch(json!({ "size": "1Gi" }))))
        .child(pod("demo-worker-0", ChildPhase::Failed))
        .child(pod("demo-worker-1", ChildPhase::Failed));
    let result = reconcile(&call);
    assert_eq!(result.status.phase, "Failed");
    assert_eq!(
        names(&result),
        ["demo-scratch", "demo-worker-0", "demo-worker-1"]
    );
    assert!(
        manifest(&result, "demo-scratch")["spec"]
            .get("storageClassName")
            .is_none()
    );
}

/// Pods' specs are immutable: a DataJob without `scratch` must keep the
/// workers it had before the param existed, to the byte.
#[test]
fn without_scratch_a_worker_is_byte_for_byte_what_it_was() {
    let result = reconcile(&Call::new(job(params(1, 1))));
    assert_eq!(
        result.children[0].manifest,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"demo-worker-0","labels":{"app.kubernetes.io/name":"fanout-worker","fanout.policyhost.dev/job":"demo","fanout.policyhost.dev/index":"0","fanout.policyhost.dev/retry":"0"}},"spec":{"restartPolicy":"Never","containers":[{"name":"worker","image":"busybox:1.36","command":["true"],"env":[{"name":"FANOUT_INDEX","value":"0"}]}]}}"#
    );
}

#[test]
fn malformed_scratch_params_name_the_field() {
    let cases = [
        (
            json!({ "size": "lots" }),
            "params.scratch: resource quantity \"lots\" is invalid: must be a number with an optional unit such as m, Mi or Gi",
        ),
        (
            json!({ "size": "1Gi", "storageClass": "Fast_SSD" }),
            "params.scratch: storage class name \"Fast_SSD\" is invalid: must consist of lower-case letters, digits, '-' and '.'",
        ),
        (
            json!({ "size": "1Gi", "class": "x" }),
            "params.scratch.class: unknown field `class`, expected `size` or `storageClass`",
        ),
        (json!({}), "params.scratch: missing field `size`"),
    ];
    for (scratch, message) in cases {
        let outcome = Call::new(job(with_scratch(scratch))).reconcile::<Fanout>();
        assert_eq!(
            outcome.result,
            Err(PolicyError::InvalidParams(message.to_owned()))
        );
    }
}
