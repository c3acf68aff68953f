//! `policyhost policy new`, followed as an app team would: the crate it
//! generates passes its tests, builds its component offline, the component
//! passes the crate's golden cases under the host, and `policy push --wait`
//! puts it in service on `policyhost dev`, where it runs a DataJob.
//!
//! The crate is generated in the scratch directory; its builds share one
//! target directory, `<target>/scaffold`, kept between runs so that only
//! the first builds its dependencies. Those come from cargo's cache
//! (`--offline`): the workspace's build put them there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube::Client;
use kube::api::Api;
use policyhost::crd::DataJob;
use policyhost::runtime::Digest;

use crate::common::cluster::{eventually, phase};
use crate::common::process::text;
use crate::common::{dev, policyhost_bin, target_dir};

/// The policy the test creates: a `-` in it, to check the `.wasm` file's `_`.
const NAME: &str = "hello-scaffold";

/// Where the generated crate's builds go.
fn scaffold_target() -> PathBuf {
    target_dir().join("scaffold")
}

/// Runs `command` in `dir` and asserts that it exits with status 0.
fn succeeds(command: &mut Command, dir: &Path) -> String {
    let output = command
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let text = text(&output);
    assert!(
        output.status.success(),
        "{command:?} in {}: {}\n{text}",
        dir.display(),
        output.status
    );
    text
}

/// `cargo ARGS`, building into [`scaffold_target`].
fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO"));
    command
        .args(args)
        .env("CARGO_TARGET_DIR", scaffold_target());
    command
}

fn policyhost(args: &[&str]) -> Command {
    let mut command = Command::new(policyhost_bin());
    command.args(args).env("POLICYHOST_LOG", "warn");
    command
}

#[tokio::test]
async fn a_new_policy_passes_its_tests_builds_and_serves_as_generated() {
    let dir = crate::common::scratch().join("scaffold");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let created = succeeds(&mut policyhost(&["policy", "new", NAME]), &dir);
    assert!(
        created.contains(
            "policyhost policy test target/wasm32-wasip2/release/hello_scaffold.wasm tests/golden"
        ),
        "{created}"
    );
    let policy = dir.join(NAME);

    let tested = succeeds(&mut cargo(&["test", "--offline"]), &policy);
    assert!(
        tested.contains("every_golden_case_gives_its_expected_result ... ok"),
        "{tested}"
    );
    succeeds(
        &mut cargo(&[
            "build",
            "--offline",
            "--release",
            "--target",
            "wasm32-wasip2",
        ]),
        &policy,
    );
    let wasm = scaffold_target().join("wasm32-wasip2/release/hello_scaffold.wasm");
    let wasm = wasm.to_str().expect("a UTF-8 path");
    let golden = succeeds(
        &mut policyhost(&["policy", "test", wasm, "tests/golden"]),
        &policy,
    );
    assert!(golden.contains("1 passed, 0 failed"), "{golden}");

    // Published to `policyhost dev`, as the crate's README says; the
    // DataJob waits for it from the start.
    let kubeconfig = dir.join("dev.kubeconfig");
    let job = dir.join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: app-team}}\n---\n\
             apiVersion: policyhost.dev/v1alpha1\nkind: DataJob\nmetadata: {{name: hello, namespace: app-team}}\n\
             spec: {{policy: {NAME}, params: {{image: 'busybox:1.36', command: [sh, -c, echo hello]}}}}\n"
        ),
    )
    .expect("write the DataJob");
    let served = dev::serving(
        policyhost(&["dev"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--apply")
            .arg(&job)
            .current_dir(&dir)
            .stderr(Stdio::null()),
    );
    succeeds(
        policyhost(&[
            "policy",
            "push",
            wasm,
            "--name",
            NAME,
            "--allowed-namespaces",
            "app-team",
            "--wait",
        ])
        .env("KUBECONFIG", &kubeconfig),
        &policy,
    );

    let digest = Digest::of(&std::fs::read(wasm).expect("read the component")).to_hex();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("read the kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("a usable kubeconfig");
    let jobs: Api<DataJob> = Api::namespaced(Client::try_from(config).expect("client"), "app-team");
    eventually(
        "the DataJob run to Succeeded by the pushed policy",
        || async {
            let job = jobs.get("hello").await.ok()?;
            let by = job.status.as_ref()?.policy.as_ref()?.digest.clone();
            (phase(&job) == Some("Succeeded") && by == digest).then_some(())
        },
    )
    .await;
    drop(served);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `policy new --lang python|typescript`: the policy passes its tests
/// natively, builds with the language's toolchain (the one `cargo xtask
/// polyglot` installs), and its component passes the same golden case as
/// the Rust template's under the host.
#[test]
fn new_python_and_typescript_policies_pass_their_tests_and_golden_case_as_generated() {
    let dir = crate::common::scratch().join("scaffold-languages");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let python = target_dir().join("polyglot/venv/bin/python");
    let typescript_cli = crate::common::workspace().join("guest-sdk-typescript/dist/src/cli.js");
    assert!(
        python.is_file() && typescript_cli.is_file(),
        "run `cargo xtask polyglot` first"
    );

    let created = succeeds(
        &mut policyhost(&["policy", "new", "hello-py", "--lang", "python"]),
        &dir,
    );
    assert!(created.contains("pytest"), "{created}");
    let policy = dir.join("hello-py");
    let tested = succeeds(
        Command::new(&python).args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]),
        &policy,
    );
    assert!(tested.contains("4 passed"), "{tested}");
    succeeds(
        Command::new(&python).args([
            "-m",
            "policyhost_sdk.componentize",
            "hello_py:HelloPy",
            "-o",
            "hello_py.wasm",
        ]),
        &policy,
    );
    let golden = succeeds(
        &mut policyhost(&["policy", "test", "hello_py.wasm", "tests/golden"]),
        &policy,
    );
    assert!(golden.contains("1 passed, 0 failed"), "{golden}");

    succeeds(
        &mut policyhost(&["policy", "new", "hello-ts", "--lang", "typescript"]),
        &dir,
    );
    let policy = dir.join("hello-ts");
    let tested = succeeds(
        Command::new("node").arg(&typescript_cli).arg("test"),
        &policy,
    );
    assert!(tested.contains("# pass 4"), "{tested}");
    succeeds(
        Command::new("node").arg(&typescript_cli).args([
            "build",
            "hello-ts.ts",
            "-o",
            "hello-ts.wasm",
        ]),
        &policy,
    );
    let golden = succeeds(
        &mut policyhost(&["policy", "test", "hello-ts.wasm", "tests/golden"]),
        &policy,
    );
    assert!(golden.contains("1 passed, 0 failed"), "{golden}");
}
