//! The policy ConfigMap: how a policy version is shipped to the host, and
//! what the host writes back on it.
//!
//! ```yaml
//! apiVersion: v1
//! kind: ConfigMap
//! metadata:
//!   name: policy-fanout                     # `policy push` names it policy-<name>
//!   namespace: policyhost-system            # the host's --policy-namespace
//!   labels:
//!     policyhost.dev/policy: fanout         # the policy's name (DataJob spec.policy)
//! binaryData:
//!   policy.wasm: AGFzbQ0AAQA…               # the component, or
//!   # policy.wasm.gz: H4sIAAAA…             # gzip of it (for components over ~1 MiB)
//! data:                                     # every key is optional
//!   # artifact: registry.example.com/team-a/fanout@sha256:…   # or the component
//!   #                                       # pulled from a registry (no binaryData)
//!   sha256: 3f5a…                           # pin: digest of the (uncompressed) component
//!   memory: 64Mi                            # linear memory cap per call
//!   fuel: "500000000"                       # fuel per call
//!   timeout: 2s                             # wall-clock deadline per call
//!   maxChildren: "1000"                     # desired children per result
//!   maxOutputBytes: 4Mi                     # bytes of strings per result
//!   allowedKinds: v1/Pod,batch/v1/Job       # kinds the policy may create
//!   allowedNamespaces: team-a,team-a-ci     # whose DataJobs may use it, or `*` (required
//!                                           # on a strict host, the default)
//!   description: one line for people        # free text, ignored by the host
//!   share: "2"                              # fair share of workers, call threads
//!                                           # and API writes (default 1)
//!   # revision: sha256:…                    # alone: serve a version this policy
//!                                           # served before (`policy rollback`)
//! ```
//!
//! Limits and the share are clamped to the host's maxima (`--max-share`
//! for the share; the host says so in the `PolicyLoaded` Event and the
//! [`CLAMPED_ANNOTATION`](crate::vocabulary::CLAMPED_ANNOTATION)); an unknown key or a bad value rejects the
//! version with an error naming the key, so a typo never goes unnoticed.
//!
//! The host reports what it did with annotations on the ConfigMap (read by
//! `policyhost policy list`) and with Events (`PolicyLoaded`,
//! `PolicyRejected`).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use sha2::{Digest as _, Sha256};

use super::access::Access;
use crate::data_keys::{self, KeyError};
use crate::fair::Share;
use crate::oci::Reference;
use crate::quantity::{format_bytes, format_millis, parse_bytes, parse_duration, parse_integer};
use crate::runtime::{AllowedKind, Digest, PolicyLimits};
use crate::vocabulary::{CANDIDATE_ROLE, PINS_ROLE, POLICY_LABEL, ROLE_LABEL, ROLLOUT_ROLE};

/// `binaryData` key of the component.
pub const MODULE_KEY: &str = "policy.wasm";
/// `binaryData` key of the gzip'd component.
pub const MODULE_GZ_KEY: &str = "policy.wasm.gz";

/// The largest ConfigMap payload (keys and values of `data` and
/// `binaryData`) the Kubernetes API server accepts.
pub const CONFIGMAP_LIMIT: usize = 1 << 20;

/// `data` keys.
pub mod keys {
    /// Digest pin of the uncompressed component (64 hex digits, optional `sha256:` prefix).
    pub const SHA256: &str = "sha256";
    /// Linear memory cap: a byte quantity (`64Mi`, `67108864`).
    pub const MEMORY: &str = "memory";
    /// Fuel per call: an integer (`_` separators allowed).
    pub const FUEL: &str = "fuel";
    /// Deadline per call: `500ms`, `2s`, `1m`.
    pub const TIMEOUT: &str = "timeout";
    /// Most desired children per result: an integer.
    pub const MAX_CHILDREN: &str = "maxChildren";
    /// Most bytes of strings per result: a byte quantity.
    pub const MAX_OUTPUT_BYTES: &str = "maxOutputBytes";
    /// Kinds the policy may create: `APIVERSION/KIND`, comma or newline separated.
    pub const ALLOWED_KINDS: &str = "allowedKinds";
    /// Namespaces whose DataJobs may use the policy: names, or `*` for all
    /// (see [`super::super::access`]).
    pub const ALLOWED_NAMESPACES: &str = "allowedNamespaces";
    /// Free text for people.
    pub const DESCRIPTION: &str = "description";
    /// Fair share beside other policies (workers, call threads, API
    /// writes): a positive integer, clamped to the host's `--max-share`.
    pub const SHARE: &str = "share";
    /// The component as an OCI artifact, `REGISTRY/REPOSITORY@sha256:DIGEST`
    /// (see [`crate::oci`]), instead of `binaryData`.
    pub const ARTIFACT: &str = "artifact";
    /// A version this policy served before, `sha256:DIGEST`, as the only
    /// key: `policy rollback` writes it, and the host serves that version's
    /// component and settings from its revision ([`crate::policies::revisions`]).
    pub const REVISION: &str = "revision";

    /// Every key the host reads.
    pub const ALL: &[&str] = &[
        SHA256,
        MEMORY,
        FUEL,
        TIMEOUT,
        MAX_CHILDREN,
        MAX_OUTPUT_BYTES,
        ALLOWED_KINDS,
        ALLOWED_NAMESPACES,
        DESCRIPTION,
        SHARE,
        ARTIFACT,
        REVISION,
    ];
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What is wrong with a policy ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `binaryData` carries no component.
    #[error(
        "binaryData has no `{MODULE_KEY}` or `{MODULE_GZ_KEY}`, and `data.{}` names no artifact",
        keys::ARTIFACT
    )]
    NoModule,
    /// Both `binaryData` and `data.artifact`: which one is meant is unclear.
    #[error(
        "the ConfigMap has both a component in binaryData and `data.{}`: keep one",
        keys::ARTIFACT
    )]
    ModuleAndArtifact,
    /// A strict host pulls only by digest: a tag can be moved under it.
    #[error(
        "`data.{}` is {reference}, a tag: on this host name the artifact by its digest (`@sha256:…`, as `policy push --oci` writes it)",
        keys::ARTIFACT
    )]
    Unpinned {
        /// The reference.
        reference: String,
    },
    /// `binaryData` carries both forms: which one is meant is unclear.
    #[error("binaryData has both `{MODULE_KEY}` and `{MODULE_GZ_KEY}`: keep one")]
    TwoModules,
    /// `policy.wasm.gz` does not decompress.
    #[error("`binaryData.{MODULE_GZ_KEY}` is not a valid gzip stream")]
    Gzip(#[source] std::io::Error),
    /// `policy.wasm.gz` has bytes after its first gzip member (a second
    /// member, or anything else): the ConfigMap would not say exactly what
    /// was published.
    #[error(
        "`binaryData.{MODULE_GZ_KEY}` has {trailing} bytes after its gzip stream: it must be exactly one gzip member"
    )]
    GzipTrailing {
        /// The bytes after the first member.
        trailing: usize,
    },
    /// The component is larger than the host accepts.
    #[error(
        "the component is {}{size} bytes, more than the {limit} bytes this host accepts",
        if *.at_least { "over " } else { "" }
    )]
    TooLarge {
        /// Its size, or (for a gzip stream, which is not inflated past the
        /// limit) the size it is known to exceed.
        size: u64,
        /// True when `size` is a lower bound.
        at_least: bool,
        /// The host's limit.
        limit: u64,
    },
    /// A `data` value does not parse or is out of range, or a `data` key
    /// the host does not know (a typo would otherwise be ignored).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `allowedKinds` names a kind the host does not watch, so it could
    /// neither find nor prune such children.
    #[error(
        "`data.{}` names {kind}, which this host does not manage (its child kinds: {managed})",
        keys::ALLOWED_KINDS
    )]
    KindNotManaged {
        /// The kind, as `APIVERSION/KIND`.
        kind: String,
        /// The host's child kinds.
        managed: String,
    },
    /// The component is not the one `data.sha256` pins.
    #[error(
        "the component's digest sha256:{actual} is not the pinned `data.sha256` sha256:{pinned}"
    )]
    DigestMismatch {
        /// The pin.
        pinned: Digest,
        /// The component's digest.
        actual: Digest,
    },
    /// The policy name cannot be a label value and part of a ConfigMap name.
    #[error(
        "`{0}` is not a valid policy name (lowercase letters, digits and `-`, at most 63, starting and ending with a letter or digit)"
    )]
    InvalidName(String),
    /// Even compressed, the component does not fit in a ConfigMap.
    #[error(
        "the component does not fit in a ConfigMap: {size} bytes{}, the limit is {CONFIGMAP_LIMIT}",
        if *.compressed { " compressed" } else { "" }
    )]
    DoesNotFit {
        /// The payload size.
        size: usize,
        /// Whether that is the gzip'd size.
        compressed: bool,
    },
    /// Compressing failed (an I/O error of the in-memory encoder).
    #[error("cannot compress the component")]
    Compress(#[source] std::io::Error),
    /// The host is strict about tenancy (`--policy-tenancy strict`, the
    /// default) and the ConfigMap does not say whose DataJobs may use the
    /// policy.
    #[error(
        "`data.{}` is required on this host: list the namespaces whose DataJobs may use the policy, or `*`",
        keys::ALLOWED_NAMESPACES
    )]
    NamespacesRequired,
    /// The host is strict about tenancy and the ConfigMap's name is not
    /// `policy-<policy>`: RBAC on ConfigMap names must be RBAC on policy
    /// names ([`super::tenancy`]).
    #[error(
        "ConfigMap {configmap} names policy `{policy}`; on this host only the ConfigMap `policy-{policy}` may provide it"
    )]
    NameMismatch {
        /// The ConfigMap's name.
        configmap: String,
        /// The policy its label names.
        policy: String,
    },
    /// The host is strict about tenancy and a ConfigMap labelled with a
    /// role (a candidate, pins, a rollout) is not `<role>-<policy>`: who
    /// may write that name is who may change that part of the policy.
    #[error(
        "ConfigMap {configmap} is labelled as the {role} of policy `{policy}`; on this host only the ConfigMap `{role}-{policy}` may hold it"
    )]
    RoleNameMismatch {
        /// The ConfigMap's name.
        configmap: String,
        /// The policy its label names.
        policy: String,
        /// Its role label: `candidate`, `pins` or `rollout`.
        role: &'static str,
    },
    /// A pin does not read.
    #[error(transparent)]
    Pin(#[from] super::pins::Error),
}

impl Error {
    /// A short UpperCamelCase name for Events, annotations and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoModule | Self::TwoModules | Self::ModuleAndArtifact => "NoModule",
            Self::Unpinned { .. } => "Unpinned",
            Self::Gzip(_) | Self::GzipTrailing { .. } => "Corrupt",
            Self::TooLarge { .. } | Self::DoesNotFit { .. } => "TooLarge",
            Self::Key(_) | Self::KindNotManaged { .. } | Self::NamespacesRequired => {
                "InvalidConfig"
            }
            Self::NameMismatch { .. } | Self::RoleNameMismatch { .. } => "NameMismatch",
            Self::Pin(_) => "InvalidPin",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::InvalidName(_) => "InvalidName",
            Self::Compress(_) => "CompressFailed",
        }
    }
}

/// What a policy ConfigMap asks for besides its component.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// The limits asked for (unset: the host's defaults).
    pub limits: PolicyLimits,
    /// The kinds it may create (unset: every kind the host manages).
    pub allowed_kinds: Option<Vec<AllowedKind>>,
    /// The digest the component must have.
    pub sha256: Option<Digest>,
    /// Whose DataJobs may use it (unset: every namespace's, unless the host
    /// requires the key).
    pub namespaces: Option<Access>,
    /// Free text.
    pub description: Option<String>,
    /// The fair share asked for (unset: 1).
    pub share: Option<Share>,
    /// The artifact to pull the component from, instead of `binaryData`.
    pub artifact: Option<Reference>,
    /// The earlier version to serve again, instead of any other content.
    pub revision: Option<Digest>,
}

impl Settings {
    /// Reads `data`, naming the key of the first bad value.
    pub fn parse(data: &BTreeMap<String, String>) -> std::result::Result<Self, KeyError> {
        let mut settings = Self::default();
        for entry in data_keys::entries(data) {
            match entry.key {
                keys::SHA256 => settings.sha256 = Some(entry.parse(DIGEST_EXPECTED, parse_digest)?),
                keys::MEMORY => {
                    let bytes = entry.parse(MEMORY_EXPECTED, |t| {
                        parse_bytes(t).filter(|bytes| *bytes >= WASM_PAGE)
                    })?;
                    settings.limits.memory_bytes = Some(bytes);
                }
                keys::FUEL => {
                    let fuel = entry
                        .parse(FUEL_EXPECTED, |t| parse_integer(t).filter(|fuel| *fuel > 0))?;
                    settings.limits.fuel = Some(fuel);
                }
                keys::TIMEOUT => {
                    let timeout = entry.parse(TIMEOUT_EXPECTED, |t| {
                        parse_duration(t).filter(|t| !t.is_zero())
                    })?;
                    settings.limits.timeout_ms =
                        Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
                }
                keys::MAX_CHILDREN => {
                    let children = entry.parse(CHILDREN_EXPECTED, |t| {
                        parse_integer(t).and_then(|n| u32::try_from(n).ok())
                    })?;
                    settings.limits.children = Some(children);
                }
                keys::MAX_OUTPUT_BYTES => {
                    let bytes =
                        entry.parse(OUTPUT_EXPECTED, |t| parse_bytes(t).filter(|b| *b > 0))?;
                    settings.limits.output_bytes = Some(bytes);
                }
                keys::ALLOWED_KINDS => {
                    settings.allowed_kinds = Some(entry.parse(KINDS_EXPECTED, parse_kinds)?);
                }
                keys::ALLOWED_NAMESPACES => {
                    settings.namespaces = Some(entry.parse(NAMESPACES_EXPECTED, Access::parse)?);
                }
                keys::DESCRIPTION => settings.description = Some(entry.value.to_owned()),
                keys::ARTIFACT => {
                    settings.artifact = Some(entry.parse(ARTIFACT_EXPECTED, |t| t.parse().ok())?);
                }
                keys::REVISION => {
                    settings.revision = Some(entry.parse(REVISION_EXPECTED, parse_digest)?);
                }
                keys::SHARE => {
                    let share = entry.parse(SHARE_EXPECTED, |t| {
                        parse_integer(t)
                            .and_then(|n| u32::try_from(n).ok())
                            .and_then(Share::new)
                    })?;
                    settings.share = Some(share);
                }
                _ => return Err(entry.unknown("", keys::ALL)),
            }
        }
        Ok(settings)
    }

    /// Checks that every allowed kind is one the host manages.
    pub fn check_kinds(&self, managed: &[AllowedKind]) -> Result<()> {
        let Some(kinds) = &self.allowed_kinds else {
            return Ok(());
        };
        match kinds.iter().find(|kind| !managed.contains(kind)) {
            None => Ok(()),
            Some(kind) => Err(Error::KindNotManaged {
                kind: kind_text(kind),
                managed: managed.iter().map(kind_text).collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// The `data` these settings are written as (what [`Settings::parse`] reads back).
    #[must_use]
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: String| {
            data.insert(key.to_owned(), value);
        };
        let limits = &self.limits;
        if let Some(digest) = self.sha256 {
            put(keys::SHA256, digest.to_hex());
        }
        if let Some(artifact) = &self.artifact {
            put(keys::ARTIFACT, artifact.to_string());
        }
        if let Some(bytes) = limits.memory_bytes {
            put(keys::MEMORY, format_bytes(bytes));
        }
        if let Some(fuel) = limits.fuel {
            put(keys::FUEL, fuel.to_string());
        }
        if let Some(ms) = limits.timeout_ms {
            put(keys::TIMEOUT, format_millis(ms));
        }
        if let Some(children) = limits.children {
            put(keys::MAX_CHILDREN, children.to_string());
        }
        if let Some(bytes) = limits.output_bytes {
            put(keys::MAX_OUTPUT_BYTES, format_bytes(bytes));
        }
        if let Some(kinds) = &self.allowed_kinds {
            put(
                keys::ALLOWED_KINDS,
                kinds.iter().map(kind_text).collect::<Vec<_>>().join(","),
            );
        }
        if let Some(access) = &self.namespaces {
            put(keys::ALLOWED_NAMESPACES, access.to_string());
        }
        if let Some(description) = &self.description {
            put(keys::DESCRIPTION, description.clone());
        }
        if let Some(share) = self.share {
            put(keys::SHARE, share.to_string());
        }
        if let Some(digest) = self.revision {
            put(keys::REVISION, format!("sha256:{}", digest.to_hex()));
        }
        data
    }
}

/// The component as a ConfigMap carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Module<'a> {
    /// `binaryData.policy.wasm`.
    Plain(&'a [u8]),
    /// `binaryData.policy.wasm.gz`.
    Gzip(&'a [u8]),
}

impl<'a> Module<'a> {
    /// Finds the component in `binaryData`.
    pub fn find(binary_data: &'a BTreeMap<String, ByteString>) -> Result<Self> {
        match (binary_data.get(MODULE_KEY), binary_data.get(MODULE_GZ_KEY)) {
            (Some(plain), None) => Ok(Self::Plain(&plain.0)),
            (None, Some(gzip)) => Ok(Self::Gzip(&gzip.0)),
            (Some(_), Some(_)) => Err(Error::TwoModules),
            (None, None) => Err(Error::NoModule),
        }
    }

    /// The component's bytes, at most `limit` of them: a gzip stream is
    /// never inflated past the limit (a small ConfigMap must not be able
    /// to make the host allocate gigabytes).
    pub fn decode(self, limit: u64) -> Result<Vec<u8>> {
        match self {
            Self::Plain(bytes) => {
                let size = bytes.len() as u64;
                if size > limit {
                    return Err(Error::TooLarge {
                        size,
                        at_least: false,
                        limit,
                    });
                }
                Ok(bytes.to_vec())
            }
            Self::Gzip(bytes) => {
                let mut out = Vec::with_capacity(bytes.len().saturating_mul(3));
                let mut decoder = flate2::bufread::GzDecoder::new(bytes);
                (&mut decoder)
                    .take(limit.saturating_add(1))
                    .read_to_end(&mut out)
                    .map_err(Error::Gzip)?;
                if out.len() as u64 > limit {
                    return Err(Error::TooLarge {
                        size: limit,
                        at_least: true,
                        limit,
                    });
                }
                // The decoder reads no further than its one member's end.
                let trailing = decoder.into_inner().len();
                if trailing > 0 {
                    return Err(Error::GzipTrailing { trailing });
                }
                Ok(out)
            }
        }
    }
}

/// A fingerprint of a ConfigMap's content (`data` and `binaryData`, not its
/// metadata): equal fingerprints are the same policy version. The host
/// writes the fingerprint it processed in [`OBSERVED_ANNOTATION`](crate::vocabulary::OBSERVED_ANNOTATION), so a
/// client can tell whether the host has seen what it pushed.
#[must_use]
pub fn fingerprint(
    data: &BTreeMap<String, String>,
    binary_data: &BTreeMap<String, ByteString>,
) -> String {
    let mut hash = Sha256::new();
    let mut field = |tag: u8, key: &str, value: &[u8]| {
        hash.update([tag]);
        hash.update((key.len() as u64).to_le_bytes());
        hash.update(key.as_bytes());
        hash.update((value.len() as u64).to_le_bytes());
        hash.update(value);
    };
    for (key, value) in data {
        field(b'd', key, value.as_bytes());
    }
    for (key, value) in binary_data {
        field(b'b', key, &value.0);
    }
    hex::encode(hash.finalize())
}

/// Whether `policy push` compresses the component.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Compression {
    /// Only when it would not fit uncompressed.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never (fails when it does not fit).
    Never,
}

/// The name of the ConfigMap `policy push` writes for policy `name`.
#[must_use]
pub fn configmap_name(policy: &str) -> String {
    format!("policy-{policy}")
}

/// The name of the ConfigMap `policy push --shadow` writes for policy `name`.
#[must_use]
pub fn candidate_name(policy: &str) -> String {
    format!("{CANDIDATE_ROLE}-{policy}")
}

/// The ConfigMap holding the pins of `policy`: `pins-<policy>`.
#[must_use]
pub fn pins_name(policy: &str) -> String {
    format!("{PINS_ROLE}-{policy}")
}

/// The ConfigMap holding the rollout plan of `policy`: `rollout-<policy>`.
#[must_use]
pub fn rollout_name(policy: &str) -> String {
    format!("{ROLLOUT_ROLE}-{policy}")
}

/// Checks that `name` can be a policy name: a DNS-1123 label.
pub fn check_name(name: &str) -> Result<()> {
    policyhost_names::dns1123_label(name).map_err(|_| Error::InvalidName(name.to_owned()))
}

/// The ConfigMap that ships `component` as policy `name`: labelled, pinned
/// to the component's digest, compressed as `compression` says.
pub fn build(
    name: &str,
    namespace: &str,
    component: &[u8],
    settings: &Settings,
    compression: Compression,
) -> Result<ConfigMap> {
    check_name(name)?;
    let settings = Settings {
        sha256: Some(Digest::of(component)),
        ..settings.clone()
    };
    let data = settings.to_data();
    let data_size: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
    let fits = |key: &str, size: usize| data_size + key.len() + size <= CONFIGMAP_LIMIT;
    let compress = match compression {
        Compression::Always => true,
        Compression::Never => false,
        Compression::Auto => !fits(MODULE_KEY, component.len()),
    };
    let (key, payload) = if compress {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(component).map_err(Error::Compress)?;
        (MODULE_GZ_KEY, encoder.finish().map_err(Error::Compress)?)
    } else {
        (MODULE_KEY, component.to_vec())
    };
    if !fits(key, payload.len()) {
        return Err(Error::DoesNotFit {
            size: payload.len(),
            compressed: compress,
        });
    }
    Ok(policy_map(
        name,
        namespace,
        data,
        Some(BTreeMap::from([(key.to_owned(), ByteString(payload))])),
    ))
}

/// The ConfigMap that names `artifact` as policy `name`'s component: the
/// reference pinned by its manifest digest, and `sha256` pinning the
/// component inside it.
pub fn build_artifact(
    name: &str,
    namespace: &str,
    artifact: Reference,
    component: &[u8],
    settings: &Settings,
) -> Result<ConfigMap> {
    check_name(name)?;
    let settings = Settings {
        sha256: Some(Digest::of(component)),
        artifact: Some(artifact),
        ..settings.clone()
    };
    Ok(policy_map(name, namespace, settings.to_data(), None))
}

/// `policy-<name>` in `namespace`, labelled as policy `name`'s.
fn policy_map(
    name: &str,
    namespace: &str,
    data: BTreeMap<String, String>,
    binary_data: Option<BTreeMap<String, ByteString>>,
) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(POLICY_LABEL.to_owned(), name.to_owned())])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        binary_data,
        ..ConfigMap::default()
    }
}

/// `map` (built by [`build`] for policy `policy`) as its candidate: named
/// `candidate-<policy>` and labelled with the candidate role.
#[must_use]
pub fn into_candidate(mut map: ConfigMap, policy: &str) -> ConfigMap {
    map.metadata.name = Some(candidate_name(policy));
    map.metadata
        .labels
        .get_or_insert_default()
        .insert(ROLE_LABEL.to_owned(), CANDIDATE_ROLE.to_owned());
    map
}

/// The serving version's ConfigMap of `policy` with the content (`data`,
/// `binaryData`) of `candidate`: what promoting the candidate applies.
#[must_use]
pub fn promoted(candidate: &ConfigMap, policy: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(policy)),
            namespace: candidate.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                POLICY_LABEL.to_owned(),
                policy.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: candidate.data.clone(),
        binary_data: candidate.binary_data.clone(),
        ..ConfigMap::default()
    }
}

/// The serving version's ConfigMap of `policy` asking for the version of
/// `digest` again: what `policy rollback` applies. Its only key is
/// [`keys::REVISION`], so the apply removes the component and settings the
/// publisher applied before.
#[must_use]
pub fn rollback(policy: &str, namespace: &str, digest: Digest) -> ConfigMap {
    let settings = Settings {
        revision: Some(digest),
        ..Settings::default()
    };
    policy_map(policy, namespace, settings.to_data(), None)
}

const WASM_PAGE: u64 = 64 << 10;
const ARTIFACT_EXPECTED: &str = "an OCI reference REGISTRY/REPOSITORY@sha256:DIGEST, such as registry.example.com/team-a/fanout@sha256:3f5a…";
const DIGEST_EXPECTED: &str = "64 hexadecimal digits, optionally prefixed `sha256:`";
const MEMORY_EXPECTED: &str = "a byte quantity of at least 64Ki, such as 64Mi or 67108864";
const FUEL_EXPECTED: &str = "a positive integer, such as 500000000";
const TIMEOUT_EXPECTED: &str = "a positive duration such as 500ms, 2s or 1m";
const CHILDREN_EXPECTED: &str = "an integer from 0 to 4294967295";
const OUTPUT_EXPECTED: &str = "a positive byte quantity, such as 4Mi";
const KINDS_EXPECTED: &str = "a list of APIVERSION/KIND such as v1/Pod,batch/v1/Job";
const NAMESPACES_EXPECTED: &str = "`*`, or a list of namespace names such as team-a,team-a-ci";
const SHARE_EXPECTED: &str = "a positive integer, such as 2";
const REVISION_EXPECTED: &str = "sha256: and the 64 hexadecimal digits of a version the policy served, as `policy history` lists them";

fn parse_digest(text: &str) -> Option<Digest> {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    let bytes = hex::decode(hex.to_ascii_lowercase()).ok()?;
    Some(Digest(bytes.try_into().ok()?))
}

/// `v1/Pod,batch/v1/Job` (commas, spaces or newlines between kinds).
fn parse_kinds(text: &str) -> Option<Vec<AllowedKind>> {
    let kinds: Option<Vec<AllowedKind>> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|item| !item.is_empty())
        .map(|item| {
            let (api_version, kind) = item.rsplit_once('/')?;
            let valid = !api_version.is_empty()
                && !kind.is_empty()
                && kind.starts_with(|c: char| c.is_ascii_uppercase());
            valid.then(|| AllowedKind::new(api_version, kind))
        })
        .collect();
    kinds.filter(|kinds| !kinds.is_empty())
}

fn kind_text(kind: &AllowedKind) -> String {
    format!("{}/{}", kind.api_version, kind.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_keys::data_of as data;

    fn error_of(pairs: &[(&str, &str)]) -> String {
        Settings::parse(&data(pairs))
            .expect_err("a bad value")
            .to_string()
    }

    #[test]
    fn every_documented_key_parses() {
        let digest = Digest::of(b"component");
        let settings = Settings::parse(&data(&[
            (
                "sha256",
                &format!("sha256:{}", digest.to_hex().to_uppercase()),
            ),
            ("memory", "64Mi"),
            ("fuel", "500_000_000"),
            ("timeout", "2s"),
            ("maxChildren", "20"),
            ("maxOutputBytes", "1M"),
            ("allowedKinds", "v1/Pod, batch/v1/Job\nv1/ConfigMap"),
            ("description", "fan out"),
            ("share", "3"),
        ]))
        .expect("valid settings");
        assert_eq!(settings.share, Share::new(3));
        assert_eq!(settings.sha256, Some(digest));
        assert_eq!(
            settings.limits,
            PolicyLimits {
                memory_bytes: Some(64 << 20),
                fuel: Some(500_000_000),
                timeout_ms: Some(2000),
                output_bytes: Some(1_000_000),
                children: Some(20),
            }
        );
        assert_eq!(
            settings.allowed_kinds,
            Some(vec![
                AllowedKind::new("v1", "Pod"),
                AllowedKind::new("batch/v1", "Job"),
                AllowedKind::new("v1", "ConfigMap"),
            ])
        );
        assert_eq!(settings.description.as_deref(), Some("fan out"));
    }

    #[test]
    fn empty_data_asks_for_nothing() {
        assert_eq!(
            Settings::parse(&BTreeMap::new()).unwrap(),
            Settings::default()
        );
    }

    #[test]
    fn a_bad_value_is_an_error_naming_the_key_and_what_was_expected() {
        assert_eq!(
            error_of(&[("memory", "64MB")]),
            "`data.memory` is `64MB`; expected a byte quantity of at least 64Ki, such as 64Mi or 67108864"
        );
        assert_eq!(
            error_of(&[("memory", "1Ki")]),
            "`data.memory` is `1Ki`; expected a byte quantity of at least 64Ki, such as 64Mi or 67108864"
        );
        assert_eq!(
            error_of(&[("fuel", "0")]),
            "`data.fuel` is `0`; expected a positive integer, such as 500000000"
        );
        assert_eq!(
            error_of(&[("timeout", "2")]),
            "`data.timeout` is `2`; expected a positive duration such as 500ms, 2s or 1m"
        );
        assert_eq!(
            error_of(&[("maxChildren", "5000000000")]),
            "`data.maxChildren` is `5000000000`; expected an integer from 0 to 4294967295"
        );
        assert_eq!(
            error_of(&[("maxOutputBytes", "0")]),
            "`data.maxOutputBytes` is `0`; expected a positive byte quantity, such as 4Mi"
        );
        assert_eq!(
            error_of(&[("allowedKinds", "Pod")]),
            "`data.allowedKinds` is `Pod`; expected a list of APIVERSION/KIND such as v1/Pod,batch/v1/Job"
        );
        assert_eq!(
            error_of(&[("sha256", "abc")]),
            "`data.sha256` is `abc`; expected 64 hexadecimal digits, optionally prefixed `sha256:`"
        );
        assert_eq!(
            error_of(&[("memroy", "64Mi")]),
            "unknown key `data.memroy`; the keys are sha256, memory, fuel, timeout, maxChildren, maxOutputBytes, allowedKinds, allowedNamespaces, description, share, artifact, revision"
        );
        assert_eq!(
            error_of(&[("artifact", "team-a/fanout:1")]),
            "`data.artifact` is `team-a/fanout:1`; expected an OCI reference REGISTRY/REPOSITORY@sha256:DIGEST, such as registry.example.com/team-a/fanout@sha256:3f5a…"
        );
        assert_eq!(
            error_of(&[("share", "0")]),
            "`data.share` is `0`; expected a positive integer, such as 2"
        );
        assert_eq!(
            error_of(&[("share", "-1")]),
            "`data.share` is `-1`; expected a positive integer, such as 2"
        );
        assert_eq!(
            error_of(&[("share", "99999999999")]),
            "`data.share` is `99999999999`; expected a positive integer, such as 2"
        );
        let error = Settings::parse(&data(&[("fuel", "x")])).unwrap_err();
        assert_eq!(Error::from(error).reason(), "InvalidConfig");
    }

    #[test]
    fn namespaces_name_whose_datajobs_may_use_the_policy_and_a_bad_list_names_the_key() {
        let settings = Settings::parse(&data(&[("allowedNamespaces", "team-a, team-b")])).unwrap();
        let access = settings.namespaces.expect("a list");
        assert!(access.allows("team-a") && access.allows("team-b") && !access.allows("team-c"));
        assert_eq!(
            Settings::parse(&data(&[("allowedNamespaces", "*")]))
                .unwrap()
                .namespaces,
            Some(Access::Everyone)
        );
        assert_eq!(
            Settings::default().namespaces,
            None,
            "no key: the host decides"
        );
        for bad in ["", "Team-A", "team-a,*"] {
            let error = Settings::parse(&data(&[("allowedNamespaces", bad)])).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "`data.allowedNamespaces` is `{bad}`; expected `*`, or a list of namespace names such as team-a,team-a-ci"
                )
            );
            assert_eq!(Error::from(error).reason(), "InvalidConfig");
        }
    }

    #[test]
    fn tenancy_errors_name_the_key_or_the_configmap_the_policy_must_come_from() {
        assert_eq!(
            Error::NamespacesRequired.to_string(),
            "`data.allowedNamespaces` is required on this host: list the namespaces whose DataJobs may use the policy, or `*`"
        );
        assert_eq!(Error::NamespacesRequired.reason(), "InvalidConfig");
        let mismatch = Error::NameMismatch {
            configmap: "policy-etl".into(),
            policy: "reports".into(),
        };
        assert_eq!(
            mismatch.to_string(),
            "ConfigMap policy-etl names policy `reports`; on this host only the ConfigMap `policy-reports` may provide it"
        );
        assert_eq!(mismatch.reason(), "NameMismatch");
    }

    #[test]
    fn allowed_kinds_must_be_kinds_the_host_manages() {
        let settings = Settings::parse(&data(&[("allowedKinds", "v1/Pod,apps/v1/Deployment")]))
            .expect("parses");
        let error = settings
            .check_kinds(&[
                AllowedKind::new("v1", "Pod"),
                AllowedKind::new("batch/v1", "Job"),
            ])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "`data.allowedKinds` names apps/v1/Deployment, which this host does not manage (its child kinds: v1/Pod, batch/v1/Job)"
        );
        assert!(Settings::default().check_kinds(&[]).is_ok());
    }

    #[test]
    fn settings_written_as_data_read_back_the_same() {
        let settings = Settings {
            limits: PolicyLimits {
                memory_bytes: Some(96 << 20),
                fuel: Some(123),
                timeout_ms: Some(1500),
                output_bytes: Some(1000),
                children: Some(0),
            },
            allowed_kinds: Some(vec![AllowedKind::new("batch/v1", "Job")]),
            sha256: Some(Digest::of(b"x")),
            namespaces: Some(Access::parse("team-b,team-a").expect("a list")),
            description: Some("d".into()),
            share: Share::new(4),
            artifact: Some(
                format!(
                    "registry.example.com/team-a/fanout@sha256:{}",
                    "ab".repeat(32)
                )
                .parse()
                .expect("a reference"),
            ),
            revision: Some(Digest::of(b"earlier")),
        };
        let data = settings.to_data();
        assert_eq!(data["memory"], "96Mi");
        assert_eq!(data["timeout"], "1500ms");
        assert_eq!(data["allowedNamespaces"], "team-a,team-b");
        assert_eq!(Settings::parse(&data).unwrap(), settings);
    }

    #[test]
    fn the_module_is_found_in_one_of_two_keys() {
        let plain = BTreeMap::from([(MODULE_KEY.to_owned(), ByteString(b"wasm".to_vec()))]);
        assert_eq!(Module::find(&plain).unwrap(), Module::Plain(b"wasm"));
        let mut both = plain.clone();
        both.insert(MODULE_GZ_KEY.to_owned(), ByteString(vec![]));
        assert!(matches!(Module::find(&both), Err(Error::TwoModules)));
        assert!(matches!(
            Module::find(&BTreeMap::new()),
            Err(Error::NoModule)
        ));
    }

    #[test]
    fn a_gzip_module_is_inflated_but_never_past_the_limit() {
        let component = vec![7u8; 100_000];
        let map = build(
            "big",
            "ns",
            &component,
            &Settings::default(),
            Compression::Always,
        )
        .unwrap()
        .binary_data
        .unwrap();
        let module = Module::find(&map).unwrap();
        assert!(matches!(module, Module::Gzip(bytes) if bytes.len() < 10_000));
        assert_eq!(module.decode(100_000).unwrap(), component);
        let error = module.decode(50_000).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the component is over 50000 bytes, more than the 50000 bytes this host accepts"
        );
        assert_eq!(error.reason(), "TooLarge");
        assert!(matches!(
            Module::Gzip(b"not gzip at all").decode(1000),
            Err(Error::Gzip(_))
        ));
        // Exactly one member, nothing after it.
        let Module::Gzip(gzip) = module else {
            unreachable!()
        };
        let mut two = gzip.to_vec();
        two.extend_from_slice(gzip);
        let mut trailing = gzip.to_vec();
        trailing.extend_from_slice(b"\0\0\0\0");
        for (bytes, extra) in [(two, gzip.len()), (trailing, 4)] {
            let error = Module::Gzip(&bytes).decode(1 << 20).unwrap_err();
            assert!(
                matches!(error, Error::GzipTrailing { trailing } if trailing == extra),
                "{error}"
            );
            assert_eq!(error.reason(), "Corrupt");
        }
        assert_eq!(
            Error::GzipTrailing { trailing: 4 }.to_string(),
            "`binaryData.policy.wasm.gz` has 4 bytes after its gzip stream: it must be exactly one gzip member"
        );
        assert!(matches!(
            Module::Plain(&component).decode(10),
            Err(Error::TooLarge {
                at_least: false,
                ..
            })
        ));
    }

    #[test]
    fn build_compresses_only_what_does_not_fit_and_pins_the_digest() {
        let small = vec![1u8; 1000];
        let map = build(
            "fanout",
            "ops",
            &small,
            &Settings::default(),
            Compression::Auto,
        )
        .unwrap();
        assert_eq!(map.metadata.name.as_deref(), Some("policy-fanout"));
        assert_eq!(map.metadata.namespace.as_deref(), Some("ops"));
        assert_eq!(
            map.metadata.labels.as_ref().unwrap()[POLICY_LABEL],
            "fanout"
        );
        assert!(map.binary_data.as_ref().unwrap().contains_key(MODULE_KEY));
        assert_eq!(
            map.data.as_ref().unwrap()["sha256"],
            Digest::of(&small).to_hex()
        );

        let large = vec![2u8; CONFIGMAP_LIMIT + 10];
        let map = build(
            "fanout",
            "ops",
            &large,
            &Settings::default(),
            Compression::Auto,
        )
        .unwrap();
        assert!(
            map.binary_data
                .as_ref()
                .unwrap()
                .contains_key(MODULE_GZ_KEY)
        );
        let error = build(
            "fanout",
            "ops",
            &large,
            &Settings::default(),
            Compression::Never,
        )
        .unwrap_err();
        assert!(
            matches!(
                error,
                Error::DoesNotFit {
                    compressed: false,
                    ..
                }
            ),
            "{error}"
        );
        assert!(matches!(
            build(
                "Fan_out",
                "ops",
                &small,
                &Settings::default(),
                Compression::Auto
            ),
            Err(Error::InvalidName(_))
        ));
    }

    #[test]
    fn a_candidate_is_the_same_content_under_its_own_name_and_role_and_promotes_back() {
        let settings = Settings::parse(&data(&[("fuel", "1000")])).unwrap();
        let map = build("etl", "ops", b"\0asm", &settings, Compression::Never).unwrap();
        let candidate = into_candidate(map.clone(), "etl");
        assert_eq!(candidate.metadata.name.as_deref(), Some("candidate-etl"));
        let labels = candidate.metadata.labels.clone().unwrap();
        assert_eq!(labels[POLICY_LABEL], "etl");
        assert_eq!(labels[ROLE_LABEL], CANDIDATE_ROLE);
        assert_eq!(candidate.binary_data, map.binary_data);
        assert_eq!(promoted(&candidate, "etl"), map);
    }

    #[test]
    fn the_fingerprint_covers_data_and_binary_data_and_nothing_else() {
        let data_a = data(&[("fuel", "1")]);
        let data_b = data(&[("fuel", "2")]);
        let bin = BTreeMap::from([(MODULE_KEY.to_owned(), ByteString(b"x".to_vec()))]);
        let other = BTreeMap::from([(MODULE_KEY.to_owned(), ByteString(b"y".to_vec()))]);
        assert_eq!(fingerprint(&data_a, &bin), fingerprint(&data_a, &bin));
        assert_ne!(fingerprint(&data_a, &bin), fingerprint(&data_b, &bin));
        assert_ne!(fingerprint(&data_a, &bin), fingerprint(&data_a, &other));
        // A key moved from one map to the other is another version.
        let moved = BTreeMap::from([("fuel".to_owned(), ByteString(b"1".to_vec()))]);
        assert_ne!(
            fingerprint(&data_a, &BTreeMap::new()),
            fingerprint(&BTreeMap::new(), &moved)
        );
    }

    #[test]
    fn every_error_has_a_reason() {
        let cases: Vec<(Error, &str)> = vec![
            (Error::NoModule, "NoModule"),
            (Error::Gzip(std::io::Error::other("x")), "Corrupt"),
            (
                Error::DigestMismatch {
                    pinned: Digest([0; 32]),
                    actual: Digest([1; 32]),
                },
                "DigestMismatch",
            ),
            (
                Error::Key(KeyError::Unknown {
                    key: "x".into(),
                    of: "",
                    keys: keys::ALL,
                }),
                "InvalidConfig",
            ),
        ];
        for (error, reason) in cases {
            assert_eq!(error.reason(), reason, "{error}");
        }
        assert_eq!(
            Error::DigestMismatch {
                pinned: Digest([0; 32]),
                actual: Digest([1; 32]),
            }
            .to_string(),
            format!(
                "the component's digest sha256:{} is not the pinned `data.sha256` sha256:{}",
                "01".repeat(32),
                "00".repeat(32)
            )
        );
    }
}
