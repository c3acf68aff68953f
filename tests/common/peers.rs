//! The peers of the benchmarks (`bench/peers/`): the `fanout` policy as a
//! controller-runtime operator in three modes, run as a process against a
//! real cluster. `cargo xtask peers` (and `cargo xtask test`, `cargo xtask
//! bench peers`) builds it into `<target>/kube/peers/peers`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::Spawned;

/// The modes of `--mode`, as `bench/peers/modes.go` describes them.
pub const MODES: [&str; 3] = ["naive", "indexed", "best"];

/// The finalizer the peers hold a DataJob with.
pub const FINALIZER: &str = "peers.policyhost.dev/cleanup";

/// The `policyhost.dev/managed-by` label of the peers' children.
pub const MANAGED_BY: &str = "peers";

/// What the peers log once their caches are synced and their workers
/// run (controller-runtime's "Starting workers").
const WORKERS_STARTED: &str = "\"Starting workers\"";

/// The built binary.
///
/// # Panics
///
/// When it has not been built, with the command that builds it.
pub fn binary() -> PathBuf {
    let path = super::target_dir().join("kube").join("peers").join("peers");
    assert!(
        path.is_file(),
        "{} is missing: `cargo xtask peers` builds it",
        path.display()
    );
    path
}

/// A peers process; killed when dropped.
pub struct Peers {
    /// Its mode.
    pub mode: String,
    /// Its log (controller-runtime's JSON lines).
    pub log: PathBuf,
    process: Spawned,
}

impl Peers {
    /// Starts `peers --mode MODE` with `kubeconfig`, watching `namespaces`
    /// (all when empty), logging to `log`.
    pub fn start(mode: &str, kubeconfig: &Path, namespaces: &[&str], log: &Path) -> Self {
        let stderr = std::fs::File::create(log).expect("create the peers' log");
        let mut command = Command::new(binary());
        command
            .args(["--mode", mode, "--kubeconfig"])
            .arg(kubeconfig);
        for namespace in namespaces {
            command.args(["--namespace", namespace]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start the peers");
        Self {
            mode: mode.to_owned(),
            log: log.to_owned(),
            process: Spawned::new(child, format!("peers --mode {mode}")),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether its caches are synced and its workers started (it says so in
    /// its log).
    pub fn started(&self) -> bool {
        self.logs().contains(WORKERS_STARTED)
    }

    /// Whether it has not exited.
    pub fn running(&mut self) -> bool {
        self.process.running()
    }

    /// SIGTERM (controller-runtime's graceful shutdown), SIGKILL after
    /// `grace`; whether it exited by itself.
    pub fn stop(self, grace: Duration) -> bool {
        self.process.stop(grace)
    }
}
