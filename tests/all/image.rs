//! The container image: the `Dockerfile` builds the static binary with
//! `cargo xtask static`, and that binary (built here without Docker) starts.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use crate::common::cluster::{Env, eventually, phase};
use crate::common::process::{Replica, kustomize, policy_dir};
use crate::common::{guest, target_dir, workspace};

/// Where `cargo xtask static` puts the binary.
fn static_binary() -> PathBuf {
    target_dir().join("x86_64-unknown-linux-musl/release/policyhost")
}

/// The static binary if it was built. Missing, it skips the test, or fails
/// it under `POLICYHOST_TEST_STATIC=1` (`cargo xtask test` builds it first).
fn built_static_binary() -> Option<PathBuf> {
    let bin = static_binary();
    if bin.is_file() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("POLICYHOST_TEST_STATIC").is_none(),
        "POLICYHOST_TEST_STATIC is set but {} is missing: run `cargo xtask static`",
        bin.display()
    );
    eprintln!("skipped: {} not built (cargo xtask static)", bin.display());
    None
}

/// The program headers' types of an ELF64 little-endian executable.
fn program_header_types(elf: &[u8]) -> Vec<u32> {
    assert_eq!(&elf[..4], b"\x7fELF", "an ELF file");
    assert_eq!(elf[4], 2, "64-bit");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]);
    let offset = u64::from_le_bytes(elf[0x20..0x28].try_into().expect("8 bytes"));
    let offset = usize::try_from(offset).expect("an offset");
    let size = usize::from(u16_at(0x36));
    (0..usize::from(u16_at(0x38)))
        .map(|i| {
            let at = offset + i * size;
            u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes"))
        })
        .collect()
}

/// `PT_INTERP`: the program asks for a dynamic loader.
const PT_INTERP: u32 = 3;

#[test]
fn the_dockerfile_builds_with_xtask_static_and_runs_as_the_deployments_user() {
    let dockerfile = std::fs::read_to_string(workspace().join("Dockerfile")).expect("Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let stages: Vec<&&str> = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    assert!(stages[0].ends_with(" AS build"), "{}", stages[0]);
    assert!(
        stages[1].contains("distroless/static") && stages[1].ends_with(":nonroot"),
        "a minimal base without libc or shell: {}",
        stages[1]
    );
    assert!(
        instructions.contains(&"RUN cargo xtask static"),
        "the image builds what `cargo xtask static` builds"
    );
    assert!(
        instructions.contains(
            &"COPY --from=build /src/target/x86_64-unknown-linux-musl/release/policyhost /policyhost"
        ),
        "the binary from xtask's output path"
    );
    assert!(instructions.contains(&r#"ENTRYPOINT ["/policyhost"]"#));

    // The toolchain is the workspace's.
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let rust_version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"');
    assert!(
        instructions.contains(&format!("ARG RUST_VERSION={rust_version}").as_str()),
        "ARG RUST_VERSION={rust_version}"
    );

    // The image's user is the one deploy/ runs it as.
    let user = instructions
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    let objects = kustomize(&workspace().join("deploy"));
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    let security = &deployment["spec"]["template"]["spec"]["securityContext"];
    assert_eq!(
        user,
        format!("{}:{}", security["runAsUser"], security["runAsGroup"]),
        "USER in the Dockerfile = runAsUser:runAsGroup in deploy/"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["args"][0], "run",
        "the Deployment runs `policyhost run`"
    );

    let ignored = std::fs::read_to_string(workspace().join(".dockerignore")).expect("ignore");
    assert!(
        ignored.lines().any(|l| l.trim() == "target/"),
        "the build context leaves target/ out"
    );
}

/// Needs the static binary: `cargo xtask test` (CI) builds it and sets
/// `POLICYHOST_TEST_STATIC=1`, which makes a missing binary a failure. A
/// plain `cargo test` without `cargo xtask static` first says so and passes.
#[test]
fn the_static_binary_needs_no_loader_and_starts_prints_the_crd_and_checks_a_policy() {
    let Some(bin) = built_static_binary() else {
        return;
    };
    let elf = std::fs::read(&bin).expect("read the binary");
    assert!(
        !program_header_types(&elf).contains(&PT_INTERP),
        "{} asks for a dynamic loader: not static",
        bin.display()
    );

    let run = |args: &[&str]| {
        let output = Command::new(&bin).args(args).output().expect("run it");
        assert!(
            output.status.success(),
            "policyhost {args:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert_eq!(
        run(&["--version"]).trim(),
        format!("policyhost {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        run(&["crd"]),
        std::fs::read_to_string(workspace().join("deploy/crd.yaml")).expect("crd.yaml")
    );
    let fanout = guest("fanout");
    let checked = run(&["policy", "check", &fanout.to_string_lossy()]);
    assert!(checked.contains("ok: loadable"), "{checked}");
    assert!(checked.contains("digest:   sha256:"), "{checked}");
}

/// What ships is what runs: the image's binary is built without the
/// developer's `policyhost dev`, and so without devcluster's code. (The
/// benchmarks' cache baseline is a crate of its own the product never
/// depends on.)
#[test]
fn the_static_binary_carries_no_dev_server() {
    let Some(bin) = built_static_binary() else {
        return;
    };
    let dev = Command::new(&bin)
        .args(["dev", "--help"])
        .output()
        .expect("run it");
    assert!(!dev.status.success(), "the image's binary has `dev`");
    let refused = String::from_utf8_lossy(&dev.stderr);
    assert!(
        refused.contains("unrecognized subcommand 'dev'"),
        "{refused}"
    );
    // devcluster's panic locations name its sources: linked in, its code
    // would bring them.
    let elf = std::fs::read(&bin).expect("read the binary");
    assert!(
        !elf.windows(b"devcluster/src/".len())
            .any(|w| w == b"devcluster/src/"),
        "{} holds devcluster's code",
        bin.display()
    );
}

/// The static binary runs the operator: against devcluster it becomes
/// ready, leads, reconciles a DataJob, and stops cleanly on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_binary_runs_the_operator_until_sigterm() {
    let Some(bin) = built_static_binary() else {
        return;
    };
    let env = Env::cluster_only().await;
    let kubeconfig = env.kubeconfig_file();
    let policies = policy_dir(&["fanout"], &format!("static-{}", env.namespace));
    let mut replica = Replica::start_program(
        &bin,
        "static",
        &kubeconfig,
        &[
            "--namespace",
            &env.namespace,
            "--policy-dir",
            &policies.to_string_lossy(),
            "--policy-namespace",
            &env.policy_namespace,
            "--lease-namespace",
            &env.namespace,
        ],
        &[("POD_NAME".into(), "static".into())],
    );
    eventually("the static binary to lead", || async {
        replica
            .get("/leaderz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    env.create_job(
        "static",
        "fanout",
        json!({"replicas": 2, "image": "busybox:1.36"}),
    )
    .await;
    env.wait_job("static", "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await;
    replica.signal("TERM");
    let status = replica.wait();
    assert!(status.success(), "{status}: {}", replica.logs());
}
