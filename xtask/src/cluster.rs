//! `cargo xtask cluster up|down|env`: the real Kubernetes control plane on
//! loopback, built from `tools/kube/` — etcd, kube-apiserver (client
//! certificates, RBAC), kube-controller-manager (garbage collector,
//! namespace, service-account, volume binder and claim protection controllers),
//! kube-scheduler and kwok with one fake Node.
//!
//! Everything lives in one state directory: certificates, etcd's data, each
//! process's log and pid, and the admin kubeconfig. `down` stops exactly the
//! processes whose pids `up` wrote there and removes the directory; `stop`
//! stops them and keeps the state, which a later `up` resumes: the same
//! certificates and etcd's data, every process started again (on new ports,
//! the kubeconfig rewritten). A copy of a stopped state directory resumes as
//! well, as a cluster of its own: the peers benchmark loads one and gives
//! each operator a copy.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::certs::Certificates;
use crate::{kube, run, target_dir, workspace_root};

/// The fake Node kwok keeps Ready; Pods are scheduled onto it.
const NODE_NAME: &str = "kwok-node";
/// How long `up` waits for each component.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long `down` waits for a process to exit after SIGTERM, before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const USAGE: &str =
    "usage: cargo xtask cluster up|stop|down|env [--dir DIR] [--without-shard-gate]";

/// The feature gates a control plane runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gates {
    /// `ShardedListAndWatch` (alpha in 1.37): lists and watches filtered by
    /// a `shardSelector`. On by default; a second configuration without it
    /// proves the operator's label fallback.
    pub sharded_list_and_watch: bool,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            sharded_list_and_watch: true,
        }
    }
}

/// `cluster up|stop|down|env [--dir DIR] [--without-shard-gate]`: DIR
/// (default [`state_dir`]) lets several control planes run side by side.
pub fn command(args: &[String]) -> Result<(), String> {
    let mut dir = state_dir();
    let mut gates = Gates::default();
    let mut rest = args.get(1..).unwrap_or_default().iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            // Absolute: the kubeconfig names the certificates by path.
            "--dir" => {
                let given = rest.next().ok_or_else(|| USAGE.to_owned())?;
                dir = std::path::absolute(given).map_err(|e| format!("{given}: {e}"))?;
            }
            "--without-shard-gate" => gates.sharded_list_and_watch = false,
            _ => return Err(USAGE.to_owned()),
        }
    }
    match args.first().map(String::as_str) {
        Some("up") => {
            let kubeconfig = up(&dir, Detach::Yes, gates)?;
            println!("KUBECONFIG={}", kubeconfig.display());
            Ok(())
        }
        Some("stop") => stop(&dir),
        Some("down") => down(&dir),
        Some("env") => {
            let kubeconfig = kubeconfig_path(&dir);
            if !kubeconfig.is_file() {
                return Err("no cluster is up; run `cargo xtask cluster up`".to_owned());
            }
            println!(
                "POLICYHOST_TEST_AUDIT_LOG={}",
                audit_log_path(&dir).display()
            );
            println!("KUBECONFIG={}", kubeconfig.display());
            Ok(())
        }
        _ => Err(USAGE.to_owned()),
    }
}

/// The state directory of the cluster `cluster up` starts.
pub fn state_dir() -> PathBuf {
    target_dir().join("kube").join("cluster")
}

/// A control plane that `down`s itself when dropped: what `cargo xtask test`
/// runs the suite against, so that no process outlives it, even on failure.
pub struct Running {
    dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// kube-apiserver's audit log: one JSON event per request.
    pub audit_log: PathBuf,
}

impl Running {
    /// Builds the programs if needed and starts a control plane in `dir`,
    /// in this process's group: a Ctrl-C stops it with the xtask.
    pub fn start(dir: PathBuf) -> Result<Self, String> {
        Self::start_with(dir, Gates::default())
    }

    /// [`start`](Self::start) with these feature gates.
    pub fn start_with(dir: PathBuf, gates: Gates) -> Result<Self, String> {
        // A control plane a killed run left behind goes first.
        down(&dir)?;
        let kubeconfig = up(&dir, Detach::No, gates)?;
        let audit_log = audit_log_path(&dir);
        Ok(Self {
            dir,
            kubeconfig,
            audit_log,
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(message) = down(&self.dir) {
            eprintln!("xtask: {message}");
        }
    }
}

fn kubeconfig_path(dir: &Path) -> PathBuf {
    dir.join("admin.kubeconfig")
}

fn audit_log_path(dir: &Path) -> PathBuf {
    dir.join("logs").join("audit.log")
}

/// Whether the components outlive a Ctrl-C of the xtask that started them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Detach {
    /// Their own process group: `cluster up` returns, they keep serving.
    Yes,
    /// The xtask's group: a Ctrl-C reaches them too.
    No,
}

/// Starts every component in `dir` and returns the admin kubeconfig; on
/// failure stops what it started. A state `stop` kept is resumed.
fn up(dir: &Path, detach: Detach, gates: Gates) -> Result<PathBuf, String> {
    if dir.join("pids").is_dir() {
        return Err(format!(
            "a cluster is already up in {}; `cargo xtask cluster down` first",
            dir.display()
        ));
    }
    let resumed = stopped(dir);
    if resumed {
        println!(
            "xtask: resuming the control plane stopped in {}",
            dir.display()
        );
    }
    kube::build()?;
    if Command::new("openssl").arg("version").output().is_err() {
        println!("xtask: openssl not found, installing Debian's openssl");
        crate::apt_install("openssl")?;
    }
    let result = start_components(dir, detach, resumed, gates);
    if result.is_err() {
        // A resumed state stays for another try; a new one goes.
        let _ = if resumed { stop(dir) } else { down(dir) };
    }
    result
}

/// Whether `dir` holds the state of a stopped control plane: etcd's data
/// and the certificates that go with it.
fn stopped(dir: &Path) -> bool {
    dir.join("etcd").join("member").is_dir() && Certificates::existing(&dir.join("pki")).is_some()
}

fn start_components(
    dir: &Path,
    detach: Detach,
    resumed: bool,
    gates: Gates,
) -> Result<PathBuf, String> {
    let spawn = |name: &str, args: &[String]| spawn(dir, name, args, detach);
    for sub in ["pids", "logs", "etcd"] {
        fs::create_dir_all(dir.join(sub))
            .map_err(|e| format!("cannot create {}: {e}", dir.join(sub).display()))?;
    }
    // A resumed cluster keeps its identity: its CA, and the service-account
    // key that signed the tokens its objects may hold.
    let certs = match Certificates::existing(&dir.join("pki")).filter(|_| resumed) {
        Some(certs) => certs,
        None => Certificates::generate(&dir.join("pki"))?,
    };
    let kubeconfig = kubeconfig_path(dir);
    let api_port = free_port()?;
    fs::write(&kubeconfig, admin_kubeconfig(&certs, api_port))
        .map_err(|e| format!("cannot write {}: {e}", kubeconfig.display()))?;

    let etcd_port = free_port()?;
    let peer_port = free_port()?;
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    spawn(
        "etcd",
        &[
            "--name=node0".to_owned(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=node0={peer_url}"),
            "--listen-metrics-urls=".to_owned(),
            // Throwaway data: durability buys nothing and costs every write.
            "--unsafe-no-fsync=true".to_owned(),
            "--log-level=warn".to_owned(),
        ],
    )?;

    let audit_policy = dir.join("audit-policy.yaml");
    fs::write(&audit_policy, AUDIT_POLICY)
        .map_err(|e| format!("cannot write {}: {e}", audit_policy.display()))?;
    spawn(
        "kube-apiserver",
        &[
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--tls-cert-file={}", certs.server_cert.display()),
            format!("--tls-private-key-file={}", certs.server_key.display()),
            format!("--client-ca-file={}", certs.ca_cert.display()),
            "--authorization-mode=RBAC".to_owned(),
            "--anonymous-auth=false".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            format!(
                "--service-account-key-file={}",
                certs.service_account_key.display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                certs.service_account_key.display()
            ),
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            // No kube-proxy or kubelets to reach: the `kubernetes` Service
            // needs no endpoints.
            "--endpoint-reconciler-type=none".to_owned(),
            // No container ever runs here, so Pods need no ServiceAccount
            // token; with the plugin, a Pod written into a namespace before
            // the service-account controller made its `default` account is
            // refused, a race no test is about.
            "--disable-admission-plugins=ServiceAccount".to_owned(),
            format!("--audit-policy-file={}", audit_policy.display()),
            format!("--audit-log-path={}", audit_log_path(dir).display()),
            "--audit-log-format=json".to_owned(),
            "--profiling=false".to_owned(),
            // Lists and watches filtered by a hash range of uid or
            // namespace (alpha in 1.37): what the operator's shards watch.
            format!(
                "--feature-gates=ShardedListAndWatch={}",
                gates.sharded_list_and_watch
            ),
        ],
    )?;
    wait_ready(dir, &kubeconfig)?;

    // The garbage collector reads the API's resources at start and then every
    // 30 s: with the CRD installed first it collects DataJob children at once.
    kubectl(
        &kubeconfig,
        &["apply", "-f"],
        &workspace_root().join("deploy/crd.yaml"),
    )?;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    spawn(
        "kube-controller-manager",
        &[
            kubeconfig_arg.clone(),
            "--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,node-lifecycle-controller,persistentvolume-binder-controller,persistentvolumeclaim-protection-controller"
                .to_owned(),
            "--leader-elect=false".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", free_port()?),
            "--profiling=false".to_owned(),
        ],
    )?;
    spawn(
        "kube-scheduler",
        &[
            kubeconfig_arg.clone(),
            "--leader-elect=false".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", free_port()?),
            "--profiling=false".to_owned(),
        ],
    )?;
    let stages = workspace_root().join("tools/kube/kwok/stages.yaml");
    spawn(
        "kwok",
        &[
            kubeconfig_arg,
            format!("--config={}", stages.display()),
            "--manage-all-nodes=false".to_owned(),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".to_owned(),
            "--node-ip=10.0.0.1".to_owned(),
            "--cidr=10.0.0.0/24".to_owned(),
            format!("--server-address=127.0.0.1:{}", free_port()?),
        ],
    )?;
    let node = dir.join("node.yaml");
    fs::write(&node, node_manifest())
        .map_err(|e| format!("cannot write {}: {e}", node.display()))?;
    kubectl(&kubeconfig, &["apply", "-f"], &node)?;
    kubectl(
        &kubeconfig,
        &[
            "wait",
            "--for=condition=Ready",
            "--timeout=90s",
            &format!("node/{NODE_NAME}"),
        ],
        Path::new(""),
    )?;
    wait_schedulable(dir, &kubeconfig)?;
    Ok(kubeconfig)
}

/// Waits until the node-lifecycle controller has lifted the `not-ready`
/// taint every new Node starts with: until then no Pod is scheduled.
fn wait_schedulable(dir: &Path, kubeconfig: &Path) -> Result<(), String> {
    let taints = ["get", "node", NODE_NAME, "-o", "jsonpath={.spec.taints}"];
    poll_kubectl(
        dir,
        kubeconfig,
        &taints,
        &format!("node {NODE_NAME} untainted"),
        |out| out.trim_ascii().is_empty(),
    )
}

/// Every request at the Metadata level: who did what to which object, and the
/// answer's code, which the tests count requests by.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

fn node_manifest() -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE_NAME}\n  annotations:\n    kwok.x-k8s.io/node: fake\n  labels:\n    kubernetes.io/hostname: {NODE_NAME}\n    type: kwok\n"
    )
}

fn admin_kubeconfig(certs: &Certificates, port: u16) -> String {
    let mut text = String::new();
    let _ = write!(
        text,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: policyhost-real\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: admin\n  context:\n    cluster: policyhost-real\n    user: admin\ncurrent-context: admin\n",
        ca = certs.ca_cert.display(),
        cert = certs.admin_cert.display(),
        key = certs.admin_key.display(),
    );
    text
}

/// A port on 127.0.0.1 free right now (the kernel's pick).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Starts one component, logging to `logs/<name>.log`, and writes its pid.
fn spawn(dir: &Path, name: &str, args: &[String], detach: Detach) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    let log_path = dir.join("logs").join(format!("{name}.log"));
    let log = File::create(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let err = log
        .try_clone()
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let mut command = Command::new(kube::program(name));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err);
    if detach == Detach::Yes {
        command.process_group(0);
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start {name}: {e}"))?;
    let pid_file = dir.join("pids").join(name);
    fs::write(&pid_file, child.id().to_string())
        .map_err(|e| format!("cannot write {}: {e}", pid_file.display()))
}

/// Waits until kube-apiserver answers `/readyz` with `ok`.
fn wait_ready(dir: &Path, kubeconfig: &Path) -> Result<(), String> {
    let readyz = ["get", "--raw", "/readyz"];
    poll_kubectl(dir, kubeconfig, &readyz, "kube-apiserver ready", |out| {
        out.starts_with(b"ok")
    })
}

/// Runs kubectl `args` every 250 ms until it succeeds with an output `done`
/// accepts; fails at once if etcd or kube-apiserver exited, or after
/// [`READY_TIMEOUT`] naming `what` was awaited.
fn poll_kubectl(
    dir: &Path,
    kubeconfig: &Path,
    args: &[&str],
    what: &str,
    done: impl Fn(&[u8]) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let out = admin_kubectl(kubeconfig)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run kubectl: {e}"))?;
        if out.status.success() && done(&out.stdout) {
            return Ok(());
        }
        for name in ["etcd", "kube-apiserver"] {
            if !alive(dir, name) {
                return Err(format!(
                    "{name} exited; its log is {}",
                    dir.join("logs").join(format!("{name}.log")).display()
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "not {what} after {READY_TIMEOUT:?}: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// The built kubectl as the admin, its discovery cache in the state
/// directory (which `down` removes), not in `~/.kube/cache`.
fn admin_kubectl(kubeconfig: &Path) -> Command {
    let mut command = Command::new(kube::program("kubectl"));
    command.arg(format!("--kubeconfig={}", kubeconfig.display()));
    if let Some(dir) = kubeconfig.parent() {
        command.arg(format!("--cache-dir={}", dir.join("kube-cache").display()));
    }
    command
}

/// `kubectl --kubeconfig <admin> <args> [file]` with the built kubectl.
fn kubectl(kubeconfig: &Path, args: &[&str], file: &Path) -> Result<(), String> {
    let mut command = admin_kubectl(kubeconfig);
    command.args(args);
    if !file.as_os_str().is_empty() {
        command.arg(file);
    }
    run(command.stdout(Stdio::null()))
}

fn pid(dir: &Path, name: &str) -> Option<u32> {
    fs::read_to_string(dir.join("pids").join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the process `up` recorded for `name` still runs: its pid is
/// alive and runs that program (a pid left by a crashed run may have been
/// reused since).
fn alive(dir: &Path, name: &str) -> bool {
    pid(dir, name).is_some_and(|pid| runs(pid, &kube::program(name)) && !zombie(pid))
}

fn runs(pid: u32, program: &Path) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline.split(|byte| *byte == 0).next() == Some(program.as_os_str().as_encoded_bytes())
    })
}

/// A process that exited but was not reaped (a child of this xtask).
fn zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// Stops the components `up` started in `dir` and removes the directory.
pub fn down(dir: &Path) -> Result<(), String> {
    stop(dir)?;
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Stops the components `up` started in `dir`, newest first, and keeps the
/// state: etcd exits cleanly on SIGTERM, its data whole for a later `up`.
pub fn stop(dir: &Path) -> Result<(), String> {
    for name in [
        "kwok",
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "etcd",
    ] {
        stop_component(dir, name)?;
    }
    let pids = dir.join("pids");
    if pids.exists() {
        fs::remove_dir_all(&pids).map_err(|e| format!("cannot remove {}: {e}", pids.display()))?;
    }
    Ok(())
}

/// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`].
fn stop_component(dir: &Path, name: &str) -> Result<(), String> {
    let Some(pid) = pid(dir, name) else {
        return Ok(());
    };
    if alive(dir, name) {
        signal("TERM", pid)?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while alive(dir, name) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        if alive(dir, name) {
            signal("KILL", pid)?;
        }
    }
    let _ = fs::remove_file(dir.join("pids").join(name));
    Ok(())
}

fn signal(name: &str, pid: u32) -> Result<(), String> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("cannot run kill: {e}"))?;
    // A process that exited meanwhile is what was wanted.
    if status.success() || !Path::new(&format!("/proc/{pid}")).exists() {
        Ok(())
    } else {
        Err(format!("kill -{name} {pid} failed with {status}"))
    }
}
