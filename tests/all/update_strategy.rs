//! Child update strategies end to end, on both servers, with the change a
//! Pod cannot take in place: `fanout-next` renames a worker's container
//! (`worker` → `main`) for a DataJob labelled so. `OnDelete` keeps every
//! existing Pod as it is (no dry run refused, so `promote` goes through)
//! while new DataJobs get the new name; `Recreate` replaces a running Pod
//! and keeps a finished one, the record of its run; `RecreateAlways`
//! replaces a finished one too.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use policyhost::crd::{DataJob, DataJobSpec};
use policyhost::metrics::PolicyResult;
use policyhost::vocabulary::UPDATE_STRATEGY_ANNOTATION;
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, condition, eventually, phase};
use crate::common::for_every_namespace;
use crate::common::guest_bytes;
use crate::common::process::text;
use crate::common::publishing::{dry_runs, policy_command, push, push_candidate};

/// The label `fanout-next` renames the workers' container for.
const RENAME_LABEL: &str = "policyhost.dev/test-rename";
/// devcluster's and kwok's: how long a Pod runs (negative: until deleted).
const RUN_SECONDS: &str = "devcluster.policyhost.dev/run-seconds";

/// A fanout DataJob of one worker declaring `strategy`, labelled for the
/// rename; its Pod runs to its end unless `running`.
async fn create(env: &Env, name: &str, strategy: &str, running: bool) {
    let mut annotations = json!({ UPDATE_STRATEGY_ANNOTATION: strategy });
    if running {
        annotations[RUN_SECONDS] = json!("-1");
    }
    let params = json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"],
        "podAnnotations": annotations});
    // Labelled from its creation: its first pass already renames.
    let mut job = DataJob::new(
        name,
        DataJobSpec {
            policy: "fanout".into(),
            params: params.as_object().cloned().unwrap_or_default(),
            ..DataJobSpec::default()
        },
    );
    job.metadata.labels = Some([(RENAME_LABEL.to_owned(), "yes".to_owned())].into());
    env.jobs()
        .create(&kube::api::PostParams::default(), &job)
        .await
        .expect("create the DataJob");
}

/// The worker Pod of DataJob `job` once `done` holds for it.
async fn worker_when(env: &Env, job: &str, what: &str, done: impl Fn(&Pod) -> bool) -> Pod {
    let pods = env.pods();
    let name = format!("{job}-worker-0");
    eventually(&format!("{name}: {what}"), || {
        let (pods, name, done) = (pods.clone(), name.clone(), &done);
        async move { pods.get_opt(&name).await.ok()?.filter(|pod| done(pod)) }
    })
    .await
}

/// The names of a Pod's containers.
fn containers(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .map(|spec| spec.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

fn pod_phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Publishes `fanout-next` as the candidate, has it shadow each of
/// `jobs` (whose Pods exist: its dry runs are updates), and promotes it
/// with no `--force`: none of these strategies leaves a refusal.
async fn promote_the_rename(env: &Env, jobs: &[&str]) -> String {
    let candidate = push_candidate(
        env,
        "fanout",
        &guest_bytes("fanout-next"),
        &for_every_namespace(),
    )
    .await
    .loaded_digest
    .expect("the candidate loads");
    let calls = |result: &str| {
        env.operator()
            .metrics
            .shadow_calls_total
            .get_or_create(&PolicyResult {
                policy: "fanout".into(),
                result: result.into(),
            })
            .get()
    };
    // One DataJob at a time, poked again when its shadow call was skipped
    // (no call thread to spare on a loaded machine) until one differs.
    for job in jobs {
        for poke in 1..=10 {
            let (differed, skipped) = (calls("differs"), calls("skipped"));
            let annotation = json!({"metadata": {"annotations": {"test.policyhost.dev/poke": poke.to_string()}}});
            env.jobs()
                .patch(job, &PatchParams::default(), &Patch::Merge(annotation))
                .await
                .expect("annotate the DataJob");
            let differs = eventually(&format!("a shadow call for {job}"), || async {
                if calls("differs") > differed {
                    Some(true)
                } else {
                    (calls("skipped") > skipped).then_some(false)
                }
            })
            .await;
            if differs {
                break;
            }
            assert!(poke < 10, "ten shadow calls for {job} skipped in a row");
        }
    }
    assert_eq!(
        dry_runs(env, "fanout", "refused"),
        0,
        "a child kept or recreated is never refused"
    );
    let promoted = policy_command(env, &["promote", "fanout"]);
    assert!(promoted.status.success(), "{}", text(&promoted));
    candidate
}

/// The DataJob `name` once the version `digest` answered for it and its
/// `Ready` condition says `says`.
async fn answered_by(env: &Env, name: &str, digest: &str, says: &str) {
    env.wait_job(name, &format!("answered by {digest}: {says}"), |job| {
        let by = job.status.as_ref().and_then(|s| s.policy.as_ref());
        by.is_some_and(|p| p.digest == digest)
            && condition(job, "Ready")
                .is_some_and(|c| c.status == "True" && c.message.contains(says))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_delete_keeps_finished_pods_as_they_ran_and_new_datajobs_get_the_new_form() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    push(&env, "fanout", &guest_bytes("fanout")).await;
    create(&env, "kept", "OnDelete", false).await;
    env.wait_job("kept", "Succeeded", |job| phase(job) == Some("Succeeded"))
        .await;
    let before = worker_when(&env, "kept", "finished", |pod| {
        pod_phase(pod) == Some("Succeeded")
    })
    .await;
    assert_eq!(containers(&before), ["worker"]);

    let candidate = promote_the_rename(&env, &["kept"]).await;
    answered_by(&env, "kept", &candidate, "1 kept in their earlier form").await;
    let after = env
        .pods()
        .get("kept-worker-0")
        .await
        .expect("the finished Pod");
    assert_eq!(after.uid(), before.uid(), "the same Pod");
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "not written"
    );
    assert_eq!(containers(&after), ["worker"], "its record as it ran");

    create(&env, "fresh", "OnDelete", false).await;
    let fresh = worker_when(&env, "fresh", "created", |_| true).await;
    assert_eq!(containers(&fresh), ["main"], "a new DataJob, the new form");

    // Once someone deletes the kept Pod, the next one has the new form.
    env.pods()
        .delete("kept-worker-0", &kube::api::DeleteParams::default())
        .await
        .expect("delete the kept Pod");
    worker_when(&env, "kept", "created again with the new name", |pod| {
        pod.uid() != before.uid() && containers(pod) == ["main"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_replaces_a_running_pod_keeps_a_finished_one_and_recreate_always_replaces_both() {
    let env = Env::start_with(OperatorSetup::configmaps()).await;
    push(&env, "fanout", &guest_bytes("fanout")).await;
    create(&env, "running", "Recreate", true).await;
    create(&env, "finished", "Recreate", false).await;
    create(&env, "always", "RecreateAlways", false).await;
    let running = worker_when(&env, "running", "running", |pod| {
        pod_phase(pod) == Some("Running")
    })
    .await;
    let finished = worker_when(&env, "finished", "finished", |pod| {
        pod_phase(pod) == Some("Succeeded")
    })
    .await;
    let always = worker_when(&env, "always", "finished", |pod| {
        pod_phase(pod) == Some("Succeeded")
    })
    .await;

    let candidate = promote_the_rename(&env, &["running", "finished", "always"]).await;
    for (job, before) in [("running", &running), ("always", &always)] {
        let after = worker_when(&env, job, "created anew with the new name", |pod| {
            pod.uid() != before.uid() && containers(pod) == ["main"]
        })
        .await;
        assert!(after.uid().is_some(), "{job}: a new Pod");
    }
    answered_by(&env, "finished", &candidate, "1 kept in their earlier form").await;
    let kept = env
        .pods()
        .get("finished-worker-0")
        .await
        .expect("the finished Pod");
    assert_eq!(
        kept.uid(),
        finished.uid(),
        "a finished Pod is never recreated"
    );
    assert_eq!(containers(&kept), ["worker"]);
    // Recreated, not refused: no DataJob is left with ImmutableChange.
    for job in ["running", "finished", "always"] {
        let job = env.jobs().get(job).await.expect("the DataJob");
        let ready = condition(&job, "Ready").map(|c| c.reason.clone());
        assert_ne!(ready.as_deref(), Some("ImmutableChange"), "{ready:?}");
    }
}
