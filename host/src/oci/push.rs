//! Pushing a component as a policy artifact: its config and component
//! blobs (each skipped when the registry has it), then the manifest under
//! the reference's tag. The digest of the manifest as sent is what a
//! ConfigMap pins.

use bytes::Bytes;
use http::{Method, StatusCode};

use super::artifact::{self, Manifest};
use super::client::{Call, Client, ClientError, Session};
use super::credentials::Basic;
use super::reference::Reference;
use super::signature::{self, Signed};
use crate::runtime::Digest;

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The registry could not be reached, or refused.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The registry answered a step with an unexpected status.
    #[error("the registry answered {status} to {step}")]
    Status {
        /// The step.
        step: &'static str,
        /// Its answer.
        status: StatusCode,
    },
    /// An upload started without saying where to send the blob.
    #[error("the registry started an upload without a Location")]
    NoLocation,
}

/// Pushes `component` to `reference` (its tag, `latest` without one) as
/// `credentials`: the manifest digest.
///
/// # Errors
///
/// [`PushError`].
pub async fn push(
    client: &Client,
    reference: &Reference,
    credentials: Option<&Basic>,
    component: &[u8],
) -> Result<Digest, PushError> {
    let mut session = Session::with(reference.registry(), credentials);
    let config = artifact::config_for(component);
    let manifest = Manifest::of_component(&config, component);
    for blob in [config.as_slice(), component] {
        upload(client, &mut session, reference, blob).await?;
    }
    let tag = reference.tag().unwrap_or("latest");
    put_manifest(client, &mut session, reference, tag, &manifest).await
}

/// Uploads one blob unless the registry has it.
async fn upload(
    client: &Client,
    session: &mut Session<'_>,
    reference: &Reference,
    blob: &[u8],
) -> Result<(), PushError> {
    let digest = format!("sha256:{}", Digest::of(blob));
    let repository = reference.repository();
    let registry = reference.registry();
    let has = client
        .send(
            session,
            Call {
                method: Method::HEAD,
                uri: super::client::url(registry, &format!("/v2/{repository}/blobs/{digest}"))?,
                accept: &[],
                content_type: None,
                body: Bytes::new(),
                limit: u64::MAX,
            },
        )
        .await?;
    if has.status.is_success() {
        return Ok(());
    }
    let start = super::client::url(registry, &format!("/v2/{repository}/blobs/uploads/"))?;
    let started = client
        .send(
            session,
            Call {
                method: Method::POST,
                uri: start.clone(),
                accept: &[],
                content_type: None,
                body: Bytes::new(),
                limit: 1 << 16,
            },
        )
        .await?;
    expect(started.status, StatusCode::ACCEPTED, "an upload's start")?;
    let location = started
        .headers
        .get(http::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .ok_or(PushError::NoLocation)?;
    let separator = if location.contains('?') { '&' } else { '?' };
    let target = super::client::named(&start, &format!("{location}{separator}digest={digest}"))?;
    let put = client
        .send(
            session,
            Call {
                method: Method::PUT,
                uri: target,
                accept: &[],
                content_type: Some("application/octet-stream"),
                body: Bytes::copy_from_slice(blob),
                limit: 1 << 16,
            },
        )
        .await?;
    expect(put.status, StatusCode::CREATED, "a blob")
}

/// Pushes `signed` as the signature of the artifact `digest` of
/// `reference`'s repository, as `cosign sign --key` does: to the tag
/// `sha256-<hex>.sig` (replacing any signature there).
///
/// # Errors
///
/// [`PushError`].
pub async fn push_signature(
    client: &Client,
    reference: &Reference,
    credentials: Option<&Basic>,
    digest: &Digest,
    signed: &Signed,
) -> Result<(), PushError> {
    let mut session = Session::with(reference.registry(), credentials);
    for blob in [signed.config.as_slice(), signed.payload.as_slice()] {
        upload(client, &mut session, reference, blob).await?;
    }
    put_manifest(
        client,
        &mut session,
        reference,
        &signature::tag(digest),
        &signed.manifest,
    )
    .await
    .map(|_| ())
}

/// Puts `manifest` under `tag`: the digest of the bytes sent.
async fn put_manifest(
    client: &Client,
    session: &mut Session<'_>,
    reference: &Reference,
    tag: &str,
    manifest: &Manifest,
) -> Result<Digest, PushError> {
    let body = serde_json::to_vec(manifest).unwrap_or_default();
    let path = format!("/v2/{}/manifests/{tag}", reference.repository());
    let answer = client
        .send(
            session,
            Call {
                method: Method::PUT,
                uri: super::client::url(reference.registry(), &path)?,
                accept: &[],
                content_type: Some(artifact::MANIFEST_TYPE),
                body: Bytes::from(body.clone()),
                limit: 1 << 16,
            },
        )
        .await?;
    expect(answer.status, StatusCode::CREATED, "the manifest")?;
    Ok(Digest::of(&body))
}

fn expect(status: StatusCode, expected: StatusCode, step: &'static str) -> Result<(), PushError> {
    if status == expected {
        Ok(())
    } else {
        Err(PushError::Status { step, status })
    }
}
