//! `policyhost policy list`: the policies of a namespace, the serving
//! version and the candidate of each side by side, and what the host
//! reports on them (the annotations it writes on their ConfigMaps).

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use policyhost::policies::configmap::{self, Module, Settings};
use policyhost::policies::report::Annotations;
use policyhost::runtime::Digest;
use policyhost::shadow::Summary;
use serde::Serialize;

use super::cluster::{ClusterArgs, block_on};
use super::terminal::{self, println};
use policyhost::policies::rollout::Status;
use policyhost::vocabulary::{
    PINS_ROLE, POLICY_LABEL, ROLE_LABEL, ROLLOUT_ROLE, ROLLOUT_STATUS_ANNOTATION,
};

/// Arguments of `policy list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
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
    /// The SDK the version in service was built with (`rust 0.1.0`), as
    /// its component says.
    sdk: Option<String>,
    /// Whose DataJobs may use it (`data.allowedNamespaces`), as written.
    allowed_namespaces: Option<String>,
    /// The policy's candidate, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate: Option<Box<Row>>,
    /// What the candidate's shadow calls came to (on a candidate's row).
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow: Option<Summary>,
    /// The policy's pins as `pins-<name>` holds them: `NAMESPACE` or
    /// `NAMESPACE.DATAJOB` → `sha256:…`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pins: BTreeMap<String, String>,
    /// Why the host refused the pins (those in force before stay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pins_error: Option<String>,
    /// Where the rollout of its candidate is, as the host wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout: Option<Status>,
    /// Why the host refused the rollout's plan (the one in force stays).
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout_error: Option<String>,
}

/// Largest component `list` inflates to digest it.
const MAX_INFLATE: u64 = 64 << 20;

pub(crate) fn run(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let maps = block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let maps = api
            .list(&ListParams::default().labels(POLICY_LABEL))
            .await
            .with_context(|| format!("cannot list the policy ConfigMaps of {namespace}"))?;
        anyhow::Ok(maps.items)
    })?;
    let rows = side_by_side(&maps);
    match args.output {
        ListFormat::Json => terminal::print_json(&rows)?,
        ListFormat::Table => print_table(&rows),
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per serving ConfigMap, with its policy's candidate and pins
/// beside it; a candidate whose policy has no serving ConfigMap gets a row
/// of its own (as does a ConfigMap of a role the host refuses).
fn side_by_side(maps: &[ConfigMap]) -> Vec<Row> {
    let role = |map: &ConfigMap| map.labels().get(ROLE_LABEL).cloned();
    let mut rows: Vec<Row> = maps.iter().filter(|m| role(m).is_none()).map(row).collect();
    for pins in maps
        .iter()
        .filter(|m| role(m).as_deref() == Some(PINS_ROLE))
    {
        let policy = pins.labels().get(POLICY_LABEL);
        if let Some(serving) = rows.iter_mut().find(|r| Some(&r.policy) == policy) {
            serving.pins = pins.data.clone().unwrap_or_default();
            serving.pins_error = Annotations::read(pins.annotations()).error;
        }
    }
    for rollout in maps
        .iter()
        .filter(|m| role(m).as_deref() == Some(ROLLOUT_ROLE))
    {
        let policy = rollout.labels().get(POLICY_LABEL);
        if let Some(serving) = rows.iter_mut().find(|r| Some(&r.policy) == policy) {
            serving.rollout = Status::read(
                rollout
                    .annotations()
                    .get(ROLLOUT_STATUS_ANNOTATION)
                    .map(String::as_str),
            );
            serving.rollout_error = Annotations::read(rollout.annotations()).error;
        }
    }
    let is_candidate = |map: &ConfigMap| {
        role(map).is_some_and(|role| role.as_str() != PINS_ROLE && role.as_str() != ROLLOUT_ROLE)
    };
    for candidate in maps.iter().filter(|m| is_candidate(m)) {
        let mut shown = row(candidate);
        shown.shadow = Summary::read(Some(candidate.annotations()));
        match rows
            .iter_mut()
            .find(|r| r.policy == shown.policy && r.candidate.is_none())
        {
            Some(serving) => serving.candidate = Some(Box::new(shown)),
            None => rows.push(Row {
                policy: shown.policy.clone(),
                configmap: String::new(),
                digest: None,
                status: "None",
                serving_digest: None,
                loaded_at: None,
                error: None,
                clamped: None,
                sdk: None,
                allowed_namespaces: None,
                candidate: Some(Box::new(shown)),
                shadow: None,
                pins: BTreeMap::new(),
                pins_error: None,
                rollout: None,
                rollout_error: None,
            }),
        }
    }
    rows
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
        sdk: annotations.sdk,
        allowed_namespaces: data.get(configmap::keys::ALLOWED_NAMESPACES).cloned(),
        candidate: None,
        shadow: None,
        pins: BTreeMap::new(),
        pins_error: None,
        rollout: None,
        rollout_error: None,
    }
}

fn short(digest: Option<&String>) -> String {
    digest.map_or_else(|| "-".into(), |d| d.chars().take(12).collect())
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<20} {:<26} {:<13} {:<9} {:<13} {:<17} {:<21} {:<13} {:<9} {:<17} {:<22} {:<5} {:<14} MESSAGE",
        "POLICY",
        "CONFIGMAP",
        "DIGEST",
        "STATUS",
        "SERVING",
        "SDK",
        "LOADED-AT",
        "CANDIDATE",
        "CAND-STAT",
        "CAND-SDK",
        "SAME/DIFF/FAULT/SKIP",
        "PINS",
        "ROLLOUT"
    );
    for row in rows {
        let candidate = row.candidate.as_deref();
        let message = [Some(row), candidate]
            .into_iter()
            .flatten()
            .find_map(|r| {
                r.error
                    .clone()
                    .or_else(|| r.clamped.as_ref().map(|c| format!("clamped: {c}")))
            })
            .or_else(|| row.pins_error.as_ref().map(|e| format!("pins: {e}")))
            .or_else(|| row.rollout_error.as_ref().map(|e| format!("rollout: {e}")))
            .unwrap_or_default();
        let rollout = row.rollout.as_ref().map_or_else(
            || "-".to_owned(),
            |status| format!("{:?} {}", status.phase, status.step + 1),
        );
        let shadow = candidate.and_then(|c| c.shadow.as_ref()).map_or_else(
            || "-".to_owned(),
            |s| format!("{}/{}/{}/{}", s.same, s.differs, s.faults, s.skipped),
        );
        println!(
            "{:<20} {:<26} {:<13} {:<9} {:<13} {:<17} {:<21} {:<13} {:<9} {:<17} {:<22} {:<5} {:<14} {}",
            row.policy,
            if row.configmap.is_empty() {
                "-"
            } else {
                &row.configmap
            },
            short(row.digest.as_ref()),
            row.status,
            short(row.serving_digest.as_ref()),
            row.sdk.as_deref().unwrap_or("-"),
            row.loaded_at.as_deref().unwrap_or("-"),
            short(candidate.and_then(|c| c.serving_digest.as_ref())),
            candidate.map_or("-", |c| c.status),
            candidate.and_then(|c| c.sdk.as_deref()).unwrap_or("-"),
            shadow,
            row.pins.len(),
            rollout,
            message
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::api::ObjectMeta;
    use policyhost::vocabulary::CANDIDATE_ROLE;

    use super::*;

    fn map(name: &str, policy: &str, candidate: bool) -> ConfigMap {
        map_in(name, policy, candidate.then_some(CANDIDATE_ROLE))
    }

    fn map_in(name: &str, policy: &str, role: Option<&str>) -> ConfigMap {
        let mut labels = BTreeMap::from([(POLICY_LABEL.to_owned(), policy.to_owned())]);
        if let Some(role) = role {
            labels.insert(ROLE_LABEL.to_owned(), role.to_owned());
        }
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_candidate_sits_beside_its_serving_version_or_on_a_row_of_its_own() {
        let rows = side_by_side(&[
            map("candidate-etl", "etl", true),
            map("policy-etl", "etl", false),
            map("candidate-reports", "reports", true),
        ]);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].configmap, "policy-etl");
        assert_eq!(
            rows[0].candidate.as_ref().map(|c| c.configmap.as_str()),
            Some("candidate-etl")
        );
        assert_eq!(
            (rows[1].policy.as_str(), rows[1].status),
            ("reports", "None")
        );
        assert_eq!(
            rows[1].candidate.as_ref().map(|c| c.configmap.as_str()),
            Some("candidate-reports")
        );
    }

    #[test]
    fn a_rollout_sits_on_its_policys_row_and_is_no_candidate() {
        let mut rollout = map_in("rollout-etl", "etl", Some(ROLLOUT_ROLE));
        let status = Status {
            digest: "ab".repeat(32),
            phase: policyhost::policies::rollout::Phase::Progressing,
            step: 1,
            step_started_ms: 1,
            paused_after_ms: None,
            reason: "StepStarted".into(),
            message: "step 2 of 3".into(),
            at_ms: 1,
        };
        rollout.metadata.annotations = Some(BTreeMap::from([(
            ROLLOUT_STATUS_ANNOTATION.to_owned(),
            status.to_annotation(),
        )]));
        let rows = side_by_side(&[rollout, map("policy-etl", "etl", false)]);
        assert_eq!(rows.len(), 1, "no candidate row for the rollout");
        assert!(rows[0].candidate.is_none());
        assert_eq!(rows[0].rollout.as_ref(), Some(&status));
    }

    #[test]
    fn pins_sit_on_their_policys_row_and_are_no_candidate() {
        let mut pins = map_in("pins-etl", "etl", Some(PINS_ROLE));
        pins.data = Some(BTreeMap::from([(
            "team-b".to_owned(),
            "sha256:ab".to_owned(),
        )]));
        let rows = side_by_side(&[pins, map("policy-etl", "etl", false)]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert!(rows[0].candidate.is_none(), "{rows:?}");
        assert_eq!(
            rows[0].pins.get("team-b").map(String::as_str),
            Some("sha256:ab")
        );
    }
}
