//! `policyhost dev --rollout POLICY=FILE`: once the applied DataJobs have
//! settled, FILE is published as the candidate of POLICY and rolled out to
//! half of its DataJobs, then to all of them, a few seconds a step, each
//! transition the host makes printed as it comes; a rollout that completes
//! is promoted. The path is production's: the same ConfigMaps and the same
//! publisher calls as `policy push --shadow`, `policy rollout` and `policy
//! promote`.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};
use policyhost::policies::access::Access;
use policyhost::policies::configmap::{self, Compression, Settings};
use policyhost::policies::rollout::plan::{DEFAULT_MIN_CALLS, DEFAULT_TOLERANCE, Points, Step};
use policyhost::policies::rollout::{Phase, Plan};
use policyhost::publisher::candidate::Policy;
use policyhost::publisher::publish;
use policyhost::runtime::Digest;

use super::terminal::println;

/// How long each step of the demonstration lasts.
const STEP_WAIT: Duration = Duration::from_secs(3);

/// `POLICY=FILE`: the component to roll out as the candidate of a policy.
#[derive(Debug, Clone)]
pub(crate) struct RolloutArg {
    policy: String,
    file: PathBuf,
}

impl FromStr for RolloutArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('=') {
            Some((policy, file)) if !policy.is_empty() && !file.is_empty() => Ok(Self {
                policy: policy.to_owned(),
                file: PathBuf::from(file),
            }),
            _ => Err(format!("`{text}` is not POLICY=FILE")),
        }
    }
}

/// Publishes the candidate, rolls it out and promotes it; the candidate's
/// digest once it serves, or `None` when the host rolled it back.
pub(crate) async fn roll_out(
    client: &Client,
    namespace: &str,
    arg: &RolloutArg,
    timeout: Duration,
) -> anyhow::Result<Option<String>> {
    let RolloutArg { policy, file } = arg;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let settings = Settings {
        namespaces: Some(Access::Everyone),
        ..Settings::default()
    };
    let map = configmap::into_candidate(
        configmap::build(policy, namespace, &bytes, &settings, Compression::Auto)?,
        policy,
    );
    publish::apply(client, &map).await?;
    let verdict = publish::wait_observed(client, &map, timeout).await?;
    if let Some(error) = verdict.error {
        bail!("the candidate of {policy} was refused: {error}");
    }
    println!(
        "candidate of {policy}: sha256:{} ({}), called beside the serving version",
        Digest::of(&bytes),
        file.display()
    );
    // In a cluster the platform team creates it; here, the demonstration.
    let rollout: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": configmap::rollout_name(policy), "namespace": namespace}
    }))?;
    match Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &rollout)
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        other => _ = other.context("cannot create the rollout's ConfigMap")?,
    }
    let plan = Plan {
        digest: Digest([0; 32]),
        steps: vec![Step::Share(Points(5_000)), Step::Share(Points(10_000))],
        step_wait: STEP_WAIT,
        tolerance: DEFAULT_TOLERANCE,
        min_calls: DEFAULT_MIN_CALLS,
        control: policyhost::policies::rollout::plan::Control::Run,
    };
    let publisher = Policy::new(client.clone(), namespace, policy);
    publisher.start_rollout(plan, false).await?;
    println!("policyhost policy rollout {policy} start --step 50% --step 100% --step-wait 3s");
    let deadline = Instant::now() + timeout;
    let mut shown = None;
    let phase = loop {
        if let Some(status) = publisher
            .rollout()
            .await?
            .and_then(|rollout| rollout.status)
        {
            let key = (status.reason.clone(), status.at_ms);
            if shown.as_ref() != Some(&key) {
                println!("rollout: {}: {}", status.reason, status.message);
                shown = Some(key);
            }
            if matches!(
                status.phase,
                Phase::Complete | Phase::RolledBack | Phase::Aborted
            ) {
                break status.phase;
            }
        }
        if Instant::now() > deadline {
            bail!("the rollout of {policy} did not end within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if phase != Phase::Complete {
        return Ok(None);
    }
    let serving = publisher.promote(client, false).await?;
    let verdict = publish::wait_observed(client, &serving, timeout).await?;
    println!(
        "policyhost policy promote {policy}: sha256:{} serves every DataJob",
        verdict.loaded_digest.as_deref().unwrap_or("?")
    );
    Ok(verdict.loaded_digest)
}
