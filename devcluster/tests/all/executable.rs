//! The `devcluster` binary: the API server on its own, as developers and
//! the benchmarks start it.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::common::{Kubectl, eventually_within};

/// How long the binary may take to serve, and to stop.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_binary_serves_a_cluster_kubectl_can_use_and_stops_on_ctrl_c() {
    let kubeconfig = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "devcluster-binary-{}.kubeconfig",
        std::process::id()
    ));
    let server = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--port", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start devcluster");
    eventually_within("devcluster writes its kubeconfig", PATIENCE, || async {
        kubeconfig.is_file()
    })
    .await;
    let kubectl = Kubectl::with_kubeconfig(&kubeconfig, "binary-served");
    eventually_within("kubectl lists the default namespace", PATIENCE, || async {
        let (ok, text) = kubectl.run(&["get", "namespaces", "-o", "name"]).await;
        ok && text.contains("namespace/default")
    })
    .await;

    let sent = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status()
        .expect("send SIGINT");
    assert!(sent.success());
    let server = Mutex::new(server);
    eventually_within("devcluster stops on SIGINT", PATIENCE, || async {
        let status = server
            .lock()
            .unwrap()
            .try_wait()
            .expect("wait for devcluster");
        if let Some(status) = status {
            assert!(status.success(), "stops cleanly on Ctrl-C: {status}");
        }
        status.is_some()
    })
    .await;
    std::fs::remove_file(&kubeconfig).expect("the kubeconfig it wrote");
}
