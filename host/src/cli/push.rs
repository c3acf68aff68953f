//! `policyhost policy push`: check a component, then create or update its
//! policy ConfigMap by server-side apply (gzip'd when it would not fit).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use policyhost::grants::grant_name;
use policyhost::oci::signature::SigningKey;
use policyhost::oci::{self, Reference};
use policyhost::policies::configmap::{self, Compression, Settings, keys};
use policyhost::publisher::publish;
use policyhost::runtime::{AllowedKind, PolicySpec};

use super::cluster::{ClusterArgs, block_on};
use super::duration::{self, DurationArg};
use super::registry::RegistryArgs;
use super::terminal::{eprintln, println};

/// Arguments of `policy push`.
#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// The policy component (`.wasm`).
    file: PathBuf,
    /// The policy's name, as DataJobs name it in `spec.policy`.
    #[arg(long)]
    name: String,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Linear memory cap per call, e.g. `64Mi`.
    #[arg(long, value_name = "QUANTITY")]
    memory: Option<String>,
    /// Fuel per call.
    #[arg(long, value_name = "N")]
    fuel: Option<String>,
    /// Deadline per call, such as `2s` or `500ms`.
    #[arg(long, value_name = "DURATION", value_parser = duration::millis_before)]
    timeout: Option<DurationArg>,
    /// Most desired children per result.
    #[arg(long, value_name = "N")]
    max_children: Option<String>,
    /// Most bytes of strings per result, e.g. `4Mi`.
    #[arg(long, value_name = "QUANTITY")]
    max_output_bytes: Option<String>,
    /// Kinds the policy may create, e.g. `v1/Pod,batch/v1/Job`; default:
    /// every kind the host manages.
    #[arg(long, value_name = "KINDS")]
    allowed_kinds: Option<String>,
    /// Namespaces whose DataJobs may use the policy, e.g. `team-a,team-a-ci`,
    /// or `*` for all. Required: a host in its default, strict tenancy
    /// refuses a policy that does not say.
    #[arg(long, value_name = "NAMESPACES")]
    allowed_namespaces: String,
    /// A line for people, kept in the ConfigMap.
    #[arg(long)]
    description: Option<String>,
    /// Fair share beside other policies (workers, call threads, API
    /// writes); default 1, clamped to the host's `--max-share`.
    #[arg(long, value_name = "N")]
    share: Option<String>,
    /// When to gzip the component.
    #[arg(long, value_enum, default_value_t)]
    gzip: GzipArg,
    /// Publish the version as the policy's candidate (ConfigMap
    /// `candidate-<name>`): called beside the serving version on the same
    /// inputs, its answers compared and never applied (`policy diff`,
    /// `policy promote`).
    #[arg(long)]
    shadow: bool,
    #[command(flatten)]
    oci: OciArgs,
    #[command(flatten)]
    wait: WaitArgs,
}

/// `--wait` and `--wait-timeout`, of every command that publishes.
#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// Wait for the host's verdict; exit 3 if it rejects the version.
    #[arg(long)]
    wait: bool,
    /// How long `--wait` waits.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = duration::seconds_before)]
    wait_timeout: DurationArg,
}

impl WaitArgs {
    /// With `--wait`, waits for the host's verdict on `map` (applied) and
    /// prints it: `doing` (`serving`, `shadowing`) the digest, exit 0; or
    /// the refusal and what still serves, exit [`REJECTED`]. Without, exit 0.
    pub(crate) async fn verdict(
        &self,
        client: &kube::Client,
        map: &k8s_openapi::api::core::v1::ConfigMap,
        doing: &str,
    ) -> anyhow::Result<ExitCode> {
        if !self.wait {
            return Ok(ExitCode::SUCCESS);
        }
        let verdict = publish::wait_observed(client, map, self.wait_timeout.0).await?;
        if let Some(error) = verdict.error {
            println!("rejected: {error}");
            if let Some(serving) = verdict.loaded_digest {
                println!("still serving sha256:{serving}");
            }
            return Ok(ExitCode::from(REJECTED));
        }
        let since = verdict.loaded_at.unwrap_or_default();
        match verdict.loaded_digest {
            Some(digest) => println!("{doing} sha256:{digest} since {since}"),
            None => println!("{doing} since {since}"),
        }
        if let Some(clamped) = verdict.clamped {
            println!("clamped by the host: {clamped}");
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Where `policy push --oci` puts the component, and how it gets in.
#[derive(Debug, Args)]
pub(crate) struct OciArgs {
    /// Push the component as an OCI artifact to `REGISTRY/REPOSITORY:TAG`
    /// and publish a ConfigMap naming it by its digest, instead of one
    /// carrying the bytes.
    #[arg(long, value_name = "REGISTRY/REPOSITORY:TAG")]
    oci: Option<Reference>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Sign the artifact with this private key, in cosign's keyed format,
    /// as `cosign sign --key` does: cosign's key file (its password in
    /// COSIGN_PASSWORD), or an unencrypted PKCS#8 PEM.
    #[arg(long, value_name = "cosign.key", requires = "oci")]
    sign_key: Option<PathBuf>,
}

impl OciArgs {
    /// Pushes `component` as the artifact `--oci` names: the reference
    /// pinned by the manifest's digest.
    async fn push(&self, component: &[u8]) -> anyhow::Result<Option<Reference>> {
        let Some(reference) = &self.oci else {
            return Ok(None);
        };
        // The key opens before anything is pushed: a wrong password leaves
        // no unsigned artifact behind.
        let key = self.sign_key.as_deref().map(signing_key).transpose()?;
        let client = super::registry::client(self.registry.registry_ca.as_deref())?;
        let credentials = super::registry::credentials(self.registry.registry_auth.as_deref())?;
        let login = credentials.for_registry(reference.registry());
        let digest = oci::push::push(&client, reference, login, component)
            .await
            .with_context(|| format!("cannot push to {reference}"))?;
        let pinned = reference.with_digest(digest);
        println!("pushed {reference} as {pinned}");
        if let Some(key) = key {
            let signed = key.sign(reference, &digest);
            oci::push::push_signature(&client, reference, login, &digest, &signed)
                .await
                .with_context(|| format!("cannot push the signature of {pinned}"))?;
            println!("signed {pinned} ({})", oci::signature::tag(&digest));
        }
        Ok(Some(pinned))
    }
}

/// Reads `--sign-key`, opening cosign's key file with COSIGN_PASSWORD.
fn signing_key(path: &std::path::Path) -> anyhow::Result<SigningKey> {
    let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let password = std::env::var_os("COSIGN_PASSWORD");
    SigningKey::from_pem(&pem, password.as_ref().map(|p| p.as_encoded_bytes()))
        .with_context(|| format!("{}", path.display()))
}

/// `--gzip` values.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub(crate) enum GzipArg {
    /// Only when it would not fit in a ConfigMap uncompressed.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Exit code of `--wait` when the host rejects the version.
pub(crate) const REJECTED: u8 = 3;

impl PushArgs {
    /// The ConfigMap `data` these flags ask for, in the ConfigMap's syntax.
    fn data(&self) -> BTreeMap<String, String> {
        let timeout = self.timeout.map(|t| t.to_string());
        [
            (keys::MEMORY, self.memory.clone()),
            (keys::FUEL, self.fuel.clone()),
            (keys::TIMEOUT, timeout),
            (keys::MAX_CHILDREN, self.max_children.clone()),
            (keys::MAX_OUTPUT_BYTES, self.max_output_bytes.clone()),
            (keys::ALLOWED_KINDS, self.allowed_kinds.clone()),
            (
                keys::ALLOWED_NAMESPACES,
                Some(self.allowed_namespaces.clone()),
            ),
            (keys::DESCRIPTION, self.description.clone()),
            (keys::SHARE, self.share.clone()),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_owned(), value?)))
        .collect()
    }
}

pub(crate) fn run(args: &PushArgs) -> anyhow::Result<ExitCode> {
    configmap::check_name(&args.name)?;
    let settings = Settings::parse(&args.data())?;
    let bytes = super::read(&args.file)?;
    let runtime = super::runtime(1)?;
    let spec = PolicySpec::new(&args.name)
        .limits(settings.limits)
        .share(settings.share)
        .allowed_kinds(
            settings
                .allowed_kinds
                .clone()
                .unwrap_or_else(AllowedKind::defaults),
        );
    let Some(checked) = super::check::checked_for_grant(&runtime, spec, &bytes) else {
        return Ok(ExitCode::FAILURE);
    };
    let policy = checked.policy;
    if let Some(import) = &checked.needs_grant {
        eprintln!(
            "note: the policy imports `{import}`: a host serves it only with its grant, the ConfigMap `{}` (the platform team's)",
            grant_name(&args.name)
        );
    }
    for clamped in policy.clamped() {
        eprintln!("warning: {clamped} (this binary's default maxima; the host applies its own)");
    }
    let compression = match args.gzip {
        GzipArg::Auto => Compression::Auto,
        GzipArg::Always => Compression::Always,
        GzipArg::Never => Compression::Never,
    };
    block_on(async {
        let (client, namespace) = args.cluster.connect().await?;
        let mut map = match args.oci.push(&bytes).await? {
            Some(artifact) => {
                configmap::build_artifact(&args.name, &namespace, artifact, &bytes, &settings)?
            }
            None => configmap::build(&args.name, &namespace, &bytes, &settings, compression)?,
        };
        if args.shadow {
            map = configmap::into_candidate(map, &args.name);
        }
        publish::apply(&client, &map).await?;
        let payload = map
            .binary_data
            .as_ref()
            .and_then(|b| b.values().next())
            .map_or(0, |p| p.0.len());
        let gzip = map
            .binary_data
            .as_ref()
            .is_some_and(|b| b.contains_key(configmap::MODULE_GZ_KEY));
        println!(
            "configmap/{} applied in namespace {namespace}: {}policy {} sha256:{} ({} bytes{})",
            kube::ResourceExt::name_any(&map),
            if args.shadow { "candidate of " } else { "" },
            args.name,
            policy.digest(),
            bytes.len(),
            if gzip {
                format!(", {payload} gzip'd")
            } else {
                String::new()
            }
        );
        let doing = if args.shadow { "shadowing" } else { "serving" };
        args.wait.verdict(&client, &map, doing).await
    })
}
