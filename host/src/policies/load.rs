//! Loading one policy version from a ConfigMap's content: decode (or pull
//! the artifact it names) → digest (and pin check) → compile (cached by
//! digest and engine) → validate world and imports → trial instantiation.
//!
//! The pull ([`fetch`]) is apart from the rest ([`load`]): it waits on the
//! network, the rest on the CPU, and the caller runs them in different
//! places so that a slow registry never holds a load. Every step of the
//! load runs off the async runtime; nothing here touches the registry: the
//! caller swaps a loaded version in, or records the rejection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;

use super::access::Access;
use super::configmap::{self, Module, Settings};
use super::tenancy::Tenancy;
use crate::fair::Teams;
use crate::oci;
use crate::outbound::Outbound;
use crate::runtime::{self, AllowedKind, Digest, Policy, PolicySpec, Refusal, Runtime};

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a policy version was rejected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ConfigMap is malformed: no component, bad gzip, bad settings,
    /// digest mismatch, too large.
    #[error(transparent)]
    Config(#[from] configmap::Error),
    /// The component is not a loadable policy: corrupt, a core module, too
    /// expensive to compile, the wrong world, an import the sandbox does
    /// not provide.
    #[error(transparent)]
    Component(runtime::Error),
    /// The component loaded but could not be instantiated under its limits
    /// (e.g. its start function traps, or its initial memory is above the cap).
    #[error("the policy cannot be instantiated under its limits")]
    Instantiate(#[source] runtime::Error),
    /// The artifact the ConfigMap names could not be pulled.
    #[error(transparent)]
    Pull(#[from] oci::PullError),
    /// The host requires a signed artifact of a version serving these
    /// namespaces, and the component is in the ConfigMap.
    #[error(
        "this host runs only signed artifacts for the namespaces this policy may serve: publish it with `policy push --oci REGISTRY/REPOSITORY:TAG --sign-key KEY`"
    )]
    NotAnArtifact,
    /// The ConfigMap names an artifact and this host has no registry client.
    #[error("this host pulls no artifacts: its registry client did not start")]
    NoPuller,
    /// The version asked for again (`data.revision`) is not one to serve.
    #[error(transparent)]
    Revision(#[from] super::revisions::Error),
    /// The load task was lost (the host is shutting down).
    #[error("the load was interrupted")]
    Interrupted(#[source] tokio::task::JoinError),
}

impl Error {
    /// A short UpperCamelCase name for Events, annotations and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Config(error) => error.reason(),
            Self::Component(error) => error.reason(),
            Self::Instantiate(_) => "InstantiationFailed",
            Self::Pull(error) => error.reason(),
            Self::NoPuller => "PullFailed",
            Self::NotAnArtifact => "Unsigned",
            Self::Revision(error) => error.reason(),
            Self::Interrupted(_) => "Interrupted",
        }
    }

    /// When loading the same content again may succeed without a change:
    /// the policy used its compile budget, and regains it by then.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Component(runtime::Error::CompileBudgetExhausted { retry_after, .. }) => {
                Some(*retry_after)
            }
            _ => None,
        }
    }

    /// Whether the same load may succeed soon without a change: the
    /// registry was down, slow or failing (retried with the source's backoff).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Pull(error) => error.is_transient(),
            Self::Revision(error) => error.is_transient(),
            _ => false,
        }
    }
}

/// What the host allows a policy ConfigMap.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest component, after decompression.
    pub max_module_bytes: u64,
    /// The kinds of children the host manages: the default allow-list, and
    /// the kinds an allow-list may name.
    pub child_kinds: Vec<AllowedKind>,
    /// How far the host trusts publishers (`--policy-tenancy`): on a strict
    /// host a ConfigMap must say whose DataJobs may use its policy
    /// (`data.allowedNamespaces`), and only `policy-<name>` may provide the
    /// policy `<name>`.
    pub tenancy: Tenancy,
    /// Pulls the artifacts ConfigMaps name; `None`: they are refused.
    pub puller: Option<oci::Puller>,
    /// Which versions must be signed artifacts (the host was given the
    /// platform team's keys): a component in `binaryData` cannot be signed,
    /// and is refused where a signature is required.
    pub signed_for: SignedFor,
    /// Which team each policy belongs to (`--team`): its compiles take
    /// the team's turn and budget.
    pub teams: Teams,
}

/// Which policy versions must be artifacts signed by one of the host's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SignedFor {
    /// None (the host has no keys).
    #[default]
    Nobody,
    /// Every version (`--signature-key` alone).
    Everyone,
    /// A version that may serve DataJobs of one of these namespaces
    /// (`--signed-namespaces`): its `allowedNamespaces` names one, or `*`.
    Namespaces(Vec<String>),
}

impl SignedFor {
    /// Whether a version serving `access` must be signed.
    #[must_use]
    pub fn requires(&self, access: &Access) -> bool {
        match self {
            Self::Nobody => false,
            Self::Everyone => true,
            Self::Namespaces(namespaces) => namespaces.iter().any(|ns| access.allows(ns)),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_module_bytes: 32 << 20,
            child_kinds: AllowedKind::defaults(),
            tenancy: Tenancy::default(),
            puller: None,
            signed_for: SignedFor::Nobody,
            teams: Teams::default(),
        }
    }
}

/// A policy version ready to be put in service.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled, validated, pre-linked policy.
    pub policy: Arc<Policy>,
    /// Whose DataJobs may call it.
    pub access: Access,
    /// Whether it came gzip'd.
    pub compressed: bool,
    /// The artifact it was pulled from, pinned by its manifest digest,
    /// and whether the registry was reached (not the cache).
    pub pulled: Option<(oci::Reference, bool)>,
    /// The tag it names with the digest it was resolved to
    /// ([`PINNED_ANNOTATION`](crate::vocabulary::PINNED_ANNOTATION)), if it names a tag.
    pub pinned: Option<String>,
    /// Time from the start of the load to a version ready to serve.
    pub took: Duration,
}

/// What the host knows about a version besides its ConfigMap.
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// The compile refusal recorded on it, if any (see [`super::refusal`]).
    pub remembered: Option<Refusal>,
    /// Its policy's outbound grant, credentials read ([`super::grants`]).
    pub outbound: Option<Arc<Outbound>>,
    /// What its policy may pull ([`super::grants`]): nothing by default.
    pub pull: Arc<oci::PullGrant>,
    /// The tag of its artifact as first resolved
    /// ([`PINNED_ANNOTATION`](crate::vocabulary::PINNED_ANNOTATION)).
    pub pinned: Option<oci::Reference>,
}

/// The artifact a ConfigMap's content names, pulled, with the reference
/// asked for: `None` when its component is in `binaryData`.
pub type Fetched = Option<(oci::Reference, oci::Pulled)>;

/// Loads the policy `name` from a ConfigMap's settings (its `data`, read)
/// and `binaryData`, and the artifact it names once [`fetch`]ed.
pub async fn load(
    runtime: &Runtime,
    config: &Config,
    name: &str,
    (settings, binary_data): (Settings, BTreeMap<String, ByteString>),
    pulled: Fetched,
    given: Given,
) -> Result<Loaded> {
    let (runtime, config, name) = (runtime.clone(), config.clone(), name.to_owned());
    let (loaded, pulled) = tokio::task::spawn_blocking(move || {
        let component = match &pulled {
            Some((_, pulled)) => Component::Pulled(&pulled.component),
            None => Component::In(&binary_data),
        };
        let loaded = load_blocking(&runtime, &config, &name, settings, component, given);
        (loaded, pulled)
    })
    .await
    .map_err(Error::Interrupted)?;
    let mut loaded = loaded?;
    if let Some((reference, pulled)) = pulled {
        let pinned = reference.with_digest(pulled.manifest);
        if reference.tag().is_some() && !reference.is_pinned() {
            // The tag with the digest it named: `reference:tag@sha256:…`.
            loaded.pinned = Some(format!("{reference}@sha256:{}", pulled.manifest));
        }
        loaded.pulled = Some((pinned, pulled.from_registry));
    }
    Ok(loaded)
}

/// Pulls the artifact the ConfigMap names, as `given` allows; `None` when
/// it names none. Waits on the network, never on the CPU.
///
/// # Errors
///
/// The pull's refusal, or a ConfigMap that names an artifact and carries a
/// component too, or that must be signed and names none.
pub async fn fetch(
    config: &Config,
    settings: &Settings,
    binary_data: &BTreeMap<String, ByteString>,
    given: &Given,
) -> Result<Fetched> {
    let signed = config
        .signed_for
        .requires(&settings.namespaces.clone().unwrap_or_default());
    let Some(reference) = settings.artifact.clone() else {
        if signed {
            return Err(Error::NotAnArtifact);
        }
        return Ok(None);
    };
    if !binary_data.is_empty() {
        return Err(configmap::Error::ModuleAndArtifact.into());
    }
    if !reference.is_pinned() && config.tenancy.requires_pinned_artifacts() {
        return Err(configmap::Error::Unpinned {
            reference: reference.to_string(),
        }
        .into());
    }
    let puller = config.puller.as_ref().ok_or(Error::NoPuller)?;
    // A tag resolved before is pulled by the digest it had then.
    let asked = match &given.pinned {
        Some(pinned) if !reference.is_pinned() && same_tag(pinned, &reference) => pinned,
        _ => &reference,
    };
    let pulled = puller
        .pull_checked(asked, &given.pull, config.max_module_bytes, signed)
        .await?;
    Ok(Some((reference, pulled)))
}

/// Whether `pinned` names the tag `reference` names.
fn same_tag(pinned: &oci::Reference, reference: &oci::Reference) -> bool {
    pinned.registry() == reference.registry()
        && pinned.repository() == reference.repository()
        && pinned.tag().is_some()
        && pinned.tag() == reference.tag()
}

/// Where a version's component is.
#[derive(Debug, Clone, Copy)]
pub enum Component<'a> {
    /// In the ConfigMap's `binaryData`.
    In(&'a BTreeMap<String, ByteString>),
    /// Pulled from the artifact the ConfigMap names.
    Pulled(&'a [u8]),
}

/// [`load`] on the current thread, of settings already read.
pub fn load_blocking(
    runtime: &Runtime,
    config: &Config,
    name: &str,
    settings: Settings,
    component: Component<'_>,
    given: Given,
) -> Result<Loaded> {
    let started = Instant::now();
    settings.check_kinds(&config.child_kinds)?;
    if config.tenancy.requires_allowed_namespaces() && settings.namespaces.is_none() {
        return Err(configmap::Error::NamespacesRequired.into());
    }
    let access = settings.namespaces.clone().unwrap_or_default();
    let (bytes, compressed) = match component {
        Component::In(binary_data) => {
            let module = Module::find(binary_data)?;
            let compressed = matches!(module, Module::Gzip(_));
            (module.decode(config.max_module_bytes)?, compressed)
        }
        Component::Pulled(bytes) => (bytes.to_vec(), false),
    };
    if let Some(pinned) = settings.sha256 {
        let actual = Digest::of(&bytes);
        if actual != pinned {
            return Err(configmap::Error::DigestMismatch { pinned, actual }.into());
        }
    }
    let spec = PolicySpec::new(name)
        .limits(settings.limits)
        .share(settings.share)
        .allowed_kinds(
            settings
                .allowed_kinds
                .unwrap_or_else(|| config.child_kinds.clone()),
        )
        .remembered(given.remembered)
        .outbound(given.outbound)
        .team(config.teams.team_of(name));
    let policy = check(runtime, spec, &bytes)?;
    Ok(Loaded {
        policy,
        access,
        compressed,
        pulled: None,
        pinned: None,
        took: started.elapsed(),
    })
}

/// Every check a version passes before it may serve, on the current
/// thread: compile (or find in the cache), validate world and imports,
/// instantiate once. `policy check` and `policy push` run the same.
pub fn check(runtime: &Runtime, spec: PolicySpec, bytes: &[u8]) -> Result<Arc<Policy>> {
    let policy = runtime.load(spec, bytes).map_err(Error::Component)?;
    runtime
        .instantiate_blocking(&policy)
        .map_err(Error::Instantiate)?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_required_where_a_policy_may_serve_a_namespace_that_asks_for_one() {
        let team_a = Access::parse("team-a").expect("a list");
        let team_b = Access::parse("team-b,team-c").expect("a list");
        let signed = SignedFor::Namespaces(vec!["team-a".into()]);
        assert!(signed.requires(&team_a));
        assert!(!signed.requires(&team_b), "it serves no signed namespace");
        assert!(signed.requires(&Access::Everyone), "`*` serves team-a too");
        assert!(SignedFor::Everyone.requires(&team_b));
        assert!(!SignedFor::Nobody.requires(&Access::Everyone));
    }
}
