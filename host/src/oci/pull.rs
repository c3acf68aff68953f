//! Pulling a policy's component: from the blob cache when its digest is
//! there, otherwise from the registry, as the policy's grant allows.
//!
//! In order, each step refusing before the next costs anything: the
//! reference is under a repository prefix the grant allows; the manifest
//! (at most 64 KiB) has the pinned digest and the artifact's layout; the
//! layer's declared size is within the cap; the layer is read only up to
//! that size and must have its digest. The whole pull ends at a deadline.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};

use super::artifact::{self, LayoutError, Manifest};
use super::cache::BlobCache;
use super::client::{Call, Client, ClientError, Hosts, Session};
use super::credentials::Credentials;
use super::reference::{Prefix, Reference};
use super::signature::{self, Trusted, Unsigned};
use crate::runtime::Digest;

/// The most signature layers read of one artifact.
const MAX_SIGNATURES: usize = 16;
/// The largest signature payload read: a simple-signing payload is a few
/// hundred bytes.
const MAX_PAYLOAD_BYTES: u64 = 16 << 10;

/// The signature a layer's annotation holds (empty: none).
fn annotation(layer: &artifact::Descriptor) -> String {
    layer
        .annotations
        .get(signature::SIGNATURE_ANNOTATION)
        .cloned()
        .unwrap_or_default()
}

/// What a policy may pull, from its grant: repository prefixes, and the
/// pull secret's credentials.
#[derive(Debug, Clone, Default)]
pub struct PullGrant {
    /// Where its artifacts may come from.
    pub prefixes: Vec<Prefix>,
    /// Its pull secret's credentials (none: anonymous).
    pub credentials: Credentials,
}

impl PullGrant {
    /// Whether `reference` is under one of the prefixes.
    #[must_use]
    pub fn allows(&self, reference: &Reference) -> bool {
        self.prefixes.iter().any(|prefix| reference.within(prefix))
    }

    /// A session with `reference`'s registry, as the grant's credentials
    /// for it, sent on only to the registries the prefixes name.
    #[must_use]
    pub fn session(&self, reference: &Reference) -> Session<'_> {
        Session {
            credentials: self.credentials.for_registry(reference.registry()),
            hosts: Hosts::Of(&self.prefixes),
            authorization: None,
        }
    }
}

/// A component pulled: the manifest digest it was pinned by, and its bytes.
#[derive(Debug)]
pub struct Pulled {
    /// The artifact's manifest digest (the reference's, or the tag's).
    pub manifest: Digest,
    /// The component.
    pub component: Vec<u8>,
    /// Whether the registry was reached (not served from the cache).
    pub from_registry: bool,
}

/// Why a component could not be pulled.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The policy's grant allows no registry, or not this repository.
    #[error("{reference} is not under a repository the policy's grant allows ({allowed})")]
    NotAllowed {
        /// The reference.
        reference: String,
        /// The prefixes the grant lists, or "none".
        allowed: String,
    },
    /// The registry could not be reached, refused, or answered wrongly.
    #[error("{reference}: {source}")]
    Client {
        /// The reference.
        reference: String,
        /// What happened.
        source: ClientError,
    },
    /// The registry does not have it, or answered with an error status.
    #[error("{reference}: the registry answered {status} for the {what}")]
    Status {
        /// The reference.
        reference: String,
        /// `manifest` or `component`.
        what: &'static str,
        /// Its answer.
        status: StatusCode,
    },
    /// A manifest or component whose digest is not the one asked for.
    #[error(
        "{reference}: the {what}'s digest is sha256:{actual}, not the sha256:{expected} asked for"
    )]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// `manifest` or `component`.
        what: &'static str,
        /// The digest asked for.
        expected: Digest,
        /// The digest of what came.
        actual: Digest,
    },
    /// Not a component artifact.
    #[error("{reference}: {source}")]
    Layout {
        /// The reference.
        reference: String,
        /// What it is instead.
        source: LayoutError,
    },
    /// The component is larger than the host accepts.
    #[error(
        "{reference}: the component is {size} bytes, more than the {limit} bytes this host accepts"
    )]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its declared size.
        size: u64,
        /// The cap.
        limit: u64,
    },
    /// The host requires signatures and the artifact has none that counts.
    #[error("{reference}: {source}")]
    Unsigned {
        /// The reference.
        reference: String,
        /// Why.
        source: Unsigned,
    },
    /// The pull took longer than the deadline.
    #[error("{reference}: the pull did not finish within {0:?}", .deadline)]
    Deadline {
        /// The reference.
        reference: String,
        /// The deadline.
        deadline: Duration,
    },
}

impl PullError {
    /// Wraps a client error of the pull of `reference`.
    fn client(reference: &str) -> impl Fn(ClientError) -> Self + Copy + '_ {
        move |source| Self::Client {
            reference: reference.to_owned(),
            source,
        }
    }

    /// A short UpperCamelCase name for Events, annotations and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotAllowed { .. } => "RegistryNotAllowed",
            Self::Client {
                source: ClientError::Unauthorized { .. },
                ..
            } => "PullUnauthorized",
            Self::Client {
                source: ClientError::HostNotAllowed { .. },
                ..
            } => "RegistryNotAllowed",
            Self::Client {
                source: ClientError::TooLarge { .. },
                ..
            }
            | Self::TooLarge { .. } => "TooLarge",
            Self::Client { .. } | Self::Status { .. } | Self::Deadline { .. } => "PullFailed",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::Layout { .. } => "NotAComponent",
            Self::Unsigned { source, .. } => source.reason(),
        }
    }

    /// Whether the same pull may succeed later without a change: the
    /// registry was down, slow, or answered with a server error.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Deadline { .. } => true,
            Self::Client { source, .. } => matches!(source, ClientError::Unreachable { .. }),
            Self::Status { status, .. } => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
            _ => false,
        }
    }
}

/// The host's puller: one client, one cache, one deadline per pull.
#[derive(Debug, Clone)]
pub struct Puller {
    client: Client,
    cache: BlobCache,
    deadline: Duration,
    trusted: Arc<Trusted>,
}

impl Puller {
    /// A puller through `client`, caching in `cache`, each pull ending at
    /// `deadline`.
    #[must_use]
    pub fn new(client: Client, cache: BlobCache, deadline: Duration) -> Self {
        Self {
            client,
            cache,
            deadline,
            trusted: Arc::default(),
        }
    }

    /// The same puller, requiring every artifact to be signed by one of
    /// `trusted` (none: no signature is asked for).
    #[must_use]
    pub fn trusting(self, trusted: Trusted) -> Self {
        Self {
            trusted: Arc::new(trusted),
            ..self
        }
    }

    /// Whether it requires signatures.
    #[must_use]
    pub fn requires_signatures(&self) -> bool {
        !self.trusted.is_empty()
    }

    /// The component `reference` names, as `grant` allows, at most
    /// `limit` bytes, signed by a trusted key if the puller has any.
    ///
    /// # Errors
    ///
    /// [`PullError`].
    pub async fn pull(
        &self,
        reference: &Reference,
        grant: &PullGrant,
        limit: u64,
    ) -> Result<Pulled, PullError> {
        self.pull_checked(reference, grant, limit, true).await
    }

    /// [`Puller::pull`], checking the signature only if `signed` (and the
    /// puller has keys).
    ///
    /// # Errors
    ///
    /// [`PullError`].
    pub async fn pull_checked(
        &self,
        reference: &Reference,
        grant: &PullGrant,
        limit: u64,
        signed: bool,
    ) -> Result<Pulled, PullError> {
        if !grant.allows(reference) {
            let allowed: Vec<String> = grant.prefixes.iter().map(ToString::to_string).collect();
            return Err(PullError::NotAllowed {
                reference: reference.to_string(),
                allowed: if allowed.is_empty() {
                    "none".to_owned()
                } else {
                    allowed.join(", ")
                },
            });
        }
        let pull = async {
            if let Some(pulled) = self.cached(reference, limit) {
                if signed {
                    self.check_signed(reference, grant, &pulled.manifest)
                        .await?;
                }
                return Ok(pulled);
            }
            self.fetch(reference, grant, limit, signed).await
        };
        tokio::time::timeout(self.deadline, pull)
            .await
            .map_err(|_| PullError::Deadline {
                reference: reference.to_string(),
                deadline: self.deadline,
            })?
    }

    /// The component of a pinned reference, from the cache alone.
    fn cached(&self, reference: &Reference, limit: u64) -> Option<Pulled> {
        let manifest = *reference.digest()?;
        let body = self.cache.get(&manifest, artifact::MAX_MANIFEST_BYTES)?;
        let (declared, layer) = Manifest::component(&body, artifact::MANIFEST_TYPE).ok()?;
        let size = declared.component_size();
        if size > limit {
            // Refused by the pull, with its reason.
            return None;
        }
        let component = self.cache.get(&layer, size)?;
        (component.len() as u64 == size).then_some(Pulled {
            manifest,
            component,
            from_registry: false,
        })
    }

    async fn fetch(
        &self,
        reference: &Reference,
        grant: &PullGrant,
        limit: u64,
        signed: bool,
    ) -> Result<Pulled, PullError> {
        let shown = reference.to_string();
        let client_error = PullError::client(&shown);
        let mut session = grant.session(reference);
        let name = reference.digest().map_or_else(
            || reference.tag().unwrap_or("latest").to_owned(),
            |d| format!("sha256:{d}"),
        );
        let path = format!("/v2/{}/manifests/{name}", reference.repository());
        let call = Self::get(
            reference,
            &path,
            artifact::MAX_MANIFEST_BYTES,
            artifact::ACCEPT,
        )
        .map_err(client_error)?;
        let answer = self
            .client
            .send(&mut session, call)
            .await
            .map_err(client_error)?;
        if !answer.status.is_success() {
            return Err(PullError::Status {
                reference: shown,
                what: "manifest",
                status: answer.status,
            });
        }
        let manifest = Digest::of(&answer.body);
        if let Some(expected) = reference.digest().filter(|d| **d != manifest) {
            return Err(PullError::DigestMismatch {
                reference: shown,
                what: "manifest",
                expected: *expected,
                actual: manifest,
            });
        }
        let (declared, layer) =
            Manifest::component(&answer.body, answer.content_type()).map_err(|source| {
                PullError::Layout {
                    reference: shown.clone(),
                    source,
                }
            })?;
        if signed {
            self.check_signed(reference, grant, &manifest).await?;
        }
        let size = declared.component_size();
        if size > limit {
            return Err(PullError::TooLarge {
                reference: shown,
                size,
                limit,
            });
        }
        let component = self
            .blob(reference, &mut session, &layer, size, "component")
            .await?;
        self.cache.put(&manifest, &answer.body);
        Ok(Pulled {
            manifest,
            component,
            from_registry: true,
        })
    }

    /// Checks that a trusted key signed the artifact `manifest`, if the
    /// host requires it: the signature manifest and payloads from the
    /// cache, or from the registry (then kept).
    async fn check_signed(
        &self,
        reference: &Reference,
        grant: &PullGrant,
        manifest: &Digest,
    ) -> Result<(), PullError> {
        if self.trusted.is_empty() {
            return Ok(());
        }
        let shown = reference.to_string();
        let unsigned = |source| PullError::Unsigned {
            reference: shown.clone(),
            source,
        };
        let signed = match self.cached_signatures(manifest) {
            Some(signed) if self.trusted.verify(manifest, &signed).is_ok() => return Ok(()),
            _ => self.fetch_signatures(reference, grant, manifest).await?,
        };
        self.trusted
            .verify(manifest, &signed)
            .map(|_| ())
            .map_err(unsigned)
    }

    /// The payloads and signatures cached for the artifact `manifest`.
    fn cached_signatures(&self, manifest: &Digest) -> Option<Vec<(Vec<u8>, String)>> {
        let body = self
            .cache
            .signature(manifest, artifact::MAX_MANIFEST_BYTES)?;
        let parsed: Manifest = serde_json::from_slice(&body).ok()?;
        parsed
            .layers
            .iter()
            .map(|layer| {
                let digest = Digest::parse(&layer.digest)?;
                Some((
                    self.cache.get(&digest, MAX_PAYLOAD_BYTES)?,
                    annotation(layer),
                ))
            })
            .collect()
    }

    /// The payloads and signatures of the artifact `manifest`, from the
    /// registry: none when it has no signature manifest.
    async fn fetch_signatures(
        &self,
        reference: &Reference,
        grant: &PullGrant,
        manifest: &Digest,
    ) -> Result<Vec<(Vec<u8>, String)>, PullError> {
        let shown = reference.to_string();
        let client_error = PullError::client(&shown);
        let mut session = grant.session(reference);
        let path = format!(
            "/v2/{}/manifests/{}",
            reference.repository(),
            signature::tag(manifest)
        );
        let answer = self
            .client
            .send(
                &mut session,
                Self::get(
                    reference,
                    &path,
                    artifact::MAX_MANIFEST_BYTES,
                    artifact::ACCEPT,
                )
                .map_err(client_error)?,
            )
            .await
            .map_err(client_error)?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        if !answer.status.is_success() {
            return Err(PullError::Status {
                reference: shown,
                what: "signature",
                status: answer.status,
            });
        }
        let parsed: Manifest =
            serde_json::from_slice(&answer.body).map_err(|error| PullError::Layout {
                reference: shown.clone(),
                source: LayoutError::Malformed(format!(
                    "the signature manifest: {}",
                    super::shown(&error.to_string())
                )),
            })?;
        let mut signed = Vec::new();
        for layer in parsed
            .layers
            .iter()
            .filter(|layer| layer.media_type == signature::PAYLOAD_TYPE)
            .take(MAX_SIGNATURES)
        {
            let Some(digest) = Digest::parse(&layer.digest) else {
                continue;
            };
            let payload = self
                .blob(
                    reference,
                    &mut session,
                    &digest,
                    MAX_PAYLOAD_BYTES,
                    "signature",
                )
                .await?;
            signed.push((payload, annotation(layer)));
        }
        self.cache.put_signature(manifest, &answer.body);
        Ok(signed)
    }

    /// A GET of `path` on the reference's registry.
    fn get<'a>(
        reference: &Reference,
        path: &str,
        limit: u64,
        accept: &'a [&'a str],
    ) -> Result<Call<'a>, ClientError> {
        Ok(Call {
            method: Method::GET,
            uri: super::client::url(reference.registry(), path)?,
            accept,
            content_type: None,
            body: bytes::Bytes::new(),
            limit,
        })
    }

    /// The blob of `digest`: from the cache, or from the registry (read up
    /// to `size`, its digest checked), then kept.
    async fn blob(
        &self,
        reference: &Reference,
        session: &mut Session<'_>,
        digest: &Digest,
        size: u64,
        what: &'static str,
    ) -> Result<Vec<u8>, PullError> {
        if let Some(bytes) = self.cache.get(digest, size) {
            return Ok(bytes);
        }
        let bytes = self
            .fetch_blob(reference, session, digest, size, what)
            .await?;
        self.cache.put(digest, &bytes);
        Ok(bytes)
    }

    /// The blob of `digest` from the registry, read up to `size`.
    async fn fetch_blob(
        &self,
        reference: &Reference,
        session: &mut Session<'_>,
        digest: &Digest,
        size: u64,
        what: &'static str,
    ) -> Result<Vec<u8>, PullError> {
        let shown = reference.to_string();
        let client_error = PullError::client(&shown);
        let path = format!("/v2/{}/blobs/sha256:{digest}", reference.repository());
        let call = Self::get(reference, &path, size, &[]).map_err(client_error)?;
        let answer = self
            .client
            .send(session, call)
            .await
            .map_err(client_error)?;
        if !answer.status.is_success() {
            return Err(PullError::Status {
                reference: shown,
                what,
                status: answer.status,
            });
        }
        let actual = Digest::of(&answer.body);
        if actual != *digest {
            return Err(PullError::DigestMismatch {
                reference: shown,
                what,
                expected: *digest,
                actual,
            });
        }
        Ok(answer.body.to_vec())
    }
}
