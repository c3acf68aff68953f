//! The `policyhost` binary as a separate process: replicas of the operator
//! with their own identity against one cluster, their HTTP endpoints, and
//! signals.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::{guest, policyhost_bin};

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET path` over HTTP/1.0; the status code and body, or `None` if nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

/// Writes a copy of `kubeconfig` that presents `token` as its bearer token
/// (devcluster records it as the client's identity).
pub fn kubeconfig_with_token(kubeconfig: &Path, token: &str, into: &Path) {
    let text = std::fs::read_to_string(kubeconfig).expect("read the kubeconfig");
    let from = format!("token: {}", devcluster::kubeconfig::TOKEN);
    assert!(text.contains(&from), "a devcluster kubeconfig");
    std::fs::write(into, text.replace(&from, &format!("token: {token}")))
        .expect("write the kubeconfig");
}

/// A directory holding the named policies' components.
pub fn policy_dir(policies: &[&str], tag: &str) -> PathBuf {
    let dir = super::scratch().join(format!("policyhost-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a policy directory");
    for name in policies {
        let source = guest(name);
        let file = source.file_name().expect("a file name");
        std::fs::copy(&source, dir.join(file)).expect("copy the policy");
    }
    dir
}

/// A `policyhost run` process; killed when dropped.
pub struct Replica {
    /// Its `POD_NAME`, the identity on the Lease.
    pub name: String,
    /// Where its endpoints listen.
    pub addr: SocketAddr,
    /// Its log file.
    pub log: PathBuf,
    child: Child,
}

impl Replica {
    /// Starts `policyhost run` with `args`, `POD_NAME=name`, and its
    /// endpoints on a free port; logs go to a file next to the kubeconfig.
    pub fn start(name: &str, kubeconfig: &Path, args: &[&str]) -> Self {
        Self::start_with_env(name, kubeconfig, args, &[("POD_NAME".into(), name.into())])
    }

    /// Like [`start`](Self::start), with this environment (`POD_NAME` too).
    pub fn start_with_env(
        name: &str,
        kubeconfig: &Path,
        args: &[&str],
        env: &[(String, String)],
    ) -> Self {
        Self::start_program(&policyhost_bin(), name, kubeconfig, args, env)
    }

    /// Like [`start_with_env`](Self::start_with_env), running `program` (a
    /// `policyhost` binary built another way).
    pub fn start_program(
        program: &Path,
        name: &str,
        kubeconfig: &Path,
        args: &[&str],
        env: &[(String, String)],
    ) -> Self {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = kubeconfig.with_extension(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("a log file");
        let child = Command::new(program)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--listen", &addr.to_string()])
            .args(args)
            .env("POLICYHOST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start policyhost run");
        Self {
            name: name.to_owned(),
            addr,
            log,
            child,
        }
    }

    /// `GET path` on its endpoints.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.addr, path)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} {}", self.pid());
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait for the replica")
    }

    /// Its log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `kubectl` with `args` (and `--kubeconfig` when given); its exit
/// status and stdout + stderr.
pub fn kubectl(kubeconfig: Option<&Path>, args: &[&str]) -> (bool, String) {
    let mut command = Command::new("kubectl");
    if let Some(kubeconfig) = kubeconfig {
        command.arg("--kubeconfig").arg(kubeconfig);
        // A cache next to the kubeconfig: tests do not share discovery caches.
        command
            .arg("--cache-dir")
            .arg(kubeconfig.with_extension("kube-cache"));
    }
    let output = command.args(args).output().expect("run kubectl");
    (output.status.success(), text(&output))
}

/// Runs the built `policyhost` with `args` (its log at `warn`) to the end.
pub fn policyhost(args: &[&str]) -> Output {
    policyhost_with_env(args, &[])
}

/// Runs the built `policyhost` with `args` and the environment variables
/// `env` (its log at `warn`) to the end.
pub fn policyhost_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(super::policyhost_bin())
        .args(args)
        .env("POLICYHOST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run policyhost")
}

/// A finished command's stdout, then its stderr, as text.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The objects `kubectl kustomize <dir>` renders, as JSON.
pub fn kustomize(dir: &Path) -> Vec<serde_json::Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    yaml_documents(&String::from_utf8_lossy(&output.stdout))
}

/// Every document of a multi-document YAML text, as JSON (empty and `null`
/// documents skipped).
pub fn yaml_documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple(text).expect("YAML documents")
}

/// A child process of a benchmark or test (a server, an operator), killed
/// and reaped when dropped, so that none outlives its owner.
pub struct Spawned {
    child: Child,
    name: String,
}

impl Spawned {
    /// Takes charge of `child`, named `name` in messages.
    pub fn new(child: Child, name: impl Into<String>) -> Self {
        Self {
            child,
            name: name.into(),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has not exited yet.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL (on drop) if it has not exited within `grace`;
    /// whether it exited by itself.
    pub fn stop(mut self, grace: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if !self.running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{} did not stop within {grace:?}; killing it", self.name);
        false
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
