//! A real control plane of a benchmark's own, started and stopped with the
//! xtask (`cargo xtask cluster up|stop|down --dir DIR`) in its own state
//! directory, and the processes it runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use policyhost_measure::{self as measure, Process as Measured};

/// The control plane's programs, as `xtask cluster up` names their pid files.
pub const PROGRAMS: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// The Node kwok keeps Ready (`xtask cluster up` creates it); Pods bound to
/// it run.
pub const KWOK_NODE: &str = "kwok-node";

/// The annotation that sets how long a Pod runs, honoured by devcluster's
/// Pod simulation and kwok's stages (`tools/kube/kwok/stages.yaml`); a
/// negative value keeps it Running.
pub const RUN_SECONDS: &str = "devcluster.policyhost.dev/run-seconds";

/// The xtask binary (`<target>/debug/xtask`, which `cargo xtask` builds):
/// it starts and stops the control plane.
pub fn xtask() -> anyhow::Result<PathBuf> {
    let path = super::target_dir().join("debug/xtask");
    ensure!(
        path.is_file(),
        "{} is missing: `cargo build -p xtask` builds it (`cargo xtask bench …` has)",
        path.display()
    );
    Ok(path)
}

/// `xtask cluster COMMAND --dir DIR`; its standard output.
fn xtask_cluster(command: &str, dir: &Path) -> anyhow::Result<String> {
    let output = Command::new(xtask()?)
        .args(["cluster", command, "--dir"])
        .arg(dir)
        .stderr(Stdio::inherit())
        .output()
        .context("run xtask")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    ensure!(
        output.status.success(),
        "xtask cluster {command} --dir {} failed:\n{stdout}",
        dir.display()
    );
    Ok(stdout)
}

/// Pids of the etcd and kube-apiserver processes running on this machine
/// (one that exited but was not reaped yet, a zombie, runs nothing).
fn running_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let (command, rest) = stat.rsplit_once(") ").unwrap_or_default();
                matches!(
                    command.rsplit_once('(').map(|(_, c)| c),
                    Some("etcd" | "kube-apiserver")
                ) && !rest.starts_with('Z')
            })
        })
        .collect()
}

/// A client of the current context of `kubeconfig`.
pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<Client> {
    let config = Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// What a control plane may start beside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beside {
    /// No other control plane: it waits until none runs on the machine.
    Nothing,
    /// Anything: it starts at once.
    Anything,
}

/// A control plane in its own state directory: removed with its state when
/// dropped, unless [`stop`](Self::stop)ped to be resumed.
pub struct ControlPlane {
    dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// kube-apiserver's audit log.
    pub audit_log: PathBuf,
    /// Stopped, its state kept: dropping it does nothing.
    stopped: bool,
}

impl ControlPlane {
    /// Starts one in `dir` (resuming the state a [`stop`](Self::stop) kept
    /// there), once no other control plane runs on the machine: a second
    /// one would take the cores and memory being measured.
    pub fn up(dir: PathBuf) -> anyhow::Result<Self> {
        Self::up_beside(dir, Beside::Nothing)
    }

    /// Like [`up`](Self::up); with [`Beside::Anything`] at once, beside
    /// whatever runs (a check of the benchmark itself, not a measurement).
    pub fn up_beside(dir: PathBuf, beside: Beside) -> anyhow::Result<Self> {
        let mut waited = false;
        while beside == Beside::Nothing && !running_pids().is_empty() {
            if !waited {
                eprintln!("another control plane runs here; waiting until it stops");
                waited = true;
            }
            std::thread::sleep(Duration::from_secs(5));
        }
        let mut plane = Self {
            dir,
            kubeconfig: PathBuf::new(),
            audit_log: PathBuf::new(),
            stopped: false,
        };
        xtask_cluster("up", &plane.dir)?;
        for line in xtask_cluster("env", &plane.dir)?.lines() {
            if let Some(path) = line.strip_prefix("KUBECONFIG=") {
                plane.kubeconfig = path.into();
            } else if let Some(path) = line.strip_prefix("POLICYHOST_TEST_AUDIT_LOG=") {
                plane.audit_log = path.into();
            }
        }
        ensure!(
            plane.kubeconfig.is_file() && !plane.audit_log.as_os_str().is_empty(),
            "`xtask cluster env` named no kubeconfig or audit log"
        );
        Ok(plane)
    }

    /// Its state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops every process and keeps the state (`xtask cluster stop`): the
    /// directory, or a copy of it ([`copy_state`]), resumes with
    /// [`up`](Self::up).
    pub fn stop(mut self) -> anyhow::Result<PathBuf> {
        // On failure it is dropped: down, state and all.
        xtask_cluster("stop", &self.dir)?;
        self.stopped = true;
        Ok(self.dir.clone())
    }

    /// Whether an etcd or a kube-apiserver other than its own runs on the
    /// machine.
    pub fn others_running(&self) -> bool {
        let own = [self.pid("etcd"), self.pid("kube-apiserver")];
        running_pids()
            .into_iter()
            .any(|pid| !own.contains(&Some(pid)))
    }

    /// The pid of `program`, from the pid file `up` wrote.
    pub fn pid(&self, program: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("pids").join(program))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// `VmRSS` and `VmHWM` of each of its processes, in MiB, by program.
    pub fn memory(&self) -> BTreeMap<String, (f64, f64)> {
        PROGRAMS
            .iter()
            .filter_map(|program| {
                let memory = measure::memory(Measured::Pid(self.pid(program)?))?;
                Some(((*program).to_owned(), (memory.rss_mib, memory.peak_mib)))
            })
            .collect()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if !self.stopped
            && let Err(error) = xtask_cluster("down", &self.dir)
        {
            eprintln!("{error:#}");
        }
    }
}

/// Copies the state a stopped control plane kept in `from` into `to`, which
/// must not exist: etcd's data and the certificates, which is all a control
/// plane resumes from (its logs, pids and kubeconfig are made anew).
pub fn copy_state(from: &Path, to: &Path) -> anyhow::Result<()> {
    ensure!(!to.exists(), "{} exists", to.display());
    std::fs::create_dir_all(to)?;
    for part in ["etcd", "pki"] {
        let status = Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(from.join(part))
            .arg(to.join(part))
            .status()
            .context("run cp")?;
        ensure!(
            status.success(),
            "cp -a {} {} failed with {status}",
            from.join(part).display(),
            to.join(part).display()
        );
    }
    Ok(())
}
