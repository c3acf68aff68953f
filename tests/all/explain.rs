//! A DataJob's decision record end to end, on both servers: each serving
//! call leaves a decision in `status.decisions` naming the version, the
//! input's and answer's digests and what the host wrote; `policyhost
//! explain` prints them and what changed between them; a decision's input
//! digest finds its recorded call for `policy test --replay --input`.

use kube::api::{Patch, PatchParams};
use policyhost::crd::{DataJob, Decision};
use policyhost::shadow::record;
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, eventually, phase};
use crate::common::guest;
use crate::common::process::{policyhost, text};
use crate::common::publishing::push;

fn decisions(job: &DataJob) -> Vec<Decision> {
    job.status
        .as_ref()
        .map(|s| s.decisions.clone())
        .unwrap_or_default()
}

/// `policyhost explain NS/NAME` with the test's kubeconfig.
fn explain(env: &Env, name: &str) -> String {
    let kubeconfig = env.kubeconfig_file();
    let target = format!("{}/{name}", env.namespace);
    let out = policyhost(&[
        "explain",
        &target,
        "--kubeconfig",
        kubeconfig.to_str().expect("a UTF-8 path"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

/// The operator's reconcile passes of `fanout` so far.
fn reconciled(env: &Env) -> u64 {
    let metrics = env.operator().metrics.render();
    let counted = metrics
        .lines()
        .filter(|l| l.starts_with("policyhost_reconcile_total{policy=\"fanout\""));
    counted
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The `N` of `… over N recorded calls …`.
fn replayed(out: &str) -> usize {
    let (_, after) = out.split_once(" over ").expect("a replay summary");
    let count = after.split_whitespace().next().expect("a count");
    count.parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decision_is_recorded_explained_and_its_input_found_among_the_recorded_calls() {
    let dir = crate::common::scratch().join(format!("decisions-{}", std::process::id()));
    let mut env = Env::cluster_only().await;
    env.start_operator(OperatorSetup {
        record_calls: Some(record::Config {
            dir: dir.clone(),
            per_policy: 100,
        }),
        decision_history: policyhost::controller::decisions::MAX_HISTORY,
        ..OperatorSetup::configmaps()
    })
    .await;
    let digest = push(&env, "fanout", &crate::common::guest_bytes("fanout"))
        .await
        .loaded_digest
        .expect("fanout serves");
    let params = json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]});
    env.create_job("explained", "fanout", params).await;
    env.wait_job("explained", "Succeeded", |job| {
        phase(job) == Some("Succeeded")
    })
    .await;
    // The passes the last Pod changes bring, then nothing more to do.
    env.wait_idle().await;
    let jobs = env.jobs();
    let done = jobs.get("explained").await.expect("the DataJob");
    let record = decisions(&done);
    assert!(record.len() >= 2, "{record:#?}");
    let first = &record[0];
    assert_eq!(first.call, "reconcile");
    assert!(
        first
            .writes
            .contains(&"created Pod explained-worker-0".to_owned()),
        "the first pass creates the worker: {record:#?}"
    );
    for decision in &record {
        assert_eq!(decision.version, format!("sha256:{digest}"), "{decision:?}");
        assert!(
            decision.answer.is_some() && decision.fuel > 0,
            "{decision:?}"
        );
    }
    let newest = record.last().expect("a decision");
    assert!(
        newest.writes.is_empty(),
        "the children settled: {record:#?}"
    );
    assert_ne!(
        first.input, newest.input,
        "the children changed in between: {record:#?}"
    );

    let shown = explain(&env, "explained");
    assert!(
        shown.contains(&format!(
            "{} of {} decisions recorded",
            record.len(),
            record.len()
        )),
        "{shown}"
    );
    assert!(
        shown.contains("   created Pod explained-worker-0\n"),
        "{shown}"
    );
    assert!(
        shown.contains("since #1: input changed (the DataJob or its children)"),
        "{shown}"
    );

    // The newest decision's input is among the recorded calls: the replay
    // finds it (and only calls on that very state) and the serving
    // version answers it as recorded.
    let recorded = dir.join("fanout");
    let replay = |input: Option<&str>| {
        let mut args = vec![
            "policy",
            "test",
            "--replay",
            recorded.to_str().expect("UTF-8"),
        ];
        if let Some(input) = input {
            args.extend(["--input", input]);
        }
        let component = guest("fanout");
        args.push(component.to_str().expect("UTF-8"));
        policyhost(&args)
    };
    let all = replay(None);
    let short = &newest.input[..7 + 12];
    let found = eventually("the newest decision's call to be recorded", || async {
        let out = replay(Some(short));
        out.status.success().then(|| text(&out))
    })
    .await;
    assert!(found.contains(" 0 differ, 0 faults"), "{found}");
    assert!(
        replayed(&found) < replayed(&text(&all)),
        "only the calls on that input: {found}"
    );
    let missing = replay(Some("sha256:000000000000"));
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("has the input sha256:000000000000"),
        "{}",
        text(&missing)
    );

    // Annotations the policy ignores: a pass each. The first answers
    // without the `Succeeded` Event the pass that saw the phase turn sent,
    // a decision of its own; the next answers the same and writes nothing:
    // no decision is added, and the status is not written for it.
    let poke = |n: u32| {
        let (jobs, env) = (jobs.clone(), &env);
        async move {
            let passes = reconciled(env);
            let poke = json!({"metadata": {"annotations": {"example.com/touched": n.to_string()}}});
            jobs.patch("explained", &PatchParams::default(), &Patch::Merge(poke))
                .await
                .expect("annotate the DataJob");
            eventually("a pass over the annotated DataJob", || async {
                (reconciled(env) > passes).then_some(())
            })
            .await;
            env.wait_idle().await;
            jobs.get("explained").await.expect("the DataJob")
        }
    };
    let once = poke(1).await;
    assert_eq!(decisions(&once).len(), record.len() + 1, "{once:#?}");
    let log = env.requests().expect("the request log");
    let mark = log.mark();
    let twice = poke(2).await;
    assert_eq!(
        decisions(&twice),
        decisions(&once),
        "the same decision again"
    );
    let writes = log.operator_since(mark, &env.namespace);
    let status_writes = writes.iter().filter(|r| r.subresource == "status").count();
    assert_eq!(status_writes, 0, "no status write: {writes:?}");

    // A new spec: a new input, a new answer, one more worker created.
    let more = json!({"spec": {"params": {"replicas": 2}}});
    jobs.patch("explained", &PatchParams::default(), &Patch::Merge(more))
        .await
        .expect("patch the DataJob");
    let grown = eventually("a decision creating the second worker", || async {
        let job = jobs.get("explained").await.ok()?;
        let record = decisions(&job);
        let created = record.iter().any(|d| {
            d.writes
                .contains(&"created Pod explained-worker-1".to_owned())
        });
        created.then_some(job)
    })
    .await;
    let record = decisions(&grown);
    let at = record
        .iter()
        .position(|d| {
            d.writes
                .contains(&"created Pod explained-worker-1".to_owned())
        })
        .expect("the decision");
    assert_ne!(record[at].answer, record[at - 1].answer, "{record:#?}");
    let shown = explain(&env, "explained");
    assert!(
        shown.contains(&format!(
            "since #{at}: input changed (the DataJob or its children); answer changed"
        )),
        "{shown}"
    );
}
