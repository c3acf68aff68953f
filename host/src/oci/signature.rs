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
use serde::{Deserialize, Serialize};
use sigstore::crypto::signing_key::{SigStoreKeyPair, SigStoreSigner};
use sigstore::crypto::{CosignVerificationKey, Signature, SigningScheme};

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
/// The schemes a signing key may sign with, as cosign picks them by key kind.
const SIGNING_SCHEMES: [SigningScheme; 4] = [
    SigningScheme::ECDSA_P256_SHA256_ASN1,
    SigningScheme::ECDSA_P384_SHA384_ASN1,
    SigningScheme::ECDSA_P521_SHA512_ASN1,
    SigningScheme::ED25519,
];

/// The tag of an artifact's signatures.
#[must_use]
pub fn tag(digest: &Digest) -> String {
    format!("sha256-{digest}.sig")
}

/// What is wrong with a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not a public key cosign verifies with.
    #[error(
        "{0}: not a public key cosign verifies with (PEM: ECDSA P-256/384/521, Ed25519 or RSA)"
    )]
    NotPublicKey(String),
    /// Not a private key, or one of a kind cosign does not sign with.
    #[error("not a private key cosign signs with (cosign's key file, or PKCS#8 ECDSA or Ed25519)")]
    NotPrivateKey,
    /// An encrypted key file and no password.
    #[error("the key file is encrypted: give its password in COSIGN_PASSWORD")]
    NoPassword,
    /// An encrypted key file the password does not open.
    #[error("the key file does not open with the password in COSIGN_PASSWORD")]
    WrongPassword,
}

/// A public key the platform team trusts, and its name for reports.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    name: String,
    key: CosignVerificationKey,
}

impl TrustedKey {
    /// Reads a PEM public key named `name`.
    ///
    /// # Errors
    ///
    /// [`KeyError::NotPublicKey`].
    pub fn from_pem(name: &str, pem: &[u8]) -> Result<Self, KeyError> {
        let key = CosignVerificationKey::try_from_pem(pem)
            .map_err(|_| KeyError::NotPublicKey(name.to_owned()))?;
        Ok(Self {
            name: name.to_owned(),
            key,
        })
    }

    /// Its name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        self.key
            .verify_signature(
                Signature::Base64Encoded(signature.trim().as_bytes()),
                payload,
            )
            .is_ok()
    }
}

/// The keys a host trusts; any one of them suffices.
#[derive(Debug, Clone, Default)]
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
        for (payload, signature) in signed {
            let Some(key) = self
                .keys
                .iter()
                .find(|key| key.verifies(payload, signature))
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
        crate::runtime::Digest::parse(&payload.critical.image.docker_manifest_digest)
    }
}

/// A private key that signs as `cosign sign --key` does.
pub struct SigningKey {
    signer: SigStoreSigner,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads a private key: cosign's encrypted key file (`cosign
    /// generate-key-pair`) opened with `password`, or an unencrypted PKCS#8
    /// PEM.
    ///
    /// # Errors
    ///
    /// [`KeyError`].
    pub fn from_pem(pem: &[u8], password: Option<&[u8]>) -> Result<Self, KeyError> {
        let encrypted = String::from_utf8_lossy(pem).contains("-----BEGIN ENCRYPTED ");
        let pair = match (encrypted, password) {
            (false, _) => SigStoreKeyPair::from_pem(pem).map_err(|_| KeyError::NotPrivateKey)?,
            (true, None) => return Err(KeyError::NoPassword),
            (true, Some(password)) => SigStoreKeyPair::from_encrypted_pem(pem, password)
                .map_err(|_| KeyError::WrongPassword)?,
        };
        let signer = SIGNING_SCHEMES
            .iter()
            .find_map(|scheme| pair.to_sigstore_signer(scheme).ok())
            .ok_or(KeyError::NotPrivateKey)?;
        Ok(Self { signer })
    }

    /// A new ECDSA P-256 key, as `cosign generate-key-pair` makes (for tests
    /// and `policyhost dev`).
    ///
    /// # Errors
    ///
    /// [`KeyError::NotPrivateKey`] if the system has no randomness to make one.
    pub fn generate() -> Result<Self, KeyError> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .map_err(|_| KeyError::NotPrivateKey)?;
        Ok(Self { signer })
    }

    /// The key as cosign's encrypted key file, sealed with `password`.
    #[must_use]
    pub fn encrypted_pem(&self, password: &[u8]) -> Option<String> {
        let pair = self.signer.to_sigstore_keypair().ok()?;
        let pem = pair.private_key_to_encrypted_pem(password).ok()?;
        Some(pem.as_str().to_owned())
    }

    /// Its public key, PEM, as the platform team would trust it.
    #[must_use]
    pub fn public_pem(&self) -> String {
        self.signer
            .to_sigstore_keypair()
            .and_then(|pair| pair.public_key_to_pem())
            .unwrap_or_default()
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
        let signature = self.signer.sign(&payload).unwrap_or_default();
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
        SigningKey::generate().expect("a key")
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
        assert!(matches!(
            trusted.verify(&digest, &[]),
            Err(Unsigned::Missing)
        ));
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
    fn keys_cosign_does_not_verify_with_are_refused_naming_the_key() {
        assert!(matches!(
            TrustedKey::from_pem("k", b"not pem"),
            Err(KeyError::NotPublicKey(name)) if name == "k"
        ));
        // X25519 agrees keys; it signs nothing.
        let x25519 = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        assert!(matches!(
            TrustedKey::from_pem("k", x25519.as_bytes()),
            Err(KeyError::NotPublicKey(_))
        ));
        let ed25519 = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        assert!(TrustedKey::from_pem("k", ed25519.as_bytes()).is_ok());
        assert!(matches!(
            SigningKey::from_pem(b"x", None),
            Err(KeyError::NotPrivateKey)
        ));
    }

    #[test]
    fn an_encrypted_key_file_opens_only_with_its_password() {
        let signer = key();
        let file = signer.encrypted_pem(b"secret").expect("an encrypted key");
        assert!(
            file.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"),
            "{file}"
        );
        assert_eq!(
            SigningKey::from_pem(file.as_bytes(), None).map(|_| ()),
            Err(KeyError::NoPassword)
        );
        assert_eq!(
            SigningKey::from_pem(file.as_bytes(), Some(b"guess")).map(|_| ()),
            Err(KeyError::WrongPassword)
        );
        let opened = SigningKey::from_pem(file.as_bytes(), Some(b"secret")).expect("opens");
        assert_eq!(opened.public_pem(), signer.public_pem());
        let trusted = Trusted::new(vec![
            TrustedKey::from_pem("platform", signer.public_pem().as_bytes()).expect("public key"),
        ]);
        let digest = Digest::of(b"manifest");
        let signed = opened.sign_for("registry.example.com/team-a/fanout", &digest);
        assert!(trusted.verify(&digest, &signed.layers()).is_ok());
    }
}
