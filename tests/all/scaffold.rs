//! `policyhost policy new`, followed as an app team would: the policy it
//! generates depends on the SDK by version, installs it from its package
//! (built by `cargo xtask sdk-packages`, as a registry would serve it),
//! passes its tests, builds its component, the component passes the
//! policy's golden cases under the host, and `policy push --wait` puts it
//! in service on `policyhost dev`, where it runs a DataJob.
//!
//! The crate is generated in the scratch directory; its builds share one
//! target directory, `<target>/scaffold`, kept between runs so that only
//! the first builds its dependencies. Those come from cargo's cache
//! (`--offline`): the workspace's build put them there; the SDK's crates
//! come from their packages, by a `[patch]` of crates.io (they are not
//! published there).

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

/// The SDKs' version: the workspace's, which `policy new` writes.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where `cargo xtask sdk-packages` put the SDKs' packages.
fn packages(language: &str) -> PathBuf {
    let dir = target_dir().join("sdk-packages").join(language);
    assert!(dir.is_dir(), "run `cargo xtask sdk-packages` first");
    dir
}

/// The one file of `dir` whose name ends with `suffix`.
fn package_file(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the packages' directory")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one *{suffix} in {}: {found:?}",
        dir.display()
    );
    found.into_iter().next().expect("one")
}

/// `cargo ARGS` offline, building into [`scaffold_target`], with the SDK's
/// crates taken from their packages.
fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO"));
    command
        .args(args)
        .arg("--offline")
        .env("CARGO_TARGET_DIR", scaffold_target());
    let rust = packages("rust");
    for name in ["policyhost-sdk", "policyhost-names"] {
        let unpacked = rust.join(format!("{name}-{SDK_VERSION}"));
        assert!(
            unpacked.join("Cargo.toml").is_file(),
            "{}",
            unpacked.display()
        );
        command.arg("--config").arg(format!(
            "patch.crates-io.{name}.path={:?}",
            unpacked.to_str().expect("a UTF-8 path")
        ));
    }
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
    let manifest = std::fs::read_to_string(policy.join("Cargo.toml")).expect("Cargo.toml");
    assert!(
        manifest.contains(&format!("\npolicyhost-sdk = \"{SDK_VERSION}\"\n")),
        "the SDK by version: {manifest}"
    );

    let tested = succeeds(&mut cargo(&["test"]), &policy);
    assert!(
        tested.contains("every_golden_case_gives_its_expected_result ... ok"),
        "{tested}"
    );
    succeeds(
        &mut cargo(&["build", "--release", "--target", "wasm32-wasip2"]),
        &policy,
    );
    let wasm = scaffold_target().join("wasm32-wasip2/release/hello_scaffold.wasm");
    let wasm = wasm.to_str().expect("a UTF-8 path");
    let golden = succeeds(
        &mut policyhost(&["policy", "test", wasm, "tests/golden"]),
        &policy,
    );
    assert!(golden.contains("1 passed, 0 failed"), "{golden}");
    let checked = succeeds(&mut policyhost(&["policy", "check", wasm]), &policy);
    assert!(
        checked.contains(&format!("rust SDK {SDK_VERSION}")),
        "{checked}"
    );

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

/// `policy new --lang python|typescript`: the policy names the SDK's
/// package by version; installed from the built package into a directory
/// of its own (pip from the wheel into a new virtualenv, npm from the
/// tarball into the policy's `node_modules`), it passes its tests natively,
/// builds, and its component passes the same golden case as the Rust
/// template's under the host.
#[test]
fn new_python_and_typescript_policies_install_the_sdk_package_pass_their_tests_and_golden_case() {
    let dir = crate::common::scratch().join("scaffold-languages");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");

    let created = succeeds(
        &mut policyhost(&["policy", "new", "hello-py", "--lang", "python"]),
        &dir,
    );
    assert!(
        created.contains("pip install -r requirements.txt"),
        "{created}"
    );
    let policy = dir.join("hello-py");
    let requirements =
        std::fs::read_to_string(policy.join("requirements.txt")).expect("requirements.txt");
    assert!(
        requirements
            .lines()
            .any(|line| line == format!("policyhost-sdk[build,test]=={SDK_VERSION}")),
        "{requirements}"
    );
    let wheel = package_file(&packages("python"), "-py3-none-any.whl");
    let venv = policy.join(".venv");
    succeeds(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        &policy,
    );
    let python = venv.join("bin/python");
    let pip = |args: &[&str]| {
        let mut command = Command::new(&python);
        command
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(args);
        command
    };
    let wheel = format!("{}[build,test]", wheel.to_str().expect("a UTF-8 path"));
    succeeds(&mut pip(&[&wheel]), &policy);
    // What the README says next: the wheel satisfies the requirement.
    succeeds(&mut pip(&["-r", "requirements.txt"]), &policy);
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
    let checked = succeeds(
        &mut policyhost(&["policy", "check", "hello_py.wasm"]),
        &policy,
    );
    assert!(
        checked.contains(&format!("python SDK {SDK_VERSION}")),
        "{checked}"
    );

    let created = succeeds(
        &mut policyhost(&["policy", "new", "hello-ts", "--lang", "typescript"]),
        &dir,
    );
    assert!(created.contains("npm install"), "{created}");
    let policy = dir.join("hello-ts");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(policy.join("package.json")).expect("package.json"),
    )
    .expect("JSON");
    assert_eq!(manifest["devDependencies"]["@policyhost/sdk"], SDK_VERSION);
    let tarball = package_file(&packages("typescript"), ".tgz");
    let npm = |args: &[&str]| {
        let mut command = Command::new("npm");
        command.args(args);
        command
    };
    succeeds(
        npm(&[
            "install",
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .arg(&tarball),
        &policy,
    );
    let tested = succeeds(&mut npm(&["test"]), &policy);
    assert!(tested.contains("# pass 4"), "{tested}");
    succeeds(&mut npm(&["run", "build"]), &policy);
    let golden = succeeds(
        &mut policyhost(&["policy", "test", "hello-ts.wasm", "tests/golden"]),
        &policy,
    );
    assert!(golden.contains("1 passed, 0 failed"), "{golden}");
    let checked = succeeds(
        &mut policyhost(&["policy", "check", "hello-ts.wasm"]),
        &policy,
    );
    assert!(
        checked.contains(&format!("typescript SDK {SDK_VERSION}")),
        "{checked}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
