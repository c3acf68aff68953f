//! `policyhost run`: the operator against a cluster (kubeconfig or in-cluster).

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use policyhost::asks::Asks;
use policyhost::controller::decisions::{DEFAULT_DECISIONS, MAX_HISTORY};
use policyhost::fair::{Share, TeamError, Teams};
use policyhost::finalizer::Budget;
use policyhost::oci::signature::{Trusted, TrustedKey};
use policyhost::operator::{Operator, Options, Registries, StreamingLists};
use policyhost::policies::tenancy::Tenancy;
use policyhost::runtime::{self, AllowedKind, compile};
use policyhost::shadow::record;
use tracing::info;

use super::duration::{self, DurationArg};
use super::leader::LeaderArgs;
use super::terminal::eprintln;

/// Arguments of `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, or the in-cluster config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) operator: OperatorArgs,
    #[command(flatten)]
    leader: LeaderArgs,
    /// Where to serve /metrics, /healthz, /readyz and /leaderz.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    listen: SocketAddr,
}

/// The operator's settings, shared by `run` and `dev`.
#[derive(Debug, Clone, Args)]
pub(crate) struct OperatorArgs {
    /// Watch only this namespace (repeatable); default: all namespaces.
    #[arg(long = "namespace", value_name = "NS")]
    namespaces: Vec<String>,
    /// The instance name, the `policyhost.dev/managed-by` label of its children.
    #[arg(long, default_value = "policyhost")]
    instance: String,
    /// Concurrent reconciles.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Load `<name>.wasm` policies from this directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) policy_dir: Option<PathBuf>,
    /// Namespace of the policy ConfigMaps (label `policyhost.dev/policy`);
    /// default: `$POD_NAMESPACE` (downward API), else the service account's
    /// or the kubeconfig context's namespace, else `default`.
    #[arg(long, value_name = "NS")]
    pub(crate) policy_namespace: Option<String>,
    /// Largest policy component, after decompression or as an artifact's
    /// layer declares it (a Python policy is about 19 MB, a TypeScript one 12).
    #[arg(long, default_value_t = policyhost::policies::load::Config::default().max_module_bytes, value_name = "BYTES")]
    max_policy_bytes: u64,
    /// How far the host trusts policy publishers. `strict`: only the
    /// ConfigMap `policy-<name>` may provide the policy `<name>`, and every
    /// policy ConfigMap must list the namespaces whose DataJobs may use it
    /// (`data.allowedNamespaces`). `single-team`: any labelled ConfigMap
    /// may provide a name no other one provides, and one without
    /// `allowedNamespaces` serves every namespace. Either way, only
    /// `grant-<name>` grants `<name>` outbound HTTP.
    #[arg(long, value_enum, default_value_t, value_name = "MODE")]
    policy_tenancy: PolicyTenancyArg,
    /// A team and the policies it holds, as `NAME=PATTERN[,PATTERN…]`
    /// (repeatable; a pattern is a policy name or a prefix ending in `*`,
    /// the longest match decides). Loads, pulls, the compile slot and the
    /// compile budget are shared fairly between teams; a policy no rule
    /// names is a team of its own.
    #[arg(long = "team", value_name = "NAME=PATTERN,…", value_parser = parse_team)]
    teams: Vec<String>,
    /// A kind of child policies may create, as `APIVERSION/KIND` (repeatable);
    /// default: v1/Pod, v1/ConfigMap, v1/Service, v1/Secret,
    /// v1/PersistentVolumeClaim, batch/v1/Job.
    #[arg(long = "child-kind", value_name = "APIVERSION/KIND")]
    child_kinds: Vec<AllowedKind>,
    /// Average API writes per second (client-side limit). The default lets
    /// 1,000 DataJobs created at once (8 writes each) settle in under 10 s;
    /// on a busy shared API server, lower it.
    #[arg(long, default_value_t = Options::default().api_qps)]
    api_qps: NonZeroU32,
    /// API writes allowed at once above the average.
    #[arg(long, default_value_t = Options::default().api_burst)]
    api_burst: NonZeroU32,
    /// Start watches with streaming lists (`sendInitialEvents`).
    #[arg(long, value_enum, default_value_t)]
    streaming_lists: StreamingListsArg,
    /// How long a child's change waits at most before its DataJob is
    /// reconciled: the changes within it (children created, scheduled,
    /// started one by one) cost one pass and at most one status write. 0
    /// reconciles on every change.
    #[arg(long, default_value = "1s", value_parser = duration::seconds_before, value_name = "DURATION")]
    child_settle: DurationArg,
    /// How long the children's own changes (Pods started, finished) must go
    /// quiet before the pass, within --child-settle; the echoes of the
    /// operator's writes wait out the whole --child-settle. 0 reconciles on
    /// every change.
    #[arg(long, default_value = "200ms", value_parser = duration::millis_before, value_name = "DURATION")]
    child_quiet: DurationArg,
    /// Record each policy's recent serving calls (inputs and answer) as
    /// golden cases under this directory, one subdirectory per policy, for
    /// `policy test --replay`. The cases hold the DataJobs' data: files are
    /// the operator user's only (0600). Off by default.
    #[arg(long, value_name = "DIR")]
    record_calls: Option<PathBuf>,
    /// Cases kept per policy with `--record-calls`: the oldest is overwritten.
    #[arg(long, default_value_t = 200, value_name = "N")]
    record_calls_max: u32,
    /// Decisions kept per DataJob in its `status.decisions`
    /// (`policyhost explain`): digests, versions and what the host wrote,
    /// at most 20; 0 keeps none.
    #[arg(long, default_value_t = DEFAULT_DECISIONS, value_name = "N", value_parser = decision_history)]
    decision_history: usize,
    /// Failed cleanup calls before a deleted DataJob is reported
    /// `CleanupBlocked`, unless its `spec.cleanup.maxAttempts` says otherwise.
    #[arg(long, value_name = "N", default_value_t = Budget::default().max_attempts)]
    cleanup_max_attempts: u32,
    /// Seconds after deletion before a DataJob whose cleanup has not succeeded
    /// is reported `CleanupBlocked`, unless its `spec.cleanup.timeoutSeconds`
    /// says otherwise.
    #[arg(long, value_name = "DURATION", default_value_t = Budget::default().timeout.into(),
          value_parser = duration::seconds_before)]
    cleanup_timeout: DurationArg,
    /// Formerly how children were cached; the operator has one cache.
    /// `--cache indexed` still reads for one release, with a warning.
    #[arg(long, value_enum, hide = true)]
    cache: Option<FormerCacheArg>,
    /// The shortest `requeue-after` a reconcile result gets: a policy asking
    /// for less (0 included) waits this long.
    #[arg(long, default_value = "1s", value_parser = duration::seconds_before, value_name = "DURATION")]
    min_requeue: DurationArg,
    /// The shortest wait between two `cleanup` calls of one DataJob: the
    /// floor on `retry-after` and on a failed cleanup's backoff.
    #[arg(long, default_value = "1s", value_parser = duration::seconds_before, value_name = "DURATION")]
    min_cleanup_retry: DurationArg,
    /// Events recorded of one reconcile result; the rest are dropped and
    /// reported in one `EventsDropped` Event.
    #[arg(long, value_name = "N", default_value_t = Asks::default().events.per_result)]
    max_events_per_result: u32,
    /// Events per minute on one DataJob (host and policy Events), in bursts
    /// of as many; the rest are dropped and reported.
    #[arg(long, value_name = "N", default_value_t = Asks::default().events.per_minute)]
    events_per_minute: u32,
    /// The largest fair share a policy ConfigMap's `share` may ask for;
    /// larger ones are clamped (and reported on the ConfigMap).
    #[arg(long, value_name = "N", default_value_t = runtime::DEFAULT_MAX_SHARE,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_share: u32,
    /// The longest deadline a policy may get per call, in milliseconds
    /// (its ConfigMap's `timeout` and the default are clamped to it).
    #[arg(long, value_name = "DURATION", default_value_t = runtime::HostMaxima::default().0.timeout.into(),
          value_parser = duration::positive_millis_before)]
    max_timeout: DurationArg,
    /// Certificate authorities (a PEM file) the host's client for policies'
    /// outbound requests trusts besides the web's roots, e.g. a company CA.
    #[arg(long, value_name = "CA.pem", value_parser = read_roots)]
    outbound_ca: Option<Roots>,
    /// Certificate authorities (a PEM file) the host trusts besides the
    /// web's roots when it pulls policy artifacts from a registry.
    #[arg(long, value_name = "CA.pem", value_parser = read_roots)]
    registry_ca: Option<Roots>,
    /// Where pulled policy artifacts are kept by digest, so that a restart
    /// or a rollback pulls nothing (an `emptyDir` in the operator's Pod).
    #[arg(long, value_name = "DIR")]
    artifact_cache: Option<PathBuf>,
    /// A public key of the platform team's (PEM, ECDSA P-256, as `cosign
    /// generate-key-pair` writes `cosign.pub`); repeatable. Given any, the
    /// host runs only artifacts one of them signed (cosign's keyed format),
    /// and refuses components carried in ConfigMaps.
    #[arg(long, value_name = "KEY.pub", value_parser = read_key)]
    signature_key: Vec<TrustedKey>,
    /// With `--signature-key`: require signatures only of the versions that
    /// may serve DataJobs of these namespaces (their `allowedNamespaces`
    /// names one of them, or is `*`), instead of every version.
    #[arg(
        long,
        value_name = "NAMESPACES",
        value_delimiter = ',',
        requires = "signature_key"
    )]
    signed_namespaces: Option<Vec<String>>,
    /// The longest one pull of a policy artifact may take; a registry down
    /// or slow is tried again with backoff, the version in service serving.
    #[arg(long, default_value = "60s", value_parser = duration::seconds_before, value_name = "DURATION")]
    pull_timeout: DurationArg,
    /// How often the Secrets that outbound grants name are read again: a
    /// rotated credential loads its policy again within this time.
    #[arg(long, default_value = "60s", value_parser = duration::seconds_before, value_name = "DURATION")]
    grant_secret_refresh: DurationArg,
    /// Versions kept per policy for `policy rollback`, as revision
    /// ConfigMaps (`revision-<name>-<digest>`) in the policy namespace;
    /// 0 keeps none.
    #[arg(long, default_value_t = policyhost::policies::revisions::DEFAULT_KEEP, value_name = "N")]
    policy_history: usize,
    #[command(flatten)]
    compile: CompileArgs,
    #[command(flatten)]
    pub(crate) traces: TraceArgs,
}

/// Where traces go (docs/operator.md, "Traces and dashboards").
#[derive(Debug, Clone, Args)]
pub(crate) struct TraceArgs {
    /// Export a trace of each reconcile and cleanup pass over OTLP/HTTP to
    /// the collector at this base address (`http://jaeger:4318`). Off by
    /// default; the standard `OTEL_EXPORTER_OTLP_*`, `OTEL_BSP_*`,
    /// `OTEL_SERVICE_NAME` and `OTEL_TRACES_SAMPLER` variables apply, and
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` alone turns tracing on.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// The share of passes traced, from 0 to 1 (a pass is traced whole or
    /// not at all); default: `OTEL_TRACES_SAMPLER`, else every pass.
    #[arg(long, value_name = "RATIO")]
    otlp_sample_ratio: Option<f64>,
}

impl TraceArgs {
    /// The traces' configuration.
    pub(crate) fn config(&self) -> policyhost::traces::Config {
        policyhost::traces::Config {
            endpoint: self.otlp_endpoint.clone(),
            sample_ratio: self.otlp_sample_ratio,
        }
    }
}

/// Certificates read from a PEM file.
#[derive(Debug, Clone)]
pub(crate) struct Roots(Vec<rustls::pki_types::CertificateDer<'static>>);

impl Roots {
    /// The certificates.
    pub(crate) fn into_inner(self) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        self.0
    }
}

/// The certificates of a PEM file; none is an error.
pub(crate) fn read_roots(path: &str) -> Result<Roots, String> {
    use rustls::pki_types::pem::PemObject as _;
    let certificates = rustls::pki_types::CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|error| format!("cannot read certificates from {path}: {error}"))?;
    if certificates.is_empty() {
        return Err(format!("{path} holds no PEM certificate"));
    }
    Ok(Roots(certificates))
}

/// A trusted public key, named by its file's stem.
fn read_key(path: &str) -> Result<TrustedKey, String> {
    let pem = std::fs::read(path).map_err(|error| format!("cannot read {path}: {error}"))?;
    let name = Path::new(path).file_stem().map_or_else(
        || path.to_owned(),
        |stem| stem.to_string_lossy().into_owned(),
    );
    TrustedKey::from_pem(&name, &pem).map_err(|error| format!("{path}: {error}"))
}

/// How policy components are compiled.
#[derive(Debug, Clone, Args)]
pub(crate) struct CompileArgs {
    /// Address space a policy's compile process may map, in bytes; a
    /// compile that needs more is stopped and the version rejected.
    #[arg(long, value_name = "BYTES", default_value_t = compile::DEFAULT_MEMORY_BYTES)]
    compile_memory: u64,
    /// Seconds a policy's compile may take before it is killed and the
    /// version rejected.
    #[arg(long, value_name = "DURATION", default_value_t = compile::DEFAULT_TIMEOUT.into(),
          value_parser = duration::seconds_before)]
    compile_timeout: DurationArg,
    /// Seconds of compile time each team (`--team`) may use per ten
    /// minutes; past that its next version is refused (`CompileBudgetExhausted`) until
    /// the time is regained. 0: no budget.
    #[arg(long, value_name = "DURATION", default_value_t = compile::CompileBudget::DEFAULT.seconds.into(),
          value_parser = duration::seconds_before)]
    compile_budget: DurationArg,
    /// Compile in the operator's own process: static limits only, no
    /// memory or time cap (for platforms where a child process cannot run).
    #[arg(long)]
    compile_in_process: bool,
}

impl CompileArgs {
    /// The compile configuration these arguments stand for.
    fn config(&self) -> compile::CompileConfig {
        compile::CompileConfig {
            process: (!self.compile_in_process).then(|| {
                compile::CompileProcess::policyhost(
                    self.compile_memory,
                    self.compile_timeout.0.max(Duration::from_secs(1)),
                )
            }),
            budget: (!self.compile_budget.0.is_zero()).then_some(compile::CompileBudget {
                seconds: self.compile_budget.0,
                ..compile::CompileBudget::DEFAULT
            }),
            ..compile::CompileConfig::default()
        }
    }
}

/// The one value `--cache` took in the product.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum FormerCacheArg {
    /// The operator's only cache.
    Indexed,
}

/// `--streaming-lists` values.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub(crate) enum StreamingListsArg {
    /// Ask the API server at start-up.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never (paginated lists).
    Never,
}

/// `--policy-tenancy` values.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub(crate) enum PolicyTenancyArg {
    /// A host shared by teams: policy names and grants follow ConfigMap names.
    #[default]
    Strict,
    /// A host whose publishers are one team.
    SingleTeam,
}

impl OperatorArgs {
    /// The instance name (for `policyhost dev`'s leader election).
    #[cfg(feature = "dev")]
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// The operator options these arguments stand for.
    ///
    /// # Errors
    ///
    /// `--team` rules that together are unclear (each was checked alone).
    pub(crate) fn options(&self, listen: Option<SocketAddr>) -> Result<Options, TeamError> {
        let teams = Teams::parse(self.teams.iter().map(String::as_str))?;
        if self.cache.is_some() {
            eprintln!(
                "warning: `--cache indexed` is the operator's only cache, and the next release refuses the flag: drop it"
            );
        }
        let defaults = Options::default();
        let mut runtime = defaults.runtime.clone();
        runtime.max_share = Share::new(self.max_share).unwrap_or_default();
        runtime.engine.maxima.0.timeout = self.max_timeout.0;
        runtime.compile = self.compile.config();
        if let Some(Roots(roots)) = &self.outbound_ca {
            runtime.outbound.extra_roots.clone_from(roots);
        }
        Ok(Options {
            namespaces: self.namespaces.clone(),
            instance: self.instance.clone(),
            workers: self.workers,
            policy_dir: self.policy_dir.clone(),
            policy_namespace: self.policy_namespace.clone(),
            max_policy_bytes: self.max_policy_bytes,
            policy_tenancy: match self.policy_tenancy {
                PolicyTenancyArg::Strict => Tenancy::Strict,
                PolicyTenancyArg::SingleTeam => Tenancy::SingleTeam,
            },
            teams,
            grant_secret_refresh: self.grant_secret_refresh.0,
            policy_history: self.policy_history,
            child_settle: self.child_settle.0,
            child_quiet: self.child_quiet.0,
            decision_history: self.decision_history,
            record_calls: self.record_calls.clone().map(|dir| record::Config {
                dir,
                per_policy: self.record_calls_max,
            }),
            child_kinds: if self.child_kinds.is_empty() {
                defaults.child_kinds.clone()
            } else {
                self.child_kinds.clone()
            },
            api_qps: self.api_qps,
            api_burst: self.api_burst,
            listen,
            streaming_lists: match self.streaming_lists {
                StreamingListsArg::Auto => StreamingLists::Auto,
                StreamingListsArg::Always => StreamingLists::Always,
                StreamingListsArg::Never => StreamingLists::Never,
            },
            cleanup: Budget {
                max_attempts: self.cleanup_max_attempts,
                timeout: self.cleanup_timeout.0,
            },
            registries: Registries {
                extra_roots: self
                    .registry_ca
                    .clone()
                    .map(|Roots(roots)| roots)
                    .unwrap_or_default(),
                cache_dir: self.artifact_cache.clone(),
                pull_timeout: self.pull_timeout.0,
                trusted: Trusted::new(self.signature_key.clone()),
                signed_namespaces: self.signed_namespaces.clone(),
            },
            asks: Asks {
                min_requeue: self.min_requeue.0,
                min_cleanup_retry: self.min_cleanup_retry.0,
                events: policyhost::apply::events::Limits {
                    per_result: self.max_events_per_result,
                    per_minute: self.events_per_minute,
                },
            },
            runtime,
            ..defaults
        })
    }
}

/// One `--team` rule, checked alone.
fn parse_team(text: &str) -> Result<String, String> {
    Teams::parse([text])
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let config = policyhost::operator::client_config(args.kubeconfig.as_deref()).await?;
        let mut options = args.operator.options(Some(args.listen))?;
        (options.leader, options.shards) =
            args.leader
                .coordination(true, &args.operator.instance, &config.default_namespace);
        if let Some(shards) = &options.shards {
            info!(
                identity = %shards.identity,
                leases = %format!("{}-*", shards.lease_name),
                namespace = %shards.namespace,
                "sharded: serving this replica's share of the DataJobs"
            );
        }
        if let Some(election) = &options.leader {
            info!(
                identity = %election.identity,
                lease = %election.lease_name,
                namespace = %election.namespace,
                "leader election on"
            );
        }
        let namespace = options
            .policy_namespace
            .take()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|ns| !ns.is_empty())
            })
            .unwrap_or_else(|| config.default_namespace.clone());
        info!(%namespace, "watching policy ConfigMaps (DataJobs in this namespace are refused)");
        options.policy_namespace = Some(namespace);
        let operator = Operator::new(config, options).await?;
        if let Some(addr) = operator.listen_addr() {
            info!(%addr, "serving /metrics, /healthz and /readyz");
        }
        operator.run(super::shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `--decision-history`: at most [`MAX_HISTORY`].
fn decision_history(text: &str) -> Result<usize, String> {
    let n: usize = text.parse().map_err(|e| format!("{e}"))?;
    if n > MAX_HISTORY {
        return Err(format!(
            "at most {MAX_HISTORY} decisions are kept per DataJob"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_twenty_decisions_are_kept_per_datajob() {
        assert_eq!(decision_history("0"), Ok(0));
        assert_eq!(decision_history("20"), Ok(20));
        let refused = decision_history("21").unwrap_err();
        assert!(refused.contains("at most 20"), "{refused}");
        assert!(decision_history("five").is_err());
    }

    /// `CompileArgs` parsed from `args`, as the operator's flags.
    fn compile_config(args: &[&str]) -> compile::CompileConfig {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            compile: CompileArgs,
        }
        let args = std::iter::once("operate").chain(args.iter().copied());
        <Flags as clap::Parser>::try_parse_from(args)
            .expect("flags")
            .compile
            .config()
    }

    #[test]
    fn the_former_cache_flag_reads_only_as_indexed() {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            operator: OperatorArgs,
        }
        let parse = |args: &[&str]| {
            let args = std::iter::once("operate").chain(args.iter().copied());
            <Flags as clap::Parser>::try_parse_from(args)
                .map(|flags| flags.operator.cache.is_some())
        };
        assert!(matches!(parse(&[]), Ok(false)));
        assert!(matches!(parse(&["--cache", "indexed"]), Ok(true)));
        let refused = parse(&["--cache", "naive"]).expect_err("naive is gone");
        assert!(
            refused.to_string().contains("invalid value 'naive'"),
            "{refused}"
        );
    }

    #[test]
    fn the_compile_budget_is_a_minute_per_ten_by_default_and_zero_lifts_it() {
        let budget = |args: &[&str]| compile_config(args).budget;
        assert_eq!(budget(&[]), Some(compile::CompileBudget::DEFAULT));
        assert_eq!(
            budget(&["--compile-budget", "5"]),
            Some(compile::CompileBudget {
                seconds: Duration::from_secs(5),
                window: Duration::from_secs(600),
            })
        );
        assert_eq!(budget(&["--compile-budget", "0"]), None);
        let in_process = compile_config(&["--compile-in-process"]);
        assert_eq!(in_process.process, None);
        assert_eq!(in_process.budget, Some(compile::CompileBudget::DEFAULT));
    }
}
