//! The operator guide, followed to the letter: every command of every `sh`
//! block of `docs/operator.md` runs, in order, with `bash` against a fresh,
//! empty devcluster, from a directory laid out as a checkout after `cargo
//! xtask guests`. devcluster has no Deployment controller and no kubelet, so
//! the test plays them for `deploy/`'s Deployment (starting its replicas as
//! `policyhost` processes with its arguments, environment and
//! ServiceAccount, and reporting the rollout once their readiness probes
//! pass), and it sets up the situation the "stuck Terminating" section
//! starts from. Only the commands in [`NOT_RUN`] are left out, each for a
//! stated reason; a new command in the guide runs unless it is listed there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use devcluster::DevCluster;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use policyhost::crd::DataJob;
use serde_json::json;

use crate::common::cluster::{eventually_within, fast_pods};
use crate::common::deployment::{self, NAMESPACE};
use crate::common::{guest, guest_bytes, policyhost_bin, workspace};

/// Commands of the guide this test does not run, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "docker build",
        "no container engine here: the Dockerfile's build stage runs `cargo xtask static`, \
         whose binary tests/all/image.rs starts",
    ),
    ("docker push", "no container engine or registry here"),
    (
        "cargo xtask guests",
        "`cargo xtask test` runs it before the tests; its output is copied into the checkout",
    ),
];

/// One command of the guide, under its section heading.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Command {
    heading: String,
    text: String,
}

/// The commands of the `sh` blocks of a Markdown text: comments and blank
/// lines dropped, lines ending in `\` joined with the next.
fn commands(markdown: &str) -> Vec<Command> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut in_sh = false;
    let mut in_other = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        let trimmed = line.trim();
        if in_sh || in_other {
            if trimmed == "```" {
                in_sh = false;
                in_other = false;
                continue;
            }
            if !in_sh {
                continue;
            }
            if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
                continue;
            }
            if let Some(head) = trimmed.strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            pending.push_str(trimmed);
            out.push(Command {
                heading: heading.clone(),
                text: std::mem::take(&mut pending),
            });
        } else if let Some(info) = trimmed.strip_prefix("```") {
            in_sh = info == "sh";
            in_other = !in_sh;
        } else if trimmed.starts_with('#') {
            heading = trimmed.trim_start_matches('#').trim().to_owned();
        }
    }
    out
}

#[test]
fn guide_commands_are_the_lines_of_sh_blocks_with_continuations_joined() {
    let text = "# A\n\n```sh\n# a comment\nkubectl apply -k deploy/\n\nfoo --a \\\n  --b\n```\n\
                ## B\n```yaml\nkind: X\n```\n```sh\nbar\n```\n";
    assert_eq!(
        commands(text),
        vec![
            Command {
                heading: "A".into(),
                text: "kubectl apply -k deploy/".into()
            },
            Command {
                heading: "A".into(),
                text: "foo --a  --b".into()
            },
            Command {
                heading: "B".into(),
                text: "bar".into()
            },
        ]
    );
}

/// Copies the files under `from` to `to`, leaving out built components.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for entry in std::fs::read_dir(from).expect("read a directory") {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else if path.extension().is_none_or(|e| e != "wasm") {
            std::fs::copy(&path, &target).expect("copy a file");
        }
    }
}

/// A directory laid out as a checkout after `cargo xtask guests`: the
/// manifests and examples of the workspace and the built `fanout`.
fn checkout(tag: &str) -> PathBuf {
    let root =
        crate::common::scratch().join(format!("policyhost-guide-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    copy_tree(&workspace().join("deploy"), &root.join("deploy"));
    copy_tree(&workspace().join("docs"), &root.join("docs"));
    let guests = root.join("target/wasm32-wasip2/guest");
    std::fs::create_dir_all(&guests).expect("create target/");
    std::fs::copy(guest("fanout"), guests.join("fanout.wasm")).expect("copy fanout");
    root
}

/// Runs one command of the guide with `bash` in `dir`; its output.
async fn run(command: &str, dir: &Path, kubeconfig: &Path) -> String {
    let bin_dir = policyhost_bin()
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let child = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", command])
        .current_dir(dir)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run bash");
    let pid = child.id();
    let waited = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(output) = waited else {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
        panic!("`{command}` did not finish within 180 s");
    };
    let output = output.expect("bash").expect("bash's output");
    let text = crate::common::process::text(&output);
    assert!(
        output.status.success(),
        "the guide's `{command}` failed ({}):\n{text}",
        output.status
    );
    text
}

/// The situation "A DataJob is stuck Terminating" starts from: `etl-stuck`
/// in `data-team`, deleted while its worker never finishes, so fanout's
/// cleanup keeps asking to retry.
async fn make_stuck(client: &Client) {
    let jobs: Api<DataJob> = Api::namespaced(client.clone(), "data-team");
    let job: DataJob = serde_json::from_value(json!({
        "apiVersion": "policyhost.dev/v1alpha1",
        "kind": "DataJob",
        "metadata": {"name": "etl-stuck", "namespace": "data-team"},
        "spec": {"policy": "fanout", "params": {
            "replicas": 1,
            "image": "busybox:1.36",
            "podAnnotations": {"devcluster.policyhost.dev/run-seconds": "-1"},
        }},
    }))
    .expect("a DataJob");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create etl-stuck");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "data-team");
    eventually_within(
        "etl-stuck's worker to run",
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().labels("policyhost.dev/datajob=etl-stuck"))
                .await
                .ok()?;
            list.items
                .iter()
                .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .then_some(())
        },
    )
    .await;
    jobs.delete("etl-stuck", &DeleteParams::default())
        .await
        .expect("delete etl-stuck");
    eventually_within(
        "etl-stuck to be Terminating",
        Duration::from_secs(60),
        || async {
            let job = jobs.get("etl-stuck").await.ok()?;
            (job.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating"))
                .then_some(())
        },
    )
    .await;
}

/// Where the install led, checked before the guide removes it all: the
/// example DataJob reconciled by the `fanout` the example ConfigMap carries,
/// with its five workers, and the Lease held by one of the Deployment's
/// replicas.
async fn where_the_guide_led(
    client: &Client,
    controller: &mut tokio::task::JoinHandle<deployment::Running>,
) -> deployment::Running {
    let jobs: Api<DataJob> = Api::namespaced(client.clone(), "data-team");
    let job = jobs.get("etl-nightly").await.expect("etl-nightly");
    let policy = job
        .status
        .and_then(|s| s.policy)
        .expect("the acting policy in the status");
    assert_eq!(policy.name, "fanout");
    assert_eq!(
        policy.digest,
        policyhost::runtime::Digest::of(&guest_bytes("fanout")).to_hex()
    );
    assert!(
        jobs.get_opt("etl-stuck")
            .await
            .expect("read etl-stuck")
            .is_none(),
        "the force release let etl-stuck go"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "data-team");
    let workers = pods
        .list(&ListParams::default().labels("policyhost.dev/datajob=etl-nightly"))
        .await
        .expect("list the workers");
    assert_eq!(
        workers.items.len(),
        5,
        "{:?}",
        workers
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    );
    let running = controller.await.expect("the Deployment's replicas");
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let holder = leases
        .get("policyhost-leader")
        .await
        .expect("the Lease")
        .spec
        .and_then(|s| s.holder_identity)
        .expect("a holder");
    assert!(
        running.replicas.iter().any(|r| r.name == holder),
        "{holder} is one of the Deployment's replicas"
    );
    running
}

#[test]
fn the_operator_guide_documents_every_flag_of_policyhost_run() {
    let guide = std::fs::read_to_string(workspace().join("docs/operator.md")).expect("the guide");
    let output = std::process::Command::new(policyhost_bin())
        .args(["run", "--help"])
        .output()
        .expect("policyhost run --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '[', '=']).next())
        .filter(|f| *f != "help")
        .collect();
    assert!(flags.len() >= 20, "{flags:?}");
    let missing: Vec<&&str> = flags
        .iter()
        .filter(|f| !guide.contains(&format!("`--{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "flags the guide does not describe: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_guide_takes_an_empty_cluster_to_a_running_datajob() {
    let guide = std::fs::read_to_string(workspace().join("docs/operator.md")).expect("the guide");
    let steps = commands(&guide);
    assert!(steps.len() >= 10, "{steps:#?}");

    let cluster = DevCluster::start(fast_pods()).await.expect("devcluster");
    let dir = checkout(&cluster.addr().port().to_string());
    let kubeconfig = dir.join("admin.kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let client = cluster.client().expect("a client");

    // The Deployment controller and the kubelets, for as long as the test runs.
    let mut controller = {
        let client = client.clone();
        let kubeconfig = kubeconfig.clone();
        tokio::spawn(async move { deployment::roll_out(&client, &kubeconfig, &[]).await })
    };

    let mut skipped = Vec::new();
    let mut stuck = false;
    let mut running = None;
    for step in &steps {
        if let Some((prefix, why)) = NOT_RUN.iter().find(|(p, _)| step.text.starts_with(p)) {
            eprintln!("guide: not run: {} ({why})", step.text);
            skipped.push(*prefix);
            continue;
        }
        if step.heading.contains("stuck Terminating") && !stuck {
            make_stuck(&client).await;
            stuck = true;
        }
        if step.heading.contains("removal") && running.is_none() {
            running = Some(where_the_guide_led(&client, &mut controller).await);
        }
        eprintln!("guide [{}]: {}", step.heading, step.text);
        let output = run(&step.text, &dir, &kubeconfig).await;
        eprintln!("{output}");
    }
    assert!(
        stuck,
        "the guide has a section on stuck Terminating DataJobs"
    );
    assert!(running.is_some(), "the guide ends with the removal");
    let mut expected: Vec<&str> = NOT_RUN.iter().map(|(p, _)| *p).collect();
    expected.sort_unstable();
    skipped.sort_unstable();
    skipped.dedup();
    assert_eq!(skipped, expected, "every exception is still in the guide");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually_within(
        "the removal to delete the operator's namespace",
        Duration::from_secs(60),
        || async {
            namespaces
                .get_opt(NAMESPACE)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}
