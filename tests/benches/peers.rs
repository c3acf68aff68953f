//! policyhost beside the operators people write today, on the real control
//! plane: `cargo xtask bench peers [OPTIONS]` (which builds the guests, the
//! release binaries, the control plane and the peers first), or `cargo bench
//! -p policyhost-tests --bench peers -- [OPTIONS]` with those built.
//!
//! The operators, each in turn: `policyhost` (`policyhost run`, as the scale
//! benchmark runs it: `deploy/`'s ServiceAccount and RBAC, `--cache indexed
//! --child-kind v1/Pod`) and the controller-runtime peers of `bench/peers/`
//! in their three modes, `naive`, `indexed` and `best` (`--namespace` of the
//! DataJobs for the last two; `naive` watches every namespace). Each runs as
//! a ServiceAccount of its own, so that the audit log tells its requests
//! from everyone else's.
//!
//! 1. **The loaded state, once.** A control plane (`xtask cluster up --dir`)
//!    gets the DataJob CRD, `deploy/`, the peers' ServiceAccount and RBAC,
//!    and `--pods` foreign Pods (`tests/common/foreign.rs`, Deployment-owned,
//!    bound to kwok's Node and kept Running); once all are Running it is
//!    stopped (`xtask cluster stop`), its state kept.
//! 2. **Per operator, a copy.** etcd's data and the certificates are copied
//!    into a directory of the operator's own and the control plane resumes
//!    there (`xtask cluster up` on a stopped state): every operator meets the
//!    same cluster. The copy is removed after the operator's run.
//! 3. The operator starts; once ready (policyhost's `/readyz`, the peers'
//!    "Starting workers"), `--jobs` DataJobs (`fanout`, `--replicas`
//!    workers that run until told otherwise) are created at once, 64 in
//!    flight, and watched until each has **converged**: its status written
//!    for its generation and counting all its children, every one Running
//!    (`converged_s`, from the first create). The workers run until told
//!    otherwise, so that is where a DataJob rests, and the requests until
//!    then are the whole of its start, whatever the pace of kwok's Pods.
//! 4. **Steady** for `--steady` seconds: nothing changes; `rss_steady_mib` is
//!    the operator's `VmRSS` at the end.
//! 5. **The workers finish**: the benchmark writes each worker's exit into
//!    its status, as kwok writes a Pod's (`Succeeded`), and waits until every
//!    DataJob is `Succeeded`. Both `fanout`s hold a deleted DataJob until no
//!    worker runs, so a DataJob can only go once its workers stopped.
//! 6. **Deleted at once**: one DELETE per DataJob, 64 in flight, each clock
//!    started when its request is sent and stopped by the DataJob's `DELETED`
//!    event, its finalizer released (`release_p99_s`, nearest rank).
//!
//! Per operator one JSON line, printed and appended to `<out>/peers.jsonl`:
//! `operator`, `rss_steady_mib`, `rss_peak_mib` (`VmHWM` at the end),
//! `converged_s`, `release_p99_s`, `requests_per_datajob`, `requests` (the
//! operator's requests by verb and resource, from its start until all
//! converged, from the audit log), `cpu_s` (its CPU time over the whole run),
//! and more: when it was ready, its RSS and CPU at convergence, when all were
//! released, its requests in the later phases. `requests_per_datajob` counts
//! every request of `requests` but the Leases' (policyhost's leader
//! election; the peers run without one), divided by `--jobs`. The series (RSS
//! and CPU every 250 ms, DataJobs converged over time) go to
//! `<out>/peers-series.json`, and from both the plot (`<out>/peers.svg`)
//! and the table (printed: every operator, then policyhost's ratio to each
//! peer). An operator that fails (one that has not
//! converged within `--timeout`, say) gets the line `{"operator", "error"}`,
//! the error saying its RSS, peak RSS and CPU time when it failed, and the
//! next operator its turn; the benchmark then fails.
//!
//! Options: `--pods N` (50000), `--jobs N` (1000), `--replicas N` (5),
//! `--steady S` (60), `--operators LIST` (policyhost,naive,indexed,best;
//! `policyhost:FLAGS` is policyhost with these flags added, separated by
//! spaces, e.g. `policyhost:--workers=16`, a variant measured on the same
//! loaded state and shown beside the others),
//! `--out DIR` (docs/plots), `--timeout S` (3600: the longest any phase may
//! take), `--beside-other-control-planes` (start at once, where the
//! benchmark otherwise waits until no other control plane runs on the
//! machine: to check the benchmark itself, not to measure), `--report-only
//! DIR` (draw the plot and print the table of the run recorded in DIR).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use policyhost::crd::DataJob;
use serde_json::json;

#[path = "../common/mod.rs"]
mod common;
#[path = "peers/report.rs"]
mod report;

use common::bench::Flags;
use common::control_plane::{Beside, ControlPlane, client_for, copy_state};
use common::deployment::{self, NAMESPACE as OPERATOR_NAMESPACE, SERVICE_ACCOUNT_USER};
use common::foreign;
use common::load::{converged, data_job, exited, load_foreign_pods, log, wait_for, wait_running};
use common::peers::{self, Peers};
use common::process::{Spawned, free_port, http_get, kubectl};
use common::requests::{Request, RequestLog};
use common::sampler::{Sample, Sampler, cpu_seconds, memory_mib};

/// The namespace of the DataJobs.
const JOBS_NAMESPACE: &str = "datajobs";

/// The peers' ServiceAccount: namespace, name, and the user it is.
const PEERS_NAMESPACE: &str = "peers-system";
const PEERS_ACCOUNT: &str = "peers";
const PEERS_USER: &str = "system:serviceaccount:peers-system:peers";

/// What the peers may do, cluster-wide (`naive` watches every Pod): what
/// `fanout` needs, as `deploy/` grants policyhost's.
const PEERS_RBAC: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: peers-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: peers, namespace: peers-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: peers}
rules:
- apiGroups: [policyhost.dev]
  resources: [datajobs]
  verbs: [get, list, watch, update, patch]
- apiGroups: [policyhost.dev]
  resources: [datajobs/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: peers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: peers}
subjects:
- {kind: ServiceAccount, name: peers, namespace: peers-system}
"#;

#[derive(Debug, Clone)]
struct Args {
    pods: usize,
    jobs: usize,
    replicas: usize,
    steady: u64,
    operators: Vec<String>,
    out: PathBuf,
    timeout: Duration,
    beside: Beside,
    /// Only draw the plot and print the table of the run recorded here.
    report_only: Option<PathBuf>,
}

impl Args {
    fn parse() -> anyhow::Result<Self> {
        let mut args = Self {
            pods: 50_000,
            jobs: 1_000,
            replicas: 5,
            steady: 60,
            operators: ["policyhost", "naive", "indexed", "best"]
                .map(str::to_owned)
                .to_vec(),
            out: common::workspace().join("docs/plots"),
            timeout: Duration::from_secs(3600),
            beside: Beside::Nothing,
            report_only: None,
        };
        let mut flags = Flags::from_env();
        while let Some(flag) = flags.next_flag() {
            let mut value = || flags.value(&flag);
            match flag.as_str() {
                "--pods" => args.pods = value()?.parse()?,
                "--jobs" => args.jobs = value()?.parse()?,
                "--replicas" => args.replicas = value()?.parse()?,
                "--steady" => args.steady = value()?.parse()?,
                "--operators" => {
                    args.operators = value()?.split(',').map(str::to_owned).collect();
                }
                // `cargo bench` runs in tests/: paths are the workspace's.
                "--out" => args.out = common::workspace().join(value()?),
                "--timeout" => args.timeout = Duration::from_secs(value()?.parse()?),
                "--beside-other-control-planes" => args.beside = Beside::Anything,
                "--report-only" => args.report_only = Some(common::workspace().join(value()?)),
                other => bail!("unknown option {other} (see the header of tests/benches/peers.rs)"),
            }
        }
        for operator in &args.operators {
            ensure!(
                policyhost_flags(operator).is_some() || peers::MODES.contains(&operator.as_str()),
                "unknown operator {operator} (policyhost, policyhost:FLAGS, naive, indexed or best)"
            );
        }
        ensure!(args.jobs > 0, "--jobs must be at least 1");
        Ok(args)
    }
}

/// The flags `operator` adds to policyhost's own: none for `policyhost`,
/// those after the colon for `policyhost:FLAGS`; `None` for a peer.
fn policyhost_flags(operator: &str) -> Option<Vec<&str>> {
    match operator.strip_prefix("policyhost") {
        Some("") => Some(Vec::new()),
        Some(rest) => Some(rest.strip_prefix(':')?.split_whitespace().collect()),
        None => None,
    }
}

/// `operator` as a part of a file name.
fn file_part(operator: &str) -> String {
    operator
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The release `policyhost` (`cargo xtask bench peers` builds it).
fn policyhost_binary() -> anyhow::Result<PathBuf> {
    let path = common::target_dir().join("release/policyhost");
    ensure!(
        path.is_file(),
        "{} is missing: `cargo xtask bench peers` builds it",
        path.display()
    );
    Ok(path)
}

/// One operator's figures: the JSON line.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Figures {
    operator: String,
    rss_steady_mib: f64,
    rss_peak_mib: f64,
    converged_s: f64,
    release_p99_s: f64,
    requests_per_datajob: f64,
    /// `verb resource[/subresource]` → count, from its start until all converged.
    requests: BTreeMap<String, u64>,
    cpu_s: f64,
    /// Seconds from its start until ready.
    ready_s: f64,
    rss_converged_mib: f64,
    cpu_converged_s: f64,
    /// Seconds from the first DELETE until every DataJob was gone.
    released_s: f64,
    release_p50_s: f64,
    /// Requests while steady, while the workers finished, and from the
    /// first DELETE until all were gone.
    requests_steady: BTreeMap<String, u64>,
    requests_finish: BTreeMap<String, u64>,
    requests_release: BTreeMap<String, u64>,
    pods: usize,
    jobs: usize,
    replicas: usize,
    steady_s: u64,
    load_mean: f64,
    /// Another control plane ran on the machine meanwhile
    /// (`--beside-other-control-planes`): the figures are not comparable.
    beside_other_control_plane: bool,
}

/// One operator's series, for plots.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Series {
    operator: String,
    memory: Vec<Sample>,
    /// `(seconds since the first create, DataJobs converged)`.
    converged: Vec<(f64, usize)>,
    /// Seconds from the operator's start to the first create.
    jobs_created_at_s: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    if let Some(recorded) = &args.report_only {
        println!("{}", report::write(recorded)?);
        return Ok(());
    }
    let clock = Instant::now();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("policyhost-peers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("policies"))?;
    std::fs::copy(common::guest("fanout"), dir.join("policies/fanout.wasm"))?;
    if args.operators.iter().any(|o| policyhost_flags(o).is_some()) {
        policyhost_binary()?;
    }
    if args.operators.iter().any(|o| policyhost_flags(o).is_none()) {
        peers::binary();
    }
    log(
        clock,
        format_args!(
            "{} foreign Pods, {} DataJobs × {}, operators {}; logs in {}",
            args.pods,
            args.jobs,
            args.replicas,
            args.operators.join(","),
            dir.display()
        ),
    );
    let loaded = load(&args, &dir, clock).await?;
    std::fs::create_dir_all(&args.out)?;
    let lines_path = args.out.join(report::LINES);
    std::fs::write(&lines_path, "")?;
    let mut all_series = Vec::new();
    let mut failed = Vec::new();
    for operator in &args.operators {
        // An operator that fails (say, one that does not converge within
        // --timeout) gets a line saying why, and the next one its turn.
        let line = match run_operator(&args, operator, &loaded, &dir, clock).await {
            Ok((figures, series)) => {
                all_series.push(series);
                serde_json::to_string(&figures)?
            }
            Err(error) => {
                log(clock, format_args!("{operator}: {error:#}"));
                failed.push(operator.as_str());
                serde_json::to_string(
                    &json!({"operator": operator, "error": format!("{error:#}")}),
                )?
            }
        };
        println!("{line}");
        let mut lines = std::fs::read_to_string(&lines_path)?;
        lines.push_str(&line);
        lines.push('\n');
        std::fs::write(&lines_path, lines)?;
    }
    let series_path = args.out.join(report::SERIES);
    std::fs::write(&series_path, serde_json::to_vec(&all_series)?)?;
    std::fs::remove_dir_all(&loaded)?;
    let table = report::write(&args.out)?;
    log(
        clock,
        format_args!(
            "wrote {}, {} and {}:\n{table}",
            lines_path.display(),
            series_path.display(),
            args.out.join(report::PLOT).display(),
        ),
    );
    ensure!(failed.is_empty(), "failed: {}", failed.join(", "));
    Ok(())
}

// ---- the loaded state ----

/// Starts a control plane, installs what every operator needs and loads the
/// foreign Pods; stops it and returns its state directory.
async fn load(args: &Args, dir: &Path, clock: Instant) -> anyhow::Result<PathBuf> {
    let state = dir.join("loaded");
    let beside = args.beside;
    let plane =
        tokio::task::spawn_blocking(move || ControlPlane::up_beside(state, beside)).await??;
    let client = client_for(&plane.kubeconfig).await?;
    common::cluster::install_crd(&client).await;
    // deploy/: policyhost's namespace, ServiceAccount and RBAC (its
    // Deployment runs nowhere: no Deployment controller runs here).
    deployment::install(&plane.kubeconfig).await;
    let rbac = dir.join("peers-rbac.yaml");
    std::fs::write(&rbac, PEERS_RBAC)?;
    let (ok, text) = kubectl(
        Some(&plane.kubeconfig),
        &["apply", "-f", &rbac.display().to_string()],
    );
    ensure!(ok, "kubectl apply -f {}: {text}", rbac.display());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in foreign::NAMESPACES.iter().chain([&JOBS_NAMESPACE]) {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("create namespace {name}"))?;
    }
    let jobs: Api<DataJob> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
    wait_for("the DataJob resource", Duration::from_secs(30), || {
        let jobs = jobs.clone();
        async move { jobs.list(&ListParams::default().limit(1)).await.is_ok() }
    })
    .await?;
    log(clock, format_args!("loading {} foreign Pods", args.pods));
    let (rate, first) = load_foreign_pods(&client, args.pods).await?;
    wait_running(&client).await?;
    log(
        clock,
        format_args!(
            "loaded at {rate:.0} creates/s, all Running {:.1} s after the first create; \
             control plane RSS {:?} MiB; stopping it to copy its state",
            first.elapsed().as_secs_f64(),
            plane
                .memory()
                .into_iter()
                .map(|(program, (rss, _))| (program, rss.round()))
                .collect::<BTreeMap<_, _>>()
        ),
    );
    drop(client);
    tokio::task::spawn_blocking(move || plane.stop()).await?
}

// ---- one operator ----

/// A running operator under test.
enum Running {
    Policyhost { process: Spawned, addr: String },
    Peers(Peers),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Self::Policyhost { process, .. } => process.pid(),
            Self::Peers(peers) => peers.pid(),
        }
    }

    /// Ready to reconcile: policyhost's `/readyz` answers 200; the peers
    /// logged that their workers started (caches synced).
    fn ready(&mut self) -> anyhow::Result<bool> {
        match self {
            Self::Policyhost { process, addr } => {
                ensure!(process.running(), "policyhost exited");
                let addr = addr.parse().context("an address")?;
                Ok(matches!(http_get(addr, "/readyz"), Some((200, _))))
            }
            Self::Peers(peers) => {
                ensure!(peers.running(), "the peers exited:\n{}", peers.logs());
                Ok(peers.started())
            }
        }
    }

    fn stop(self) {
        let grace = Duration::from_secs(20);
        match self {
            Self::Policyhost { process, .. } => drop(process.stop(grace)),
            Self::Peers(peers) => drop(peers.stop(grace)),
        }
    }
}

/// Starts `operator` with `kubeconfig`, its log in `dir`.
fn start(operator: &str, kubeconfig: &Path, dir: &Path) -> anyhow::Result<Running> {
    let log_path = dir.join(format!("operator-{}.log", file_part(operator)));
    let Some(flags) = policyhost_flags(operator) else {
        let namespaces: &[&str] = match operator {
            "naive" => &[],
            _ => &[JOBS_NAMESPACE],
        };
        return Ok(Running::Peers(Peers::start(
            operator, kubeconfig, namespaces, &log_path,
        )));
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let child = Command::new(policyhost_binary()?)
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--policy-dir")
        .arg(dir.join("policies"))
        .args(["--listen", &addr, "--cache", "indexed"])
        // As deploy/'s Deployment runs it (see the scale benchmark).
        .args(["--child-kind", "v1/Pod"])
        .args(flags)
        .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
        .env("POD_NAME", "policyhost-peers-bench")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()
        .context("start policyhost run")?;
    Ok(Running::Policyhost {
        process: Spawned::new(child, "policyhost"),
        addr,
    })
}

/// The audit log's user of `operator`.
fn user(operator: &str) -> &'static str {
    if policyhost_flags(operator).is_some() {
        SERVICE_ACCOUNT_USER
    } else {
        PEERS_USER
    }
}

/// Microseconds since the Unix epoch now: the phases' bounds, compared with
/// the audit events' receipt times.
fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A request's key: `verb resource`, `verb resource/subresource`.
fn key(request: &Request) -> String {
    if request.subresource.is_empty() {
        format!("{} {}", request.verb, request.resource)
    } else {
        format!(
            "{} {}/{}",
            request.verb, request.resource, request.subresource
        )
    }
}

/// The requests received in `[from, to)`, by key.
fn tally(requests: &[Request], from: u64, to: u64) -> BTreeMap<String, u64> {
    let mut by_key = BTreeMap::new();
    for request in requests
        .iter()
        .filter(|r| (from..to).contains(&r.unix_micros))
    {
        *by_key.entry(key(request)).or_default() += 1;
    }
    by_key
}

async fn run_operator(
    args: &Args,
    operator: &str,
    loaded: &Path,
    dir: &Path,
    clock: Instant,
) -> anyhow::Result<(Figures, Series)> {
    let mut figures = Figures {
        operator: operator.to_owned(),
        pods: args.pods,
        jobs: args.jobs,
        replicas: args.replicas,
        steady_s: args.steady,
        ..Figures::default()
    };
    let state = dir.join(format!("cluster-{operator}"));
    copy_state(loaded, &state)?;
    let beside = args.beside;
    let plane =
        tokio::task::spawn_blocking(move || ControlPlane::up_beside(state, beside)).await??;
    figures.beside_other_control_plane = plane.others_running();
    let client = client_for(&plane.kubeconfig).await?;
    let kubeconfig = dir.join(format!("{}.kubeconfig", file_part(operator)));
    let (namespace, account) = match policyhost_flags(operator) {
        Some(_) => (OPERATOR_NAMESPACE, "policyhost"),
        None => (PEERS_NAMESPACE, PEERS_ACCOUNT),
    };
    deployment::issued_token_kubeconfig(&plane.kubeconfig, namespace, account, &kubeconfig);
    log(
        clock,
        format_args!("{operator}: control plane resumed on a copy of the loaded state"),
    );

    let audit = RequestLog::Audit(plane.audit_log.clone());
    let mark = audit.mark();
    let started = Instant::now();
    let start_micros = now_micros();
    let mut running = start(operator, &kubeconfig, dir)?;
    let pid = running.pid();
    let sampler = Sampler::start(pid, started);
    let memory = || memory_mib(pid).unwrap_or((f64::NAN, f64::NAN));
    // What an operator that fails a phase had used by then, for its line.
    let when_failed = || {
        let (rss, peak) = memory();
        let cpu = cpu_seconds(pid).unwrap_or(f64::NAN);
        format!("when it failed: RSS {rss:.0} MiB, peak {peak:.0} MiB, CPU {cpu:.1} s")
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    while !running.ready()? {
        ensure!(Instant::now() < deadline, "not ready after 900 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    figures.ready_s = started.elapsed().as_secs_f64();
    log(
        clock,
        format_args!(
            "{operator}: ready after {:.1} s, RSS {:.1} MiB",
            figures.ready_s,
            memory().0
        ),
    );

    // Created at once, watched until converged.
    let jobs: Api<DataJob> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
    let t0 = Instant::now();
    let jobs_created_at_s = started.elapsed().as_secs_f64();
    let converged_at = watch_until(jobs.clone(), t0, args.jobs, {
        let replicas = args.replicas;
        move |job| {
            converged(job, replicas)
                && job
                    .status
                    .as_ref()
                    .and_then(|s| s.children.as_ref())
                    .is_some_and(|c| c.running as usize == replicas)
        }
    });
    futures::stream::iter(0..args.jobs)
        .map(|i| {
            let jobs = jobs.clone();
            async move {
                let job = data_job(i, JOBS_NAMESPACE, args.replicas)?;
                jobs.create(&PostParams::default(), &job)
                    .await
                    .context("create a DataJob")
                    .map(drop)
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    let converged_times = converged_at
        .wait(args.timeout, "every DataJob converged")
        .await
        .with_context(when_failed)?;
    figures.converged_s = t0.elapsed().as_secs_f64();
    let converge_micros = now_micros();
    (figures.rss_converged_mib, _) = memory();
    figures.cpu_converged_s = cpu_seconds(pid).unwrap_or(f64::NAN);
    log(
        clock,
        format_args!(
            "{operator}: {} DataJobs converged in {:.2} s, RSS {:.1} MiB, CPU {:.1} s",
            args.jobs, figures.converged_s, figures.rss_converged_mib, figures.cpu_converged_s
        ),
    );

    tokio::time::sleep(Duration::from_secs(args.steady)).await;
    (figures.rss_steady_mib, _) = memory();
    let steady_micros = now_micros();
    log(
        clock,
        format_args!(
            "{operator}: steady {} s, RSS {:.1} MiB",
            args.steady, figures.rss_steady_mib
        ),
    );

    // The workers finish; every DataJob Succeeded.
    let succeeded = watch_until(jobs.clone(), Instant::now(), args.jobs, {
        let replicas = args.replicas as u32;
        move |job| {
            job.status.as_ref().is_some_and(|s| {
                s.phase.as_deref() == Some("Succeeded")
                    && s.children.as_ref().is_some_and(|c| c.succeeded == replicas)
            })
        }
    });
    finish_workers(&client, args.jobs * args.replicas).await?;
    succeeded
        .wait(args.timeout, "every DataJob Succeeded")
        .await
        .with_context(when_failed)?;
    let finish_micros = now_micros();
    log(
        clock,
        format_args!("{operator}: the workers finished, every DataJob Succeeded"),
    );

    // Deleted at once, one DELETE each.
    let (released_s, per_job) = delete_all(&jobs, args.jobs, args.timeout)
        .await
        .with_context(when_failed)?;
    figures.released_s = released_s;
    figures.release_p50_s = percentile(&per_job, 0.5);
    figures.release_p99_s = percentile(&per_job, 0.99);
    let release_micros = now_micros();
    figures.cpu_s = cpu_seconds(pid).unwrap_or(f64::NAN);
    (_, figures.rss_peak_mib) = memory();
    log(
        clock,
        format_args!(
            "{operator}: all released {:.2} s after the first DELETE, p50 {:.3} s, p99 {:.3} s",
            figures.released_s, figures.release_p50_s, figures.release_p99_s
        ),
    );
    let samples = sampler.stop();
    running.stop();

    // The audit log's events of the operator, by phase; the log's last
    // events reach the file within a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests: Vec<Request> = audit
        .since(mark)
        .into_iter()
        .filter(|r| r.identity == user(operator))
        .collect();
    figures.requests = tally(&requests, start_micros, converge_micros);
    figures.requests_steady = tally(&requests, converge_micros, steady_micros);
    figures.requests_finish = tally(&requests, steady_micros, finish_micros);
    figures.requests_release = tally(&requests, finish_micros, release_micros);
    let per_job: u64 = figures
        .requests
        .iter()
        .filter(|(key, _)| !key.ends_with(" leases"))
        .map(|(_, n)| n)
        .sum();
    figures.requests_per_datajob = per_job as f64 / args.jobs as f64;
    let loads: Vec<f64> = samples
        .iter()
        .map(|s| s.load)
        .filter(|l| l.is_finite())
        .collect();
    figures.load_mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    drop(client);
    tokio::task::spawn_blocking(move || drop(plane)).await?;

    let mut times = converged_times;
    times.sort_by(f64::total_cmp);
    let series = Series {
        operator: operator.to_owned(),
        memory: samples,
        converged: std::iter::once((0.0, 0))
            .chain(times.iter().enumerate().map(|(i, t)| (*t, i + 1)))
            .collect(),
        jobs_created_at_s,
    };
    Ok((figures, series))
}

/// The `q` quantile (nearest rank) of ascending samples; `NaN` without any.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    policyhost_measure::percentile(sorted, q).unwrap_or(f64::NAN)
}

/// A watch of the DataJobs until `count` of them satisfied a condition:
/// when each first did, in seconds since its start.
struct Until {
    done: Arc<Mutex<HashMap<String, f64>>>,
    count: tokio::sync::watch::Receiver<usize>,
    target: usize,
    task: tokio::task::JoinHandle<()>,
}

/// Watches `jobs` from now until `target` DataJobs satisfied `done`.
fn watch_until(
    jobs: Api<DataJob>,
    t0: Instant,
    target: usize,
    done: impl Fn(&DataJob) -> bool + Send + 'static,
) -> Until {
    let (count_tx, count) = tokio::sync::watch::channel(0usize);
    let times: Arc<Mutex<HashMap<String, f64>>> = Arc::default();
    let task = tokio::spawn({
        let times = Arc::clone(&times);
        async move {
            use kube::runtime::WatchStreamExt as _;
            let stream = watcher(jobs, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            while let Some(job) = stream.next().await {
                let Ok(job) = job else { continue };
                if done(&job) {
                    let mut times = times.lock().unwrap_or_else(|e| e.into_inner());
                    times
                        .entry(job.name_any())
                        .or_insert_with(|| t0.elapsed().as_secs_f64());
                    count_tx.send_replace(times.len());
                }
            }
        }
    });
    Until {
        done: times,
        count,
        target,
        task,
    }
}

impl Until {
    /// Waits until the target is reached, within `timeout`; the times.
    async fn wait(mut self, timeout: Duration, what: &str) -> anyhow::Result<Vec<f64>> {
        let target = self.target;
        let reached = tokio::time::timeout(timeout, self.count.wait_for(|n| *n >= target)).await;
        self.task.abort();
        let times: Vec<f64> = self
            .done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .copied()
            .collect();
        ensure!(
            matches!(reached, Ok(Ok(_))),
            "{what}: {} of {target} after {timeout:?}",
            times.len()
        );
        Ok(times)
    }
}

/// Writes each worker's exit into its status, as kwok writes a finished
/// Pod's (`tools/kube/kwok/stages.yaml`, `pod-finished`), 32 in flight: the
/// workers run until told otherwise, and both `fanout`s release a deleted
/// DataJob only once no worker runs.
async fn finish_workers(client: &Client, expected: usize) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), JOBS_NAMESPACE);
    let workers = pods.list(&ListParams::default()).await?.items;
    ensure!(
        workers.len() == expected,
        "{} worker Pods, expected {expected}",
        workers.len()
    );
    futures::stream::iter(workers)
        .map(|pod| {
            let pods = pods.clone();
            async move {
                let status = exited(&pod)?;
                pods.patch_status(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(status),
                )
                .await
                .with_context(|| format!("finish worker {}", pod.name_any()))
                .map(drop)
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Deletes every DataJob, one DELETE each, 64 in flight, and waits until all
/// are gone: seconds from the first DELETE until the last was gone, and
/// each one's time from its DELETE to its `DELETED` event, sorted. A list
/// every 2 s catches what a watch that had to list again missed.
async fn delete_all(
    jobs: &Api<DataJob>,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<(f64, Vec<f64>)> {
    let gone: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (gone_tx, mut gone_rx) = tokio::sync::watch::channel(0usize);
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn({
        let gone = Arc::clone(&gone);
        let jobs = jobs.clone();
        async move {
            let stream = watcher(jobs, watcher::Config::default());
            futures::pin_mut!(stream);
            let mut synced = Some(synced_tx);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(synced) = synced.take() {
                            let _ = synced.send(());
                        }
                    }
                    Ok(watcher::Event::Delete(job)) => {
                        let mut gone = gone.lock().unwrap_or_else(|e| e.into_inner());
                        gone.entry(job.name_any()).or_insert_with(Instant::now);
                        gone_tx.send_replace(gone.len());
                    }
                    _ => {}
                }
            }
        }
    });
    synced_rx.await.context("the DataJobs' watch")?;
    let first = Instant::now();
    let sent: HashMap<String, Instant> = futures::stream::iter(0..count)
        .map(|i| {
            let jobs = jobs.clone();
            async move {
                let name = format!("job-{i:04}");
                let at = Instant::now();
                jobs.delete(&name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("delete {name}"))?;
                anyhow::Ok((name, at))
            }
        })
        .buffer_unordered(64)
        .try_collect()
        .await?;
    let deadline = Instant::now() + timeout;
    let mut listed = Instant::now();
    loop {
        let so_far = gone.lock().unwrap_or_else(|e| e.into_inner()).len();
        if so_far >= count {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{so_far} of {count} DataJobs gone after {timeout:?}"
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), gone_rx.changed()).await;
        if listed.elapsed() >= Duration::from_secs(2) {
            listed = Instant::now();
            let left: Vec<String> = jobs
                .list_metadata(&ListParams::default())
                .await?
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            let mut gone = gone.lock().unwrap_or_else(|e| e.into_inner());
            for name in sent.keys().filter(|name| !left.contains(name)) {
                gone.entry(name.clone()).or_insert(listed);
            }
        }
    }
    task.abort();
    let gone = gone.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let last = gone.values().max().copied().unwrap_or(first);
    let mut per_job: Vec<f64> = gone
        .iter()
        .filter_map(|(name, at)| Some(at.duration_since(*sent.get(name)?).as_secs_f64()))
        .collect();
    per_job.sort_by(f64::total_cmp);
    Ok((last.duration_since(first).as_secs_f64(), per_job))
}
