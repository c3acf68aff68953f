//! Helpers shared by the end-to-end tests: where the built guests and
//! binaries are, a runtime with test limits, inputs for `fanout`.

#![allow(dead_code)]

pub mod bench;
pub mod chaos;
pub mod cloud;
pub mod cluster;
pub mod control_plane;
pub mod deployment;
pub mod dev;
pub mod faults;
pub mod foreign;
pub mod history;
pub mod hostile_registry;
pub mod https;
pub mod jaeger;
pub mod load;
pub mod logs;
pub mod peers;
pub mod plot;
pub mod process;
pub mod publishing;
pub mod rbac;
pub mod registry;
pub mod replicas;
pub mod requests;
pub mod sampler;
pub mod scrape;
pub mod tls;
pub mod variants;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use policyhost::runtime::{
    Context, DataJob, Input, Policy, PolicyLimits, PolicySpec, Runtime, RuntimeConfig,
};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// This test process's scratch directory, under cargo's temporary directory
/// for tests (`<target>/tmp`), never the system's: kubeconfigs, policy
/// directories and process logs of a run stay with the build and go with
/// it (`cargo xtask test` empties it first).
pub fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// The compile cache the tests' operators share (compiled components by
/// digest), beside the scratch directories: the devcluster and the real
/// control plane runs of `cargo xtask test` compile each guest once, and the
/// next run starts empty.
pub fn compile_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("policyhost-test-cache")
}

/// The cargo target directory: `$CARGO_TARGET_DIR` or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                workspace().join(dir)
            }
        })
        .unwrap_or_else(|| workspace().join("target"))
}

/// The built component of the policy crate `name` (e.g. `infinite-loop`).
///
/// # Panics
///
/// When it has not been built, with the command that builds it.
pub fn guest(name: &str) -> PathBuf {
    let file = format!("{}.wasm", name.replace('-', "_"));
    let path = target_dir().join("wasm32-wasip2/guest").join(file);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask guests` first",
        path.display()
    );
    path
}

/// The built component of the `language` (`python`, `typescript`) version
/// of policy `name`, from `policies/<name>/<language>/`.
///
/// # Panics
///
/// When it has not been built, with the command that builds it.
pub fn polyglot(language: &str, name: &str) -> PathBuf {
    let path = target_dir()
        .join("polyglot")
        .join(language)
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask polyglot` first",
        path.display()
    );
    path
}

/// Appends `n` as unsigned LEB128, the WebAssembly binary format's integer
/// encoding (section and name lengths).
pub fn leb128(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The bytes of [`guest`].
pub fn guest_bytes(name: &str) -> Vec<u8> {
    std::fs::read(guest(name)).expect("read the guest component")
}

/// The settings of a policy ConfigMap whose policy every namespace's
/// DataJobs may use (`allowedNamespaces: "*"`): a strict host, the default,
/// requires a ConfigMap to say whose DataJobs may use it.
pub fn for_every_namespace() -> policyhost::policies::configmap::Settings {
    policyhost::policies::configmap::Settings {
        namespaces: Some(policyhost::policies::access::Access::Everyone),
        ..Default::default()
    }
}

/// The `policyhost` binary next to this test binary (same profile).
///
/// # Panics
///
/// When it has not been built.
pub fn policyhost_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("policyhost");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p policyhost` (or `cargo xtask test`)",
        bin.display()
    );
    bin
}

/// A runtime for tests: two call threads, default maxima.
pub fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        threads: 2,
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

/// Loads guest `name` with `limits`.
pub fn load(runtime: &Runtime, name: &str, limits: PolicyLimits) -> Arc<Policy> {
    runtime
        .load(PolicySpec::new(name).limits(limits), &guest_bytes(name))
        .unwrap_or_else(|e| panic!("load {name}: {e}"))
}

/// A DataJob record with `params`.
pub fn job(name: &str, namespace: &str, params: serde_json::Value) -> DataJob {
    DataJob {
        name: name.into(),
        namespace: namespace.into(),
        uid: format!("uid-{name}"),
        generation: 1,
        labels: vec![],
        annotations: vec![],
        params: params.to_string(),
        status: None,
        deletion_unix_ms: None,
    }
}

/// A call context at a fixed time.
pub fn context() -> Context {
    Context {
        now_unix_ms: 1_700_000_000_000,
        attempt: 1,
        policy_digest: String::new(),
    }
}

/// Input with no children.
pub fn input(job: DataJob) -> Input {
    Input {
        job,
        children: vec![],
        ctx: context(),
    }
}

/// The package names of every crate under `policies/`.
pub fn policy_crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(workspace().join("policies"))
        .expect("policies/")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
