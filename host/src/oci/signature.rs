//! Signatures in cosign's keyed format: beside an artifact, the tag
//! `sha256-<hex>.sig` of the same repository holds a manifest whose layers
//! are simple-signing payloads naming the artifact's manifest digest, each
//! with its ECDSA P-256 (SHA-256, ASN.1) signature, base64, in the layer's
//! `dev.cosignproject.cosign/signature` annotation.
//!
//! A signature counts when it verifies with one of the platform team's keys
//! over the payload's exact bytes, and the payload names the digest pulled:
//! a valid signature of another artifact is refused. Keyless signatures
//! (Fulcio certificates, Rekor entries) would be one more [`Trusted`]
//! kind; offline, only keys are.

use std::collections::BTreeMap;

use base64::Engine as _;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};
use serde::{Deserialize, Serialize};

use super::Reference;
use super::artifact::{Descriptor, MANIFEST_TYPE, Manifest};
use crate::runtime::Digest;

/// The media type of a simple-signing payload layer.
pub const PAYLOAD_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The config media type cosign writes.
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The `type` of a cosign payload.
const PAYLOAD_KIND: &str = "cosign container image signature";
/// The DER header of a P-256 public key's SubjectPublicKeyInfo, before
/// the 65-byte uncompressed point.
const P256_SPKI_HEADER: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The tag of an artifact's signatures.
#[must_use]
pub fn tag(digest: &Digest) -> String {
    format!("sha256-{digest}.sig")
}

/// What is wrong with a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not a PEM public key.
    #[error("{0}: not a PEM public key (-----BEGIN PUBLIC KEY-----)")]
    NotPem(String),
    /// A public key of another algorithm.
    #[error("{0}: not an ECDSA P-256 public key, the kind `cosign generate-key-pair` makes")]
    NotP256(String),
    /// Not a usable PKCS#8 P-256 private key.
    #[error("not an unencrypted PKCS#8 ECDSA P-256 private key (-----BEGIN PRIVATE KEY-----)")]
    Private,
}

/// A public key the platform team trusts, and its name for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    name: String,
    point: Vec<u8>,
}

impl TrustedKey {
    /// Reads a PEM public key named `name`.
    ///
    /// # Errors
    ///
    /// [`KeyError`].
    pub fn from_pem(name: &str, pem: &[u8]) -> Result<Self, KeyError> {
        let spki = SubjectPublicKeyInfoDer::from_pem_slice(pem)
            .map_err(|_| KeyError::NotPem(name.to_owned()))?;
        let point = spki
            .as_ref()
            .strip_prefix(P256_SPKI_HEADER.as_slice())
            .filter(|point| point.len() == 65)
            .ok_or_else(|| KeyError::NotP256(name.to_owned()))?;
        Ok(Self {
            name: name.to_owned(),
            point: point.to_vec(),
        })
    }

    /// Its name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

/// The keys a host trusts; any one of them suffices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trusted {
    keys: Vec<TrustedKey>,
}

impl Trusted {
    /// Trusts `keys`.
    #[must_use]
    pub fn new(keys: Vec<TrustedKey>) -> Self {
        Self { keys }
    }

    /// Whether it trusts no key (signatures are then not asked for).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key that signed `digest` among the payloads and signatures of a
    /// signature manifest's layers.
    ///
    /// # Errors
    ///
    /// [`Unsigned`].
    pub fn verify<'a>(
        &'a self,
        digest: &Digest,
        signed: &[(Vec<u8>, String)],
    ) -> Result<&'a TrustedKey, Unsigned> {
        let mut for_another = None;
        for (payload, encoded) in signed {
            let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(encoded.trim())
            else {
                continue;
            };
            let Some(key) = self
                .keys
                .iter()
                .find(|key| key.verifies(payload, &signature))
            else {
                continue;
            };
            match Payload::digest_of(payload) {
                Some(named) if named == *digest => return Ok(key),
                named => {
                    for_another =
                        Some(named.map_or_else(|| "nothing".into(), |d| format!("sha256:{d}")))
                }
            }
        }
        Err(match for_another {
            Some(named) => Unsigned::ForAnother { named },
            None if signed.is_empty() => Unsigned::Missing,
            None => Unsigned::NoTrustedKey {
                signatures: signed.len(),
                keys: self.keys.iter().map(|key| key.name.clone()).collect(),
            },
        })
    }
}

/// Why an artifact does not count as signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    /// No signature at all.
    #[error("it has no signature (this host requires one by the platform team's keys)")]
    Missing,
    /// Signatures, none by a trusted key.
    #[error("none of its {signatures} signatures verifies with a trusted key ({})", .keys.join(", "))]
    NoTrustedKey {
        /// Signatures found.
        signatures: usize,
        /// The trusted keys' names.
        keys: Vec<String>,
    },
    /// A trusted key signed another artifact.
    #[error("its signature by a trusted key is for {named}, not for this artifact")]
    ForAnother {
        /// What the signed payload names.
        named: String,
    },
}

impl Unsigned {
    /// A short UpperCamelCase name for Events, annotations and metric labels.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "Unsigned",
            Self::NoTrustedKey { .. } | Self::ForAnother { .. } => "SignatureInvalid",
        }
    }
}

/// A simple-signing payload.
#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    critical: Critical,
    optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

impl Payload {
    /// The payload signing `digest` of the repository `repository`
    /// (`registry/repository`, as cosign names it).
    fn of(repository: &str, digest: &Digest) -> Vec<u8> {
        let payload = Self {
            critical: Critical {
                identity: Identity {
                    docker_reference: repository.to_owned(),
                },
                image: Image {
                    docker_manifest_digest: format!("sha256:{digest}"),
                },
                kind: PAYLOAD_KIND.to_owned(),
            },
            optional: None,
        };
        serde_json::to_vec(&payload).unwrap_or_default()
    }

    /// The digest a payload signs, if it is a cosign payload.
    fn digest_of(bytes: &[u8]) -> Option<Digest> {
        let payload: Self = serde_json::from_slice(bytes).ok()?;
        if payload.critical.kind != PAYLOAD_KIND {
            return None;
        }
        super::artifact::parse_digest(&payload.critical.image.docker_manifest_digest)
    }
}

/// A private key that signs as `cosign sign --key` does.
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads an unencrypted PKCS#8 P-256 private key (PEM).
    ///
    /// # Errors
    ///
    /// [`KeyError::Private`].
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem).map_err(|_| KeyError::Private)?;
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            der.secret_pkcs8_der(),
            &ring::rand::SystemRandom::new(),
        )
        .map_err(|_| KeyError::Private)?;
        Ok(Self { pair })
    }

    /// Its public key, PEM, as the platform team would trust it.
    #[must_use]
    pub fn public_pem(&self) -> String {
        let mut spki = P256_SPKI_HEADER.to_vec();
        spki.extend_from_slice(self.pair.public_key().as_ref());
        let body = base64::engine::general_purpose::STANDARD.encode(spki);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|chunk| std::str::from_utf8(chunk).unwrap_or_default())
            .collect();
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            lines.join("\n")
        )
    }

    /// The signature of the artifact `digest` in `reference`'s repository:
    /// the signature manifest's config, payload, and the manifest naming them.
    #[must_use]
    pub fn sign(&self, reference: &Reference, digest: &Digest) -> Signed {
        self.sign_for(
            &format!("{}/{}", reference.registry(), reference.repository()),
            digest,
        )
    }

    fn sign_for(&self, repository: &str, digest: &Digest) -> Signed {
        let payload = Payload::of(repository, digest);
        let signature = self
            .pair
            .sign(&ring::rand::SystemRandom::new(), &payload)
            .map(|signature| signature.as_ref().to_vec())
            .unwrap_or_default();
        let config = serde_json::json!({
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", Digest::of(&payload))]},
        })
        .to_string()
        .into_bytes();
        let mut layer = Descriptor::of(PAYLOAD_TYPE, &payload);
        layer.annotations.insert(
            SIGNATURE_ANNOTATION.to_owned(),
            base64::engine::general_purpose::STANDARD.encode(signature),
        );
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_TYPE.to_owned()),
            config: Descriptor::of(CONFIG_TYPE, &config),
            layers: vec![layer],
            annotations: BTreeMap::new(),
        };
        Signed {
            config,
            payload,
            manifest,
        }
    }

    /// A new key, PKCS#8 PEM (for tests and `policyhost dev`).
    #[must_use]
    pub fn generate_pem() -> Option<String> {
        let document = EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &ring::rand::SystemRandom::new(),
        )
        .ok()?;
        let body = base64::engine::general_purpose::STANDARD.encode(document.as_ref());
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|chunk| std::str::from_utf8(chunk).unwrap_or_default())
            .collect();
        Some(format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        ))
    }
}

/// A signature ready to push.
#[derive(Debug)]
pub struct Signed {
    /// The config blob.
    pub config: Vec<u8>,
    /// The payload blob.
    pub payload: Vec<u8>,
    /// The manifest.
    pub manifest: Manifest,
}

impl Signed {
    /// The payloads and signatures of this signature's layers, as a
    /// verifier reads them.
    #[must_use]
    pub fn layers(&self) -> Vec<(Vec<u8>, String)> {
        self.manifest
            .layers
            .iter()
            .filter_map(|layer| layer.annotations.get(SIGNATURE_ANNOTATION))
            .map(|signature| (self.payload.clone(), signature.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::from_pem(SigningKey::generate_pem().expect("a key").as_bytes()).expect("key")
    }

    #[test]
    fn a_signature_counts_only_by_a_trusted_key_and_for_the_digest_pulled() {
        let (signer, stranger) = (key(), key());
        let trusted = Trusted::new(vec![
            TrustedKey::from_pem("platform", signer.public_pem().as_bytes()).expect("public key"),
        ]);
        let digest = Digest::of(b"manifest");
        let signed = signer.sign_for("registry.example.com/team-a/fanout", &digest);
        assert_eq!(
            trusted
                .verify(&digest, &signed.layers())
                .map(TrustedKey::name),
            Ok("platform")
        );
        let other = Digest::of(b"another manifest");
        assert!(matches!(
            trusted.verify(&other, &signed.layers()),
            Err(Unsigned::ForAnother { .. })
        ));
        let by_stranger = stranger.sign_for("registry.example.com/team-a/fanout", &digest);
        let error = trusted
            .verify(&digest, &by_stranger.layers())
            .expect_err("an untrusted key");
        assert_eq!(error.reason(), "SignatureInvalid");
        assert!(error.to_string().contains("platform"), "{error}");
        assert_eq!(trusted.verify(&digest, &[]), Err(Unsigned::Missing));
        // A payload altered after signing.
        let mut altered = signed.layers();
        altered[0].0 = Payload::of("registry.example.com/team-b/fanout", &digest);
        assert!(matches!(
            trusted.verify(&digest, &altered),
            Err(Unsigned::NoTrustedKey { .. })
        ));
    }

    #[test]
    fn the_payload_is_cosigns_simple_signing_format() {
        let digest = Digest::of(b"m");
        let payload: serde_json::Value =
            serde_json::from_slice(&Payload::of("r.example.com/a/b", &digest)).expect("JSON");
        assert_eq!(
            payload,
            serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": "r.example.com/a/b"},
                    "image": {"docker-manifest-digest": format!("sha256:{digest}")},
                    "type": "cosign container image signature",
                },
                "optional": null,
            })
        );
    }

    #[test]
    fn keys_of_other_kinds_are_refused_naming_the_key() {
        assert!(matches!(
            TrustedKey::from_pem("k", b"not pem"),
            Err(KeyError::NotPem(name)) if name == "k"
        ));
        let ed25519 = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        assert!(matches!(
            TrustedKey::from_pem("k", ed25519.as_bytes()),
            Err(KeyError::NotP256(_))
        ));
        assert!(matches!(SigningKey::from_pem(b"x"), Err(KeyError::Private)));
    }
}
