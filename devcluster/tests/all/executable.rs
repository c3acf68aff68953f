//! The `devcluster` binary: the API server on its own, as developers and
//! the benchmarks start it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Kubectl;

/// How long the binary may take to serve, and to stop.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_binary_serves_a_cluster_kubectl_can_use_and_stops_on_ctrl_c() {
    let kubeconfig = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "devcluster-binary-{}.kubeconfig",
        std::process::id()
    ));
    let mut server = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--port", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start devcluster");
    let deadline = Instant::now() + PATIENCE;
    while !kubeconfig.is_file() {
        assert!(Instant::now() < deadline, "devcluster wrote no kubeconfig");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kubectl = Kubectl::with_kubeconfig(&kubeconfig, "binary-served");
    let namespaces = loop {
        let (ok, text) = kubectl.run(&["get", "namespaces", "-o", "name"]).await;
        if ok {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl never reached the cluster: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(namespaces.contains("namespace/default"), "{namespaces}");

    let sent = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status()
        .expect("send SIGINT");
    assert!(sent.success());
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = server.try_wait().expect("wait for devcluster") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "devcluster did not stop on SIGINT"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "stops cleanly on Ctrl-C: {status}");
    std::fs::remove_file(&kubeconfig).expect("the kubeconfig it wrote");
}
