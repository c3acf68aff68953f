//! The `policyhost` binary's operator commands: `run` against a cluster
//! (probes, metrics, graceful stop), `dev` on the embedded devcluster, `crd`.

use std::io::Read as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::cluster::{Env, PATIENCE, eventually, phase};
use crate::common::process::{free_port, http_get};
use crate::common::{guest, policyhost_bin, workspace};

/// Waits for a child process to exit, killing it after `PATIENCE`.
fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the process") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory with just the fanout component.
fn fanout_dir() -> std::path::PathBuf {
    let dir = crate::common::scratch().join(format!("policyhost-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("policy dir");
    std::fs::copy(guest("fanout"), dir.join("fanout.wasm")).expect("copy fanout");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_probes_and_metrics_reconciles_and_stops_on_sigterm() {
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut operator = Command::new(policyhost_bin())
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--namespace", &env.namespace, "--listen", &addr.to_string()])
        .arg("--policy-dir")
        .arg(fanout_dir())
        .env("POLICYHOST_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start policyhost run");

    eventually("/readyz to answer 200", || async {
        http_get(addr, "/readyz").filter(|(code, _)| *code == 200)
    })
    .await;
    assert_eq!(http_get(addr, "/healthz").map(|(code, _)| code), Some(200));

    env.create_job(
        "bin",
        "fanout",
        json!({"replicas": 2, "image": "busybox:1.36", "backoffLimit": 1}),
    )
    .await;
    env.wait_job("bin", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    let (_, metrics) = http_get(addr, "/metrics").expect("/metrics answers");
    assert!(
        metrics.contains(r#"policyhost_reconcile_total{policy="fanout",result="success"}"#),
        "{metrics}"
    );
    assert!(metrics.contains("policyhost_queue_depth"));

    let pid = operator.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("send SIGTERM");
    assert!(sent.success());
    let status = wait_exit(&mut operator);
    let mut logs = String::new();
    if let Some(mut stderr) = operator.stderr.take() {
        let _ = stderr.read_to_string(&mut logs);
    }
    assert!(
        status.success(),
        "exit {status} after SIGTERM; logs:\n{logs}"
    );
    assert!(
        logs.lines()
            .filter(|l| !l.trim().is_empty())
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "POLICYHOST_LOG_FORMAT=json logs JSON lines:\n{logs}"
    );
    assert!(logs.contains("shutdown requested"));
}

/// `policyhost dev` running the sample DataJob with `fanout`, its
/// kubeconfig written to `kubeconfig`.
fn dev_running_the_sample(kubeconfig: &std::path::Path) -> Command {
    let mut command = Command::new(policyhost_bin());
    command
        .arg("dev")
        .arg("--policy-dir")
        .arg(fanout_dir())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--apply")
        .arg(workspace().join("docs/examples/dev.yaml"));
    command
}

/// [`dev_running_the_sample`] until the DataJob settles.
fn dev_sample(kubeconfig: &std::path::Path) -> Command {
    let mut command = dev_running_the_sample(kubeconfig);
    command.args(["--until-settled", "--settle-timeout", "60s"]);
    command
}

#[test]
fn dev_with_a_registry_ships_the_policy_as_an_artifact_the_operator_pulls() {
    let scratch = crate::common::scratch().join(format!("dev-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let output = dev_sample(&scratch.join("kubeconfig"))
        .arg("--registry")
        .arg(crate::common::registry::binary())
        .arg("--registry-dir")
        .arg(scratch.join("registry"))
        .output()
        .expect("run policyhost dev");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "policyhost dev --registry failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("registry serving on https://127.0.0.1:"),
        "{stdout}"
    );
    let pushed = stdout
        .lines()
        .find(|l| l.starts_with("policy fanout: pushed 127.0.0.1:"))
        .unwrap_or_else(|| panic!("the push of fanout:\n{stdout}"));
    assert!(pushed.contains("/policies/fanout@sha256:"), "{pushed}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("data-team/etl-nightly"))
        .unwrap_or_else(|| panic!("a summary line for the DataJob:\n{stdout}"));
    assert!(summary.contains("Succeeded"), "{summary}");
    // The operator pulled it into its artifact cache.
    let cached = std::fs::read_dir(scratch.join("registry/artifacts/sha256"))
        .map(Iterator::count)
        .unwrap_or(0);
    assert_eq!(cached, 2, "the manifest and the component");
    let _ = std::fs::remove_dir_all(&scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_with_jaeger_runs_it_says_where_and_sends_it_every_pass() {
    let scratch = crate::common::scratch().join(format!("dev-jaeger-{}", std::process::id()));
    let binary = crate::common::target_dir().join("jaeger/bin/jaeger");
    let mut command = dev_running_the_sample(&scratch.join("kubeconfig"));
    command
        .arg("--jaeger")
        .arg(&binary)
        .arg("--jaeger-dir")
        .arg(scratch.join("jaeger"))
        .stderr(Stdio::null());
    let (dev, said) = crate::common::dev::serving_saying(&mut command);
    let line = said
        .iter()
        .find_map(|line| line.strip_prefix("jaeger: traces on http://"))
        .unwrap_or_else(|| panic!("where Jaeger runs: {said:?}"));
    let query: SocketAddr = line
        .split_whitespace()
        .next()
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("an address: {line}"));
    let tags = "%7B%22job%22%3A%22data-team%2Fetl-nightly%22%7D";
    let path = format!("/api/traces?service=policyhost&tags={tags}");
    eventually("the sample DataJob's Pods created in a traced pass", || {
        let traced = http_get(query, &path).is_some_and(|(code, body)| {
            code == 200 && body.contains("\"guest reconcile\"") && body.contains("\"create pods\"")
        });
        async move { traced.then_some(()) }
    })
    .await;
    // Stopped as a developer stops it, it stops its Jaeger too.
    assert!(dev.stop(Duration::from_secs(30)), "dev stops on SIGTERM");
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn dev_runs_the_sample_datajob_to_success_on_the_embedded_cluster() {
    let kubeconfig = crate::common::scratch().join("dev-test.kubeconfig");
    let output = dev_sample(&kubeconfig)
        .output()
        .expect("run policyhost dev");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "policyhost dev failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("data-team/etl-nightly"))
        .unwrap_or_else(|| panic!("a summary line for the DataJob:\n{stdout}"));
    assert!(summary.contains("Succeeded"), "{summary}");
    assert!(summary.contains("5 total, 5 succeeded"), "{summary}");
    assert!(kubeconfig.is_file(), "the kubeconfig was written");
    let _ = std::fs::remove_file(&kubeconfig);
}

#[test]
fn the_crd_in_deploy_is_the_one_the_binary_prints() {
    let output = Command::new(policyhost_bin())
        .arg("crd")
        .output()
        .expect("run policyhost crd");
    assert!(output.status.success());
    let committed =
        std::fs::read_to_string(workspace().join("deploy/crd.yaml")).expect("deploy/crd.yaml");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        committed,
        "deploy/crd.yaml is stale: regenerate it with `policyhost crd > deploy/crd.yaml`"
    );
}

#[test]
fn dev_rolls_the_next_version_out_step_by_step_and_promotes_it() {
    let kubeconfig = crate::common::scratch().join("dev-rollout.kubeconfig");
    let next = crate::common::guest("fanout-next");
    let output = dev_sample(&kubeconfig)
        .arg("--apply")
        .arg(workspace().join("docs/examples/rollout.yaml"))
        .arg("--rollout")
        .arg(format!("fanout={}", next.display()))
        .output()
        .expect("run policyhost dev --rollout");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "policyhost dev --rollout failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let digest =
        policyhost::runtime::Digest::of(&crate::common::guest_bytes("fanout-next")).to_hex();
    for step in [
        "rollout: StepStarted: step 1 of 2: the candidate serves 50% of DataJobs",
        "rollout: StepStarted: step 2 of 2: the candidate serves 100% of DataJobs (step 1 held every gate",
        "rollout: Complete: complete: the candidate serves 100% of DataJobs",
        &format!("policyhost policy promote fanout: sha256:{digest} serves every DataJob"),
    ] {
        assert!(stdout.contains(step), "{step}:\n{stdout}");
    }
    // The summary after the promote: all nine DataJobs by the next version.
    let after = &stdout[stdout.find("policyhost policy promote").expect("promoted")..];
    let by_next = after
        .lines()
        .filter(|line| line.starts_with("data-team/") && line.contains(&digest[..12]))
        .count();
    assert_eq!(by_next, 9, "{after}");
}
