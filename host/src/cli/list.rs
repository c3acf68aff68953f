//! `policyhost policy list`: the policy ConfigMaps of a namespace and what
//! the host reports on each (the annotations it writes on them).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use policyhost::policies::configmap::{self, Module, POLICY_LABEL, Settings};
use policyhost::policies::report::Annotations;
use policyhost::runtime::Digest;
use serde::Serialize;

/// Arguments of `policy list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// The host's policy namespace; default: the kubeconfig context's namespace.
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Kubeconfig file; default: `$KUBECONFIG`, `~/.kube/config`, or in-cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    output: ListFormat,
}

/// `--output` values.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub(crate) enum ListFormat {
    /// One line per policy.
    #[default]
    Table,
    /// A JSON array.
    Json,
}

/// One policy ConfigMap as `list` reports it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    /// The policy name.
    policy: String,
    /// The ConfigMap name.
    configmap: String,
    /// Digest of the component the ConfigMap carries now.
    digest: Option<String>,
    /// `Serving`, `Rejected` or `Pending` (the host has not processed this content yet).
    status: &'static str,
    /// The digest the host serves from this ConfigMap.
    serving_digest: Option<String>,
    /// When that digest was put in service.
    loaded_at: Option<String>,
    /// Why the current content was rejected.
    error: Option<String>,
    /// Limits the host lowered to its maxima.
    clamped: Option<String>,
    /// Whose DataJobs may use it (`data.allowedNamespaces`), as written.
    allowed_namespaces: Option<String>,
}

/// Largest component `list` inflates to digest it.
const MAX_INFLATE: u64 = 64 << 20;

pub(crate) fn run(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let rows = runtime.block_on(async {
        let config = super::operate::client_config(args.kubeconfig.as_deref()).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("cannot build the Kubernetes client")?;
        let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let maps = api
            .list(&ListParams::default().labels(POLICY_LABEL))
            .await
            .with_context(|| format!("cannot list the policy ConfigMaps of {namespace}"))?;
        anyhow::Ok(maps.items.iter().map(row).collect::<Vec<_>>())
    })?;
    match args.output {
        ListFormat::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        ListFormat::Table => print_table(&rows),
    }
    Ok(ExitCode::SUCCESS)
}

fn row(map: &ConfigMap) -> Row {
    let data = map.data.clone().unwrap_or_default();
    let binary_data = map.binary_data.clone().unwrap_or_default();
    let annotations = Annotations::read(map.annotations());
    let current = configmap::fingerprint(&data, &binary_data);
    let pinned = Settings::parse(&data).ok().and_then(|s| s.sha256);
    let digest = pinned
        .or_else(|| {
            let bytes = Module::find(&binary_data).ok()?.decode(MAX_INFLATE).ok()?;
            Some(Digest::of(&bytes))
        })
        .map(|d| d.to_hex());
    let status = if annotations.observed != current {
        "Pending"
    } else if annotations.error.is_some() {
        "Rejected"
    } else {
        "Serving"
    };
    Row {
        policy: map.labels().get(POLICY_LABEL).cloned().unwrap_or_default(),
        configmap: map.name_any(),
        digest,
        status,
        serving_digest: annotations.loaded_digest,
        loaded_at: annotations.loaded_at,
        error: annotations.error,
        clamped: annotations.clamped,
        allowed_namespaces: data.get(configmap::keys::ALLOWED_NAMESPACES).cloned(),
    }
}

fn short(digest: Option<&String>) -> String {
    digest.map_or_else(|| "-".into(), |d| d.chars().take(12).collect())
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<20} {:<26} {:<13} {:<9} {:<13} {:<21} MESSAGE",
        "POLICY", "CONFIGMAP", "DIGEST", "STATUS", "SERVING", "LOADED-AT"
    );
    for row in rows {
        let message = row
            .error
            .clone()
            .or_else(|| row.clamped.as_ref().map(|c| format!("clamped: {c}")))
            .unwrap_or_default();
        println!(
            "{:<20} {:<26} {:<13} {:<9} {:<13} {:<21} {}",
            row.policy,
            row.configmap,
            short(row.digest.as_ref()),
            row.status,
            short(row.serving_digest.as_ref()),
            row.loaded_at.as_deref().unwrap_or("-"),
            message
        );
    }
}
