//! Build orchestration for policyhost: `cargo xtask <command>`.
//!
//! - `guests`: builds every policy under `policies/` to a `wasm32-wasip2`
//!   component in `<target>/wasm32-wasip2/guest/`.
//! - `test`: installs what is missing, builds the guests, the binaries, the
//!   static binary, the real control plane, the peers and the reference of
//!   the standard metrics, then runs the whole test suite on devcluster (the
//!   static binary too) and the end-to-end tests again on the real control
//!   plane. `.ci/run` runs exactly this.
//! - `demo`: installs what is missing, builds the guests and runs the main job:
//!   the operator on an embedded devcluster (or, with `--real`, the real
//!   control plane) reconciling a sample DataJob.
//! - `bench scale`: builds the guests and the release binaries, then runs the
//!   operator-at-scale benchmark (devcluster, or with `--servers
//!   devcluster,real` the real control plane too, and `policyhost run` as
//!   processes, both cache modes) and the children-lookup benchmark;
//!   `bench finalizer [--real]`: the finalizer benchmark on devcluster, then
//!   on the real control plane; `bench peers`: policyhost beside the
//!   controller-runtime peers (`bench/peers/`) on the real control plane,
//!   each on a copy of one loaded state; see `docs/BENCHMARKS.md`.
//! - `cluster up|stop|down|env`: the real Kubernetes control plane on
//!   loopback, built from the Go modules in `tools/kube/` (see `cluster.rs`).
//! - `peers`: checks (gofmt, go vet) and builds the peers of the benchmarks,
//!   `bench/peers/`, into `<target>/kube/peers/peers` (see `peers.rs`).
//! - `standard-metrics`: checks (gofmt, go vet) and builds the reference of
//!   controller-runtime's standard metrics, `tools/standard-metrics/`
//!   (`families` and `dashboards`), and copies kubebuilder's Grafana
//!   dashboard templates beside them (see
//!   `standard_metrics.rs`); `test` builds it too.
//! - `polyglot`: installs the Python and TypeScript SDKs' toolchains, runs
//!   their native tests and builds the policies written with them (see
//!   `polyglot.rs`); `test` runs it too.
//! - `sdk-packages`: builds the Rust, Python and TypeScript SDKs as the
//!   packages their ecosystems install (a `.crate`, a wheel and an sdist,
//!   an npm tarball) into `<target>/sdk-packages/` (see
//!   `sdk_packages.rs`); `test` builds them too, for the tests that install
//!   them.
//! - `static`: installs what is missing (the musl target, Debian's
//!   `musl-tools`) and builds the static `policyhost` binary the container
//!   image ships (the `Dockerfile` runs exactly this).
//!
//! It has no dependencies beyond `std`, so it builds in seconds on a fresh machine.

mod certs;
mod cluster;
mod go_program;
mod hygiene;
mod kube;
mod layers;
mod peers;
mod polyglot;
mod sdk_packages;
mod standard_metrics;
mod tools;

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The Rust target policies are compiled for.
const GUEST_TARGET: &str = "wasm32-wasip2";
/// The cargo profile policies are compiled with (see the workspace `Cargo.toml`).
const GUEST_PROFILE: &str = "guest";
/// The target of the static binary: musl's libc is linked in.
const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => ("help", &[][..]),
    };
    let outcome = match command {
        "guests" => prepare_guests(),
        "test" => run_tests(rest),
        "demo" => run_demo(rest),
        "bench" => run_bench(rest),
        "cluster" => cluster::command(rest),
        "layers" => check_layers(),
        "static" => build_static().map(|bin| println!("xtask: static binary {}", bin.display())),
        "peers" => peers::build().map(|bin| println!("xtask: peers {}", bin.display())),
        "standard-metrics" => standard_metrics::build().map(|dir| {
            println!(
                "xtask: standard-metrics families and dashboards in {}, kubebuilder {} dashboards in {}",
                dir.display(),
                standard_metrics::KUBEBUILDER,
                standard_metrics::templates_dir().display()
            )
        }),
        "polyglot" => polyglot::build().map(|_| ()),
        "sdk-packages" => sdk_packages::build().map(|_| ()),
        "registry" => tools::REGISTRY
            .build()
            .map(|bin| println!("xtask: registry {}", bin.display())),
        "cosign" => tools::COSIGN
            .build()
            .map(|bin| println!("xtask: cosign {}", bin.display())),
        "jaeger" => tools::JAEGER
            .build()
            .map(|bin| println!("xtask: jaeger {}", bin.display())),
        "help" | "-h" | "--help" => {
            print_help();
            Ok(())
        }
        other => Err(format!("unknown command `{other}`; see `cargo xtask help`")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn print_help() {
    println!(
        "cargo xtask <command>\n\n\
         guests        build every policy under policies/ to {GUEST_TARGET}\n\
         test [ARGS]   install prerequisites, build guests, binaries and the static binary,\n\
         \x20             run all tests\n\
         \x20             (ARGS are passed to `cargo test`)\n\
         demo [ARGS]   install prerequisites, build guests, run the operator on an\n\
         \x20             embedded devcluster until the sample DataJob finishes;\n\
         \x20             --keep-running keeps it serving; --real runs it on the real control\n\
         \x20             plane instead; --registry ships the policy through a local OCI\n\
         \x20             registry; --lang python|typescript runs the fanout written in that\n\
         \x20             language, through the registry; --rollout then rolls fanout's next\n\
         \x20             version out to half of nine DataJobs, then all, and promotes it;\n\
         \x20             --jaeger sends a trace of every pass to a Jaeger on loopback\n\
         \x20             (ARGS go to `policyhost dev`)\n\
         bench scale [ARGS]\n\
         \x20             build guests and release binaries, run the operator at scale\n\
         \x20             in both cache modes (ARGS go to tests/benches/scale.rs;\n\
         \x20             --servers devcluster,real adds the real control plane), then\n\
         \x20             the children-lookup benchmark\n\
         bench finalizer [--real]\n\
         \x20             build guests, run the finalizer benchmark on devcluster and,\n\
         \x20             with --real, again on the real control plane\n\
         bench peers [ARGS]\n\
         \x20             build guests, release binaries, the control plane and the peers, then\n\
         \x20             run policyhost and the controller-runtime peers in turn on the real\n\
         \x20             control plane (ARGS go to tests/benches/peers.rs)\n\
         layers        check every import of host/src and devcluster/src against the floors\n\
         \x20             docs/architecture.md states (upward imports, cycles between folders)\n\
         cluster up|stop|down|env [--dir DIR]\n\
         \x20             build the real control plane from tools/kube/ if needed and start it\n\
         \x20             on loopback (the last line of `up` is KUBECONFIG=<file>; on the state\n\
         \x20             `stop` kept, it resumes), stop it keeping its state, stop it and\n\
         \x20             remove its state, or print its KUBECONFIG line; DIR holds its state\n\
         \x20             (default target/kube/cluster), one per control plane\n\
         polyglot      install the Python and TypeScript SDKs' toolchains, run their native\n\
         \x20             tests and build every Python and TypeScript policy into\n\
         \x20             <target>/polyglot/<language>/<name>.wasm\n\
         sdk-packages  build the SDKs as packages: the crates (cargo publish --dry-run), the\n\
         \x20             Python wheel and sdist, the npm tarball, into <target>/sdk-packages/\n\
         peers         check (gofmt -l, go vet) and build the peers of the benchmarks,\n\
         \x20             bench/peers/, into <target>/kube/peers/peers\n\
         standard-metrics\n\
         \x20             check (gofmt -l, go vet) and build the reference of controller-runtime's\n\
         \x20             standard metrics, tools/standard-metrics/{{families,dashboards}}/, into\n\
         \x20             <target>/standard-metrics/{{families,dashboards}}/, and copy kubebuilder\n\
         \x20             {KUBEBUILDER}'s Grafana dashboard templates into\n\
         \x20             <target>/standard-metrics/kubebuilder/\n\
         registry      build the OCI registry of the tests (distribution {REGISTRY}) from\n\
         \x20             tools/registry/ into <target>/registry/bin/registry\n\
         cosign        build cosign {COSIGN} from tools/cosign/ into <target>/cosign/bin/cosign\n\
         jaeger        build Jaeger {JAEGER} (the trace collector of the tests and of\n\
         \x20             `policyhost dev --jaeger`) from tools/jaeger/ into <target>/jaeger/bin/jaeger\n\
         static        install the musl target and musl-tools if missing, build the static\n\
         \x20             policyhost binary (what the Dockerfile ships) into\n\
         \x20             <target>/{STATIC_TARGET}/release/policyhost",
        KUBEBUILDER = standard_metrics::KUBEBUILDER,
        REGISTRY = tools::REGISTRY.version,
        COSIGN = tools::COSIGN.version,
        JAEGER = tools::JAEGER.version
    );
}

/// `layers`: the crates' imports against the floors docs/architecture.md
/// states ([`layers`]).
fn check_layers() -> Result<(), String> {
    let findings = layers::check_workspace(&workspace_root())?;
    if findings.is_empty() {
        println!(
            "xtask: every import keeps the floors of {}",
            layers::DOCUMENT
        );
        return Ok(());
    }
    for finding in &findings {
        eprintln!("xtask: {finding}");
    }
    Err(format!(
        "{} imports or cycles depart from the floors of {}",
        findings.len(),
        layers::DOCUMENT
    ))
}

/// `bench scale`: the operator-at-scale benchmark, then the lookup benchmark;
/// `bench finalizer [--real]`: the finalizer benchmark on each server;
/// `bench peers`: policyhost and the peers on the real control plane.
fn run_bench(args: &[String]) -> Result<(), String> {
    const USAGE: &str = "usage: cargo xtask bench scale [ARGS] | finalizer [--real] | peers [ARGS]";
    let (which, extra) = args
        .split_first()
        .map(|(first, rest)| (first.as_str(), rest))
        .ok_or(USAGE)?;
    match (which, extra) {
        ("scale", _) => {}
        ("peers", _) => return bench_peers(extra),
        ("finalizer", []) => return bench_finalizer(false),
        ("finalizer", [real]) if real == "--real" => return bench_finalizer(true),
        _ => return Err(USAGE.to_owned()),
    }
    prepare_guests()?;
    build_release_binaries()?;
    let mut scale = vec![
        "bench",
        "--package",
        "policyhost-tests",
        "--bench",
        "scale",
        "--",
    ];
    scale.extend(extra.iter().map(String::as_str));
    // On the real control plane the benchmark applies deploy/ and issues
    // the operator's token with kubectl: the pinned one if the machine's is
    // too old.
    let real = extra
        .windows(2)
        .any(|pair| pair[0] == "--servers" && pair[1].split(',').any(|s| s == "real"));
    if real {
        let path = path_with_kubectl(&kube::build()?);
        cargo_with_env(&scale, &[("PATH", &path)])?;
    } else {
        cargo(&scale)?;
    }
    cargo(&[
        "bench",
        "--package",
        "policyhost-tests",
        "--bench",
        "lookup",
    ])
}

/// The release binaries the benchmarks run as processes: `policyhost`,
/// `devcluster`, and `naive-operator`, the scale benchmark's baseline. The
/// peers benchmark runs the same `policyhost`, so that the two share one
/// build.
fn build_release_binaries() -> Result<(), String> {
    cargo(&[
        "build",
        "--release",
        "--package",
        "policyhost",
        "--package",
        "devcluster",
        "--package",
        "policyhost-naive-cache",
        "--bins",
    ])
}

/// The peers benchmark: the guests, the release binaries, the control plane
/// and the peers built, then `tests/benches/peers.rs` with `extra`, which
/// starts its control planes with this xtask (`cluster up|stop|down --dir`).
fn bench_peers(extra: &[String]) -> Result<(), String> {
    prepare_guests()?;
    build_release_binaries()?;
    let kube_bin = kube::build()?;
    peers::build()?;
    let mut bench = vec![
        "bench",
        "--package",
        "policyhost-tests",
        "--bench",
        "peers",
        "--",
    ];
    bench.extend(extra.iter().map(String::as_str));
    // It starts its control planes with this xtask's binary
    // (`<target>/debug/xtask`), applies deploy/ and issues the operators'
    // tokens with kubectl.
    let path = path_with_kubectl(&kube_bin);
    cargo_with_env(&bench, &[("PATH", &path)])
}

/// The finalizer benchmark on devcluster and, when `real`, again on a real
/// control plane of its own, stopped when it ends.
fn bench_finalizer(real: bool) -> Result<(), String> {
    prepare_guests()?;
    let bench = [
        "bench",
        "--package",
        "policyhost-tests",
        "--bench",
        "finalizer",
    ];
    cargo(&bench)?;
    if !real {
        return Ok(());
    }
    let cluster = cluster::Running::start(target_dir().join("kube").join("bench-cluster"))?;
    println!("xtask: the finalizer benchmark again, on the real control plane");
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let audit_log = cluster.audit_log.display().to_string();
    cargo_with_env(
        &bench,
        &[
            ("POLICYHOST_TEST_KUBECONFIG", kubeconfig.as_str()),
            ("POLICYHOST_TEST_AUDIT_LOG", audit_log.as_str()),
        ],
    )
}

/// The end-to-end modules of `tests/all` that run a second time against the
/// real control plane: every one whose subject is the operator on a cluster.
/// The peers' tests run first, alone, on the fresh cluster: the peers act on
/// the `fanout` DataJobs of every namespace they watch, and `naive` watches
/// them all, so no other test's DataJobs may exist meanwhile (the peers'
/// tests take turns among themselves). The RBAC tests run next, alone and
/// one at a time: the proof's operator is the one `deploy/` installs, which
/// watches every namespace and would reconcile the other tests' DataJobs,
/// and both tests publish policies in `deploy/`'s namespace. Last,
/// devcluster's differential tests (ignored without a real server), which
/// print how many answers they compared and how many differ.
const REAL_SERVER_TESTS: &[&[&str]] = &[
    &["peers::"],
    &["rbac::", "--test-threads=1"],
    &[
        "asks::",
        "binary::",
        "delivery::",
        "explain::",
        "deploy::",
        "fairness::",
        "finalizer::",
        "leader::",
        "loading::",
        "monitoring::",
        "operator::",
        "ownership::",
        "rollback::",
        "rollout::",
        "shadow::",
        "shards::",
        "standard_metrics::",
        "traces::",
        "update_strategy::",
    ],
    &["differential::", "--include-ignored", "--nocapture"],
];

/// Builds the guests, the binaries and the real control plane, runs the
/// whole test suite on devcluster, then the end-to-end tests again on the
/// real control plane. With ARGS, both runs take them instead.
fn run_tests(extra: &[String]) -> Result<(), String> {
    check_layers()?;
    prepare_guests()?;
    polyglot::build()?;
    sdk_packages::build()?;
    // The binaries the tests start, built with the tests: one feature
    // resolution (dev-dependencies included), so `cargo test` below builds
    // nothing again.
    cargo(&["build", "--workspace", "--bins", "--tests"])?;
    // The container's static binary, so that tests/all/image.rs starts it,
    // beside the Go builds (the control plane, then the peers, which reuse
    // its k8s.io packages, then the standard metrics' references, one of
    // which reuses them too): the static binary's whole-program LTO runs on one
    // core for minutes, and Go takes the other.
    let control_plane = std::thread::spawn(|| {
        let bin = kube::build()?;
        peers::build()?;
        standard_metrics::build()?;
        tools::REGISTRY.build()?;
        tools::COSIGN.build()?;
        tools::JAEGER.build()?;
        Ok::<_, String>(bin)
    });
    let built = build_static();
    let kube_bin = control_plane
        .join()
        .map_err(|_| "the control plane's build panicked".to_owned())??;
    built?;
    let path = path_with_kubectl(&kube_bin);
    // The tests' scratch files (CARGO_TARGET_TMPDIR) of earlier runs.
    let scratch = target_dir().join("tmp");
    if scratch.exists() {
        fs::remove_dir_all(&scratch)
            .map_err(|e| format!("cannot empty {}: {e}", scratch.display()))?;
    }
    // The target directory of the policy crate `tests/all/scaffold.rs`
    // generates: a build cache kept between runs, not a test's leftover.
    let scaffold = target_dir().join("scaffold");
    fs::create_dir_all(&scaffold)
        .map_err(|e| format!("cannot create {}: {e}", scaffold.display()))?;
    let watch = hygiene::Watch::start(&target_dir())?;
    let outcome = test_passes(extra, &path, &watch);
    watch.finish(outcome)
}

/// The passes of [`run_tests`], under `watch`: the first failing pass ends
/// them, and the watch reports what they left behind either way.
fn test_passes(extra: &[String], path: &str, watch: &hygiene::Watch) -> Result<(), String> {
    let [tmpdir, kube_cache] = watch.env();
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    let dev = [
        ("POLICYHOST_TEST_STATIC", "1"),
        ("PATH", path),
        tmpdir,
        kube_cache,
    ];
    cargo_with_env(&args, &dev)?;
    watch.after_pass("the devcluster pass", None);

    let cluster = cluster::Running::start(target_dir().join("kube").join("test-cluster"))?;
    println!("xtask: the end-to-end tests again, on the real control plane");
    let env = RealEnv::of(&cluster);
    let real = env.vars(path, tmpdir, kube_cache);
    if !extra.is_empty() {
        let mut args = vec!["test", "--workspace", "--test", "all"];
        args.extend(extra.iter().map(String::as_str));
        return cargo_with_env(&args, &real);
    }
    for modules in REAL_SERVER_TESTS {
        // `--workspace`, as above: the same feature resolution, so nothing is
        // built again (each filter names modules of one of the two `all`s).
        let mut args = vec!["test", "--workspace", "--test", "all", "--"];
        args.extend_from_slice(modules);
        cargo_with_env(&args, &real)?;
    }
    drop(cluster);
    // The second configuration: a control plane without the shard gate,
    // where the shards fall back to the DataJobs' bucket label.
    let cluster = cluster::Running::start_with(
        target_dir()
            .join("kube")
            .join("test-cluster-without-shard-gate"),
        cluster::Gates {
            sharded_list_and_watch: false,
        },
    )?;
    println!("xtask: the shards again, on a control plane without ShardedListAndWatch");
    let env = RealEnv::of(&cluster);
    cargo_with_env(
        &["test", "--workspace", "--test", "all", "--", "shards::"],
        &env.vars(path, tmpdir, kube_cache),
    )?;
    drop(cluster);
    watch.after_pass("the real control plane pass", Some(&kube::bin_dir()));
    Ok(())
}

/// What the tests need to reach a real control plane.
struct RealEnv {
    kubeconfig: String,
    audit_log: String,
}

impl RealEnv {
    fn of(cluster: &cluster::Running) -> Self {
        Self {
            kubeconfig: cluster.kubeconfig.display().to_string(),
            audit_log: cluster.audit_log.display().to_string(),
        }
    }

    /// The test run's environment: this cluster, and the run's `PATH`
    /// and scratch variables.
    fn vars<'a>(
        &'a self,
        path: &'a str,
        tmpdir: (&'a str, &'a str),
        kube_cache: (&'a str, &'a str),
    ) -> [(&'a str, &'a str); 5] {
        [
            ("POLICYHOST_TEST_KUBECONFIG", self.kubeconfig.as_str()),
            ("POLICYHOST_TEST_AUDIT_LOG", self.audit_log.as_str()),
            ("PATH", path),
            tmpdir,
            kube_cache,
        ]
    }
}

/// The policies the demo publishes: the example's, not the test guests.
const DEMO_POLICIES: &[&str] = &["fanout"];

/// Builds the guests and runs the main job: the operator on the embedded
/// devcluster reconciling the sample DataJob until it finishes.
///
/// stdout shows the steps, the kubectl line and the result; the operator's
/// log goes to a file the demo names (its tail is printed if the demo fails).
fn run_demo(extra: &[String]) -> Result<(), String> {
    prepare_guests()?;
    // `--lang python|typescript`: the demo's fanout in that language, built
    // by `polyglot` and, at 12 to 19 MB, delivered through the registry.
    let lang = option_value(extra, "--lang")?;
    let components = match lang.as_deref() {
        None | Some("rust") => guest_dir(),
        Some(lang @ ("python" | "typescript")) => polyglot::build()?.join(lang),
        Some(other) => {
            return Err(format!(
                "--lang {other}: the demo speaks rust, python or typescript"
            ));
        }
    };
    cargo(&[
        "build",
        "--quiet",
        "--package",
        "policyhost",
        "--bin",
        "policyhost",
    ])?;
    let root = workspace_root();
    let demo = target_dir().join("demo");
    let policies = demo.join("policies");
    publish_only(&policies, &components, DEMO_POLICIES)?;
    let mut args = vec![
        "dev".to_owned(),
        "--policy-dir".to_owned(),
        policies.display().to_string(),
        "--kubeconfig".to_owned(),
        target_dir()
            .join("devcluster.kubeconfig")
            .display()
            .to_string(),
        "--apply".to_owned(),
        root.join("docs/examples/dev.yaml").display().to_string(),
    ];
    let keep_running = extra.iter().any(|arg| arg == "--keep-running");
    if !keep_running {
        args.push("--until-settled".to_owned());
    }
    // The real control plane instead of the embedded devcluster; it stops
    // when the demo does.
    let real = extra.iter().any(|arg| arg == "--real");
    let cluster = if real {
        let cluster = cluster::Running::start(target_dir().join("kube").join("demo-cluster"))?;
        args.push("--cluster".to_owned());
        args.push(cluster.kubeconfig.display().to_string());
        Some(cluster)
    } else {
        None
    };
    // The policies through a local OCI registry, as artifacts.
    if lang.as_deref().is_some_and(|lang| lang != "rust")
        || extra.iter().any(|arg| arg == "--registry")
    {
        args.push("--registry".to_owned());
        args.push(tools::REGISTRY.build()?.display().to_string());
        args.push("--registry-dir".to_owned());
        args.push(demo.join("registry").display().to_string());
    }
    // Every pass a trace, in a Jaeger on loopback.
    if extra.iter().any(|arg| arg == "--jaeger") {
        args.push("--jaeger".to_owned());
        args.push(tools::JAEGER.build()?.display().to_string());
    }
    // A second step: the policy's next version rolled out to half of the
    // DataJobs, then all, and promoted.
    if extra.iter().any(|arg| arg == "--rollout") {
        args.push("--apply".to_owned());
        args.push(
            root.join("docs/examples/rollout.yaml")
                .display()
                .to_string(),
        );
        args.push("--rollout".to_owned());
        args.push(format!(
            "fanout={}",
            guest_dir().join("fanout_next.wasm").display()
        ));
    }
    let mut rest = extra.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--keep-running" | "--real" | "--registry" | "--rollout" | "--jaeger" => {}
            "--lang" => {
                rest.next();
            }
            _ => args.push(arg.clone()),
        }
    }
    let log_path = demo.join("operator.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    println!("xtask: the operator's log goes to {}", log_path.display());
    let outcome = run(Command::new(target_dir().join("debug").join("policyhost"))
        .args(&args)
        .stderr(log)
        .current_dir(&root));
    drop(cluster);
    if outcome.is_err() {
        print_tail(&log_path, 30);
    }
    outcome
}

/// The value after `name` in `args`, if `name` is there.
fn option_value(args: &[String], name: &str) -> Result<Option<String>, String> {
    match args.iter().position(|arg| arg == name) {
        None => Ok(None),
        Some(at) => args
            .get(at + 1)
            .cloned()
            .map(Some)
            .ok_or_else(|| format!("{name} needs a value")),
    }
}

/// `dir` holding exactly the components of `names` from `components` (the
/// guest build, or a language's), as links: a rebuild in another terminal
/// still hot-swaps them.
fn publish_only(dir: &Path, components: &Path, names: &[&str]) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for name in names {
        let file = format!("{name}.wasm");
        let from = components.join(&file);
        if !from.is_file() {
            return Err(format!("{} is missing after the build", from.display()));
        }
        std::os::unix::fs::symlink(&from, dir.join(&file))
            .map_err(|e| format!("cannot link {}: {e}", from.display()))?;
    }
    Ok(())
}

/// The last `lines` lines of a log, after a failure.
fn print_tail(path: &Path, lines: usize) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let all: Vec<&str> = text.lines().collect();
    eprintln!("xtask: the last lines of {}:", path.display());
    for line in &all[all.len().saturating_sub(lines)..] {
        eprintln!("  {line}");
    }
}

/// Installs the guest target if needed and builds every policy crate.
///
/// Each policy is built with `cargo rustc --crate-type cdylib`: a policy
/// crate is also an `rlib` (its native tests and the host's benchmark link
/// it), and cargo applies the profile's LTO only to a target whose every
/// crate type can take it, so `cargo build` would link the component without
/// LTO (8 % slower calls for `fanout`; docs/BENCHMARKS.md).
fn prepare_guests() -> Result<(), String> {
    ensure_guest_target()?;
    let packages = policy_packages()?;
    for package in &packages {
        cargo(&[
            "rustc",
            "--quiet",
            "--target",
            GUEST_TARGET,
            "--profile",
            GUEST_PROFILE,
            "--package",
            package,
            "--crate-type",
            "cdylib",
        ])?;
    }
    println!(
        "xtask: built {} guest policies into {}",
        packages.len(),
        guest_dir().display()
    );
    Ok(())
}

/// The package names of every crate under `policies/`, sorted, those
/// another policy depends on last: a policy built as a dependency is built
/// as its `cdylib` too, with the dependent's features, into the same
/// `<name>.wasm`; its own build, fresh or not, puts its component back.
fn policy_packages() -> Result<Vec<String>, String> {
    let dir = workspace_root().join("policies");
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    let mut manifests = String::new();
    for entry in entries {
        let manifest = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path()
            .join("Cargo.toml");
        if manifest.is_file() {
            names.push(package_name(&manifest)?);
            manifests.push_str(&fs::read_to_string(&manifest).unwrap_or_default());
        }
    }
    names.sort();
    names.sort_by_key(|name| manifests.contains(&format!("path = \"../{name}\"")));
    Ok(names)
}

/// Reads `name = "..."` from a manifest's `[package]` table.
fn package_name(manifest: &Path) -> Result<String, String> {
    let text = fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name") {
            let value = value.trim_start().trim_start_matches('=').trim();
            return Ok(value.trim_matches('"').to_owned());
        }
    }
    Err(format!("{} has no [package] name", manifest.display()))
}

/// `rustup target add wasm32-wasip2` unless the target is already installed.
fn ensure_guest_target() -> Result<(), String> {
    ensure_rust_target(GUEST_TARGET)
}

/// `rustup target add <target>` unless it is already installed.
fn ensure_rust_target(target: &str) -> Result<(), String> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| format!("cannot run rustup: {e}"))?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|line| line.trim() == target)
    {
        return Ok(());
    }
    run(Command::new("rustup").args(["target", "add", target]))
}

/// Builds the static binary (musl, release) and returns its path.
fn build_static() -> Result<PathBuf, String> {
    ensure_rust_target(STATIC_TARGET)?;
    // ring and mimalloc have C parts: the cc crate compiles them with musl-gcc.
    if Command::new("musl-gcc").arg("--version").output().is_err() {
        println!("xtask: musl-gcc not found, installing Debian's musl-tools");
        apt_install("musl-tools")?;
    }
    // The production binary: no `policyhost dev` (and so no devcluster),
    // no benchmark baseline.
    cargo(&[
        "build",
        "--release",
        "--target",
        STATIC_TARGET,
        "--package",
        "policyhost",
        "--bin",
        "policyhost",
        "--no-default-features",
    ])?;
    Ok(static_binary())
}

/// Where `cargo xtask static` puts the binary.
fn static_binary() -> PathBuf {
    target_dir()
        .join(STATIC_TARGET)
        .join("release")
        .join("policyhost")
}

/// The `PATH` the tests run with: the machine's own unless its kubectl is
/// missing or older than the pinned release's minor - 1 (kubectl's skew
/// policy), in which case the kubectl built from that release comes first.
fn path_with_kubectl(kube_bin: &Path) -> String {
    let path = env::var("PATH").unwrap_or_default();
    let pinned = minor(kube::KUBERNETES_VERSION);
    let machine = Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| client_minor(&String::from_utf8_lossy(&out.stdout)));
    if machine.is_some_and(|found| found + 1 >= pinned) {
        return path;
    }
    println!(
        "xtask: the machine's kubectl is {}; the tests use kubectl {} from {}",
        machine.map_or("missing".to_owned(), |m| format!("1.{m}")),
        kube::KUBERNETES_VERSION,
        kube_bin.display()
    );
    format!("{}:{path}", kube_bin.display())
}

/// The minor of a `vMAJOR.MINOR.PATCH` version.
fn minor(version: &str) -> u32 {
    version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_default()
}

/// `clientVersion.minor` of `kubectl version --client -o json` (digits only:
/// some builds say `"32+"`).
fn client_minor(json: &str) -> Option<u32> {
    let after = json.split("\"minor\"").nth(1)?;
    let value = after.split('"').nth(1)?;
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `apt-get install` of a Debian package (through sudo unless root).
fn apt_install(package: &str) -> Result<(), String> {
    let sudo: &[&str] = if is_root() { &[] } else { &["sudo"] };
    let apt = |args: &[&str]| {
        let mut all = sudo.to_vec();
        all.push("apt-get");
        all.extend_from_slice(args);
        run(Command::new(all[0])
            .args(&all[1..])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    apt(&["update", "-q"])?;
    apt(&["install", "-y", "-q", package])
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Where `cargo xtask guests` puts the components.
fn guest_dir() -> PathBuf {
    target_dir().join(GUEST_TARGET).join(GUEST_PROFILE)
}

fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs the cargo that runs us, from the workspace root.
fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_with_env(args, &[])
}

fn cargo_with_env(args: &[&str], vars: &[(&str, &str)]) -> Result<(), String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    run(Command::new(cargo)
        .args(args)
        .envs(vars.iter().copied())
        .current_dir(workspace_root()))
}

fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed with {status}"))
    }
}
